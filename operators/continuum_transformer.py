"""Transformer neural operator with continuum attention (Calvello, Kovachki, Levine, Stuart, arXiv 2406.06486).

We follow the authors' code (EdoardoCalvello/TransformerNeuralOperators @ a546ae0: ``models/TNO/TNO_pytorch.py``,
``SimpleEncoder`` with ``append_position_to_x=True`` and no positional encoding, the setting of every
``paper_run_scripts``; the layers of ``models/transformer_custom.py``: ``TransformerEncoderLayer``,
``MultiHeadAttention``, ``ScaledDotProductAttention``).

Continuum attention is an integral operator on functions ``h: D -> R^c`` with a probability measure ``ν`` on ``D``::

    A(h)(x) = ∫_D exp(<Q h(x), K h(y)> / sqrt(d_k)) V h(y) ν(dy) / ∫_D exp(<Q h(x), K h(s)> / sqrt(d_k)) ν(ds)
            ≈ Σ_j w_j e^{s_ij} v_j / Σ_j w_j e^{s_ij}                     (per head; then concatenated, W_o)

computed by :func:`sciattn.weighted_softmax_attention` with the quadrature weights ``w`` as the logit bias
``log w_j``. The published code takes the trapezoid rule over the sample times in 1-D (``dx_s = |t_{s+1} - t_s|``,
``α = e / Σ_s ½ dx_s (e_s + e_{s+1})``, ``out = ½ Σ_s dx_s (α_s v_s + α_{s+1} v_{s+1})``: exactly the weighted
softmax with trapezoid weights) and the uniform Monte Carlo rule ``1/N`` (plain softmax) otherwise; here every
input carries its own weights: a grid's rule (``rule``), or a point set's ``weights``. The network::

    h = Lin([a(x), x]);   per layer (always post-norm in the published 1-D layer):
    h <- LN1(h + A(h));   h <- LN2(h + FFN(h)),   FFN = Lin(act(Lin(h)));   u = Lin(h)

Differences from the published code (docs page ``docs/operators/continuum_transformer.md``): no dropout on the
attention weights (the published layer drops 10% of them in training whatever its ``dropout`` argument, after the
quadrature normalisation, so the weights no longer integrate to one; evaluation is unchanged), and ``dropout`` (on
the two residual branches, published 1e-4 in the run scripts) is 0 by default.

Shapes:
    grid input: ``x`` ``(B, C_in, *spatial)`` with ``spatial_dims`` axes -> ``(B, C_out, *spatial)``;
    point input: ``x`` ``(B, N, C_in)`` with ``pos`` ``(B, N, d)``, optional ``weights`` and ``mask`` ``(B, N)``
    -> ``(B, N, C_out)``, zeros on padding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sciattn import weighted_softmax_attention
from sciattn._checks import check_choice, check_heads, check_positive_int
from sciattn.domain import Grid

from ._token_inputs import check_grid_input, point_tokens, to_grid, zero_padding
from .contract import Operator
from .registry import register_operator

__all__ = ["ACTIVATIONS", "ContinuumAttention", "ContinuumTransformer", "GRID_RULES", "PostNormBlock"]

#: quadrature rules of grid inputs: ``uniform`` (the grid's own nodes ``a + (b-a) i/n``, weights ``1/N``; the
#: published plain softmax) and ``trapezoid`` (nodes ``a + (b-a) i/(n-1)``, ends halved; the published 1-D rule)
GRID_RULES = ("uniform", "trapezoid")
ACTIVATIONS = ("gelu", "relu")


def check_encoder_args(*, activation: str, dropout: float, width: int, n_heads: int, **sizes: int) -> None:
    """The checks of the encoder's arguments shared by the continuum operators: positive ``sizes`` and ``width``,
    ``n_heads`` dividing ``width``, an activation of :data:`ACTIVATIONS`, ``0 <= dropout < 1``."""
    for name, value in [*sizes.items(), ("width", width), ("n_heads", n_heads)]:
        check_positive_int(name, value)
    check_heads("width", width, n_heads)
    check_choice("activation", activation, ACTIVATIONS)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"dropout: expected a number in [0, 1), got {dropout!r}")


class ContinuumAttention(nn.Module):
    """Published ``MultiHeadAttention``: ``W_o [A_1(h), ..., A_H(h)]`` with ``q, k, v = W_{q,k,v} h`` split into
    ``H`` heads of ``width / H`` channels, each head the quadrature-weighted softmax of the module docstring."""

    def __init__(self, width: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))

    def forward(self, h: torch.Tensor, w: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``h`` ``(B, N, width)``, ``w`` ``(B, N)`` -> ``(B, N, width)``."""
        b, n, c = h.shape
        q, k, v = (lin(h).reshape(b, n, self.n_heads, c // self.n_heads).transpose(1, 2)
                   for lin in (self.q, self.k, self.v))
        z = weighted_softmax_attention(q, k, v, weights=w, mask=mask)  # scale 1/sqrt(width / H), as published
        return self.o(z.transpose(1, 2).reshape(b, n, c))


class PostNormBlock(nn.Module):
    """A post-norm encoder layer around ``attn``: ``h <- LN1(h + attn(h, ...)); h <- LN2(h + FFN(h))``, ``FFN =
    Lin(act(Lin))``: the published 1-D ``TransformerEncoderLayer`` (post-norm whatever its ``norm_first``; no dropout
    inside the FFN) and, with ``ffn_dropout``, ``TransformerEncoderLayer_ViTNO`` at ``norm_first=False``."""

    def __init__(self, attn: nn.Module, width, dim_ff, activation, dropout, norm_eps, ffn_dropout=False):
        super().__init__()
        self.attn = attn
        self.ln1, self.ln2 = nn.LayerNorm(width, eps=norm_eps), nn.LayerNorm(width, eps=norm_eps)
        self.fc1, self.fc2 = nn.Linear(width, dim_ff), nn.Linear(dim_ff, width)
        self.act = F.gelu if activation == "gelu" else F.relu
        self.drop = nn.Dropout(dropout)
        self.ffn_drop = nn.Dropout(dropout if ffn_dropout else 0.0)

    def forward(self, h, *args):
        h = self.ln1(h + self.drop(self.attn(h, *args)))
        return self.ln2(h + self.drop(self.fc2(self.ffn_drop(self.act(self.fc1(h))))))


@register_operator("continuum_transformer")
class ContinuumTransformer(Operator):
    """Transformer neural operator (TNO): continuum softmax attention as a quadrature (grids and point sets).

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        spatial_dims: dimension ``d`` of the domain (1, 2 or 3); the coordinates are appended to the input.
        width: ``d_model`` (run scripts 128).
        n_layers: encoder layers (run scripts 6).
        n_heads: attention heads (run scripts 8), dividing ``width``.
        dim_ff: hidden width of the feed-forward networks (run scripts 128).
        activation: ``"gelu"`` (run scripts) or ``"relu"`` (the class default).
        rule: quadrature of grid inputs, one of :data:`GRID_RULES` (``uniform`` by default).
        dropout: dropout on the attention and feed-forward branches (run scripts 1e-4; 0 by default, so that
            training-mode outputs are deterministic and independent of the batch).
        norm_eps: LayerNorm epsilon.
    """

    input_kind = "grid"

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        width: int = 32,
        n_layers: int = 2,
        n_heads: int = 4,
        dim_ff: int = 64,
        activation: str = "gelu",
        rule: str = "uniform",
        dropout: float = 0.0,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        check_encoder_args(in_channels=in_channels, out_channels=out_channels, width=width, n_layers=n_layers,
                           n_heads=n_heads, dim_ff=dim_ff, activation=activation, dropout=dropout)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        check_choice("rule", rule, GRID_RULES)
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.rule = rule
        self.lift = nn.Linear(in_channels + spatial_dims, width)  # published linear_in_position on [a, x]
        self.blocks = nn.ModuleList(PostNormBlock(ContinuumAttention(width, n_heads), width, dim_ff, activation,
                                                  dropout, norm_eps) for _ in range(n_layers))
        self.head = nn.Linear(width, out_channels)

    def encode(self, a: torch.Tensor, pos: torch.Tensor, w: torch.Tensor, mask=None) -> torch.Tensor:
        """Tokens ``(B, N, C_in)`` at ``pos`` ``(B, N, d)`` with weights ``w`` ``(B, N)`` -> ``(B, N, C_out)``."""
        h = self.lift(torch.cat([a, pos], dim=-1))
        for block in self.blocks:
            h = block(h, w, mask)
        return self.head(h)

    def forward(self, x, pos=None, weights=None, mask=None, *, y=None):
        """``y`` is accepted and ignored (neuraloperator's ``Trainer`` calls ``model(**sample)``)."""
        del y
        if pos is None:
            grid = Grid(check_grid_input(self, x, "ContinuumTransformer").shape, rule=self.rule)
            nodes, w = grid.nodes_and_weights(x.dtype, x.device)
            b = x.shape[0]
            out = self.encode(x.flatten(2).transpose(1, 2), nodes.expand(b, *nodes.shape),
                              (w / w.sum()).expand(b, -1))
            return to_grid(out, self, grid)
        a, p, w, keep = point_tokens(self, x, pos, weights, mask)
        return zero_padding(self.encode(a, p, w, mask), keep)
