"""benchmarks/swe_sphere.py: a tiny run trains every model on the same generated pairs (equal parameters for the
two transformers, the dense attention path equal to the CSR one); the targets are judged from rows in the notes
(a blow-up row gives "not met"); the committed rows validate and render; bad parameters are refused by name."""

from __future__ import annotations

import math

import pytest

from benchmarks import harness
from benchmarks import swe_sphere as swe

TINY = {"n_train": 4, "n_test": 2, "n_traj": 1, "rollout_steps": 2, "sfno": False}


def test_tiny_run_trains_the_transformers_on_equal_terms(tmp_path):
    records = harness.run_benchmark("swe_sphere", quick=True, results=tmp_path, overrides=TINY, command="pytest")
    rows = {r["row"]["model"]: r["row"] for r in harness.read_rows(tmp_path / "swe_sphere.jsonl")}
    assert list(rows) == ["persistence", "spherical-nbhd", "planar-nbhd"]
    assert len(records) == 3
    sph, pla, per = rows["spherical-nbhd"], rows["planar-nbhd"], rows["persistence"]
    assert sph["parameters"] == pla["parameters"] > 0 and per["parameters"] == 0
    for r in rows.values():
        assert len(r["rollout_rel_l2"]) == len(r["amplitude_ratio"]) == TINY["rollout_steps"]
        assert all(math.isfinite(e) and e > 0 for e in r["rollout_rel_l2"] + r["amplitude_ratio"])
        assert r["rel_l2"] == pytest.approx(sum(r["rel_l2_per_var"].values()) / 3, rel=1e-6)
        assert r["stable"] == all(e <= r["bound"] for e in r["rollout_rel_l2"])
        assert r["data"]["n_train"] == TINY["n_train"] and r["data"]["nlat"] == swe.QUICK["nlat"]
    for r in (sph, pla):  # the dense masked SDPA computes the CSR attention
        assert r["dense_vs_sparse_max_abs_diff"] <= 1e-8 and len(r["train_loss"]) == swe.QUICK["epochs"]
    assert per["dense_vs_sparse_max_abs_diff"] is None
    t = swe.evaluate_targets(list(rows.values()))
    assert t["one_step_gain_vs_planar"] == pytest.approx(1 - sph["rel_l2"] / pla["rel_l2"])
    assert "Target 1" in harness.markdown_table(harness.get("swe_sphere"), records)


def _rows(ratio_last: float) -> list[dict]:
    def row(model, l2, ratios):
        return {**dict.fromkeys(swe.SCHEMA), "model": model, "parameters": 100, "train_seconds": 1.0,
                "rel_l2": l2, "rel_l1": l2, "rel_l2_per_var": dict.fromkeys(swe.VARS, l2),
                "rollout_rel_l2": [0.2, 0.5, 1.2], "amplitude_ratio": ratios, "stable": False, "first_failure": 2,
                "bound": 1.0, "dense_vs_sparse_max_abs_diff": 0.0, "total_seconds": 3.0,
                "data": {"seed": 0, "nlat": 16, "nlon": 32, "grid": "equiangular", "dt": 600.0,
                         "dt_pair_seconds": 3600.0, "spinup_hours": 2, "n_train": 8, "n_test": 4, "n_traj": 2}}
    return [row("spherical-nbhd", 0.1, [1.0, 1.1, ratio_last]), row("planar-nbhd", 0.2, [1.0, 1.0, 1.0])]


def _records(rows):
    return [{"benchmark": "swe_sphere", "run_id": "x", "date": "2026-12-02", "command": "pytest",
             "hardware": {"cpu": "cpu", "cores": 1, "gpu": None}, "versions": {"python": "3", "torch": "2"},
             "params": dict(swe.PARAMS), "quick": True, "row": r} for r in rows]


def test_targets_are_judged_from_the_rows_and_a_blow_up_is_not_met():
    bench = harness.get("swe_sphere")
    ok = swe.evaluate_targets(_rows(1.2))
    assert ok["rollout_no_blow_up"] is True and ok["one_step_gain_met"] is True
    assert ok["one_step_gain_vs_planar"] == pytest.approx(0.5) and ok["rollout_within_skill_bound"] is False
    assert "stable, no blow-up: every step finite, rms(prediction)/rms(truth) within [0.5, 2]): **met**" in \
        harness.markdown_table(bench, _records(_rows(1.2)))
    blow = swe.evaluate_targets(_rows(2.5))  # amplitude ratio 2.5 at the last step
    assert blow["rollout_no_blow_up"] is False and blow["blow_up_step"] == 3
    notes = swe.notes(_records(_rows(2.5)))
    assert "**not met** (blow-up: amplitude ratio 2.50 at step 3, outside [0.5, 2])" in notes
    assert "skill bound (rel. L2 ≤ 1 at every step): not met" in notes
    collapse = swe.evaluate_targets(_rows(0.3))  # a collapse is out of range too
    assert collapse["rollout_no_blow_up"] is False
    nan = _rows(1.0)
    nan[0]["rollout_rel_l2"] = [0.2, math.nan, 1.0]
    assert swe.evaluate_targets(nan)["rollout_no_blow_up"] is False
    assert swe.evaluate_targets(_rows(1.0)[:1]) == {}  # no planar-nbhd row: not judged


def test_committed_rows_validate_and_render():
    bench, records = harness.committed_rows("swe_sphere")
    for run_id in dict.fromkeys(r["run_id"] for r in records):
        md = harness.markdown_table(bench, harness.latest_run(records, run_id))
        assert "| model | parameters |" in md and "Rollout rel. L2 per step" in md


@pytest.mark.parametrize("key,value", [("variants", ["spectral"]), ("epochs", 0), ("nlon", 33),
                                       ("attention_path", "csr"), ("sfno", "yes")])
def test_bad_parameters_are_refused_by_name(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        harness.run_benchmark("swe_sphere", quick=True, results=tmp_path, overrides={key: value})
    assert not (tmp_path / "swe_sphere.jsonl").exists()
