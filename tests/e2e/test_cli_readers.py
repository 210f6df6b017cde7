"""``sciattn train`` end to end on a small file of every reader's format, written here in the exact
on-disk schema (the writers of tests/pde_data where they exist), and on a generator name.

Each run trains a few epochs through ``sciattn.train.cli.main`` and checks that the metrics are
finite, the training loss fell, and (where the data is a real solution, cheap to learn) the test
error is below a stated bound.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sciattn.train.cli import main

PDE_TESTS = Path(__file__).resolve().parents[1] / "pde_data"

GRID_MODEL = """
[model]
name = "galerkin_transformer"
d_model = 16
n_layers = 1
n_heads = 2
n_modes = 4
regressor_width = 8
"""
POINT_MODEL = """
[model]
name = "erwin"
c_hidden = [8, 16]
ball_sizes = [8, 8]
enc_depths = [1, 1]
dec_depths = [1]
n_heads = 2
"""
TRAIN = """
[train]
epochs = {epochs}
batch_size = 4
lr = 1e-2
seed = 1
tensorboard = false
"""


def _helpers(name: str):
    """A fixture-writer module of tests/pde_data (their writers produce the readers' exact schemas)."""
    spec = importlib.util.spec_from_file_location(f"_e2e_{name}", PDE_TESTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _train(tmp_path, data: str, *, model: str = GRID_MODEL, epochs: int = 4, extra: str = "", sets=()):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(model + "\n[data]\n" + data + "\n" + TRAIN.format(epochs=epochs) + extra)
    out = tmp_path / "run"
    rc = main(["train", str(cfg), "--out", str(out), "--no-progress", *[a for s in sets for a in ("--set", s)]])
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    losses = [h["train_loss"] for h in metrics["history"]]
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0], losses
    for name, m in metrics["test"].items():
        assert math.isfinite(m["rel_l2"]) and m["rel_l2"] > 0, (name, m)
    return metrics


@pytest.fixture(scope="module")
def darcy_arrays():
    from sciattn.pde_data.darcy import generate_darcy

    a, u = generate_darcy(24, [16], seed=3)[16]
    return a.astype(np.float64), u.astype(np.float64)


@pytest.mark.parametrize("version", ["v5", "v7.3"])
def test_fno_darcy_mat(tmp_path, darcy_arrays, version):
    mat = _helpers("test_fno_mat")
    a, u = darcy_arrays
    path = mat.WRITERS[version](tmp_path / "piececonst.mat", {"coeff": a, "sol": u})
    m = _train(tmp_path, f'train = "{path}"\nn_train = 20\nn_test = 4\n', epochs=6)
    assert m["data_source"]["reader"] == "fno_darcy_mat" and m["data_source"]["split_rule"] == "test_last"
    assert m["test"]["test_16x16"]["rel_l2"] < 0.35  # 0.20 after 6 epochs, 0.56 after 1; the zero field scores 1


def test_fno_navier_stokes_mat_trains_a_rollout(tmp_path):
    from sciattn.pde_data.navier_stokes import generate_navier_stokes

    mat = _helpers("test_fno_mat")
    _, u = generate_navier_stokes(12, [16], seed=0, t_final=4.0, record_steps=8, dt=5e-3)[16]
    path = mat.write_v5(tmp_path / "ns.mat", {"u": u.astype(np.float64)})  # (N, X, Y, T)
    m = _train(tmp_path, f'train = "{path}"\nn_train = 8\nn_test = 4\noptions = {{ t_in = 4, t_out = 4 }}\n',
               extra="rollout_steps = 2\n")
    roll = m["rollout"]["test_16x16"]
    assert len(roll["frame_errors"]) == 4 and roll["steps_per_application"] == 1
    assert all(0 < e < 1 for e in roll["frame_errors"]) and roll["verdict"] in ("stable", "growing")


def test_pdebench_hdf5_time_series(tmp_path):
    pb = _helpers("test_pdebench")
    path = pb.write_single(tmp_path / "1D_Advection_Sols_beta0.1.hdf5", n=20, t=6, x=8)
    m = _train(tmp_path, f'train = "{path}"\noptions = {{ t_in = 2, t_out = 2, test_fraction = 0.25 }}\n',
               extra="rollout_steps = 2\n")
    assert m["data_source"]["reader"] == "pdebench" and m["data_source"]["split_rule"] == "reader"
    assert m["meta"]["time_series"] and "rollout" in m


def test_the_well_hdf5(tmp_path):
    well = _helpers("test_the_well")
    path = well.write_well(tmp_path / "tiny_well.hdf5")
    m = _train(tmp_path, f'train = "{path}"\nn_test = 2\n', sets=["train.batch_size=2"])
    assert m["data_source"]["reader"] == "the_well"
    assert m["meta"]["frame_channels"] == 8 and m["meta"]["time_series"]


def test_geofno_elasticity_points_and_airfoil_mesh(tmp_path):
    geo = _helpers("test_geofno")
    (tmp_path / "el" / "Meshes").mkdir(parents=True)
    geo.write_elasticity(tmp_path / "el" / "Meshes", p=40, d=2, n=12)
    m = _train(tmp_path / "el", f'train = "geofno_elasticity"\nroot = "{tmp_path / "el"}"\nn_train = 8\nn_test = 4\n',
               model=POINT_MODEL)
    assert m["data_source"]["kind"] == "benchmark" and m["meta"]["layout"] == "points"
    (tmp_path / "af").mkdir()
    geo.write_mesh(tmp_path / "af", "NACA_Cylinder", n=12)
    m = _train(tmp_path / "af", f'train = "geofno_airfoil"\nroot = "{tmp_path / "af"}"\nn_train = 8\nn_test = 4\n'
               "as_points = true\n", model=POINT_MODEL)
    assert m["meta"]["layout"] == "points" and m["test"]["test"]["n_samples"] == 4


def test_shapenet_car_folds_and_mini_car(tmp_path):
    car = _helpers("test_shapenet_car")
    root = tmp_path / "cars"
    for fold in range(3):
        for k in range(3):
            car.write_sample(root / f"param{fold}" / f"car_{k}", fold, k, 20 + 3 * k)  # ragged clouds
    m = _train(tmp_path, f'train = "shapenet_car"\nroot = "{root}"\n', model=POINT_MODEL,
               sets=["train.batch_size=3"])
    assert m["test"]["test"]["n_samples"] == 3  # fold param0
    mini = tmp_path / "mini_car.pt"
    torch.save([car.mini_car_dict(s) for s in range(5)], mini)
    m = _train(tmp_path / "mini", f'train = "{mini}"\nn_test = 1\n', model=POINT_MODEL, sets=["train.batch_size=2"])
    assert m["data_source"]["reader"] == "mini_car" and m["test"]["test"]["n_samples"] == 1


def test_neuralop_pt_pair_of_files(tmp_path, darcy_arrays):
    from sciattn.pde_data.neuralop_pt import write_neuralop_pt

    a, u = (torch.from_numpy(t).float() for t in darcy_arrays)
    write_neuralop_pt(tmp_path / "darcy_train_16.pt", a[:20] > 5, 100 * u[:20])
    write_neuralop_pt(tmp_path / "darcy_test_16.pt", a[20:] > 5, 100 * u[20:])
    m = _train(tmp_path, f'train = "{tmp_path / "darcy_train_16.pt"}"\ntest = "{tmp_path / "darcy_test_16.pt"}"\n'
               "resolution = 8\ntest_resolutions = [8, 16]\n", epochs=6)
    assert set(m["test"]) == {"test_8x8", "test_16x16"} and m["train_resolution"] == [8, 8]
    assert m["test"]["test_8x8"]["rel_l2"] < 0.35


def test_netcdf_from_sciattn_data_generate(tmp_path, capsys):
    assert main(["data", "generate", "darcy", "--n", "24", "--resolution", "16", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    path = tmp_path / "darcy_16.nc"
    m = _train(tmp_path, f'train = "{path}"\nn_train = 20\nn_test = 4\n', epochs=6)
    assert m["data_source"]["reader"] == "xarray"
    assert m["meta"]["variables"] == {"x": ["coefficient"], "y": ["pressure"]}
    assert m["test"]["test_16x16"]["rel_l2"] < 0.35
    bad = tmp_path / "broken.nc"
    bad.write_bytes(b"\x00not netcdf")
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(cfg.read_text().replace(str(path), str(bad)))
    capsys.readouterr()
    assert main(["train", str(cfg), "--out", str(tmp_path / "r2"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "xarray" in err and "broken.nc" in err and "weights_only" not in err


def test_generator_name(tmp_path):
    m = _train(tmp_path, f'train = "darcy"\nresolution = 16\ntest_resolutions = [16, 32]\nn_train = 20\nn_test = 4\n'
               f'cache_dir = "{tmp_path}"\n', epochs=6)
    assert m["data_source"] == {"kind": "generated", "name": "darcy", "params": {}, "seed": 0, "resolution": 16,
                                "test_resolutions": [16, 32], "n_train": 20, "n_test": 4, "cache_dir": str(tmp_path)}
    assert set(m["rel_l2_by_resolution"]) == {"16", "32"} and m["test"]["test_16"]["rel_l2"] < 0.35


@pytest.mark.parametrize("model", [
    '[model]\nname = "bsa_transformer"\nwidth = 16\ndepth = 1\nn_heads = 2\nball_size = 16\n',
    '[model]\nname = "galerkin_transformer"\nd_model = 16\nn_layers = 1\nn_heads = 2\nregressor = "pointwise"\n',
], ids=["bsa", "galerkin_points"])
def test_point_operators_on_a_generated_point_set(tmp_path, model):
    m = _train(tmp_path, f'train = "darcy_irregular"\nresolution = 64\nn_train = 8\nn_test = 4\ncache_dir = "{tmp_path}"\n'
               f'root = "{tmp_path}"\noptions = {{ fine_resolution = 16 }}\n', model=model, epochs=3)
    assert m["meta"]["layout"] == "points" and m["test"]["test_64"]["rel_h1"] is None
