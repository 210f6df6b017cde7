"""Erwin's levels in the multiscale mode (``ball_mode="multiscale"``): the geometry of every level, and the
pooling and unpooling between levels by cell index.

Level 0 holds the points in the order of :func:`~sciattn.balltree.multiscale.multiscale_layout` (ball cells,
near-field windows, key cells of ``key_diameter``). Level ``i + 1`` holds one token per non-empty pool cell of
level ``i`` (diameter ``pool_diameters[i]``): at the quadrature-weighted centroid of its points, weighing their
total weight, laid out by the same function on the cells' geometric centres (which do not move under
refinement) with key cells that hold one token each (the key length is the pool length that made the tokens),
so its far field is the exact quadrature over the ball cell's tokens and it has no near field. Odd blocks of a
level run in the layout of the frame rotated by ``rotate``. A coarse level's token count is set by the
geometry, not by the sampling.

* :class:`CellPool`: ``LayerNorm(Linear(Σ_{j∈c} w_j h_j / Σ_{j∈c} w_j))`` per pool cell ``c`` (the physical
  mode's quadrature mean, by cell index instead of a reshape).
* :class:`CellUnpool`: ``LayerNorm(skip + Linear([h_c, p_j - p_c]))`` for every point ``j`` of cell ``c``.

Shapes: a level's tokens ``(B, P_i, C)`` in its slot order; pool index ``(B, P_i)`` into ``n_pool`` cells.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sciattn.balltree.multiscale import multiscale_layout
from sciattn.balltree.physical import cloud_box, lattice_for

from ._geometry import ErwinGeometry, LevelGeometry
from ._physical_levels import physical_lengths

__all__ = ["CellPool", "CellUnpool", "multiscale_geometry", "UNIT"]

#: queries sharing one set of far keys (a ball cell's points are padded to a multiple of it)
UNIT = 16


def _frames(pos, mask, weights, box, rotate, *, ball, key, pool, window, assign=None):
    """The level in its layout, and in the rotated layout (``rotate`` None or 0: none)."""
    unit = min(UNIT, window)
    lay = multiscale_layout(pos, mask, box, ball=ball, key=key, pool=pool, window=window, unit=unit, assign=assign)
    tree = lay.tree
    w = tree.mask.to(pos.dtype) if weights is None else tree.values_to_tree(weights.to(pos.dtype))
    geo = LevelGeometry(tree.pos, tree.mask, w, sizes=(window,), centres=lay.centres, far=lay.far, tokens=tree,
                        pool_index=lay.pool_index, n_pool=lay.n_pool)
    if rotate is not None and (isinstance(rotate, torch.Tensor) or rotate):
        slot_assign = None if assign is None else tree.to_tree(assign.to(pos.dtype))
        rl = multiscale_layout(tree.pos, tree.mask, box, ball=ball, key=key, window=window, unit=unit,
                               rotate=rotate, assign=slot_assign)
        rt, p = rl.tree, tree.perm.shape[1]
        geo.rot_index, geo.rot_inverse = rt.perm, rt.inverse[:, :p]
        geo.rot_mask, geo.rot_pos = rt.mask, rt.pos
        geo.rot_weights = F.pad(w, (0, rt.perm.shape[1] - p)).gather(1, rt.perm)
        geo.rot_sizes, geo.rot_centres, geo.rot_far = (window,), rl.centres, rl.far
    return geo, lay


def multiscale_geometry(model, pos, mask, weights, rotate):
    """Every level's geometry (module docstring) for the lengths of ``model`` (an :class:`Erwin`)."""
    lengths = physical_lengths(model)  # [ball_0, pool_0, ball_1, pool_1, ...], coarse ones at least the pool
    box = cloud_box(pos, mask, lattice_for(lengths + [model.key_diameter]))
    n_lv = len(model.c_hidden)
    pool = lengths[1] if n_lv > 1 else None
    geo, lay = _frames(pos, mask, weights, box, rotate, ball=lengths[0], key=model.key_diameter, pool=pool,
                       window=model.near_points)
    levels, tree = [geo], lay.tree
    for i in range(1, n_lv):
        prev, pool_len = levels[-1], lengths[2 * i - 1]
        b, p, d = prev.pos.shape
        n = prev.n_pool
        idx = prev.pool_index
        w = torch.where(prev.mask, prev.weights, 0)
        wsum = w.new_zeros(b, n + 1).scatter_add(1, idx, w)[:, :n]
        cnt = w.new_zeros(b, n + 1).scatter_add(1, idx, prev.mask.to(w.dtype))[:, :n]
        # quadrature-weighted centroid; the plain mean where a cell's weights are all zero
        wt = torch.where((wsum > 0).gather(1, idx.clamp(max=max(n - 1, 0))) & prev.mask, w, prev.mask.to(w.dtype))
        num = w.new_zeros(b, n + 1, d).scatter_add(1, idx[..., None].expand(b, p, d), wt[..., None] * prev.pos)
        den = w.new_zeros(b, n + 1).scatter_add(1, idx, wt)
        ppos = num[:, :n] / den[:, :n, None].clamp_min(torch.finfo(w.dtype).tiny)
        pmask = cnt > 0
        next_pool = lengths[2 * i + 1] if i + 1 < n_lv else None
        geo, lay = _frames(ppos, pmask, wsum, box, rotate, ball=lengths[2 * i], key=pool_len, pool=next_pool,
                           window=UNIT, assign=lay.pool_centres)
        levels.append(geo)
    return ErwinGeometry(tree, levels)


class CellPool(nn.Module):
    """Children -> parent cell: ``LayerNorm(Linear(Σ_{j∈c} w_j h_j / Σ_{j∈c} w_j))`` (``0`` for a weightless cell)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.lin = nn.Linear(c_in, c_out)
        self.norm = nn.LayerNorm(c_out)

    def forward(self, h: torch.Tensor, child, parent) -> torch.Tensor:
        b, p, c = h.shape
        n, idx = child.n_pool, child.pool_index
        zero = torch.zeros((), dtype=h.dtype, device=h.device)
        w = torch.where(child.mask, child.weights.to(h.dtype), zero)
        total = w.new_zeros(b, n + 1).scatter_add(1, idx, w)[:, :n]
        acc = h.new_zeros(b, n + 1, c).scatter_add(1, idx[..., None].expand(b, p, c),
                                                   torch.where(child.mask[..., None], h, zero) * w[..., None])
        mean = acc[:, :n] / torch.where(total > 0, total, torch.ones((), dtype=h.dtype, device=h.device))[..., None]
        return parent.tokens.to_tree(self.norm(self.lin(mean)))


class CellUnpool(nn.Module):
    """Parent cell -> each of its points: ``LayerNorm(skip + Linear([h_c, p_j - p_c]))``, one map for every child."""

    def __init__(self, c_parent: int, c_child: int, d: int) -> None:
        super().__init__()
        self.lin = nn.Linear(c_parent + d, c_child)
        self.norm = nn.LayerNorm(c_child)

    def forward(self, h: torch.Tensor, skip: torch.Tensor, child, parent) -> torch.Tensor:
        zero = torch.zeros((), dtype=h.dtype, device=h.device)
        idx = child.pool_index
        hp = F.pad(parent.tokens.from_tree(h), (0, 0, 0, 1))  # compact cells, plus a zero row for empty slots
        pp = F.pad(parent.tokens.from_tree(parent.pos.to(h.dtype)), (0, 0, 0, 1))
        hc = hp.gather(1, idx[..., None].expand(-1, -1, hp.shape[-1]))
        rel = child.pos.to(h.dtype) - pp.gather(1, idx[..., None].expand(-1, -1, pp.shape[-1]))
        rel = torch.where(child.mask[..., None], rel, zero)
        return self.norm(skip + self.lin(torch.cat([hc, rel], dim=-1)))
