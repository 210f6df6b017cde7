"""Ball trees in tree order, after Erwin (Zhdanov et al. 2025): the data structure and its node statistics.

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
below it) the real points occupy a contiguous prefix and padding the suffix; every sub-ball (a
power-of-two slice of a ball) is still a node of the tree, so pooling ``2^k`` consecutive slots
groups tree children. Ties are broken by the other coordinates (lexicographically), exact duplicates by
the input index (see :mod:`sciattn.balltree.build`).

The tree is built by :func:`sciattn.balltree.build.build_ball_tree`.

Shapes:
    pos ``(B, N, d)``; mask ``(B, N)`` bool (True = real point); the tree holds ``(B, P)`` permutations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .._checks import check_positive_int, check_rank

__all__ = ["BallTree", "ball_centers", "mixing_index", "check_power_of_two"]


def check_power_of_two(name: str, value: object) -> int:
    """Return ``value`` if it is a positive power of two; raise naming ``name`` otherwise."""
    check_positive_int(name, value)
    if value & (value - 1):  # type: ignore[operator]
        raise ValueError(f"{name}: expected a power of two, got {value}")
    return value  # type: ignore[return-value]


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


def _level_centers(tpos: torch.Tensor, tmask: torch.Tensor, ball_size: int):
    """:func:`ball_centers` of every level ``ball_size·2^k``, for positions that are zero on padding."""
    b, p, d = tpos.shape
    maskf = tmask.to(tpos.dtype)
    diff = torch.empty_like(tpos)
    centers, radii = [], []
    size = ball_size
    while size <= p:
        m = p // size
        x = tpos.view(b, m, size, d)
        centre = x.sum(2) / maskf.view(b, m, size).sum(-1, keepdim=True).clamp_min(1)
        diff_v = torch.sub(x, centre[:, :, None], out=diff.view(b, m, size, d))
        dist = torch.linalg.vector_norm(diff_v, dim=-1)
        centers.append(centre)
        radii.append(dist.mul_(maskf.view(b, m, size)).amax(-1))
        size *= 2
    return centers, radii


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
            ``(B, P/(ball_size·2^k), d)`` and ``(B, P/(ball_size·2^k))`` (see
            :func:`ball_centers`); computed on first access and kept, since using the tree
            (ball attention, pooling) does not need them.
        ball_size: slots per ball ``m``; n_points: ``N`` of the input.
    """

    perm: torch.Tensor
    inverse: torch.Tensor
    mask: torch.Tensor
    pos: torch.Tensor
    ball_size: int
    n_points: int
    _stats: dict = field(default_factory=dict, init=False, repr=False)  # lazily computed node statistics

    @property
    def centers(self) -> tuple[torch.Tensor, ...]:
        return self._node_stats()[0]

    @property
    def radii(self) -> tuple[torch.Tensor, ...]:
        return self._node_stats()[1]

    def _node_stats(self) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        if "levels" not in self._stats:
            x = self.pos.masked_fill(~self.mask[..., None], 0.0)  # zero on padding, as in the build
            centers, radii = _level_centers(x, self.mask, self.ball_size)
            self._stats["levels"] = (tuple(centers), tuple(radii))
        return self._stats["levels"]

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
