"""benchmarks/balltree_scaling.py: a small run through the harness gives consistent rows (dense attention's time grows
faster in N than ball attention's, the cut-offs are honoured); the exponents are fitted from the rows; the committed
rows validate and their table shows their numbers; bad parameters are refused by name."""

from __future__ import annotations

import math

import pytest

from benchmarks import balltree_scaling as bs
from benchmarks import harness
from benchmarks._timing import malloc_settings


def test_fit_exponent_recovers_a_power_law():
    ns = [1024, 2048, 4096, 8192]
    assert bs.fit_exponent(ns, [3e-6 * n**2 for n in ns]) == pytest.approx(2.0)
    assert bs.fit_exponent(ns, [5e-4 * n for n in ns]) == pytest.approx(1.0)
    assert bs.fit_exponent([1024], [1.0]) is None


def test_small_run_through_the_harness(tmp_path):
    over = {"sizes": [512, 2048], "dense_max": 2048, "numpy_max": 512, "reps": 2}
    records = harness.run_benchmark("balltree_scaling", quick=True, results=tmp_path, overrides=over,
                                    command="pytest balltree_scaling")
    assert harness.read_rows(tmp_path / "balltree_scaling.jsonl") == records
    rows = [r["row"] for r in records]
    trees = [r for r in rows if r["part"] == "tree build"]
    attn = [r for r in rows if r["part"] == "attention"]
    for r in trees:
        assert r["seconds"] > 0 and r["batch"] == 4 and r["ball"] == 64 and r["forward_s"] is None
    # the NumPy reference only up to numpy_max; the torch build at every size
    assert sorted(r["n"] for r in trees if r["method"] == "NumPy recursive reference") == [512]
    assert sorted(r["n"] for r in trees if r["method"] == "sciattn build_ball_tree (torch)") == [512, 2048]
    for r in attn:
        assert 0 < r["forward_s"] < r["forward_backward_s"] + 1e-3
        assert r["seconds"] is None and r["malloc"] == malloc_settings()
        for key in ("peak_mb_forward", "peak_mb_forward_backward"):
            assert r[key] is None or (math.isfinite(r[key]) and r[key] >= 0)
        assert r["ball"] == (64 if r["method"] == "ball attention" else None)
    exps = bs.exponents(rows)
    # 4x the points: dense attention is quadratic, ball attention linear (time per point about constant)
    dense, ball = exps["attention_forward_time"]["dense SDPA"], exps["attention_forward_time"]["ball attention"]
    assert dense > 1.4 and dense > ball + 0.3, exps
    table = harness.markdown_table(harness.get("balltree_scaling"), records)
    assert "Fitted exponents" in table and f"| dense SDPA | {dense:.2f} |" in table
    assert "quick budget" in table


def test_committed_rows_validate_and_render():
    bench, records = harness.latest_committed_run("balltree_scaling")
    assert records
    table = harness.markdown_table(bench, records)
    for r in records:
        row = r["row"]
        if row["part"] == "tree build":
            assert f"| {row['method']} | {row['n']} | {row['seconds']:.4f} |" in table
        else:
            assert f"| {row['method']} | {row['n']} | {1e3 * row['forward_s']:.1f} | " in table
    for quantity, per in bs.exponents([r["row"] for r in records]).items():
        for method, p in per.items():
            assert f"| {quantity} | {method} | {p:.2f} |" in table


@pytest.mark.parametrize(("key", "value"), [("sizes", "big"), ("sizes", [1]), ("parts", ["trees"]), ("reps", 0),
                                            ("erwin_threads", -1)])
def test_bad_parameter_is_refused_by_name(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        harness.run_benchmark("balltree_scaling", quick=True, results=tmp_path, overrides={key: value})
    assert not (tmp_path / "balltree_scaling.jsonl").exists()
