"""benchmarks/warm_start_darcy.py: the example's warm start through the harness (both starts converge to the
same solution, tighter tolerances need more iterations, the saving is the iterations' ratio), the committed rows
and the parameter checks."""

from __future__ import annotations

import pytest

from benchmarks import harness
from benchmarks import warm_start_darcy as bench


def test_small_run_converges_to_the_same_solution(tmp_path):
    records = harness.run_benchmark("warm_start_darcy", quick=True, results=tmp_path,
                                    overrides={"n_train": 8, "n_test": 1})
    rows = [r["row"] for r in records]
    assert [r["rtol"] for r in rows] == [1e-3, 1e-4, 1e-6, 1e-8]
    cold = [r["cold_iterations"] for r in rows]
    assert cold == sorted(cold) and cold[0] < cold[-1]  # a tighter residual takes more iterations from zero
    for r in rows:
        assert r["iterations_saved_percent"] == pytest.approx(100 * (1 - r["warm_iterations"] / r["cold_iterations"]))
        assert r["max_solution_difference"] < 1e-6 and r["n_test"] == 1
    assert rows[-1]["warm_seconds"] > 0 and rows[0]["cold_seconds"] is None
    assert "| 1e-08 |" in harness.markdown_table(harness.get("warm_start_darcy"), records)


def test_committed_rows_validate_and_render():
    b, records = harness.committed_rows("warm_start_darcy")
    text = harness.markdown_table(b, harness.latest_run(records, full=True))
    assert "CG relative residual" in text and "test coefficients" in text


@pytest.mark.parametrize("key, value", [("n_test", 0), ("rtol", 2.0), ("epochs", "ten")])
def test_bad_parameters_are_refused_naming_them(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        bench.run({**bench.PARAMS, **bench.QUICK, key: value})
