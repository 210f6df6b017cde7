"""Ball multi-head self-attention (Erwin's BMSA, Zhdanov et al., ICML 2025, eq. 9-10) on point clouds.

For a padded batch of clouds in ball-tree order, per block:

    h_i = x_i + W_pe (p_i - c_{β(i)})                         centroid-offset position encoding (eq. 9)
    z_i = Σ_{j∈β(i)} w_j e^{s_ij} v_j / Σ_{j∈β(i)} w_j e^{s_ij},
    s_ij = q_i·k_j / √D - σ_h ‖p_i - p_j‖                      distance bias, learned σ_h (eq. 10)
    y_i = W_o z_i

with ``q, k, v`` projections of ``h``, ``c_β`` the centroid of the *real* points of ball ``β``
and ``w_j`` the quadrature weights of the keys. With ``ball_size`` (Erwin's published point count) a
ball shrinks as points are added, so the layer depends on the resolution; with ``ball_diameter`` a
ball is a cell of fixed physical size (:mod:`sciattn.balltree.physical`) and the ball sums converge. Unlike the Erwin code, padding never enters a
centroid, a softmax or an output, and ``σ`` is trained (it is never under ``no_grad``).

Also the torch_geometric adapters of the point-set data contract: :func:`dense_points_from_pyg`
pads a ``Data``/``Batch`` (``x``, ``pos``, ``batch`` and optional per-node ``weights``) to
``(B, N, ·)`` with a mask, and :func:`pyg_from_dense` takes the real rows back.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._checks import (
    check_backend_name,
    check_dim,
    check_finite_at,
    check_floating,
    check_heads,
    check_input_dtype,
    check_positive_int,
    check_rank,
)
from .build import build_ball_tree
from .functional import ball_attention
from .physical import cell_layout, check_length
from .tree import BallTree, ball_centers, check_power_of_two

__all__ = ["BallAttention", "dense_points_from_pyg", "pyg_from_dense", "check_point_inputs"]


def check_point_inputs(x, pos, mask, weights, channels: int, spatial_dims: int) -> None:
    """Validate a padded point batch: x ``(B, N, C)``, pos ``(B, N, d)``, mask/weights ``(B, N)``."""
    check_rank("x", x, 3, f"(B, N, C={channels})")
    check_dim("x", x, 2, channels, "channels")
    check_rank("pos", pos, 3, f"(B, N, d={spatial_dims})")
    if tuple(pos.shape[:2]) != tuple(x.shape[:2]):
        raise ValueError(f"pos: expected shape {tuple(x.shape[:2]) + (spatial_dims,)} matching x, got {tuple(pos.shape)}")
    check_dim("pos", pos, 2, spatial_dims, "spatial dimensions")
    for name, t in (("mask", mask), ("weights", weights)):
        if t is not None:
            check_rank(name, t, 2, "(B, N)")
            if tuple(t.shape) != tuple(x.shape[:2]):
                raise ValueError(f"{name}: expected shape {tuple(x.shape[:2])} matching x, got {tuple(t.shape)}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask: expected dtype torch.bool (True at real points), got {mask.dtype}")


class BallAttention(nn.Module):
    """Multi-head softmax attention inside the balls of a ball tree, with a learned distance bias.

    Args:
        dim: channels ``C`` (divisible by ``n_heads``).
        n_heads: heads ``H``.
        spatial_dims: ``d`` of the positions.
        ball_size: points per ball ``m`` (a power of two); clouds smaller than a ball form one ball.
            This is Erwin's published *point-count* ball: it shrinks as the sampling is refined, so the
            layer's output depends on the resolution. ``None`` with ``ball_diameter`` set: physical balls.
        ball_diameter: physical mode (a length in the units of ``pos``): a ball is the tree node at
            the shallowest depth whose nodes are at most this wide (:mod:`sciattn.balltree.physical`),
            so it keeps its size and gains points under refinement, and with quadrature ``weights``
            the ball sums converge. Exclusive with ``ball_size``.
        rpe: add the centroid-offset position encoding ``W_pe (p_i - c_β)``.
        distance_bias: add ``-σ_h ‖p_i - p_j‖`` with learnable ``σ_h`` (initialised to ``sigma_init``).
        backend: force a ball-attention backend (``"sdpa"``, ``"flex"``, ``"reference"``).

    Shapes:
        :meth:`forward`: x ``(B, N, C)``, pos ``(B, N, d)``, mask / weights ``(B, N)`` -> ``(B, N, C)``.
        :meth:`attend`: the same in tree order, ``(B, P, ·)`` with ``P`` a multiple of the ball.
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        spatial_dims: int = 3,
        ball_size: int | None = 64,
        *,
        ball_diameter: float | None = None,
        rpe: bool = True,
        distance_bias: bool = True,
        sigma_init: float = 1.0,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        check_heads("dim", dim, n_heads)
        check_positive_int("spatial_dims", spatial_dims)
        if ball_diameter is not None:
            if ball_size is not None:
                raise ValueError(f"ball_size: expected None with ball_diameter={ball_diameter!r} (a ball is either "
                                 f"a point count or a physical size), got {ball_size!r}")
            ball_diameter = check_length("ball_diameter", ball_diameter)
        elif ball_size is None:
            raise ValueError("ball_size: expected a power of two, or None with a ball_diameter, got None without one")
        else:
            check_power_of_two("ball_size", ball_size)
        check_backend_name("ball", backend)
        self.dim, self.n_heads, self.spatial_dims, self.ball_size = dim, n_heads, spatial_dims, ball_size
        self.ball_diameter = ball_diameter
        self.head_dim = dim // n_heads
        self.backend = backend
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.pe = nn.Linear(spatial_dims, dim) if rpe else None
        self.sigma = nn.Parameter(torch.full((n_heads,), float(sigma_init))) if distance_bias else None

    def position_encoding(self, h: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, ball: int,
                          centres: torch.Tensor | None = None) -> torch.Tensor:
        """``h + W_pe (p - c_β)`` for real points (padding rows unchanged); ``c_β`` the centroid of the ball's
        real points, or ``centres`` ``(B, P, d)`` per slot (physical mode: the ball's geometric centre,
        which does not move under refinement, where the centroid of a sample does)."""
        if self.pe is None:
            return h
        if centres is None:
            centre, _ = ball_centers(pos, mask, ball)
            centres = centre.repeat_interleave(ball, dim=1)
        off = pos - centres.to(pos.dtype)
        off = torch.where(mask[..., None], off, torch.zeros((), dtype=off.dtype, device=off.device))
        return h + self.pe(off.to(h.dtype))

    def project(self, h: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, ball: int,
                centres: torch.Tensor | None = None):
        """Queries, keys, values ``(B, H, P, D)`` of tree-ordered tokens (after the position encoding)."""
        h = self.position_encoding(h, pos, mask, ball, centres)
        t = self.qkv(h).unflatten(-1, (3, self.n_heads, self.head_dim))
        return tuple(t.select(2, i).transpose(1, 2) for i in range(3))

    def physical_lengths(self) -> tuple[float, ...]:
        """The lengths whose node sizes :meth:`attend` takes as ``sizes`` (physical mode): ``(ball_diameter,)``."""
        return (self.ball_diameter,)

    def physical_layout(self, pos: torch.Tensor, mask: torch.Tensor | None = None, rotate=None):
        """``(tree, sizes)``: the cell layout of ``pos (B, N, d)`` for :meth:`physical_lengths`
        (:func:`~sciattn.balltree.physical.cell_layout`) and the node sizes in slots for :meth:`attend`."""
        layout = cell_layout(pos, mask, self.physical_lengths(), rotate)
        return layout.tree, tuple(layout.size(i) for i in range(len(layout.depths)))

    def call_ball(self, p: int, sizes: tuple[int, ...] | None) -> int:
        """The ball used for ``P = p`` tree-ordered tokens: ``sizes[0]`` when given (physical balls chosen
        by the caller from the geometry), else ``min(ball_size, p)``."""
        if sizes is not None:
            return min(int(sizes[0]), p)
        if self.ball_size is None:
            raise ValueError("sizes: expected the ball size of a physical-mode layer (ball_diameter="
                             f"{self.ball_diameter}) chosen from the tree, got None; use forward() or pass sizes")
        return min(self.ball_size, p)

    def attend(
        self, h: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None = None, weights: torch.Tensor | None = None,
        sizes: tuple[int, ...] | None = None, centres: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Ball attention on tree-ordered tokens ``h (B, P, C)``; the ball is ``sizes[0]`` (when given)
        or ``min(ball_size, P)``; ``centres`` ``(B, P, d)``: see :meth:`position_encoding`."""
        b, p, _ = h.shape
        ball = self.call_ball(p, sizes)
        if p % ball:
            raise ValueError(f"h: expected a token count that is a multiple of ball_size={ball}, got {p}")
        if mask is None:
            mask = torch.ones(b, p, dtype=torch.bool, device=h.device)
        pos = pos.to(h.dtype)
        q, k, v = self.project(h, pos, mask, ball, centres)
        z = ball_attention(q, k, v, pos, ball, mask=mask, weights=weights, sigma=self.sigma,
                           scale=1.0 / math.sqrt(self.head_dim), backend=self.backend)
        return self.proj(z.transpose(1, 2).flatten(2))

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
        tree: BallTree | None = None,
        sizes: tuple[int, ...] | None = None,
    ) -> torch.Tensor:
        """``tree``/``sizes``: a prebuilt tree (physical mode: the ``(tree, sizes)`` of :meth:`physical_layout`)."""
        check_point_inputs(x, pos, mask, weights, self.dim, self.spatial_dims)
        check_input_dtype("x", x, self)
        check_floating("pos", pos, "a floating-point tensor (any precision)")
        check_finite_at("x", x, None if mask is None else mask[..., None])
        if tree is None and self.ball_diameter is not None:
            tree, sizes = self.physical_layout(pos, mask)
        elif tree is None:
            tree = build_ball_tree(pos, mask, self.ball_size)
        elif tree.perm.shape[0] != x.shape[0] or tree.n_points != x.shape[1]:
            raise ValueError(f"tree: expected a tree of {x.shape[0]} clouds of {x.shape[1]} points, got one of "
                             f"{tree.perm.shape[0]} clouds of {tree.n_points} points")
        w = None if weights is None else tree.values_to_tree(weights.to(x.dtype))
        out = self.attend(tree.to_tree(x), tree.pos, tree.mask, w, sizes=sizes)
        return tree.from_tree(out)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, n_heads={self.n_heads}, spatial_dims={self.spatial_dims}, "
                f"ball_size={self.ball_size}, ball_diameter={self.ball_diameter}, rpe={self.pe is not None}, distance_bias={self.sigma is not None}")


def dense_points_from_pyg(data) -> dict[str, torch.Tensor]:
    """Pad a torch_geometric ``Data``/``Batch`` to the dense point-set contract.

    Reads ``data.x`` ``(N_tot, C)``, ``data.pos`` ``(N_tot, d)``, ``data.batch`` (sorted; absent for a
    single graph) and optional ``data.weights`` ``(N_tot,)``. Returns ``{"x", "pos", "mask"}`` and
    ``"weights"`` when present, shaped ``(B, N, ·)`` by ``torch_geometric.utils.to_dense_batch``.
    """
    from torch_geometric.utils import to_dense_batch

    for name in ("x", "pos"):
        if getattr(data, name, None) is None:
            raise ValueError(f"data: expected a torch_geometric Data/Batch with a {name!r} attribute, got none")
    x, pos = data.x, data.pos
    check_rank("data.x", x, 2, "(N_total, C)")
    check_rank("data.pos", pos, 2, "(N_total, d)")
    if pos.shape[0] != x.shape[0]:
        raise ValueError(f"data.pos: expected {x.shape[0]} rows like data.x, got {pos.shape[0]}")
    batch = getattr(data, "batch", None)
    if batch is None:
        batch = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    xd, mask = to_dense_batch(x, batch)
    out = {"x": xd, "pos": to_dense_batch(pos, batch)[0], "mask": mask}
    w = getattr(data, "weights", None)
    if w is not None:
        if tuple(w.shape) != (x.shape[0],):
            raise ValueError(f"data.weights: expected shape ({x.shape[0]},), got {tuple(w.shape)}")
        out["weights"] = to_dense_batch(w[:, None], batch)[0][..., 0]
    return out


def pyg_from_dense(y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The real rows ``(N_total, C)`` of a dense ``(B, N, C)`` output, in the node order of the batch."""
    return y[mask]
