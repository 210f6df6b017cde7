r"""Quadrature attention on the sphere (Bonev et al., 2025, arXiv 2505.11157): global and geodesic-disc.

For a query field on the output grid and key/value fields on the input grid, per head,

.. math::
    y(x') = \frac{\int_{D(x')} e^{s(x', x)} v(x)\, dA(x)}{\int_{D(x')} e^{s(x', x)}\, dA(x)}
          \approx \frac{\sum_{x_j \in D(x')} q_j\, e^{s(x', x_j)} v_j}{\sum_{x_j \in D(x')} q_j\, e^{s(x', x_j)}},
    \qquad s(x', x) = \text{scale}\; Q(x') \cdot K(x),

where ``q_j = 2π w_k / nlon_in`` is the area weight of input point ``j = (k, l)`` (latitude weight
``w_k`` of the input grid's rule, :class:`sciattn.domain.SphereGrid`), ``D(x') = S²`` for global
attention and the geodesic disc of radius ``θ_c`` for neighbourhood attention
(:mod:`sciattn.spherical.neighborhoods`). The weight multiplies the exponential in numerator and
denominator, i.e. it is the logit bias ``log q_j``.

* :func:`spherical_attention` runs :func:`sciattn.weighted_softmax.weighted_softmax_attention`
  (backends ``sdpa``, ``flex``, ``reference``).
* :func:`spherical_neighborhood_attention` runs :func:`sciattn.neighborhood.neighborhood_attention`
  over the cached disc CSR (scores recomputed in backward, activation memory ``O(N·C)``).

Channels are split into heads head-major: channel ``c = h·D + d``.

Shapes:
    q: ``(B, H·D, nlat_out, nlon_out)``; k: ``(B, H·D, nlat_in, nlon_in)``;
    v: ``(B, H·E, nlat_in, nlon_in)``; returns ``(B, H·E, nlat_out, nlon_out)``.
"""

from __future__ import annotations

import functools

import torch

from .._checks import check_attention_dtypes, check_choice, check_positive_int, check_rank
from ..domain import SphereGrid
from ..neighborhood import neighborhood_attention
from ..quadrature import SPHERE_GRIDS
from ..weighted_softmax import weighted_softmax_attention
from .neighborhoods import check_longitude_ratio, sphere_disc_csr

__all__ = ["area_weights", "spherical_attention", "spherical_neighborhood_attention", "split_heads", "merge_heads"]


@functools.lru_cache(maxsize=64)
def _area_weights(grid: SphereGrid, device: torch.device) -> torch.Tensor:
    return grid.quadrature_weights(torch.float64).reshape(-1).to(device)


def area_weights(grid: SphereGrid, device: torch.device | str | None = None) -> torch.Tensor:
    """Flattened area weights ``(nlat·nlon,)`` in float64, ``q_j = 2π w_k / nlon``, cached per device."""
    return _area_weights(grid, torch.device(device if device is not None else "cpu"))


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(B, H·D, nlat, nlon)`` -> ``(B, H, nlat·nlon, D)``."""
    b, c = x.shape[:2]
    return x.reshape(b, n_heads, c // n_heads, -1).transpose(-1, -2)


def merge_heads(y: torch.Tensor, nlat: int, nlon: int) -> torch.Tensor:
    """``(B, H, nlat·nlon, E)`` -> ``(B, H·E, nlat, nlon)``."""
    b, h, _, e = y.shape
    return y.transpose(-1, -2).reshape(b, h * e, nlat, nlon)


def _check_fields(q, k, v, n_heads: int, grid_in: str, grid_out: str) -> None:
    check_attention_dtypes(q, k, v)
    check_positive_int("n_heads", n_heads)
    check_choice("grid_in", grid_in, SPHERE_GRIDS)
    check_choice("grid_out", grid_out, SPHERE_GRIDS)
    check_rank("q", q, 4, "(B, H·D, nlat_out, nlon_out)")
    check_rank("k", k, 4, "(B, H·D, nlat_in, nlon_in)")
    check_rank("v", v, 4, "(B, H·E, nlat_in, nlon_in)")
    b, c = k.shape[:2]
    if tuple(q.shape[:2]) != (b, c):
        raise ValueError(f"q: expected shape (B={b}, C={c}, nlat_out, nlon_out) to match k {tuple(k.shape)}, "
                         f"got {tuple(q.shape)}")
    if v.shape[0] != b or tuple(v.shape[2:]) != tuple(k.shape[2:]):
        raise ValueError(f"v: expected shape (B={b}, E, {k.shape[2]}, {k.shape[3]}) on the key grid, got {tuple(v.shape)}")
    for name, width in (("k", c), ("v", v.shape[1])):
        if width % n_heads:
            raise ValueError(f"n_heads: expected a divisor of the {name} channels ({width}), got {n_heads}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v: expected one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    check_longitude_ratio(k.shape[-1], q.shape[-1])


def spherical_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    grid_in: str = "equiangular",
    grid_out: str | None = None,
    n_heads: int = 1,
    scale: float | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Global attention on the sphere with the input grid's area weights on the keys.

    Args:
        dtypes: q, k, v floating and of one dtype; an integer or bool
            tensor is a TypeError naming the argument (the policy in :mod:`sciattn._checks`).
        q: queries on the output grid ``(B, H·D, nlat_out, nlon_out)``.
        k, v: keys ``(B, H·D, nlat_in, nlon_in)`` and values ``(B, H·E, nlat_in, nlon_in)``.
        grid_in: rule of the key grid (``"equiangular"``, ``"legendre-gauss"``, ``"lobatto"``).
        grid_out: rule of the query grid (default ``grid_in``); only validated, the global sum does
            not depend on where the queries sit.
        n_heads: heads ``H``.
        scale: logit scale, default ``1/sqrt(D)``.
        backend: force a :func:`weighted_softmax_attention` backend.

    Returns:
        ``(B, H·E, nlat_out, nlon_out)``.
    """
    grid_out = grid_in if grid_out is None else grid_out
    _check_fields(q, k, v, n_heads, grid_in, grid_out)
    key_grid = SphereGrid(k.shape[2], k.shape[3], grid_in)
    out = weighted_softmax_attention(
        split_heads(q, n_heads), split_heads(k, n_heads), split_heads(v, n_heads),
        area_weights(key_grid, k.device), scale=scale, backend=backend,
    )
    return merge_heads(out, q.shape[2], q.shape[3])


def spherical_neighborhood_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    grid_in: str = "equiangular",
    grid_out: str | None = None,
    theta_cutoff: float | None = None,
    n_heads: int = 1,
    scale: float | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Attention over the geodesic disc of radius ``theta_cutoff`` around each query.

    Args:
        dtypes: q, k, v floating and of one dtype; an integer or bool
            tensor is a TypeError naming the argument (the policy in :mod:`sciattn._checks`).
        q, k, v, grid_in, n_heads, scale: as in :func:`spherical_attention`.
        grid_out: rule of the query grid (default ``grid_in``).
        theta_cutoff: disc radius in radians; ``None`` is one latitude spacing of the coarser grid
            (:func:`sciattn.spherical.neighborhoods.default_theta_cutoff`); ``≥ π`` is global attention.
        backend: force a :func:`sciattn.neighborhood.neighborhood_attention` backend.

    Returns:
        ``(B, H·E, nlat_out, nlon_out)``.
    """
    grid_out = grid_in if grid_out is None else grid_out
    _check_fields(q, k, v, n_heads, grid_in, grid_out)
    key_grid = SphereGrid(k.shape[2], k.shape[3], grid_in)
    query_grid = SphereGrid(q.shape[2], q.shape[3], grid_out)
    row_offsets, col_indices = sphere_disc_csr(key_grid, query_grid, theta_cutoff)
    out = neighborhood_attention(
        split_heads(q, n_heads), split_heads(k, n_heads), split_heads(v, n_heads),
        row_offsets.to(q.device), col_indices.to(q.device), area_weights(key_grid, k.device),
        scale=scale, validate=False, backend=backend,
    )
    return merge_heads(out, q.shape[2], q.shape[3])
