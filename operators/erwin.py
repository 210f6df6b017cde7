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
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sciattn._checks import check_finite, check_input_dtype, check_positive_int
from sciattn.balltree import BallAttention, BallTree, build_ball_tree
from sciattn.balltree.module import check_point_inputs, dense_points_from_pyg, pyg_from_dense
from sciattn.balltree.tree import check_power_of_two

from .registry import register_operator

__all__ = ["Erwin", "PointBlock", "LevelGeometry", "level_geometry", "point_embedding"]


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w12 = nn.Linear(dim, 2 * hidden)
        self.w3 = nn.Linear(hidden, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        a, b = self.w12(h).chunk(2, dim=-1)
        return self.w3(F.silu(a) * b)


def point_embedding(c_in: int, d: int, width: int) -> nn.Sequential:
    """Pointwise ``MLP([features, position]) -> width``."""
    return nn.Sequential(nn.Linear(c_in + d, width), nn.GELU(), nn.Linear(width, width))


@dataclass
class LevelGeometry:
    """Points of one level in tree order and the map to its rotated tree (``rot_*`` None: no rotation)."""

    pos: torch.Tensor
    mask: torch.Tensor
    weights: torch.Tensor
    rot_index: torch.Tensor | None = None
    rot_inverse: torch.Tensor | None = None
    rot_pos: torch.Tensor | None = None
    rot_mask: torch.Tensor | None = None
    rot_weights: torch.Tensor | None = None


def level_geometry(pos, mask, weights, ball: int, rotate: float | None) -> LevelGeometry:
    """Geometry of a tree-ordered level ``(B, P, ·)``; with ``rotate`` also its rotated tree."""
    geo = LevelGeometry(pos, mask, weights)
    if rotate:
        rt = build_ball_tree(pos, mask, min(ball, pos.shape[1]), rotate, padded_size=pos.shape[1], check=False)
        geo.rot_index, geo.rot_inverse = rt.perm, rt.inverse
        geo.rot_pos, geo.rot_mask, geo.rot_weights = rt.pos, rt.mask, weights.gather(1, rt.perm)
    return geo


class PointBlock(nn.Module):
    """``h + Attn(RMSNorm h)``, ``h + SwiGLU(RMSNorm h)`` in tree order; padding rows are reset to 0."""

    def __init__(self, dim: int, attn: nn.Module, mlp_ratio: int, rotated: bool) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attn = attn
        self.mlp = SwiGLU(dim, mlp_ratio * dim)
        self.rotated = rotated

    def _run(self, h, pos, mask, weights):
        h = h + self.attn.attend(self.norm1(h), pos, mask, weights)
        h = h + self.mlp(self.norm2(h))
        return torch.where(mask[..., None], h, torch.zeros((), dtype=h.dtype, device=h.device))

    def forward(self, h: torch.Tensor, geo: LevelGeometry) -> torch.Tensor:
        if not (self.rotated and geo.rot_index is not None):
            return self._run(h, geo.pos, geo.mask, geo.weights)
        c = h.shape[-1]
        hr = h.gather(1, geo.rot_index[..., None].expand(-1, -1, c))
        hr = self._run(hr, geo.rot_pos, geo.rot_mask, geo.rot_weights)
        return hr.gather(1, geo.rot_inverse[..., None].expand(-1, -1, c))


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


@dataclass
class ErwinGeometry:
    """Everything an Erwin forward needs from the geometry: the tree and every level (cacheable)."""

    tree: BallTree
    levels: list[LevelGeometry]


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
class Erwin(nn.Module):
    """Erwin U-Net on ball trees.

    Args:
        in_channels, out_channels: point features in and out.
        spatial_dims: ``d`` of the positions.
        c_hidden: channels per level (``S`` levels).
        ball_sizes: ball size per level (powers of two; clamped to the points of a level).
        enc_depths: blocks per encoder level (``S`` entries).
        dec_depths: blocks per decoder level ``0..S-2`` (``S-1`` entries).
        strides: pooling strides between levels (powers of two, ``S-1`` entries).
        n_heads: heads, one int or one per level.
        mlp_ratio: SwiGLU hidden width as a multiple of the channels.
        rotate: angle in degrees of the rotated trees used by odd blocks (0 or None: no rotation).
        rpe, distance_bias: position encoding and distance bias of the ball attention.
        backend: ball-attention backend (None: automatic).
    """

    input_kind = "points"

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 3,
        c_hidden: Sequence[int] = (32, 64),
        ball_sizes: Sequence[int] = (64, 64),
        enc_depths: Sequence[int] = (2, 2),
        dec_depths: Sequence[int] = (2,),
        strides: Sequence[int] = (2,),
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
        n_lv = len(list(c_hidden))
        if n_lv == 0:
            raise ValueError("c_hidden: expected at least one level, got an empty list")
        self.c_hidden = [check_positive_int("c_hidden", c) for c in c_hidden]
        self.ball_sizes = [check_power_of_two("ball_sizes", b) for b in _as_list("ball_sizes", ball_sizes, n_lv)]
        self.enc_depths = [check_positive_int("enc_depths", k) for k in _as_list("enc_depths", enc_depths, n_lv)]
        self.dec_depths = [check_positive_int("dec_depths", k) for k in _as_list("dec_depths", dec_depths, n_lv - 1)]
        self.strides = [check_power_of_two("strides", s) for s in _as_list("strides", strides, n_lv - 1)]
        if any(s < 2 for s in self.strides):
            raise ValueError(f"strides: expected powers of two >= 2, got {list(strides)}")
        heads = _as_list("n_heads", n_heads, n_lv)
        if rotate and spatial_dims < 2:
            raise ValueError(f"rotate: expected 0 or None for spatial_dims={spatial_dims} (rotations need d >= 2), got {rotate}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.rotate = float(rotate) if rotate else None
        d = spatial_dims

        def stage(level: int, depth: int) -> nn.ModuleList:
            c = self.c_hidden[level]
            return nn.ModuleList(
                PointBlock(c, BallAttention(c, heads[level], d, self.ball_sizes[level], rpe=rpe,
                                            distance_bias=distance_bias, backend=backend),
                           mlp_ratio, rotated=bool(j % 2))
                for j in range(depth)
            )

        self.embed = point_embedding(in_channels, d, self.c_hidden[0])
        self.encoder = nn.ModuleList(stage(i, self.enc_depths[i]) for i in range(n_lv))
        self.pools = nn.ModuleList(BallPool(self.c_hidden[i], self.c_hidden[i + 1], self.strides[i], d)
                                   for i in range(n_lv - 1))
        self.unpools = nn.ModuleList(BallUnpool(self.c_hidden[i + 1], self.c_hidden[i], self.strides[i], d)
                                     for i in range(n_lv - 1))
        self.decoder = nn.ModuleList(stage(i, self.dec_depths[i]) for i in range(n_lv - 1))
        self.norm = nn.RMSNorm(self.c_hidden[0])
        self.head = nn.Linear(self.c_hidden[0], out_channels)

    def build_trees(
        self, pos: torch.Tensor, mask: torch.Tensor | None = None, weights: torch.Tensor | None = None
    ) -> ErwinGeometry:
        """The tree and per-level geometry of ``pos``; pass it as ``trees=`` to reuse static geometry."""
        total = 1
        for s in self.strides:
            total *= s
        n = pos.shape[1]
        size = max(1 << max(0, (n - 1).bit_length()), self.ball_sizes[0], total)
        tree = build_ball_tree(pos, mask, self.ball_sizes[0], padded_size=size)
        w = tree.mask.to(pos.dtype) if weights is None else tree.values_to_tree(weights.to(pos.dtype))
        geo = level_geometry(tree.pos, tree.mask, w, self.ball_sizes[0], self.rotate)
        levels = [geo]
        for i, s in enumerate(self.strides):
            b, p, d = geo.pos.shape
            m = geo.mask.view(b, p // s, s)
            cnt = m.sum(-1)
            ppos = torch.where(m[..., None], geo.pos.view(b, p // s, s, d), 0).sum(2) / cnt.clamp_min(1)[..., None]
            geo = level_geometry(ppos, cnt > 0, geo.weights.view(b, p // s, s).sum(-1), self.ball_sizes[i + 1],
                                 self.rotate)
            levels.append(geo)
        return ErwinGeometry(tree, levels)

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
        skips = []
        for i, blocks in enumerate(self.encoder):
            for blk in blocks:
                h = blk(h, geo.levels[i])
            if i < len(self.pools):
                skips.append(h)
                h = self.pools[i](h, geo.levels[i])
        for i in range(len(self.decoder) - 1, -1, -1):
            h = self.unpools[i](h, skips[i], geo.levels[i], geo.levels[i + 1])
            for blk in self.decoder[i]:
                h = blk(h, geo.levels[i])
        return tree.from_tree(self.head(self.norm(h)))

    def forward_pyg(self, data) -> torch.Tensor:
        """torch_geometric ``Data``/``Batch`` (``x``, ``pos``, ``batch``, optional ``weights``) -> ``(N_total, C_out)``."""
        dense = dense_points_from_pyg(data)
        out = self.forward(dense["x"], dense["pos"], dense["mask"], dense.get("weights"))
        return pyg_from_dense(out, dense["mask"])
