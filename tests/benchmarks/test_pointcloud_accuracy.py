"""benchmarks/pointcloud_accuracy.py: a small run through the harness trains models of about 70 k parameters and times
the blocks; the weighted relative L2 is a relative error; the mini_car task reads the files of ``data`` (skipped when
absent) and a missing folder is refused by name; the committed rows validate and their table and target come from
the rows; bad parameters are refused by name."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks import harness
from benchmarks import pointcloud_accuracy as pa

DATA = Path(pa.PARAMS["data"])


def test_rel_l2_is_the_weighted_relative_error():
    import torch

    g = torch.Generator().manual_seed(0)
    y = torch.randn(3, 50, 1, generator=g)
    w = torch.rand(3, 50, generator=g)
    assert torch.allclose(pa.rel_l2(y, y, w), torch.zeros(3))
    assert torch.allclose(pa.rel_l2(torch.zeros_like(y), y, w), torch.ones(3))
    assert torch.allclose(pa.rel_l2(1.5 * y, y, w), torch.full((3,), 0.5))
    # a point of weight 0 does not count
    w0, bad = w.clone(), y.clone()
    w0[:, 0], bad[:, 0] = 0.0, 1e6
    assert torch.allclose(pa.rel_l2(bad, y, w0), torch.zeros(3), atol=1e-6)


def test_small_run_through_the_harness(tmp_path):
    over = {"tasks": ["darcy_irregular", "timing"], "models": ["BSA", "Galerkin Transformer"], "n_points": 128,
            "n_train": 4, "n_test": 2, "epochs": 2, "fine_darcy": 32, "sizes": [256, 1024], "reps": 1,
            "cache": str(tmp_path / "cache")}
    records = harness.run_benchmark("pointcloud_accuracy", quick=True, results=tmp_path, overrides=over,
                                    command="pytest pointcloud_accuracy")
    rows = [r["row"] for r in records]
    fits = [r for r in rows if r["task"] == "darcy_irregular"]
    assert [r["model"] for r in fits] == ["BSA", "Galerkin Transformer"]
    for r in fits:
        assert r["points"] == 128
        assert abs(r["parameters"] - 70_000) <= 0.1 * 70_000  # the equal-size comparison
        assert len(r["train_curve"]) == 2 and r["train_rel_l2_last_epoch"] == r["train_curve"][-1]
        assert r["seconds_per_training_sample"] == pytest.approx(r["train_seconds"] / (2 * 4))
        assert math.isfinite(r["test_rel_l2"]) and 0 < r["test_rel_l2"] < 3 and r["seconds"] is None
    timing = [r for r in rows if r["task"] == "timing"]
    assert {(r["points"], r["model"]) for r in timing} == {(n, b) for n in (256, 1024) for b in pa.BLOCKS}
    assert all(r["seconds"] > 0 and r["parameters"] is None for r in timing)
    # no full-attention rows: no target
    assert pa.target(records) is None
    table = harness.markdown_table(harness.get("pointcloud_accuracy"), records)
    assert "**A. Irregular Darcy**" in table and "**Target**" not in table
    assert f"| BSA | {fits[0]['parameters']:,} | {fits[0]['test_rel_l2']:.4f} ± " in table


@pytest.mark.skipif(not (DATA / "mini_car.pt").is_file(), reason=f"mini ShapeNet-Car files not in {DATA}")
def test_mini_car_reads_the_data_folder(tmp_path):
    over = {"tasks": ["mini_car"], "models": ["Galerkin Transformer"], "epochs_car": 1}
    records = harness.run_benchmark("pointcloud_accuracy", quick=True, results=tmp_path, overrides=over)
    (row,) = [r["row"] for r in records]
    assert row["task"] == "mini_car" and row["points"] == 3586
    assert abs(row["parameters"] - 70_000) <= 0.1 * 70_000
    assert math.isfinite(row["test_rel_l2"]) and row["test_rel_l2_std"] == 0.0  # one test car


def test_missing_data_folder_is_refused_by_name(tmp_path):
    over = {"tasks": ["mini_car"], "data": str(tmp_path / "absent")}
    with pytest.raises(FileNotFoundError, match="data"):
        harness.run_benchmark("pointcloud_accuracy", quick=True, results=tmp_path, overrides=over)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="data: .*mini_car.pt"):
        harness.run_benchmark("pointcloud_accuracy", quick=True, results=tmp_path,
                              overrides={**over, "data": str(tmp_path / "empty")})
    # without the mini_car task the folder is not needed
    assert pa.check({**pa.PARAMS, "tasks": ["timing"], "data": str(tmp_path / "absent")})


def test_committed_rows_validate_and_render():
    bench, records = harness.latest_committed_run("pointcloud_accuracy")
    assert records
    table = harness.markdown_table(bench, records)
    for r in (r["row"] for r in records if r["row"]["test_rel_l2_std"] is not None):
        assert f"| {r['model']} | {r['parameters']:,} | {r['test_rel_l2']:.4f} ± {r['test_rel_l2_std']:.4f} |" in table
    t = pa.target(records)
    if t is not None:
        assert f"BSA / full test error = {t['bsa_over_full_test_error']:.3f}" in table
        assert ("**Met.**" if t["met"] else "**Not met.**") in table


@pytest.mark.parametrize(("key", "value"), [("models", ["GPT"]), ("tasks", ["darcy"]), ("n_points", 2),
                                            ("sizes", []), ("epochs", 0)])
def test_bad_parameter_is_refused_by_name(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        harness.run_benchmark("pointcloud_accuracy", quick=True, results=tmp_path, overrides={key: value})
