"""Sphere quadrature and SphereGrid: exactness on spherical harmonics, weight ordering, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from numpy.polynomial import legendre
from scipy.special import sph_harm_y

from sciattn.domain import SphereGrid
from sciattn.quadrature import SPHERE_GRIDS, sphere_quadrature

# Highest polynomial degree in cos θ each rule integrates exactly with n latitudes.
EXACT_DEGREE = {"equiangular": lambda n: n - 1, "legendre-gauss": lambda n: 2 * n - 1, "lobatto": lambda n: 2 * n - 3}


@pytest.mark.parametrize("grid", SPHERE_GRIDS)
@pytest.mark.parametrize("nlat", [5, 16, 33])
def test_weights_sum_to_two_and_integrate_polynomials_exactly(grid, nlat):
    theta, w = sphere_quadrature(nlat, grid)
    x = np.cos(theta.numpy())
    assert w.sum().item() == pytest.approx(2.0, abs=1e-13)
    assert (w > 0).all() and (theta.diff() > 0).all()
    for p in range(EXACT_DEGREE[grid](nlat) + 1):
        exact = 2.0 / (p + 1) if p % 2 == 0 else 0.0
        assert (w.numpy() * x**p).sum() == pytest.approx(exact, abs=1e-12)
    if nlat > 5:
        return
    # one degree beyond the exactness bound the rule is no longer exact (so the test above can fail);
    # checked on a coarse grid, since these rules are nearly exact for monomials on fine ones
    p = EXACT_DEGREE[grid](nlat) + 1
    p += p % 2  # odd powers integrate to zero by symmetry on every rule
    assert abs((w.numpy() * x**p).sum() - 2.0 / (p + 1)) > 1e-10


@pytest.mark.parametrize("grid", SPHERE_GRIDS)
def test_spherical_harmonics_are_orthonormal_to_the_grid_degree(grid):
    nlat, nlon = 12, 24
    sg = SphereGrid(nlat, nlon, grid)
    q = sg.quadrature_weights().numpy()
    theta = sg.colatitudes().numpy()[:, None]
    lam = sg.longitudes().numpy()[None, :]
    lmax = EXACT_DEGREE[grid](nlat) // 2  # products of two harmonics have degree 2 lmax
    modes = [(deg, m) for deg in range(lmax + 1) for m in range(-deg, deg + 1) if abs(m) < nlon // 2]
    Y = np.stack([sph_harm_y(deg, m, theta, lam) for deg, m in modes])
    gram = np.einsum("aij,bij,ij->ab", Y, Y.conj(), q)
    np.testing.assert_allclose(gram, np.eye(len(modes)), atol=1e-12)


def test_weights_follow_their_latitudes():
    # Gauss–Legendre weights have the closed form 2 / ((1 - x²) P_n'(x)²) at each node: checking it
    # node by node catches a weight vector that is reversed or tiled against the colatitudes.
    n = 9
    theta, w = sphere_quadrature(n, "legendre-gauss")
    x = np.cos(theta.numpy())
    dp = legendre.Legendre.basis(n).deriv()
    np.testing.assert_allclose(w.numpy(), 2 / ((1 - x**2) * dp(x) ** 2), rtol=1e-12)
    # equiangular: poles get the smallest weights, the equator the largest; order matches sin θ
    theta, w = sphere_quadrature(17, "equiangular")
    assert theta[0] == 0 and theta[-1] == pytest.approx(np.pi)
    assert int(w.argmax()) == 8 and w[0] == w.min()
    sg = SphereGrid(6, 10, "lobatto")
    q = sg.quadrature_weights()
    assert q.sum().item() == pytest.approx(4 * np.pi, abs=1e-12)
    assert torch.equal(q[:, 0], q[:, 7]) and torch.allclose(q[:, 0], 2 * np.pi * sphere_quadrature(6, "lobatto")[1] / 10)


def test_unit_vectors_match_colatitude_and_longitude():
    sg = SphereGrid(4, 8, "legendre-gauss")
    xyz = sg.unit_vectors()
    np.testing.assert_allclose(torch.arccos(xyz[..., 2]).numpy()[:, 0], sg.colatitudes().numpy(), atol=1e-12)
    lon = torch.atan2(xyz[1, :, 1], xyz[1, :, 0]) % (2 * np.pi)
    np.testing.assert_allclose(lon.numpy(), sg.longitudes().numpy(), atol=1e-12)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"grid: expected one of \['equiangular', 'legendre-gauss', 'lobatto'\], got 'gauss'"):
        SphereGrid(8, 16, "gauss")
    with pytest.raises(ValueError, match="nlon: expected a positive int, got 0"):
        SphereGrid(8, 0)
    with pytest.raises(ValueError, match="nlat: expected at least 2 latitudes"):
        sphere_quadrature(1, "equiangular")
