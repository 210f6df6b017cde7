"""Galerkin and Fourier attention layers (Cao, NeurIPS 2021, arXiv 2105.14995).

Per head h, with ``x`` the query stream and ``y`` the key/value stream:

    Q = x W_Q,  K = y W_K,  V = y W_V                       (split into heads of width d_k)
    galerkin:  z = Q · Σ_j w_j LN(K)_jᵀ LN(V)_j
    fourier:   z = Σ_j w_j (LN(Q)·LN(K)_j) V_j / √(d_k + p)

with per-head LayerNorms applied after the projection, the point coordinates (``p`` of them)
concatenated onto Q, K and V in every head, and an output ``Linear(d + H·p, d)``. The paper's
``1/n`` is the uniform case of the quadrature weights ``w_j`` (normalised to sum to one).

Differences from the original code, on purpose:
* the original calls ``F.dropout`` on the attention context without ``p`` or ``training``, so
  half of it is dropped even in eval mode; here dropout is an ordinary module on the output
  that respects ``model.eval()``;
* the ``1/n`` is generalised to quadrature weights and padding masks.

For ``attention_type="galerkin"`` the LayerNorms of K and V are passed to
:func:`~sciattn.galerkin.galerkin_attention` as ``kv_norm`` (normalising the first ``d_k`` features,
so the appended coordinates pass through), which the ``triton`` backend fuses into its kernel; the
result is the same as normalising first, up to rounding.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._checks import (
    check_backend_name,
    check_choice,
    check_dim,
    check_finite_at,
    check_floating,
    check_heads,
    check_input_dtype,
    check_positive_float,
    check_rank,
)
from .functional import KVNorm, galerkin_attention, head_layer_norm

__all__ = ["GalerkinAttention"]

ATTENTION_TYPES = ("galerkin", "fourier")


class _HeadLayerNorm(nn.Module):
    """An independent affine LayerNorm for each head, on ``(B, H, N, d_k)``."""

    def __init__(self, n_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n_heads, head_dim))
        self.bias = nn.Parameter(torch.zeros(n_heads, head_dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return head_layer_norm(t, self.weight, self.bias, self.eps)


class GalerkinAttention(nn.Module):
    """Multi-head Galerkin or Fourier attention with quadrature weights.

    Args:
        d_model: token width ``d`` (divisible by ``n_heads``).
        n_heads: number of heads ``H``.
        attention_type: ``"galerkin"`` (LN on K, V) or ``"fourier"`` (LN on Q, K).
        pos_dim: number of coordinates ``p`` concatenated onto Q, K, V per head (0: none).
        norm_eps: LayerNorm epsilon.
        xavier_gain, diagonal_weight: initialisation ``W = xavier_uniform(gain) + diag·I`` of the
            Q, K, V projections, as recommended by the paper (1e-2, 1e-2).
        dropout: dropout on the output projection (off in eval).
        backend: force an attention backend (``None``: automatic).

    Shapes:
        x: ``(B, Nq, d)``; pos: ``(B, Nq, p)`` or ``(Nq, p)``;
        context: ``(B, Nk, d)`` (default ``x``); context_pos: ``(B, Nk, p)`` or ``(Nk, p)``;
        weights: ``(Nk,)`` or ``(B, Nk)``; mask: ``(B, Nk)`` bool (also the query mask in
        self-attention); returns ``(B, Nq, d)``, zero on padded query rows.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        attention_type: str = "galerkin",
        pos_dim: int = 0,
        norm_eps: float = 1e-5,
        xavier_gain: float = 1e-2,
        diagonal_weight: float = 1e-2,
        dropout: float = 0.0,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        check_heads("d_model", d_model, n_heads)
        check_choice("attention_type", attention_type, ATTENTION_TYPES)
        if pos_dim < 0:
            raise ValueError(f"pos_dim: expected a non-negative int, got {pos_dim}")
        check_positive_float("norm_eps", norm_eps)
        check_backend_name("galerkin", backend)
        self.d_model, self.n_heads, self.pos_dim = d_model, n_heads, pos_dim
        self.head_dim = d_model // n_heads
        self.attention_type = attention_type
        self.backend = backend
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.norm_a = _HeadLayerNorm(n_heads, self.head_dim, norm_eps)
        self.norm_b = _HeadLayerNorm(n_heads, self.head_dim, norm_eps)
        self.out_proj = nn.Linear(d_model + n_heads * pos_dim, d_model)
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters(xavier_gain, diagonal_weight)

    def reset_parameters(self, xavier_gain: float = 1e-2, diagonal_weight: float = 1e-2) -> None:
        for lin in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(lin.weight, gain=xavier_gain)
            with torch.no_grad():
                lin.weight += diagonal_weight * torch.eye(self.d_model)
            nn.init.zeros_(lin.bias)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.head_dim).transpose(1, 2)

    def _with_pos(self, t: torch.Tensor, pos: torch.Tensor | None, name: str) -> torch.Tensor:
        if self.pos_dim == 0:
            return t
        if pos is None:
            raise ValueError(f"{name}: expected coordinates of width pos_dim={self.pos_dim}, got None")
        b, h, n, _ = t.shape
        if pos.dim() == 2:
            pos = pos.unsqueeze(0)
        if pos.shape[-2] != n or pos.shape[-1] != self.pos_dim:
            raise ValueError(f"{name}: expected shape (B, {n}, {self.pos_dim}), got {tuple(pos.shape)}")
        pos = pos.to(t.dtype).unsqueeze(1).expand(b, h, n, self.pos_dim)
        return torch.cat([t, pos], dim=-1)

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor | None = None,
        *,
        weights: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        context: torch.Tensor | None = None,
        context_pos: torch.Tensor | None = None,
    ) -> torch.Tensor:
        check_rank("x", x, 3, "(B, Nq, d_model)")
        check_dim("x", x, -1, self.d_model, "d_model")
        check_input_dtype("x", x, self)
        for name, t in (("pos", pos), ("context_pos", context_pos)):
            if t is not None and self.pos_dim == 0:  # it would be silently ignored
                raise ValueError(f"{name}: the layer was built with pos_dim=0 (no positional channels), got a "
                                 f"{name} tensor; build it with pos_dim=d or pass {name}=None")
            if t is not None:
                check_floating(name, t, "a floating-point tensor (any precision)")
        self_attention = context is None
        if self_attention:
            context, context_pos = x, pos
        else:
            check_rank("context", context, 3, "(B, Nk, d_model)")
            check_dim("context", context, -1, self.d_model, "d_model")
            check_input_dtype("context", context, self)
        if mask is not None:  # padded tokens may hold NaN: zero them so no gradient is NaN·0
            if mask.dtype != torch.bool or tuple(mask.shape) != tuple(context.shape[:2]):
                raise ValueError(
                    f"mask: expected a bool tensor of shape {tuple(context.shape[:2])} (B, Nk), "
                    f"got {mask.dtype} {tuple(mask.shape)}"
                )
        real = None if mask is None else mask[..., None]  # NaN at real points is refused; padding may hold it
        check_finite_at("x", x, real if self_attention else None)
        if not self_attention:
            check_finite_at("context", context, real)
        if mask is not None:
            zero = torch.zeros((), dtype=x.dtype, device=x.device)
            keep = mask[..., None]
            context = torch.where(keep, context, zero)
            context_pos = None if context_pos is None else torch.where(keep, context_pos, zero)
            if self_attention:
                x, pos = context, context_pos
        q = self._heads(self.q_proj(x))
        k = self._heads(self.k_proj(context))
        v = self._heads(self.v_proj(context))
        kv_norm = None
        if self.attention_type == "galerkin":
            # LN(K), LN(V) happen inside the attention (fused by the triton backend); they act on
            # the first head_dim features only, so the coordinates appended below pass through.
            kv_norm = KVNorm(self.norm_a.weight, self.norm_a.bias, self.norm_b.weight, self.norm_b.bias, self.norm_a.eps)
        else:
            q, k = self.norm_a(q), self.norm_b(k)
        q = self._with_pos(q, pos, "pos")
        k = self._with_pos(k, context_pos, "context_pos")
        v = self._with_pos(v, context_pos, "context_pos")
        z = galerkin_attention(q, k, v, weights=weights, mask=mask, backend=self.backend, kv_norm=kv_norm)
        if self.attention_type == "fourier":
            z = z / math.sqrt(q.shape[-1])
        b, h, nq, e = z.shape
        out = self.out_proj(z.transpose(1, 2).reshape(b, nq, h * e))
        if self_attention and mask is not None:
            out = torch.where(mask[..., None], out, torch.zeros((), dtype=out.dtype, device=out.device))
        return self.dropout(out)
