"""benchmarks/schwarz_diffusion_1d.py: the generated pairs solve the diffusion problem (the Laplacian's discrete
eigenvectors are checked independently), the paper's two-level matrix model is the transcribed operator, a short run
writes valid rows, and bad parameters are refused by name."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmarks import harness
from benchmarks import schwarz_diffusion_1d as sd
from tests.operators import _schwarz_paper as paper


def test_stiffness_is_the_finite_difference_laplacian_and_the_pairs_solve_it():
    n = 31
    h = 1 / (n + 1)
    lap = sd.stiffness(n, 0.0)
    x = torch.arange(1, n + 1, dtype=torch.float64) * h
    for k in (1, 5, 17):  # sin(kπx) is an eigenvector with eigenvalue 4 sin²(kπh/2) / h²
        s = torch.sin(k * math.pi * x)
        assert torch.allclose(lap @ s, 4 * math.sin(k * math.pi * h / 2) ** 2 / h**2 * s, atol=1e-9)
    a = sd.stiffness(n, 0.5)
    assert torch.allclose(a, a.T) and torch.linalg.eigvalsh(a).min() > 0
    f, u = sd.samples(4, n, 8, 0.5, seed=3)
    assert (u @ a.T - f).abs().max() < 1e-10 * f.abs().max()


def test_two_level_matrix_model_is_the_papers_operator():
    params = {**sd.PARAMS, "n": 40, "subdomains": 4, "overlap": 0.1, "coarse_nodes": 5, "coarse_rank": 3}
    torch.manual_seed(0)
    (q, k, q0, k0), apply = sd.matrix_model("schwarz_two_level", params)
    n = params["n"]
    pos = np.arange(1, n + 1) / (n + 1)
    ref = paper.schwarz_matrix(paper.axis_partition_physical(pos, 4, 0.1), q.detach().double().numpy(),
                               k.detach().double().numpy(), np.full(n, 1 / n), paper.axis_hats(pos, 5),
                               q0.detach().double().numpy(), k0.detach().double().numpy())
    ours = sd._matrix(apply, n).double().numpy()
    assert np.abs(ours - ref).max() < 1e-5 * np.abs(ref).max()  # float32 model
    assert np.abs(ref).max() > 0


def test_short_run_rows(tmp_path):
    records = harness.run_benchmark("schwarz_diffusion_1d", quick=True, results=tmp_path, command="pytest",
                                    overrides={"n": 47, "n_train": 32, "n_test": 8, "matrix_steps": 60,
                                               "checkpoints": [30, 60], "epochs": 1, "resolutions": [47, 95]})
    rows = {(r["row"]["model"], r["row"]["resolution"], r["row"]["steps"]): r["row"] for r in records}
    for name in sd.PARAMS["matrix_models"]:
        assert {(name, 47, 30), (name, 47, 60)} <= set(rows)
    assert {("schwarz_transformer", 47, 1), ("schwarz_transformer", 95, 1)} <= set(rows)
    two, one = rows[("schwarz_two_level", 47, 60)], rows[("global_lowrank", 47, 60)]
    assert two["parameters"] < one["parameters"]
    assert 0 < two["operator_error"] < one["operator_error"]
    assert rows[("schwarz_transformer", 47, 1)]["operator_error"] is None
    table = harness.markdown_table(harness.get("schwarz_diffusion_1d"), records)
    assert "| schwarz_two_level | " in table


@pytest.mark.slow
def test_quick_budget_two_level_beats_the_global_operator(tmp_path):
    """The ``--quick`` budget (about 25 s on one thread), the paper's claim on its matrix models: at every checkpoint
    the two-level operator is closer to ``A⁻¹`` and to the test targets than the global ``QKᵀ``, with fewer
    parameters."""
    records = harness.run_benchmark("schwarz_diffusion_1d", quick=True, results=tmp_path, command="pytest")
    rows = [r["row"] for r in records]
    for step in sd.QUICK["checkpoints"]:
        two, one = ({r["model"]: r for r in rows if r["steps"] == step and r["kind"] == "paper matrix"}[m]
                    for m in ("schwarz_two_level", "global_lowrank"))
        assert two["operator_error"] < 0.5 * one["operator_error"] and two["rel_l2"] < one["rel_l2"]
        assert two["parameters"] < 0.5 * one["parameters"]


@pytest.mark.parametrize("key,value,words", [("amplitude", 1.0, "amplitude"), ("overlap", 0.2, "overlap"),
                                             ("checkpoints", [5000], "checkpoints"), ("resolutions", [4], "resolutions"),
                                             ("matrix_steps", 0, "matrix_steps")])
def test_bad_parameters_are_named(key, value, words):
    with pytest.raises(ValueError, match=words):
        sd.check_params({**sd.PARAMS, key: value})


def test_unknown_models_are_named():
    with pytest.raises(ValueError, match="matrix_models: expected"):
        sd.matrix_model("dense", sd.PARAMS)
    with pytest.raises(ValueError, match=r"operators: expected a registered name or one of \["):
        sd.train_operator("schwarz_transformer:cells", {**sd.PARAMS, "n_train": 4, "epochs": 0})
