"""Single-split files: train/test requests without a split rule are refused; with a rule the two
splits are disjoint and together hold every sample (mini_car, NetCDF, unnamed neuraloperator .pt,
one HDF5 file of The Well); files with a division of their own refuse a rule."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sciattn.pde_data import load
from sciattn.pde_data.neuralop_pt import write_neuralop_pt
from sciattn.pde_data.splits import parse_split_rule, split_indices
from sciattn.pde_data.xarray_data import write_xarray

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_shapenet_car import mini_car_dict  # noqa: E402
from test_the_well import B as WELL_TRAJECTORIES  # noqa: E402
from test_the_well import write_well  # noqa: E402


def _disjoint_cover(train, test, n):
    train, test = list(train), list(test)
    assert train and test
    assert not set(train) & set(test)
    assert sorted(train + test) == list(range(n))


@pytest.mark.parametrize("rule,n,want_test", [("last:1", 3, [2]), ("last:3", 10, [7, 8, 9]), ("first:2", 5, [0, 1]),
                                              ("last:25%", 8, [6, 7]), ("first:50%", 6, [0, 1, 2]),
                                              ("last:10%", 25, [23, 24])])
def test_split_rule_gives_disjoint_splits_covering_the_file(rule, n, want_test):
    train = split_indices(n, "train", rule, what="f")
    test = split_indices(n, "test", rule, what="f")
    assert list(test) == want_test
    _disjoint_cover(train, test, n)
    assert list(split_indices(n, None, None, what="f")) == list(range(n))


def test_split_rule_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"split: 'f.pt' holds one set of 4 samples with no train/test division, "
                                         r"so split='test' would mean every sample .*expected split=None"):
        split_indices(4, "test", None, what="'f.pt'")
    with pytest.raises(ValueError, match=r"split: .* so split='train' would mean every sample"):
        split_indices(4, "train", None, what="'f.pt'")
    for bad in ("last", "last:0", "tail:2", "last:-1", "last:2.5", "last:100%", "last:0%", 3):
        with pytest.raises(ValueError, match=r"split_rule: expected"):
            parse_split_rule(bad)
    with pytest.raises(ValueError, match=r"split_rule: expected 1 <= K <= 3 .* got 'last:4' \(K = 4\)"):
        split_indices(4, "test", "last:4", what="f")
    with pytest.raises(ValueError, match=r"split_rule: .* got 'last:10%' \(K = 0\)"):
        split_indices(5, "test", "last:10%", what="f")
    with pytest.raises(ValueError, match=r"split: expected 'train' or 'test' with split_rule='last:1', got None"):
        split_indices(4, None, "last:1", what="f")
    with pytest.raises(ValueError, match=r"split: expected one of \['train', 'test'\] or None, got 'valid'"):
        split_indices(4, "valid", "last:1", what="f")


def test_mini_car_fixture_refuses_a_split_without_a_rule(tmp_path):
    path = tmp_path / "mini_car.pt"
    torch.save([mini_car_dict(0), mini_car_dict(1), mini_car_dict(2)], path)
    for split in ("train", "test"):
        with pytest.raises(ValueError, match=rf"split: .*mini_car.pt' holds one set of 3 cars .*split='{split}'"):
            load(path, split=split)
    assert len(load(path)) == 3  # no split asked for: every car
    train = load(path, split="train", split_rule="last:1")
    test = load(path, split="test", split_rule="last:1")
    _disjoint_cover(train.meta["indices"], test.meta["indices"], 3)
    assert [float(s["y"][0, 0]) for s in train] == [0.0, 100.0] and float(test[0]["y"][0, 0]) == 200.0
    assert test.meta["split"] == "test" and "last 1 cars" in test.meta["split_convention"]


def test_real_mini_car_train_and_test_are_different_cars(shared_data):
    path = shared_data / "mini_car.pt"
    raw = torch.load(path, weights_only=True)
    with pytest.raises(ValueError, match=r"split: .*no train/test division"):
        load(path, split="test")
    train = load(path, split="train", split_rule="last:1")
    test = load(path, split="test", split_rule="last:1")
    assert len(train) == 2 and len(test) == 1
    torch.testing.assert_close(test[0]["y"], raw[2]["press"].T.float(), rtol=0, atol=0)
    for s in train:  # no test car among the training cars
        assert not torch.equal(s["pos"], test[0]["pos"])
    torch.testing.assert_close(train[1]["pos"], raw[1]["vertices"].float(), rtol=0, atol=0)


def test_netcdf_store_is_a_single_split_file(tmp_path):
    a = np.arange(5 * 4 * 4, dtype=np.float32).reshape(5, 4, 4)
    path = write_xarray(tmp_path / "d.nc", {"a": (("sample", "x", "y"), a), "u": (("sample", "x", "y"), -a)},
                        inputs=["a"], outputs=["u"])
    with pytest.raises(ValueError, match=r"split: .*d.nc' holds one set of 5 samples"):
        load(path, split="test")
    assert len(load(path)) == 5
    train = load(path, split="train", split_rule="last:2")
    test = load(path, split="test", split_rule="last:2")
    _disjoint_cover(train.index.tolist(), test.index.tolist(), 5)
    np.testing.assert_array_equal(test[0]["x"][0].numpy(), a[3])
    np.testing.assert_array_equal(train[2]["y"][0].numpy(), -a[2])


def test_neuralop_pt_named_files_are_their_split_and_unnamed_ones_need_a_rule(tmp_path):
    y = torch.arange(4 * 16, dtype=torch.float32).reshape(4, 4, 4)
    named = write_neuralop_pt(tmp_path / "darcy_train_4.pt", torch.zeros(4, 4, 4), y)
    assert len(load(named)) == len(load(named, split="train")) == 4
    with pytest.raises(ValueError, match=r"split: .*darcy_train_4.pt' holds the 'train' split .*got split='test'"):
        load(named, split="test")
    val = load(named, split="test", split_rule="last:1")  # a held-out part of the training file
    assert torch.equal(val.y[:, 0], y[3:])
    plain = write_neuralop_pt(tmp_path / "f_4.pt", torch.zeros(4, 4, 4), y)
    with pytest.raises(ValueError, match=r"split: .*f_4.pt' holds one set of 4 samples"):
        load(plain, split="train")
    train = load(plain, split="train", split_rule="first:1")
    test = load(plain, split="test", split_rule="first:1")
    _disjoint_cover(train.meta["indices"], test.meta["indices"], 4)
    assert torch.equal(test.y[:, 0], y[:1]) and torch.equal(train.y[:, 0], y[1:])


def test_one_well_file_splits_by_whole_trajectories(tmp_path):
    path = tmp_path / "w.hdf5"
    write_well(path)
    full = load(path)
    with pytest.raises(ValueError, match=rf"split: .*w.hdf5' holds one set of {WELL_TRAJECTORIES} trajectories"):
        load(path, split="test")
    train = load(path, split="train", split_rule="last:1")
    test = load(path, split="test", split_rule="last:1")
    assert len(train) + len(test) == len(full)
    assert {t for _, t in train.meta["trajectories"]} == set(range(WELL_TRAJECTORIES - 1))
    assert test.meta["trajectories"] == [(0, WELL_TRAJECTORIES - 1)]
    trajs = {"train": set(), "test": set()}
    for name, ds in (("train", train), ("test", test)):
        for i in range(len(ds)):
            trajs[name].add(full.locate(ds.indices[i])[1])
            torch.testing.assert_close(ds[i]["x"], full[ds.indices[i]]["x"], rtol=0, atol=0)
    assert not trajs["train"] & trajs["test"]  # no trajectory on both sides
    assert test.in_channels == full.in_channels  # the reader's attributes pass through


def test_files_with_their_own_division_refuse_a_rule(tmp_path):
    import h5py

    path = tmp_path / "1D_Advection.hdf5"
    with h5py.File(path, "w") as fh:
        fh["tensor"] = np.zeros((10, 4, 8), dtype=np.float32)
        fh["x-coordinate"] = np.linspace(0, 1, 8)
        fh["t-coordinate"] = np.linspace(0, 1, 5)
    with pytest.raises(ValueError, match=r"split_rule: .*1D_Advection.hdf5' has a train/test division of its own "
                                         r"\(PDEBench's test_fraction\); expected None, got 'last:1'"):
        load(path, split="test", split_rule="last:1")
    with pytest.raises(ValueError, match=r"split_rule: benchmark 'darcy' has its own split"):
        load("darcy", split="test", split_rule="last:1")
