r"""MSPT: the Multi-Scale Patch Transformer (Curvo, van de Meent, Zhdanov, arXiv 2512.01738; code
``pedrocurvo/Neural-Solver-Library-MSPT``, ``models/MSPT.py``).

For features ``a`` at positions ``p`` (a padded batch of clouds), with the points laid out in ``K`` patches
(:mod:`sciattn.balltree.patch`) and one global token ("supernode") per patch::

    h_0 = Embed([a, p]) + e                           pointwise MLP, C_in + d -> 2 width -> width; e learned
    g_0 = 0
    for each block l = 1..L:
        u   = LN_1(h)
        s   = Pool(u) + g                             patch means (quadrature-weighted), plus the carried tokens
        z   = [u ; s]   per patch sequence            patch k: its points, then all K global tokens
        z   = z + Attn(LN(z));  z = z + FFN(LN(z))     one softmax per patch (patch_attention), FFN 4 width
        h   = h + z_points;  g = Σ_k ω_k z_globals(copy k)
        h   = h + MLP(LN_2 h)                         MLP: width -> mlp_ratio width -> width, GELU
    u = Linear(LN_3 h)                                width -> C_out

(``h + z`` keeps the published double residual: ``z`` already contains its input ``LN_1 h``.) The attention of
patch ``k`` is the quadrature ``Σ_{j∈P_k} w_j e^{s} v_j + Σ_c W_c e^{s} v(g_c)`` normalised (patch points plus
the whole domain at the patches' resolution); its cost is ``O(N (m + K))`` for ``N`` points in ``K`` patches of
``m`` slots.

Two ``ball_mode``\ s (patch layouts):

* ``"physical"`` (default): the patches are the cells at most ``patch_diameter`` across of a spatial bisection
  of the cloud's box (:func:`~sciattn.balltree.patch.physical_patches`); pooling is the quadrature mean, point
  keys carry ``w_j``, global keys the patch mass ``W_c`` and the copies are averaged by mass, so every sum
  is a quadrature of a fixed integral and the output converges under refinement. Cost grows like ``N²/K``
  (the patches gain points).
* ``"points"``: MSPT as published, ``n_patches`` contiguous runs of the ball-tree order, ``N/K`` points each
  (:func:`~sciattn.balltree.patch.count_patches`), every global token counted as one point: the patches keep their
  number, so a patch's points grow like ``N`` against a fixed number of global tokens and the balance between the
  local and the global term moves with the resolution (the run boundaries also follow the sample's medians), so
  **the output depends on the resolution**.

Shapes: ``x`` ``(B, N, C_in)``, ``pos`` ``(B, N, d)``, ``mask``/``weights`` ``(B, N)`` -> ``(B, N, C_out)``.
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn._checks import check_heads, check_positive_float, check_positive_int
from sciattn.balltree.patch import count_patches, patch_attention, physical_patches, pool_patches

from ._ball_blocks import resolve_ball_mode
from ._geometry import ErwinGeometry, LevelGeometry
from ._point_operator import BallTreeOperator
from .contract import ExportPolicy
from .registry import register_operator

__all__ = ["BALL_MODES", "MSPT"]

BALL_MODES = ("physical", "points")


class PatchMixer(nn.Module):
    """MSPT's ``ChunkedGlobalPoolAttention`` on a patch layout: ``z + Attn(LN z)``, then ``+ FFN(LN z)`` (one
    LayerNorm for both, as published), for the points and for every copy of the global tokens."""

    def __init__(self, width: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.norm = nn.LayerNorm(width)
        self.in_proj = nn.Linear(width, 3 * width)
        self.out_proj = nn.Linear(width, width)
        self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def _heads(self, t: torch.Tensor) -> tuple[torch.Tensor, ...]:  # (B, S, 3C) -> 3 x (B, H, S, C/H)
        b, s, c3 = t.shape
        return tuple(t.view(b, s, 3, self.n_heads, c3 // (3 * self.n_heads)).permute(2, 0, 3, 1, 4))

    def forward(self, u, s, m, point_logw, global_logw, copy_weights):
        """``u`` ``(B, K·m, C)`` points, ``s`` ``(B, K, C)`` global tokens -> (points, copy-averaged tokens)."""
        op, og = patch_attention(self._heads(self.in_proj(self.norm(u))), self._heads(self.in_proj(self.norm(s))),
                                 m, point_logw, global_logw)
        b, _, p, e = op.shape
        zp = u + self.out_proj(op.transpose(1, 2).reshape(b, p, -1))
        zp = zp + self.ff(self.norm(zp))
        k = s.shape[1]
        zg = s[:, None] + self.out_proj(og.permute(0, 2, 3, 1, 4).reshape(b, k, k, -1))  # (B, copy, K, C)
        zg = zg + self.ff(self.norm(zg))
        return zp, torch.einsum("bkcd,bk->bcd", zg, copy_weights.to(zg.dtype))


class MSPTBlock(nn.Module):
    """``h + PatchMixer(LN_1 h)`` (the mixer's output holds its input: the published double residual), then
    ``h + MLP(LN_2 h)``."""

    def __init__(self, width: int, n_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = PatchMixer(width, n_heads)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(), nn.Linear(mlp_ratio * width, width))

    def forward(self, h, g, m, w, point_logw, global_logw, copy_weights):
        u = self.ln_1(h)
        pooled, _ = pool_patches(u, w, m)
        zp, g = self.attn(u, pooled + g, m, point_logw, global_logw, copy_weights)
        h = h + zp
        return h + self.mlp(self.ln_2(h)), g


@register_operator("mspt")
class MSPT(BallTreeOperator):
    """Multi-Scale Patch Transformer on point clouds: local attention in patches plus pooled global tokens.

    Args:
        in_channels, out_channels: point features in and out.
        spatial_dims: ``d`` of the positions.
        width: channels; depth: number of blocks; n_heads: heads; mlp_ratio: hidden width of the block MLP as a
            multiple of ``width`` (published scripts: 2).
        ball_mode: ``"physical"`` (default; patches of ``patch_diameter``), ``"points"`` (published: ``n_patches``
            patches of ``N / n_patches`` points) or None (``"points"`` when ``n_patches`` is given, else
            ``"physical"``).
        n_patches: points mode: the number of patches ``K`` (the published ``mspt_V``; default 32, the published
            constructor's default; scripts: 32 to 600).
        patch_diameter: physical mode: the largest patch diameter, in the units of ``pos`` (defaults 0.25 in
            1-D and 2-D, 64 patches in the unit square, and 0.32 in 3-D, 256 patches of ``1/8 × 1/8 × 1/4`` in the
            unit cube: fewer patches cost more per point, ``N/K``, more cost ``K³``).
        max_patches: physical mode: memory guard; a cloud with more non-empty patches (a domain much larger
            than ``patch_diameter``, or a sparse cloud) takes patches ``√2`` times wider until it has at most
            this many (the cost has a term ``O(K³)`` in the patch count; default 512).
    """

    ball_modes = BALL_MODES
    convergent_ball_modes = ("physical",)
    supports_domain_parallel = False
    export_policy = ExportPolicy(
        supported=False,
        reason="its patch layout (the points per patch, or the cells of a physical size) is read from the "
               "positions at run time (shapes that depend on values); run it eagerly (Surrogate.from_run, load_model)")

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 3,
        width: int = 64,
        depth: int = 4,
        n_heads: int = 4,
        mlp_ratio: int = 2,
        ball_mode: str | None = None,
        n_patches: int | None = None,
        patch_diameter: float | None = None,
        max_patches: int = 512,
    ) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels), ("width", width),
                            ("depth", depth), ("spatial_dims", spatial_dims), ("mlp_ratio", mlp_ratio),
                            ("n_heads", n_heads), ("max_patches", max_patches)):
            check_positive_int(name, value)
        check_heads("width", width, n_heads)
        self.ball_mode = resolve_ball_mode(ball_mode, n_patches is not None, BALL_MODES, default="physical")
        if self.ball_mode == "points":
            if patch_diameter is not None:
                raise ValueError(f"patch_diameter: expected None with ball_mode='points' (point-count patches), "
                                 f"got {patch_diameter!r}")
            n_patches = check_positive_int("n_patches", 32 if n_patches is None else n_patches)
        else:
            if n_patches is not None:
                raise ValueError(f"n_patches: expected None with ball_mode='physical' (patches set by "
                                 f"patch_diameter), got {n_patches!r}")
            if patch_diameter is None:  # 64 patches in the unit square, 256 in the unit cube (cost: module docstring)
                patch_diameter = 0.25 if spatial_dims <= 2 else 0.32
            patch_diameter = check_positive_float("patch_diameter", patch_diameter)
        self.n_patches, self.patch_diameter, self.max_patches = n_patches, patch_diameter, max_patches
        self._set_io(in_channels, out_channels, spatial_dims, None)
        self.embed = nn.Sequential(nn.Linear(in_channels + spatial_dims, 2 * width), nn.GELU(),
                                   nn.Linear(2 * width, width))
        self.blocks = nn.ModuleList(MSPTBlock(width, n_heads, mlp_ratio) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, out_channels)
        self._init_published()
        self.placeholder = nn.Parameter(torch.rand(width) / width)

    def _init_published(self) -> None:
        """Linear ``trunc_normal(0.02)`` and zero bias, LayerNorm 1 and 0; the attention's input projection
        ``xavier_uniform`` (``nn.MultiheadAttention``'s own, which the published model-level init does not reach)."""
        for mod in self.modules():
            if isinstance(mod, nn.Linear):
                nn.init.trunc_normal_(mod.weight, std=0.02)
                nn.init.zeros_(mod.bias)
            elif isinstance(mod, nn.LayerNorm):
                nn.init.ones_(mod.weight)
                nn.init.zeros_(mod.bias)
        for blk in self.blocks:
            nn.init.xavier_uniform_(blk.attn.in_proj.weight)

    @property
    def export_unsupported_reason(self) -> str | None:
        return self.export_policy.reason

    def domain_parallel_refusal(self) -> str | None:
        return "every patch attends to the global tokens of all patches of the cloud"

    def _build_geometry(
        self, pos: torch.Tensor, mask: torch.Tensor | None = None, weights: torch.Tensor | None = None
    ) -> ErwinGeometry:
        """The patch layout of ``pos`` (a few host syncs: the capacity is a shape); pass it as ``trees=``."""
        if self.ball_mode == "points":
            tree = count_patches(pos, mask, self.n_patches)
        else:
            tree = physical_patches(pos, mask, self.patch_diameter, self.max_patches)
        w = tree.mask.to(pos.dtype) if weights is None else tree.values_to_tree(weights.to(pos.dtype))
        return ErwinGeometry(tree, [LevelGeometry(tree.pos, tree.mask, w)])

    def _trunk(self, h: torch.Tensor, geo: ErwinGeometry) -> torch.Tensor:
        """The blocks on the embedded features in patch order."""
        lvl, m = geo.levels[0], geo.tree.ball_size
        mask = lvl.mask
        w = torch.where(mask, lvl.weights, torch.zeros((), dtype=lvl.weights.dtype, device=mask.device))
        b, p = w.shape
        if self.ball_mode == "points":  # weights relative to the cloud's mean: a point key weighs as a global key
            n_real = mask.sum(1, keepdim=True).clamp_min(1).to(w.dtype)
            w = w / (w.sum(1, keepdim=True) / n_real)
        mass = w.view(b, p // m, m).sum(2)
        ninf = torch.full((), float("-inf"), dtype=h.dtype, device=h.device)
        point_logw = torch.where(w > 0, w.to(h.dtype).log(), ninf)
        if self.ball_mode == "physical":  # global keys weigh their patch's mass; copies average by mass
            global_logw = torch.where(mass > 0, mass.to(h.dtype).log(), ninf)
            copy_w = mass / mass.sum(1, keepdim=True)
        else:  # published: every (non-empty) patch's token counts once (as one point), copies by plain mean
            global_logw = torch.where(mass > 0, torch.zeros((), dtype=h.dtype, device=h.device), ninf)
            used = (mass > 0).to(mass.dtype)
            copy_w = used / used.sum(1, keepdim=True)
        zero = torch.zeros((), dtype=h.dtype, device=h.device)
        h = torch.where(mask[..., None], h + self.placeholder, zero)
        g = h.new_zeros(b, p // m, h.shape[-1])
        for blk in self.blocks:
            h, g = blk(h, g, m, w, point_logw, global_logw, copy_w)
            h = torch.where(mask[..., None], h, zero)
        return h
