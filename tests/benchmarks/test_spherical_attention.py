"""benchmarks/spherical_attention.py: each case runs in its own worker subprocess and its rows hold the layer's
edge count and positive times; without torch-harmonics the rows say so (no comparison, no side-by-side rows);
with it, both layers see the same neighbourhoods; the committed rows validate and render; bad parameters are
refused by name."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks import harness
from benchmarks import spherical_attention as sa

SMALL = {"sizes": [8], "channels": [4], "transformer_cutoff_sizes": [8], "reps": 1}


def _check_cases(rows, nlat):
    cases = [r for r in rows if r["part"] == "case"]
    assert [r["layer"] for r in cases] == ["global", "neighborhood", "neighborhood"]
    glob, default, wide = cases
    assert all(r["error"] is None for r in cases), [r["error"] for r in cases]
    assert glob["edges"] == (nlat * 2 * nlat) ** 2 and glob["theta_cutoff"] is None
    # a wider disc holds more keys, and every disc fewer than the whole sphere
    assert 0 < default["edges"] < wide["edges"] < glob["edges"]
    assert float(default["theta_cutoff"]) == pytest.approx(sa.lg_spacing(nlat), abs=1e-5)
    assert float(wide["theta_cutoff"]) == pytest.approx(7 / 3.14159265 ** 0.5 * sa.lg_spacing(nlat), abs=1e-5)
    for r in cases:
        assert r["setup_s"] > 0 and r["forward_s"] > 0 and r["forward_backward_s"] > 0  # times are noisy here
        assert r["peak_forward_mb"] >= 0
    return cases


def test_without_torch_harmonics_the_rows_say_so(tmp_path, monkeypatch):
    monkeypatch.setattr(sa, "torch_harmonics_available", lambda: False)
    records = harness.run_benchmark("spherical_attention", quick=True, results=tmp_path, overrides=SMALL,
                                    command="pytest")
    rows = [r["row"] for r in records]
    cases = _check_cases(rows, 8)
    assert len(rows) == len(cases)  # no side-by-side rows
    assert {r["th_status"] for r in cases} == {sa.TH_NOT_AVAILABLE}
    assert all(r["th_forward_s"] is None for r in cases)
    md = harness.markdown_table(harness.get("spherical_attention"), records)
    assert "torch-harmonics not available: no comparison columns" in md and "th forward" not in md


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch_harmonics") is None, reason="torch-harmonics not installed")
def test_with_torch_harmonics_both_layers_see_the_same_discs(tmp_path):
    over = {**SMALL, "rounds": 3, "pair_nlat": 8, "pair_channels": [4], "th_global_max": 4}
    records = harness.run_benchmark("spherical_attention", quick=True, results=tmp_path, overrides=over)
    assert records[0]["versions"]["torch-harmonics"]
    rows = [r["row"] for r in records]
    glob, *discs = _check_cases(rows, 8)
    assert glob["th_status"].startswith("not run (time budget") and glob["th_forward_s"] is None
    for r in discs:
        assert r["th_status"] == "ran" and r["th_edges"] == r["edges"] and r["th_forward_s"] > 0
    pairs = [r for r in rows if r["part"] == "side_by_side"]
    assert [r["pass"] for r in pairs] == ["forward", "forward_backward"]
    for r in pairs:
        assert r["ratio_q1"] <= r["ratio_median"] <= r["ratio_q3"] and r["rounds"] == 3
    assert "Side by side in one process" in harness.markdown_table(harness.get("spherical_attention"), records)


def test_committed_rows_validate_and_render():
    bench, records = harness.committed_rows("spherical_attention")
    for run_id in dict.fromkeys(r["run_id"] for r in records):
        md = harness.markdown_table(bench, harness.latest_run(records, run_id))
        assert "| layer | grid | C |" in md and "Times: median of repeats" in md


@pytest.mark.parametrize("key,value", [("sizes", []), ("channels", [0]), ("reps", 0), ("torch_harmonics", "no"),
                                       ("pair_channels", "64")])
def test_bad_parameters_are_refused_by_name(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        harness.run_benchmark("spherical_attention", quick=True, results=tmp_path, overrides={key: value})
    assert not (tmp_path / "spherical_attention.jsonl").exists()
