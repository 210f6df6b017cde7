"""BSA transformer: a flat stack of ball sparse attention blocks on ball trees (Brita et al., arXiv 2506.12541).

For features ``a`` at positions ``p`` (a padded batch of clouds), in ball-tree order::

    h_0 = Embed([a, p])                                     pointwise MLP, C_in + d -> width
    h_l = h_{l-1} + BSA(RMSNorm h_{l-1})                    local ball + compressed + selected, gated
    h_l = h_l + SwiGLU(RMSNorm h_l)
    u   = Proj(RMSNorm h_L)                                 width -> C_out

Odd blocks run on the rotated tree (``rotate`` degrees in the first two axes), as in Erwin and
the BSA code. Every block sees the whole cloud: the compressed branch attends to all block
tokens and the selected branch to the ``top_k`` most relevant blocks outside the query's ball;
the cost of each branch is listed in :mod:`sciattn.balltree.sparse`. Padding never changes real
outputs; quadrature weights are key weights in every branch.

Shapes: ``x`` ``(B, N, C_in)``, ``pos`` ``(B, N, d)``, ``mask``/``weights`` ``(B, N)`` -> ``(B, N, C_out)``.
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn._checks import check_finite, check_input_dtype, check_positive_int
from sciattn.balltree import BallSparseAttention, build_ball_tree
from sciattn.balltree.module import check_point_inputs, dense_points_from_pyg, pyg_from_dense
from sciattn.balltree.tree import check_power_of_two

from .erwin import ErwinGeometry, PointBlock, level_geometry, point_embedding
from .registry import register_operator

__all__ = ["BSATransformer"]


@register_operator("bsa_transformer")
class BSATransformer(nn.Module):
    """Flat ball-sparse-attention transformer on point clouds.

    Args:
        in_channels, out_channels: point features in and out.
        spatial_dims: ``d`` of the positions.
        width: channels; depth: number of blocks; n_heads: heads.
        ball_size: points per ball of the local branch (power of two).
        block_size: points per compressed / selectable block (power of two dividing the ball).
        group_size: queries sharing one selection (None: ``block_size``).
        top_k: selected blocks per query group.
        coarse_queries, exclude_own_ball: see :class:`~sciattn.balltree.BallSparseAttention`.
        mlp_ratio: SwiGLU hidden width as a multiple of ``width``.
        rotate: angle of the rotated tree used by odd blocks (0 or None: none).
        rpe, distance_bias: position encoding and distance biases.
        backend: backend of the local ball attention (None: automatic).
    """

    input_kind = "points"

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 3,
        width: int = 64,
        depth: int = 4,
        n_heads: int = 4,
        ball_size: int = 64,
        block_size: int = 8,
        group_size: int | None = None,
        top_k: int = 4,
        coarse_queries: bool = True,
        exclude_own_ball: bool = True,
        mlp_ratio: int = 4,
        rotate: float | None = 45.0,
        rpe: bool = True,
        distance_bias: bool = True,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels), ("width", width),
                            ("depth", depth), ("spatial_dims", spatial_dims), ("mlp_ratio", mlp_ratio)):
            check_positive_int(name, value)
        check_power_of_two("ball_size", ball_size)
        if rotate and spatial_dims < 2:
            raise ValueError(f"rotate: expected 0 or None for spatial_dims={spatial_dims} (rotations need d >= 2), got {rotate}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.ball_size = ball_size
        self.rotate = float(rotate) if rotate else None
        self.embed = point_embedding(in_channels, spatial_dims, width)
        self.blocks = nn.ModuleList(
            PointBlock(width, BallSparseAttention(
                width, n_heads, spatial_dims, ball_size, block_size=block_size, group_size=group_size, top_k=top_k,
                coarse_queries=coarse_queries, exclude_own_ball=exclude_own_ball, rpe=rpe,
                distance_bias=distance_bias, backend=backend), mlp_ratio, rotated=bool(j % 2))
            for j in range(depth)
        )
        self.norm = nn.RMSNorm(width)
        self.head = nn.Linear(width, out_channels)

    def build_trees(
        self, pos: torch.Tensor, mask: torch.Tensor | None = None, weights: torch.Tensor | None = None
    ) -> ErwinGeometry:
        """The tree (and rotated tree) of ``pos``; pass it as ``trees=`` to reuse static geometry."""
        tree = build_ball_tree(pos, mask, self.ball_size)
        w = tree.mask.to(pos.dtype) if weights is None else tree.values_to_tree(weights.to(pos.dtype))
        return ErwinGeometry(tree, [level_geometry(tree.pos, tree.mask, w, self.ball_size, self.rotate)])

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
        trees: ErwinGeometry | None = None,
    ) -> torch.Tensor:
        check_point_inputs(x, pos, mask, weights, self.in_channels, self.spatial_dims)
        check_input_dtype("x", x, self, "operator")
        check_finite("x", x, None if mask is None else mask[..., None])
        geo = self.build_trees(pos, mask, weights) if trees is None else trees
        tree = geo.tree
        if tree.perm.shape[0] != x.shape[0] or tree.n_points != x.shape[1]:
            raise ValueError(f"trees: expected geometry of {x.shape[0]} clouds of {x.shape[1]} points, got "
                             f"{tree.perm.shape[0]} clouds of {tree.n_points}")
        if mask is not None:
            x = torch.where(mask[..., None], x, torch.zeros((), dtype=x.dtype, device=x.device))
            pos = torch.where(mask[..., None], pos, torch.zeros((), dtype=pos.dtype, device=pos.device))
        h = tree.to_tree(self.embed(torch.cat([x, pos.to(x.dtype)], dim=-1)))
        for blk in self.blocks:
            h = blk(h, geo.levels[0])
        return tree.from_tree(self.head(self.norm(h)))

    def forward_pyg(self, data) -> torch.Tensor:
        """torch_geometric ``Data``/``Batch`` (``x``, ``pos``, ``batch``, optional ``weights``) -> ``(N_total, C_out)``."""
        dense = dense_points_from_pyg(data)
        out = self.forward(dense["x"], dense["pos"], dense["mask"], dense.get("weights"))
        return pyg_from_dense(out, dense["mask"])
