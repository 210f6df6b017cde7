"""Physically scaled balls: a cell layout whose balls keep their size, and gain points, under refinement.

Erwin's balls hold a fixed number ``m`` of points, so refining the sampling shrinks them, and a
layer's receptive field and output depend on the resolution. Balls of a fixed *physical* size need
two things: a size set by a length, and boundaries that do not move as points are added. The
median splits of the ball tree (:mod:`sciattn.balltree.build`) give the first (the depth whose
nodes are ``L`` across) but not the second: a sample median moves by ``O(n_node^{-1/2})``, so a
fraction ``~ n^{-1/2}`` of the points changes ball between resolutions and the output converges only
like ``n^{-1/4}``. This module therefore lays points out on the cells of a **spatial bisection**:

* the box of a cloud is its real points' bounding box ``[lo, hi]`` snapped outwards to a lattice of a
  power of two at most a quarter of the smallest length (:func:`cloud_box`), so it is the same at
  every resolution unless an extreme point crosses a lattice plane (``[0, 1]^d`` is exact); a
  rotated layout uses the bounding box of that box's rotated corners (the rotated points' own box
  would be set by the points nearest the corners, which converge only like ``n^{-1/2}``);
* cells at depth ``ℓ``: the box bisected ``ℓ`` times, each time along the axis whose cell side is
  longest, the box's sides first rounded to powers of two relative to the longest
  (``2^round(log2(s_a / s_max))``, so a near-square box splits like a square at every resolution;
  ties go to the lower axis). All cells of a depth are congruent, ``(s_a / 2^{n_a})_a``, with
  diameter ``√Σ_a (s_a / 2^{n_a})²``;
* the depth for a length ``L``: the shallowest whose cell diameter is at most ``L``, **per cloud** (a cloud's
  cells never depend on the rest of its batch);
* cell ids interleave the bisections, most significant first (a k-d / Morton order), so ``2^k``
  consecutive cells are the cells of one box at depth ``ℓ - k``; in a batch whose clouds have different
  depths, the ids are mixed-radix (:func:`_radix_layout`): a node of every length is a run of the same
  number of cells in every cloud, of which a cloud uses its own, so every ball is still a reshape;
* every cell is padded to the capacity ``C`` = the largest cell count in the batch, rounded up to
  a power of two (and to at least ``N / #cells``); padding slots are masked. Inside a cell, points
  are ordered lexicographically by their coordinates (exact duplicates by input index), so permuting
  the input permutes the layout.

Memory guards, per cloud (the layer is then under-resolved, not physical): lengths below the sampling
resolution are clamped to the depth ``⌈log2 n⌉ + 2`` for the cloud's ``n`` real points (about four cells per
point), and a cloud's layout is coarsened, one depth at a time, while its own cells would hold more than
``32 · max(n, 64)`` slots at its own capacity (strongly clustered points, e.g. a surface mesh in a box whose
cells are mostly empty); all its lengths then share the coarser cells. A batch of clouds with very
different depths and crowding pays the product of the largest cell count and the largest number of cells
in memory: the operators (Erwin, BSA) run such batches one cloud at a time in this mode, and their multiscale
layout (:mod:`sciattn.balltree.multiscale`) has no capacity padding.

What is physical: ball and pooling cell sizes (lengths), cell boundaries (fixed by the box), the
number of points per ball (it grows with the density), the number of cells (fixed). What is not:
the depth is an integer (the ball diameter is ``L`` only within a factor ``2^{1/d}``, and a length
``L`` equal to a cell diameter, or a box aspect ratio at ``2^{k+1/2}``, is a threshold where a
refinement can switch the layout); the capacity is a point count (memory ``#cells · C``: about
twice ``N`` for quasi-uniform samples, more for strongly clustered ones, where empty cells still
take ``C`` slots each). Building reads a few small tensors back to the host (depths, counts, capacity):
cache layouts for static geometry.

Shapes:
    pos ``(B, N, d)``, mask ``(B, N)`` -> a :class:`~sciattn.balltree.tree.BallTree` of ``P = #cells · C``
    slots whose ``ball_size`` is ``C`` (one finest cell), plus the node sizes in slots of every length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .._checks import check_rank
from .build import rotate_points, rotation_matrix
from .tree import BallTree

__all__ = ["CellLayout", "cell_centres", "cell_depth", "cell_layout", "check_length", "cloud_box", "lattice_for"]

_MAX_DEPTH = 40
MAX_SLOTS_PER_POINT = 32  # memory guard of cell_layout (see the module docstring)
#: why a model on physical cell layouts cannot be exported (the operators' ``export_unsupported_reason``; formatted
#: with the mode, ``"physical"`` or ``"multiscale"``)
PHYSICAL_EXPORT_REASON = ("ball_mode={mode!r} lays the points out on cells whose depths and sizes are read from "
                          "the positions at run time (shapes that depend on values), which an exported program cannot "
                          "hold; run it eagerly (Surrogate.from_run, load_model), or export a model built with "
                          "ball_mode='points'")


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


def _depths_of(sides: torch.Tensor, history: torch.Tensor, length: float) -> torch.Tensor:
    """``(B,)`` long: per cloud, the shallowest depth whose cell diameter is ``<= length`` (the deepest tabulated
    depth if none is)."""
    diam = torch.linalg.vector_norm(sides[:, None] / torch.exp2(history.to(sides.dtype)), dim=-1)  # (B, T+1)
    ok = diam <= length
    first = torch.argmax(ok.to(torch.int8), dim=1)
    return torch.where(ok.any(1), first, torch.full_like(first, history.shape[1] - 1))


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


def _per_cloud(depth, b: int, device) -> torch.Tensor:
    """``depth`` (an int or ``(B,)`` ints) as a ``(B,)`` long tensor."""
    if isinstance(depth, torch.Tensor):
        return depth.to(device=device, dtype=torch.long).expand(b)
    return torch.full((b,), int(depth), dtype=torch.long, device=device)


def _halvings_at(sides: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """``(B, d)`` halvings per axis of every cloud's cells at its ``depth`` ``(B,)``."""
    _, history = _split_axes(sides, int(depth.max()) if depth.numel() else 0)
    return history.gather(1, depth.view(-1, 1, 1).expand(-1, 1, history.shape[-1]))[:, 0]


def cell_centres(pos: torch.Tensor, box: tuple[torch.Tensor, torch.Tensor], depth) -> torch.Tensor:
    """``(B, N, d)``: the centre of the cell at ``depth`` (an int, or ``(B,)`` per cloud) of ``box`` that holds
    each point of ``pos (B, N, d)``."""
    lo, sides = box
    halv = _halvings_at(sides, _per_cloud(depth, sides.shape[0], sides.device))
    cell = sides / torch.exp2(halv.to(sides.dtype))  # (B, d)
    q = torch.floor((pos - lo[:, None]) / cell[:, None])
    q = torch.minimum(q.clamp_min(0), torch.round(sides / cell)[:, None] - 1)
    return lo[:, None] + (q + 0.5) * cell[:, None]


def cell_depth(box: tuple[torch.Tensor, torch.Tensor], length: float) -> torch.Tensor:
    """``(B,)`` long: every cloud's cell depth for ``length`` of its box ``(lo, sides)`` ``(B, d)`` (module
    docstring); one depth per cloud, so a cloud's cells do not depend on the batch."""
    lo, sides = box
    _, history = _split_axes(sides, _MAX_DEPTH)
    return _depths_of(sides, history, check_length("length", length))


class CellLayout:
    """A cell layout: ``tree`` (slots in cell order, ``tree.ball_size`` = capacity ``C``), every cloud's finest
    depth ``depth`` ``(B,)`` and the depth of each length ``depths[i]`` ``(B,)``, and :meth:`size` (slots of one
    node of a length: the same in every cloud, see :func:`cell_layout`)."""

    def __init__(self, tree: BallTree, depth: torch.Tensor, depths: list[torch.Tensor], sizes: list[int],
                 box=None, rot=None, coords=None) -> None:
        self.tree, self.depth, self.depths, self._sizes = tree, depth, depths, sizes
        self._box, self._rot, self._coords = box, rot, coords

    def centres(self, i: int) -> torch.Tensor:
        """``(B, P, d)``: the geometric centre (input frame) of the node of ``lengths[i]`` holding each slot."""
        c = cell_centres(self._coords, self._box, self.depths[i])
        return c if self._rot is None else rotate_points(c, self._rot.T.contiguous())

    @property
    def capacity(self) -> int:
        return self.tree.ball_size

    def size(self, i: int) -> int:
        """Slots of one node of the ``i``-th length passed to :func:`cell_layout`."""
        return self._sizes[i]


def frame(pos: torch.Tensor, box: tuple[torch.Tensor, torch.Tensor], rotate):
    """``(coords, (lo, sides), rot)``: the points and the box in the frame whose cells are cut (``rotate``: an
    angle in degrees or a ``(d, d)`` matrix; None: the input frame, ``rot`` None). A rotated frame's box is the
    box of the rotated *box*, not of the rotated points: the points' extremes along a diagonal are the points
    nearest the box's corners, which move like ``n^{-1/2}`` under refinement; the box moves like ``1/n``."""
    if rotate is None:
        return pos, box, None
    b, _, d = pos.shape
    lo, sides = box
    rot = rotation_matrix(rotate, d, pos.dtype, pos.device) if not isinstance(rotate, torch.Tensor) else rotate
    bits = torch.tensor([[(k >> a) & 1 for a in range(d)] for k in range(1 << d)], dtype=pos.dtype, device=pos.device)
    corners = rotate_points(lo[:, None] + bits[None] * sides[:, None], rot)  # (B, 2^d, d)
    lo, sides = corners.amin(1), (corners.amax(1) - corners.amin(1)).clamp_min(torch.finfo(pos.dtype).tiny)
    return rotate_points(pos, rot), (lo, sides), rot


def clamp_depths(n_real: list[int], device) -> torch.Tensor:
    """``(B,)``: the deepest cell depth of each cloud, ``⌈log2 n⌉ + 2`` for its ``n`` real points (a length below
    the sampling resolution is clamped there: at most 4 cells per real point on average, for memory)."""
    return torch.tensor([max(0, k - 1).bit_length() + 2 for k in n_real], dtype=torch.long, device=device)


def _cell_ids(coords, valid, lo, sides, depth: torch.Tensor) -> torch.Tensor:
    """``(B, N)`` cell id of every point at its cloud's ``depth`` ``(B,)`` (-1 for points that are not real)."""
    b, n, d = coords.shape
    dev = coords.device
    top = int(depth.max())
    axes, history = _split_axes(sides, top)
    halv = history.gather(1, depth.view(b, 1, 1).expand(b, 1, d))[:, 0]  # (B, d) halvings per axis at the depth
    scale = torch.exp2(halv.to(coords.dtype))
    q = torch.floor((coords - lo[:, None]) / sides[:, None] * scale[:, None])
    q = torch.minimum(q.clamp_min(0), scale[:, None] - 1).long()  # (B, N, d) integer cell coordinates
    cid = torch.zeros(b, n, dtype=torch.long, device=dev)
    used = torch.zeros(b, d, dtype=torch.long, device=dev)
    for t in range(top):  # interleave the bisections, most significant first (k-d order)
        live = (t < depth).view(b, 1)
        a = axes[:, t]  # (B,)
        shift = (halv.gather(1, a[:, None]) - 1 - used.gather(1, a[:, None])).clamp_min(0)  # (B, 1)
        bit = (q.gather(2, a.view(b, 1, 1).expand(b, n, 1))[..., 0] >> shift) & 1
        cid = torch.where(live, cid * 2 + bit, cid)
        used = used + F.one_hot(a, d) * live
    return torch.where(valid, cid, -1)


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, int(v) - 1).bit_length()


def _radix_layout(depths: list[list[int]], finest: list[int]) -> tuple[list[int], list[int]]:
    """Mixed-radix digits of a batch whose clouds have their own depths.

    ``depths[j][b]``: the depth of the ``j``-th distinct length (coarse to fine) in cloud ``b``, and
    ``finest[b] >= depths[-1][b]``. Level ``j`` has radix ``R_j = max_b 2^(depth_j,b - depth_{j-1},b)`` (``R_0 =
    max_b 2^(depth_0,b)``, the last ``max_b 2^(finest_b - depth_last,b)``): a node of length ``j`` holds
    ``Π_{j' > j} R_j'`` cells in every cloud, of which a cloud uses its own ``2^(finest - depth_j)``. Returns the
    radices and the strides (cells per digit unit) of the levels ``0..k+1``.
    """
    levels = [*depths, finest]
    radix = []
    for j, cur in enumerate(levels):
        prev = [0] * len(cur) if j == 0 else levels[j - 1]
        radix.append(max(1 << (c - p) for c, p in zip(cur, prev)))
    strides = [1] * len(radix)
    for j in range(len(radix) - 2, -1, -1):
        strides[j] = strides[j + 1] * radix[j + 1]
    return radix, strides


def cell_layout(
    pos: torch.Tensor,
    mask: torch.Tensor | None,
    lengths: Sequence[float],
    rotate: float | torch.Tensor | None = None,
    *,
    extra_depth: int = 0,
    box: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> CellLayout:
    """Lay every cloud out on the cells of the depth of the smallest of ``lengths`` (plus ``extra_depth``).

    Every choice is made per cloud, from its own box and real points only: the depths of the lengths, the
    clamp and the memory guard (module docstring). The batch shares only shapes: the cells of one node of a
    length are a contiguous run of the same number of slots in every cloud (mixed-radix cell ids, see
    :func:`_radix_layout`: a cloud whose node holds fewer cells than another cloud's leaves the rest of the
    run empty), and every cell has the batch's capacity ``C`` (the most points of a cell, a power of two);
    empty slots are masked. So a cloud's layout, and anything computed from its real slots, does not depend on
    the other clouds or on padding.

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
    if box is None:
        box = cloud_box(base, valid, lattice_for(lengths))
    coords, (lo, sides), rot = frame(base, box, rotate)
    _, history = _split_axes(sides, _MAX_DEPTH)
    n_real = valid.sum(1).tolist()  # host sync: every cloud's guards count its own real points
    cap_depth = clamp_depths(n_real, dev)
    depths = [torch.minimum(_depths_of(sides, history, v), cap_depth) for v in lengths]
    depth = torch.stack(depths).amax(0) + int(extra_depth)
    # memory guard, per cloud: coarsen while the cloud's own cells would take more than
    # MAX_SLOTS_PER_POINT slots per real point at its own capacity
    while True:
        cid = _cell_ids(coords, valid, lo, sides, depth)
        counts = torch.zeros(b, (1 << int(depth.max())) + 1, dtype=torch.long, device=dev).scatter_add_(
            1, cid + 1, torch.ones_like(cid))[:, 1:]
        most, dl = counts.amax(1).tolist(), depth.tolist()  # host sync: the capacity is a shape
        over = [k > 0 and (1 << k) * _pow2_at_least(max(c, -(-r // (1 << k)), 1)) > MAX_SLOTS_PER_POINT * max(r, 64)
                for k, c, r in zip(dl, most, n_real)]
        if not any(over):
            break
        depth = depth - torch.tensor(over, dtype=torch.long, device=dev)
    depths = [torch.minimum(v, depth) for v in depths]
    # mixed-radix cell ids: the distinct lengths coarse to fine, then the finest cells
    order_l = sorted(set(lengths), reverse=True)
    level_of = [order_l.index(v) for v in lengths]
    lvl_depth = [depths[lengths.index(v)] for v in order_l]
    radix, strides = _radix_layout([t.tolist() for t in lvl_depth], depth.tolist())
    n_cells = strides[0] * radix[0]
    shifts = [depth - t for t in lvl_depth] + [torch.zeros_like(depth)]
    slot_cell = torch.zeros_like(cid)
    prev = torch.zeros_like(cid)
    prev_shift = None
    for j, sh in enumerate(shifts):
        node = cid.clamp_min(0) >> sh[:, None]
        digit = node if j == 0 else node - (prev << (prev_shift - sh)[:, None])
        slot_cell = slot_cell + digit * strides[j]
        prev, prev_shift = node, sh
    slot_cell = torch.where(cid >= 0, slot_cell, n_cells)
    cell_counts = torch.zeros(b, n_cells + 1, dtype=torch.long, device=dev).scatter_add_(
        1, slot_cell, torch.ones_like(slot_cell))[:, :n_cells]
    cap = _pow2_at_least(max(int(cell_counts.amax()), -(-n // n_cells), 1))  # host sync: the capacity is a shape
    sizes = [cap * strides[j] for j in level_of]
    # order: lexicographic by coordinates (stable sorts, last axis first), then stably by cell
    order = torch.arange(n, device=dev).expand(b, n)
    for a in range(d - 1, -1, -1):
        order = order.gather(1, torch.sort(coords[..., a].gather(1, order), dim=1, stable=True).indices)
    order = order.gather(1, torch.sort(slot_cell.gather(1, order), dim=1, stable=True).indices)
    p = n_cells * cap
    start = F.pad(cell_counts.cumsum(1), (1, 0))[:, :n_cells]  # first sorted position of every cell
    sorted_cid = slot_cell.gather(1, order)
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
    return CellLayout(BallTree(perm, inverse, tmask, tpos, cap, n), depth, depths, sizes, (lo, sides), rot,
                      slot_coords)
