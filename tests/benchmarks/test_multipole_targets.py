"""multipole_targets: a tiny in-process run gives rows whose ratios follow from their times, a verdict per size."""

from __future__ import annotations

import pytest

from benchmarks import harness
from benchmarks.multipole_targets import METHODS, notes


def test_quick_run_rows_and_verdicts(tmp_path):
    pytest.importorskip("neuralop")
    records = harness.run_benchmark("multipole_targets", quick=True, overrides={"sizes": [16], "reps": 1},
                                    results=tmp_path)
    rows = [r["row"] for r in records]
    assert [r["method"] for r in rows] == list(METHODS)
    at = {r["method"]: r for r in rows}
    d = at["multipole"]
    for m in ("galerkin", "spectral_conv", "multipole_sdpa"):
        assert at[m]["ratio_forward"] == pytest.approx(d["forward_ms"] / at[m]["forward_ms"])
        assert at[m]["ratio_forward_backward"] == pytest.approx(d["forward_backward_ms"] / at[m]["forward_backward_ms"])
    assert d["flop_share"] == pytest.approx(d["useful_gflop"] / (d["forward_ms"] / 1e3) / d["matmul_gflops"])
    assert 0 < d["flop_share"] < 1 and d["matmul_gflops"] > 1 and d["copy_gbs"] > 0.1
    text = notes(records)
    assert "16²: / Galerkin" in text and ("met)" in text)


def test_bad_sizes_are_refused(tmp_path):
    with pytest.raises(ValueError, match="sizes: expected a non-empty list of grid sides >= 8"):
        harness.run_benchmark("multipole_targets", quick=True, overrides={"sizes": [4]}, results=tmp_path)
