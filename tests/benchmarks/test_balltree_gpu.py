"""benchmarks/balltree_gpu.py: its CPU test mode (the quick budget) runs through the harness with values that
hold (dense SDPA only up to dense_max, positive times, no memory or sync check on CPU); the fitted exponents are
those of the rows; the committed H200 rows validate and render; bad parameters are refused by name."""

from __future__ import annotations

import math

import pytest

from benchmarks import balltree_gpu as bg
from benchmarks import harness


def test_quick_cpu_run_values(tmp_path):
    records = harness.run_benchmark("balltree_gpu", quick=True, results=tmp_path,
                                    overrides={"sizes": [128, 256], "dense_max": 128,
                                               "max_call_ms": 1e9})  # a loaded machine must not skip a case
    rows = [r["row"] for r in records]
    assert records[0]["params"]["device"] == "cpu"
    assert not [r for r in rows if r["part"] == "sync_check"]  # CUDA only
    tree = [r for r in rows if r["part"] == "tree"]
    assert [r["n"] for r in tree] == [128, 256] and all(r["batch"] == 4 and r["ms"] > 0 for r in tree)
    att = {(r["method"], r["n"]): r for r in rows if r["part"] == "attention"}
    assert ("dense SDPA", 128) in att and ("dense SDPA", 256) not in att
    for n in (128, 256):
        for m in ("ball attention", "ball sparse attention (BSA)"):
            r = att[m, n]
            assert r["result"] is None and r["forward_ms"] > 0 and r["forward_backward_ms"] > 0
            assert r["peak_mb_forward"] is None and r["peak_mb_forward_backward"] is None  # no memory on CPU
    assert (tmp_path / "balltree_gpu.jsonl").is_file()
    md = harness.markdown_table(harness.get("balltree_gpu"), records)
    assert "| dense SDPA | 2^7 |" in md and "quick budget" in md


def test_exponents_are_fitted_from_rows_over_large_n():
    rows = [bg._row("tree", "build_ball_tree", n=n, batch=4, ms=1e-3 * n ** 0.5) for n in (2**12, 2**14, 2**16)]
    rows += [bg._row("attention", "dense SDPA", n=n, batch=1, forward_ms=1.0, forward_backward_ms=1e-6 * n ** 2,
                     peak_mb_forward=1.0, peak_mb_forward_backward=1e-3 * n) for n in (2**14, 2**15, 2**16)]
    rows.append(bg._row("attention", "dense SDPA", n=2**17, batch=1, result="not run: predicted > 1500 ms per call"))
    ex = bg.exponents([{"row": r} for r in rows])
    assert ex["tree build"]["time"] == pytest.approx(0.5, abs=1e-9)  # 2^12 is below the fit's range
    assert ex["dense SDPA"]["time"] == pytest.approx(2.0, abs=1e-9)
    assert ex["dense SDPA"]["memory"] == pytest.approx(1.0, abs=1e-9)


def test_committed_rows_validate_and_render():
    bench = harness.get("balltree_gpu")
    records = harness.latest_run(harness.read_rows(harness.results_path("balltree_gpu")), full=True)
    md = harness.markdown_table(bench, records)
    for part in ("sync_check", "tree", "attention"):
        assert any(r["row"]["part"] == part for r in records)
    ex = bg.exponents(records)
    for m, e in ex.items():
        if e["time"] is not None:
            assert math.isfinite(e["time"]) and f"| {m} | {e['time']:.2f} |" in md


@pytest.mark.parametrize(("key", "value"), [("device", "tpu"), ("sizes", [512, 256]), ("sizes", []), ("reps", 0),
                                            ("dense_max", -1), ("max_call_ms", 0)])
def test_bad_parameters_are_refused_by_name(tmp_path, key, value):
    with pytest.raises(ValueError, match=rf"^{key}: expected"):
        harness.run_benchmark("balltree_gpu", quick=True, results=tmp_path, overrides={key: value})
