"""Tests of the real spherical harmonic transform sciattn.pde_data.sht against analytic results."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special

from sciattn.domain import SphereGrid
from sciattn.pde_data.sht import SHT_GRIDS, SphericalHarmonicTransform, exact_lmax, legendre_tables

EARTH = 6.37122e6


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see tests/conftest.py


def _random_coeffs(sht: SphericalHarmonicTransform, batch: int = 3, seed: int = 0) -> torch.Tensor:
    """Random band-limited coefficients ``(batch, lmax, mmax)``: zero for ``m > l``, real for ``m = 0``."""
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(batch, sht.lmax, sht.mmax, dtype=torch.complex128, generator=g)
    c = torch.tril(c)
    c[..., 0] = c[..., 0].real
    return c


def _scipy_pbar(l: int, m: int, theta: np.ndarray) -> np.ndarray:  # noqa: E741
    """Orthonormal P̄_l^m(cos θ) without the Condon–Shortley phase that ``scipy.special.lpmv`` includes."""
    norm = math.sqrt((2 * l + 1) / (4 * math.pi) * math.factorial(l - m) / math.factorial(l + m))
    return (-1) ** m * norm * special.lpmv(m, l, np.cos(theta))


def test_legendre_tables_match_scipy_and_derivatives():
    theta = np.linspace(0.0, np.pi, 9)
    p, dp, q = legendre_tables(7, 7, theta)
    inner = slice(1, -1)
    h = 1e-6
    for l in range(7):  # noqa: E741
        for m in range(7):
            if m > l:
                assert not p[m, l].any() and not dp[m, l].any() and not q[m, l].any()
                continue
            ref = _scipy_pbar(l, m, theta)
            np.testing.assert_allclose(p[m, l], ref, atol=1e-13)
            fd = (_scipy_pbar(l, m, theta + h) - _scipy_pbar(l, m, theta - h)) / (2 * h)
            np.testing.assert_allclose(dp[m, l, inner], fd[inner], atol=1e-7)
            if m > 0:
                np.testing.assert_allclose(q[m, l, inner] * np.sin(theta[inner]), p[m, l, inner], atol=1e-14)
    # at the north pole only m = 1 survives in Q and dP/dθ: P̄_1^1 = √(3/(8π)) sin θ
    assert dp[1, 1, 0] == pytest.approx(math.sqrt(3 / (8 * math.pi)), rel=1e-14)
    assert q[1, 1, 0] == pytest.approx(math.sqrt(3 / (8 * math.pi)), rel=1e-14)
    assert np.all(q[2:, :, 0] == 0) and np.all(dp[2:, :, 0] == 0)


def test_legendre_functions_are_orthonormal_under_gauss_quadrature():
    sht = SphericalHarmonicTransform(24, 48, "legendre-gauss")
    for m in (0, 1, 5, 23):
        p = sht.pct[m]  # (lmax, nlat)
        gram = 2 * math.pi * (p * sht.lat_weights) @ p.T
        eye = torch.eye(sht.lmax, dtype=torch.float64)
        eye[:m, :m] = 0.0  # rows l < m are zero
        torch.testing.assert_close(gram, eye, atol=1e-13, rtol=0)


@pytest.mark.parametrize("grid", SHT_GRIDS)
def test_synthesis_then_analysis_recovers_band_limited_coefficients(grid):
    nlat = 17
    sht = SphericalHarmonicTransform(nlat, 36, grid)
    assert sht.lmax == exact_lmax(nlat, grid) == {"legendre-gauss": 17, "lobatto": 16, "equiangular": 9}[grid]
    c = _random_coeffs(sht)
    f = sht.inverse(c)
    assert f.dtype == torch.float64 and f.shape == (3, nlat, 36)
    assert (sht.forward(f) - c).abs().max() < 1e-12
    assert (sht.forward(f) - c).abs().max() < 1e-12  # idempotent projection
    torch.testing.assert_close(sht.inverse(sht.forward(f)), f, atol=1e-12, rtol=0)


@pytest.mark.parametrize("nlat", [16, 17])
def test_equiangular_exactness_bound_is_sharp(nlat):
    # Clenshaw–Curtis with nlat nodes is exact to degree nlat-1, so analysis is exact for
    # 2 (lmax - 1) <= nlat - 1; one degree more breaks it.
    bound = exact_lmax(nlat, "equiangular")
    assert bound == (nlat + 1) // 2
    exact = SphericalHarmonicTransform(nlat, 2 * nlat, "equiangular", lmax=bound)
    c = _random_coeffs(exact)
    assert (exact.forward(exact.inverse(c)) - c).abs().max() < 1e-12
    beyond = SphericalHarmonicTransform(nlat, 2 * nlat, "equiangular", lmax=bound + 1)
    c = _random_coeffs(beyond)
    assert (beyond.forward(beyond.inverse(c)) - c).abs().max() > 1e-4


@pytest.mark.parametrize("grid", ["equiangular", "legendre-gauss"])
def test_laplacian_of_ylm_is_minus_l_l1_over_a2(grid):
    # div(grad Y) through grid vectors and the integration-by-parts analysis, not the spectral multiplier
    radius = 2.5
    sht = SphericalHarmonicTransform(16, 32, grid, radius=radius)
    for l, m in [(1, 0), (1, 1), (4, 2), (6, 6), (sht.lmax - 1, 3)]:  # noqa: E741
        c = torch.zeros(sht.lmax, sht.mmax, dtype=torch.complex128)
        c[l, m] = 1.0 if m == 0 else 0.6 - 0.8j
        u, v = sht.gradient(c)
        div, curl = sht.div_curl(u, v)
        tol = 1e-13 * l * (l + 1)
        torch.testing.assert_close(div, -l * (l + 1) / radius**2 * c, atol=tol, rtol=0)
        assert curl.abs().max() < tol  # a gradient has no curl
        torch.testing.assert_close(sht.inverse(div), -l * (l + 1) / radius**2 * sht.inverse(c), atol=tol, rtol=0)
        torch.testing.assert_close(sht.laplacian(c), div, atol=tol, rtol=0)


@pytest.mark.parametrize("grid", ["equiangular", "legendre-gauss"])
def test_integral_of_y00_is_area_over_sqrt_4pi(grid):
    radius = 3.0
    sht = SphericalHarmonicTransform(12, 24, grid, radius=radius)
    c = torch.zeros(sht.lmax, sht.mmax, dtype=torch.complex128)
    c[0, 0] = 1.0
    y00 = sht.inverse(c)
    torch.testing.assert_close(y00, torch.full_like(y00, 1 / math.sqrt(4 * math.pi)), atol=1e-15, rtol=0)
    assert float(sht.integrate(y00)) == pytest.approx(radius**2 * math.sqrt(4 * math.pi), rel=1e-14)
    q = SphereGrid(12, 24, grid).quadrature_weights()
    assert float((q * y00).sum()) == pytest.approx(math.sqrt(4 * math.pi), rel=1e-14)
    ones = torch.ones(12, 24, dtype=torch.float64)
    assert abs(complex(sht.forward(ones)[0, 0]) - math.sqrt(4 * math.pi)) < 1e-13


@pytest.mark.parametrize("grid", SHT_GRIDS)
def test_vorticity_divergence_velocity_round_trip(grid):
    sht = SphericalHarmonicTransform(16, 32, grid, radius=EARTH)
    vort = _random_coeffs(sht, seed=1) * 1e-5
    div = _random_coeffs(sht, seed=2) * 1e-5
    vort[..., 0, 0] = 0.0  # the l = 0 part of a curl / divergence vanishes
    div[..., 0, 0] = 0.0
    u, v = sht.velocity(vort, div)
    d2, z2 = sht.div_curl(u, v)
    assert float((z2 - vort).abs().max()) < 1e-12 * float(vort.abs().max())
    assert float((d2 - div).abs().max()) < 1e-12 * float(div.abs().max())


@pytest.mark.parametrize("grid", ["equiangular", "legendre-gauss"])
def test_velocity_and_gradient_match_analytic_fields_including_poles(grid):
    sht = SphericalHarmonicTransform(16, 32, grid, radius=EARTH)
    theta = sht.colatitudes[:, None]
    lam = sht.sphere.longitudes()[None, :]
    # solid-body rotation: zeta = 2 u0 cos(theta) / a  <->  u = u0 sin(theta), v = 0
    u0 = 40.0
    zeta = (2 * u0 * torch.cos(theta) / EARTH).expand(16, 32)
    u, v = sht.velocity(sht.forward(zeta), torch.zeros(sht.lmax, sht.mmax, dtype=torch.complex128))
    torch.testing.assert_close(u, (u0 * torch.sin(theta)).expand(16, 32), atol=1e-12, rtol=0)
    assert v.abs().max() < 1e-12
    # f = sin(theta) cos(lambda) = Cartesian x: east = -sin(lambda)/a, north = -cos(theta) cos(lambda)/a
    f = torch.sin(theta) * torch.cos(lam)
    ge, gn = sht.gradient(sht.forward(f))
    torch.testing.assert_close(ge * EARTH, (-torch.sin(lam)).expand(16, 32), atol=1e-13, rtol=0)
    torch.testing.assert_close(gn * EARTH, -torch.cos(theta) * torch.cos(lam), atol=1e-13, rtol=0)


def test_float32_transform_and_bad_inputs():
    sht64 = SphericalHarmonicTransform(8, 16, "legendre-gauss")
    sht32 = SphericalHarmonicTransform(8, 16, "legendre-gauss", dtype=torch.float32)
    c = _random_coeffs(sht64)
    f32 = sht32.inverse(c)
    assert f32.dtype == torch.float32
    torch.testing.assert_close(f32.double(), sht64.inverse(c), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match=r"f: expected trailing shape \(8, 16\)"):
        sht64.forward(torch.zeros(8, 15, dtype=torch.float64))
    with pytest.raises(ValueError, match="c: expected trailing shape"):
        sht64.inverse(torch.zeros(4, 4, dtype=torch.complex128))
    with pytest.raises(ValueError, match="mmax: expected at most"):
        SphericalHarmonicTransform(8, 16, "legendre-gauss", mmax=9)
    with pytest.raises(ValueError, match="lmax: expected at most nlat=8"):
        SphericalHarmonicTransform(8, 16, "legendre-gauss", lmax=9)
    with pytest.raises(ValueError, match="grid: expected one of"):
        SphericalHarmonicTransform(8, 16, "healpix")
    with pytest.raises(ValueError, match="u, v: expected equal shapes"):
        sht64.div_curl(torch.zeros(2, 8, 16), torch.zeros(8, 16))


@pytest.mark.parametrize("grid, nlat, nlon", [("equiangular", 17, 32), ("legendre-gauss", 16, 32), ("lobatto", 17, 32)])
def test_matches_torch_harmonics_real_sht_up_to_condon_shortley_sign(grid, nlat, nlon):
    """Oracle: torch-harmonics' ``RealSHT`` / ``InverseRealSHT`` (``norm="ortho"``, ``csphase=True``) on the same grid.

    Sign convention: our basis has no Condon–Shortley phase, torch-harmonics' ``csphase=True`` basis is
    ``(-1)^m P̄_l^m e^{imλ}``; both are orthonormal, so their coefficients of one field differ by exactly
    ``(-1)^m``: ``theirs_lm = (-1)^m ours_lm``. Both transforms use ``rfft(norm="forward")``, longitudes
    ``2π j / nlon`` and the same nodes and weights, so after that sign they agree to round-off.
    """
    th = pytest.importorskip("torch_harmonics")
    ours = SphericalHarmonicTransform(nlat, nlon, grid)
    lmax, mmax = ours.lmax, ours.mmax
    kw = {"lmax": lmax, "mmax": mmax, "grid": grid, "norm": "ortho", "csphase": True}
    fwd = th.RealSHT(nlat, nlon, **kw).double()
    inv = th.InverseRealSHT(nlat, nlon, **kw).double()
    cs = (-1.0) ** torch.arange(mmax, dtype=torch.float64)  # Condon–Shortley: theirs = cs * ours
    f = torch.randn(3, nlat, nlon, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    ours_c, theirs_c = ours.forward(f), fwd(f)
    assert theirs_c.shape == ours_c.shape == (3, lmax, mmax)
    torch.testing.assert_close(theirs_c, cs * ours_c, rtol=0, atol=1e-12)
    assert (theirs_c - ours_c)[..., 1::2].abs().max() > 0.1  # the sign is real: odd m differ without it
    c = _random_coeffs(ours)
    torch.testing.assert_close(inv(cs * c), ours.inverse(c), rtol=0, atol=1e-12)
