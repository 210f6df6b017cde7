"""benchmarks/fastmax_attention.py: a short run writes valid rows in which Fastmax equals its dense kernel to float32
round-off and differs from softmax by more than that; the exponent fit recovers known slopes; bad parameters are
refused by name."""

from __future__ import annotations

import pytest

from benchmarks import fastmax_attention as fa
from benchmarks import harness


def test_short_run_rows(tmp_path):
    records = harness.run_benchmark("fastmax_attention", quick=True, results=tmp_path, command="pytest",
                                    overrides={"sizes": [64, 128, 256], "dense_max": 128, "error_max": 128,
                                               "fit_from": 64, "heads": 2, "dim": 4})
    rows = {(r["row"]["method"], r["row"]["n"]): r["row"] for r in records}
    assert set(rows) == {(m, n) for m in fa.METHODS for n in (64, 128)} | {("fastmax", 256)}
    for n in (64, 128):
        fm = rows[("fastmax", n)]
        assert fm["rel_err_vs_kernel"] < 1e-5  # the factorisation is exact: float32 round-off
        assert fm["rel_err_vs_softmax"] > 10 * fm["rel_err_vs_kernel"]  # the Taylor kernel is not exp
        assert rows[("softmax", n)]["rel_err_vs_softmax"] < 1e-5
    assert rows[("fastmax", 256)]["rel_err_vs_kernel"] is None
    table = harness.markdown_table(harness.get("fastmax_attention"), records)
    assert "| 256 | " in table and "Fitted time exponents" in table and "RTX A6000" in table


def test_exponents_recover_known_slopes():
    rows = [{"method": m, "n": n, "seconds": 1e-6 * n ** p} for m, p in (("fastmax", 1.0), ("softmax", 2.0))
            for n in (512, 1024, 2048, 4096)]
    fits = fa.exponents(rows, fit_from=1024)
    assert abs(fits["fastmax"] - 1.0) < 1e-9 and abs(fits["softmax"] - 2.0) < 1e-9
    assert fits["fastmax_dense"] is None


@pytest.mark.parametrize("key,value", [("sizes", []), ("sizes", [1, 4]), ("order", 3), ("lim", 0), ("reps", 0),
                                       ("heads", True)])
def test_bad_parameters_are_named(key, value):
    with pytest.raises(ValueError, match=key):
        fa.check_params({**fa.PARAMS, key: value})
