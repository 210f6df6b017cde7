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

from sciattn._checks import check_positive_int
from sciattn.balltree import BallSparseAttention, build_ball_tree
from sciattn.balltree.physical import cell_layout, cloud_box, lattice_for
from sciattn.balltree.tree import check_power_of_two

from ._ball_blocks import PointBlock, level_geometry, point_embedding, resolve_ball_mode, rotation_of
from ._geometry import ErwinGeometry
from ._physical_levels import physical_level
from ._point_operator import BallTreeOperator
from .registry import register_operator

__all__ = ["BALL_MODES", "BSATransformer"]

BALL_MODES = ("physical", "points")


@register_operator("bsa_transformer")
class BSATransformer(BallTreeOperator):
    """Flat ball-sparse-attention transformer on point clouds, BSA's point counts (default) or physical balls.

    Two modes (``ball_mode``): ``"physical"`` (when ``ball_diameter`` / ``block_diameter`` is given): the ball, the
    block (compressed / selectable) and the query group are the tree nodes at most ``ball_diameter``
    and ``block_diameter`` across, chosen from the geometry at every call, blocks pool by their
    quadrature mean, so the points per ball and block grow with the density and the output converges
    under refinement; ``"points"``: BSA as published, ``ball_size`` / ``block_size`` / ``group_size``
    points, which shrink as points are added, so **its output depends on the resolution**. The physical
    mode does not converge either: its top-k block selection is discontinuous in the geometry
    (``python -m benchmarks run pointcloud_refinement``, at init: points 5.0% / 2.3% at 1,024 / 4,096 points from the
    16,384-point output, physical 3.6% / 3.1%), and it trains about 6x slower; hence the default is
    BSA as published.

    Args:
        in_channels, out_channels: point features in and out.
        spatial_dims: ``d`` of the positions.
        width: channels; depth: number of blocks; n_heads: heads.
        ball_mode: ``"physical"``, ``"points"`` or None (``"physical"`` if ``ball_diameter`` or
            ``block_diameter`` is given and no point count, else ``"points"``).
        ball_size: points mode: points per ball of the local branch (power of two; default 64).
        block_size: points mode: points per compressed / selectable block (power of two dividing the
            ball; default 8).
        group_size: points mode: queries sharing one selection (None: ``block_size``).
        ball_diameter, block_diameter: physical mode: lengths in the units of ``pos`` (defaults 0.32
            and 0.12, 0.25 in 3-D, for domains of size about 1: 32 balls of 8 blocks in the unit square,
            256 balls of 2 blocks in the unit cube; the compressed branch costs ``O(#blocks²)``).
        top_k: selected blocks per query group.
        coarse_queries, exclude_own_ball: see :class:`~sciattn.balltree.BallSparseAttention`.
        window: points mode: tree slots a query's compressed and selected branches see (a power of two, at least
            ``ball_size``; default 4096 = ``ball_size · block_size²`` at the defaults, where the compressed
            branch costs as much per point as the local one); None: the whole cloud, as published (quadratic
            cost). Clouds of at most 4,096 points (ShapeNet-Car's 3,586) are one window, so the default is the
            published BSA there. The physical mode ignores it (its branches span the cloud's blocks).
        mlp_ratio: SwiGLU hidden width as a multiple of ``width``.
        rotate: angle of the rotated tree used by odd blocks (0 or None: none).
        rpe, distance_bias: position encoding and distance biases.
        backend: backend of the local ball attention (None: automatic).
    """

    # none: in the physical mode the top-k block selection is discontinuous (a block near a tie enters or
    # leaves the selection as points are added), so the output does not converge at first order
    convergent_ball_modes = ()
    ball_modes = BALL_MODES
    # a config stored without ``window`` was written when the compressed and selected branches were global
    legacy_defaults = {"window": None}

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 3,
        width: int = 64,
        depth: int = 4,
        n_heads: int = 4,
        ball_mode: str | None = None,
        ball_size: int | None = None,
        block_size: int | None = None,
        group_size: int | None = None,
        ball_diameter: float | None = None,
        block_diameter: float | None = None,
        top_k: int = 4,
        coarse_queries: bool = True,
        exclude_own_ball: bool = True,
        window: int | None = 4096,
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
        # Default: BSA's point counts. Its physical mode does not converge (top-k block selection is
        # discontinuous) and trains about 6x slower, so it is chosen only by asking for it or giving a diameter.
        diameters = ball_diameter is not None or block_diameter is not None
        self.ball_mode = resolve_ball_mode(ball_mode, ball_size is not None or block_size is not None or not diameters,
                                           BALL_MODES, default="physical")
        if self.ball_mode == "points":
            for name, value in (("ball_diameter", ball_diameter), ("block_diameter", block_diameter)):
                if value is not None:
                    raise ValueError(f"{name}: expected None with ball_mode='points' (point-count balls), got {value!r}")
            ball_size = 64 if ball_size is None else ball_size
            block_size = 8 if block_size is None else block_size
            check_power_of_two("ball_size", ball_size)
        else:
            for name, value in (("ball_size", ball_size), ("block_size", block_size), ("group_size", group_size)):
                if value is not None:
                    raise ValueError(f"{name}: expected None with ball_mode='physical' (sizes set by ball_diameter "
                                     f"and block_diameter), got {value!r}")
            ball_diameter = 0.32 if ball_diameter is None else ball_diameter
            if block_diameter is None:  # about 256 blocks in a unit square, 512 in a unit cube (compressed: O(#blocks²))
                block_diameter = 0.12 if spatial_dims <= 2 else 0.25
        self._set_io(in_channels, out_channels, spatial_dims, rotate)
        self.ball_size = ball_size
        self.embed = point_embedding(in_channels, spatial_dims, width)
        self.blocks = nn.ModuleList(
            PointBlock(width, BallSparseAttention(
                width, n_heads, spatial_dims, ball_size, block_size=block_size, group_size=group_size, top_k=top_k,
                coarse_queries=coarse_queries, exclude_own_ball=exclude_own_ball,
                window=window if self.ball_mode == "points" else None, ball_diameter=ball_diameter,
                block_diameter=block_diameter, rpe=rpe,
                distance_bias=distance_bias, backend=backend), mlp_ratio, rotated=bool(j % 2))
            for j in range(depth)
        )
        self.norm = nn.RMSNorm(width)
        self.head = nn.Linear(width, out_channels)

    def domain_parallel_refusal(self) -> str | None:
        """Domain parallelism splits the clouds at the windows of the compressed and selected branches."""
        if self.ball_mode != "points":
            return ("ball_mode='physical'; its compressed and selected branches span every block of the cloud; it "
                    "runs domain-parallel with ball_mode='points' (the default) and a window")
        if self.blocks[0].attn.window is None:
            return ("window=None; the compressed and selected branches then span the whole cloud; it runs "
                    "domain-parallel with a window (default 4096), the tree slots those branches see, split at")
        return None

    def _build_geometry(
        self, pos: torch.Tensor, mask: torch.Tensor | None = None, weights: torch.Tensor | None = None
    ) -> ErwinGeometry:
        """The tree (and rotated tree) of ``pos``; pass it as ``trees=`` to reuse static geometry.

        Physical mode: the cell layout of the ball and block diameters
        (:func:`~sciattn.balltree.physical.cell_layout`; a few host syncs: depth and capacity are shapes)."""
        rotate = rotation_of(self, pos.shape[-1])
        if self.ball_mode == "points":
            tree = build_ball_tree(pos, mask, self.ball_size)
            w = tree.mask.to(pos.dtype) if weights is None else tree.values_to_tree(weights.to(pos.dtype))
            return ErwinGeometry(tree, [level_geometry(tree.pos, tree.mask, w, self.ball_size, rotate)])
        attn = self.blocks[0].attn
        box = cloud_box(pos, mask, lattice_for(attn.physical_lengths()))
        lay = cell_layout(pos, mask, attn.physical_lengths(), box=box)
        tree, sizes = lay.tree, tuple(lay.size(i) for i in range(len(lay.depths)))
        w = tree.mask.to(pos.dtype) if weights is None else tree.values_to_tree(weights.to(pos.dtype))
        return ErwinGeometry(tree, [physical_level(tree.pos, tree.mask, w, attn.physical_lengths(), rotate, sizes,
                                                   box=box, centres=lay.centres(0))])

    def _trunk(self, h: torch.Tensor, geo: ErwinGeometry) -> torch.Tensor:
        """The blocks on the embedded features in tree order."""
        for blk in self.blocks:
            h = blk(h, geo.levels[0])
        return h
