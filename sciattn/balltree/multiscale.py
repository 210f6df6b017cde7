r"""Multiscale physical layout: physical balls whose far field is pooled into key cells, with no capacity padding.

Physical balls (:mod:`sciattn.balltree.physical`) hold more points as the sampling is refined, so exact
attention inside them costs ``O(n²/#balls)``, and padding every cell to the most crowded one costs memory in
the density contrast. This layout serves :class:`~sciattn.balltree.multiscale_attention.MultiscaleBallAttention`,
which splits the ball integral into a bounded near field and a far field pooled into a bounded number of cells
(the multipole split MANO's physical pyramid makes on grids):

* **cells** of the spatial bisection of every cloud's box (:func:`~sciattn.balltree.physical.cloud_box`, the
  same cells as the physical mode): the *ball* cell at the depth of the ball diameter, the *key* cells at the
  depth of the (smaller) key diameter, nested in it, and the *pool* cells of the U-Net's pooling. Depths are
  chosen per cloud from its own box and clamped, per cloud, to ``⌈log2 n⌉ + 2`` for its ``n`` real points;
* **order**: every point gets the id of its cell at depth 60 (60 bits; the k-d / Morton order of
  the bisection), so the cell at any depth ``ℓ`` is the id's first ``ℓ`` bits; points are sorted by it (ties:
  lexicographically by coordinate, then by input index, so permuting the input permutes the layout);
* **slots**: each ball cell's points are padded to a multiple of the unit ``u``; the runs follow each other;
  each cloud's slots are padded to the batch's count (a multiple of the near-field window ``m``). So a unit of
  ``u`` slots lies in one ball cell, and ``m`` consecutive slots are the near-field window of their points;
* **key cells** (compact: the non-empty ones, in order; each a run of slots in one ball) and, for every window,
  the run of key cells of the balls its slots belong to (``window_keys`` ``(B, P/m, K)``, ``K`` the most in the
  batch; shorter runs point at an empty dummy cell); **pool cells** (compact, in order) with their geometric
  centres.

Memory is ``O(P + #key cells + P·K/m)``: linear in the points for a fixed geometry (``K`` is at most the key
cells of the few balls a window meets, a number set by lengths, not by the sampling), whatever the density contrast. Every choice is
per cloud; a batch shares only shapes (slot, unit, key and pool counts, padded and masked), so a cloud's
layout does not depend on the rest of its batch or on padding. Building reads a few small tensors back to
the host (the depths, the counts that are shapes).

Shapes: pos ``(B, N, d)``, mask ``(B, N)`` -> a layout of ``P`` slots (:class:`MultiscaleLayout`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .._checks import check_rank
from .build import rotate_points
from .physical import (
    _MAX_DEPTH,
    _cell_ids,
    _depths_of,
    _split_axes,
    cell_centres,
    check_length,
    clamp_depths,
    frame,
)
from .tree import BallTree

__all__ = ["CODE_DEPTH", "FarField", "MultiscaleLayout", "multiscale_layout"]

#: bisections of the sort key (one bit each): cells of ``2^-20`` of the box per axis in 3-D
CODE_DEPTH = 60


@dataclass(frozen=True, eq=False)
class FarField:
    """What multiscale attention needs from a layout, in slot order.

    Attributes:
        window: ``m``, slots per near-field window (the layout's windows are the runs of ``m`` slots).
        slot_ball: ``(B, P)`` compact ball cell of every slot (``n_balls`` for empty slots).
        key_index: ``(B, P)`` compact key cell of every slot (``n_keys`` for empty slots: a dummy cell).
        n_keys: key cells per cloud in the shapes (the most non-empty key cells of a cloud in the batch).
        key_ball: ``(B, n_keys + 1)`` the ball of every key cell (``-1`` for the dummy).
        key_start, key_end: ``(B, n_keys + 1)`` the run of slots ``[start, end)`` of every key cell.
        window_keys: ``(B, P/m, K)`` the key cells of the balls that meet each window, in order (``n_keys``
            beyond them; ``K`` the most in the batch).
    """

    window: int
    slot_ball: torch.Tensor
    key_index: torch.Tensor
    n_keys: int
    key_ball: torch.Tensor
    key_start: torch.Tensor
    key_end: torch.Tensor
    window_keys: torch.Tensor


@dataclass(frozen=True, eq=False)
class MultiscaleLayout:
    """A multiscale layout: ``tree`` (slot order; ``tree.ball_size`` is the near-field window ``m``), ``far``
    (:class:`FarField`), ``centres`` ``(B, P, d)`` the geometric centre (input frame) of every slot's ball cell,
    and the pool cells: ``pool_index`` ``(B, P)`` (``n_pool`` for empty slots) and ``pool_centres``
    ``(B, n_pool, d)`` their geometric centres (None without a pool length), with every cloud's depths
    ``depths`` (``{"ball", "key", "pool"}`` -> ``(B,)``)."""

    tree: BallTree
    far: FarField
    centres: torch.Tensor
    pool_index: torch.Tensor | None
    n_pool: int
    pool_centres: torch.Tensor | None
    depths: dict


def _compact(ids: torch.Tensor, real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted ids ``(B, N)`` (real points first) -> compact index ``(B, N)`` (0, 1, ... per distinct id of the
    real points) and the count ``(B,)`` of distinct ids."""
    new = torch.ones_like(real)
    new[:, 1:] = ids[:, 1:] != ids[:, :-1]
    new = new & real
    return new.cumsum(1) - 1, new.sum(1)


def _scatter_first(index: torch.Tensor, values: torch.Tensor, size: int, real: torch.Tensor) -> torch.Tensor:
    """``(B, size)``: for every compact index the value at its first occurrence (sorted input: the minimum)."""
    big = torch.iinfo(values.dtype).max
    out = torch.full((index.shape[0], size + 1), big, dtype=values.dtype, device=values.device)
    idx = torch.where(real, index, size)
    return out.scatter_reduce_(1, idx, values, reduce="amin")[:, :size]


def multiscale_layout(
    pos: torch.Tensor,
    mask: torch.Tensor | None,
    box: tuple[torch.Tensor, torch.Tensor],
    *,
    ball: float,
    key: float,
    pool: float | None = None,
    window: int = 64,
    unit: int = 16,
    rotate: float | torch.Tensor | None = None,
    assign: torch.Tensor | None = None,
) -> MultiscaleLayout:
    """Lay every cloud out by ball cell, near-field windows and key cells (see the module docstring).

    Args:
        pos: ``(B, N, d)`` positions (stored in the layout); entries with ``mask == False`` may hold anything.
        mask: ``(B, N)`` bool (None: all real); every cloud needs a real point.
        box: ``(lo, sides)`` ``(B, d)`` of every cloud's (unrotated) box (:func:`~sciattn.balltree.physical.cloud_box`).
        ball, key, pool: the ball, key-cell and pool-cell diameters (``key <= ball``; ``pool`` None: no pool cells).
        window: ``m``, slots of a near-field window (a multiple of ``unit``).
        unit: ``u``, slots that share one set of far keys; a ball cell's run is padded to a multiple of it.
        rotate: cut the cells in a rotated frame (an angle in degrees or a ``(d, d)`` matrix; the box is the
            rotated box's box); stored positions and centres stay in the input frame.
        assign: ``(B, N, d)`` positions that choose the cells (default ``pos``; a coarse level passes its
            cells' centres, which do not move under refinement, where its tokens' centroids do).

    Returns:
        :class:`MultiscaleLayout`.
    """
    check_rank("pos", pos, 3, "(B, N, d)")
    ball, key = check_length("ball", ball), check_length("key", key)
    if key > ball:
        raise ValueError(f"key: expected a length <= ball={ball} (key cells nest in the ball cell), got {key}")
    if window <= 0 or unit <= 0 or window % unit:
        raise ValueError(f"window: expected a positive multiple of unit={unit}, got {window}")
    b, n, d = pos.shape
    dev = pos.device
    valid = torch.ones(b, n, dtype=torch.bool, device=dev) if mask is None else mask
    zero = torch.zeros((), dtype=pos.dtype, device=dev)
    base = torch.where(valid[..., None], pos, zero)
    where = base if assign is None else torch.where(valid[..., None], assign.to(pos.dtype), zero)
    coords, (lo, sides), rot = frame(where.double(), (box[0].double(), box[1].double()), rotate)
    _, history = _split_axes(sides, _MAX_DEPTH)
    n_real = valid.sum(1).tolist()  # host sync: the per-cloud clamp counts the cloud's own real points
    cap = clamp_depths(n_real, dev)
    depths = {"ball": torch.minimum(_depths_of(sides, history, ball), cap)}
    depths["key"] = torch.maximum(torch.minimum(_depths_of(sides, history, key), cap), depths["ball"])
    if pool is not None:
        depths["pool"] = torch.minimum(_depths_of(sides, history, check_length("pool", pool)), cap)
    code = _cell_ids(coords, valid, lo, sides, torch.full((b,), CODE_DEPTH, dtype=torch.long, device=dev))
    code = torch.where(valid, code, torch.iinfo(torch.long).max)
    # order: lexicographic by coordinates (stable sorts, last axis first), then stably by the cell code
    order = torch.arange(n, device=dev).expand(b, n)
    for a in range(d - 1, -1, -1):
        order = order.gather(1, torch.sort(coords[..., a].gather(1, order), dim=1, stable=True).indices)
    order = order.gather(1, torch.sort(code.gather(1, order), dim=1, stable=True).indices)
    scode, real = code.gather(1, order), valid.gather(1, order)
    ids = {k: scode >> (CODE_DEPTH - v)[:, None] for k, v in depths.items()}
    ball_c, n_ball = _compact(ids["ball"], real)
    key_c, n_key = _compact(ids["key"], real)
    nb, nk = int(n_ball.max()), int(n_key.max())  # host sync: shapes
    ball_i = torch.where(real, ball_c, nb)
    count = torch.zeros(b, nb + 1, dtype=torch.long, device=dev).scatter_add_(1, ball_i, torch.ones_like(ball_i))
    count = count[:, :nb]
    padded = (count + unit - 1) // unit * unit
    start = F.pad(padded.cumsum(1), (1, 0))[:, :nb]  # first slot of every ball's run
    first = F.pad(count.cumsum(1), (1, 0))[:, :nb]  # first sorted position of every ball
    p = max(int(padded.sum(1).max()), n)  # host sync: a shape
    p = -(-p // window) * window
    rank = torch.arange(n, device=dev).expand(b, n) - first.gather(1, ball_c.clamp(0, max(nb - 1, 0)))
    slot = torch.where(real, start.gather(1, ball_c.clamp(0, max(nb - 1, 0))) + rank, -1)
    perm = torch.full((b, p), -1, dtype=torch.long, device=dev)
    rows = torch.arange(b, device=dev)[:, None].expand(b, n)
    perm[rows[real], slot[real]] = order[real]
    ext_real = F.pad(valid, (0, p - n), value=False)
    rest = torch.sort(ext_real.to(torch.int8), dim=1, stable=True).indices  # non-real indices first
    free = perm < 0
    perm = torch.where(free, rest.gather(1, (free.cumsum(1) - 1).clamp_min(0)), perm)
    inverse = torch.empty_like(perm).scatter_(1, perm, torch.arange(p, device=dev).expand(b, p))
    tmask = ext_real.gather(1, perm)

    def to_slots(values: torch.Tensor, fill: int) -> torch.Tensor:  # sorted-point values -> (B, P), fill elsewhere
        out = torch.full((b, p), fill, dtype=values.dtype, device=dev)
        out[rows[real], slot[real]] = values[real]
        return out

    key_index = to_slots(key_c, nk)
    slot_ball = to_slots(ball_c, nb)
    key_i = torch.where(real, key_c, nk)
    key_ball = torch.full((b, nk + 1), -1, dtype=torch.long, device=dev).scatter_(1, key_i, torch.where(real, ball_c, -1))
    key_ball[:, nk] = -1
    key_start = torch.full((b, nk + 1), p, dtype=torch.long, device=dev).scatter_reduce_(
        1, key_i, torch.where(real, slot, p), reduce="amin")
    key_end = torch.zeros(b, nk + 1, dtype=torch.long, device=dev).scatter_reduce_(
        1, key_i, torch.where(real, slot + 1, 0), reduce="amax")
    key_start[:, nk], key_end[:, nk] = p, p
    # the key cells of the balls that meet each window: a contiguous run of compact key cells (sorted order)
    wk = key_index.view(b, p // window, window)
    lo_k = wk.amin(-1)  # the dummy nk where a window is empty
    hi_k = torch.where(wk < nk, wk, -1).amax(-1)
    wball_lo = key_ball.gather(1, lo_k)
    wball_hi = key_ball.gather(1, hi_k.clamp_min(0))
    ball_first = _scatter_first(ball_c, key_c, nb, real) if nb else torch.zeros(b, 0, dtype=torch.long, device=dev)
    ball_last = torch.full((b, nb + 1), -1, dtype=torch.long, device=dev).scatter_reduce_(
        1, ball_i, torch.where(real, key_c, -1), reduce="amax")[:, :nb]
    has = hi_k >= 0
    first_key = torch.where(has, ball_first.gather(1, wball_lo.clamp(0, max(nb - 1, 0))), nk)
    last_key = torch.where(has, ball_last.gather(1, wball_hi.clamp(0, max(nb - 1, 0))), nk - 1)
    span = last_key - first_key + 1
    kk = max(int(span.max()), 1)  # host sync: a shape
    r = torch.arange(kk, device=dev)
    window_keys = torch.where(r < span[..., None], first_key[..., None] + r, nk)
    ext_pos = F.pad(base, (0, 0, 0, p - n))
    tpos = torch.where(tmask[..., None], ext_pos.gather(1, perm[..., None].expand(b, p, d)), zero)
    slot_coords = F.pad(coords, (0, 0, 0, p - n)).gather(1, perm[..., None].expand(b, p, d))
    centres = cell_centres(slot_coords, (lo, sides), depths["ball"])
    if rot is not None:
        centres = rotate_points(centres, rot.T.contiguous())
    pool_index, n_pool, pool_centres = None, 0, None
    if pool is not None:
        pool_c, n_pool_b = _compact(ids["pool"], real)
        n_pool = int(n_pool_b.max())  # host sync: a shape
        pool_index = to_slots(pool_c, n_pool)
        first_pt = _scatter_first(pool_c, torch.arange(n, device=dev).expand(b, n), n_pool, real)
        rep = coords.gather(1, order.gather(1, first_pt.clamp(max=n - 1))[..., None].expand(b, n_pool, d))
        pool_centres = cell_centres(rep, (lo, sides), depths["pool"])
        if rot is not None:
            pool_centres = rotate_points(pool_centres, rot.T.contiguous())
        pool_centres = torch.where((torch.arange(n_pool, device=dev) < n_pool_b[:, None])[..., None],
                                   pool_centres, 0.0).to(pos.dtype)
    far = FarField(window, slot_ball, key_index, nk, key_ball, key_start, key_end, window_keys)
    return MultiscaleLayout(BallTree(perm, inverse, tmask, tpos, window, n), far, centres.to(pos.dtype),
                            pool_index, n_pool, pool_centres, depths)
