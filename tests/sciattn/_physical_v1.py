"""Frozen copy of the physical cell layout before it chose depths per cloud (sciattn commit 157823a), the float64
oracle of :func:`sciattn.balltree.physical.cell_layout` for one unpadded cloud, where both must agree exactly;
and Erwin's physical-mode geometry built from it (:func:`physical_trees_v1`), to pass as ``trees=``.

Its depth was one per batch (``.all(0)`` over the clouds) and its clamp and memory guard counted the padded
batch: the batch dependence that the current layout removes. Do not edit: it is the reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from sciattn._checks import check_rank
from sciattn.balltree.build import rotate_points, rotation_matrix
from sciattn.balltree.tree import BallTree

_MAX_DEPTH = 40
MAX_SLOTS_PER_POINT = 32
def check_length(name: str, value: object) -> float:
    """``value`` as a positive finite float; raise naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a positive finite length (in the units of pos), got {value!r}")
    return float(value)


def _boxes(pos: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-cloud bounding box ``lo (B, d)`` and sides ``(B, d)`` of the real points."""
    big = torch.finfo(pos.dtype).max
    lo = pos.masked_fill(~mask[..., None], big).amin(1)
    hi = pos.masked_fill(~mask[..., None], -big).amax(1)
    return lo, (hi - lo).clamp_min(torch.finfo(pos.dtype).tiny)


def _split_axes(sides: torch.Tensor, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Axis of every bisection ``(B, depth)`` and halvings per axis after each ``(B, depth + 1, d)``."""
    b, d = sides.shape
    rel = torch.exp2(torch.round(torch.log2(sides / sides.amax(-1, keepdim=True))))  # exact powers of two
    halvings = torch.zeros(b, d, dtype=torch.long, device=sides.device)
    axes, history = [], [halvings]
    for _ in range(depth):
        cur = rel / torch.exp2(halvings.to(rel.dtype))
        a = torch.argmax(cur, dim=-1)  # the first longest axis
        axes.append(a)
        halvings = halvings + F.one_hot(a, d)
        history.append(halvings)
    axes_t = torch.stack(axes, dim=1) if axes else torch.zeros(b, 0, dtype=torch.long, device=sides.device)
    return axes_t, torch.stack(history, dim=1)


def _depth_of(sides: torch.Tensor, history: torch.Tensor, length: float) -> int:
    """The shallowest depth whose cell diameter is ``<= length`` in every cloud (host sync)."""
    diam = torch.linalg.vector_norm(sides[:, None] / torch.exp2(history.to(sides.dtype)), dim=-1)  # (B, T+1)
    ok = (diam <= length).all(0)
    if not bool(ok.any()):
        return history.shape[1] - 1
    return int(torch.argmax(ok.to(torch.int8)))


def lattice_for(lengths: Sequence[float]) -> float:
    """The box lattice for ``lengths``: the largest power of two at most a quarter of the smallest."""
    return 2.0 ** math.floor(math.log2(min(lengths) / 4))


def cloud_box(pos: torch.Tensor, mask: torch.Tensor | None, lattice: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lo, sides)`` ``(B, d)``: the smallest box with corners on ``lattice · Z^d`` holding every cloud's real
    points. Snapping makes the box (and every cell) identical across resolutions unless an extreme point
    crosses a lattice plane (a domain whose sides lie on the lattice, e.g. ``[0, 1]^d``, is exact)."""
    if mask is None:
        mask = torch.ones(pos.shape[:2], dtype=torch.bool, device=pos.device)
    lo, sides = _boxes(pos, mask)
    hi = torch.ceil((lo + sides) / lattice) * lattice
    lo = torch.floor(lo / lattice) * lattice
    return lo, torch.maximum(hi - lo, torch.full((), lattice, dtype=lo.dtype, device=lo.device))


def cell_centres(pos: torch.Tensor, box: tuple[torch.Tensor, torch.Tensor], depth: int) -> torch.Tensor:
    """``(B, N, d)``: the centre of the cell at ``depth`` of ``box`` that holds each point of ``pos (B, N, d)``."""
    lo, sides = box
    _, history = _split_axes(sides, depth)
    cell = sides / torch.exp2(history[:, -1].to(sides.dtype))  # (B, d)
    q = torch.floor((pos - lo[:, None]) / cell[:, None])
    q = torch.minimum(q.clamp_min(0), torch.round(sides / cell)[:, None] - 1)
    return lo[:, None] + (q + 0.5) * cell[:, None]


def cell_depth(box: tuple[torch.Tensor, torch.Tensor], length: float) -> int:
    """The cell depth for ``length`` of the boxes ``(lo, sides)`` ``(B, d)`` (see the module docstring)."""
    lo, sides = box
    _, history = _split_axes(sides, _MAX_DEPTH)
    return _depth_of(sides, history, check_length("length", length))


class CellLayout:
    """A cell layout: ``tree`` (slots in cell order, ``tree.ball_size`` = capacity ``C``), its finest
    depth, and :meth:`size` (slots of the box at the depth of a length)."""

    def __init__(self, tree: BallTree, depth: int, depths: list[int], box=None, rot=None, coords=None) -> None:
        self.tree, self.depth, self.depths = tree, depth, depths
        self._box, self._rot, self._coords = box, rot, coords

    def centres(self, i: int) -> torch.Tensor:
        """``(B, P, d)``: the geometric centre (input frame) of the node of ``lengths[i]`` holding each slot."""
        c = cell_centres(self._coords, self._box, self.depths[i])
        return c if self._rot is None else rotate_points(c, self._rot.T.contiguous())

    @property
    def capacity(self) -> int:
        return self.tree.ball_size

    def size(self, i: int) -> int:
        """Slots of one node at the depth of the ``i``-th length passed to :func:`cell_layout`."""
        return self.capacity << (self.depth - self.depths[i])


def _cell_ids(coords, valid, lo, sides, depth: int) -> tuple[torch.Tensor, int]:
    """``(B, N)`` cell id at ``depth`` of every point (``#cells`` for points that are not real), and ``#cells``."""
    b, n, d = coords.shape
    dev = coords.device
    axes, history = _split_axes(sides, depth)
    halv = history[:, -1]  # (B, d) halvings per axis at this depth
    scale = torch.exp2(halv.to(coords.dtype))
    q = torch.floor((coords - lo[:, None]) / sides[:, None] * scale[:, None])
    q = torch.minimum(q.clamp_min(0), scale[:, None] - 1).long()  # (B, N, d) integer cell coordinates
    cid = torch.zeros(b, n, dtype=torch.long, device=dev)
    used = torch.zeros(b, d, dtype=torch.long, device=dev)
    for t in range(depth):  # interleave the bisections, most significant first (k-d order)
        a = axes[:, t]  # (B,)
        shift = halv.gather(1, a[:, None]) - 1 - used.gather(1, a[:, None])  # (B, 1)
        bit = (q.gather(2, a.view(b, 1, 1).expand(b, n, 1))[..., 0] >> shift) & 1
        cid = cid * 2 + bit
        used = used + F.one_hot(a, d)
    n_cells = 1 << depth
    return torch.where(valid, cid, n_cells), n_cells


def cell_layout(
    pos: torch.Tensor,
    mask: torch.Tensor | None,
    lengths: Sequence[float],
    rotate: float | torch.Tensor | None = None,
    *,
    extra_depth: int = 0,
    box: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> CellLayout:
    """Lay the clouds out on the cells of the depth of the smallest of ``lengths`` (plus ``extra_depth``).

    Args:
        pos: ``(B, N, d)`` positions; entries with ``mask == False`` may hold anything.
        mask: ``(B, N)`` bool (None: all real); every cloud needs a real point.
        lengths: physical sizes (ball, block, pooling cell ...); the layout's cells are the finest.
        rotate: as in :func:`~sciattn.balltree.build_ball_tree`: the cells are built on the rotated
            points (stored positions stay in the input frame).
        extra_depth: bisect this many times more than the finest length needs.
        box: ``(lo, sides)`` ``(B, d)`` of the unrotated box to use (default: :func:`cloud_box` of the real
            points on the lattice of :func:`lattice_for` ``(lengths)``; a coarse level passes the box of
            its cloud, since its tokens' extremes are not the cloud's).

    Returns:
        :class:`CellLayout`; ``layout.size(i)`` slots form one node of ``lengths[i]``.
    """
    check_rank("pos", pos, 3, "(B, N, d)")
    b, n, d = pos.shape
    dev = pos.device
    lengths = [check_length("lengths", v) for v in lengths]
    if not lengths:
        raise ValueError("lengths: expected at least one length, got none")
    valid = torch.ones(b, n, dtype=torch.bool, device=dev) if mask is None else mask
    base = pos.masked_fill(~valid[..., None], 0.0)
    coords = base
    lo, sides = cloud_box(base, valid, lattice_for(lengths)) if box is None else box
    rot = None
    if rotate is not None:
        rot = rotation_matrix(rotate, d, pos.dtype, dev) if not isinstance(rotate, torch.Tensor) else rotate
        coords = rotate_points(base, rot)
        # the box of the rotated *box*, not of the rotated points: the points' extremes along a diagonal
        # are the points nearest the box's corners, which move like n^{-1/2}; the box moves like 1/n
        bits = torch.tensor([[(k >> a) & 1 for a in range(d)] for k in range(1 << d)], dtype=pos.dtype, device=dev)
        corners = rotate_points(lo[:, None] + bits[None] * sides[:, None], rot)  # (B, 2^d, d)
        lo, sides = corners.amin(1), (corners.amax(1) - corners.amin(1)).clamp_min(torch.finfo(pos.dtype).tiny)
    _, history = _split_axes(sides, _MAX_DEPTH)
    # a length below the sampling resolution is clamped: at most 4 cells per point on average (memory)
    cap_depth = max(0, (n - 1).bit_length()) + 2
    depths = [min(_depth_of(sides, history, v), cap_depth) for v in lengths]
    depth = max(depths) + int(extra_depth)
    n_real = int(valid.sum(1).amax())  # host sync: the memory guard counts real points, not slots
    while True:  # memory guard: coarsen while the padded layout exceeds MAX_SLOTS_PER_POINT slots per point
        cid, n_cells = _cell_ids(coords, valid, lo, sides, depth)
        counts = torch.zeros(b, n_cells + 1, dtype=torch.long, device=dev).scatter_add_(
            1, cid, torch.ones_like(cid))[:, :n_cells]
        need = max(int(counts.amax()), -(-n // n_cells), 1)  # host sync: the capacity is a shape
        cap = 1 << (need - 1).bit_length()
        if depth == 0 or n_cells * cap <= max(MAX_SLOTS_PER_POINT * max(n_real, 64), n):
            break
        depth -= 1
    depths = [min(v, depth) for v in depths]
    # order: lexicographic by coordinates (stable sorts, last axis first), then stably by cell id
    order = torch.arange(n, device=dev).expand(b, n)
    for a in range(d - 1, -1, -1):
        order = order.gather(1, torch.sort(coords[..., a].gather(1, order), dim=1, stable=True).indices)
    order = order.gather(1, torch.sort(cid.gather(1, order), dim=1, stable=True).indices)
    p = n_cells * cap
    start = F.pad(counts.cumsum(1), (1, 0))[:, :n_cells]  # first sorted position of every cell
    sorted_cid = cid.gather(1, order)
    rank = torch.arange(n, device=dev).expand(b, n) - start.gather(1, sorted_cid.clamp(max=n_cells - 1))
    slot = torch.where(sorted_cid < n_cells, sorted_cid * cap + rank, -1)  # (B, N) slot of sorted point
    perm = torch.full((b, p), -1, dtype=torch.long, device=dev)
    real_sorted = slot >= 0
    rows = torch.arange(b, device=dev)[:, None].expand(b, n)
    perm[rows[real_sorted], slot[real_sorted]] = order[real_sorted]
    # free slots take the remaining indices (masked inputs, then N..P-1) in increasing order
    ext_real = F.pad(valid, (0, p - n), value=False)
    rest = torch.sort(ext_real.to(torch.int8), dim=1, stable=True).indices  # non-real indices first
    free = perm < 0
    free_rank = (free.cumsum(1) - 1).clamp_min(0)
    perm = torch.where(free, rest.gather(1, free_rank), perm)
    inverse = torch.empty_like(perm).scatter_(1, perm, torch.arange(p, device=dev).expand(b, p))
    tmask = ext_real.gather(1, perm)
    ext_pos = F.pad(base, (0, 0, 0, p - n))
    tpos = ext_pos.gather(1, perm[..., None].expand(b, p, d))
    tpos = torch.where(tmask[..., None], tpos, torch.zeros((), dtype=pos.dtype, device=dev))
    slot_coords = F.pad(coords, (0, 0, 0, p - n)).gather(1, perm[..., None].expand(b, p, d))
    return CellLayout(BallTree(perm, inverse, tmask, tpos, cap, n), depth, depths, (lo, sides), rot, slot_coords)


def physical_level_v1(pos, mask, weights, lengths, rotate, sizes, *, box=None, assign=None, centres=None):
    """``operators.erwin.physical_level`` of commit 157823a (on :func:`cell_layout`)."""
    from sciattn.operators.erwin import LevelGeometry

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


def physical_trees_v1(model, pos, mask=None, weights=None):
    """``Erwin._physical_trees`` of commit 157823a: the geometry of a physical-mode Erwin ``model``."""
    from sciattn.operators.erwin import ErwinGeometry, rotation_of

    rotate = rotation_of(model, pos.shape[-1])
    n_pool = len(model.pool_diameters)
    box = cloud_box(pos, mask, lattice_for(model.ball_diameters + model.pool_diameters))
    lay = cell_layout(pos, mask, [model.ball_diameters[0]] + model.pool_diameters[:1], box=box)
    tree = lay.tree
    w = tree.mask.to(pos.dtype) if weights is None else tree.values_to_tree(weights.to(pos.dtype))
    geo = physical_level_v1(tree.pos, tree.mask, w, model.ball_diameters[:1], rotate, (lay.size(0),), box=box,
                            centres=lay.centres(0))
    levels = [geo]
    depth, span = None, 1
    for i in range(n_pool):
        b, p, d = geo.pos.shape
        if i == 0:
            s, depth = lay.size(1), lay.depths[1]
        else:
            new = min(depth, cell_depth(box, model.pool_diameters[i]))
            s, depth = 1 << (depth - new), new
        m = geo.mask.view(b, p // s, s)
        wc = torch.where(m, geo.weights.view(b, p // s, s), 0)
        wsum = wc.sum(-1)
        wt = torch.where((wsum > 0)[..., None], wc, m.to(wc.dtype))
        ppos = (wt[..., None] * torch.where(m[..., None], geo.pos.view(b, p // s, s, d), 0)).sum(2)
        ppos = ppos / wt.sum(-1).clamp_min(torch.finfo(wt.dtype).tiny)[..., None]
        ball = 1 << max(0, depth - cell_depth(box, model.ball_diameters[i + 1]))
        span *= s
        pmask = m.any(-1)
        cc = cell_centres(tree.pos, box, depth).view(b, -1, span, d)
        cnt = tree.mask.view(b, -1, span, 1).to(cc.dtype)
        assign = (cc * cnt).sum(2) / cnt.sum(2).clamp_min(1)
        ball_depth = min(depth, cell_depth(box, model.ball_diameters[i + 1]))
        geo = physical_level_v1(ppos, pmask, wsum, model.ball_diameters[i + 1:i + 2], rotate, (ball,), box=box,
                                assign=assign, centres=cell_centres(assign, box, ball_depth))
        geo.stride = s
        levels.append(geo)
    return ErwinGeometry(tree, levels)
