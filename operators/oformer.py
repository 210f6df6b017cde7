"""OFormer, the Operator Transformer (Li, Meidani & Barati Farimani, TMLR 2023, arXiv 2205.13671), quadrature-weighted.

We follow the authors' code (BaratiLab/OFormer, ``uniform_grids/nn_module``: ``SpatialEncoder2D`` and
``PointWiseDecoder2DSimple``, the steady Darcy model); OFormer is not in the Neural-Solver-Library.

Architecture, for an input ``a`` at points ``x_j`` with quadrature weights ``w_j`` (``Σ_j w_j = 1``)::

    encoder  h = Lin([a, x])                                         (no bias)
             per layer l:  h <- LN1(h);  h <- h + GA_l(h, x);  h <- LN2(h);  h <- h + GeGLU-FFN(h)
                           (as published, the skip carries the normalised stream)
             z = Lin(h)                                              (C_e -> C_z, no bias)
    decoder  e = Lin(GELU(Lin([sin, cos](2π x_q B))))                query embedding, coordinates only (no bias)
             e <- e + CA(e, z; x_q, x)
             e <- e + GeGLU-FFN(e)                                   GeGLU: Lin(GELU(g) ⊙ a), [g, a] = Lin(e)
             u(x_q) = Lin(GELU(Lin(GELU(Lin([e, x_q])))))             C_z + d -> C_z -> C_z/2 -> C_out

Galerkin-type attention, per head of width ``d`` (``q, k, v`` Linear without bias, heads mixed by a Linear)::

    k <- IN(k), v <- IN(v)      "instance norm" over the d features of EACH point (non-affine, eps 1e-5), as in
                                the authors' code (InstanceNorm1d on a (B·H, N, d) tensor): a pointwise map,
                                not a domain statistic, so it needs no weights
    q, k <- RoPE(q, x), RoPE(k, x)
    (GA h)(x_i) = ∫ q(x_i) k(y)ᵀ v(y) dμ(y)  ≈  q_i Σ_j w_j k_jᵀ v_j        (d × d, no softmax)

computed by :func:`sciattn.galerkin_attention` (the Galerkin family's functional, with its backends).

The published code divides ``kᵀv`` by the point count (``w_j = 1/N``, Pattern A); here ``w`` are the grid's cell
volumes or the given point weights, zero on padding, so the layer is the same quadrature on any mesh. The
cross-attention weights the *source* (key/value) points; the queries need none. neuraloperator's port instead
multiplies the weights onto the output rows along the query axis after the contraction (correct only for a
scalar ``1/N``); we do not follow it. Measured (``python -m benchmarks run refinement --set operator='"oformer"'``,
defaults at initialisation, nested graded grids ``(i/n)³``, rows in ``benchmarks/results/refinement.jsonl``): the
difference to the continuum value falls 1.6e-3 → 3.6e-4 → 8.8e-5 → 2.2e-5 from 16 to 128 nodes per axis with the
weights, while the published ``1/N`` average keeps a 3.4e-2 → 3.6e-2 relative bias.

Rotary embedding (``RoPE``): the head width is split into ``spatial_dims`` blocks of ``m`` channels (even;
leftover channels unrotated); block ``a`` rotates channel pairs ``(c, c + m/2)`` by ``θ_k = s · x_a · ω_k`` with
``ω_k = 10000^{-2k/m}``. The published encoder uses ``s_l = res·[res, res/4, 1, …]`` (``min_freq = 1/res``), up
to ``res²`` radians per unit length: a kernel that oscillates faster than coarse grids resolve. Measured at
initialisation with ``res = 64`` (``python -m benchmarks run oformer_rope_refinement``, the registry convergence metric
against 256²): the first layer's attention term differs by 1.6e-1 at 32² and still 1.6e-1 at 64² (no convergence
until 128², 6.1e-3), against 1.3e-2 / 5.4e-3 / 1.7e-3 with our default ``rope_scales`` ``[16, 4, 1, …]``. At
initialisation the attention terms are small beside the pointwise paths, so the whole output converges in both
cases (2.6e-2 / 1.1e-2 / 3.7e-3); set ``rope_scales`` for the published frequencies.

Initialisation of the query projections as published: per head orthogonal with gain ``1/d``, plus ``I/d`` when
``d = C`` (the diagonal needs a square block); keys, values and the rest keep PyTorch defaults. Dropout
(0.05 upstream) is not implemented.

Shapes:
    grid input: ``x`` ``(B, C_in, *spatial)`` with ``spatial_dims`` axes -> ``(B, C_out, *spatial)``;
    point input: ``x`` ``(B, N, C_in)`` with ``pos`` ``(B, N, d)``, optional ``weights`` ``(B, N)`` and
    ``mask`` ``(B, N)`` (True at real points) -> ``(B, N, C_out)``, zeros on padding. The decoder's queries are
    the input points, or ``query_pos`` ``(B, M, d)`` (with either input kind) -> ``(B, M, C_out)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from sciattn import galerkin_attention
from sciattn._checks import check_choice, check_dim, check_finite, check_positive_int, check_rank

from ._token_inputs import grid_tokens, point_tokens, to_grid, zero_padding
from .contract import Operator
from .registry import register_operator

__all__ = ["OFormer", "VARIANTS"]

VARIANTS = ("published", "sciattn_v1")


def rotary(t: torch.Tensor, pos: torch.Tensor, scale: float) -> torch.Tensor:
    """RoPE on ``t`` ``(B, N, H, d)`` at positions ``pos`` ``(B, N, D)``: block ``a`` of ``m = 2⌊d/(2D)⌋``
    channels rotates pairs ``(c, c + m/2)`` by ``scale · pos_a · 10000^{-2k/m}``."""
    n_axes = pos.shape[-1]
    m = 2 * (t.shape[-1] // (2 * n_axes))
    if m == 0:
        return t
    half = m // 2
    freq = 10000.0 ** (-torch.arange(half, dtype=t.dtype, device=t.device) / half)
    parts = []
    for a in range(n_axes):
        blk = t[..., a * m:(a + 1) * m]
        theta = (scale * pos[..., a])[:, :, None, None] * freq
        x1, x2 = blk[..., :half], blk[..., half:]
        cos, sin = torch.cos(theta), torch.sin(theta)
        parts += [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    parts.append(t[..., n_axes * m:])
    return torch.cat(parts, dim=-1)


def _point_norm(t: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """OFormer's "instance norm": zero mean, unit variance over the last axis (each point's head features)."""
    mu = t.mean(dim=-1, keepdim=True)
    return (t - mu) / torch.sqrt((t - mu).square().mean(dim=-1, keepdim=True) + eps)


class _GalerkinAttention(nn.Module):
    """``q_i Σ_j w_j IN(k_j)ᵀ IN(v_j)`` per head, with RoPE on ``q`` and ``k``; ``w`` ``(B, N_k)`` sums to one."""

    def __init__(self, q_width: int, kv_width: int, n_heads: int, dim_head: int, rope_scale: float,
                 project_out: bool = True):
        super().__init__()
        self.n_heads, self.dim_head, self.rope_scale = n_heads, dim_head, rope_scale
        inner = n_heads * dim_head
        self.q = nn.Linear(q_width, inner, bias=False)
        self.k = nn.Linear(kv_width, inner, bias=False)
        self.v = nn.Linear(kv_width, inner, bias=False)
        # published: no output Linear when one head already has the stream's width
        self.out = nn.Linear(inner, q_width) if project_out else nn.Identity()
        with torch.no_grad():
            for h in range(n_heads):
                blk = self.q.weight[h * dim_head:(h + 1) * dim_head]
                nn.init.orthogonal_(blk, gain=1 / dim_head)
                if dim_head == q_width:
                    blk += torch.eye(dim_head) / dim_head

    def forward(self, h, pos_q, z, pos_k, w):
        b, nq, _ = h.shape
        nk = z.shape[1]
        q = self.q(h).reshape(b, nq, self.n_heads, self.dim_head)
        k = _point_norm(self.k(z).reshape(b, nk, self.n_heads, self.dim_head))
        v = _point_norm(self.v(z).reshape(b, nk, self.n_heads, self.dim_head))
        q, k = rotary(q, pos_q, self.rope_scale), rotary(k, pos_k, self.rope_scale)
        # the family's functional (its backends and weight checks): heads first, (B, H, N, d)
        z = galerkin_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), weights=w)
        return self.out(z.transpose(1, 2).reshape(b, nq, -1))


def _project_out(published: bool, n_heads: int, dim_head: int, width: int) -> bool:
    return not (published and n_heads == 1 and dim_head == width)


class _EncoderLayer(nn.Module):
    def __init__(self, width, n_heads, dim_head, dim_ff, rope_scale, published=True):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = _GalerkinAttention(width, width, n_heads, dim_head, rope_scale,
                                       _project_out(published, n_heads, dim_head, width))
        if published:  # the published FeedForward: GeGLU
            self.ffn = _GeGLU(width, dim_ff, gelu_first=True)
        else:
            self.ffn = nn.Sequential(nn.Linear(width, dim_ff), nn.GELU(), nn.Linear(dim_ff, width))

    def forward(self, h, pos, w):
        h = self.ln1(h)
        h = h + self.attn(h, pos, h, pos, w)
        h = self.ln2(h)
        return h + self.ffn(h)


class _GeGLU(nn.Module):
    """``Lin(F -> C)(GELU(g) ⊙ a)`` with ``[g, a] = Lin(C -> 2F)(e)`` (``gelu_first``: the published ``GeGELU``,
    GELU on the first half), or ``[a, g]`` (GELU on the second half, ``"sciattn_v1"``)."""

    def __init__(self, width, hidden, gelu_first: bool = False):
        super().__init__()
        self.gelu_first = gelu_first
        self.inp, self.out = nn.Linear(width, 2 * hidden), nn.Linear(hidden, width)

    def forward(self, e):
        a, g = self.inp(e).chunk(2, dim=-1)
        if self.gelu_first:
            a, g = g, a
        return self.out(a * nn.functional.gelu(g))


@register_operator("oformer")
class OFormer(Operator):
    """OFormer neural operator (encoder-decoder; grids and point sets).

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        spatial_dims: dimension ``d`` of the domain (1, 2 or 3).
        width: encoder width ``C_e``.
        n_layers: encoder layers.
        n_heads: attention heads (encoder and decoder).
        dim_head: width of each head.
        dim_ff: hidden width of the FFNs (default ``2·width`` in the encoder, ``2·latent_width`` in the decoder).
        latent_width: width ``C_z`` of the encoding and of the decoder.
        rope_scales: per-layer coordinate scale ``s_l`` of the encoder's RoPE (a list with one entry per layer,
            or ``None`` for ``[16, 4, 1, 1, …]``).
        decoder_rope_scale: coordinate scale of the decoder's RoPE.
        rff_features: random Fourier features of the query embedding (even).
        rff_sigma: standard deviation of their frequencies (cycles per unit length).
        variant: ``"published"`` (default), the authors' Darcy model (``SpatialEncoder2D`` +
            ``PointWiseDecoder2DSimple``): GeGLU FFNs in the encoder and decoder (hidden ``dim_ff``, default the
            stream's width), no bias in the lift, the latent projection, the query embedding and the first two
            head layers, a 3-layer head ``C_z + d -> C_z -> C_z/2 -> C_out``, ``[sin, cos]`` query features
            (``rff_features`` default ``latent_width``) and heads of the stream's width (``dim_head`` default
            ``width`` in the encoder, ``latent_width`` in the decoder); ``"sciattn_v1"``: a GELU encoder FFN, biased
            Linears, a 2-layer head, 32 ``[cos, sin]`` features and ``dim_head`` 32, the layout sciattn shipped
            before issue 38 (a checkpoint whose config has no ``variant`` key loads as it).
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
        n_layers: int = 4,
        n_heads: int = 4,
        dim_head: int | None = None,
        dim_ff: int | None = None,
        latent_width: int = 64,
        rope_scales: list[float] | None = None,
        decoder_rope_scale: float = 16.0,
        rff_features: int | None = None,
        rff_sigma: float = 0.5,
        variant: str = "published",
    ) -> None:
        super().__init__()
        check_choice("variant", variant, VARIANTS)
        self.variant = variant
        published = variant == "published"
        enc_head = dim_head or (width if published else 32)
        dec_head = dim_head or (latent_width if published else 32)
        rff_features = rff_features or (latent_width + latent_width % 2 if published else 32)
        dim_head = enc_head
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("width", width),
                            ("n_layers", n_layers), ("n_heads", n_heads), ("dim_head", dim_head),
                            ("latent_width", latent_width), ("rff_features", rff_features)]:
            check_positive_int(name, value)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        if rff_features % 2:
            raise ValueError(f"rff_features: expected an even number (cosines and sines), got {rff_features}")
        if rope_scales is None:
            rope_scales = ([16.0, 4.0] + [1.0] * n_layers)[:n_layers]
        if not isinstance(rope_scales, (list, tuple)) or len(rope_scales) != n_layers or not all(
                isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) for s in rope_scales):
            raise ValueError(f"rope_scales: expected {n_layers} finite numbers (one per layer) or None, got {rope_scales!r}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        ff = dim_ff or (width if published else 2 * width)
        bias = not published
        self.lift = nn.Linear(in_channels + spatial_dims, width, bias=bias)
        self.layers = nn.ModuleList(_EncoderLayer(width, n_heads, enc_head, ff, float(s), published)
                                    for s in rope_scales)
        self.to_latent = nn.Linear(width, latent_width, bias=bias)
        g = torch.Generator().manual_seed(0)
        self.register_buffer("rff_freqs", torch.randn(spatial_dims, rff_features // 2, generator=g) * rff_sigma)
        self.query_embed = nn.Sequential(nn.Linear(rff_features, latent_width, bias=bias), nn.GELU(),
                                         nn.Linear(latent_width, latent_width, bias=bias))
        self.cross = _GalerkinAttention(latent_width, latent_width, n_heads, dec_head, float(decoder_rope_scale),
                                        _project_out(published, n_heads, dec_head, latent_width))
        self.decoder_ffn = _GeGLU(latent_width, dim_ff or (latent_width if published else 2 * latent_width),
                                  gelu_first=published)
        if published:  # PointWiseDecoder2DSimple.to_out
            self.head = nn.Sequential(nn.Linear(latent_width + spatial_dims, latent_width, bias=False), nn.GELU(),
                                      nn.Linear(latent_width, max(1, latent_width // 2), bias=False), nn.GELU(),
                                      nn.Linear(max(1, latent_width // 2), out_channels))
        else:
            self.head = nn.Sequential(nn.Linear(latent_width + spatial_dims, latent_width), nn.GELU(),
                                      nn.Linear(latent_width, out_channels))

    def encode(self, a: torch.Tensor, pos: torch.Tensor, w: torch.Tensor, query_pos=None) -> torch.Tensor:
        """Tokens ``(B, N, C_in)``, positions ``(B, N, d)``, weights ``(B, N)`` summing to one, queries ``(B, M, d)``
        (default: ``pos``) -> ``(B, M, C_out)``."""
        qpos = pos if query_pos is None else query_pos
        h = self.lift(torch.cat([a, pos], dim=-1))
        for layer in self.layers:
            h = layer(h, pos, w)
        z = self.to_latent(h)
        phase = 2 * math.pi * qpos @ self.rff_freqs.to(qpos.dtype)
        pair = [torch.sin(phase), torch.cos(phase)] if self.variant == "published" else [torch.cos(phase),
                                                                                            torch.sin(phase)]
        e = self.query_embed(torch.cat(pair, dim=-1))
        e = e + self.cross(e, qpos, z, pos, w)
        e = e + self.decoder_ffn(e)
        return self.head(torch.cat([e, qpos], dim=-1))

    def forward(self, x, pos=None, weights=None, mask=None, *, query_pos=None, y=None):
        """``query_pos`` ``(B, M, d)``: evaluate the decoder at these points instead (output ``(B, M, C_out)``, no
        masking of the queries). ``y`` is accepted and ignored (neuraloperator's ``Trainer`` calls
        ``model(**sample)``)."""
        del y
        if query_pos is not None:
            check_rank("query_pos", query_pos, 3, f"(B, M, {self.spatial_dims})")
            check_dim("query_pos", query_pos, -1, self.spatial_dims, "coordinates per query point")
            check_dim("query_pos", query_pos, 0, x.shape[0], "samples (the batch of x)")
            check_finite("query_pos", query_pos)
            query_pos = query_pos.to(x.dtype)
        if pos is None:
            return self._forward_grid(x, query_pos)
        return self._forward_points(x, pos, weights, mask, query_pos)

    def _forward_grid(self, x, query_pos=None):
        a, pos, w, grid = grid_tokens(self, x, "OFormer")
        out = self.encode(a, pos, w, query_pos)
        if query_pos is not None:
            return out
        return to_grid(out, self, grid)

    def _forward_points(self, x, pos, weights, mask, query_pos=None):
        x, pos, w, keep = point_tokens(self, x, pos, weights, mask, weights_in_pos_dtype=True)
        out = self.encode(x, pos, w, query_pos)
        return out if query_pos is not None else zero_padding(out, keep)
