"""Irregular-mesh Darcy / Navier–Stokes (pde_data/irregular.py): Darcy grid-to-point values, the datasets
against the grid solvers, the HDF5 cache, the registered benchmarks and the re-exported point-set names."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sciattn.pde_data import irregular as irr
from sciattn.pde_data import load
from sciattn.pde_data import point_sets as ps
from sciattn.pde_data.darcy import generate_darcy
from sciattn.pde_data.navier_stokes import generate_navier_stokes

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _helpers as th  # noqa: E402

NS_FAST = dict(t_final=0.2, dt=0.01, record_steps=2)


def test_point_set_names_reexported():
    """Callers importing the point-set machinery from ``irregular`` get the very same objects."""
    from sciattn.pde_data.irregular import (  # noqa: F401  (the import itself is under test)
        bilinear_interpolate,
        fourier_interpolate,
        quadrature_weights,
        sample_points,
    )

    for name in ("sample_points", "quadrature_weights", "bilinear_interpolate", "fourier_interpolate",
                 "DOMAINS", "LAYOUTS", "WEIGHTS"):
        assert name in irr.__all__ and getattr(irr, name) is getattr(ps, name), name
    assert all(hasattr(irr, name) for name in irr.__all__)
    p = sample_points(20, rng=th.rng(9))
    np.testing.assert_array_equal(quadrature_weights(p), ps.quadrature_weights(p))


# ------------------------------------------------------------------------------------ Darcy grid -> points


def test_darcy_interpolation_accuracy_and_nodes():
    coeff, u = generate_darcy(2, [64], seed=3)[64]
    nodes = th.grid_points(64, endpoint=False)
    a, v = irr.darcy_on_points(coeff, u, nodes)
    np.testing.assert_allclose(a, coeff.reshape(2, -1))
    np.testing.assert_allclose(v, u.reshape(2, -1), atol=1e-7)
    p = ps.sample_points(2000, rng=th.rng(8))
    a, v = irr.darcy_on_points(coeff, u, p)
    assert set(np.unique(a)) == {3.0, 12.0}
    assert np.all(v[:, 1:4] == 0)  # corners at x = 1 or y = 1: the Dirichlet value
    w = ps.quadrature_weights(p)
    # the same fields restricted to 32^2 and 16^2 and interpolated, against the 64^2 interpolant:
    # below 1% and second order (measured: 0.4% at 32^2 against 128^2, 0.1% at 64^2)
    rel = []
    for k in (2, 4):
        _, vk = irr.darcy_on_points(coeff[:, ::k, ::k], u[:, ::k, ::k], p)
        rel.append(np.sqrt((w * (vk - v) ** 2).sum(1) / (w * v**2).sum(1)))
    assert rel[0].max() < 0.01 and (rel[1] / rel[0]).min() > 3.0, rel
    ab, vb = irr.darcy_on_points(coeff, u, p, coeff_interpolation="bilinear")
    np.testing.assert_array_equal(vb, v)
    assert (ab > 3 - 1e-9).all() and (ab < 12 + 1e-9).all() and ((ab > 3.01) & (ab < 11.99)).any()


# ------------------------------------------------------------------------------------ datasets


def test_darcy_irregular_samples_are_the_grid_samples(tmp_path):
    ds = irr.generate_darcy_irregular(3, 200, fine_resolution=16, seed=2, weights="voronoi", include_coords=True)
    coeff, u = generate_darcy(3, [16], seed=2)[16]
    assert len(ds) == 3 and ds.meta["name"] == "darcy_irregular"
    for i in range(3):
        s = ds[i]
        assert s["x"].shape == (200, 3) and s["y"].shape == (200, 1) and s["pos"].shape == (200, 2)
        pos = s["pos"].double().numpy()
        a, v = irr.darcy_on_points(coeff[i], u[i], pos)
        np.testing.assert_allclose(s["y"][:, 0].numpy(), v, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(s["x"][:, 0].numpy(), a)
        torch.testing.assert_close(s["x"][:, 1:], s["pos"])
        assert abs(float(s["weights"].double().sum()) - 1) < 1e-6
    assert not torch.equal(ds[0]["pos"], ds[1]["pos"])
    fixed = irr.generate_darcy_irregular(3, 200, fine_resolution=16, seed=2, fixed_points=True)
    assert torch.equal(fixed[0]["pos"], fixed[2]["pos"]) and torch.equal(fixed[0]["pos"], ds[0]["pos"])


def test_darcy_irregular_cache_roundtrip(tmp_path, monkeypatch):
    ds = irr.generate_darcy_irregular(2, 100, fine_resolution=16, cache_dir=tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert any(f.startswith("darcy_irregular_") for f in files) and any(f.startswith("darcy_") for f in files)
    def boom(*args, **kwargs):
        raise RuntimeError("cache not used")

    monkeypatch.setattr(irr, "point_samples", boom)
    again = irr.generate_darcy_irregular(2, 100, fine_resolution=16, cache_dir=tmp_path)
    for a, b in zip(ds, again):
        for k in ("x", "y", "pos", "weights"):
            torch.testing.assert_close(a[k], b[k])
    with pytest.raises(RuntimeError, match="cache not used"):  # other parameters: other file
        irr.generate_darcy_irregular(2, 100, fine_resolution=16, cache_dir=tmp_path, layout="jittered")


def test_navier_stokes_irregular_pairs():
    ds = irr.generate_navier_stokes_irregular(2, 150, fine_resolution=16, seed=1, inputs=(0, 1), outputs=(2,),
                                              **NS_FAST)
    w0, u = generate_navier_stokes(2, [16], seed=1, **NS_FAST)[16]
    s = ds[1]
    assert s["x"].shape == (150, 2) and s["y"].shape == (150, 1)
    pos = s["pos"].double().numpy()
    assert (pos < 1).all() and abs(float(s["weights"].double().sum()) - 1) < 1e-6
    np.testing.assert_allclose(s["x"][:, 0].numpy(), ps.fourier_interpolate(w0[1], pos), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(s["x"][:, 1].numpy(), ps.fourier_interpolate(u[1, ..., 0], pos), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(s["y"][:, 0].numpy(), ps.fourier_interpolate(u[1, ..., 1], pos), rtol=1e-4, atol=1e-5)
    assert ds.meta["variables"] == {"x": ["w(t=0)", "w(t=0.1)"], "y": ["w(t=0.2)"]}
    with pytest.raises(ValueError, match=r"outputs: expected snapshot indices in 0\.\.2"):
        irr.generate_navier_stokes_irregular(1, 50, fine_resolution=16, outputs=(3,), **NS_FAST)
    with pytest.raises(TypeError, match="unknown"):
        irr.generate_navier_stokes_irregular(1, 50, fine_resolution=16, viscosity=1.0)


def test_registered_benchmarks(tmp_path):
    kw = dict(root=tmp_path, n_train=2, n_test=1, fine_resolution=16, progress=False)
    train = load("darcy_irregular", "train", resolution=64, **kw)
    test = load("darcy_irregular", "test", resolution=64, **kw)
    assert len(train) == 2 and len(test) == 1 and train[0]["x"].shape == (64, 1)
    full = irr.generate_darcy_irregular(3, 64, fine_resolution=16)
    torch.testing.assert_close(test[0]["y"], full[2]["y"])
    ns = load("navier_stokes_irregular", "test", resolution=32, t_in=1, **kw, **NS_FAST)
    assert len(ns) == 1 and ns[0]["x"].shape == (32, 1) and ns[0]["y"].shape == (32, 1)
    assert ns.meta["variables"] == {"x": ["w(t=0.1)"], "y": ["w(t=0.2)"]}
