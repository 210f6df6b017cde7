"""Codomain attention block on 1-, 2- or 3-D grids (after CoDA-NO, Rahman et al., NeurIPS 2024,
arXiv 2403.12553), with the grid's quadrature in the scores and the normalisation.

The input holds ``V`` variable tokens, each a ``C``-channel function ``u_a : Ω -> R^C``. With
``w`` the grid's quadrature weights normalised to a probability measure,

    ũ_a   = γ ⊙ (u_a - E_w[u_a]) / sqrt(Var_w[u_a] + ε) + β      codomain-wise instance norm
    q_a, k_a, v_a = 𝒦_{Q,K,V} ũ_a                               per-head operators, shared by all a
    z_a   = Σ_b softmax_b(⟨q_a, k_b⟩_w / τ) v_b                  :func:`codomain_attention`
    out_a = W_o z_a                                              pointwise output projection

where ``E_w[f] = Σ_x w_x f(x) ≈ ∫ f dμ / μ(Ω)`` and ``⟨f, g⟩_w = Σ_x w_x f(x)·g(x)``. The
operators are ``𝒦 u = W u + SpectralConv(u)`` (neuraloperator's :class:`SpectralConv`, whose
``fft_norm="forward"`` makes it act on the function, not the grid) with ``qkv="spectral"``,
or only the pointwise ``W u`` with ``qkv="pointwise"``. (``SpectralConv`` computes in
float32 whatever the input dtype; the pointwise path keeps the input dtype.) Every weight is shared across the
variables, so the block is equivariant to permutations of the variables and accepts any
number of them. The block returns the attention update; residuals and the feed-forward part
belong to the operator (:class:`sciattn.operators.CoDANO`).

Differences from neuraloperator's ``CODALayer``: quadrature-weighted scores and moments
(its logits grow like ``sqrt(N)`` under refinement, these converge), 1-D grids work, one
token per variable, and no hidden resampling of Q and K.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from .._checks import (
    check_backend_name,
    check_choice,
    check_dim,
    check_finite_at,
    check_input_dtype,
    check_per_axis_ints,
    check_positive_float,
    check_positive_int,
    check_quadrature_weights,
    check_rank,
    check_tensor,
)
from ..domain import Grid
from .functional import codomain_attention, codomain_logits

__all__ = ["CodomainAttention", "QuadratureInstanceNorm", "grid_weights", "per_token_spectral_conv"]

QKV_TYPES = ("spectral", "pointwise")


def grid_weights(x: torch.Tensor, spatial_dims: int, rule: str = "uniform",
                 weights: torch.Tensor | None = None) -> torch.Tensor:
    """Quadrature weights ``(B, N)`` of the grid of ``x (B, ..., *spatial)``, summing to one per sample.

    ``weights`` (``(*spatial)`` or ``(B, *spatial)``) overrides the ``rule`` of :class:`Grid`.
    """
    b, grid = x.shape[0], tuple(x.shape[-spatial_dims:])
    if weights is None:
        w = Grid(grid, rule=rule).nodes_and_weights(x.dtype, x.device)[1].unsqueeze(0)
    else:
        check_tensor("weights", weights)
        if tuple(weights.shape) not in (grid, (b, *grid)):
            raise ValueError(f"weights: expected shape {grid} or {(b, *grid)} matching x, got {tuple(weights.shape)}")
        check_quadrature_weights("weights", weights.reshape(-1) if weights.dim() == spatial_dims
                                 else weights.reshape(b, -1), need_mass=True)  # before normalising: -1/-N > 0
        w = weights.to(dtype=x.dtype, device=x.device)
        w = w.reshape(1, -1) if w.dim() == spatial_dims else w.reshape(b, -1)
    w = w.expand(b, w.shape[-1])
    return w / w.sum(dim=1, keepdim=True)


def per_token_spectral_conv(conv: nn.Module, h: torch.Tensor, grid: Sequence[int]) -> torch.Tensor:
    """Apply neuraloperator's ``SpectralConv`` ``conv`` to every variable token of ``h``.

    ``h``: ``(B, V, C, N)`` with ``N = prod(grid)`` -> ``(B, V, C', N)``. ``SpectralConv`` allocates a
    complex64 spectrum, so it runs in float32 and the result is cast back to ``h``'s dtype.
    """
    b, nv, c, _ = h.shape
    out = conv(h.reshape(b * nv, c, *grid).float()).to(h.dtype)
    return out.reshape(b, nv, out.shape[1], -1)


class QuadratureInstanceNorm(nn.Module):
    """Instance norm over the domain per variable token, with parameters shared by the tokens.

    ``y = γ_c (u_c - E_w[u_c]) / sqrt(Var_w[u_c] + ε) + β_c``, moments taken with the quadrature
    weights, so on a uniform grid it equals ``InstanceNorm`` and on other rules it is the norm of
    the function rather than of the samples.

    Shapes:
        x: ``(B, V, C, N)``; w: ``(B, N)`` summing to one; returns ``(B, V, C, N)``.
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        wx = w[:, None, None, :].to(x.dtype)
        mean = (x * wx).sum(-1, keepdim=True)
        centred = x - mean
        var = (centred.square() * wx).sum(-1, keepdim=True)
        y = centred * torch.rsqrt(var + self.eps)
        return y * self.weight[:, None].to(x.dtype) + self.bias[:, None].to(x.dtype)


class CodomainAttention(nn.Module):
    """Multi-head codomain attention over variable tokens that are functions on a grid.

    Args:
        channels: ``C``, channels of each variable token.
        n_heads: ``H``.
        spatial_dims: ``d`` in 1..3.
        head_channels: channels of each head's query/key/value functions (default ``C``).
        qkv: ``"spectral"`` (``W u + SpectralConv(u)``) or ``"pointwise"`` (``W u``).
        n_modes: Fourier modes per axis of the spectral operators, in neuraloperator's
            convention (int or ``d`` ints).
        temperature: ``τ`` (default ``sqrt(head_channels)``).
        learn_temperature: learn one ``τ`` per head (initialised at ``temperature``).
        rule: quadrature rule of the grid (:mod:`sciattn.quadrature`) when no weights are given.
        norm: apply the codomain-wise instance norm before the operators.
        backend: force an attention backend.

    Shapes:
        x: ``(B, V, C, *spatial)``; var_mask: ``(B, V)`` bool (True: present);
        weights: ``(*spatial)`` or ``(B, *spatial)``; returns ``(B, V, C, *spatial)``,
        zero on absent variables.
    """

    def __init__(
        self,
        channels: int,
        n_heads: int = 1,
        spatial_dims: int = 2,
        *,
        head_channels: int | None = None,
        qkv: str = "spectral",
        n_modes: int | Sequence[int] = 8,
        temperature: float | None = None,
        learn_temperature: bool = False,
        rule: str = "uniform",
        norm: bool = True,
        norm_eps: float = 1e-5,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        check_positive_int("channels", channels)
        check_positive_int("n_heads", n_heads)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        check_choice("qkv", qkv, QKV_TYPES)
        head_channels = channels if head_channels is None else check_positive_int("head_channels", head_channels)
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                        or not temperature > 0):
            raise ValueError(f"temperature: expected a positive float or None, got {temperature!r}")
        Grid((1,) * spatial_dims, rule=rule)  # validates the rule name
        check_positive_float("norm_eps", norm_eps)
        check_backend_name("codomain", backend)
        self.channels, self.n_heads, self.spatial_dims = channels, n_heads, spatial_dims
        self.head_channels, self.qkv, self.rule, self.backend = head_channels, qkv, rule, backend
        width = 3 * n_heads * head_channels
        self.proj = nn.Linear(channels, width, bias=qkv == "pointwise")
        if qkv == "spectral":
            modes = list(check_per_axis_ints("n_modes", n_modes, spatial_dims))
            from neuralop.layers.spectral_convolution import SpectralConv  # slow to import: only when used

            self.n_modes = modes
            self.spectral = SpectralConv(channels, width, n_modes=modes)
        else:
            self.n_modes, self.spectral = None, None
        self.norm = QuadratureInstanceNorm(channels, norm_eps) if norm else None
        self.out_proj = nn.Linear(n_heads * head_channels, channels)
        tau = float(temperature) if temperature is not None else math.sqrt(head_channels)
        self.fixed_temperature = temperature
        self.log_temperature = nn.Parameter(torch.full((n_heads,), math.log(tau))) if learn_temperature else None

    def _temperature(self):
        return self.log_temperature.exp() if self.log_temperature is not None else self.fixed_temperature

    def _check(self, x, var_mask):
        d = self.spatial_dims
        check_rank("x", x, 3 + d, f"(B, V, C={self.channels}, {d} spatial axes)")
        check_dim("x", x, 2, self.channels, "channels per variable")
        check_input_dtype("x", x, self)
        if var_mask is not None:
            check_tensor("var_mask", var_mask)
            if var_mask.dtype != torch.bool:
                raise TypeError(f"var_mask: expected dtype torch.bool (True: present), got {var_mask.dtype}")
            if tuple(var_mask.shape) != tuple(x.shape[:2]):
                raise ValueError(f"var_mask: expected a bool tensor of shape {tuple(x.shape[:2])} (B, V), "
                                 f"got {var_mask.dtype} {tuple(var_mask.shape)}")
        present = None if var_mask is None else var_mask[(...,) + (None,) * (1 + d)]
        check_finite_at("x", x, present)  # absent variables may hold anything

    def _qkv(self, x, var_mask, weights):
        """Normalised, projected heads ``(B, H, V, N, Dh)`` ×3 and weights ``(B, N)``."""
        grid = x.shape[3:]
        w = grid_weights(x, self.spatial_dims, self.rule, weights)
        if var_mask is not None:  # absent variables may hold anything, even NaN
            present = var_mask[(...,) + (None,) * (1 + self.spatial_dims)]
            x = torch.where(present, x, torch.zeros((), dtype=x.dtype, device=x.device))
        h = x.flatten(3)
        if self.norm is not None:
            h = self.norm(h, w)
        t = self.proj(h.transpose(-1, -2))  # (B, V, N, 3·H·Dh)
        if self.spectral is not None:
            t = t + per_token_spectral_conv(self.spectral, h, grid).transpose(-1, -2)
        t = t.unflatten(-1, (3, self.n_heads, self.head_channels)).permute(3, 0, 4, 1, 2, 5)
        return t[0], t[1], t[2], w

    def forward(self, x: torch.Tensor, var_mask: torch.Tensor | None = None,
                weights: torch.Tensor | None = None) -> torch.Tensor:
        self._check(x, var_mask)
        q, k, v, w = self._qkv(x, var_mask, weights)
        z = codomain_attention(q, k, v, weights=w, var_mask=var_mask, temperature=self._temperature(),
                               backend=self.backend, validate=False)  # w: checked by grid_weights, normalised
        b, h, nv, n, e = z.shape
        out = self.out_proj(z.permute(0, 2, 3, 1, 4).reshape(b, nv, n, h * e)).transpose(-1, -2)
        if var_mask is not None:
            out = torch.where(var_mask[..., None, None], out, torch.zeros((), dtype=out.dtype, device=out.device))
        return out.reshape(x.shape)

    def attention_logits(self, x: torch.Tensor, var_mask: torch.Tensor | None = None,
                         weights: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``⟨q_a, k_b⟩_w / τ`` before the softmax, ``(B, H, V, V)`` (diagnostics)."""
        self._check(x, var_mask)
        q, k, _, w = self._qkv(x, var_mask, weights)
        return codomain_logits(q, k, weights=w, var_mask=var_mask, temperature=self._temperature())

    def extra_repr(self) -> str:
        return (f"channels={self.channels}, n_heads={self.n_heads}, spatial_dims={self.spatial_dims}, "
                f"head_channels={self.head_channels}, qkv={self.qkv!r}, n_modes={self.n_modes}, rule={self.rule!r}")
