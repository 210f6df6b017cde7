"""Named presets of the papers' data protocols: documented values, quick builds with checked values, the CLI path."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sciattn.pde_data.presets import PRESETS, describe_presets, generator_call, get_preset, load_preset

# The protocols as the sources state them (see each preset's ``source``), written out independently of presets.py.
DOCUMENTED = {
    "fno_burgers": ("burgers", 1024, {"nu": 0.1, "t_final": 1.0, "sigma": 25.0, "tau": 5.0, "alpha": 2.0,
                                      "fine_resolution": 8192}, {"n_train": 1000, "n_test": 100}),
    "neuralop_burgers": ("burgers", 16, {"nu": 0.01, "t_final": 0.96, "tau": 5.0, "alpha": 4.0},
                         {"n_train": 800, "n_test": 400, "n_times": 17}),
    "fno_navier_stokes": ("navier_stokes", 64, {"nu": 1e-5, "t_final": 20.0, "record_steps": 20, "dt": 1e-4,
                                                "alpha": 2.5, "tau": 7.0, "fine_resolution": 256},
                          {"n_train": 1000, "n_test": 200, "t_in": 10, "t_out": 10}),
    "fno_darcy": ("darcy", 84, {"alpha": 2.0, "tau": 3.0, "high": 12.0, "low": 3.0, "fine_resolution": 420},
                  {"n_train": 1000, "n_test": 200}),
    "bonev_shallow_water": ("shallow_water", 128, {"grid": "legendre-gauss", "dt": 150.0, "n_steps_between": 24,
                                                   "hamp": 120.0, "havg": 1.0e4, "decay": 0.0,
                                                   "hyperdiffusion_time": 7200.0, "hyperdiffusion_order": 4.0},
                            {"nlon": 256, "step_seconds": 3600.0}),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see tests/conftest.py


def test_every_preset_has_the_documented_values():
    assert set(PRESETS) == set(DOCUMENTED)
    for name, (generator, resolution, params, protocol) in DOCUMENTED.items():
        p = get_preset(name)
        assert (p.generator, p.resolution) == (generator, resolution), name
        assert {k: p.params[k] for k in params} == params, name
        assert {k: p.protocol[k] for k in protocol} == protocol, name
        assert p.description and p.source
        if "fine_resolution" in p.params:
            assert p.params["fine_resolution"] % p.resolution == 0, name  # the stored grid is an exact restriction
    # the Darcy stored grid: FNO's 421 nodes subsampled by 5 are the 85 nodes j/84; 84 of them are stored here
    assert (420 // 84, 420 // 5 + 1) == (5, 85)
    # the speed-matched mach: max |u| = mach sqrt(g havg) = 9.4 m/s, torch-harmonics' 8-9 m/s
    assert get_preset("bonev_shallow_water").params["mach"] * math.sqrt(9.80616 * 1.0e4) == pytest.approx(9.4, abs=0.05)
    assert [row["name"] for row in describe_presets()] == sorted(PRESETS)


def test_overrides_and_bad_names():
    generator, params, attrs = generator_call("fno_darcy", {"fine_resolution": 84})
    assert generator == "darcy" and params["fine_resolution"] == 84 and params["low"] == 3.0
    assert attrs["preset"] == "fno_darcy"
    assert get_preset("fno_darcy").params["fine_resolution"] == 420  # an override never changes the preset
    with pytest.raises(ValueError, match=r"name: expected a preset, one of \['bonev_shallow_water'"):
        get_preset("fno_darcy_85")
    with pytest.raises(TypeError):
        get_preset("fno_darcy").params["low"] = 1.0  # read-only


def test_burgers_presets_are_their_regimes():
    fno = load_preset("fno_burgers", 2, resolution=128, small=True)
    assert fno["x"].shape == fno["y"].shape == (2, 128)
    assert fno["y"].std() / fno["x"].std() < 0.05  # nu = 0.1: almost all of u0 decays by t = 1
    neuralop = load_preset("neuralop_burgers", 2, small=True)
    assert neuralop["x"].shape == (2, 16) and 0.2 < neuralop["y"].std() / neuralop["x"].std() < 0.8


def test_darcy_preset_is_piecewise_constant_and_solved_at_421_nodes():
    d = load_preset("fno_darcy", 1)  # the protocol's own solve: 421 x 421 nodes, stored at 84 (~3 s)
    assert d["x"].shape == d["y"].shape == (1, 84, 84)
    assert set(np.unique(d["x"])) == {3.0, 12.0}
    assert np.all(d["y"][:, 0] == 0) and np.all(d["y"][:, :, 0] == 0) and d["y"].max() > 0  # u = 0 on the boundary
    small = load_preset("fno_darcy", 2, small=True)
    assert small["params"]["fine_resolution"] == 84 and small["x"].shape == (2, 84, 84)


def test_navier_stokes_preset_builds_small():
    d = load_preset("fno_navier_stokes", 2, small=True)
    assert d["x"].shape == (2, 64, 64) and d["y"].shape == (2, 64, 64, 2)
    assert np.isfinite(d["y"]).all() and abs(d["x"].mean()) < 1e-4  # zero-mean vorticity
    # nu = 1e-5: over 0.2 time units the vorticity barely changes, yet it does change
    change = np.linalg.norm(d["y"][..., -1] - d["x"]) / np.linalg.norm(d["x"])
    assert 1e-4 < change < 0.5


def test_shallow_water_preset_speeds_and_grid():
    from sciattn.pde_data.sht import SphericalHarmonicTransform

    d = load_preset("bonev_shallow_water", 2, resolution=16)
    x = torch.from_numpy(d["x"]).double()
    assert x.shape == (2, 3, 16, 32)
    sht = SphericalHarmonicTransform(16, 32, "legendre-gauss", lmax=6, mmax=6, radius=6.37122e6)
    u, v = sht.velocity(sht.forward(x[:, 1]), sht.forward(x[:, 2]))
    speed = torch.sqrt(u**2 + v**2).amax(dim=(-2, -1))
    torch.testing.assert_close(speed, torch.full((2,), 0.03 * math.sqrt(9.80616e4), dtype=torch.float64), rtol=0.02,
                               atol=0)
    assert abs(x[:, 0].mean().item() / 9.80616 - 1.0e4) < 200  # geopotential about g * havg


def test_sciattn_data_generate_writes_a_preset(tmp_path):
    import xarray as xr

    from sciattn.pde_data import load
    from sciattn.pde_data.generate import generate_at_resolutions

    (path,) = generate_at_resolutions("neuralop_burgers", 2, [16], tmp_path, progress=False, fine_resolution=64)
    assert path.name == "neuralop_burgers_16.nc"
    with xr.open_dataset(path) as ds:
        assert ds.attrs["preset"] == "neuralop_burgers" and ds.attrs["nu"] == 0.01 and ds.attrs["alpha"] == 4.0
        assert ds.attrs["fine_resolution"] == 64  # the override is recorded
        direct = load_preset("neuralop_burgers", 2, fine_resolution=64)
        np.testing.assert_allclose(ds["solution"].values, direct["y"], atol=1e-6)  # the same samples either way
    assert len(load(str(path))) == 2
    with pytest.raises(ValueError, match="or a preset, one of"):
        generate_at_resolutions("no_such_preset", 1, [16], tmp_path)


@pytest.mark.slow
def test_navier_stokes_preset_full_horizon_at_64():
    d = load_preset("fno_navier_stokes", 2, fine_resolution=64)  # T = 20: 200,000 steps (206 s on 2 shared cores)
    assert d["y"].shape == (2, 64, 64, 20) and np.isfinite(d["y"]).all()


def test_a_preset_as_a_training_source_says_how_to_write_it():
    from sciattn.train.sources import resolve_source

    with pytest.raises(ValueError, match=r"'fno_navier_stokes' is a data preset.*sciattn data generate fno_navier_stokes"):
        resolve_source("fno_navier_stokes")
    assert resolve_source("fno_darcy").kind == "benchmark"  # the real-file benchmark keeps its name
