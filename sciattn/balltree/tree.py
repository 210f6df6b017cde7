"""Batched ball trees built with tensor operations only (no host sync), after Erwin (Zhdanov et al. 2025).

A ball tree recursively halves a point set: a node's real points are sorted along the axis of
largest spread (max - min over the node's real points; the first such axis on ties) and the
lower part goes to the left child. Every cloud of ``n`` real points is padded to
``P_b = max(2^⌈log2 n⌉, ball_size)`` slots, so every node at depth ``ℓ`` is a contiguous slice of
``P_b / 2^ℓ`` slots in *tree order* and a ball is a reshape ``(P_b / m, m)``. A padded batch
row holds ``P >= P_b`` slots: the cloud's tree fills the first ``P_b`` slots and the rest are
whole padding balls, so padding never mixes samples and a cloud's tree does not depend on the
batch it sits in.

Split counts of a node with capacity ``c`` and ``n`` real points (``m`` = ``ball_size``):

* ``c > P_b``: all ``n`` to the left child (the cloud lives in the leftmost subtree);
* ``m < c <= P_b``: the median split of Erwin, ``⌊n/2⌋`` left and ``⌈n/2⌉`` right;
* ``c <= m`` (inside a ball): the left child is filled first, ``min(n, c/2)``.

Hence above the ball level the real memberships are exactly Erwin's (``balltree-erwin``, up to
ties, which Erwin's ``nth_element`` splits arbitrarily), and inside every ball (and every node
below it) the real points occupy a contiguous prefix and padding the suffix; every sub-ball (a power-of-two slice of a ball) is still a node of the
tree, so pooling ``2^k`` consecutive slots groups tree children. Ties are broken by the input
index: each axis is ranked once by ``(coordinate, index)`` with a stable sort, and every
level sorts the node's ranks along its split axis (unique keys, hence deterministic).

Cost: ``log2 P`` levels, each a batched sort of ``P`` keys per cloud, ``O(P log² P)`` work,
all on the device of ``pos``; the number of levels follows from the shapes only.

Shapes:
    pos ``(B, N, d)``; mask ``(B, N)`` bool (True = real point); the tree holds ``(B, P)`` permutations.
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .._checks import check_positive_int, check_rank, check_tensor

__all__ = [
    "BallTree",
    "BallTreeCache",
    "ball_centers",
    "build_ball_tree",
    "mixing_index",
    "rotation_matrix",
    "check_power_of_two",
    "assert_no_violation",
]


def check_power_of_two(name: str, value: object) -> int:
    """Return ``value`` if it is a positive power of two; raise naming ``name`` otherwise."""
    check_positive_int(name, value)
    if value & (value - 1):  # type: ignore[operator]
        raise ValueError(f"{name}: expected a power of two, got {value}")
    return value  # type: ignore[return-value]


def assert_no_violation(bad: torch.Tensor, message: str, exc: type[Exception] = ValueError) -> None:
    """Raise ``exc(message)`` if any entry of the bool tensor ``bad`` is True.

    On CPU in eager mode this is an ordinary check. Under ``torch.compile`` or on an accelerator
    it is an in-graph ``torch._assert_async`` instead, so validation never forces a host sync.
    """
    if torch.compiler.is_compiling() or bad.device.type != "cpu":
        torch._assert_async(~bad.any(), message)
    elif bool(bad.any()):
        raise exc(message)


def rotation_matrix(angle: float, d: int, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """``(d, d)`` rotation by ``angle`` degrees in the plane of the first two axes (identity elsewhere)."""
    if d < 2:
        raise ValueError(f"rotate: expected positions with at least 2 dimensions for a rotation angle, got d={d}")
    a = math.radians(float(angle))
    r = torch.eye(d, dtype=dtype, device=device)
    r[0, 0], r[0, 1], r[1, 0], r[1, 1] = math.cos(a), -math.sin(a), math.sin(a), math.cos(a)
    return r


def ball_centers(pos: torch.Tensor, mask: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Centres and radii of the contiguous groups of ``size`` slots (the nodes of that size).

    centre = mean of the node's real points (0 for a node without any); radius = largest distance
    of a real point to the centre (0 when empty). Shapes: pos ``(B, P, d)``, mask ``(B, P)`` ->
    centres ``(B, P/size, d)``, radii ``(B, P/size)``.
    """
    b, p, d = pos.shape
    m = p // size
    x = torch.where(mask[..., None], pos, torch.zeros((), dtype=pos.dtype, device=pos.device)).view(b, m, size, d)
    cnt = mask.view(b, m, size).sum(-1, keepdim=True).to(pos.dtype)
    centre = x.sum(2) / cnt.clamp_min(1)
    dist = torch.linalg.vector_norm(x - centre[:, :, None], dim=-1)
    dist = torch.where(mask.view(b, m, size), dist, torch.zeros((), dtype=pos.dtype, device=pos.device))
    return centre, dist.amax(-1)


@dataclass(frozen=True, eq=False)
class BallTree:
    """A batch of ball trees in tree order.

    Attributes:
        perm: ``(B, P)`` long; tree slot ``s`` holds point ``perm[b, s]`` of the input extended
            with ``P - N`` padding slots (indices ``>= N`` are padding added by the build).
        inverse: ``(B, P)`` long, ``inverse[b, perm[b, s]] = s``.
        mask: ``(B, P)`` bool, True where the slot holds a real point.
        pos: ``(B, P, d)`` positions in tree order in the *input* frame (even for a rotated tree);
            padding slots sit at the centre of their ball (finite, never NaN).
        centers / radii: per level ``k = 0, 1, ...``, nodes of ``ball_size·2^k`` slots:
            ``(B, P/(ball_size·2^k), d)`` and ``(B, P/(ball_size·2^k))``.
        ball_size: slots per ball ``m``; n_points: ``N`` of the input.
    """

    perm: torch.Tensor
    inverse: torch.Tensor
    mask: torch.Tensor
    pos: torch.Tensor
    centers: tuple[torch.Tensor, ...]
    radii: tuple[torch.Tensor, ...]
    ball_size: int
    n_points: int

    @property
    def padded_size(self) -> int:
        return self.perm.shape[1]

    @property
    def n_balls(self) -> int:
        return self.padded_size // self.ball_size

    def to_tree(self, x: torch.Tensor) -> torch.Tensor:
        """Point order ``(B, N, C)`` -> tree order ``(B, P, C)``; padding slots are zero."""
        check_rank("x", x, 3, "(B, N, C)")
        if tuple(x.shape[:2]) != (self.perm.shape[0], self.n_points):
            raise ValueError(f"x: expected shape ({self.perm.shape[0]}, {self.n_points}, C) matching the tree's "
                             f"points, got {tuple(x.shape)}")
        ext = F.pad(x, (0, 0, 0, self.padded_size - self.n_points))
        out = ext.gather(1, self.perm[..., None].expand(-1, -1, x.shape[-1]))
        return torch.where(self.mask[..., None], out, torch.zeros((), dtype=x.dtype, device=x.device))

    def from_tree(self, y: torch.Tensor) -> torch.Tensor:
        """Tree order ``(B, P, C)`` -> point order ``(B, N, C)`` (padding slots dropped)."""
        check_rank("y", y, 3, "(B, P, C)")
        if tuple(y.shape[:2]) != tuple(self.perm.shape):
            raise ValueError(f"y: expected shape {tuple(self.perm.shape) + ('C',)} in tree order, got {tuple(y.shape)}")
        back = y.gather(1, self.inverse[..., None].expand(-1, -1, y.shape[-1]))
        return back[:, : self.n_points]

    def values_to_tree(self, v: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """Per-point values ``(B, N)`` (e.g. quadrature weights) -> ``(B, P)`` with ``fill`` on padding."""
        ext = F.pad(v, (0, self.padded_size - self.n_points))
        out = ext.gather(1, self.perm)
        return torch.where(self.mask, out, torch.full((), fill, dtype=v.dtype, device=v.device))


def mixing_index(src: BallTree, dst: BallTree) -> torch.Tensor:
    """``(B, P)`` index with ``x_dst = x_src.gather(1, idx)``: from ``src``'s tree order to ``dst``'s.

    Both trees must be built on the same points (e.g. a tree and its rotated tree); real slots map
    to the same point, padding slots to padding slots.
    """
    if src.perm.shape != dst.perm.shape:
        raise ValueError(f"dst: expected a tree of shape {tuple(src.perm.shape)} like src, got {tuple(dst.perm.shape)}")
    return src.inverse.gather(1, dst.perm)


def _cloud_sizes(counts: torch.Tensor, ball_size: int, levels: int) -> torch.Tensor:
    """Per-cloud padded size ``max(2^⌈log2 n⌉, ball_size)`` from counts ``(B,)``, integer ops only."""
    e = torch.zeros_like(counts)
    for j in range(levels + 1):
        e = e + (counts > (1 << j)).to(counts.dtype)
    return torch.clamp(torch.ones_like(counts) << e, min=ball_size)


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
        rotate: ``None``; an angle in degrees (rotation in the plane of the first two axes, the
            cross-ball "rotated tree" of Erwin uses 45); or a ``(d, d)`` matrix ``R``. The tree is
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
    base = F.pad(torch.where(valid[:, :n, None], pos, torch.zeros((), dtype=pos.dtype, device=dev)), (0, 0, 0, p - n))
    coords = base
    if rotate is not None:
        rot = rotation_matrix(rotate, d, pos.dtype, dev) if not isinstance(rotate, torch.Tensor) else rotate
        coords = base @ rot.to(dtype=pos.dtype, device=dev).T
    counts = valid.sum(dim=1)
    cloud = _cloud_sizes(counts, ball_size, levels).view(b, 1)

    # Rank every axis once by (coordinate, index); padding ranks after every real point.
    key = torch.where(valid[..., None], coords, torch.full((), math.inf, dtype=coords.dtype, device=dev))
    order = torch.sort(key, dim=1, stable=True).indices  # (B, P, d)
    ar = torch.arange(p, device=dev)
    rank = torch.empty_like(order).scatter_(1, order, ar.view(1, p, 1).expand(b, p, d))
    rank = rank.transpose(1, 2).reshape(b, d * p)  # rank of point i along axis a at a * P + i

    cur = ar.view(1, p).expand(b, p)
    seg_n = counts.view(b, 1)
    neg = torch.full((), -math.inf, dtype=coords.dtype, device=dev)
    pos_inf = torch.full((), math.inf, dtype=coords.dtype, device=dev)
    c = p
    while c > 1:
        s, half = p // c, c // 2
        cv = valid.gather(1, cur).view(b, s, c, 1)
        cc = coords.gather(1, cur[..., None].expand(b, p, d)).view(b, s, c, d)
        spread = torch.where(cv, cc, neg).amax(2) - torch.where(cv, cc, pos_inf).amin(2)  # (B, S, d)
        axis = spread.argmax(dim=-1)  # first axis of largest spread; 0 for empty nodes
        flat = (axis.view(b, s, 1) * p + cur.view(b, s, c)).view(b, p)
        node_key = rank.gather(1, flat).view(b, s, c)  # rank along the node's axis, unique per cloud
        srt = torch.sort(node_key, dim=-1, stable=True).indices
        scur = cur.reshape(b, s, c).gather(2, srt)
        if c > ball_size:
            left = torch.where(c > cloud, seg_n, seg_n // 2)
        else:
            left = torch.clamp(seg_n, max=half)
        r = torch.arange(c, device=dev).view(1, 1, c)
        nn_, nl = seg_n[..., None], left[..., None]
        target = torch.where(
            r < nl, r, torch.where(r < nn_, half + r - nl, torch.where(r - nn_ < half - nl, nl + r - nn_, r))
        )
        cur = torch.empty_like(scur).scatter_(2, target, scur).view(b, p)
        seg_n = torch.stack([left, seg_n - left], dim=-1).view(b, 2 * s)
        c = half

    perm = cur
    inverse = torch.empty_like(perm).scatter_(1, perm, ar.view(1, p).expand(b, p))
    tmask = valid.gather(1, perm)
    tpos = base.gather(1, perm[..., None].expand(b, p, d))
    centers, radii = [], []
    size = ball_size
    while size <= p:
        cen, rad = ball_centers(tpos, tmask, size)
        centers.append(cen)
        radii.append(rad)
        size *= 2
    tpos = torch.where(tmask[..., None], tpos, centers[0].repeat_interleave(ball_size, dim=1))
    return BallTree(perm, inverse, tmask, tpos, tuple(centers), tuple(radii), ball_size, n)


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
