"""Building batched ball trees (:mod:`sciattn.balltree.tree`) with tensor operations only: no host sync.

Construction: every axis is sorted once by ``(coordinate, all coordinates lexicographically,
index)`` (stable sorts), giving ``d`` lists per cloud. A level reads each node's spread from the ends of its lists, takes the list
along its split axis (the node sorted, no per-level sort), marks the points that go left and
stable-partitions all ``d`` lists inside every node (a gather, a cumulative sum and a scatter),
so every child's lists stay sorted. Cost: ``O(d P log P)`` work in ``log2 P`` batched levels,
all on the device of ``pos``; the number of levels follows from the shapes only. Node centres
and radii are computed on first use.

Order independence. Ties along the split axis are common on real meshes and grids (ShapeNet-Car
vertices repeat coordinates; a grid ties along every axis). They are broken by the other
coordinates, lexicographically, never by the input index, so permuting the points permutes the
tree: slot ``s`` of ``build(pos[π])`` holds the point that slot ``s`` of ``build(pos)`` holds, for
every permutation ``π``, unless the cloud has *exactly coincident* points. Those alone are ordered
by their input index, so the contract is: the tree, and a model's output, is permuted up to a
permutation among coincident points; coincident points that also carry identical features (any
data set whose duplicates are true duplicates) give exactly permuted outputs. A rotated tree
(``rotate``) rotates each point on its own (elementwise products, no matrix product whose rounding
could depend on the row), so it inherits the property.

Shapes:
    pos ``(B, N, d)``; mask ``(B, N)`` bool (True = real point); the tree holds ``(B, P)`` permutations.
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict

import torch
import torch.nn.functional as F

from .._checks import assert_no_violation, check_positive_int, check_rank, check_tensor
from .tree import BallTree, check_power_of_two

__all__ = ["BallTreeCache", "build_ball_tree", "rotate_points", "rotation_matrix"]


def rotation_matrix(
    angle: float, d: int, dtype: torch.dtype = torch.float32, device=None, *, plane: bool = False
) -> torch.Tensor:
    """``(d, d)`` rotation by ``angle`` degrees, as in Erwin's rotated trees.

    ``d = 2``: the rotation of the plane. ``d = 3`` (unless ``plane``): Erwin's product of three Euler
    rotations by the same angle, ``R = R_z(a) R_y(a) R_x(a)`` (a proper rotation that turns every
    axis, so every ball is cut along all three directions). Otherwise (``d > 3``, or ``plane=True``,
    the rotation sciattn used in 3-D before, kept for old checkpoints): the rotation in the plane of
    the first two axes, identity elsewhere.
    """
    if d < 2:
        raise ValueError(f"rotate: expected positions with at least 2 dimensions for a rotation angle, got d={d}")
    a = math.radians(float(angle))
    c, s = math.cos(a), math.sin(a)
    if d == 3 and not plane:
        entries = {(0, 0): c * c, (0, 1): s * c * (s - 1), (0, 2): s * (s + c * c),
                   (1, 0): s * c, (1, 1): s * s * s + c * c, (1, 2): s * c * (s - 1),
                   (2, 0): -s, (2, 1): s * c, (2, 2): c * c}
    else:
        entries = {(0, 0): c, (0, 1): -s, (1, 0): s, (1, 1): c}
    r = torch.eye(d, dtype=dtype, device=device)
    # fill_ takes the Python number as a kernel argument; item assignment would copy a host tensor
    for (i, j), value in entries.items():
        r[i, j].fill_(value)
    return r


def rotate_points(pos: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """``pos @ rot.T`` computed point by point: ``Σ_k pos[..., k] · rot[:, k]`` in a fixed order of
    elementwise operations, so a point's rotated coordinates do not depend on its row (a matrix
    product's rounding can, through blocking). Shapes: pos ``(..., d)``, rot ``(d, d)``."""
    rot = rot.to(dtype=pos.dtype, device=pos.device)
    out = pos[..., :1] * rot[:, 0]
    for k in range(1, pos.shape[-1]):
        out = out + pos[..., k:k + 1] * rot[:, k]
    return out


def _cloud_sizes(counts: torch.Tensor, ball_size: int, levels: int) -> torch.Tensor:
    """Per-cloud padded size ``max(2^⌈log2 n⌉, ball_size)`` from counts ``(B,)``, integer ops only.

    ``n - 1`` with every bit below its highest set bit also set, plus one, is the next power of two.
    """
    v = counts - 1
    shift = 1
    while shift <= levels:
        v = v | (v >> shift)
        shift *= 2
    return torch.clamp(v + 1, min=ball_size)


def _validate(pos, mask, ball_size, rotate, padded_size, check):
    check_rank("pos", pos, 3, "(B, N, d)")
    b, n, d = pos.shape
    if b == 0 or n == 0 or d == 0:
        raise ValueError(f"pos: expected a non-empty point cloud (B, N, d) with B, N, d >= 1, got shape {tuple(pos.shape)}")
    if not pos.is_floating_point():
        raise TypeError(f"pos: expected a floating-point tensor, got {pos.dtype}")
    check_power_of_two("ball_size", ball_size)
    if mask is not None:
        check_rank("mask", mask, 2, "(B, N)")
        if tuple(mask.shape) != (b, n):
            raise ValueError(f"mask: expected shape {(b, n)} matching pos {tuple(pos.shape)}, got {tuple(mask.shape)}")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask: expected dtype torch.bool, got {mask.dtype}")
    if isinstance(rotate, torch.Tensor):
        if tuple(rotate.shape) != (d, d):
            raise ValueError(f"rotate: expected a ({d}, {d}) matrix for {d}-D positions, got shape {tuple(rotate.shape)}")
    elif rotate is not None and (isinstance(rotate, bool) or not isinstance(rotate, (int, float))):
        raise TypeError(f"rotate: expected None, an angle in degrees or a (d, d) tensor, got {type(rotate).__name__}")
    need = max(1 << max(0, (n - 1).bit_length()), ball_size)
    if padded_size is not None:
        check_power_of_two("padded_size", padded_size)
        if padded_size < need:
            raise ValueError(f"padded_size: expected a power of two >= {need} (points {n}, ball_size {ball_size}), "
                             f"got {padded_size}")
        need = padded_size
    if check:
        real = None if mask is None else mask[..., None]
        bad = ~torch.isfinite(pos)
        assert_no_violation(bad if real is None else bad & real,
                            "pos: expected finite coordinates for every real point, got NaN or Inf")
        if mask is not None:
            assert_no_violation(~mask.any(dim=1), "mask: expected at least one real point per cloud, got an empty cloud")
    return need


def _axis_orders(
    coords: torch.Tensor, valid: torch.Tensor, itype: torch.dtype, per_row: bool | None = None
) -> torch.Tensor:
    """Every cloud's point indices sorted along every axis ``a`` by ``(x_a, (x_0, ..., x_{d-1}), index)``.

    Ties in ``x_a`` are broken by all coordinates, lexicographically (an order-independent key),
    and only exactly coincident points by their index. Padding sorts after every real point (key
    ``+inf``), among itself by index. Coordinates become integers of the same order (IEEE bits,
    negatives mirrored, so -0.0 ties with 0.0). The lexicographic rank comes from ``d`` stable
    sorts (last coordinate first); each axis is then sorted stably in that rank's order, so ties
    keep it. ``per_row`` (default: on CPU for rows of at least
    2^15 keys or 64-bit keys) sorts each ``(cloud, axis)`` row on its own, a cache-sized radix
    sort; otherwise keys of at most 32 bits are packed below their row number and sorted in one
    1-D pass, 64-bit keys in two passes (key, then row).

    Shapes: coords ``(B, d, P)``, valid ``(B, P)`` -> ``(B, d, P)`` of dtype ``itype``.
    """
    b, d, p = coords.shape
    key = coords.masked_fill(~valid[:, None], math.inf)
    wide = key.dtype.itemsize > 4
    bits = key.view(torch.int64) if wide else key.to(torch.float32).view(torch.int32)
    sign = bits >> (8 * bits.element_size() - 1)  # -1 for negative floats, else 0
    magnitude = bits & (2 ** (8 * bits.element_size() - 1) - 1)
    keys = magnitude.bitwise_xor_(sign).sub_(sign)  # (B, d, P) ±|bits|, ordered like the floats
    lex = torch.arange(p, device=coords.device).expand(b, p)
    for a in range(d - 1, -1, -1):  # least significant coordinate first: lexicographic, ties by index
        lex = lex.gather(1, torch.sort(keys[:, a].gather(1, lex), dim=1, stable=True).indices)
    rows = keys.gather(2, lex[:, None].expand(b, d, p)).view(b * d, p)  # every axis in lexicographic order
    order = _sorted_rows(rows, b, d, p, coords.device, wide, per_row)
    return lex.gather(1, order.view(b, d * p)).view(b, d, p).to(itype)


def _sorted_rows(rows, b, d, p, device, wide, per_row) -> torch.Tensor:
    """Stable argsort of every row of ``rows`` ``(B·d, P)``, as ``(B, d, P)`` long positions."""
    if per_row is None:
        per_row = device.type == "cpu" and (wide or p >= 2**15)
    if per_row:
        order = torch.empty(b * d, p, dtype=torch.long, device=device)
        scratch = torch.empty_like(rows[0])
        for i in range(b * d):
            torch.sort(rows[i], stable=True, out=(scratch, order[i]))
        return order.view(b, d, p)
    if wide:
        first = torch.sort(rows.reshape(-1), stable=True).indices
        order = first.gather(0, torch.sort(first >> (p.bit_length() - 1), stable=True).indices)
    else:
        row = torch.arange(b * d, device=device).view(b * d, 1) << 32
        order = torch.sort((row + rows).add_(1 << 31).view(-1), stable=True).indices
    return order.view(b, d, p).bitwise_and_(p - 1)  # p is a power of two


def _widest_axis(spread: torch.Tensor, scale: int, dtype: torch.dtype) -> torch.Tensor:
    """``scale ·`` the first axis of largest spread: ``(B, d, S)`` -> ``(B, S)`` (argmax over d)."""
    best = spread[:, 0]
    out = torch.zeros(best.shape, dtype=dtype, device=spread.device)
    for a in range(1, spread.shape[1]):
        wider = spread[:, a] > best
        if a + 1 < spread.shape[1]:
            best = torch.maximum(best, spread[:, a])
        out = torch.where(wider, a * scale, out)
    return out


def build_ball_tree(
    pos: torch.Tensor,
    mask: torch.Tensor | None = None,
    ball_size: int = 64,
    rotate: float | torch.Tensor | None = None,
    *,
    padded_size: int | None = None,
    check: bool = True,
) -> BallTree:
    """Build one ball tree per cloud of a padded batch, on the device of ``pos``.

    Args:
        pos: ``(B, N, d)`` positions; entries with ``mask == False`` may hold anything (NaN too).
        mask: ``(B, N)`` bool, True for real points (``None``: all real). Every cloud needs one.
        ball_size: ``m``, slots per ball, a power of two.
        rotate: ``None``; an angle in degrees (:func:`rotation_matrix`: the plane in 2-D, Erwin's
            three Euler rotations in 3-D; the cross-ball "rotated tree" of Erwin uses 45); or a
            ``(d, d)`` matrix ``R``. The tree is
            built on ``pos @ R.T``; stored positions and centres stay in the input frame.
        padded_size: slots per row ``P`` (a power of two, at least the default
            ``max(2^⌈log2 N⌉, ball_size)``); fixing it gives static shapes across batches.
        check: validate finiteness and non-empty clouds (an eager check on CPU, an async device
            assertion under ``torch.compile`` or on accelerators).

    Returns:
        :class:`BallTree`.

    Shapes:
        pos ``(B, N, d)``, mask ``(B, N)`` -> perm / inverse / mask ``(B, P)``, pos ``(B, P, d)``.
    """
    p = _validate(pos, mask, ball_size, rotate, padded_size, check)
    b, n, d = pos.shape
    dev = pos.device
    levels = p.bit_length() - 1
    valid = torch.ones(b, n, dtype=torch.bool, device=dev) if mask is None else mask
    valid = F.pad(valid, (0, p - n), value=False)
    base = pos if mask is None else pos.masked_fill(~mask[..., None], 0.0)  # padding at 0, never NaN
    base = F.pad(base, (0, 0, 0, p - n)) if p > n else base.contiguous()
    coords = base
    if rotate is not None:
        rot = rotation_matrix(rotate, d, pos.dtype, dev) if not isinstance(rotate, torch.Tensor) else rotate
        coords = rotate_points(base, rot)
    counts = valid.sum(dim=1)
    # Padded size of each cloud; without a mask every cloud has n points, a size known here.
    if mask is None:
        cloud = max(1 << max(0, (n - 1).bit_length()), ball_size)
    else:
        cloud = _cloud_sizes(counts, ball_size, levels).view(b, 1)

    # lists[b, a] holds the points of every node, node after node, sorted along axis a; a level
    # picks each node's list along its split axis and stable-partitions all d lists. Indices are
    # int32 while d·P fits (half the memory traffic of int64); buffers are reused across levels.
    coords_t = coords.transpose(1, 2).contiguous()  # (B, d, P)
    itype = torch.int32 if d * p < 2**31 else torch.int64
    lists = _axis_orders(coords_t, valid, itype)  # (B, d, P)
    spare, cl, step = (torch.empty(b * d * p, dtype=itype, device=dev) for _ in range(3))
    f = torch.empty(b * d * p, dtype=torch.uint8, device=dev)
    goes_left = torch.empty(b, p, dtype=torch.uint8, device=dev)
    chosen, pick = (torch.empty(b, p, dtype=itype, device=dev) for _ in range(2))
    slot = torch.arange(p, dtype=itype, device=dev)
    seg_n = counts.view(b, 1)
    c = p
    while c > 1:
        s, half = p // c, c // 2
        start = slot[::c]
        # Spread along a = last minus first real coordinate in the node's list a (0 if empty).
        last = (start.view(1, 1, s) + (seg_n.view(b, 1, s) - 1).clamp_min(0)).expand(b, d, s)
        lo = coords_t.gather(2, lists.view(b, d, s, c)[..., 0])
        spread = coords_t.gather(2, lists.gather(2, last)) - lo
        offset = _widest_axis(spread, p, itype)  # (B, S): p · first axis of largest spread
        torch.add(slot.view(1, s, c), offset.view(b, s, 1), out=pick.view(b, s, c))
        torch.gather(lists.view(b, d * p), 1, pick, out=chosen)  # each node sorted along its axis
        r = slot[:c].view(1, 1, c)
        if c > ball_size:
            if isinstance(cloud, int):
                left = seg_n if c > cloud else seg_n // 2
            else:
                left = torch.where(c > cloud, seg_n, seg_n // 2)
            # Slot r of the sorted node goes left: the first `left` real points, then padding
            # until the left child is full (in every child real points first, padding after):
            # r < left, or n <= r < n + half - left (nested steps, hence the exclusive ors).
            nn_, nl = seg_n[..., None], left[..., None]
            flag = ((r < nl) ^ (r >= nn_) ^ (r >= nn_ + (half - nl))).view(torch.uint8).view(b, p)
        else:  # the same rule with left = min(n, c/2): the first half of the sorted node
            left = torch.clamp(seg_n, max=half)
            flag = ((slot & (c - 1)) < half).view(torch.uint8).expand(b, p)
        if c == 2:  # last level: only the chosen lists are needed, and their flags are known
            src, fl, k = chosen.view(b, 1, p), flag.view(b, 1, p), 1
        else:
            goes_left.scatter_(1, chosen, flag)
            fl = torch.gather(goes_left, 1, lists.view(b, d * p), out=f.view(b, d * p)).view(b, d, p)
            src, k = lists, d
        # Stable partition inside every node: a left-goer in slot j = j0 + r (cl left-goers up to
        # and including j) moves to j0 + cl - 1, any other to j + half - cl; that is
        # target = (j + half - cl) + flag · (2 cl - r - half - 1).
        clk, stepk = cl[: b * k * p].view(b, k, s, c), step[: b * k * p].view(b, k, s, c)
        torch.cumsum(fl.view(b, k, s, c), -1, dtype=itype, out=clk)
        torch.add((-half - 1) - r.view(1, 1, 1, c), clk, alpha=2, out=stepk)
        target = torch.sub(slot.view(1, 1, s, c) + half, clk, out=clk)
        target.addcmul_(fl.view(b, k, s, c), stepk)
        out = spare[: b * k * p].view(b, k, p).scatter_(2, target.view(b, k, p), src)
        lists, spare = out, lists.view(-1)
        seg_n = torch.stack([left, seg_n - left], dim=-1).view(b, 2 * s)
        c = half

    perm = lists[:, 0].long()
    ar = torch.arange(p, device=dev)
    inverse = torch.empty_like(perm).scatter_(1, perm, ar.view(1, p).expand(b, p))
    tmask = valid.gather(1, perm)
    rows = perm + (torch.arange(b, device=dev) * p).view(b, 1)
    tpos = base.reshape(b * p, d).index_select(0, rows.view(-1)).view(b, p, d)  # zero on padding
    m = p // ball_size
    x, maskf = tpos.view(b, m, ball_size, d), tmask.to(pos.dtype).view(b, m, ball_size)
    centre = x.sum(2) / maskf.sum(-1, keepdim=True).clamp_min(1)  # as ball_centers (level 0)
    tpos = torch.where(tmask.view(b, m, ball_size, 1), x, centre.view(b, m, 1, d)).view(b, p, d)
    return BallTree(perm, inverse, tmask, tpos, ball_size, n)


class BallTreeCache:
    """Reuse trees for static geometry: the same ``pos`` (and ``mask``) tensor gives the same tree.

    A hit needs the *same tensor objects*, unmodified since (their in-place version counter is
    compared), and the same ``ball_size``, ``rotate`` and ``padded_size``; contents are never
    compared, so no host sync is needed. Least recently used entries are dropped beyond ``maxsize``.
    """

    def __init__(self, maxsize: int = 8) -> None:
        self.maxsize = check_positive_int("maxsize", maxsize)
        self._entries: OrderedDict[tuple, tuple] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _stamp(t: torch.Tensor | None):
        return None if t is None else (id(t), t._version)

    def get(
        self,
        pos: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        ball_size: int = 64,
        rotate: float | torch.Tensor | None = None,
        padded_size: int | None = None,
    ) -> BallTree:
        """The cached tree of ``pos`` or a newly built one (see :func:`build_ball_tree`)."""
        check_tensor("pos", pos)
        rkey = self._stamp(rotate) if isinstance(rotate, torch.Tensor) else rotate
        key = (self._stamp(pos), self._stamp(mask), ball_size, rkey, padded_size)
        hit = self._entries.get(key)
        if hit is not None:
            refs, tree = hit
            if all((r is None and t is None) or (r is not None and r() is t) for r, t in zip(refs, (pos, mask))):
                self._entries.move_to_end(key)
                self.hits += 1
                return tree
        tree = build_ball_tree(pos, mask, ball_size, rotate, padded_size=padded_size)
        refs = tuple(None if t is None else weakref.ref(t) for t in (pos, mask))
        self._entries[key] = (refs, tree)
        self._entries.move_to_end(key)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
        self.misses += 1
        return tree

    def clear(self) -> None:
        self._entries.clear()
