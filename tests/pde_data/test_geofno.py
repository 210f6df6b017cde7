"""Geo-FNO loaders (Airfoil, Pipe, Elasticity, Plasticity) on tiny fixtures in the on-disk layouts.

Values encode their indices, so every check also verifies the axis order and which file samples a split
holds: ``Q[n, c, i, j] = 1000 n + 100 c + 10 i + j``; mesh ``X[n, i, j] = (n + 1) i``, ``Y[n, i, j] = j + i / 2``
(a sheared, stretched grid of area ``(n + 1)(s1 - 1)(s2 - 1)``); elasticity ``XY[p, k, n] = 1000 n + 10 p + k``,
``sigma[p, n] = 1000 n + p``; plasticity ``input[n, i] = 100 n + i``,
``output[n, i, j, t, c] = 10000 n + 1000 i + 100 j + 10 t + c``.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import scipy.io
import torch

from sciattn.pde_data.geofno import (
    load_airfoil,
    load_elasticity,
    load_pipe,
    load_plasticity,
    structured_node_areas,
)

N, S1, S2 = 7, 6, 4  # 7 samples, train 4, test 2: sample 6 is in neither (Airfoil test is not the tail)


def write_mesh(root, prefix, n=N, c=5, s1=S1, s2=S2):
    nn, ii, jj = np.meshgrid(np.arange(n), np.arange(s1), np.arange(s2), indexing="ij")
    np.save(root / f"{prefix}_X.npy", ((nn + 1) * ii).astype(np.float64))
    np.save(root / f"{prefix}_Y.npy", (jj + 0.5 * ii).astype(np.float64))
    q = np.meshgrid(np.arange(n), np.arange(c), np.arange(s1), np.arange(s2), indexing="ij")
    np.save(root / f"{prefix}_Q.npy", (1000 * q[0] + 100 * q[1] + 10 * q[2] + q[3]).astype(np.float32))
    return root


@pytest.fixture
def naca(tmp_path):
    return write_mesh(tmp_path, "NACA_Cylinder")


def q_of(n, c):
    ii, jj = np.meshgrid(np.arange(S1), np.arange(S2), indexing="ij")
    return torch.tensor(1000 * n + 100 * c + 10 * ii + jj, dtype=torch.float32)


# ------------------------------------------------------------------------------------ mesh areas


def test_node_areas_uniform_grid_and_jittered_interior():
    h, s1, s2 = 0.5, 5, 4
    ii, jj = np.meshgrid(np.arange(s1), np.arange(s2), indexing="ij")
    w = structured_node_areas(h * ii, h * jj)
    assert w[0, 0] == w[-1, -1] == h * h / 4 and w[0, 1] == h * h / 2 and w[2, 2] == h * h
    # moving interior nodes does not change the area the mesh covers: 2 x 1.5 = 3
    rng = np.random.default_rng(0)
    x, y = h * ii + 0.0, h * jj + 0.0
    x[1:-1, 1:-1] += rng.uniform(-0.1, 0.1, (s1 - 2, s2 - 2))
    y[1:-1, 1:-1] += rng.uniform(-0.1, 0.1, (s1 - 2, s2 - 2))
    w = structured_node_areas(x, y)
    assert (w > 0).all() and math.isclose(float(w.sum()), 3.0, rel_tol=1e-12)


def test_node_areas_polar_annulus_either_orientation():
    # C-grid-like polar mesh: nodes on circles r_i at angles theta_j; the cells are straight-edged, so the
    # covered area is that of the polygonal annular sector: (s2 - 1) * sin(dt) / 2 * (R^2 - r^2)
    r = np.linspace(1.0, 3.0, 5)
    t = np.linspace(0.0, np.pi, 9)
    rr, tt = np.meshgrid(r, t, indexing="ij")
    exact = 8 * math.sin(np.pi / 8) / 2 * (9.0 - 1.0)
    for x, y in ((rr * np.cos(tt), rr * np.sin(tt)), (rr * np.cos(tt), -rr * np.sin(tt))):
        assert math.isclose(float(structured_node_areas(x, y).sum()), exact, rel_tol=1e-12)


def test_node_areas_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"x, y: expected .*\(5, 4\) and \(4, 5\)"):
        structured_node_areas(np.zeros((5, 4)), np.zeros((4, 5)))


# ------------------------------------------------------------------------------------ airfoil, pipe


def test_airfoil_splits_axes_and_weights(naca):
    train = load_airfoil(naca, "train", n_train=4, n_test=2)
    test = load_airfoil(naca, "test", n_train=4, n_test=2)
    assert len(train) == 4 and len(test) == 2
    assert test.meta["samples"] == (4, 6) and train.meta["resolution"] == (S1, S2)
    for ds, n in ((train, 0), (train, 3), (test, 4), (test, 5)):
        s = ds[n - ds.meta["samples"][0]]
        assert set(s) == {"x", "y", "pos", "weights"}
        assert s["x"].shape == s["pos"].shape == (2, S1, S2) and s["y"].shape == (1, S1, S2)
        assert all(v.dtype == torch.float32 for v in s.values())
        torch.testing.assert_close(s["y"][0], q_of(n, 4))  # Mach = channel 4
        assert s["x"][0, 2, 1] == 2 * (n + 1) and s["x"][1, 2, 1] == 1 + 1.0  # X (n+1) i, Y j + i/2
        torch.testing.assert_close(s["pos"], s["x"])
        assert s["weights"].shape == (S1, S2) and (s["weights"] > 0).all()
        assert math.isclose(float(s["weights"].double().sum()), (n + 1) * (S1 - 1) * (S2 - 1), rel_tol=1e-6)
    assert test[-1]["y"][0, 0, 0] == 5400  # last test sample is file sample 5, not the tail 6


def test_airfoil_lazy_memmap_pickle_and_subfolder(tmp_path):
    (tmp_path / "naca").mkdir()
    write_mesh(tmp_path / "naca", "NACA_Cylinder")
    ds = load_airfoil(tmp_path, "test", n_train=4, n_test=2, channels=(0, 4))
    assert ds._arrays is None  # nothing opened until the first item
    assert ds[0]["y"].shape == (2, S1, S2) and isinstance(ds._arr("Q"), np.memmap)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._arrays is None
    torch.testing.assert_close(clone[1]["y"][0], q_of(5, 0))
    torch.testing.assert_close(clone[1]["y"][1], q_of(5, 4))


def test_pipe_default_channel_and_split(tmp_path):
    write_mesh(tmp_path, "Pipe", c=3)
    test = load_pipe(tmp_path, "test", n_train=5, n_test=2)
    assert test.meta["samples"] == (5, 7)
    torch.testing.assert_close(test[0]["y"][0], q_of(5, 0))
    torch.testing.assert_close(test[1]["y"][0], q_of(6, 0))
    assert load_pipe(tmp_path, "train", n_train=5, n_test=2)[0]["x"][0, 1, 0] == 1.0


def test_mesh_errors(naca):
    with pytest.raises(ValueError, match="n_train, n_test"):
        load_airfoil(naca, "train", n_train=6, n_test=2)
    with pytest.raises(ValueError, match="split"):
        load_airfoil(naca, "val", n_train=4, n_test=2)
    with pytest.raises(ValueError, match=r"channels: expected indices in \[0, 5\)"):
        load_airfoil(naca, n_train=4, n_test=2, channels=5)
    np.save(naca / "NACA_Cylinder_Q.npy", np.zeros((N - 1, 5, S1, S2), np.float32))  # count mismatch
    with pytest.raises(ValueError, match=r"NACA_Cylinder_Q\.npy.*\(N, C, s1, s2\).*got shape \(6, 5, 6, 4\)"):
        load_airfoil(naca, n_train=4, n_test=2)
    np.save(naca / "NACA_Cylinder_Y.npy", np.zeros((N, S2, S1)))  # wrong axis order
    with pytest.raises(ValueError, match=r"NACA_Cylinder_Y\.npy"):
        load_airfoil(naca, n_train=4, n_test=2)
    (naca / "NACA_Cylinder_Y.npy").write_bytes(b"not an npy file")
    with pytest.raises(ValueError, match=r"NACA_Cylinder_Y\.npy.*\.npy array"):
        load_airfoil(naca, n_train=4, n_test=2)
    (naca / "NACA_Cylinder_Y.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"NACA_Cylinder_Y\.npy"):
        load_airfoil(naca, n_train=4, n_test=2)


# ------------------------------------------------------------------------------------ elasticity


def write_elasticity(root, p=5, d=2, n=9):
    pp, kk, nn = np.meshgrid(np.arange(p), np.arange(d), np.arange(n), indexing="ij")
    np.save(root / "Random_UnitCell_XY_10.npy", (1000 * nn + 10 * pp + kk).astype(np.float64))
    pp, nn = np.meshgrid(np.arange(p), np.arange(n), indexing="ij")
    np.save(root / "Random_UnitCell_sigma_10.npy", (1000 * nn + pp).astype(np.float64))


def test_elasticity_head_tail_points_last_axis(tmp_path):
    (tmp_path / "Meshes").mkdir()
    write_elasticity(tmp_path / "Meshes")
    train = load_elasticity(tmp_path, "train", n_train=4, n_test=3)
    test = load_elasticity(tmp_path, "test", n_train=4, n_test=3)
    assert len(train) == 4 and test.meta["samples"] == (6, 9)
    for ds, i, n in ((train, 0, 0), (train, -1, 3), (test, 0, 6), (test, -1, 8)):
        s = ds[i]
        assert (
            s["x"].shape == s["pos"].shape == (5, 2) and s["y"].shape == (5, 1) and s["weights"].shape == (5,)
        )
        assert s["x"][3, 1] == 1000 * n + 31 and s["y"][3, 0] == 1000 * n + 3
        torch.testing.assert_close(s["weights"], torch.full((5,), 0.2))
        assert all(v.dtype == torch.float32 for v in s.values())


def test_elasticity_errors(tmp_path):
    write_elasticity(tmp_path)
    np.save(tmp_path / "Random_UnitCell_sigma_10.npy", np.zeros((5, 8)))  # 8 cases vs 9
    with pytest.raises(ValueError, match=r"Random_UnitCell_sigma_10\.npy.*\(5, 9\).*got shape \(5, 8\)"):
        load_elasticity(tmp_path, n_train=4, n_test=3)
    (tmp_path / "Random_UnitCell_XY_10.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"Random_UnitCell_XY_10\.npy"):
        load_elasticity(tmp_path)


# ------------------------------------------------------------------------------------ plasticity


def plasticity_arrays(n=6, s1=5, s2=3, t=2, c=4):
    nn, ii = np.meshgrid(np.arange(n), np.arange(s1), indexing="ij")
    g = np.meshgrid(*(np.arange(k) for k in (n, s1, s2, t, c)), indexing="ij")
    out = 10000 * g[0] + 1000 * g[1] + 100 * g[2] + 10 * g[3] + g[4]
    return {"input": (100 * nn + ii).astype(np.float64), "output": out.astype(np.float64)}


def test_plasticity_v5_split_and_channels(tmp_path):
    arrays = plasticity_arrays()
    path = tmp_path / "plas_N987_T20.mat"
    scipy.io.savemat(path, arrays, format="5")
    train = load_plasticity(tmp_path, "train", n_train=3, n_test=2)
    test = load_plasticity(path, "test", n_train=3, n_test=2)
    assert len(train) == 3 and test.meta["samples"] == (4, 6) and test.meta["resolution"] == (5, 3)
    for ds, i, n in ((train, 0, 0), (train, -1, 2), (test, 0, 4), (test, -1, 5)):
        s = ds[i]
        assert s["x"].shape == (1, 5, 3) and s["y"].shape == (8, 5, 3) and s["y"].dtype == torch.float32
        assert s["x"][0, 3, 2] == 100 * n + 3  # die profile repeated along s2
        exp = torch.tensor(arrays["output"][n], dtype=torch.float32).permute(2, 3, 0, 1).reshape(8, 5, 3)
        torch.testing.assert_close(s["y"], exp)
        assert s["y"][1 * 4 + 2, 3, 1] == 10000 * n + 3000 + 100 + 12  # channel t * C + c


def test_plasticity_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="plas_N987_T20.mat"):
        load_plasticity(tmp_path)
    arrays = plasticity_arrays()
    scipy.io.savemat(tmp_path / "plas_N987_T20.mat", {"input": arrays["input"]}, format="5")
    with pytest.raises(ValueError, match="no variable 'output'"):
        load_plasticity(tmp_path)
    scipy.io.savemat(
        tmp_path / "plas_N987_T20.mat", {"input": arrays["input"][:5], "output": arrays["output"]}
    )
    with pytest.raises(ValueError, match=r"plas_N987_T20\.mat.*'output'"):
        load_plasticity(tmp_path)
