"""benchmarks/gpu_tuning.py: the committed H200 sweep validates and renders (its fastest candidates computed
from the rows); non-finite numbers become an error, not a row that fails the schema (a machine without CUDA is
refused by naming ``device``: test_harness.py); bad parameters are refused by name; the worker refuses an unknown section."""

from __future__ import annotations

import pytest

from benchmarks import gpu_tuning as tu
from benchmarks import harness


def test_committed_rows_validate_and_render_with_the_fastest_candidates():
    bench = harness.get("gpu_tuning")
    records = harness.latest_run(harness.read_rows(harness.results_path("gpu_tuning")), full=True)
    md = harness.markdown_table(bench, records)
    best = tu.fastest(records)
    assert best
    for group, r in best.items():
        key = tu._time_key(group)
        others = [x["row"][key] for x in records if (x["row"]["section"], x["row"]["swept"], x["row"]["theta"]) == group
                  and not x["row"]["error"] and x["row"][key] is not None]
        assert r[key] == min(others)
        assert f"({r[key]:.3f} ms)" in md
    assert "Fastest candidate of each sweep" in md


def _sections():
    return {"galerkin": {"shape": "N=2^10", "current": {"kv": [32, 8, 3]}, "current_programs_per_sm": 4,
                         "forward": [{"kv_qm": [32, 8, 3], "programs_per_sm": 4, "forward_ms": 3.0, "TBps": 1.0,
                                      "rel_err_vs_current": 0.0},
                                     {"kv_qm": [64, 4, 3], "programs_per_sm": 4, "forward_ms": 2.0, "TBps": 1.5,
                                      "rel_err_vs_current": float("nan")},
                                     {"kv_qm": [256, 8, 3], "programs_per_sm": 4, "error": "OutOfResources: smem"}],
                         "forward_backward": []},
            "softmax": {"error": "timed out after 50 s"}}


def test_rows_from_sections_non_finite_errors_and_failed_sections():
    rows = tu.rows_from(_sections())
    bench = harness.get("gpu_tuning")
    for i, r in enumerate(rows):
        harness.validate_row(bench, r, i)
    assert len(rows) == 4
    nan = rows[1]
    assert nan["rel_err"] is None and "rel_err not finite" in nan["error"]
    assert rows[2]["error"].startswith("OutOfResources") and rows[2]["forward_ms"] is None
    assert rows[3] == {**rows[3], "section": "softmax", "swept": "section", "error": "timed out after 50 s"}
    recs = [{"row": r} for r in rows]
    best = tu.fastest(recs)
    # the 2.0 ms candidate computed a non-finite error, so the fastest checked one is the 3.0 ms candidate
    assert best["galerkin", "forward", None]["config"] == {"kv_qm": [32, 8, 3], "programs_per_sm": 4}
    table = tu.table(recs)
    assert "section softmax failed: `timed out after 50 s`" in table and "| [256, 8, 3] | 4 | OutOfResources" in table


@pytest.mark.parametrize(("key", "value"), [("sections", ["fft"]), ("sections", []), ("timeout", 0),
                                            ("device", "cpu")])
def test_bad_parameters_are_refused_by_name(tmp_path, key, value):
    with pytest.raises(ValueError, match=rf"^{key}: expected"):
        harness.run_benchmark("gpu_tuning", results=tmp_path, overrides={key: value})


def test_the_worker_refuses_an_unknown_section(capsys):
    with pytest.raises(SystemExit):
        tu.main(["--worker", "fft"])
    assert "invalid choice: 'fft'" in capsys.readouterr().err
