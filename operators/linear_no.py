"""LinearNO (Hu et al., AAAI 2026, arXiv 2511.06294): Physics-Attention recast as linear attention, quadrature-weighted.

Per head of width ``d`` on tokens ``h_i`` with quadrature weights ``w_i`` (``Σ_i w_i = 1``, zero on padding), with
``m = W_in h`` split into heads, ``G = key_ratio`` "slices", the layer discretises

    q_g(x) = softmax_g(W_q m(x) / τ_q)                                 each point's distribution over the G slices
    k_g(y) = exp(W_k m(y) / τ_k)_g / ∫ exp(W_k m(y') / τ_k)_g dμ(y')   a probability density per slice
    (A h)(x) = W_out Σ_g q_g(x) ∫ k_g(y) W_v m(y) dμ(y)

    k~_ig = w_i exp(s_ig) / Σ_j w_j exp(s_jg)      (the quadrature form of the softmax over points)
    out_i = W_out Σ_g q_ig Σ_j k~_jg v_j.

The authors' code (HiPRL/LinearNO ``Standard_PDE_Benchmark/model/LinearAttnNeuralOperator.py``, class ``LinearNO``)
takes the softmax of ``k`` over the points with equal weights. That is the formula above on a uniform grid; on a
non-uniform point set it is the sampling-density-weighted integral, which changes when the sampling changes. Here
``w`` are the grid's cell volumes or the given point weights. Measured (``python -m benchmarks run refinement
--set operator='"linear_no"'``, defaults, nested graded grids, n = 16 … 128): relative distance to the continuum
value 1.7e-3 → 1.5e-5 with the quadrature, 0.16 → 0.18 with the published equal weights. The ``..._temp``
variant's learnable temperatures (per head, init 0.5, clamped to ``[0.01, 1]``) are ``learn_temperature=True``;
without it ``τ = 1``. The ``conv`` variants (3×3 convolution for ``W_in``, a stencil fixed in grid cells, so not
resolution-convergent) are not offered.

Model (``LinearAttentionNeuralOperator``): ``h = MLP([x, a])`` (``Lin(d + C_in -> 2C) - GELU - Lin(2C -> C)``),
pre-LN blocks ``h <- h + A(LN(h))``, ``h <- h + MLP(LN(h))``, and ``u = Lin(LN(h))`` after the last block;
``trunc_normal(0.02)`` init. The published model adds its learnable ``placeholder`` vector only when no input
field is given (``fx=None``), so with an input field it never enters; we omit it. Dropout, time input and
``unified_pos`` are not implemented. Everything but the ``k``-integral is pointwise, so the operator converges under
refinement at the order of the quadrature.

Shapes: as :class:`sciattn.operators.transolver.Transolver` (grids ``(B, C_in, *spatial)``; point sets ``x``
``(B, N, C_in)``, ``pos`` ``(B, N, d)``, ``weights`` and ``mask`` ``(B, N)``).
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn.partial_sums import exp_sums

from .registry import register_operator
from .token_operator import TokenOperator, check_heads, check_sizes, check_spatial_dims, init_published
from .transolver import SliceBlock

__all__ = ["LinearNO", "LinearNOAttention"]


class LinearNOAttention(nn.Module):
    """LinearNO's linear attention on ``h`` ``(B, N, C)`` with weights ``w`` ``(B, N)`` summing to one."""

    def __init__(self, width: int, n_heads: int, key_ratio: int, learn_temperature: bool):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, width // n_heads
        self.inp = nn.Linear(width, width)
        self.q = nn.Linear(self.head_dim, key_ratio, bias=False)
        self.k = nn.Linear(self.head_dim, key_ratio, bias=False)
        self.v = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.out = nn.Linear(width, width)
        self.temperature_q = self.temperature_k = None
        if learn_temperature:
            self.temperature_q = nn.Parameter(torch.full((1, n_heads, 1, 1), 0.5))
            self.temperature_k = nn.Parameter(torch.full((1, n_heads, 1, 1), 0.5))

    def _logits(self, h: torch.Tensor):
        """``(sq, sk, v)``: query and key logits ``(B, H, N, G)`` and values ``(B, H, N, d)``."""
        b, n, _ = h.shape
        m = self.inp(h).reshape(b, n, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, N, d)
        sq, sk, v = self.q(m), self.k(m), self.v(m)
        if self.temperature_q is not None:
            sq = sq / self.temperature_q.clamp(0.01, 1.0)
            sk = sk / self.temperature_k.clamp(0.01, 1.0)
        return sq, sk, v

    def partial(self, h: torch.Tensor, w: torch.Tensor):
        """``((k~ᵀv as ExpSums (B, H, G, d),), sq)``: the weighted softmax of the keys over the points of ``h``."""
        sq, sk, v = self._logits(h)
        return (exp_sums(sk, w[:, None, :, None], v),), sq

    def apply(self, h: torch.Tensor, sums, sq: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = h.shape
        sq = self._logits(h)[0] if sq is None else sq
        out = torch.softmax(sq, dim=-1) @ sums[0].mean                                 # (B, H, N, d)
        return self.out(out.transpose(1, 2).reshape(b, n, c))

    def forward(self, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        sums, sq = self.partial(h, w)
        return self.apply(h, sums, sq)


@register_operator("linear_no")
class LinearNO(TokenOperator):
    """LinearNO neural operator, quadrature-weighted; grids and point sets.

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        spatial_dims: dimension ``d`` of the domain (1, 2 or 3).
        width: token width ``C`` (upstream ``n_hidden``).
        n_layers: number of blocks.
        n_heads: heads (``width`` must be divisible by it).
        key_ratio: slices ``G`` (the width of ``q`` and ``k`` per head).
        mlp_ratio: hidden width of the block MLPs as a multiple of ``width``.
        learn_temperature: learnable ``τ_q``, ``τ_k`` per head (the published ``temp`` variant).
    """

    display_name = "LinearNO"

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        width: int = 64,
        n_layers: int = 4,
        n_heads: int = 4,
        key_ratio: int = 32,
        mlp_ratio: int = 1,
        learn_temperature: bool = False,
    ) -> None:
        super().__init__()
        check_sizes(in_channels=in_channels, out_channels=out_channels, width=width, n_layers=n_layers,
                    n_heads=n_heads, key_ratio=key_ratio, mlp_ratio=mlp_ratio)
        check_spatial_dims(spatial_dims)
        check_heads(width, n_heads)
        if not isinstance(learn_temperature, bool):
            raise ValueError(f"learn_temperature: expected True or False, got {learn_temperature!r}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.lift = nn.Sequential(nn.Linear(spatial_dims + in_channels, 2 * width), nn.GELU(),
                                  nn.Linear(2 * width, width))
        self.blocks = nn.ModuleList(
            SliceBlock(width, LinearNOAttention(width, n_heads, key_ratio, learn_temperature), mlp_ratio,
                       out_channels if i == n_layers - 1 else None)
            for i in range(n_layers)
        )
        init_published(self)

    def lift_state(self, a, pos):
        return (self.lift(torch.cat([pos, a], dim=-1)),)

    def stages(self):
        return [block.stage() for block in self.blocks]

    def readout(self, state):
        return state[0]
