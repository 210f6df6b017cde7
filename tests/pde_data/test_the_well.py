"""The Well HDF5 reader: schema, channel order, windows, strides, broadcast, normalisation, laziness, errors.

Fixture values encode their indices, so every check also verifies axis order: channel ``c`` of
trajectory ``b`` at step ``t`` and grid point ``(x, y)`` holds ``F + 1e5 c + 1e4 b + 1e3 t + 10 x + y``
(``F = 1e6 * file``). Channels: 0 density (t0), 1 kappa (t0, neither time- nor sample-varying, so
``F + 1e5 + 10 x + y``), 2-3 velocity_x/_y (t1, last axis D=2), 4-7 stress_xx/xy/yx/yy (t2, (D, D)).
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from sciattn.pde_data.the_well import TheWellDataset, load_stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _helpers as th  # noqa: E402

B, T, NX, NY = 2, 6, 8, 6
NAMES = ["density", "kappa", "velocity_x", "velocity_y", "stress_xx", "stress_xy", "stress_yx", "stress_yy"]


def value(c, b, t, off=0):
    """Expected (NX, NY) frame of channel ``c``, trajectory ``b``, step ``t``."""
    xx, yy = np.meshgrid(np.arange(NX), np.arange(NY), indexing="ij")
    if c == 1:
        b = t = 0
    return off + 1e5 * c + 1e4 * b + 1e3 * t + 10 * xx + yy


def _field(g, name, data, sv=True, tv=True, dv=(True, True), **extra):
    ds = g.create_dataset(name, data=data.astype(np.float32))
    ds.attrs.update({"sample_varying": sv, "time_varying": tv, "dim_varying": list(dv), **extra})


def write_well(path, *, t2=True, off=0, name="tiny_well", kappa_dv=(True, True)):
    """The Well schema: root attrs, dimensions, one BC, one scalar, t0 x2, t1 (.., D), t2 (.., D, D)."""
    b, t, x, y = np.meshgrid(np.arange(B), np.arange(T), np.arange(NX), np.arange(NY), indexing="ij")
    base = off + 1e4 * b + 1e3 * t + 10 * x + y  # (B, T, X, Y)
    with h5py.File(path, "w") as f:
        f.attrs.update(
            {
                "dataset_name": name,
                "grid_type": "cartesian",
                "n_spatial_dims": 2,
                "n_trajectories": B,
                "simulation_parameters": ["alpha"],
                "alpha": 0.5,
            }
        )
        dims = f.create_group("dimensions")
        dims.attrs["spatial_dims"] = ["x", "y"]
        dims.create_dataset("time", data=np.linspace(0, 0.5, T)).attrs["sample_varying"] = False
        for n, size in (("x", NX), ("y", NY)):
            ds = dims.create_dataset(n, data=np.arange(size) / size)
            ds.attrs.update({"sample_varying": False, "time_varying": False})
        bc = f.create_group("boundary_conditions").create_group("x_periodic")
        bc.attrs.update(
            {
                "associated_dims": ["x"],
                "associated_fields": [],
                "bc_type": "periodic",
                "sample_varying": False,
                "time_varying": False,
            }
        )
        bc.create_dataset("mask", data=np.eye(1, NX, 0, dtype=bool)[0] | np.eye(1, NX, NX - 1, dtype=bool)[0])
        sc = f.create_group("scalars")
        sc.attrs["field_names"] = ["alpha"]
        _field(sc, "alpha", np.array(0.5), sv=False, tv=False, dv=())
        g0 = f.create_group("t0_fields")
        g0.attrs["field_names"] = ["density", "kappa"]
        _field(g0, "density", base)
        xx, yy = np.meshgrid(np.arange(NX), np.arange(NY), indexing="ij")
        kappa = off + 1e5 + 10 * xx + yy
        if not kappa_dv[1]:
            kappa = kappa[:, 0]
        _field(g0, "kappa", kappa, sv=False, tv=False, dv=kappa_dv)
        g1 = f.create_group("t1_fields")
        g1.attrs["field_names"] = ["velocity"]
        _field(g1, "velocity", np.stack([base + 1e5 * (2 + d) for d in range(2)], -1))
        g2 = f.create_group("t2_fields")
        g2.attrs["field_names"] = ["stress"] if t2 else []
        if t2:
            comps = [[base + 1e5 * (4 + 2 * i + j) for j in range(2)] for i in range(2)]
            _field(
                g2,
                "stress",
                np.stack([np.stack(r, -1) for r in comps], -2),
                symmetric=False,
                antisymmetric=False,
            )
    return path


def frames(ts, b, off=0, channels=range(8)):
    """Time-major stack: channel k * C + c = frame ts[k], channel c."""
    return np.stack([value(c, b, t, off) for t in ts for c in channels])


STATS = """\
mean:
  density: 2.0E+04
  kappa: 1.0E+05
  stress:
  - - 1.0
    - 2.0
  - - 3.0
    - 4.0
  velocity:
  - 5.0
  - 6.0
std:
  density: 3.0
  kappa: 0.0
  stress: 2.0E+00
  velocity: [7.0, 1.0e-6]
rms:
  density: 1.0
"""


# ------------------------------------------------------------------------------ channels and windows


def test_channel_order_names_and_windows(tmp_path):
    ds = TheWellDataset(write_well(tmp_path / "a.hdf5"), n_steps_input=2, n_steps_output=1)
    assert ds.variables == tuple(NAMES) and ds.meta["variables"] == NAMES
    assert len(ds) == B * (T - 2) and ds.in_channels == 16 and ds.out_channels == 8
    first, last = ds[0], ds[len(ds) - 1]
    assert first["x"].dtype == torch.float32 and first["x"].shape == (16, NX, NY)
    np.testing.assert_array_equal(first["x"].numpy(), frames([0, 1], 0))
    np.testing.assert_array_equal(first["y"].numpy(), frames([2], 0))
    np.testing.assert_array_equal(last["x"].numpy(), frames([3, 4], 1))
    np.testing.assert_array_equal(last["y"].numpy(), frames([5], 1))
    assert ds.locate(5) == (tmp_path / "a.hdf5", 1, 1)  # trajectory-major, then start
    m = ds.meta
    assert (m["dataset_name"], m["grid_type"], m["n_spatial_dims"]) == ("tiny_well", "cartesian", 2)
    assert m["boundary_conditions"]["x_periodic"]["bc_type"] == "PERIODIC"
    assert m["boundary_conditions"]["x_periodic"]["associated_dims"] == ["x"]
    assert float(m["scalars"]["alpha"]) == 0.5 and m["files"][0]["simulation_parameters"] == {"alpha": 0.5}
    assert m["files"][0]["windows_per_trajectory"] == T - 2 and "disjoint" in m["split_convention"]


def test_empty_t2_and_broadcast_of_constant_field(tmp_path):
    ds = TheWellDataset(write_well(tmp_path / "a.h5", t2=False), n_steps_input=3, n_steps_output=2)
    assert ds.variables == tuple(NAMES[:4])
    item = ds[len(ds) - 1]  # trajectory 1, start 1
    np.testing.assert_array_equal(item["x"].numpy(), frames([1, 2, 3], 1, channels=range(4)))
    kappa = item["x"].numpy()[1::4]  # kappa of all 3 frames: identical, trajectory-independent
    assert np.array_equal(kappa, np.broadcast_to(value(1, 0, 0), kappa.shape))
    # a field constant along y (dim_varying [True, False]) is repeated along y
    ds2 = TheWellDataset(write_well(tmp_path / "b.h5", kappa_dv=(True, False)))
    np.testing.assert_array_equal(ds2[3]["x"][1].numpy(), np.repeat(value(1, 0, 0)[:, :1], NY, 1))


def test_time_and_spatial_stride(tmp_path):
    path = write_well(tmp_path / "a.hdf5")
    ds = TheWellDataset(path, n_steps_input=1, n_steps_output=2, time_stride=2, spatial_stride=2)
    assert len(ds) == B * (T - 4) and ds.resolution == (4, 3)
    raw = frames(range(T), 1).reshape(T, 8, NX, NY)
    win = raw[1 : 1 + 5 : 2, :, ::2, ::2]  # start 1, frames 1, 3, 5
    item = ds[3]  # trajectory 1, start 1
    np.testing.assert_array_equal(item["x"].numpy(), win[:1].reshape(8, 4, 3))
    np.testing.assert_array_equal(item["y"].numpy(), win[1:].reshape(16, 4, 3))
    np.testing.assert_array_equal(ds.meta["coordinates"]["x"], np.arange(0, NX, 2) / NX)
    np.testing.assert_array_equal(ds.meta["coordinates"]["time"], np.linspace(0, 0.5, T))


def test_directory_of_two_files_and_split(tmp_path):
    train = tmp_path / "ds" / "data" / "train"
    train.mkdir(parents=True)
    write_well(train / "b_second.hdf5", off=1e6)
    write_well(train / "a_first.hdf5")
    (train / "notes.txt").write_text("ignored")
    ds = TheWellDataset(tmp_path / "ds", split="train")
    assert [p.name for p in ds.paths] == ["a_first.hdf5", "b_second.hdf5"] and len(ds) == 2 * B * (T - 1)
    np.testing.assert_array_equal(ds[0]["x"].numpy(), frames([0], 0))
    np.testing.assert_array_equal(ds[B * (T - 1)]["x"].numpy(), frames([0], 0, off=1e6))
    np.testing.assert_array_equal(ds[len(ds) - 1]["y"].numpy(), frames([5], 1, off=1e6))
    assert len(TheWellDataset(train)) == len(ds)  # the split folder itself
    flat = tmp_path / "flat" / "valid"
    flat.mkdir(parents=True)
    write_well(flat / "a.hdf5")
    assert TheWellDataset(tmp_path / "flat", split="valid").meta["split"] == "valid"


# ------------------------------------------------------------------------------ normalisation


def _expected_norm(item):
    mean = np.array([2e4, 1e5, 5.0, 6.0, 1.0, 2.0, 3.0, 4.0])
    std = np.maximum(np.array([3.0, 0.0, 7.0, 1e-6, 2.0, 2.0, 2.0, 2.0]), 1e-4)
    return (item - mean[:, None, None]) / std[:, None, None]


@pytest.mark.parametrize("parser", ["yaml", "builtin"])
def test_normalisation_from_stats_yaml(tmp_path, monkeypatch, parser):
    if parser == "builtin":
        monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml -> ImportError
    root = tmp_path / "ds"
    (root / "data" / "test").mkdir(parents=True)
    write_well(root / "data" / "test" / "a.hdf5")
    (root / "stats.yaml").write_text(STATS)
    stats = load_stats(root / "stats.yaml")
    assert stats["mean"]["stress"] == [[1.0, 2.0], [3.0, 4.0]] and stats["std"]["velocity"] == [7.0, 1e-6]
    ds = TheWellDataset(root, split="test", normalize=True)
    assert ds.meta["stats_path"] == str(root / "stats.yaml")
    raw = frames([4], 1)
    np.testing.assert_allclose(ds[len(ds) - 1]["x"].numpy(), _expected_norm(raw), rtol=1e-6)


# ------------------------------------------------------------------------------ laziness


def test_reads_only_item_slices_and_pickles(tmp_path, monkeypatch):
    ds = TheWellDataset(write_well(tmp_path / "a.hdf5"), n_steps_input=2, time_stride=2)
    assert ds._files == {}
    assert not any(isinstance(v, (np.ndarray, torch.Tensor, h5py.Dataset)) for v in vars(ds).values())
    calls = th.spy_h5_reads(monkeypatch)
    ds[1]  # trajectory 0, start 1: frames 1, 3, 5
    window = slice(1, 6, 2)
    sp = slice(None, None, 1)
    assert calls == [
        ("/t0_fields/density", (0, window, sp, sp)),
        ("/t0_fields/kappa", (sp, sp)),
        ("/t1_fields/velocity", (0, window, sp, sp)),
        ("/t2_fields/stress", (0, window, sp, sp)),
    ]
    monkeypatch.undo()
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._files == {} and torch.equal(clone[1]["x"], ds[1]["x"])
    batch = next(iter(DataLoader(ds, batch_size=2)))
    assert batch["x"].shape == (2, 16, NX, NY)
    ds.close()
    clone.close()


# ------------------------------------------------------------------------------ errors


def _edit(path, fn):
    with h5py.File(path, "a") as f:
        fn(f)
    return path


def test_schema_errors_name_file_and_contents(tmp_path):
    p = _edit(write_well(tmp_path / "a.hdf5"), lambda f: f.__delitem__("t2_fields"))
    with pytest.raises(ValueError, match=r"a\.hdf5.*missing group.*t2_fields.*holds"):
        TheWellDataset(p)
    p = _edit(write_well(tmp_path / "b.hdf5"), lambda f: f.attrs.__delitem__("n_trajectories"))
    with pytest.raises(ValueError, match=r"b\.hdf5.*lacks attribute 'n_trajectories'; present"):
        TheWellDataset(p)
    p = _edit(write_well(tmp_path / "c.hdf5"), lambda f: f["t1_fields"].__delitem__("velocity"))
    with pytest.raises(ValueError, match=r"c\.hdf5.*missing dataset /t1_fields/velocity"):
        TheWellDataset(p)

    def bad_shape(f):
        del f["t1_fields/velocity"]
        _field(f["t1_fields"], "velocity", np.zeros((B, T, NX, NY, 3)))

    p = _edit(write_well(tmp_path / "d.hdf5"), bad_shape)
    with pytest.raises(
        ValueError, match=r"d\.hdf5.*velocity has shape \(2, 6, 8, 6, 3\), expected \(2, 6, 8, 6, 2\)"
    ):
        TheWellDataset(p)
    p = _edit(
        write_well(tmp_path / "e.hdf5"), lambda f: f["t0_fields/density"].attrs.__delitem__("time_varying")
    )
    with pytest.raises(ValueError, match=r"e\.hdf5.*density lacks attribute 'time_varying'"):
        TheWellDataset(p)


def test_window_split_and_file_errors(tmp_path):
    p = write_well(tmp_path / "a.hdf5")
    with pytest.raises(ValueError, match=r"a\.hdf5.*spans 7 steps.*has 6"):
        TheWellDataset(p, n_steps_input=4, n_steps_output=3)
    with pytest.raises(ValueError, match=r"spans 7 steps"):
        TheWellDataset(p, n_steps_input=2, time_stride=3)
    with pytest.raises(ValueError, match="split: expected one of"):
        TheWellDataset(tmp_path, split="val")
    with pytest.raises(FileNotFoundError, match="split 'test'"):
        TheWellDataset(tmp_path, split="test")
    with pytest.raises(FileNotFoundError, match="nope.hdf5"):
        TheWellDataset(tmp_path / "nope.hdf5")
    with pytest.raises(FileNotFoundError, match=r"no stats\.yaml found"):
        TheWellDataset(p, normalize=True)
    (tmp_path / "stats.yaml").write_text("mean:\n  density: 1.0\nstd:\n  density: 1.0\n")
    with pytest.raises(ValueError, match=r"stats\.yaml.*'mean' lacks field 'kappa'"):
        TheWellDataset(p, normalize=True)
    with pytest.raises(ValueError, match=r"a\.hdf5.*spatial_stride"):
        TheWellDataset(p, spatial_stride=6)
    with pytest.raises(ValueError, match="only meaningful for a dataset directory"):
        TheWellDataset(p, split="train")
    with pytest.raises(IndexError):
        TheWellDataset(p)[B * (T - 1)]
    broken = tmp_path / "broken.hdf5"
    broken.write_bytes(p.read_bytes()[:2000])
    with pytest.raises(ValueError, match=r"broken\.hdf5.*truncated or corrupt"):
        TheWellDataset(broken)
    other = tmp_path / "dir"
    other.mkdir()
    write_well(other / "a.hdf5")
    write_well(other / "b.hdf5", name="other_well")
    with pytest.raises(ValueError, match=r"b\.hdf5.*dataset_name 'other_well' differs"):
        TheWellDataset(other)
