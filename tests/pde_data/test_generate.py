"""pde_data.generate writers of the sphere, multi-variable and point-set generators: load() reads back the
samples of the training / sweep path (train.data.load_at_resolutions) at the same seed."""

from __future__ import annotations

import pytest
import torch

from sciattn import pde_data
from sciattn.pde_data.generate import GENERATORS, generate_at_resolutions
from sciattn.train.data import load_at_resolutions


def _same(path, want):
    ds = pde_data.load(path)
    assert len(ds) == len(want)
    for i in range(len(want)):
        for k, v in want[i].items():
            torch.testing.assert_close(ds[i][k], v.float(), rtol=0, atol=0)
    return ds


def test_every_built_in_generator_has_a_writer():
    assert {"shallow_water", "coupled_navier_stokes", "darcy_irregular", "navier_stokes_irregular"} <= set(GENERATORS)


def test_navier_stokes_irregular_writes_point_files(tmp_path):
    params = {"fine_resolution": 16, "record_steps": 3, "t_final": 0.3, "dt": 0.05, "t_in": 1}
    paths = generate_at_resolutions("navier_stokes_irregular", 2, [40, 64], tmp_path, seed=3, progress=False,
                                    **params)
    want = load_at_resolutions("navier_stokes_irregular", [40, 64], root=tmp_path / "cache", n_samples=2, seed=3,
                               **params)
    for path, r in zip(paths, (40, 64)):
        ds = _same(path, want[r])
        s = ds[0]
        assert s["x"].shape == (r, 1) and s["y"].shape == (r, 2) and s["pos"].shape == (r, 2)
        assert ds.meta["layout"] == "points" and ds.meta["attrs"]["n_points"] == r
        with pytest.raises(ValueError, match="point samples"):
            ds.to_grid_dataset()


def test_shallow_water_files_carry_the_sphere(tmp_path):
    paths = generate_at_resolutions("shallow_water", 2, [8, 12], tmp_path, seed=2, progress=False)
    want = load_at_resolutions("shallow_water", [8, 12], root=tmp_path / "cache", n_samples=2, seed=2, n_traj=0)
    for path, r in zip(paths, (8, 12)):
        ds = _same(path, want[r])
        assert ds.meta["domain"] == {"kind": "sphere", "grid": "equiangular", "nlat": r, "nlon": 2 * r}
        assert len(ds.meta["coords"]["lat"]) == r and len(ds.meta["coords"]["lon"]) == 2 * r
        assert ds.meta["variables"]["y"] == ["geopotential", "vorticity", "divergence"]


def test_coupled_navier_stokes_boussinesq_has_theta(tmp_path):
    path, = generate_at_resolutions("coupled_navier_stokes", 2, [8], tmp_path, seed=1, progress=False,
                                    system="boussinesq")
    want = load_at_resolutions("coupled_navier_stokes", [8], root=tmp_path / "cache", n_samples=2, seed=1,
                               system="boussinesq")
    ds = _same(path, want[8])
    assert ds.meta["variables"]["x"] == ["u", "v", "w", "theta"]


def test_point_file_without_pos_is_refused(tmp_path):
    import numpy as np

    from sciattn.pde_data.xarray_data import load_xarray, write_xarray

    path = write_xarray(tmp_path / "p.nc", {"x": (("sample", "point"), np.zeros((1, 4))),
                                            "y": (("sample", "point"), np.zeros((1, 4)))},
                        inputs=["x"], outputs=["y"], attrs={"sciattn_layout": "points"})
    with pytest.raises(ValueError, match="needs the variables 'pos' and 'weights'"):
        load_xarray(path)
