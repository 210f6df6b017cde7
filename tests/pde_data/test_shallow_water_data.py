"""Tests of the shallow-water dataset and its HDF5 cache sciattn.pde_data.shallow_water_data (the solver is
tested in test_shallow_water.py), and of the re-export of its names from sciattn.pde_data.shallow_water."""

from __future__ import annotations

import math
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from sciattn.pde_data import shallow_water as swe
from sciattn.pde_data import shallow_water_data as swd

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see tests/conftest.py


def test_generate_pairs_and_trajectories_follow_the_solver(tmp_path):
    kw = {"n_traj": 2, "traj_len": 3, "dt": 900.0, "n_steps_between": 2}
    d = swd.generate_shallow_water(3, 16, 32, "legendre-gauss", seed=4, **kw)
    assert d["x"].shape == d["y"].shape == (3, 3, 16, 32) and d["x"].dtype == np.float32
    assert d["trajectories"].shape == (2, 4, 3, 16, 32)
    np.testing.assert_allclose(d["times"], [0.0, 1800.0, 3600.0, 5400.0])
    s = swe.ShallowWaterSolver(16, 32, "legendre-gauss", dt=900.0)
    spec = s.random_initial_condition(np.random.default_rng([4, 0, 1]))  # sample i uses [seed, 0, i]
    np.testing.assert_allclose(d["x"][1], s.to_grid(spec).numpy(), rtol=1e-6, atol=1e-12)
    y = s.to_grid(s.step(spec, 2)).numpy()
    scale = np.abs(y).max((-2, -1), keepdims=True)
    assert np.abs(d["y"][1] - y).max() < 1e-6 * scale.max() and np.all(np.abs(d["y"][1] - y) <= 1e-6 * scale)
    tr = torch.from_numpy(d["trajectories"][1]).double()
    step = s.integrate(tr[1], 2).numpy()
    assert np.all(np.abs(step - tr[2].numpy()) <= 1e-5 * np.abs(tr[2].numpy()).max((-2, -1), keepdims=True))
    # sample i is independent of n_samples; statistics are area-weighted over x and y
    d2 = swd.generate_shallow_water(2, 16, 32, "legendre-gauss", seed=4, **kw)
    np.testing.assert_array_equal(d2["x"], d["x"][:2])
    both = np.concatenate([d["x"], d["y"]]).astype(np.float64)
    q = d["weights"]
    assert q.sum() == pytest.approx(4 * math.pi)
    mean = (both * q).sum((0, 2, 3)) / (6 * q.sum())
    np.testing.assert_allclose(d["mean"], mean, rtol=1e-12, atol=1e-20)
    std = np.sqrt((((both - mean[:, None, None]) ** 2) * q).sum((0, 2, 3)) / (6 * q.sum()))
    np.testing.assert_allclose(d["std"], std, rtol=1e-10)
    assert d["std"][0] > 0 and abs(d["mean"][1]) < 1e-3 * d["std"][1]  # mean vorticity vanishes


def test_cache_round_trip_attributes_and_regeneration(tmp_path, monkeypatch):
    kw = {"n_traj": 1, "traj_len": 2, "n_steps_between": 1, "dt": 1200.0, "mach": 0.1}
    first = swd.load_or_generate_shallow_water(tmp_path, 2, 8, 16, "equiangular", seed=1, **kw)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].name.startswith("shallow_water_") and files[0].suffix == ".h5"
    with h5py.File(files[0], "r") as fh:
        assert fh.attrs["mach"] == 0.1 and fh.attrs["nlat"] == 8 and fh.attrs["grid"] == "equiangular"
        assert fh.attrs["lmax"] == 3 and fh.attrs["hyperdiffusion_time"] == 7200.0 and fh.attrs["n_samples"] == 2
        assert set(fh.keys()) == set(first)

    def boom(*args, **kwargs):
        raise AssertionError("regenerated although the cache matches")

    monkeypatch.setattr(swd, "generate_shallow_water", boom)  # the name load_or_generate looks up
    again = swd.load_or_generate_shallow_water(tmp_path, 2, 8, 16, "equiangular", seed=1, **kw)
    for key in first:
        np.testing.assert_array_equal(again[key], first[key])
    monkeypatch.undo()
    with h5py.File(files[0], "a") as fh:
        fh.attrs["mach"] = 0.3  # stale file under the request's name
    with pytest.warns(UserWarning, match="regenerating"):
        fresh = swd.load_or_generate_shallow_water(tmp_path, 2, 8, 16, "equiangular", seed=1, **kw)
    np.testing.assert_array_equal(fresh["x"], first["x"])
    assert len(list(tmp_path.iterdir())) == 1  # atomic replace, no temporary left behind


def test_bad_dataset_arguments_name_themselves():
    with pytest.raises(TypeError, match="params: expected keywords among"):
        swd.generate_shallow_water(1, 8, 16, viscosity=1.0)
    with pytest.raises(ValueError, match="hamp: expected a non-negative number"):
        swd.generate_shallow_water(1, 8, 16, hamp=-1.0)


def test_dataset_names_are_re_exported_from_the_solver_module():
    for name in swd.__all__:
        assert name in swe.__all__ and getattr(swe, name) is getattr(swd, name)
    assert set(swd.__all__) <= set(dir(swe))
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        swe.nonexistent  # noqa: B018
    # a fresh interpreter that imports the data module first (so shallow_water is loaded while shallow_water_data
    # is still half-initialised): an eager re-export at the end of shallow_water would raise ImportError here
    code = ("import sciattn.pde_data.shallow_water_data; "
            "from sciattn.pde_data.shallow_water import ShallowWaterSolver, load_or_generate_shallow_water; "
            "from sciattn.pde_data.shallow_water import *; print(generate_shallow_water.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "sciattn.pde_data.solvers.shallow_water.data"  # defined there; the old path is its alias
