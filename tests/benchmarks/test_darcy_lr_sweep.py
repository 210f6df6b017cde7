"""The Darcy learning-rate sweep's protocol: a disjoint train/validation split of the training
samples, the argmin choice of lr per model, and darcy_mano's reading of the chosen values."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

from sciattn.pde_data.grid_dataset import GridPairDataset


@pytest.fixture(scope="module")
def sweep(import_benchmark):
    return import_benchmark("darcy_lr_sweep")


def test_split_is_first_and_last_samples_without_overlap(sweep):
    fit, val = sweep.split_indices(400, 80)
    assert fit == list(range(320)) and val == list(range(320, 400))
    assert not set(fit) & set(val) and sorted(fit + val) == list(range(400))
    for bad in (0, 400, 401):
        with pytest.raises(ValueError, match="n_val"):
            sweep.split_indices(400, bad)


def test_subset_holds_exactly_the_indexed_samples(sweep):
    x = torch.arange(10.0).reshape(10, 1, 1, 1).expand(10, 1, 2, 2).clone()
    ds = GridPairDataset(x, -x, {"split": "train", "resolution": 2})
    fit_idx, val_idx = sweep.split_indices(10, 3)
    fit, val = sweep.subset(ds, fit_idx, "train"), sweep.subset(ds, val_idx, "validation")
    assert fit.x[:, 0, 0, 0].tolist() == [0, 1, 2, 3, 4, 5, 6] and val.x[:, 0, 0, 0].tolist() == [7, 8, 9]
    assert torch.equal(val.y, -val.x)
    assert val.meta["split"] == "validation" and val.meta["resolution"] == 2 and ds.meta["split"] == "train"


def test_choose_lrs_is_the_argmin_per_model(sweep):
    errors = {
        "A": {1e-3: 0.05, 2e-3: 0.04, 4e-3: 0.045},
        "B": {1e-3: 0.03, 2e-3: math.nan, 8e-3: 0.02},  # a diverged run never wins
        "C": {4e-3: 0.07, 2e-3: 0.07},  # tie: the smaller lr
        "D": {1e-3: math.inf, 2e-3: math.nan},  # all diverged: still an answer
        "E": {},
    }
    assert sweep.choose_lrs(errors) == {"A": 2e-3, "B": 8e-3, "C": 2e-3, "D": 1e-3}


def test_darcy_mano_reads_the_chosen_lrs(sweep, tmp_path):
    darcy_mano = sys.modules["darcy_mano"]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"chosen_lr": {"MANO": 0.004, "FNO": 0.008, "Other": 1.0}}))
    assert darcy_mano.load_lrs(path, ("MANO", "FNO")) == {"MANO": 0.004, "FNO": 0.008}
    with pytest.raises(ValueError, match="Galerkin Transformer"):
        darcy_mano.load_lrs(path, ("MANO", "Galerkin Transformer"))
    path.write_text(json.dumps({"runs": []}))
    with pytest.raises(ValueError, match="chosen_lr"):
        darcy_mano.load_lrs(path, ("MANO",))


def test_reuse_keeps_runs_of_the_same_protocol_only(sweep, tmp_path):
    summary = {"epochs": 10, "seed": 0, "n_fit": 320, "n_val": 80, "recipe": {"lr": 2e-3}}
    path = tmp_path / "darcy_lr_sweep.json"
    assert sweep.reusable_runs(path, summary) == ([], None)
    runs = [{"model": "FNO", "lr": 8e-3, "val_rel_l2": 0.04}]
    path.write_text(json.dumps({**summary, "runs": runs, "command": "python benchmarks/darcy_lr_sweep.py"}))
    assert sweep.reusable_runs(path, summary) == (runs, "python benchmarks/darcy_lr_sweep.py")
    with pytest.raises(ValueError, match="--reuse"):
        sweep.reusable_runs(path, {**summary, "epochs": 20})


def test_grid_edge_flags_the_ends_of_a_models_own_grid(sweep):
    runs = [{"model": "FNO", "lr": lr} for lr in (1e-3, 4e-3, 1.6e-2)] + [{"model": "MANO", "lr": 3.2e-2}]
    assert sweep.on_grid_edge(runs, "FNO", 1.6e-2) and sweep.on_grid_edge(runs, "FNO", 1e-3)
    assert not sweep.on_grid_edge(runs, "FNO", 4e-3)
    assert not sweep.on_grid_edge(runs, "MANO", 3.2e-2)  # a single run has no grid


def test_darcy_mano_name_sets_the_result_stem_and_keeps_the_default_files(sweep, tmp_path, monkeypatch):
    """``--name`` writes NAME.{json,md} (here with ``--lr-from``, whose default stem is darcy_mano_tuned_lr);
    training is stubbed, so only the bookkeeping runs."""
    darcy_mano = sys.modules["darcy_mano"]
    lrs = {n: 1e-3 for n in darcy_mano.models(64)}
    (tmp_path / "sweep.json").write_text(json.dumps({"chosen_lr": lrs}))
    errors = {"test_64": 0.02, "test_128": 0.03, "test_256": 0.04}
    monkeypatch.setattr(darcy_mano, "build_datasets", lambda cfg, progress=False: (None, {}))
    monkeypatch.setattr(darcy_mano, "run_part", lambda train, tests, latent, epochs, seed, lrs=None: {
        n: {"parameters": 1, "train_seconds": 0.0, "rel_l2": errors, "lr": lrs[n]} for n in lrs})
    monkeypatch.setattr(sys, "argv", ["darcy_mano.py", "--skip-real", "--epochs", "40", "--lr-from",
                                      str(tmp_path / "sweep.json"), "--results", str(tmp_path), "--name", "long"])
    darcy_mano.main()
    summary = json.loads((tmp_path / "long.json").read_text())
    assert summary["benchmark"] == "long" and summary["epochs_generated"] == 40
    assert "--name long" in (tmp_path / "long.md").read_text()
    assert not (tmp_path / "darcy_mano_tuned_lr.json").exists()
