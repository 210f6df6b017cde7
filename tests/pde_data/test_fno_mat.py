"""Tests of the FNO ``.mat`` reader sciattn.pde_data.fno_mat on tiny fixtures in the on-disk schema."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import torch

from sciattn.pde_data import fno_mat
from sciattn.pde_data.fno_mat import (
    load_fno_burgers,
    load_fno_darcy,
    load_fno_navier_stokes,
    mat_variables,
    mat_version,
    read_mat_array,
)

# ---------------------------------------------------------------- fixture writers (MATLAB's layouts)


def write_v5(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """MATLAB v5 MAT-file as written by scipy (header text ``MATLAB 5.0 MAT-file``)."""
    scipy.io.savemat(path, arrays, format="5", appendmat=False)
    return path


def write_v73(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """MATLAB v7.3 MAT-file: a 512-byte user block with MATLAB's header text, then HDF5 with
    every variable stored float64 with ALL axes reversed (column-major), as MATLAB writes it.
    MATLAB arrays are at least 2-D: a vector of T values is the row (1, T), stored (T, 1)."""
    with h5py.File(path, "w", userblock_size=512) as f:
        for name, arr in arrays.items():
            d = f.create_dataset(name, data=np.atleast_2d(np.asarray(arr, dtype=np.float64)).transpose())
            d.attrs["MATLAB_class"] = np.bytes_("double")
    text = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."
    header = text.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02IM"
    with open(path, "r+b") as fh:
        fh.write(header)
    return path


WRITERS = {"v5": write_v5, "v7.3": write_v73}


def encoded(shape: tuple[int, ...]) -> np.ndarray:
    """Array whose value spells its index in base 10 (all sizes <= 10) or 100: for 3-D and base 10,
    value = 100*i + 10*j + k; float64, exact in float32 for these tiny shapes."""
    base = 10 if max(shape) <= 10 else 100
    grids = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    return sum(g * base ** (len(shape) - 1 - d) for d, g in enumerate(grids)).astype(np.float64)


def darcy_arrays(n=5, s=21, seed=0):
    rng = np.random.default_rng(seed)
    coeff = np.where(rng.standard_normal((n, s, s)) >= 0, 12.0, 3.0)
    sol = encoded((n, s, s)) * 1e-4
    sol[:, 0, :] = sol[:, -1, :] = sol[:, :, 0] = sol[:, :, -1] = 0.0
    return {"coeff": coeff, "sol": sol, "Kcoeff": coeff + 1.0}


# ---------------------------------------------------------------- header dispatch, raw arrays


@pytest.mark.parametrize("version", ["v5", "v7.3"])
def test_header_dispatch_ignores_extension(tmp_path, version):
    arr = encoded((3, 4, 5))
    for name in ("f.mat", "f.h5", "f.bin", "noext"):
        p = WRITERS[version](tmp_path / name, {"a": arr})
        assert mat_version(p) == version
        assert np.array_equal(read_mat_array(p, "a"), arr.astype(np.float32))


def test_v73_fixture_is_hdf5_with_reversed_axes(tmp_path):
    p = write_v73(tmp_path / "x.mat", {"u": encoded((2, 3, 4, 5))})
    head = p.read_bytes()[:600]
    assert head.startswith(b"MATLAB 7.3 MAT-file") and head[512:520] == b"\x89HDF\r\n\x1a\n"
    with h5py.File(p, "r") as f:
        assert f["u"].shape == (5, 4, 3, 2)
    with pytest.raises(NotImplementedError):  # what the reference reader's first try meets
        scipy.io.loadmat(p)


@pytest.mark.parametrize("version", ["v5", "v7.3"])
def test_axis_order_and_selection(tmp_path, version):
    arr = encoded((6, 4, 3, 5))  # (N, X, Y, T), value = 1000*n + 100*x + 10*y + t
    assert len(np.unique(arr)) == arr.size
    p = WRITERS[version](tmp_path / "u.mat", {"u": arr, "t": np.arange(1.0, 6.0)})
    full = read_mat_array(p, "u")
    assert full.dtype == np.float32 and full.flags.c_contiguous
    assert np.array_equal(full, arr)
    assert full[2, 1, 2, 3] == 2123.0  # value = index digits
    assert np.array_equal(read_mat_array(p, "u", samples=slice(1, 5, 2)), arr[1:5:2])
    got = read_mat_array(p, "u", samples=slice(-2, None), index=(slice(None, None, 2), slice(1, 3)))
    assert np.array_equal(got, arr[-2:, ::2, 1:3])
    assert read_mat_array(p, "t").shape == (1, 5)  # MATLAB vectors are 2-D in both versions
    assert mat_variables(p) == {"u": (6, 4, 3, 5), "t": (1, 5)}


def test_v73_reads_only_the_hyperslab(tmp_path, monkeypatch):
    arr = encoded((8, 4, 6))
    p = write_v73(tmp_path / "d.mat", {"sol": arr})
    seen = []
    original = h5py.Dataset.__getitem__

    def spy(self, args, *rest, **kw):
        seen.append(args)
        return original(self, args, *rest, **kw)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy)
    got = read_mat_array(p, "sol", samples=slice(2, 6, 3), index=(slice(None, None, 2),))
    assert np.array_equal(got, arr[2:6:3, ::2])
    assert seen == [(slice(0, 6, 1), slice(0, 4, 2), slice(2, 6, 3))]  # stored (reversed) order


@pytest.mark.parametrize("version", ["v5", "v7.3"])
def test_missing_key_lists_keys_present(tmp_path, version):
    p = WRITERS[version](tmp_path / "d.mat", {"coeff": np.ones((2, 3, 3)), "sol": np.ones((2, 3, 3))})
    with pytest.raises(ValueError, match="nope") as e:
        read_mat_array(p, "nope")
    assert str(p) in str(e.value) and "'coeff'" in str(e.value) and "'sol'" in str(e.value)
    with pytest.raises(ValueError, match=r"'u'.*keys present: \['coeff', 'sol'\]"):
        load_fno_navier_stokes(p)


def test_not_a_mat_file_and_truncated(tmp_path):
    rnd = tmp_path / "random.mat"
    rnd.write_bytes(np.random.default_rng(0).bytes(2048))
    for fn in (mat_version, lambda q: read_mat_array(q, "a"), load_fno_darcy):
        with pytest.raises(ValueError, match="not a MATLAB MAT-file") as e:
            fn(rnd)
        assert str(rnd) in str(e.value)
    with pytest.raises(FileNotFoundError, match="path"):
        mat_version(tmp_path / "missing.mat")

    for version in ("v7.3", "v5"):
        p = WRITERS[version](tmp_path / f"full_{version}.mat", {"a": encoded((20, 8, 8))})
        cut = tmp_path / f"cut_{version}.mat"
        data = p.read_bytes()
        cut.write_bytes(data[: len(data) // 2])
        with pytest.raises(ValueError, match="truncated or corrupt") as e:
            read_mat_array(cut, "a")
        assert str(cut) in str(e.value)
    short = tmp_path / "short.mat"  # cut inside the v7.3 user block
    short.write_bytes((tmp_path / "full_v7.3.mat").read_bytes()[:300])
    with pytest.raises(ValueError, match="truncated or corrupt") as e:
        mat_version(short)
    assert str(short) in str(e.value)


def test_bad_selection_and_non_numeric(tmp_path):
    p = write_v5(tmp_path / "d.mat", {"a": np.ones((4, 3)), "name": "hello"})
    with pytest.raises(ValueError, match="samples"):
        read_mat_array(p, "a", samples=slice(None, None, -1))
    with pytest.raises(ValueError, match="samples"):
        read_mat_array(p, "a", samples=slice(10, 20))
    with pytest.raises(TypeError, match="samples"):
        read_mat_array(p, "a", samples=3)
    with pytest.raises(ValueError, match="index"):
        read_mat_array(p, "a", index=(slice(None), slice(None)))
    with pytest.raises(ValueError, match="'name' is not a numeric array"):
        read_mat_array(p, "name")


# ---------------------------------------------------------------- Darcy


def test_darcy_values_resolution_and_versions(tmp_path):
    arrays = darcy_arrays()
    ds5 = load_fno_darcy(write_v5(tmp_path / "smooth1.mat", arrays))
    ds73 = load_fno_darcy(write_v73(tmp_path / "smooth1_73.mat", arrays))
    for ds in (ds5, ds73):
        assert ds.x.shape == ds.y.shape == (5, 1, 21, 21) and ds.x.dtype == torch.float32
        assert torch.equal(ds.x[:, 0], torch.from_numpy(arrays["coeff"]).float())
        assert torch.equal(ds.y[:, 0], torch.from_numpy(arrays["sol"]).float())
        assert ds.meta["split"] == "train" and ds.meta["variables"] == {"x": "coeff", "y": "sol"}
        assert "smooth1" in ds.meta["split_convention"] and "smooth2" in ds.meta["split_convention"]
    assert torch.equal(ds5.x, ds73.x) and torch.equal(ds5.y, ds73.y)
    assert (ds5.meta["mat_version"], ds73.meta["mat_version"]) == ("v5", "v7.3")

    p = tmp_path / "smooth1_73.mat"
    for r, stride in ((11, 2), (6, 4), (5, 5), (3, 10)):
        sub = load_fno_darcy(p, resolution=r, n_samples=3, split="test")
        assert sub.resolution == (r, r) and sub.meta["stride"] == stride and len(sub) == 3
        assert torch.equal(sub.x, ds73.x[:3, :, ::stride, ::stride])
        assert torch.equal(sub.y, ds73.y[:3, :, ::stride, ::stride])
        assert sub.meta["samples"] == (0, 3) and sub.meta["split"] == "test"  # test = head of smooth2
    first, last = load_fno_darcy(p, n_samples=4)[0], load_fno_darcy(p, n_samples=4)[-1]
    assert np.array_equal(first["y"][0].numpy(), arrays["sol"][0].astype(np.float32))
    assert np.array_equal(last["x"][0].numpy(), arrays["coeff"][3].astype(np.float32))


def test_darcy_errors(tmp_path):
    p = write_v5(tmp_path / "d.mat", darcy_arrays())
    with pytest.raises(ValueError, match=r"resolution: expected one of \[2, 3, 5, 6, 11, 21\].*got 8"):
        load_fno_darcy(p, resolution=8)
    with pytest.raises(ValueError, match="n_samples: expected at most 5"):
        load_fno_darcy(p, n_samples=6)
    with pytest.raises(ValueError, match="split"):
        load_fno_darcy(p, split="val")
    with pytest.raises(TypeError, match="resolution"):
        load_fno_darcy(p, resolution=True)
    bad = write_v5(tmp_path / "bad.mat", {"coeff": np.ones((2, 5, 5)), "sol": np.ones((2, 5))})
    with pytest.raises(ValueError, match=r"'sol'.*3-D array \(N, s, s\)"):
        load_fno_darcy(bad)


# ---------------------------------------------------------------- Burgers


@pytest.mark.parametrize("version", ["v5", "v7.3"])
def test_burgers_splits_head_and_tail(tmp_path, version):
    a = encoded((12, 32))
    u = -a
    p = WRITERS[version](tmp_path / "burgers.mat", {"a": a, "u": u, "visc": np.array([[0.1]])})
    train = load_fno_burgers(p, n_train=8, n_test=3)
    test = load_fno_burgers(p, split="test", n_train=8, n_test=3)
    assert train.x.shape == (8, 1, 32) and test.y.shape == (3, 1, 32)
    assert torch.equal(train.x[:, 0], torch.from_numpy(a[:8]).float())
    assert torch.equal(test.x[:, 0], torch.from_numpy(a[-3:]).float())  # the LAST n_test
    assert torch.equal(test.y[:, 0], torch.from_numpy(u[-3:]).float())
    assert train[0]["x"][0, 5].item() == a[0, 5] and train[-1]["y"][0, 5].item() == u[7, 5]
    assert test[0]["x"][0, 1].item() == a[9, 1] and test[-1]["x"][0, 1].item() == a[11, 1]
    assert test.meta["samples"] == (9, 12) and "last" in test.meta["split_convention"]
    sub = load_fno_burgers(p, split="test", resolution=8, n_train=8, n_test=3)
    assert sub.meta["stride"] == 4 and torch.equal(sub.x, test.x[..., ::4])


def test_burgers_errors(tmp_path):
    p = write_v73(tmp_path / "b.mat", {"a": np.zeros((12, 32)), "u": np.zeros((12, 32))})
    with pytest.raises(ValueError, match=r"resolution: expected one of \[2, 4, 8, 16, 32\].*got 5"):
        load_fno_burgers(p, resolution=5, n_train=8, n_test=3)
    with pytest.raises(ValueError, match="n_train, n_test.*8 \\+ 5 = 13"):
        load_fno_burgers(p, n_train=8, n_test=5)
    with pytest.raises(ValueError, match="n_test"):
        load_fno_burgers(p, n_train=8, n_test=0)


# ---------------------------------------------------------------- Navier-Stokes


def test_navier_stokes_channels_splits_versions(tmp_path):
    u = encoded((6, 4, 4, 7))  # (N, X, Y, T), time last
    p5 = write_v5(tmp_path / "ns5.mat", {"a": u[..., 0], "u": u.astype(np.float32), "t": np.arange(7.0)})
    p73 = write_v73(tmp_path / "ns73.mat", {"a": u[..., 0], "u": u, "t": np.arange(7.0)})
    kw = {"t_in": 3, "n_train": 4, "n_test": 2}
    train5, train73 = (load_fno_navier_stokes(q, **kw) for q in (p5, p73))
    assert torch.equal(train5.x, train73.x) and torch.equal(train5.y, train73.y)
    assert train73.x.shape == (4, 3, 4, 4) and train73.y.shape == (4, 4, 4, 4)  # t_out = T - t_in
    ref = torch.from_numpy(u).float().permute(0, 3, 1, 2)  # (N, T, X, Y)
    assert torch.equal(train73.x, ref[:4, :3]) and torch.equal(train73.y, ref[:4, 3:])
    assert train73.x[1, 2, 3, 0].item() == 1302.0  # sample 1, time 2, x 3, y 0

    test = load_fno_navier_stokes(p73, split="test", t_out=2, resolution=2, **kw)
    assert test.x.shape == (2, 3, 2, 2) and test.y.shape == (2, 2, 2, 2)
    assert torch.equal(test.x, ref[-2:, :3, ::2, ::2]) and torch.equal(test.y, ref[-2:, 3:5, ::2, ::2])
    assert test[0]["y"][0, 1, 1].item() == u[4, 2, 2, 3] and test[-1]["x"][2, 0, 0].item() == u[5, 0, 0, 2]
    assert test.meta["time_steps"] == {"x": (0, 3), "y": (3, 5)} and test.meta["samples"] == (4, 6)

    with pytest.raises(ValueError, match="t_in, t_out.*T = 7"):
        load_fno_navier_stokes(p73, t_out=5, **kw)
    with pytest.raises(ValueError, match=r"resolution: expected one of \[2, 4\].*got 3"):
        load_fno_navier_stokes(p73, resolution=3, **kw)
    with pytest.raises(ValueError, match="expected a non-empty 4-D array"):
        load_fno_navier_stokes(write_v5(tmp_path / "b.mat", {"u": np.ones((3, 4, 4))}), t_in=1)


def test_public_api():
    assert set(fno_mat.__all__) >= {"mat_version", "read_mat_array", "load_fno_darcy"}
