"""Every file of the shared real-data folder loads through ``load`` with the right shapes and dtypes."""

from __future__ import annotations

import torch

from sciattn.pde_data import load


def test_darcy_files(shared_data):
    train, test = load(shared_data / "darcy_train_16.pt"), load(shared_data / "darcy_test_16.pt")
    assert train.x.shape == (1000, 1, 16, 16) and test.x.shape == (50, 1, 16, 16)
    assert train.x.dtype == torch.float32 and set(train.x.unique().tolist()) == {0.0, 1.0}
    raw = torch.load(shared_data / "darcy_test_16.pt", weights_only=True)
    assert torch.equal(test.y[:, 0], raw["y"])
    assert torch.equal(load("darcy_pt", split="test", root=shared_data).y, test.y)


def test_burgers_files_keep_time_as_output_channels(shared_data):
    train, test = load(shared_data / "burgers_train_16.pt"), load(shared_data / "burgers_test_16.pt")
    assert train.x.shape == (800, 1, 16) and train.y.shape == (800, 17, 16)
    assert test.x.shape == (400, 1, 16) and test.y.dtype == torch.float32
    torch.testing.assert_close(test.y[:, 0], test.x[:, 0])  # y[:, 0] is the initial condition


def test_mini_car_loads_as_weighted_point_sets(shared_data):
    ds = load(shared_data / "mini_car.pt")
    raw = torch.load(shared_data / "mini_car.pt", weights_only=True)
    assert len(ds) == 3
    s = ds[0]
    assert s["x"].shape == (3586, 6) and s["pos"].shape == (3586, 3) and s["y"].shape == (3586, 1)
    assert s["x"].dtype == torch.float32 and (s["weights"] > 0).all()
    torch.testing.assert_close(s["y"], raw[0]["press"].T.float())
