"""benchmarks/anie_integral_equation.py: the generated solutions solve the integral equation (checked by an
independent Nyström sum), a short training run writes valid rows in which ANIE beats the identity and keeps its
error at an unseen resolution, and bad parameters are refused by name."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import anie_integral_equation as aie
from benchmarks import harness


def test_generated_pairs_solve_the_equation():
    """``y_i - λ Σ_j k(t_i, t_j) y_j / n = f_i`` at ``n`` nodes: the rectangle rule is exact for trigonometric
    polynomials of degree below ``n``, so the residual is round-off."""
    deg, n = 4, 24
    c, lam = aie.problem(deg, 0.7)
    f, y = aie.samples(5, deg, 0.7, seed=3)
    t = torch.arange(n, dtype=torch.float64) / n
    e = aie.basis(t, deg)
    kernel = e @ c @ e.T  # k(t_i, t_j)
    fv, yv = f @ e.T, y @ e.T
    residual = yv - lam * yv @ kernel.T / n - fv
    assert residual.abs().max() < 1e-12 * yv.abs().max()
    assert (yv - fv).norm() > 0.3 * fv.norm()  # the integral term matters
    # the basis is the real trigonometric one
    assert torch.allclose(e[:, 2], torch.sin(2 * math.pi * t))


def test_short_run_rows(tmp_path):
    records = harness.run_benchmark("anie_integral_equation", quick=True, results=tmp_path, command="pytest",
                                    overrides={"n_train": 64, "n_test": 32, "epochs": 4, "batch": 16})
    rows = {(r["row"]["operator"], r["row"]["resolution"]): r["row"]["rel_l2"] for r in records}
    assert set(rows) == {(op, n) for op in ("identity", "anie") for n in (32, 64)}
    assert abs(rows[("anie", 64)] - rows[("anie", 32)]) < 0.02 * rows[("anie", 32)]
    table = harness.markdown_table(harness.get("anie_integral_equation"), records)
    assert "| anie | " in table and "Fredholm equation of the second kind" in table


@pytest.mark.slow
def test_quick_budget_beats_the_identity(tmp_path):
    """The ``--quick`` budget (about 20 s on one thread): ANIE's error is below answering ``y = f``."""
    records = harness.run_benchmark("anie_integral_equation", quick=True, results=tmp_path, command="pytest")
    rows = {(r["row"]["operator"], r["row"]["resolution"]): r["row"]["rel_l2"] for r in records}
    assert rows[("anie", 32)] < 0.9 * rows[("identity", 32)]
    assert rows[("anie", 64)] < 0.9 * rows[("identity", 64)]


@pytest.mark.parametrize("key,value,words", [("rho", 1.2, "rho"), ("resolutions", [8], "resolutions"),
                                             ("epochs", 0, "epochs"), ("train_resolution", 6, "train_resolution")])
def test_bad_parameters_are_named(key, value, words):
    params = {**aie.PARAMS, key: value}
    with pytest.raises(ValueError, match=words):
        aie.check_params(params)
