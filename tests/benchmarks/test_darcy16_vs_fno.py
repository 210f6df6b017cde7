"""benchmarks/darcy16_vs_fno.py: a tiny run on neuraloperator's Darcy files (skipped without them), the
calibrated solver files, the committed rows and the parameter checks."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch

from benchmarks import darcy16_vs_fno as bench
from benchmarks import harness

DATA = Path(bench.PARAMS["data"])
needs_data = pytest.mark.skipif(not (DATA / "darcy_train_16.pt").is_file(),
                                reason=f"neuraloperator's darcy_train_16.pt not in {DATA}")


@needs_data
def test_tiny_run_trains_both_models_and_evaluates_zero_shot(tmp_path):
    records = harness.run_benchmark("darcy16_vs_fno", quick=True, results=tmp_path,
                                    overrides={"n_train": 16, "n_generated": 2, "n_calibration": 4})
    rows = [r["row"] for r in records]
    assert [(r["model"], r["recipe"]) for r in rows] == [(bench.GT, "examples/configs/darcy16_galerkin.toml"),
                                                        ("FNO", "neuralop_recipe")]
    gt, fno = rows
    assert set(gt["zero_shot"]) == {"16", "32", "64"} and fno["zero_shot"] is None
    # one epoch on 16 samples: better than predicting zero (rel. L2 1), far from trained
    assert all(0.05 < r["rel_l2"] < 1.0 for r in rows) and all(0.05 < v < 1.5 for v in gt["zero_shot"].values())
    assert 150_000 < fno["parameters"] < 250_000 and gt["parameters"] > 100_000
    # k matches the solver's mean to the file's: y = k u with k of order the files' scale (39 on the full run)
    assert 10 < gt["generated_scale_k"] < 100
    text = harness.markdown_table(harness.get("darcy16_vs_fno"), records)
    assert "GT / best FNO (neuralop_recipe)" in text


@needs_data
def test_generated_files_have_the_neuralop_layout_and_the_training_mean(tmp_path):
    paths, k = bench.write_generated_tests(tmp_path, DATA / "darcy_train_16.pt", n=2, n_calibration=4)
    assert sorted(paths) == [16, 32, 64]
    d = torch.load(paths[32], weights_only=True)
    assert d["x"].shape == (2, 32, 32) and d["x"].dtype == torch.bool and d["y"].shape == (2, 32, 32)
    assert k > 0 and (d["y"] >= 0).all()  # k·u with u >= 0 (positive forcing, zero boundary)


def test_committed_rows_validate_and_render():
    b, records = harness.committed_rows("darcy16_vs_fno")
    run = harness.latest_run(records, full=True)
    text = harness.markdown_table(b, run)
    gt = [r["row"]["rel_l2"] for r in run if r["row"]["model"] == bench.GT]
    assert f"{statistics.fmean(gt):.4f}" in text and "Zero-shot GT error" in text


def test_missing_data_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="data: expected a folder holding darcy_train_16.pt"):
        harness.run_benchmark("darcy16_vs_fno", quick=True, results=tmp_path, overrides={"data": str(tmp_path)})


@needs_data
@pytest.mark.parametrize("key, value", [("recipes", ["adam"]), ("seeds", []), ("epochs", 0), ("n_train", 1)])
def test_bad_parameters_are_refused_naming_them(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        harness.run_benchmark("darcy16_vs_fno", quick=True, results=tmp_path, overrides={key: value})
