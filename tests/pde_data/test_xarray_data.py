"""xarray / NetCDF datasets: channel stacking, axis order, splits, round trip, errors."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from sciattn.pde_data.xarray_data import XarrayDataset, load_xarray, write_xarray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _file_errors import check_missing_and_corrupt  # noqa: E402


def _dataset(n=5, nx=4, ny=3, nt=2):
    s, x, y, t = np.meshgrid(np.arange(n), np.arange(nx), np.arange(ny), np.arange(nt), indexing="ij")
    code = 1000 * s + 100 * t + 10 * x + y  # value encodes (sample, time, x, y)
    return xr.Dataset(
        {
            "perm": (("sample", "x", "y"), code[..., 0].astype(np.float64)),
            "vort": (("sample", "time", "x", "y"), code.transpose(0, 3, 1, 2).astype(np.float32)),
            "press": (("sample", "x", "y"), -code[..., 0].astype(np.float32)),
        },
        coords={"x": np.linspace(0, 1, nx), "y": np.linspace(0, 2, ny)},
        attrs={"units": "m"},
    )


def test_channels_stack_variables_and_extra_dims_in_order():
    ds = XarrayDataset(_dataset(), inputs=["perm", "vort"], outputs=["press"])
    item = ds[3]
    assert item["x"].shape == (3, 4, 3) and item["y"].shape == (1, 4, 3)
    assert item["x"].dtype == torch.float32
    assert item["x"][0, 2, 1] == 3000 + 21  # perm: sample 3, x=2, y=1
    assert item["x"][2, 2, 1] == 3000 + 100 + 21  # vort at time 1
    assert item["y"][0, 1, 2] == -(3000 + 12)
    assert ds.meta["variables"] == {"x": ["perm", "vort[time=0]", "vort[time=1]"], "y": ["press"]}
    np.testing.assert_allclose(ds.meta["coords"]["y"], [0, 1, 2])


def test_transposed_storage_is_read_in_spatial_order():
    base = _dataset()
    swapped = base.assign(press=base["press"].transpose("y", "sample", "x"))
    a = XarrayDataset(base, inputs=["perm"], outputs=["press"])[1]["y"]
    b = XarrayDataset(swapped, inputs=["perm"], outputs=["press"], spatial_dims=["x", "y"])[1]["y"]
    assert torch.equal(a, b)


def test_sample_selection_gives_first_and_last_of_a_split():
    ds = XarrayDataset(_dataset(), inputs=["perm"], outputs=["press"], samples=slice(3, None))
    assert len(ds) == 2
    assert ds[0]["x"][0, 0, 0] == 3000 and ds[-1]["x"][0, 0, 0] == 4000


def test_netcdf_round_trip_needs_no_arguments(tmp_path):
    base = _dataset()
    path = write_xarray(tmp_path / "d.nc", {k: (base[k].dims, base[k].values) for k in base.data_vars},
                        inputs=["perm"], outputs=["press", "vort"], coords={"x": base.x.values, "y": base.y.values},
                        attrs={"seed": 3})
    ds = load_xarray(path)
    assert ds.meta["attrs"]["seed"] == 3
    grid = ds.to_grid_dataset()
    assert grid.x.shape == (5, 1, 4, 3) and grid.y.shape == (5, 3, 4, 3)
    assert torch.equal(grid.y[4, 0], torch.from_numpy(base["press"].values[4]))


def test_errors_name_the_problem(tmp_path):
    check_missing_and_corrupt(load_xarray, tmp_path / "nope.nc", "nope.nc", tmp_path / "bad.nc", b"not netcdf", "bad.nc")
    with pytest.raises(ValueError, match=r"variables \['temp'\] not found"):
        XarrayDataset(_dataset(), inputs=["temp"], outputs=["press"])
    with pytest.raises(ValueError, match="inputs: expected variable names"):
        XarrayDataset(_dataset())
    with pytest.raises(ValueError, match="sample_dim: variable 'perm'"):
        XarrayDataset(_dataset(), inputs=["perm"], outputs=["press"], sample_dim="member")
