"""benchmarks/sphere_resolution.py: a small run's convergence rows shrink under refinement (the contract of
tests/operators/test_sphere_convergence.py, which shares the protocol), its setup rows time the first and cached
call; the zero-shot sweep trains and evaluates through the CLI (slow); the notes count the cases that meet the
contract; the committed rows validate and render; bad parameters are refused by name."""

from __future__ import annotations

import copy
import math

import pytest

from benchmarks import harness
from benchmarks import sphere_resolution as sr

SMALL = {"operators": ["spherical_transformer"], "attentions": ["neighborhood"], "setup_grids": [17], "sweep": False}


def test_small_run_converges_and_times_the_setup(tmp_path):
    records = harness.run_benchmark("sphere_resolution", quick=True, results=tmp_path, overrides=SMALL,
                                    command="pytest")
    rows = [r["row"] for r in harness.read_rows(tmp_path / "sphere_resolution.jsonl")]
    assert [r["part"] for r in rows] == ["convergence", "setup"]
    conv, setup = rows
    assert conv["operator"] == "spherical_transformer" and conv["default"] is True
    assert conv["grids"] == [17, 33, 65, 129] and conv["built_at"] == [33, 64]
    e = list(conv["rel_l2_vs_finest"].values())
    assert list(conv["rel_l2_vs_finest"]) == ["17", "33", "65"]
    assert 1e-6 < e[2] <= 0.6 * e[1] and e[1] <= 0.6 * e[0] and e[2] <= 0.05  # at least first order, <= 5%
    assert setup["grid"] == [17, 32] and setup["first_call_ms"] > 0 and setup["cached_call_ms"] > 0
    md = harness.markdown_table(harness.get("sphere_resolution"), records)
    assert "1 of 1 cases meet it" in md and "No sweep in this run" in md


@pytest.mark.slow
def test_quick_sweep_trains_and_evaluates_through_the_cli(tmp_path):
    over = {**SMALL, "sweep": True, "resolutions": [8, 16], "n_samples": 2}
    rows = [r["row"] for r in harness.run_benchmark("sphere_resolution", quick=True, results=tmp_path,
                                                    overrides=over)]
    sweep = [r for r in rows if r["part"] == "sweep"]
    assert [r["resolution"] for r in sweep] == [8, 16]
    train = next(r for r in sweep if r["regime"] == "training")
    assert train["resolution"] == 16 and train["ratio_to_training"] == pytest.approx(1.0)
    for r in sweep:
        assert math.isfinite(r["rel_l2"]) and r["rel_l2"] > 0 and r["n_samples"] == 2
        assert r["ratio_to_training"] == pytest.approx(r["rel_l2"] / train["rel_l2"], rel=1e-6)


def test_notes_count_the_cases_that_meet_the_contract():
    bench, records = harness.committed_rows("sphere_resolution")
    for run_id in dict.fromkeys(r["run_id"] for r in records):
        md = harness.markdown_table(bench, harness.latest_run(records, run_id))
        assert "relative L2 against the finest grid" in md and "Per-grid setup" in md
    run = copy.deepcopy(harness.latest_run(records, full=True))
    conv = [r for r in run if r["row"]["part"] == "convergence"]
    n = len(conv)
    errors = conv[0]["row"]["rel_l2_vs_finest"]
    first = next(iter(errors))
    errors[first] = 0.5 * errors[list(errors)[1]]  # the first refinement now grows the error
    assert f"{n - 1} of {n} cases meet it" in sr.notes(run)


@pytest.mark.parametrize("key,value", [("attentions", ["linear"]), ("operators", ["fno"]), ("setup_grids", [1]),
                                       ("sweep", "yes")])
def test_bad_parameters_are_refused_by_name(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        harness.run_benchmark("sphere_resolution", quick=True, results=tmp_path, overrides={**SMALL, key: value})
    assert not (tmp_path / "sphere_resolution.jsonl").exists()
