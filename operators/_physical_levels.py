"""Erwin's levels in the physical mode (``ball_mode="physical"``): one cell layout holds every level's cells, the
pooling is the quadrature mean of a cell and the unpooling one map per child.

Level 0 is the points in the order of :func:`~sciattn.balltree.physical.cell_layout` for all the lengths of all
levels (``[ball_0, pool_0, ball_1, pool_1, ...]``, a coarse level's lengths at least the pooling length that made
it): a node of every length is a contiguous run of slots, the same number in every cloud. Level ``i + 1`` holds one
token per pool cell of level ``i`` at the quadrature-weighted centroid of its points, weighing their total weight;
its rotated layout places the tokens by their cells' geometric centres (which do not move under refinement).

* :class:`PhysicalPool`: ``LayerNorm(Linear(Σ_j w_j h_j / Σ_j w_j))`` over the cell;
* :class:`PhysicalUnpool`: ``LayerNorm(skip + Linear([h_parent, p_child - p_parent]))``, one map for every child.

Shapes: a level's slots ``(B, P_i, C)``; pooling ``stride`` slots of level ``i`` per token of level ``i + 1``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sciattn.balltree.physical import cell_centres, cell_layout, cloud_box, lattice_for

from ._geometry import ErwinGeometry, LevelGeometry

__all__ = ["PhysicalPool", "PhysicalUnpool", "physical_geometry", "physical_lengths", "physical_level"]


def physical_level(pos, mask, weights, lengths, rotate, sizes: tuple[int, ...], *, box=None,
                   assign=None, centres=None) -> LevelGeometry:
    """Geometry of a level in cell order (physical mode); with ``rotate`` also the cell layout of its rotated
    points for ``lengths`` (:func:`~sciattn.balltree.physical.cell_layout`), which may hold more slots.

    ``box``: the cloud's box (default: the level's own points'); ``assign``: ``(B, P, d)`` positions that
    place the tokens into rotated cells (default ``pos``; a coarse level passes its cells' centres,
    which do not move under refinement, where the tokens' centroids do)."""
    geo = LevelGeometry(pos, mask, weights, sizes=sizes, centres=centres)
    if rotate is not None and (isinstance(rotate, torch.Tensor) or rotate):
        lay = cell_layout(pos if assign is None else assign, mask, lengths, rotate, box=box)
        rt, p = lay.tree, pos.shape[1]
        geo.rot_index, geo.rot_inverse = rt.perm, rt.inverse[:, :p]
        geo.rot_mask = rt.mask
        geo.rot_pos = F.pad(pos, (0, 0, 0, rt.perm.shape[1] - p)).gather(1, rt.perm[..., None].expand(-1, -1, pos.shape[-1]))
        geo.rot_weights = F.pad(weights, (0, rt.perm.shape[1] - p)).gather(1, rt.perm)
        geo.rot_sizes = tuple(lay.size(i) for i in range(len(lengths)))
        geo.rot_centres = lay.centres(0)
    return geo


class PhysicalPool(nn.Module):
    """Children -> parent by quadrature: ``LayerNorm(Linear(Σ_j w_j h_j / Σ_j w_j))`` over the parent node.

    The parent is a tree node of the physical size ``pool_diameter`` holding any number of children
    (``stride`` slots, chosen from the geometry), so the learned map acts on their quadrature mean,
    ``∫_node h dμ / μ(node)``, which converges under refinement; Erwin's concatenation of a fixed
    number of children cannot (its input size is the point count).
    """

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.lin = nn.Linear(c_in, c_out)
        self.norm = nn.LayerNorm(c_out)

    def forward(self, h: torch.Tensor, child: LevelGeometry, stride: int) -> torch.Tensor:
        b, p, c = h.shape
        s = stride
        zero = torch.zeros((), dtype=h.dtype, device=h.device)
        w = torch.where(child.mask, child.weights.to(h.dtype), zero).view(b, p // s, s, 1)
        hc = torch.where(child.mask[..., None], h, zero).view(b, p // s, s, c)
        total = w.sum(2)
        mean = (w * hc).sum(2) / torch.where(total > 0, total, torch.ones((), dtype=h.dtype, device=h.device))
        return self.norm(self.lin(mean))


class PhysicalUnpool(nn.Module):
    """Parent -> each child: ``LayerNorm(skip + Linear([h_parent, p_child - p_parent]))``, one map for every
    child whatever their number (Erwin's ``Linear(... -> s·c)`` has one output slot per child)."""

    def __init__(self, c_parent: int, c_child: int, d: int) -> None:
        super().__init__()
        self.lin = nn.Linear(c_parent + d, c_child)
        self.norm = nn.LayerNorm(c_child)

    def forward(self, h: torch.Tensor, skip: torch.Tensor, child: LevelGeometry, parent: LevelGeometry,
                stride: int) -> torch.Tensor:
        zero = torch.zeros((), dtype=h.dtype, device=h.device)
        hp = h.repeat_interleave(stride, dim=1)
        rel = child.pos.to(h.dtype) - parent.pos.to(h.dtype).repeat_interleave(stride, dim=1)
        rel = torch.where(child.mask[..., None], rel, zero)
        return self.norm(skip + self.lin(torch.cat([hp, rel], dim=-1)))


def physical_lengths(model) -> list[float]:
    """``[ball_0, pool_0, ball_1, pool_1, ..., ball_{S-1}]``: the lengths of every level in one cell layout; a
    coarse level's lengths are at least the pooling length that made it (its tokens are those cells)."""
    out, pool = [model.ball_diameters[0]], None
    for i, p in enumerate(model.pool_diameters):
        pool = p if pool is None else max(p, pool)
        out += [pool, max(model.ball_diameters[i + 1], pool)]
    return out


def physical_geometry(model, pos, mask, weights, rotate) -> ErwinGeometry:
    """Every level's geometry of a physical-mode Erwin ``model`` (module docstring)."""
    lengths = physical_lengths(model)
    box = cloud_box(pos, mask, lattice_for(model.ball_diameters + model.pool_diameters))
    lay = cell_layout(pos, mask, lengths, box=box)  # every level's cells, chosen per cloud
    tree = lay.tree
    w = tree.mask.to(pos.dtype) if weights is None else tree.values_to_tree(weights.to(pos.dtype))
    geo = physical_level(tree.pos, tree.mask, w, model.ball_diameters[:1], rotate, (lay.size(0),), box=box,
                         centres=lay.centres(0))
    levels = [geo]
    span = 1  # level-0 slots per token of the current level
    for i in range(len(model.pool_diameters)):
        b, p, d = geo.pos.shape
        pool_slots, ball_slots = lay.size(1 + 2 * i), lay.size(2 + 2 * i)
        s = pool_slots // span  # tokens of level i pooled into one token of level i+1
        m = geo.mask.view(b, p // s, s)
        wc = torch.where(m, geo.weights.view(b, p // s, s), 0)
        wsum = wc.sum(-1)
        # quadrature-weighted centroid; the plain mean where a cell's weights are all zero
        wt = torch.where((wsum > 0)[..., None], wc, m.to(wc.dtype))
        ppos = (wt[..., None] * torch.where(m[..., None], geo.pos.view(b, p // s, s, d), 0)).sum(2)
        ppos = ppos / wt.sum(-1).clamp_min(torch.finfo(wt.dtype).tiny)[..., None]
        span = pool_slots
        pmask = m.any(-1)
        # each token's cell centre (exact geometry, the same for all its members)
        cc = lay.centres(1 + 2 * i).view(b, -1, span, d)
        cnt = tree.mask.view(b, -1, span, 1).to(cc.dtype)
        assign = (cc * cnt).sum(2) / cnt.sum(2).clamp_min(1)
        geo = physical_level(ppos, pmask, wsum, model.ball_diameters[i + 1:i + 2], rotate, (ball_slots // span,),
                             box=box, assign=assign, centres=cell_centres(assign, box, lay.depths[2 + 2 * i]))
        geo.stride = s
        levels.append(geo)
    return ErwinGeometry(tree, levels)
