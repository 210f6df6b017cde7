"""benchmarks/continuum_cde.py: the closed-form state solves the published controlled ODE, the samplings are the
published ones, a short training run writes valid rows, and bad parameters are refused by name."""

from __future__ import annotations

import pytest
import torch

from benchmarks import continuum_cde as cde
from benchmarks import harness


def test_closed_form_state_solves_the_controlled_ode():
    """``v' = sin(v) u'`` by central differences on a fine grid, and ``v(0) = 1``."""
    t = torch.linspace(0, 2, 20001, dtype=torch.float64)
    u, v = cde.control_and_state(*cde.paths(3, seed=1), t)
    h = float(t[1] - t[0])
    dv, du = (v[:, 2:] - v[:, :-2]) / (2 * h), (u[:, 2:] - u[:, :-2]) / (2 * h)
    assert (dv - torch.sin(v[:, 1:-1]) * du).abs().max() < 1e-5 * du.abs().max()
    assert torch.allclose(v[:, 0], torch.ones(3, dtype=torch.float64))
    assert (v.max(1).values - v.min(1).values).min() > 0.1  # the state moves


def test_samplings_and_trapezoid_weights():
    t = cde.times(2.0, 0.01)
    assert len(t) == 200 and float(t[-1]) == pytest.approx(1.99)
    nu = cde.times(2.0, 0.01, nonuniform=True)
    assert len(nu) == 150 and float(nu[101] - nu[100]) == pytest.approx(0.02)
    w = cde.trapezoid_weights(nu)
    assert float(w.sum()) == pytest.approx(float(nu[-1] - nu[0]))
    # exact for a linear function
    assert float((w * (3 * nu + 1)).sum()) == pytest.approx(float(1.5 * nu[-1] ** 2 + nu[-1]))


def test_short_run_rows(tmp_path):
    records = harness.run_benchmark("continuum_cde", quick=True, results=tmp_path, command="pytest",
                                    overrides={"n_train": 32, "n_test": 8, "epochs": 2, "batch": 16, "width": 8,
                                               "n_heads": 2, "dim_ff": 8, "n_layers": 1})
    rows = {(r["row"]["operator"], r["row"]["sampling"], r["row"]["weights"]): r["row"] for r in records}
    assert ("continuum_transformer", "dt=0.01 | 0.02", "equal") in rows and len(rows) == 9
    assert rows[("continuum_transformer", "dt=0.02", "trapezoid")]["points"] == 100
    table = harness.markdown_table(harness.get("continuum_cde"), records)
    assert "Controlled ODE" in table and "| training mean |" in table


@pytest.mark.parametrize("key,value,words", [("test_dts", [0.0], "test_dts"), ("train_dt", 1.0, "train_dt"),
                                             ("epochs", 0, "epochs"), ("width", -1, "width")])
def test_bad_parameters_are_named(key, value, words):
    with pytest.raises(ValueError, match=words):
        cde.check_params({**cde.PARAMS, key: value})
