r"""Erwin's and BSA's geometry on one rank of a domain-parallel group: the rank's slots of the whole mesh's layout.

Each rank of the group holds a part of the points of the same clouds. Its forward
(:meth:`~sciattn.operators._point_operator.BallTreeOperator.forward` with a group in ``point_plan``):

1. **the layout of the whole mesh, on every rank**: the positions and masks of every rank are all-gathered
   (``torch.distributed.all_gather``, no gradient: the layout — cells, sort orders, slots — is piecewise
   constant in the positions) and every rank builds the same layout of the whole clouds, with the same code as
   one process (:func:`~._multiscale_levels.multiscale_geometry`, :func:`~sciattn.balltree.build_ball_tree`):
   the cloud's box, the depths clamped by its point count, the key and pool cells, the rotated layouts. Cost:
   the build of one process and ``O(N·d)`` numbers per rank, in integers and positions; no features.
2. **the split, at units that couple nothing across them** (:func:`owners`): Erwin's units are the ball cells
   of its coarsest level, which hold whole ball cells, near-field windows' queries, key cells and pool cells
   of every finer level (every level's cells are nested cells of one spatial bisection; a configuration where
   a finer level's ball is not nested is refused); BSA's are its windows (``window`` tree slots: the local
   balls, and the blocks the compressed and selected branches see, never cross them). Units go to the ranks
   in contiguous runs balanced by their points (:func:`~._domain_slots.balanced_owner`), and a rank's points
   must be those (what :func:`split_batch` gives; checked, with an error naming ``x``).
3. **the rank's slots of every level**: its run of each global slot array, re-indexed to its own points
   (:class:`LocalTree`) and, for Erwin's coarse levels, to its own pool cells; every value that carries a
   gradient (positions, quadrature weights, the coarse tokens' centroids and masses) is recomputed from the
   rank's own differentiable inputs, exactly as one process computes it on the same points.
4. **the rotated layouts** (odd blocks), whose cells cross the units: they get their own split, at their
   ball cells (Erwin) or windows (BSA), balanced the same way, and :class:`~._domain_slots.Exchange` moves the
   tokens there and back around the block (a differentiable ``all_to_all_single``).

What is exact: every attention, pooling and unpooling sees, on the rank that computes it, the same keys,
weights and slots as one process, so outputs and gradients are those of one process up to the order of
floating-point additions (tested to 1e-10 relative in float64). The quadrature weights need no global
normalisation: every place Erwin and BSA use them (softmax key weights, pooling means, the coarse tokens'
masses) is invariant to their scale.

Shapes: a rank's part ``(B, n_r, ·)``; its slots of level ``i`` ``(B, size_i, ·)``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from sciattn.balltree.multiscale import FarField

from ._domain_slots import Exchange, SlotRange, balanced_owner, gather_points, slot_ranges
from ._geometry import ErwinGeometry, LevelGeometry

__all__ = ["LocalTree", "domain_geometry", "owners", "split_batch"]


class LocalTree:
    """A rank's slots of a layout and the map from its own sources (points, or a coarse level's cells) to them:
    ``idx`` ``(B, P)`` the source of every slot that holds one (``mask``), ``inverse`` ``(B, n)`` the slot of every
    source (``P`` for a source without one: a zero row), ``n_points`` the sources ``n``."""

    def __init__(self, idx: torch.Tensor, mask: torch.Tensor, n_points: int) -> None:
        b, p = idx.shape
        self.perm, self.mask, self.n_points = torch.where(mask, idx, 0), mask, n_points
        slots = torch.arange(p, device=idx.device).expand(b, p)
        inv = torch.full((b, n_points + 1), p, dtype=torch.long, device=idx.device)
        self.inverse = inv.scatter_(1, torch.where(mask, idx, n_points), slots)[:, :n_points]

    def to_tree(self, x: torch.Tensor) -> torch.Tensor:
        """Sources ``(B, n, C)`` -> slots ``(B, P, C)``, zero where a slot holds none."""
        got = x.gather(1, self.perm[..., None].expand(-1, -1, x.shape[-1]))
        return torch.where(self.mask[..., None], got, torch.zeros((), dtype=x.dtype, device=x.device))

    def values_to_tree(self, v: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """Per-source values ``(B, n)`` -> ``(B, P)``, ``fill`` where a slot holds none."""
        return torch.where(self.mask, v.gather(1, self.perm), torch.full((), fill, dtype=v.dtype, device=v.device))

    def from_tree(self, y: torch.Tensor) -> torch.Tensor:
        """Slots ``(B, P, C)`` (or ``(B, P + 1, C)`` whose last row a source without a slot takes) -> ``(B, n, C)``."""
        if y.shape[1] == self.mask.shape[1]:
            y = F.pad(y, (0, 0, 0, 1))
        return y.gather(1, self.inverse[..., None].expand(-1, -1, y.shape[-1]))


def _local_tree(rng: SlotRange, perm: torch.Tensor, mask: torch.Tensor, base: torch.Tensor, n: int) -> LocalTree:
    """The :class:`LocalTree` of ``rng`` in a global layout (``perm`` ``(B, P)`` global source ids, ``mask`` real
    slots), the rank's sources being the global ids ``base + 0 .. n-1`` (``base`` ``(B,)``)."""
    own = rng.take(mask, False)
    idx = rng.take(perm) - base[:, None]
    return LocalTree(torch.where(own, idx, 0), own, n)


def _slice_far(far: FarField, rng: SlotRange) -> FarField:
    """``far`` on the rank's slots: per-slot arrays cut, key-cell runs shifted to local slots, the windows' key
    cells cut (the key-cell tables keep their global size: a rank's windows read its own cells only)."""
    m, nk = far.window, far.n_keys
    shift = rng.start[:, None]
    start, end = far.key_start - shift, far.key_end - shift
    start[:, nk], end[:, nk] = rng.size, rng.size
    first = torch.div(rng.start, m, rounding_mode="floor")
    wins = SlotRange(first, first, (first + rng.size // m).clamp(max=far.window_keys.shape[1]), rng.size // m)
    return FarField(m, rng.take(far.slot_ball, -1), rng.take(far.key_index, nk), nk, far.key_ball, start, end,
                    wins.take(far.window_keys, nk))


def _nested(inner: torch.Tensor, unit: torch.Tensor, real: torch.Tensor) -> bool:
    """Whether every id of ``inner`` ``(B, P)`` (ball cells) lies in one ``unit`` (over the real slots)."""
    if not bool(real.any()):
        return True
    n = int(inner[real].max()) + 1
    idx = torch.where(real, inner, n)
    big = torch.iinfo(torch.long).max
    lo = torch.full((inner.shape[0], n + 1), big, device=inner.device).scatter_reduce(1, idx, unit, "amin")
    hi = torch.full((inner.shape[0], n + 1), -1, device=inner.device).scatter_reduce(1, idx, unit, "amax")
    used = hi[:, :n] >= 0
    return bool((lo[:, :n][used] == hi[:, :n][used]).all())


def _monotone(unit: torch.Tensor, real: torch.Tensor) -> bool:
    u = torch.where(real, unit, -1).cummax(1).values
    return bool((torch.where(real, unit, u) >= u).all())


def owners(model, geo: ErwinGeometry, parts: int) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """``(owner of every slot of every level, owner of every slot of every rotated layout)`` (``-1``: no token):
    the split of the module docstring. Raises naming the option where the units do not nest."""
    levels = geo.levels
    if model.ball_mode == "multiscale":
        top = levels[-1]
        units = [torch.where(top.mask, top.far.slot_ball, -1)]
        for lv, up in zip(levels[-2::-1], levels[:0:-1], strict=True):
            parent = up.tokens.inverse.gather(1, lv.pool_index.clamp(max=max(lv.n_pool - 1, 0)))
            units.insert(0, torch.where(lv.mask, units[0].gather(1, parent.clamp(max=up.mask.shape[1] - 1)), -1))
        for i, (lv, u) in enumerate(zip(levels, units, strict=True)):
            if not (_nested(lv.far.slot_ball, u, lv.mask) and _monotone(u, lv.mask)):
                raise ValueError(f"ball_diameters: domain-parallel Erwin splits the clouds at the ball cells of its "
                                 f"coarsest level, which must hold whole ball cells of every level; level {i}'s "
                                 f"(ball_diameters[{i}]={model.ball_diameters[i]}) are not nested in them (got "
                                 f"ball_diameters={model.ball_diameters}, pool_diameters={model.pool_diameters})")
        rot_units = [None if lv.rot_far is None else lv.rot_far.slot_ball for lv in levels]
    else:  # BSA, point counts: windows of tree slots
        lv = levels[0]
        win = min(model.blocks[0].attn.window, lv.mask.shape[1])
        units = [torch.arange(lv.mask.shape[1], device=lv.mask.device).expand_as(lv.mask) // win]
        rot_units = [None if lv.rot_mask is None else
                     torch.arange(lv.rot_mask.shape[1], device=lv.mask.device).expand_as(lv.rot_mask) // win]
    n_units = int(units[-1].max()) + 2
    own0 = balanced_owner(units[0].clamp_min(0), levels[0].mask, parts, n_units)
    table = torch.full((own0.shape[0], n_units + 1), -1, dtype=torch.long, device=own0.device)
    table.scatter_(1, torch.where(levels[0].mask, units[0], n_units), own0)
    table[:, n_units] = -1
    own = [torch.where(lv.mask, table.gather(1, torch.where(lv.mask, u, n_units)), -1)
           for lv, u in zip(levels, units, strict=True)]
    rot_own = []
    for lv, u in zip(levels, rot_units, strict=True):
        if u is None:
            rot_own.append(None)
            continue
        n = int(u[lv.rot_mask].max()) + 1 if bool(lv.rot_mask.any()) else 1
        rot_own.append(balanced_owner(torch.where(lv.rot_mask, u, 0), lv.rot_mask, parts, n))
    return own, rot_own


def _windows(lv: LevelGeometry, model) -> tuple[int, int]:
    """The slot alignment of a level and of its rotated layout."""
    if lv.far is not None:
        return lv.far.window, (lv.rot_far.window if lv.rot_far is not None else lv.far.window)
    win = min(model.blocks[0].attn.window, lv.mask.shape[1])
    return win, win


def _global_geometry(model, pos: torch.Tensor, mask: torch.Tensor) -> ErwinGeometry:
    """The layout of the whole clouds (no weights: the layout does not depend on them)."""
    return model._build_geometry(pos, mask, None)


def split_batch(model, batch: dict, part: int, parts: int) -> dict:
    """Part ``part`` of ``parts`` of a padded point batch (``x``, ``y``, ``pos``, ``weights``, ``mask``, point axis 1):
    per cloud the points of the units :func:`owners` gives that rank, in their input order, padded to the most
    points of a cloud (``mask`` added); other entries unchanged."""
    from .point_parts import POINT_KEYS

    pos = batch["pos"]
    b, n, _ = pos.shape
    mask = batch.get("mask")
    mask = torch.ones(b, n, dtype=torch.bool, device=pos.device) if mask is None else mask
    geo = _global_geometry(model, pos.detach(), mask)
    own, _ = owners(model, geo, parts)
    rng = slot_ranges(own[0], parts, _windows(geo.levels[0], model)[0])[part]
    real = rng.take(geo.tree.mask, False)
    ids = torch.where(real, rng.take(geo.tree.perm), n).sort(1).values
    count = real.sum(1)
    k = max(int(count.max()), 1)
    ids = ids[:, :k] if ids.shape[1] >= k else F.pad(ids, (0, k - ids.shape[1]), value=n)
    keep = torch.arange(k, device=pos.device) < count[:, None]
    sel = ids.clamp(max=n - 1)
    out = {}
    for key, v in batch.items():
        if key in POINT_KEYS and v is not None:
            out[key] = v.gather(1, sel.view(b, k, *([1] * (v.dim() - 2))).expand(-1, -1, *v.shape[2:]))
        else:
            out[key] = v
    out["mask"] = keep & mask.gather(1, sel)
    return out


def _check_parts(geo: ErwinGeometry, rng0: list[SlotRange], gmask: torch.Tensor, offsets: list[int], name: str):
    """Every rank holds exactly the real points of its units (else a ValueError naming ``x``, on every rank)."""
    ends = offsets[1:] + [gmask.shape[1]]
    for q, (rg, a, e) in enumerate(zip(rng0, offsets, ends, strict=True)):
        real = rg.take(geo.tree.mask, False)
        ids = rg.take(geo.tree.perm)
        inside = ((ids >= a) & (ids < e)) | ~real
        if not bool(inside.all()) or not torch.equal(real.sum(1), gmask[:, a:e].sum(1)):
            raise ValueError(f"x: rank {q}'s points are not a part of whole units of the {name} layout: domain-parallel "
                             f"{name} needs each rank to hold the points model.split_points(batch, {q}, "
                             f"{len(offsets)}) gives (the split follows the layout's units so that attention needs "
                             f"no communication)")


def domain_geometry(model, pos: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None, group) -> ErwinGeometry:
    """This rank's geometry (module docstring): an :class:`ErwinGeometry` whose ``tree`` is a :class:`LocalTree`
    of the rank's points and whose levels hold the rank's slots, rotated layouts reached by ``rot_exchange``."""
    rank, parts = dist.get_rank(group), dist.get_world_size(group)
    gpos, gmask, offsets = gather_points(pos, mask, group)
    empty = ~gmask.any(1)
    if bool(empty.any()):
        raise ValueError(f"mask: expected at least one real point per cloud over the ranks of the domain-parallel "
                         f"group, got none in cloud {int(empty.nonzero()[0, 0])}")
    geo = _global_geometry(model, gpos, gmask)
    own, rot_own = owners(model, geo, parts)
    wins = [_windows(lv, model) for lv in geo.levels]
    ranges = [slot_ranges(o, parts, w[0]) for o, w in zip(own, wins, strict=True)]
    rot_ranges = [None if o is None else slot_ranges(o, parts, w[1]) for o, w in zip(rot_own, wins, strict=True)]
    name = type(model).__name__
    _check_parts(geo, ranges[0], gmask, offsets, name)
    b = pos.shape[0]
    base = torch.full((b,), offsets[rank], dtype=torch.long, device=pos.device)
    tree = _local_tree(ranges[0][rank], geo.tree.perm, geo.tree.mask, base, pos.shape[1])
    w = tree.mask.to(pos.dtype) if weights is None else tree.values_to_tree(weights.to(pos.dtype))
    tpos = tree.to_tree(pos)
    if model.ball_mode != "multiscale":  # BSA: padding slots sit at their ball's centre, as the build puts them
        tpos = _pad_at_centres(tpos, tree.mask, model.ball_size)
    levels, tokens = [], tree
    for i, lv in enumerate(geo.levels):
        if i:
            tokens, tpos, w = _coarse_tokens(levels[-1], lv, ranges[i][rank])
        levels.append(_local_level(model, lv, tokens, tpos, w, ranges[i], rot_ranges[i], rank, group))
    return ErwinGeometry(tree, levels)


def _pad_at_centres(tpos: torch.Tensor, mask: torch.Tensor, ball: int) -> torch.Tensor:
    """Padding slots at the centroid of their ball's real points (:func:`~sciattn.balltree.build_ball_tree`)."""
    b, p, d = tpos.shape
    ball = min(ball, p)
    x, mf = tpos.view(b, p // ball, ball, d), mask.to(tpos.dtype).view(b, p // ball, ball)
    centre = x.sum(2) / mf.sum(-1, keepdim=True).clamp_min(1)
    return torch.where(mask.view(b, p // ball, ball, 1), x, centre.view(b, p // ball, 1, d)).view(b, p, d)


def _coarse_tokens(prev: LevelGeometry, lv: LevelGeometry, rng: SlotRange):
    """Level ``i``'s tokens on this rank from its level ``i-1`` (:func:`~._multiscale_levels.multiscale_geometry`'s
    pooling, on the rank's own pool cells): ``(LocalTree of its cells, positions, masses)`` in its slots."""
    b, p, d = prev.pos.shape
    n, idx = prev.n_pool, prev.pool_index
    w = torch.where(prev.mask, prev.weights, 0)
    wsum = w.new_zeros(b, n + 1).scatter_add(1, idx, w)[:, :n]
    wt = torch.where((wsum > 0).gather(1, idx.clamp(max=max(n - 1, 0))) & prev.mask, w, prev.mask.to(w.dtype))
    num = w.new_zeros(b, n + 1, d).scatter_add(1, idx[..., None].expand(b, p, d), wt[..., None] * prev.pos)
    den = w.new_zeros(b, n + 1).scatter_add(1, idx, wt)
    ppos = num[:, :n] / den[:, :n, None].clamp_min(torch.finfo(w.dtype).tiny)
    tokens = _local_tree(rng, lv.tokens.perm, lv.tokens.mask, prev.pool_base, n)
    return tokens, tokens.to_tree(ppos), tokens.values_to_tree(wsum)


def _local_level(model, lv: LevelGeometry, tokens: LocalTree, tpos, w, ranges: list[SlotRange],
                 rot_ranges: list[SlotRange] | None, rank: int, group) -> LevelGeometry:
    """One level on this rank: its slots cut from the global level ``lv``, the values of its own tokens."""
    rng = ranges[rank]
    out = LevelGeometry(tpos, tokens.mask, w, sizes=lv.sizes, tokens=tokens)
    if lv.far is not None:
        out.centres, out.far = rng.take(lv.centres), _slice_far(lv.far, rng)
    if lv.pool_index is not None:
        own = tokens.mask
        gp = rng.take(lv.pool_index, lv.n_pool)
        has = own.any(1)
        c0 = torch.where(has, torch.where(own, gp, lv.n_pool).amin(1), 0)
        c1 = torch.where(has, torch.where(own, gp + 1, 0).amax(1), 0)
        out.n_pool = max(int((c1 - c0).max()), 1)
        out.pool_index = torch.where(own, gp - c0[:, None], out.n_pool)
        out.pool_base = c0
    if rot_ranges is not None:
        ex = Exchange(lv.rot_index, lv.rot_mask, ranges, rot_ranges, rank, group)
        rr = rot_ranges[rank]
        moved = ex.forward(torch.cat([tpos, w[..., None].to(tpos.dtype)], dim=-1))
        out.rot_mask = rr.take(lv.rot_mask, False)
        out.rot_pos, out.rot_weights = moved[..., :-1], moved[..., -1].to(w.dtype)
        if lv.far is None:  # BSA: padding slots at their rotated ball's centre
            out.rot_pos = _pad_at_centres(out.rot_pos, out.rot_mask, model.ball_size)
        else:
            out.rot_centres, out.rot_far = rr.take(lv.rot_centres), _slice_far(lv.rot_far, rr)
        out.rot_sizes, out.rot_exchange = lv.rot_sizes, ex
    return out
