"""A transformer neural operator whose attention is Fastmax (FAST, Gerami et al., arXiv 2402.07901; code
armingerami/fastmax @ 28eb11a), on grids and point sets.

FAST is a generic attention (the paper tests MNIST and Long Range Arena; its code ships a PyTorch forward and CUDA
kernels, and a litgpt ``model.py`` that drops it into a pre-norm GPT block). We put it in the same pre-norm block,
acting on the points of the domain::

    h_0 = Lift([a(x), x])                                             pointwise Linear
    h  <- h + O(Fastmax(Q LN1(h), K LN1(h), V LN1(h)))                per head, then the output projection O
    h  <- h + FFN(LN2(h))                                             Linear -> GELU -> Linear
    u   = Proj(LN(h_L))                                               pointwise Linear

    Fastmax(q, k, v)(x_i) = Σ_j w_j f(q_i·k_j) v_j / Σ_j w_j f(q_i·k_j),   f(s) = a0 + a1 s + a2 s²   (1, 1, 1/2)

computed by :func:`sciattn.multipole.fastmax_attention` from its moments (linear in the number of points), with the
quadrature weights ``w`` of the grid (normalised cell volumes) or of the point set in the numerator and the
normalising denominator alike; ``q`` and ``k`` are scaled by the published ``normalize`` rule (``"max"``: the
largest token norm per sample and head becomes ``lim``; ``"token"``: every token norm). A point set given without
``weights`` gets the published equal-weight average. No dropout by default (the published feature-map dropout is
not carried over). Docs page: ``docs/operators/fastmax_transformer.md``.

Shapes:
    grid input: ``x`` ``(B, C_in, *spatial)`` with ``spatial_dims`` axes -> ``(B, C_out, *spatial)``;
    point input: ``x`` ``(B, N, C_in)`` with ``pos`` ``(B, N, d)``, optional ``weights`` and ``mask`` ``(B, N)``
    -> ``(B, N, C_out)``, zeros on padding.
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn._checks import check_heads, check_positive_int
from sciattn.multipole.fastmax import check_fastmax_options, fastmax_attention

from ._token_inputs import grid_or_point_forward
from .contract import Operator
from .registry import register_operator

__all__ = ["FastmaxTransformer"]


class _Block(nn.Module):
    """Pre-norm block: Fastmax attention with an output projection, then a GELU feed-forward network."""

    def __init__(self, width, n_heads, dim_ff, dropout, norm_eps, kernel):
        super().__init__()
        self.n_heads, self.kernel = n_heads, kernel
        self.ln1, self.ln2 = nn.LayerNorm(width, eps=norm_eps), nn.LayerNorm(width, eps=norm_eps)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.ffn = nn.Sequential(nn.Linear(width, dim_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(dim_ff, width))
        self.drop = nn.Dropout(dropout)

    def forward(self, h, w, mask):
        b, n, c = h.shape
        q, k, v = self.qkv(self.ln1(h)).reshape(b, n, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        z = fastmax_attention(q, k, v, weights=w, mask=mask, **self.kernel)  # (B, H, N, c/H)
        h = h + self.drop(self.out(z.transpose(1, 2).reshape(b, n, c)))
        return h + self.drop(self.ffn(self.ln2(h)))


@register_operator("fastmax_transformer")
class FastmaxTransformer(Operator):
    """Transformer neural operator with Fastmax attention (grids and point sets).

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        spatial_dims: dimension ``d`` of the domain (1, 2 or 3).
        width: token width.
        n_layers: transformer blocks.
        n_heads: attention heads (``width / n_heads`` features per head; the moments hold ``D² (D + 1)`` numbers
            per head for order 2).
        dim_ff: hidden width of the feed-forward networks (default ``2 width``).
        order: Taylor order of the kernel, 1 or 2 (published ``p``, 2).
        coefficients: ``(a0, a1[, a2])`` (published ``(1, 1, 0.5)``; ``None``: those).
        normalize: ``"max"`` (published ``normalize=True``), ``"token"`` or ``None`` (no scaling: the published
            ``normalize=False``).
        lim: the radius ``normalize`` scales ``q`` and ``k`` to (published 1).
        dropout: dropout after the attention and in the feed-forward networks (0: deterministic training outputs).
        norm_eps: LayerNorm epsilon.
    """

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
        dim_ff: int | None = None,
        order: int = 2,
        coefficients: list[float] | None = None,
        normalize: str | None = "max",
        lim: float = 1.0,
        dropout: float = 0.0,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("width", width),
                            ("n_layers", n_layers)]:
            check_positive_int(name, value)
        check_heads("width", width, n_heads)
        dim_ff = 2 * width if dim_ff is None else check_positive_int("dim_ff", dim_ff)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        if coefficients is None and order in (1, 2):
            coefficients = [1.0, 1.0, 0.5][: order + 1]
        coeffs = check_fastmax_options(order, coefficients, normalize, lim, 1.0)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ValueError(f"dropout: expected a number in [0, 1), got {dropout!r}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        kernel = dict(order=order, coefficients=coeffs, normalize=normalize, lim=float(lim))
        self.lift = nn.Linear(in_channels + spatial_dims, width)
        self.blocks = nn.ModuleList(_Block(width, n_heads, dim_ff, dropout, norm_eps, kernel) for _ in range(n_layers))
        self.norm = nn.LayerNorm(width, eps=norm_eps)
        self.proj = nn.Linear(width, out_channels)

    def encode(self, a: torch.Tensor, pos: torch.Tensor, w: torch.Tensor, mask=None) -> torch.Tensor:
        """Tokens ``(B, N, C_in)`` at ``pos`` ``(B, N, d)`` with weights ``w`` ``(B, N)`` -> ``(B, N, C_out)``."""
        h = self.lift(torch.cat([a, pos], dim=-1))
        for block in self.blocks:
            h = block(h, w, mask)
        return self.proj(self.norm(h))

    def forward(self, x, pos=None, weights=None, mask=None, *, y=None):
        """``y`` is accepted and ignored (neuraloperator's ``Trainer`` calls ``model(**sample)``)."""
        del y
        return grid_or_point_forward(self, x, pos, weights, mask, "FastmaxTransformer")
