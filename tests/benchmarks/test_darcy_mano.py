"""benchmarks/darcy_mano.py: a small run on built-in solver data (per-model learning rates, the Galerkin
Transformer's fixed latent grid keeping its zero-shot error), the real-data part (skipped without the files),
the committed rows of the earlier MANO variant and the parameter checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import darcy_mano as bench
from benchmarks import harness

DATA = Path(bench.PARAMS["data"])


def test_small_generated_run_uses_each_models_lr(tmp_path):
    lrs = {"Galerkin Transformer": 1e-3, "FNO": 3e-3}
    records = harness.run_benchmark("darcy_mano", quick=True, results=tmp_path, overrides={
        "parts": ["generated_64"], "models": list(lrs), "lrs": lrs, "zero_shot": [128],
        "cache": str(tmp_path / "cache")})
    rows = {r["row"]["model"]: r["row"] for r in records}
    assert set(rows) == set(lrs)
    for name, r in rows.items():
        assert r["recipe"] == {**bench.RECIPE, "lr": lrs[name]} and r["n_train"] == 4 and r["epochs"] == 1
        assert set(r["zero_shot"]) == {"128"} and r["mano_params"] is None
        assert 0 < r["rel_l2"] < 1.0  # one epoch on 4 samples: still better than predicting zero
    gt = rows["Galerkin Transformer"]
    # its attention runs on a fixed 64² latent grid: the same samples at 128² give nearly the same error
    assert gt["zero_shot"]["128"] == pytest.approx(gt["rel_l2"], rel=0.05)
    text = harness.markdown_table(harness.get("darcy_mano"), records)
    assert "| lr |" in text and "lr Galerkin Transformer 0.001, FNO 0.003" in text


@pytest.mark.skipif(not (DATA / "darcy_train_16.pt").is_file(), reason=f"darcy_train_16.pt not in {DATA}")
def test_real_part_trains_on_the_first_samples(tmp_path):
    records = harness.run_benchmark("darcy_mano", quick=True, results=tmp_path,
                                    overrides={"parts": ["real_16"], "models": ["FNO"]})
    (r,) = [rec["row"] for rec in records]
    assert r["part"] == "real_16" and r["n_train"] == 8 and r["zero_shot"] is None and 0 < r["rel_l2"] < 1.5


def test_committed_rows_validate_and_say_which_mano():
    b, records = harness.committed_rows("darcy_mano")
    text = harness.markdown_table(b, harness.latest_run(records, full=True))
    assert "Real neuraloperator 16×16 files" in text and "Built-in solver" in text
    legacy = [r for r in records if r["run_id"] == "legacy-darcy_mano"]
    assert legacy and "earlier extended variant" in harness.markdown_table(b, legacy)


def test_missing_data_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="data: expected a folder holding darcy_train_16.pt"):
        harness.run_benchmark("darcy_mano", quick=True, results=tmp_path,
                              overrides={"parts": ["real_16"], "data": str(tmp_path)})


@pytest.mark.parametrize("key, value", [("lrs", {"MANO": 1e-3}), ("parts", ["real_32"]), ("models", ["UNet"]),
                                        ("zero_shot", [96]), ("n_train", 0)])
def test_bad_parameters_are_refused_naming_them(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        harness.run_benchmark("darcy_mano", quick=True, results=tmp_path, overrides={key: value})
