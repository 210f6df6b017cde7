r"""Geodesic-disc neighbourhoods between two latitude–longitude grids, as CSR indices.

The neighbourhood of an output point ``x'`` is the spherical cap

.. math::
    D(x') = \{x \in S^2 : d(x, x') \le \theta_c\},\qquad d(x, x') = \arccos(x \cdot x'),

discretised as the input grid points inside it. The distance is evaluated as
``atan2(|x × x'|, x · x')`` in float64 (accurate near 0 and π), and points are kept when
``d ≤ (1 + 1e-3) θ_c`` so that a point exactly one grid spacing away (the default cutoff) is kept
whatever the rounding (:data:`THETA_CUTOFF_EPS`, the convention of Bonev et al.'s code).

**Longitude shift symmetry.** With ``g = gcd(nlon_in, nlon_out)``, the rotation by ``2π/g`` about
the polar axis maps both grids onto themselves: output column ``wo ↦ wo + nlon_out/g`` and input
column ``wi ↦ wi + nlon_in/g``, and geodesic distances are unchanged. So only the
``nlat_out · nlon_out/g`` *canonical* queries ``(ho, r)``, ``r < nlon_out/g``, are evaluated, each
as a list of ``(input latitude, input longitude)`` pairs, and the neighbourhood of
``(ho, r + m·nlon_out/g)`` is that list with every input column shifted by ``m·nlon_in/g``
(mod ``nlon_in``). Self-attention and downsampling (``nlon_in`` a multiple of ``nlon_out``) have one
canonical query per output latitude; upsampling by ``p`` in longitude has ``p``. Each canonical
query is tested only against input latitudes with ``|θ_in − θ_out| ≤ θ_eff`` (a lower bound of the
distance), so building costs ``O(nlat_out · (nlon_out/g) · band · nlon_in)`` plus ``O(nnz)`` to
expand. Results are cached per ``(grid_in, grid_out, θ_c)``.

Default cutoff (:func:`default_theta_cutoff`): the largest gap between adjacent colatitude nodes of
the coarser of the two grids, ``π/(nlat − 1)`` on an equiangular grid. This follows
torch-harmonics 0.9.3 (``compute_theta_cutoff`` of the output grid for self-attention and
downsampling, of the input grid for upsampling).

Shapes: the CSR index has ``row_offsets`` ``(nlat_out·nlon_out + 1,)`` and ``col_indices``
``(nnz,)`` (int64), rows and columns flattened in ``(lat, lon)`` C order. Within a row the columns
are grouped by input latitude (north to south), each group an arc of consecutive longitudes listed
west to east.
"""

from __future__ import annotations

import functools
import math

import torch

from ..domain import SphereGrid

__all__ = [
    "THETA_CUTOFF_EPS",
    "check_longitude_ratio",
    "check_theta_cutoff",
    "default_theta_cutoff",
    "geodesic_distance",
    "latitude_spacing",
    "sphere_disc_csr",
]

THETA_CUTOFF_EPS = 1e-3


def latitude_spacing(grid: SphereGrid) -> float:
    """Largest gap ``max_k (θ_{k+1} − θ_k)`` between adjacent colatitude nodes (``π`` for one latitude)."""
    theta = grid.colatitudes()
    return math.pi if theta.numel() < 2 else float(theta.diff().max())


def default_theta_cutoff(grid_in: SphereGrid, grid_out: SphereGrid) -> float:
    """One latitude spacing of the coarser grid: ``max(latitude_spacing(grid_in), latitude_spacing(grid_out))``."""
    return max(latitude_spacing(grid_in), latitude_spacing(grid_out))


def check_theta_cutoff(theta_cutoff: object) -> float:
    """Return ``theta_cutoff`` as a float if it is a finite positive number of radians; raise otherwise."""
    if isinstance(theta_cutoff, bool) or not isinstance(theta_cutoff, (int, float)):
        raise TypeError(f"theta_cutoff: expected a finite positive float (radians) or None, got "
                        f"{type(theta_cutoff).__name__} {theta_cutoff!r}")
    value = float(theta_cutoff)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"theta_cutoff: expected a finite positive float (radians) or None, got {theta_cutoff!r}")
    return value


def check_longitude_ratio(nlon_in: int, nlon_out: int) -> None:
    """Require ``nlon_in / nlon_out`` or ``nlon_out / nlon_in`` to be an integer.

    Then the coarser longitude set is a subset of the finer one and the layer commutes exactly
    with the rotations by the coarser longitude spacing.
    """
    if nlon_in % nlon_out and nlon_out % nlon_in:
        raise ValueError(
            f"nlon_in/nlon_out: expected one of nlon_in, nlon_out to be an integer multiple of the other "
            f"(e.g. nlon_in = 2·nlon_out), got nlon_in={nlon_in}, nlon_out={nlon_out}"
        )


def geodesic_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Great-circle distance between unit vectors ``a (..., 3)`` and ``b (..., 3)`` (broadcast)."""
    cross = torch.linalg.vector_norm(torch.linalg.cross(a, b, dim=-1), dim=-1)
    return torch.atan2(cross, (a * b).sum(-1))


def _canonical_pattern(grid_in: SphereGrid, grid_out: SphereGrid, theta_eff: float, p_out: int):
    """Per output latitude ``ho`` and residue ``r < p_out``: the input ``(hi, wi)`` within ``theta_eff``.

    ``wi`` is returned unreduced (it may be negative or exceed ``nlon_in``); callers reduce it mod ``nlon_in``.
    """
    th_in, th_out = grid_in.colatitudes(), grid_out.colatitudes()
    lam_in, nlon_in = grid_in.longitudes(), grid_in.nlon
    lam_out = 2 * math.pi * torch.arange(p_out, dtype=torch.float64) / grid_out.nlon
    slack = 1e-12
    lo_idx = torch.searchsorted(th_in, th_out - theta_eff - slack, side="left")
    hi_idx = torch.searchsorted(th_in, th_out + theta_eff + slack, side="right")
    patterns = []
    for ho in range(grid_out.nlat):
        lo, hi = int(lo_idx[ho]), int(hi_idx[ho])
        t_o = th_out[ho]
        a = torch.stack([torch.sin(t_o) * torch.cos(lam_out), torch.sin(t_o) * torch.sin(lam_out),
                         torch.cos(t_o).expand(p_out)], dim=-1)  # (p_out, 3)
        t_i = th_in[lo:hi, None]
        b = torch.stack([torch.sin(t_i) * torch.cos(lam_in), torch.sin(t_i) * torch.sin(lam_in),
                         torch.cos(t_i).expand(-1, grid_in.nlon)], dim=-1)  # (band, nlon_in, 3)
        near = geodesic_distance(a[:, None, None, :], b[None]) <= theta_eff  # (p_out, band, nlon_in)
        row = []
        for r in range(p_out):
            hb, wi = near[r].nonzero(as_tuple=True)
            # List each input latitude's arc west to east around the query's column ``centre``
            # (offsets in (-nlon_in/2, nlon_in/2]), so that shifted rows read contiguous memory.
            centre, half = (r * nlon_in) // grid_out.nlon, nlon_in // 2
            off = (wi - centre + half) % nlon_in - half
            order = torch.argsort(hb * nlon_in + off + half)
            row.append((hb.index_select(0, order) + lo, off.index_select(0, order) + centre))
        patterns.append(row)
    return patterns


@functools.lru_cache(maxsize=32)
def _cached_csr(grid_in: SphereGrid, grid_out: SphereGrid, theta_cutoff: float) -> tuple[torch.Tensor, torch.Tensor]:
    nlon_in, nlon_out = grid_in.nlon, grid_out.nlon
    g = math.gcd(nlon_in, nlon_out)
    p_out, p_in = nlon_out // g, nlon_in // g
    theta_eff = (1.0 + THETA_CUTOFF_EPS) * theta_cutoff
    shifts = torch.arange(g, dtype=torch.int64)[:, None] * p_in  # (g, 1): input shift for m = 0..g-1
    counts, cols = [], []
    for row in _canonical_pattern(grid_in, grid_out, theta_eff, p_out):
        blocks = []
        for hi, wi in row:
            blocks.append(hi[None, :] * nlon_in + (wi[None, :] + shifts) % nlon_in)  # (g, n_r)
        # Row-major flattening gives output columns wo = m·p_out + r in ascending order.
        cols.append(torch.cat(blocks, dim=1).reshape(-1))
        counts.append(torch.tensor([b.shape[1] for b in blocks], dtype=torch.int64).repeat(g))
    count = torch.cat(counts)
    row_offsets = torch.zeros(count.numel() + 1, dtype=torch.int64)
    row_offsets[1:] = torch.cumsum(count, 0)
    return row_offsets, torch.cat(cols)


def sphere_disc_csr(
    grid_in: SphereGrid, grid_out: SphereGrid, theta_cutoff: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR index of the geodesic discs of radius ``theta_cutoff`` around the output points.

    Args:
        grid_in: key/value grid; grid_out: query grid. ``nlon_in / nlon_out`` or its inverse must
            be an integer.
        theta_cutoff: disc radius in radians (``None``: :func:`default_theta_cutoff`). Any radius
            ``≥ π`` gives every input point to every output point.

    Returns:
        ``(row_offsets, col_indices)`` on the CPU (int64), shared through a cache: do not modify them
        in place. Row ``ho·nlon_out + wo`` lists the flat input indices ``hi·nlon_in + wi`` of the
        points with ``d ≤ (1 + 1e-3)·theta_cutoff``.

    Raises ``ValueError`` when some output point's disc holds no input point (a radius below the
    input grid's spacing when upsampling): its attention would be undefined.
    """
    for name, grid in (("grid_in", grid_in), ("grid_out", grid_out)):
        if not isinstance(grid, SphereGrid):
            raise TypeError(f"{name}: expected a sciattn.domain.SphereGrid, got {type(grid).__name__}")
    check_longitude_ratio(grid_in.nlon, grid_out.nlon)
    theta = default_theta_cutoff(grid_in, grid_out) if theta_cutoff is None else check_theta_cutoff(theta_cutoff)
    row_offsets, col_indices = _cached_csr(grid_in, grid_out, theta)
    empty = int((row_offsets.diff() == 0).sum())
    if empty:
        raise ValueError(
            f"theta_cutoff: expected a radius that reaches an input point from every output point, got {theta:.6g}, "
            f"which leaves {empty} of {row_offsets.numel() - 1} output points with an empty disc (the default, one "
            f"latitude spacing of the coarser grid, is {default_theta_cutoff(grid_in, grid_out):.6g})"
        )
    return row_offsets, col_indices
