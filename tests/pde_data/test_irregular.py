"""Irregular-mesh Darcy / Navier–Stokes: point sampling, area weights, interpolation, datasets, cache, registry."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from sciattn.pde_data import irregular as irr
from sciattn.pde_data import load
from sciattn.pde_data.darcy import generate_darcy
from sciattn.pde_data.navier_stokes import generate_navier_stokes

NS_FAST = dict(t_final=0.2, dt=0.01, record_steps=2)


def _rng(i=0):
    return np.random.default_rng(i)


def _grid_points(k, endpoint=True):
    g = np.linspace(0.0, 1.0, k) if endpoint else np.arange(k) / k
    x, y = np.meshgrid(g, g, indexing="ij")
    return np.stack([x.ravel(), y.ravel()], axis=1)


# ------------------------------------------------------------------------------------ points


def test_sample_points_layouts():
    p = irr.sample_points(50, rng=_rng(), domain="square")
    np.testing.assert_array_equal(p[:4], [[0, 0], [1, 0], [0, 1], [1, 1]])
    assert p.shape == (50, 2) and (p >= 0).all() and (p <= 1).all()
    np.testing.assert_array_equal(p, irr.sample_points(50, rng=_rng(), domain="square"))
    t = irr.sample_points(64, rng=_rng(), domain="torus", layout="jittered")
    assert (t >= 0).all() and (t < 1).all()
    cells = np.floor(t * 8).astype(int)  # 64 points, k = 8: one point in each cell
    assert len({tuple(c) for c in cells}) == 64
    z = irr.sample_points(64, rng=_rng(), domain="torus", layout="jittered", jitter=0.0)
    np.testing.assert_allclose(np.sort(z[:, 0] * 8 % 1), 0.5)  # no jitter: cell centres
    with pytest.raises(ValueError, match="layout"):
        irr.sample_points(10, rng=_rng(), layout="sobol")
    with pytest.raises(ValueError, match="jitter"):
        irr.sample_points(10, rng=_rng(), jitter=2.0)
    with pytest.raises(ValueError, match="n: expected at least 4"):
        irr.sample_points(3, rng=_rng())


# ------------------------------------------------------------------------------------ weights


@pytest.mark.parametrize("domain", ["square", "torus"])
@pytest.mark.parametrize("method", ["delaunay", "voronoi"])
@pytest.mark.parametrize("layout", ["uniform", "jittered"])
def test_weights_sum_to_area_and_integrate(domain, method, layout):
    p = irr.sample_points(3000, rng=_rng(1), domain=domain, layout=layout)
    w = irr.quadrature_weights(p, method=method, domain=domain)
    assert w.shape == (3000,) and (w > 0).all()
    assert abs(w.sum() - 1.0) < 1e-12
    f = np.exp(np.sin(2 * np.pi * p[:, 0]) * np.cos(2 * np.pi * p[:, 1]))
    exact = 1.1309968  # ∫ over the unit square (I0 series), a periodic integrand
    assert abs((w * f).sum() - exact) < 2e-3
    assert abs(f.mean() - exact) > 5 * abs((w * f).sum() - exact) or layout == "jittered"


def test_delaunay_integrates_linear_functions_exactly():
    p = irr.sample_points(300, rng=_rng(2))
    w = irr.quadrature_weights(p, method="delaunay")
    assert abs((w * (1 + 2 * p[:, 0] + 3 * p[:, 1])).sum() - 3.5) < 1e-12
    with pytest.raises(ValueError, match="four corners"):
        irr.quadrature_weights(p[4:], method="delaunay")  # hull smaller than the square


def test_voronoi_on_regular_grid_is_trapezoid_rule():
    k = 9
    w = irr.quadrature_weights(_grid_points(k), method="voronoi").reshape(k, k)
    t = np.full(k, 1.0 / (k - 1))
    t[[0, -1]] /= 2
    np.testing.assert_allclose(w, np.outer(t, t), rtol=1e-10, atol=1e-14)
    wt = irr.quadrature_weights(_grid_points(8, endpoint=False), method="voronoi", domain="torus")
    np.testing.assert_allclose(wt, 1 / 64, rtol=1e-10)


@pytest.mark.parametrize("domain", ["square", "torus"])
def test_voronoi_matches_nearest_point_areas(domain):
    """Independent oracle: the fraction of a fine grid nearest to each point (periodic distance on the torus)."""
    p = irr.sample_points(40, rng=_rng(3), domain=domain)[4 if domain == "square" else 0:]
    w = irr.quadrature_weights(p, method="voronoi", domain=domain)
    m = 800
    q = (np.stack(np.meshgrid(np.arange(m), np.arange(m), indexing="ij"), -1).reshape(-1, 2) + 0.5) / m
    tree = cKDTree(p, boxsize=1.0 if domain == "torus" else None)
    frac = np.bincount(tree.query(q)[1], minlength=len(p)) / m**2
    np.testing.assert_allclose(w, frac, atol=3e-4)


@pytest.mark.parametrize("method", ["delaunay", "voronoi"])
def test_torus_weights_translation_invariant(method):
    p = irr.sample_points(500, rng=_rng(4), domain="torus")
    shifted = (p + np.array([0.37, 0.61])) % 1.0
    np.testing.assert_allclose(irr.quadrature_weights(shifted, method=method, domain="torus"),
                               irr.quadrature_weights(p, method=method, domain="torus"), rtol=1e-8, atol=1e-14)


def test_weights_reject_bad_points():
    with pytest.raises(ValueError, match=r"pos: expected finite points in \[0, 1\)\^2"):
        irr.quadrature_weights(np.array([[0.1, 0.2], [1.0, 0.5], [0.3, 0.3]]), domain="torus")
    with pytest.raises(ValueError, match="pos: expected a numpy array"):
        irr.quadrature_weights(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="method"):
        irr.quadrature_weights(irr.sample_points(10, rng=_rng()), method="mc")


# ------------------------------------------------------------------------------------ interpolation


def test_bilinear_exact_for_bilinear_and_second_order():
    p = _rng(5).random((400, 2))
    x = np.linspace(0, 1, 11)
    f = lambda a, b: 1 + 2 * a - 3 * b + 4 * a * b  # noqa: E731
    np.testing.assert_allclose(irr.bilinear_interpolate(f(*np.meshgrid(x, x, indexing="ij")), p),
                               f(p[:, 0], p[:, 1]), atol=1e-12)
    errs = []
    for s in (16, 32, 64):
        g = np.linspace(0, 1, s + 1)
        field = np.sin(np.pi * g)[:, None] * np.sin(np.pi * g)[None, :]
        e = np.abs(irr.bilinear_interpolate(field, p) - np.sin(np.pi * p[:, 0]) * np.sin(np.pi * p[:, 1])).max()
        assert e <= (1 / s) ** 2 / 8 * 2 * np.pi**2  # h^2/8 (|u_xx| + |u_yy|)
        errs.append(e)
    assert 3.5 < errs[0] / errs[1] < 4.5 and 3.5 < errs[1] / errs[2] < 4.5
    # periodic: between the last node and node 0
    ring = np.zeros((4, 4))
    ring[3, 0], ring[0, 0] = 1.0, 3.0
    assert irr.bilinear_interpolate(ring, np.array([[0.875, 0.0]]), periodic=True)[0] == pytest.approx(2.0)


def test_fourier_interpolation_exact_for_band_limited_fields():
    s = 16
    nodes = _grid_points(s, endpoint=False)
    f = lambda q: np.sin(2 * np.pi * (3 * q[:, 0] - 2 * q[:, 1])) + 0.3 * np.cos(2 * np.pi * (7 * q[:, 0] + q[:, 1]))  # noqa: E731
    p = _rng(6).random((300, 2))
    np.testing.assert_allclose(irr.fourier_interpolate(f(nodes).reshape(s, s), p), f(p), atol=1e-12)
    g = _rng(7).standard_normal((2, s, s))  # any field, Nyquist modes included: nodes are reproduced
    np.testing.assert_allclose(irr.fourier_interpolate(g, nodes), g.reshape(2, -1), atol=1e-12)
    # and the interpolant commutes with the reflection x -> -x (the symmetric, cosine Nyquist mode)
    g_ref = g[:, (-np.arange(s)) % s]
    p_ref = np.stack([(1.0 - p[:, 0]) % 1.0, p[:, 1]], axis=1)
    np.testing.assert_allclose(irr.fourier_interpolate(g_ref, p_ref), irr.fourier_interpolate(g, p), atol=1e-12)


def test_darcy_interpolation_accuracy_and_nodes():
    coeff, u = generate_darcy(2, [64], seed=3)[64]
    nodes = _grid_points(64, endpoint=False)
    a, v = irr.darcy_on_points(coeff, u, nodes)
    np.testing.assert_allclose(a, coeff.reshape(2, -1))
    np.testing.assert_allclose(v, u.reshape(2, -1), atol=1e-7)
    p = irr.sample_points(2000, rng=_rng(8))
    a, v = irr.darcy_on_points(coeff, u, p)
    assert set(np.unique(a)) == {3.0, 12.0}
    assert np.all(v[:, 1:4] == 0)  # corners at x = 1 or y = 1: the Dirichlet value
    w = irr.quadrature_weights(p)
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
    np.testing.assert_allclose(s["x"][:, 0].numpy(), irr.fourier_interpolate(w0[1], pos), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(s["x"][:, 1].numpy(), irr.fourier_interpolate(u[1, ..., 0], pos), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(s["y"][:, 0].numpy(), irr.fourier_interpolate(u[1, ..., 1], pos), rtol=1e-4, atol=1e-5)
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
