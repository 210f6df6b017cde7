"""Geodesic-disc CSR indices on sphere grids against brute-force distances and published counts."""

from __future__ import annotations

import math

import pytest
import torch

from sciattn.domain import SphereGrid
from sciattn.neighborhood import csr_within_distance
from sciattn.quadrature import SPHERE_GRIDS, sphere_quadrature
from sciattn.spherical.neighborhoods import (
    THETA_CUTOFF_EPS,
    default_theta_cutoff,
    geodesic_distance,
    latitude_spacing,
    sphere_disc_csr,
)

F64 = torch.float64


def _points(nlat, nlon, grid):
    """Unit vectors (nlat·nlon, 3) from colatitude/longitude formulas written here."""
    theta = sphere_quadrature(nlat, grid)[0]
    lam = torch.tensor([2 * math.pi * j / nlon for j in range(nlon)], dtype=F64)
    t, l_ = torch.meshgrid(theta, lam, indexing="ij")
    return torch.stack([t.sin() * l_.cos(), t.sin() * l_.sin(), t.cos()], -1).reshape(-1, 3)


def _dense(row_offsets, col_indices, n_rows, n_cols):
    dense = torch.zeros(n_rows, n_cols, dtype=torch.bool)
    rows = torch.repeat_interleave(torch.arange(n_rows), row_offsets.diff())
    dense[rows, col_indices] = True
    assert int(dense.sum()) == col_indices.numel(), "a column repeats within a row"
    return dense


SHAPES = [((8, 16), (8, 16)), ((9, 16), (5, 8)), ((5, 8), (9, 16)), ((7, 12), (4, 4)), ((6, 6), (10, 18))]


@pytest.mark.parametrize("grid", SPHERE_GRIDS)
@pytest.mark.parametrize("shape_in,shape_out", SHAPES)
@pytest.mark.parametrize("theta", [None, 0.37, 0.93, 3.2])
def test_csr_equals_brute_force_arccos(grid, shape_in, shape_out, theta):
    gi, go = SphereGrid(*shape_in, grid), SphereGrid(*shape_out, grid)
    radius = default_theta_cutoff(gi, go) if theta is None else theta
    a, b = _points(*shape_out, grid), _points(*shape_in, grid)
    dist = torch.arccos((a @ b.T).clamp(-1, 1))
    want = dist <= (1 + THETA_CUTOFF_EPS) * radius
    empty = int((~want.any(1)).sum())
    if empty:  # a radius below the input spacing (upsampling): refused, naming how many discs are empty
        with pytest.raises(ValueError, match=rf"theta_cutoff: .* leaves {empty} of {a.shape[0]} output points with an "
                                             rf"empty disc"):
            sphere_disc_csr(gi, go, theta)
        return
    ro, ci = sphere_disc_csr(gi, go, theta)
    got = _dense(ro, ci, a.shape[0], b.shape[0])
    assert torch.equal(got, want)
    assert ro.shape == (a.shape[0] + 1,) and ro.dtype == ci.dtype == torch.int64


def test_csr_equals_chordal_radius_search():
    gi, go = SphereGrid(12, 24, "legendre-gauss"), SphereGrid(6, 12, "lobatto")
    theta = 0.61
    ro, ci = sphere_disc_csr(gi, go, theta)
    chord = 2 * math.sin((1 + THETA_CUTOFF_EPS) * theta / 2)
    ro2, ci2 = csr_within_distance(go.unit_vectors().reshape(-1, 3), gi.unit_vectors().reshape(-1, 3), chord)
    assert torch.equal(ro, ro2)
    n = ro.numel() - 1
    assert torch.equal(_dense(ro, ci, n, gi.nlat * gi.nlon), _dense(ro2, ci2, n, gi.nlat * gi.nlon))


def test_rows_are_longitude_shifts_and_arcs_run_west_to_east():
    gi, go = SphereGrid(9, 16), SphereGrid(5, 8)  # nlon_in = 2 nlon_out: shift by 2 input columns per output column
    ro, ci = sphere_disc_csr(gi, go, 0.8)
    for ho in range(5):
        base = ci[ro[ho * 8] : ro[ho * 8 + 1]]
        for wo in range(8):
            row = ci[ro[ho * 8 + wo] : ro[ho * 8 + wo + 1]]
            shifted = (base // 16) * 16 + (base % 16 + 2 * wo) % 16
            assert torch.equal(row, shifted)  # same order, not just the same set


def test_default_cutoff_is_one_latitude_spacing_of_the_coarser_grid():
    eq17, eq9 = SphereGrid(17, 32), SphereGrid(9, 16)
    assert default_theta_cutoff(eq17, eq17) == pytest.approx(math.pi / 16, rel=1e-12)
    assert default_theta_cutoff(eq17, eq9) == pytest.approx(math.pi / 8, rel=1e-12)  # downsampling: output
    assert default_theta_cutoff(eq9, eq17) == pytest.approx(math.pi / 8, rel=1e-12)  # upsampling: input
    lg = SphereGrid(10, 20, "legendre-gauss")
    theta = sphere_quadrature(10, "legendre-gauss")[0]
    assert latitude_spacing(lg) == pytest.approx(max(theta[i + 1] - theta[i] for i in range(9)).item(), rel=1e-12)
    assert latitude_spacing(lg) < math.pi / 9  # Gauss nodes skip the poles: the gaps are below π/(n-1)


def test_neighbour_counts_match_the_published_measurements():
    """spherical.md §2.1: 64×128 Legendre–Gauss, torch-harmonics 0.9.3 measured 128.8 / 49 / 476 neighbours
    (mean / min / max) at θ = (7/√π)·π/63 and 8.7 / 3 / 64 at the default cutoff."""
    g = SphereGrid(64, 128, "legendre-gauss")
    counts = sphere_disc_csr(g, g, (7 / math.sqrt(math.pi)) * math.pi / 63)[0].diff().double()
    assert (round(counts.mean().item(), 1), counts.min().item(), counts.max().item()) == (128.8, 49, 476)
    counts = sphere_disc_csr(g, g)[0].diff().double()
    assert (round(counts.mean().item(), 1), counts.min().item(), counts.max().item()) == (8.7, 3, 64)


def test_index_is_cached_and_a_cutoff_of_pi_is_everything():
    g = SphereGrid(6, 12)
    assert sphere_disc_csr(g, g, 0.5)[1] is sphere_disc_csr(g, g, 0.5)[1]
    ro, ci = sphere_disc_csr(g, g, math.pi)
    assert torch.equal(ro.diff(), torch.full((72,), 72))


def test_geodesic_distance_is_accurate_near_zero_and_pi():
    a = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    for angle in (1e-9, 1e-4, 0.5, math.pi - 1e-6):
        b = torch.tensor([math.sin(angle), 0.0, math.cos(angle)], dtype=F64)
        assert geodesic_distance(a, b).item() == pytest.approx(angle, rel=1e-9)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1, 0.0])
def test_non_finite_or_non_positive_cutoff_is_named(bad):
    g = SphereGrid(6, 12)
    with pytest.raises(ValueError, match=r"theta_cutoff: expected a finite positive float \(radians\) or None, got"):
        sphere_disc_csr(g, g, bad)


def test_bad_arguments_are_named():
    g = SphereGrid(6, 12)
    with pytest.raises(TypeError, match="theta_cutoff: expected a finite positive float"):
        sphere_disc_csr(g, g, "0.3")
    with pytest.raises(ValueError, match=r"nlon_in/nlon_out: expected one of nlon_in, nlon_out to be an integer "
                                         r"multiple of the other .* got nlon_in=12, nlon_out=8"):
        sphere_disc_csr(g, SphereGrid(4, 8))
    with pytest.raises(TypeError, match="grid_out: expected a sciattn.domain.SphereGrid, got tuple"):
        sphere_disc_csr(g, (6, 12))
