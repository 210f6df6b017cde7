"""Erwin: a hierarchical ball-tree transformer for point clouds (Zhdanov, Welling, van de Meent, ICML 2025).

For features ``a`` at positions ``p`` (a padded batch of clouds), in ball-tree order::

    h_0 = Embed([a, p])                                         pointwise MLP, C_in + d -> c_0
    encoder, level i = 0..S-1:
        h_i <- Block(h_i) × enc_depths[i]                       ball attention + SwiGLU, pre-RMSNorm
        skip_i = h_i;  h_{i+1} = Pool(h_i)                      (i < S-1)
    decoder, level i = S-2..0:
        h_i = Unpool(h_{i+1}, skip_i);  h_i <- Block(h_i) × dec_depths[i]
    u = Proj(RMSNorm(h_0))                                      c_0 -> C_out

* **Block**: ``h + BallAttention(RMSNorm h)`` then ``h + SwiGLU(RMSNorm h)``; odd blocks of a level
  run on the *rotated tree* (the level's points re-partitioned after a ``rotate``° rotation in the
  first two axes), which mixes information across ball boundaries (Erwin §3.3).
* **Pool** (stride ``s``, eq. 12): the ``s`` consecutive children of a node (contiguous in tree
  order) are concatenated with their offsets to the parent centroid, ``Linear(s·c_i + s·d -> c_{i+1})``
  + LayerNorm; the parent sits at the centroid of its real children and weighs their total weight.
* **Unpool** (eq. 13): ``skip + Linear([h_parent, offsets] -> s·c_i)`` reshaped to the children, LayerNorm.

These are the published, point-count balls (``ball_mode="points"``): a ball holds ``ball_sizes[i]`` points, so
it shrinks as the sampling is refined and **the output depends on the resolution**. The physical mode
(``ball_mode="physical"``) replaces the tree by cells of fixed physical size
(:mod:`sciattn.balltree.physical`): level ``i``'s balls are the cells at most ``ball_diameters[i]`` across,
pooling takes the quadrature mean ``Σ_j w_j h_j / Σ_j w_j`` of each cell at most ``pool_diameters[i]`` across
(:class:`PhysicalPool`; :class:`PhysicalUnpool` maps the parent to each child with one shared map), and the
position encoding is relative to the ball cell's geometric centre. With quadrature weights ``w`` these are
quadratures of ``∫_{ball} κ v dμ`` and ``∫_{cell} h dμ / μ(cell)`` over regions that do not move under
refinement, so the output converges (``tests/operators/test_pointset_convergence.py``); but a ball holds
``n / #balls`` points, so its attention costs ``O(n²/#balls)``. The default, ``ball_mode="multiscale"``, keeps
the cells and the convergence at linear cost (:mod:`sciattn.balltree.multiscale_attention`,
:mod:`._multiscale_levels`): a query attends, in one softmax, to the points of its near-field window in its
ball cell and to the ball's key cells (``key_diameter``), pooled by their quadrature means with the mass outside
the window; coarse levels hold one token per pool cell and their key cells one token each (exact there).

Differences from the Erwin code, on purpose: the tree is built on the device with tensor ops
(no host sync) and cached by the caller if the geometry is static (:meth:`Erwin.build_trees`);
padding is masked everywhere (attention keys, centroids, pooling, no BatchNorm — LayerNorm keeps
samples independent), so padding never changes real outputs and a cloud smaller than a ball
never mixes with its neighbours; the distance-bias scale is trained; quadrature weights enter
every attention as key weights. The MPNN embedding of the paper is not included.

Shapes: ``x`` ``(B, N, C_in)``, ``pos`` ``(B, N, d)``, ``mask``/``weights`` ``(B, N)`` -> ``(B, N, C_out)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from sciattn._checks import check_positive_int
from sciattn.balltree import BallAttention, build_ball_tree
from sciattn.balltree.multiscale_attention import MultiscaleBallAttention
from sciattn.balltree.physical import check_length
from sciattn.balltree.tree import check_power_of_two

from ._ball_blocks import (  # noqa: F401 - these lived here; kept importable
    BALL_MODES,
    PointBlock,
    SwiGLU,
    level_geometry,
    point_embedding,
    resolve_ball_mode,
    rotation_of,
)
from ._geometry import ErwinGeometry, LevelGeometry
from ._multiscale_levels import UNIT, CellPool, CellUnpool, multiscale_geometry
from ._physical_levels import (
    PhysicalPool,
    PhysicalUnpool,
    physical_geometry,
    physical_lengths,
)
from ._point_operator import BallTreeOperator
from .registry import register_operator

__all__ = ["BALL_MODES", "Erwin", "PointBlock", "LevelGeometry", "level_geometry", "point_embedding", "resolve_ball_mode"]

class BallPool(nn.Module):
    """Children -> parent: ``LayerNorm(Linear([h_c1..h_cs, p_c1 - p̄..p_cs - p̄]))`` (padding children zeroed)."""

    def __init__(self, c_in: int, c_out: int, stride: int, d: int) -> None:
        super().__init__()
        self.stride = stride
        self.lin = nn.Linear(stride * (c_in + d), c_out)
        self.norm = nn.LayerNorm(c_out)

    def forward(self, h: torch.Tensor, geo: LevelGeometry):
        b, p, c = h.shape
        s, d = self.stride, geo.pos.shape[-1]
        m = geo.mask.view(b, p // s, s)
        cnt = m.sum(-1, keepdim=True)
        zero = torch.zeros((), dtype=h.dtype, device=h.device)
        cp = torch.where(m[..., None], geo.pos.view(b, p // s, s, d).to(h.dtype), zero)
        parent = cp.sum(2) / cnt.clamp_min(1).to(h.dtype)
        rel = torch.where(m[..., None], cp - parent[:, :, None], zero)
        hc = torch.where(m[..., None], h.view(b, p // s, s, c), zero)
        return self.norm(self.lin(torch.cat([hc.flatten(2), rel.flatten(2)], dim=-1)))


class BallUnpool(nn.Module):
    """Parent -> children: ``LayerNorm(skip + Linear([h_parent, p_c - p̄]))`` reshaped to the ``s`` children."""

    def __init__(self, c_parent: int, c_child: int, stride: int, d: int) -> None:
        super().__init__()
        self.stride, self.c_child = stride, c_child
        self.lin = nn.Linear(c_parent + stride * d, stride * c_child)
        self.norm = nn.LayerNorm(c_child)

    def forward(self, h: torch.Tensor, skip: torch.Tensor, child: LevelGeometry, parent: LevelGeometry):
        b, p, _ = skip.shape
        s, d = self.stride, child.pos.shape[-1]
        m = child.mask.view(b, p // s, s, 1)
        zero = torch.zeros((), dtype=h.dtype, device=h.device)
        rel = torch.where(m, child.pos.view(b, p // s, s, d).to(h.dtype) - parent.pos[:, :, None].to(h.dtype), zero)
        up = self.lin(torch.cat([h, rel.flatten(2)], dim=-1)).view(b, p, self.c_child)
        return self.norm(skip + up)


def _as_lengths(name: str, value, n: int) -> list[float]:
    """One positive length per entry from a number or a sequence of ``n`` numbers; errors name ``name``."""
    vals = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(vals) != n:
        raise ValueError(f"{name}: expected {n} lengths, got {len(vals)}: {value!r}")
    return [check_length(name, v) for v in vals]


def _as_list(name: str, value, n: int) -> list[int]:
    """One positive int per level from an int or a sequence; errors name ``name``."""
    if isinstance(value, int) and not isinstance(value, bool):
        vals = [value] * n
    elif isinstance(value, (list, tuple)):
        vals = list(value)
    else:
        raise TypeError(f"{name}: expected a positive int or {n} ints (one per level), got {value!r} "
                        f"({type(value).__name__})")
    if len(vals) != n:
        raise ValueError(f"{name}: expected {n} entries (one per level), got {len(vals)}: {value!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        raise TypeError(f"{name}: expected positive ints, got {value!r}")
    return vals


@register_operator("erwin")
class Erwin(BallTreeOperator):
    """Erwin U-Net on ball trees, with physically scaled balls (default) or Erwin's point-count balls.

    Three modes (``ball_mode``):

    * ``"multiscale"`` (the default when no point counts are given): the physical mode's cells, at linear cost:
      at level 0 a query attends, in one softmax, to the points of its near-field window (``near_points``
      consecutive slots of the layout) in its ball cell, each with its weight, and to the ball's key cells
      (diameter ``key_diameter``), each pooled by its quadrature mean and carrying the mass of its points
      outside the window (:mod:`sciattn.balltree.multiscale_attention`); coarse levels hold one token per pool
      cell, and their key cells one token each. Time and memory are linear in the points at any density; the
      output converges under refinement (to the key-cell quadrature of the ball integral; it is the physical
      mode's attention where every key cell holds one point).
    * ``"physical"``: level ``i``'s balls are the tree
      nodes at most ``ball_diameters[i]`` across, and pooling from level ``i`` groups the nodes at most
      ``pool_diameters[i]`` across into one token by their quadrature mean (:class:`PhysicalPool`);
      both node sizes are chosen from the geometry at every call (:mod:`sciattn.balltree.physical`),
      so the number of points per ball grows with the density, the coarse levels hold a fixed
      number of tokens, and with quadrature weights the attention sums and pooling means converge
      as the sampling is refined, at ``O(n²/#balls)`` cost. Lengths are in the units of ``pos`` (defaults
      suit domains of size about 1). A batch of several clouds, or a padded one, runs one cloud at a time.
    * ``"points"``: the published Erwin, ``ball_sizes[i]`` points per ball and ``strides[i]`` children
      per parent concatenated (eq. 12). Its balls shrink as points are added, so **its output depends
      on the resolution** (issue 26: 92% / 82% from 16,384 points at 1,024 / 4,096 points at init).

    Args:
        in_channels, out_channels: point features in and out.
        spatial_dims: ``d`` of the positions.
        c_hidden: channels per level (``S`` levels).
        ball_mode: ``"multiscale"``, ``"physical"``, ``"points"`` or None (``"points"`` if ``ball_sizes`` or
            ``strides`` is given, else ``"multiscale"``; checkpoints stored before the multiscale mode load as
            the mode they were trained with, see :meth:`migrate_config`).
        ball_sizes: points mode: ball size per level (powers of two; clamped to the points of a level;
            default 64).
        strides: points mode: pooling strides between levels (powers of two >= 2, ``S-1``; default 2).
        ball_diameters: multiscale and physical modes: ball diameter per level (a length or ``S`` lengths;
            default ``0.32`` at level 0 and ``0.8`` above).
        pool_diameters: multiscale and physical modes: diameter of the cell pooled into one coarse token
            (``S-1``; default ``0.12``).
        key_diameter: multiscale mode: diameter of the key cells of level 0's far field (at most
            ``ball_diameters[0]``; default a quarter of it: 64 key cells per ball in 3-D, 16 in 2-D).
        near_points: multiscale mode: slots of level 0's near-field window (a power of two; default 64).
        enc_depths: blocks per encoder level (``S`` entries).
        dec_depths: blocks per decoder level ``0..S-2`` (``S-1`` entries).
        n_heads: heads, one int or one per level.
        mlp_ratio: SwiGLU hidden width as a multiple of the channels.
        rotate: angle in degrees of the rotated trees used by odd blocks (0 or None: no rotation); in
            3-D Erwin's three Euler rotations by that angle (:func:`~sciattn.balltree.rotation_matrix`).
        rpe, distance_bias: position encoding and distance bias of the ball attention.
        backend: ball-attention backend (None: automatic).
    """

    ball_modes = BALL_MODES

    @classmethod
    def migrate_config(cls, config: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        """A config stored without ``key_diameter`` was written before the multiscale default: ``ball_mode=None``
        then meant ``"physical"`` without point counts (it now means ``"multiscale"``), so ``ball_mode`` is filled
        in (``"points"`` with ``ball_sizes`` or ``strides``). A config that holds the key is kept."""
        if "key_diameter" not in config and config.get("ball_mode") is None:
            counts = config.get("ball_sizes") is not None or config.get("strides") is not None
            config = {**config, "ball_mode": "points" if counts else "physical"}
        return super().migrate_config(config, version)
    # ball modes whose output converges under point refinement at their defaults (the registry test asserts it)
    convergent_ball_modes = ("multiscale", "physical")

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 3,
        c_hidden: Sequence[int] = (32, 64),
        ball_mode: str | None = None,
        ball_sizes: Sequence[int] | None = None,
        ball_diameters: float | Sequence[float] | None = None,
        pool_diameters: float | Sequence[float] | None = None,
        key_diameter: float | None = None,
        near_points: int | None = None,
        enc_depths: Sequence[int] = (2, 2),
        dec_depths: Sequence[int] = (2,),
        strides: Sequence[int] | None = None,
        n_heads: int | Sequence[int] = 4,
        mlp_ratio: int = 4,
        rotate: float | None = 45.0,
        rpe: bool = True,
        distance_bias: bool = True,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels),
                            ("spatial_dims", spatial_dims), ("mlp_ratio", mlp_ratio)):
            check_positive_int(name, value)
        if isinstance(c_hidden, (str, bytes)) or not isinstance(c_hidden, Sequence):
            raise TypeError(f"c_hidden: expected a sequence of channel widths, one per level (e.g. [64, 128]), got "
                            f"{type(c_hidden).__name__} {c_hidden!r}")
        n_lv = len(list(c_hidden))
        if n_lv == 0:
            raise ValueError("c_hidden: expected at least one level, got an empty list")
        self.c_hidden = [check_positive_int("c_hidden", c) for c in c_hidden]
        self.ball_mode = resolve_ball_mode(ball_mode, ball_sizes is not None or strides is not None)
        if self.ball_mode != "multiscale":
            for name, value in (("key_diameter", key_diameter), ("near_points", near_points)):
                if value is not None:
                    raise ValueError(f"{name}: expected None with ball_mode={self.ball_mode!r} (it sets the "
                                     f"multiscale mode's far-field cells and near field), got {value!r}")
        self.key_diameter = self.near_points = None
        if self.ball_mode == "points":
            for name, value in (("ball_diameters", ball_diameters), ("pool_diameters", pool_diameters)):
                if value is not None:
                    raise ValueError(f"{name}: expected None with ball_mode='points' (point-count balls), got {value!r}")
            ball_sizes = 64 if ball_sizes is None else ball_sizes
            strides = [2] * (n_lv - 1) if strides is None else strides
            self.ball_sizes = [check_power_of_two("ball_sizes", b) for b in _as_list("ball_sizes", ball_sizes, n_lv)]
            self.strides = [check_power_of_two("strides", s) for s in _as_list("strides", strides, n_lv - 1)]
            if any(s < 2 for s in self.strides):
                raise ValueError(f"strides: expected powers of two >= 2, got {list(strides)}")
            self.ball_diameters = self.pool_diameters = None
        else:
            for name, value in (("ball_sizes", ball_sizes), ("strides", strides)):
                if value is not None:
                    raise ValueError(f"{name}: expected None with ball_mode={self.ball_mode!r} (balls and pooling set "
                                     f"by ball_diameters and pool_diameters; point counts need ball_mode='points'), "
                                     f"got {value!r}")
            if ball_diameters is None:
                ball_diameters = [0.32] + [0.8] * (n_lv - 1)
            self.ball_diameters = _as_lengths("ball_diameters", ball_diameters, n_lv)
            self.pool_diameters = _as_lengths("pool_diameters", 0.12 if pool_diameters is None else pool_diameters,
                                              n_lv - 1)
            self.ball_sizes, self.strides = [None] * n_lv, None
            if self.ball_mode == "multiscale":
                self.key_diameter = check_length(
                    "key_diameter", self.ball_diameters[0] / 4 if key_diameter is None else key_diameter)
                if self.key_diameter > self.ball_diameters[0]:
                    raise ValueError(f"key_diameter: expected a length <= ball_diameters[0]={self.ball_diameters[0]}, "
                                     f"got {key_diameter}")
                self.near_points = check_power_of_two("near_points", 64 if near_points is None else near_points)
        self.enc_depths = [check_positive_int("enc_depths", k) for k in _as_list("enc_depths", enc_depths, n_lv)]
        self.dec_depths = [check_positive_int("dec_depths", k) for k in _as_list("dec_depths", dec_depths, n_lv - 1)]
        heads = _as_list("n_heads", n_heads, n_lv)
        self._set_io(in_channels, out_channels, spatial_dims, rotate)
        d = spatial_dims
        physical = self.ball_mode == "physical"
        multiscale = self.ball_mode == "multiscale"
        lengths = physical_lengths(self) if multiscale else None

        def attention(level: int) -> nn.Module:
            c = self.c_hidden[level]
            if multiscale:  # level 0: key cells and a near field; above: one token per key cell, no near field
                key = self.key_diameter if level == 0 else lengths[2 * level - 1]
                return MultiscaleBallAttention(c, heads[level], d, ball_diameter=lengths[2 * level], key_diameter=key,
                                               near_points=self.near_points if level == 0 else UNIT, rpe=rpe,
                                               distance_bias=distance_bias, backend=backend)
            return BallAttention(c, heads[level], d, self.ball_sizes[level],
                                 ball_diameter=self.ball_diameters[level] if physical else None,
                                 rpe=rpe, distance_bias=distance_bias, backend=backend)

        def stage(level: int, depth: int) -> nn.ModuleList:
            return nn.ModuleList(PointBlock(self.c_hidden[level], attention(level), mlp_ratio, rotated=bool(j % 2))
                                 for j in range(depth))

        self.embed = point_embedding(in_channels, d, self.c_hidden[0])
        self.encoder = nn.ModuleList(stage(i, self.enc_depths[i]) for i in range(n_lv))
        if multiscale:
            self.pools = nn.ModuleList(CellPool(self.c_hidden[i], self.c_hidden[i + 1]) for i in range(n_lv - 1))
            self.unpools = nn.ModuleList(CellUnpool(self.c_hidden[i + 1], self.c_hidden[i], d) for i in range(n_lv - 1))
        elif physical:
            self.pools = nn.ModuleList(PhysicalPool(self.c_hidden[i], self.c_hidden[i + 1]) for i in range(n_lv - 1))
            self.unpools = nn.ModuleList(PhysicalUnpool(self.c_hidden[i + 1], self.c_hidden[i], d)
                                         for i in range(n_lv - 1))
        else:
            self.pools = nn.ModuleList(BallPool(self.c_hidden[i], self.c_hidden[i + 1], self.strides[i], d)
                                       for i in range(n_lv - 1))
            self.unpools = nn.ModuleList(BallUnpool(self.c_hidden[i + 1], self.c_hidden[i], self.strides[i], d)
                                         for i in range(n_lv - 1))
        self.decoder = nn.ModuleList(stage(i, self.dec_depths[i]) for i in range(n_lv - 1))
        self.norm = nn.RMSNorm(self.c_hidden[0])
        self.head = nn.Linear(self.c_hidden[0], out_channels)

    def domain_parallel_refusal(self) -> str | None:
        """Domain parallelism splits the clouds at the ball cells of the coarsest level (multiscale mode only)."""
        if self.ball_mode != "multiscale":
            return (f"ball_mode={self.ball_mode!r}; it runs domain-parallel with ball_mode='multiscale' (the default), "
                    f"whose cells split a cloud into parts that couple only through the rotated blocks"
                    + (" (the physical mode pads every cell of a cloud to its most crowded one, a whole-cloud choice)"
                       if self.ball_mode == "physical" else " (the points mode's median tree is not supported)"))
        return None

    def _build_geometry(
        self, pos: torch.Tensor, mask: torch.Tensor | None = None, weights: torch.Tensor | None = None
    ) -> ErwinGeometry:
        """The tree and per-level geometry of ``pos``; pass it as ``trees=`` to reuse static geometry.

        Physical mode: one median ball tree down to single points (Erwin's tree, padded to
        ``2^⌈log2 N⌉`` slots); level ``i``'s ball and pooling node sizes are read from it
        (:func:`~sciattn.balltree.physical.physical_node_size`, one host sync per size); coarse
        tokens sit at the quadrature-weighted centroid of their node and weigh its total weight.
        """
        rotate = rotation_of(self, pos.shape[-1])
        n = pos.shape[1]
        if self.ball_mode == "physical":
            return physical_geometry(self, pos, mask, weights, rotate)
        if self.ball_mode == "multiscale":
            return multiscale_geometry(self, pos, mask, weights, rotate)
        total = 1
        for s in self.strides:
            total *= s
        size = max(1 << max(0, (n - 1).bit_length()), self.ball_sizes[0], total)
        tree = build_ball_tree(pos, mask, self.ball_sizes[0], padded_size=size)
        w = tree.mask.to(pos.dtype) if weights is None else tree.values_to_tree(weights.to(pos.dtype))
        geo = level_geometry(tree.pos, tree.mask, w, self.ball_sizes[0], rotate)
        levels = [geo]
        for i, s in enumerate(self.strides):
            b, p, d = geo.pos.shape
            m = geo.mask.view(b, p // s, s)
            cnt = m.sum(-1)
            ppos = torch.where(m[..., None], geo.pos.view(b, p // s, s, d), 0).sum(2) / cnt.clamp_min(1)[..., None]
            geo = level_geometry(ppos, cnt > 0, geo.weights.view(b, p // s, s).sum(-1), self.ball_sizes[i + 1],
                                 rotate)
            levels.append(geo)
        return ErwinGeometry(tree, levels)

    def _trunk(self, h: torch.Tensor, geo: ErwinGeometry) -> torch.Tensor:
        """Encoder, pooling, unpooling and decoder on the embedded features in tree order."""
        skips = []
        for i, blocks in enumerate(self.encoder):
            for blk in blocks:
                h = blk(h, geo.levels[i])
            if i < len(self.pools):
                skips.append(h)
                if self.ball_mode == "multiscale":
                    h = self.pools[i](h, geo.levels[i], geo.levels[i + 1])
                elif self.ball_mode == "physical":
                    h = self.pools[i](h, geo.levels[i], geo.levels[i + 1].stride)
                else:
                    h = self.pools[i](h, geo.levels[i])
        for i in range(len(self.decoder) - 1, -1, -1):
            if self.ball_mode == "multiscale":
                h = self.unpools[i](h, skips[i], geo.levels[i], geo.levels[i + 1])
            elif self.ball_mode == "physical":
                h = self.unpools[i](h, skips[i], geo.levels[i], geo.levels[i + 1], geo.levels[i + 1].stride)
            else:
                h = self.unpools[i](h, skips[i], geo.levels[i], geo.levels[i + 1])
            for blk in self.decoder[i]:
                h = blk(h, geo.levels[i])
        return h
