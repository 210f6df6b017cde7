"""PDEBench HDF5 reader: layouts, split conventions, time windows, strides, laziness, errors.

Fixture arrays encode their indices in their values, so every check also verifies axis order:
single ``tensor[n, t, x] = 1000 n + 100 t + x``; cfd ``V[n, t, x, y] = 10000 n + 1000 t + 100 v + 10 x + y``
with ``v`` the PDEBench variable index (density 0, pressure 1, Vx 2, Vy 3); seed groups
``data[t, x, c] = 1000 g + 100 t + 10 c + x``; Darcy ``nu[n, x, y] = 1000 n + 10 x + y``,
``tensor[n, 0, x, y] = -nu[n, x, y]``.
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

from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.pdebench import CFD_VARIABLES, PDEBenchWindowDataset, pdebench_layout

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _helpers as th  # noqa: E402

# ------------------------------------------------------------------------------ fixture writers


def single_values(n=10, t=5, x=8):
    nn, tt, xx = np.meshgrid(np.arange(n), np.arange(t), np.arange(x), indexing="ij")
    return (1000 * nn + 100 * tt + xx).astype(np.float32)


def write_single(path, n=10, t=5, x=8):
    """``1D_Advection_Sols_beta*.hdf5`` schema: tensor (N, T, X), x-coordinate (X,), t-coordinate (T+1,)."""
    with h5py.File(path, "w") as f:
        f.create_dataset("tensor", data=single_values(n, t, x))
        f.create_dataset("x-coordinate", data=np.linspace(0, 1, x, endpoint=False, dtype=np.float32))
        f.create_dataset("t-coordinate", data=np.linspace(0, 2, t + 1, dtype=np.float32))
        f.attrs["beta"] = 0.1
    return path


CFD_ORDER = ("density", "pressure", "Vx", "Vy")


def cfd_values(v, n=10, t=4, x=6, y=5):
    nn, tt, xx, yy = np.meshgrid(np.arange(n), np.arange(t), np.arange(x), np.arange(y), indexing="ij")
    return (10000 * nn + 1000 * tt + 100 * v + 10 * xx + yy).astype(np.float32)


def write_cfd(path, n=10, t=4, x=6, y=5, skip=()):
    """``2D_CFD_*_Train.hdf5`` schema: density/pressure/Vx/Vy (N, T, X, Y) + coordinates, attrs."""
    with h5py.File(path, "w") as f:
        for name in reversed(CFD_ORDER):  # written in a non-canonical order on purpose
            if name not in skip:
                f.create_dataset(name, data=cfd_values(CFD_ORDER.index(name), n, t, x, y))
        f.create_dataset("x-coordinate", data=np.arange(x, dtype=np.float32) / x)
        f.create_dataset("y-coordinate", data=np.arange(y, dtype=np.float32) / y)
        f.create_dataset("t-coordinate", data=np.linspace(0, 1, t + 1, dtype=np.float32))
        f.attrs.update({"eta": 0.1, "zeta": 0.1, "M": 1.0})
    return path


def seed_values(g, t=5, x=8, c=2):
    tt, xx, cc = np.meshgrid(np.arange(t), np.arange(x), np.arange(c), indexing="ij")
    return (1000 * g + 100 * tt + 10 * cc + xx).astype(np.float32)


def write_seeds(path, groups=10, t=5, x=8, c=2, no_data=()):
    """``1D_diff-sorp_NA_NA.h5`` schema: groups "0000"... with data (T, X, C), grid/x, grid/t, attr config."""
    with h5py.File(path, "w") as f:
        for g in reversed(range(groups)):  # creation order differs from sorted order
            grp = f.create_group(f"{g:04d}")
            if g not in no_data:
                grp.create_dataset("data", data=seed_values(g, t, x, c))
            grp.create_dataset("grid/x", data=np.arange(x, dtype=np.float32) / x)
            grp.create_dataset("grid/t", data=np.arange(t, dtype=np.float32) * 5)
            grp.attrs["config"] = "sim: diff-sorp"
    return path


def darcy_nu(n=10, x=6, y=6):
    nn, xx, yy = np.meshgrid(np.arange(n), np.arange(x), np.arange(y), indexing="ij")
    return (1000 * nn + 10 * xx + yy).astype(np.float32)


def write_darcy(path, n=10, x=6, y=6):
    """``2D_DarcyFlow_beta*_Train.hdf5`` schema: nu (N, X, Y), tensor (N, 1, X, Y), coordinates."""
    nu = darcy_nu(n, x, y)
    with h5py.File(path, "w") as f:
        f.create_dataset("nu", data=nu)
        f.create_dataset("tensor", data=-nu[:, None])
        f.create_dataset("x-coordinate", data=np.arange(x, dtype=np.float32) / x)
        f.create_dataset("y-coordinate", data=np.arange(y, dtype=np.float32) / y)
        f.attrs["beta"] = 1.0
    return path


# ------------------------------------------------------------------------------ layout detection


@pytest.mark.parametrize(
    "writer, layout",
    [(write_single, "single"), (write_cfd, "cfd"), (write_darcy, "darcy"), (write_seeds, "seed_groups")],
)
def test_layout_from_contents_not_name(tmp_path, writer, layout):
    path = writer(tmp_path / "2D_DarcyFlow_beta1.0_Train.hdf5")  # misleading name
    assert pdebench_layout(path) == layout


# ------------------------------------------------------------------------------ single file


def test_single_split_head_and_window_values(tmp_path):
    full = single_values()
    path = write_single(tmp_path / "adv.hdf5")
    test = PDEBenchWindowDataset(path, t_in=2, t_out=1, split="test")
    train = PDEBenchWindowDataset(path, t_in=2, t_out=1, split="train")
    # N=10, test = first 10% = sample 0; 5 frames - 3 + 1 = 3 windows per sample
    assert len(test) == 3 and len(train) == 27
    assert test.meta["samples"] == [0] and train.meta["samples"] == list(range(1, 10))
    assert "first" in test.meta["split_convention"]
    for ds, i, n, t0 in [(test, 0, 0, 0), (test, -1, 0, 2), (train, 0, 1, 0), (train, -1, 9, 2)]:
        assert ds.locate(i) == (n, t0)
        item = ds[i]
        assert item["x"].dtype == torch.float32 and item["x"].shape == (2, 8) and item["y"].shape == (1, 8)
        assert torch.equal(item["x"], torch.from_numpy(full[n, t0 : t0 + 2]))
        assert torch.equal(item["y"], torch.from_numpy(full[n, t0 + 2 : t0 + 3]))
    assert float(train[0]["x"][1, 3]) == 1000 * 1 + 100 * 1 + 3  # sample 1, frame 1, x=3
    assert train.meta["layout"] == "single" and train.meta["variables"] == ["tensor"]


def test_single_strides_equal_slices_of_full_data(tmp_path):
    full = single_values()
    path = write_single(tmp_path / "adv.hdf5")
    ds = PDEBenchWindowDataset(path, t_in=1, t_out=1, time_stride=2, spatial_stride=2)
    sub = full[:, ::2, ::2]  # frames 0, 2, 4; x 0, 2, 4, 6
    assert ds.resolution == (4,) and ds.meta["n_frames"] == 3 and ds.meta["windows_per_sample"] == 2
    assert len(ds) == 9 * 2
    assert ds.locate(1) == (1, 2)  # second window starts at file frame 2
    assert torch.equal(ds[1]["x"], torch.from_numpy(sub[1, 1:2]))
    assert torch.equal(ds[-1]["y"], torch.from_numpy(sub[9, 2:3]))
    with h5py.File(path) as f:
        np.testing.assert_array_equal(ds.meta["grid"]["x"], f["x-coordinate"][::2])
        np.testing.assert_array_equal(ds.meta["grid"]["t"], f["t-coordinate"][::2])


# ------------------------------------------------------------------------------ compressible CFD


def test_cfd_variable_order_and_time_major_channels(tmp_path):
    path = write_cfd(tmp_path / "cfd.hdf5")
    ds = PDEBenchWindowDataset(path, t_in=2, t_out=2, split="test")
    assert ds.meta["variables"] == list(CFD_ORDER) == list(CFD_VARIABLES[:4])
    assert len(ds) == 1 and ds.in_channels == 8 and ds.out_channels == 8
    item = ds[0]
    assert item["x"].shape == (8, 6, 5) and item["y"].shape == (8, 6, 5)
    for k in range(2):
        for v in range(4):  # channel k * C + v = frame k, variable v
            assert torch.equal(item["x"][k * 4 + v], torch.from_numpy(cfd_values(v)[0, k]))
            assert torch.equal(item["y"][k * 4 + v], torch.from_numpy(cfd_values(v)[0, 2 + k]))
    last = PDEBenchWindowDataset(path, t_in=2, t_out=2)[-1]
    assert float(last["y"][7, 5, 4]) == 10000 * 9 + 1000 * 3 + 100 * 3 + 10 * 5 + 4


def test_cfd_strides_and_custom_variable_order(tmp_path):
    path = write_cfd(tmp_path / "cfd.hdf5")
    ds = PDEBenchWindowDataset(
        path, t_in=1, t_out=1, time_stride=3, spatial_stride=2, variables=["Vy", "density"]
    )
    assert ds.resolution == (3, 3) and ds.meta["variables"] == ["Vy", "density"]
    item = ds[0]  # sample 1, frames 0 and 3
    assert torch.equal(item["x"][0], torch.from_numpy(cfd_values(3)[1, 0, ::2, ::2]))
    assert torch.equal(item["x"][1], torch.from_numpy(cfd_values(0)[1, 0, ::2, ::2]))
    assert torch.equal(item["y"][0], torch.from_numpy(cfd_values(3)[1, 3, ::2, ::2]))
    assert ds.meta["grid"]["y"].tolist() == pytest.approx([0.0, 0.4, 0.8])


# ------------------------------------------------------------------------------ seed groups


def test_seed_groups_split_tail_and_channels(tmp_path):
    path = write_seeds(tmp_path / "sorp.h5")
    test = PDEBenchWindowDataset(path, t_in=2, t_out=1, split="test")
    train = PDEBenchWindowDataset(path, t_in=2, t_out=1, split="train")
    assert test.meta["samples"] == ["0009"]  # last 10% of the sorted groups
    assert train.meta["samples"] == [f"{g:04d}" for g in range(9)]
    assert "last" in test.meta["split_convention"]
    assert len(test) == 3 and len(train) == 27
    for ds, i, g, t0 in [(test, 0, 9, 0), (test, -1, 9, 2), (train, 0, 0, 0), (train, -1, 8, 2)]:
        assert ds.locate(i) == (f"{g:04d}", t0)
        item = ds[i]
        data = seed_values(g)  # (T, X, C)
        assert item["x"].shape == (4, 8) and item["y"].shape == (2, 8)
        for k in range(2):
            for c in range(2):
                assert torch.equal(item["x"][k * 2 + c], torch.from_numpy(data[t0 + k, :, c]))
        assert torch.equal(item["y"][1], torch.from_numpy(data[t0 + 2, :, 1]))
    strided = PDEBenchWindowDataset(path, t_in=1, t_out=1, time_stride=2, spatial_stride=3, split="test")
    assert strided.resolution == (3,)
    assert torch.equal(strided[1]["y"][1], torch.from_numpy(seed_values(9)[4, ::3, 1]))
    np.testing.assert_array_equal(strided.meta["grid"]["t"], [0.0, 10.0, 20.0])


# ------------------------------------------------------------------------------ Darcy


def test_darcy_pairs_split_and_stride(tmp_path):
    path = write_darcy(tmp_path / "darcy.hdf5")
    nu = darcy_nu()
    test = PDEBenchWindowDataset(path, split="test")
    train = PDEBenchWindowDataset(path, spatial_stride=2)
    assert len(test) == 1 and len(train) == 9 and train.meta["samples"] == list(range(1, 10))
    assert test[0]["x"].shape == (1, 6, 6)
    assert torch.equal(test[0]["x"][0], torch.from_numpy(nu[0]))
    assert torch.equal(test[0]["y"][0], torch.from_numpy(-nu[0]))
    assert train.resolution == (3, 3)
    assert torch.equal(train[-1]["x"][0], torch.from_numpy(nu[9, ::2, ::2]))
    assert torch.equal(train[0]["y"][0], torch.from_numpy(-nu[1, ::2, ::2]))
    grid = train.to_grid_dataset()
    assert isinstance(grid, GridPairDataset) and grid.x.shape == (9, 1, 3, 3)
    with pytest.raises(ValueError, match="steady"):
        PDEBenchWindowDataset(path, t_in=2)


# ------------------------------------------------------------------------------ laziness


def test_reads_only_item_slices_and_pickles(tmp_path, monkeypatch):
    path = write_single(tmp_path / "adv.hdf5")
    ds = PDEBenchWindowDataset(path, t_in=2, t_out=1)
    assert ds._file is None  # metadata only; no handle kept after construction
    assert not any(isinstance(v, (np.ndarray, torch.Tensor, h5py.Dataset)) for v in vars(ds).values())
    calls = th.spy_h5_reads(monkeypatch)
    ds[4]
    assert len(calls) == 1
    name, sel = calls[0]
    assert name == "/tensor" and sel[0] == 2 and sel[1] == slice(1, 4, 1)  # sample 2, frames 1..3
    monkeypatch.undo()
    clone = pickle.loads(pickle.dumps(ds))  # open handle is dropped, reopened lazily
    assert clone._file is None and torch.equal(clone[4]["x"], ds[4]["x"])
    batch = next(iter(DataLoader(ds, batch_size=4)))
    assert batch["x"].shape == (4, 2, 8)
    ds.close()
    clone.close()


# ------------------------------------------------------------------------------ errors


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.h5"):
        PDEBenchWindowDataset(tmp_path / "nope.h5")
    path = write_single(tmp_path / "adv.hdf5")
    data = path.read_bytes()
    cut = tmp_path / "cut.hdf5"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cut.hdf5.*truncated or corrupt"):
        PDEBenchWindowDataset(cut)
    junk = tmp_path / "junk.h5"
    junk.write_text("not hdf5")
    with pytest.raises(ValueError, match="junk.h5"):
        pdebench_layout(junk)


def test_missing_datasets_and_groups_are_listed(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("foo", data=np.zeros(3))
    with pytest.raises(ValueError, match=r"other.h5.*root holds \['foo'\]"):
        pdebench_layout(other)
    cfd = write_cfd(tmp_path / "cfd.hdf5", skip=("pressure",))
    with pytest.raises(ValueError, match=r"cfd.hdf5.*\['pressure'\].*present: \['Vx', 'Vy', 'density'"):
        PDEBenchWindowDataset(cfd)
    seeds = write_seeds(tmp_path / "seeds.h5", no_data=(0,))
    with pytest.raises(ValueError, match=r"seeds.h5.*'0000' has no dataset 'data'.*\['grid'\]"):
        PDEBenchWindowDataset(seeds)
    seeds2 = write_seeds(tmp_path / "seeds2.h5", no_data=(5,))
    ds = PDEBenchWindowDataset(seeds2, t_in=4, t_out=1)
    with pytest.raises(ValueError, match=r"seeds2.h5.*'0005' has no dataset 'data'"):
        ds[5]


def test_bad_windows_strides_and_split(tmp_path):
    path = write_single(tmp_path / "adv.hdf5")
    with pytest.raises(ValueError, match=r"adv.hdf5.*3 \+ 3 = 6 frames.*5 frames"):
        PDEBenchWindowDataset(path, t_in=3, t_out=3)
    with pytest.raises(ValueError, match=r"2 after time_stride=3"):
        PDEBenchWindowDataset(path, t_in=2, t_out=1, time_stride=3)
    with pytest.raises(ValueError, match=r"adv.hdf5.*spatial_stride=8 leaves 1 point.*size 8"):
        PDEBenchWindowDataset(path, spatial_stride=8)
    with pytest.raises(ValueError, match="split: expected one of"):
        PDEBenchWindowDataset(path, split="val")
    with pytest.raises(ValueError, match="split 'test' is empty"):
        PDEBenchWindowDataset(path, split="test", test_fraction=0.05)
    with pytest.raises(ValueError, match="t_in"):
        PDEBenchWindowDataset(path, t_in=0)
    with pytest.raises(ValueError, match="variables: only the cfd layout"):
        PDEBenchWindowDataset(path, variables=["tensor"])
    with pytest.raises(IndexError):
        PDEBenchWindowDataset(path)[100]
