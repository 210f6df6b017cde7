"""FactFormer, factorised (axial) attention (Li, Shu & Barati Farimani, NeurIPS 2023, arXiv 2305.17560), on grids.

We follow the authors' code (BaratiLab/FactFormer ``libs/factorization_module.py``, ``libs/attention.py``), not the
Neural-Solver-Library port (NSL replaces the learned low-rank kernel by a softmax over each axis, shares one
per-head Linear for q, k, v and drops RoPE and the GroupNorm: a different layer).

Block (``FABlock``), for a field ``u`` ``(B, n_1, …, n_D, C)`` on a tensor grid with 1-D coordinates ``p^a``
and 1-D quadrature weights ``w^a`` (``Σ_j w^a_j = 1``; cell widths ``1/n_a`` on the uniform grid)::

    u <- LN(u);  V = W_v u  (H heads of width d, no bias);  u' = W_in u  (no bias)
    per axis a:
      φ_a(x_a) = MLP(LN( ∫ W_a u'(x) dx_{≠a} ))           projection onto axis a: the mean over the other axes
                                                          (Σ_l w_l, Pattern A); MLP: Lin(C -> 2C), GeAct
                                                          (GELU(first half) ⊙ second half), Lin(C -> C_l)
      κ_a(x, y) = s · RoPE(q_a(x), x) · RoPE(k_a(y), y)   q_a = W_q φ_a, k_a = W_k φ_a  (d·km channels per head,
                                                          no bias, xavier_uniform gain 0.02); no softmax
    Ṽ(x) = ∫…∫ κ_1(x_1, y_1) … κ_D(x_D, y_D) V(y) dy_1 … dy_D     contracted along axis 1, then 2, then 3:
         ≈ Σ_{j_D} w^D κ_D … Σ_{j_1} w^1 κ_1 V
    out = Lin(GELU(Lin( GroupNorm_H(Ṽ) )))               GroupNorm: per head over all points and its d
                                                          features, non-affine, eps 1e-8, unbiased variance
                                                          (count - 1), as published; Linears without bias

The published kernel is a bare sum over each axis (Pattern C, no ``1/n``; its source comments that a
non-uniform grid would need quadrature weights): its scale grows like ``n_1 · … · n_D`` and only the domain-wise
GroupNorm, itself a uniform mean, hides that. We include the ``1/n`` (the quadrature weights), so the kernel
integral and the normalisation converge separately. GroupNorm is scale-invariant, so on a uniform grid this is
the published layer with its eps scaled by ``N²`` (``N = n_1⋯n_D``): the transcription test checks that equality
(bare sums, eps ``1e-8·N²``) to 1e-10. Where the variance of ``Ṽ`` is not far above eps the published layer's
effective eps (``1e-8/N²`` on our scale) depends on the resolution, and so does its output. At the published
initialisation (q, k xavier with gain 0.02) it is far below eps, and the published block does not converge:
``python -m benchmarks run factformer_kernel_refinement`` (rows in
``benchmarks/results/factformer_kernel_refinement.jsonl``, the registry convergence metric against 256²) measures
0.164 / 0.135 / 0.110 at 32² / 64² / 128² for the published kernel against 0.102 / 0.044 / 0.015 for ours; with q, k redrawn wider (std 0.05) both converge (0.113 / 0.049 /
0.016 and 0.104 / 0.045 / 0.015).

Network: ``u = Lin(a)``; per layer ``u <- u + Lin_l(RFF_l(x))`` (random Fourier features of the coordinates,
each layer its own, re-added every layer as published) and ``u <- FABlock(u) + u``; then a pointwise head
``Lin(GELU(Lin(u)))``. The published Darcy head (a strided convolution branch upsampled to the fixed training
size, then GroupNorm and 1×1 convolutions) cannot run at another resolution, so it is replaced by the
pointwise head. RoPE as published: ``θ_k = x / min_freq · 10000^{-2k/m}`` on pairs ``(c, c + m/2)``,
``min_freq = 1/rope_scale``; the published ``min_freq`` is 1/64, i.e. ``rope_scale=64``.

Cost: ``O(N C² + N Σ_a n_a d)`` per layer, ``O(N^{3/2} d)`` on an ``n × n`` grid.

Shapes: ``x`` ``(B, C_in, *spatial)`` with ``spatial_dims`` axes (1, 2 or 3) -> ``(B, C_out, *spatial)``. Grids
only: the factorisation needs a tensor-product grid.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from sciattn._checks import check_choice, check_positive_int

from ._token_inputs import check_grid_input
from .contract import Operator
from .registry import register_operator

__all__ = ["FactFormer", "VARIANTS"]

VARIANTS = ("published", "sciattn_v1")

_AXES = "xyz"


def _rope_1d(t: torch.Tensor, p: torch.Tensor, scale: float) -> torch.Tensor:
    """``t`` ``(B, n, H, m)`` at 1-D coordinates ``p`` ``(n,)``: pairs ``(c, c + m/2)`` rotated by
    ``scale · p · 10000^{-2k/m}`` (an odd last channel is left as is)."""
    half = t.shape[-1] // 2
    if half == 0:
        return t
    freq = 10000.0 ** (-torch.arange(half, dtype=t.dtype, device=t.device) / half)
    theta = (scale * p)[:, None, None] * freq
    cos, sin = torch.cos(theta), torch.sin(theta)
    x1, x2 = t[..., :half], t[..., half:2 * half]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, t[..., 2 * half:]], dim=-1)


class _GeAct(nn.Module):
    """The published gated activation: ``GELU(first half) ⊙ second half`` of the last axis."""

    def forward(self, x):
        c = x.shape[-1] // 2
        return nn.functional.gelu(x[..., :c]) * x[..., c:]


class _AxisKernel(nn.Module):
    """Projection of ``u'`` onto one axis and the low-rank kernel ``κ_a`` ``(B, H, n_a, n_a)``."""

    def __init__(self, width, latent, n_heads, dim_head, kernel_multiplier, rope_scale, published=True):
        super().__init__()
        self.n_heads, self.rank = n_heads, dim_head * kernel_multiplier
        self.rope_scale = rope_scale
        self.scale = 1.0 / math.sqrt(self.rank) if kernel_multiplier > 4 else 1.0
        self.proj = nn.Linear(width, width, bias=False)
        self.ln = nn.LayerNorm(width)
        if published:  # the reducer MLP([C, C, C_l], GeAct(GELU)) of PoolingReducer
            self.mlp = nn.Sequential(nn.Linear(width, 2 * width), _GeAct(), nn.Linear(width, latent))
        else:
            self.mlp = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, latent))
        self.q = nn.Linear(latent, n_heads * self.rank, bias=False)
        self.k = nn.Linear(latent, n_heads * self.rank, bias=False)
        for lin in (self.q, self.k):
            nn.init.xavier_uniform_(lin.weight, gain=0.02)

    def forward(self, u, axis, coords):
        d = u.dim() - 2
        others = [1 + b for b in range(d) if b != axis]
        h = self.proj(u)
        if others:
            h = h.mean(dim=others)  # uniform grid: Σ_l w_l with w_l = 1/n_l on every other axis
        phi = self.mlp(self.ln(h))  # (B, n_a, C_l)
        b, n = phi.shape[:2]
        q = _rope_1d(self.q(phi).reshape(b, n, self.n_heads, self.rank), coords, self.rope_scale)
        k = _rope_1d(self.k(phi).reshape(b, n, self.n_heads, self.rank), coords, self.rope_scale)
        return self.scale * torch.einsum("bihr,bjhr->bhij", q, k)


class _FABlock(nn.Module):
    def __init__(self, width, latent, n_heads, dim_head, kernel_multiplier, rope_scale, spatial_dims, published=True):
        super().__init__()
        self.n_heads, self.dim_head = n_heads, dim_head
        self.norm_eps = 1e-8  # GroupNorm's eps (the published value), on the quadrature-normalised Ṽ
        self.unbiased = published  # the published GroupNorm divides by (count - 1)
        self.ln = nn.LayerNorm(width)
        self.to_v = nn.Linear(width, n_heads * dim_head, bias=False)
        self.to_in = nn.Linear(width, width, bias=False)
        self.kernels = nn.ModuleList(
            _AxisKernel(width, latent, n_heads, dim_head, kernel_multiplier, rope_scale, published)
            for _ in range(spatial_dims))
        self.out = nn.Sequential(nn.Linear(n_heads * dim_head, width, bias=not published), nn.GELU(),
                                 nn.Linear(width, width, bias=not published))

    def forward(self, u, coords, weights):
        """``u`` ``(B, *n, C)``; ``coords``, ``weights``: per-axis 1-D nodes and weights (each summing to one)."""
        d = u.dim() - 2
        u = self.ln(u)
        v = self.to_v(u).reshape(*u.shape[:-1], self.n_heads, self.dim_head)
        ui = self.to_in(u)
        axes = _AXES[:d]
        for a in range(d):
            kernel = self.kernels[a](ui, a, coords[a]) * weights[a]  # (B, H, n_a, n_a), w_j on the source index
            out_axes = axes[:a] + "i" + axes[a + 1:]
            v = torch.einsum(f"bhi{axes[a]},b{axes}hc->b{out_axes}hc", kernel, v)
        # GroupNorm per head over every point and feature, with the grid's (uniform, product) weights
        dims = tuple(range(1, d + 1)) + (d + 2,)
        mu = v.mean(dim=dims, keepdim=True)
        var = (v - mu).square().mean(dim=dims, keepdim=True)
        if self.unbiased:
            count = math.prod(v.shape[k] for k in dims)
            var = var * (count / max(count - 1, 1))
        v = (v - mu) / torch.sqrt(var + self.norm_eps)
        return self.out(v.flatten(-2))


@register_operator("factformer")
class FactFormer(Operator):
    """FactFormer neural operator on 1-, 2- or 3-D grids.

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        spatial_dims: dimension ``D`` of the grid (1, 2 or 3).
        width: token width ``C``.
        n_layers: number of factorised-attention blocks.
        n_heads: heads ``H``.
        dim_head: head width ``d``.
        latent_width: width ``C_l`` of the axis projections (default ``width``).
        kernel_multiplier: ``km``, the kernel rank is ``d · km`` per head.
        rope_scale: ``1 / min_freq`` of the axial RoPE (published 64).
        rff_features: random Fourier features of the coordinates (even).
        rff_sigma: standard deviation of their frequencies (cycles per unit length).
        variant: ``"published"`` (default), the authors' layer: a ``GeAct`` (gated GELU) reducer MLP, the unbiased
            GroupNorm variance, output Linears without biases, and each layer its own random Fourier features
            ``[sin, cos]`` (``rff_features`` default ``width``, as the Darcy script's ``dim // 2`` frequencies);
            ``"sciattn_v1"``: a GELU reducer MLP, the biased variance, biased output Linears and one set of
            ``[cos, sin]`` features shared by all layers (default 32), the layout sciattn shipped before issue 38
            (a checkpoint whose config has no ``variant`` key loads as it).
    """

    # a config stored without ``variant`` was trained with sciattn's earlier layout (MLP lift and projection, ...)
    legacy_defaults = {"variant": "sciattn_v1"}

    input_kind = "grid"

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        width: int = 64,
        n_layers: int = 3,
        n_heads: int = 4,
        dim_head: int = 16,
        latent_width: int | None = None,
        kernel_multiplier: int = 2,
        rope_scale: float = 64.0,
        rff_features: int | None = None,
        rff_sigma: float = 1.0,
        variant: str = "published",
    ) -> None:
        super().__init__()
        check_choice("variant", variant, VARIANTS)
        self.variant = variant
        published = variant == "published"
        latent_width = latent_width or width
        rff_features = rff_features or (width + width % 2 if published else 32)
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("width", width),
                            ("n_layers", n_layers), ("n_heads", n_heads), ("dim_head", dim_head),
                            ("latent_width", latent_width), ("kernel_multiplier", kernel_multiplier),
                            ("rff_features", rff_features)]:
            check_positive_int(name, value)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        if rff_features % 2:
            raise ValueError(f"rff_features: expected an even number (cosines and sines), got {rff_features}")
        if isinstance(rope_scale, bool) or not isinstance(rope_scale, (int, float)) or not math.isfinite(rope_scale):
            raise ValueError(f"rope_scale: expected a finite number, got {rope_scale!r}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.lift = nn.Linear(in_channels, width)
        g = torch.Generator().manual_seed(0)
        n_sets = n_layers if published else 1  # published: each layer draws its own frequencies
        freqs = torch.randn(n_sets, spatial_dims, rff_features // 2, generator=g) * rff_sigma
        self.register_buffer("rff_freqs", freqs if published else freqs[0])
        self.pos_lifts = nn.ModuleList(nn.Linear(rff_features, width) for _ in range(n_layers))
        self.blocks = nn.ModuleList(
            _FABlock(width, latent_width, n_heads, dim_head, kernel_multiplier, float(rope_scale), spatial_dims,
                     published)
            for _ in range(n_layers)
        )
        self.head = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, out_channels))

    def forward(self, x, *, y=None):
        """``y`` is accepted and ignored (neuraloperator's ``Trainer`` calls ``model(**sample)``)."""
        del y
        grid = check_grid_input(self, x, "FactFormer")
        nodes, _ = grid.nodes_and_weights(x.dtype, x.device)
        coords, weights = [], []
        for n in grid.shape:
            coords.append(torch.arange(n, dtype=x.dtype, device=x.device) / n)
            weights.append(torch.ones(n, dtype=x.dtype, device=x.device) / n)
        u = self.lift(x.movedim(1, -1))
        freqs = self.rff_freqs.to(x.dtype)
        for layer, (pos_lift, block) in enumerate(zip(self.pos_lifts, self.blocks)):
            if self.variant == "published" or layer == 0:
                phase = 2 * math.pi * nodes @ (freqs[layer] if self.variant == "published" else freqs)
                pair = [torch.sin(phase), torch.cos(phase)] if self.variant == "published" else [
                    torch.cos(phase), torch.sin(phase)]
                rff = torch.cat(pair, dim=-1).reshape(*grid.shape, -1)
            u = u + pos_lift(rff)
            u = block(u, coords, weights) + u
        return self.head(u).movedim(-1, 1)
