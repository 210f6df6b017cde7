"""ANIE, attentional neural integral equations (Zappala et al., Nat. Mach. Intell. 2024, arXiv 2209.15190).

We follow the authors' code (emazap7/ANIE @ 2071ad7: ``IE_source/Attentional_IE_solver.py``,
``Integral_spatial_attention_solver_multbatch``; the kernel ``IE_source/kernels.py: model_blocks`` with
``IE_source/Galerkin_transformer.py: SimpleTransformerEncoderLayer``), the model of the paper's PDE notebooks.

The model is a second-kind (Urysohn) integral equation in the unknown ``y`` with a learned integral operator::

    y(x) = f(x) + [ T_θ([y, x])(x) + y(x) ]            (the published "integral" carries the residual + y)

where ``f = E(a)`` is the free function (the encoded input) and ``T_θ`` is a Galerkin-transformer encoder on tokens
``[y(x_j), x_j]``: ``h = Lin([y, x])``, then per block (post-norm, ReLU FFN)::

    h <- LN1(h + A(h));   h <- LN2(h + FFN(h));          then  T = Lin(h)
    A(h)(x_i) = ∫ q(x_i) k(s)ᵀ v(s) dμ(s) ≈ q_i Σ_j w_j k_jᵀ v_j        per head, q, k, v = Lin(h), no softmax,
                                                                       no norm on k, v, no output projection

computed by :func:`sciattn.galerkin_attention` with the quadrature weights ``w`` (normalised to sum to one; the
published ``1/N`` on a uniform grid). The equation is solved by the published damped Picard iteration::

    y^0 = f;  g^k = G(y^k);  y^{k+1} = s y^k + (1 - s) g^k   (s = smoothing = 0.5)
    while ||y^k - g^k|| > tol, at most ``max_iterations`` (3) updates;  the answer is the last g^k

and the output is ``u = P(g)``. ``E`` and ``P`` are pointwise Linear maps (the notebooks use a patch CNN and a
dense MLP over all points, which are resolution-bound). Differences from the published code (docs page
``docs/operators/anie.md``): the stopping norm is the per-sample quadrature norm ``sqrt(Σ_j w_j |y_j - g_j|²)``
instead of the Euclidean norm over the whole batch (an output then never depends on the rest of its batch), and
the loop always runs ``max_iterations`` updates, freezing converged samples (no data-dependent control flow; the
same outputs as stopping).

Shapes:
    grid input: ``x`` ``(B, C_in, *spatial)`` with ``spatial_dims`` axes -> ``(B, C_out, *spatial)``;
    point input: ``x`` ``(B, N, C_in)`` with ``pos`` ``(B, N, d)``, optional ``weights`` and ``mask`` ``(B, N)``
    -> ``(B, N, C_out)``, zeros on padding.
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn import galerkin_attention
from sciattn._checks import check_heads, check_positive_int

from ._token_inputs import grid_or_point_forward
from .contract import Operator
from .registry import register_operator

__all__ = ["ANIE"]


class _LinearAttention(nn.Module):
    """Published ``SimpleAttention`` (galerkin type, ``norm=False``, no coordinates): ``q_i Σ_j w_j k_jᵀ v_j`` per
    head, heads concatenated; Q, K, V Linear with ``xavier_uniform(gain) + diagonal·I`` weights and zero biases."""

    def __init__(self, width: int, n_heads: int, xavier_gain: float, diagonal_weight: float):
        super().__init__()
        self.n_heads = n_heads
        self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        for lin in (self.q, self.k, self.v):
            nn.init.xavier_uniform_(lin.weight, gain=xavier_gain)
            with torch.no_grad():
                lin.weight += diagonal_weight * torch.eye(width)
            nn.init.zeros_(lin.bias)

    def forward(self, h, w, mask):
        b, n, c = h.shape
        q, k, v = (lin(h).reshape(b, n, self.n_heads, c // self.n_heads).transpose(1, 2)
                   for lin in (self.q, self.k, self.v))
        z = galerkin_attention(q, k, v, weights=w, mask=mask)  # (B, H, N, c/H)
        return z.transpose(1, 2).reshape(b, n, c)


class _Block(nn.Module):
    """Published ``SimpleTransformerEncoderLayer`` (defaults ``layer_norm=True``, ReLU): post-norm attention + FFN."""

    def __init__(self, width, n_heads, dim_ff, dropout, norm_eps, xavier_gain, diagonal_weight):
        super().__init__()
        self.attn = _LinearAttention(width, n_heads, xavier_gain, diagonal_weight)
        self.ln1, self.ln2 = nn.LayerNorm(width, eps=norm_eps), nn.LayerNorm(width, eps=norm_eps)
        self.ffn = nn.Sequential(nn.Linear(width, dim_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(dim_ff, width))
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, h, w, mask):
        h = self.ln1(h + self.drop1(self.attn(h, w, mask)))
        return self.ln2(h + self.drop2(self.ffn(h)))


@register_operator("anie")
class ANIE(Operator):
    """Attentional neural integral equation solved by damped Picard iterations (grids and point sets).

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        spatial_dims: dimension ``d`` of the domain (1, 2 or 3).
        state_channels: channels of the unknown ``y`` (the notebooks' ``dim``, 16).
        width: token width of the transformer ``T_θ`` (``dim_emb``, 32).
        n_layers: encoder blocks (``n_blocks``, 2).
        n_heads: attention heads (``n_head``, 2).
        dim_ff: hidden width of the feed-forward networks (``n_ff``, 64).
        max_iterations: damped Picard updates after the first evaluation (3 in every notebook).
        smoothing: damping ``s`` in ``y <- s y + (1 - s) g`` (``smoothing_factor``, 0.5), in ``[0, 1)``.
        tolerance: a sample stops when ``sqrt(Σ_j w_j |y_j - g_j|²) <= tolerance`` (published 1e-6).
        accumulate_grads: back-propagate through every iteration (the PDE experiments' ``True``); ``False``:
            the published truncated gradient, the iterate is detached before each application of ``T_θ``.
        dropout: dropout in the encoder blocks (published 0.1; 0 by default, so that training-mode outputs and
            gradients are deterministic and independent of the batch, as the registry contracts check).
        norm_eps, xavier_gain, diagonal_weight: LayerNorm epsilon and the Q/K/V initialisation (1e-5, 1e-2, 1e-2).
    """

    input_kind = "grid"

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        state_channels: int = 16,
        width: int = 32,
        n_layers: int = 2,
        n_heads: int = 2,
        dim_ff: int = 64,
        max_iterations: int = 3,
        smoothing: float = 0.5,
        tolerance: float = 1e-6,
        accumulate_grads: bool = True,
        dropout: float = 0.0,
        norm_eps: float = 1e-5,
        xavier_gain: float = 1e-2,
        diagonal_weight: float = 1e-2,
    ) -> None:
        super().__init__()
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels),
                            ("state_channels", state_channels), ("width", width), ("n_layers", n_layers),
                            ("n_heads", n_heads), ("dim_ff", dim_ff), ("max_iterations", max_iterations)]:
            check_positive_int(name, value)
        check_heads("width", width, n_heads)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0 <= smoothing < 1:
            raise ValueError(f"smoothing: expected a number in [0, 1), got {smoothing!r}")
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0:
            raise ValueError(f"tolerance: expected a number >= 0, got {tolerance!r}")
        if not isinstance(accumulate_grads, bool):
            raise TypeError(f"accumulate_grads: expected a bool, got {accumulate_grads!r}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.max_iterations, self.smoothing, self.tolerance = max_iterations, float(smoothing), float(tolerance)
        self.accumulate_grads = accumulate_grads
        self.encoder = nn.Linear(in_channels, state_channels)  # the free function f = E(a)
        self.first = nn.Linear(state_channels + spatial_dims, width)
        self.blocks = nn.ModuleList(_Block(width, n_heads, dim_ff, dropout, norm_eps, xavier_gain, diagonal_weight)
                                    for _ in range(n_layers))
        # published: Linear(width, state + coordinates), of which only the state rows are kept
        self.last = nn.Linear(width, state_channels)
        self.decoder = nn.Linear(state_channels, out_channels)

    def kernel(self, y: torch.Tensor, pos: torch.Tensor, w: torch.Tensor, mask=None) -> torch.Tensor:
        """``[T_θ([y, x]) + [y, x]]`` restricted to the state channels: ``(B, N, S)``."""
        if not self.accumulate_grads:
            y = y.detach()
        h = self.first(torch.cat([y, pos], dim=-1))
        for block in self.blocks:
            h = block(h, w, mask)
        return self.last(h) + y

    def solve(self, f: torch.Tensor, pos: torch.Tensor, w: torch.Tensor, mask=None) -> torch.Tensor:
        """The damped Picard solve of ``y = f + K(y)`` from ``y^0 = f``; returns the last ``g^k`` ``(B, N, S)``.

        ``f`` ``(B, N, S)``, ``pos`` ``(B, N, d)``, ``w`` ``(B, N)`` summing to one per sample (zero on padding)."""
        s, tol = self.smoothing, self.tolerance

        def error(a, b):  # per-sample quadrature L2 norm of a - b
            return torch.sqrt((w * (a - b).square().sum(-1)).sum(-1))

        y = f
        g = f + self.kernel(y, pos, w, mask)
        active = error(y, g) > tol
        for _ in range(self.max_iterations):
            y_new = s * y + (1 - s) * g
            g_new = f + self.kernel(y_new, pos, w, mask)
            keep = active[:, None, None]
            y, g = torch.where(keep, y_new, y), torch.where(keep, g_new, g)
            active = active & (error(y_new, g_new) > tol)
        return g

    def encode(self, a: torch.Tensor, pos: torch.Tensor, w: torch.Tensor, mask=None) -> torch.Tensor:
        """Tokens ``(B, N, C_in)`` at ``pos`` ``(B, N, d)`` with weights ``w`` ``(B, N)`` -> ``(B, N, C_out)``."""
        return self.decoder(self.solve(self.encoder(a), pos, w, mask))

    def forward(self, x, pos=None, weights=None, mask=None, *, y=None):
        """``y`` is accepted and ignored (neuraloperator's ``Trainer`` calls ``model(**sample)``)."""
        del y
        return grid_or_point_forward(self, x, pos, weights, mask, "ANIE")
