"""Grid and point-set inputs as tokens: the input checks and the quadrature weights, shared by the token operators.

A grid field ``x`` ``(B, C_in, *spatial)`` becomes tokens ``(B, N, C_in)`` at the nodes of
:class:`sciattn.domain.Grid` (C order) with its cell volumes, normalised, as weights; a point set ``x``
``(B, N, C_in)`` with ``pos`` ``(B, N, d)``, optional ``weights`` and ``mask`` ``(B, N)`` is checked and its
padding zeroed. ``op`` is the operator: it has ``in_channels``, ``out_channels`` and ``spatial_dims``; ``name``
is its name in error messages.
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn._checks import (
    check_dim,
    check_finite,
    check_input_dtype,
    check_min_grid,
    check_quadrature_weights,
    check_rank,
    values_checkable,
)
from sciattn.domain import Grid, PointCloud
from sciattn.partial_sums import RankSums, raise_together

__all__ = ["check_grid_input", "grid_tokens", "point_tokens", "to_grid", "zero_padding", "grid_or_point_forward"]


def check_grid_input(op: nn.Module, x: torch.Tensor, name: str) -> Grid:
    """Checks a grid field ``x`` ``(B, C_in, *spatial)`` for ``op``; returns its :class:`Grid`."""
    d = op.spatial_dims
    check_rank("x", x, 2 + d, f"(B, C_in={op.in_channels}, {d} spatial axes)")
    check_dim("x", x, 1, op.in_channels, "input channels")
    check_input_dtype("x", x, op, "operator")
    check_min_grid("x", x, name, "one node per axis has no spacing: its quadrature weights are undefined")
    check_finite("x", x)
    return Grid.from_field(x, d)


def grid_tokens(op: nn.Module, x: torch.Tensor, name: str):
    """``(a (B, N, C_in), pos (B, N, d), w (B, N), grid)`` of a grid field; ``w`` sums to one per sample."""
    grid = check_grid_input(op, x, name)
    nodes, w = grid.nodes_and_weights(x.dtype, x.device)
    b = x.shape[0]
    w = (w / w.sum()).expand(b, -1)
    return x.flatten(2).transpose(1, 2), nodes.expand(b, *nodes.shape), w, grid


def to_grid(out: torch.Tensor, op: nn.Module, grid: Grid) -> torch.Tensor:
    """Tokens ``(B, N, C_out)`` back to the field ``(B, C_out, *spatial)``."""
    return out.transpose(1, 2).reshape(out.shape[0], op.out_channels, *grid.shape)


def _check_point_inputs(op: nn.Module, x, pos, weights, mask, *, part: bool) -> None:
    """The checks of a point-set input; ``part``: the points are one rank's part of a mesh, whose per-sample mass
    is checked after the reduction over the ranks (a part may hold only padding of a sample)."""
    check_rank("x", x, 3, f"(B, N, C_in={op.in_channels})")
    check_dim("x", x, -1, op.in_channels, "input channels")
    if not part:
        ndim = PointCloud(pos, weights, mask).ndim
    else:  # PointCloud's checks, except one real point per sample (that holds for the mesh, not for each part)
        check_rank("pos", pos, 3, "(B, N, d)")
        for name, t in (("mask", mask), ("weights", weights)):
            if t is not None and tuple(t.shape) != tuple(pos.shape[:2]):
                raise ValueError(f"{name}: expected shape {tuple(pos.shape[:2])} to match positions, got "
                                 f"{tuple(t.shape)}")
        if mask is not None and mask.dtype != torch.bool:
            raise TypeError(f"mask: expected dtype torch.bool, got {mask.dtype}")
        check_finite("positions", pos, None if mask is None else mask[..., None])
        ndim = pos.shape[-1]
    if ndim != op.spatial_dims:
        raise ValueError(f"pos: expected {op.spatial_dims} coordinates per point, got {ndim}")
    if x.shape[:2] != pos.shape[:2]:
        raise ValueError(f"x: expected (B, N) = {tuple(pos.shape[:2])} to match pos, got {tuple(x.shape[:2])}")
    check_input_dtype("x", x, op, "operator")
    check_quadrature_weights("weights", weights, mask, need_mass=not part)
    check_finite("x", x, None if mask is None else mask[..., None])


def point_tokens(op: nn.Module, x, pos, weights, mask, *, weights_in_pos_dtype: bool = False, group=None):
    """``(x, pos, w, keep)`` of a point set: padding zeroed in ``x`` and ``pos`` (cast to ``x.dtype``), ``w``
    ``(B, N)`` summing to one over the real points, ``keep`` ``(B, N, 1)`` (``None`` without a mask).

    ``weights_in_pos_dtype``: without a mask, normalise the weights in the dtype of the given ``pos`` (then cast
    to ``x.dtype``), as GNOT and OFormer do; otherwise in ``x.dtype``. ``group``: the points are this rank's part
    of a mesh split over the ranks of ``group``; the weights are normalised by their sum over every rank's points
    (a differentiable all-reduce), and a failed check raises on every rank."""
    if group is None:
        _check_point_inputs(op, x, pos, weights, mask, part=False)
    else:
        raise_together(group, [lambda: _check_point_inputs(op, x, pos, weights, mask, part=True)])
    keep = None if mask is None else mask[..., None]
    if not weights_in_pos_dtype:
        pos = pos.to(x.dtype)
    if mask is not None:
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        x, pos = torch.where(keep, x, zero), torch.where(keep, pos.to(x.dtype), zero)
        if weights is not None:
            weights = torch.where(mask, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))
    if group is None:
        w = PointCloud(pos, weights, mask).quadrature_weights().to(x.dtype)
        return x, pos.to(x.dtype), w, keep
    w = torch.ones(pos.shape[:2], dtype=pos.dtype, device=pos.device) if weights is None else weights.to(pos.dtype)
    if mask is not None:
        w = torch.where(mask, w, torch.zeros((), dtype=w.dtype, device=w.device))
    (mass,) = RankSums(group)((w.sum(dim=1),))
    if values_checkable(mass) and not bool((mass > 0).all()):
        i = int((mass <= 0).nonzero()[0, 0])
        raise ValueError(f"weights: expected a positive total weight over the real points of every sample, summed "
                         f"over the ranks of the domain-parallel group, got {float(mass[i])} for sample {i}")
    return x, pos.to(x.dtype), (w / mass[:, None]).to(x.dtype), keep


def zero_padding(out: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """``out`` with zeros where ``keep`` is False (unchanged without a mask)."""
    if keep is None:
        return out
    return torch.where(keep, out, torch.zeros((), dtype=out.dtype, device=out.device))


def grid_or_point_forward(op: nn.Module, x, pos, weights, mask, name: str) -> torch.Tensor:
    """The forward of an operator that maps tokens with ``op.encode(a, pos, w, mask)``: a grid ``(B, C, *spatial)``
    as its nodes with normalised cell volumes, or a padded point set ``(B, N, C)`` with ``pos`` and quadrature
    weights (zeros returned on padding). ``name``: the operator's name in input errors."""
    if pos is None:
        a, p, w, grid = grid_tokens(op, x, name)
        return to_grid(op.encode(a, p, w), op, grid)
    a, p, w, keep = point_tokens(op, x, pos, weights, mask)
    return zero_padding(op.encode(a, p, w, mask), keep)

