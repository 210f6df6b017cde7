"""Point sets (pde_data/point_sets.py): sampling layouts, Delaunay / clipped-Voronoi quadrature weights
(integrals of known functions, trapezoid rule on grids, a nearest-point area oracle, torus translation
invariance), bilinear and trigonometric grid-to-point interpolation (exactness, convergence order)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial import cKDTree

from sciattn.pde_data import point_sets as ps

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _helpers as th  # noqa: E402

# ------------------------------------------------------------------------------------ points


def test_sample_points_layouts():
    p = ps.sample_points(50, rng=th.rng(), domain="square")
    np.testing.assert_array_equal(p[:4], [[0, 0], [1, 0], [0, 1], [1, 1]])
    assert p.shape == (50, 2) and (p >= 0).all() and (p <= 1).all()
    np.testing.assert_array_equal(p, ps.sample_points(50, rng=th.rng(), domain="square"))
    t = ps.sample_points(64, rng=th.rng(), domain="torus", layout="jittered")
    assert (t >= 0).all() and (t < 1).all()
    cells = np.floor(t * 8).astype(int)  # 64 points, k = 8: one point in each cell
    assert len({tuple(c) for c in cells}) == 64
    z = ps.sample_points(64, rng=th.rng(), domain="torus", layout="jittered", jitter=0.0)
    np.testing.assert_allclose(np.sort(z[:, 0] * 8 % 1), 0.5)  # no jitter: cell centres
    with pytest.raises(ValueError, match="layout"):
        ps.sample_points(10, rng=th.rng(), layout="sobol")
    with pytest.raises(ValueError, match="jitter"):
        ps.sample_points(10, rng=th.rng(), jitter=2.0)
    with pytest.raises(ValueError, match="n: expected at least 4"):
        ps.sample_points(3, rng=th.rng())


# ------------------------------------------------------------------------------------ weights


@pytest.mark.parametrize("domain", ["square", "torus"])
@pytest.mark.parametrize("method", ["delaunay", "voronoi"])
@pytest.mark.parametrize("layout", ["uniform", "jittered"])
def test_weights_sum_to_area_and_integrate(domain, method, layout):
    p = ps.sample_points(3000, rng=th.rng(1), domain=domain, layout=layout)
    w = ps.quadrature_weights(p, method=method, domain=domain)
    assert w.shape == (3000,) and (w > 0).all()
    assert abs(w.sum() - 1.0) < 1e-12
    f = np.exp(np.sin(2 * np.pi * p[:, 0]) * np.cos(2 * np.pi * p[:, 1]))
    exact = 1.1309968  # ∫ over the unit square (I0 series), a periodic integrand
    assert abs((w * f).sum() - exact) < 2e-3
    assert abs(f.mean() - exact) > 5 * abs((w * f).sum() - exact) or layout == "jittered"


def test_delaunay_integrates_linear_functions_exactly():
    p = ps.sample_points(300, rng=th.rng(2))
    w = ps.quadrature_weights(p, method="delaunay")
    assert abs((w * (1 + 2 * p[:, 0] + 3 * p[:, 1])).sum() - 3.5) < 1e-12
    with pytest.raises(ValueError, match="four corners"):
        ps.quadrature_weights(p[4:], method="delaunay")  # hull smaller than the square


def test_voronoi_on_regular_grid_is_trapezoid_rule():
    k = 9
    w = ps.quadrature_weights(th.grid_points(k), method="voronoi").reshape(k, k)
    t = np.full(k, 1.0 / (k - 1))
    t[[0, -1]] /= 2
    np.testing.assert_allclose(w, np.outer(t, t), rtol=1e-10, atol=1e-14)
    wt = ps.quadrature_weights(th.grid_points(8, endpoint=False), method="voronoi", domain="torus")
    np.testing.assert_allclose(wt, 1 / 64, rtol=1e-10)


@pytest.mark.parametrize("domain", ["square", "torus"])
def test_voronoi_matches_nearest_point_areas(domain):
    """Independent oracle: the fraction of a fine grid nearest to each point (periodic distance on the torus)."""
    p = ps.sample_points(40, rng=th.rng(3), domain=domain)[4 if domain == "square" else 0:]
    w = ps.quadrature_weights(p, method="voronoi", domain=domain)
    m = 800
    q = (np.stack(np.meshgrid(np.arange(m), np.arange(m), indexing="ij"), -1).reshape(-1, 2) + 0.5) / m
    tree = cKDTree(p, boxsize=1.0 if domain == "torus" else None)
    frac = np.bincount(tree.query(q)[1], minlength=len(p)) / m**2
    np.testing.assert_allclose(w, frac, atol=3e-4)


@pytest.mark.parametrize("method", ["delaunay", "voronoi"])
def test_torus_weights_translation_invariant(method):
    p = ps.sample_points(500, rng=th.rng(4), domain="torus")
    shifted = (p + np.array([0.37, 0.61])) % 1.0
    np.testing.assert_allclose(ps.quadrature_weights(shifted, method=method, domain="torus"),
                               ps.quadrature_weights(p, method=method, domain="torus"), rtol=1e-8, atol=1e-14)


def test_weights_reject_bad_points():
    with pytest.raises(ValueError, match=r"pos: expected finite points in \[0, 1\)\^2"):
        ps.quadrature_weights(np.array([[0.1, 0.2], [1.0, 0.5], [0.3, 0.3]]), domain="torus")
    with pytest.raises(ValueError, match="pos: expected a numpy array"):
        ps.quadrature_weights(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="method"):
        ps.quadrature_weights(ps.sample_points(10, rng=th.rng()), method="mc")


# ------------------------------------------------------------------------------------ interpolation


def test_bilinear_exact_for_bilinear_and_second_order():
    p = th.rng(5).random((400, 2))
    x = np.linspace(0, 1, 11)
    f = lambda a, b: 1 + 2 * a - 3 * b + 4 * a * b  # noqa: E731
    np.testing.assert_allclose(ps.bilinear_interpolate(f(*np.meshgrid(x, x, indexing="ij")), p),
                               f(p[:, 0], p[:, 1]), atol=1e-12)
    errs = []
    for s in (16, 32, 64):
        g = np.linspace(0, 1, s + 1)
        field = np.sin(np.pi * g)[:, None] * np.sin(np.pi * g)[None, :]
        e = np.abs(ps.bilinear_interpolate(field, p) - np.sin(np.pi * p[:, 0]) * np.sin(np.pi * p[:, 1])).max()
        assert e <= (1 / s) ** 2 / 8 * 2 * np.pi**2  # h^2/8 (|u_xx| + |u_yy|)
        errs.append(e)
    assert 3.5 < errs[0] / errs[1] < 4.5 and 3.5 < errs[1] / errs[2] < 4.5
    # periodic: between the last node and node 0
    ring = np.zeros((4, 4))
    ring[3, 0], ring[0, 0] = 1.0, 3.0
    assert ps.bilinear_interpolate(ring, np.array([[0.875, 0.0]]), periodic=True)[0] == pytest.approx(2.0)


def test_fourier_interpolation_exact_for_band_limited_fields():
    s = 16
    nodes = th.grid_points(s, endpoint=False)
    f = lambda q: np.sin(2 * np.pi * (3 * q[:, 0] - 2 * q[:, 1])) + 0.3 * np.cos(2 * np.pi * (7 * q[:, 0] + q[:, 1]))  # noqa: E731
    p = th.rng(6).random((300, 2))
    np.testing.assert_allclose(ps.fourier_interpolate(f(nodes).reshape(s, s), p), f(p), atol=1e-12)
    g = th.rng(7).standard_normal((2, s, s))  # any field, Nyquist modes included: nodes are reproduced
    np.testing.assert_allclose(ps.fourier_interpolate(g, nodes), g.reshape(2, -1), atol=1e-12)
    # and the interpolant commutes with the reflection x -> -x (the symmetric, cosine Nyquist mode)
    g_ref = g[:, (-np.arange(s)) % s]
    p_ref = np.stack([(1.0 - p[:, 0]) % 1.0, p[:, 1]], axis=1)
    np.testing.assert_allclose(ps.fourier_interpolate(g_ref, p_ref), ps.fourier_interpolate(g, p), atol=1e-12)
