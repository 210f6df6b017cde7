"""ONO, the Orthogonal Neural Operator (Xiao et al., ICML 2024, arXiv 2310.12487), quadrature-weighted.

Two streams: ``x_ψ`` learns eigenfunction-like features ``ψ``, and ``f`` carries the solution. Per block, with
quadrature weights ``w_i`` (``Σ_i w_i = 1``, zero on padding):

    x_ψ <- x_ψ + Attn(LN1(x_ψ), w);   x_ψ <- x_ψ + MLP(LN2(x_ψ))
    ψ    = Proj(x_ψ)                                              (N × k), k = ``psi_dim``
    Σ    = ∫ ψ ψᵀ dμ  ≈ Σ_i w_i ψ_i ψ_iᵀ  (+ ε tr(Σ)/k · I),   L Lᵀ = Σ,   ψ^ = ψ L^{-T}
    f   <- ∫ ψ^(x) diag(softplus μ) ψ^(y)ᵀ f(y) dμ(y) + f  ≈ (ψ^ ⊙ softplus μ)(Σ_j w_j ψ^_j f_jᵀ) + f
    f   <- MLP2(LN3(f))                                           (the last block: Lin(C -> C_out))

so ``ψ^`` is orthonormal in ``L²(μ)`` and the update is a kernel integral with a learned, orthogonal eigenbasis.
``Attn`` is the default of the authors' code (lucidrains' linear attention): ``q~ = softmax_d(q)/√d``,
``k~ = softmax over points of k``, ``out = q~ (k~ᵀ v)``, ``q, k, v`` without bias, a Linear output; the softmax
over points is quadrature-weighted, ``k~_j = w_j e^{k_j} / Σ_l w_l e^{k_l}``.

Differences from the published code (xzppp/ONO ``ONOmodel2.py``; the Neural-Solver-Library port is a near copy):

- **The projection.** Published ``ψ^ᵀ f`` is a bare sum over the points (no ``1/N``), while ``Σ`` is a mean: the
  integral term grows like ``N`` against the ``+ f`` skip, so the same weights compute a different operator at
  another resolution (``LN3`` hides the overall scale, not the balance). This layer as published cannot converge
  under refinement. Measured (``tests/operators/test_ono.py::test_published_bare_sum_grows_with_the_point_count``,
  one block, a smooth field on 16² and 32² grids): the bare-sum integral term grows by 4.01× (the ratio of point
  counts; 1.003× with the quadrature), and the output at the shared nodes moves by 2.9% of its size (1.3% with
  the quadrature, whose difference is the O(h) error of the rule). We use ``Σ_j w_j ψ^_j f_jᵀ``.
- **The covariance.** Published ``Σ`` pools every sample and point of the training batch, is tracked by a running
  average (momentum 0.9) and replaced by it in ``eval()`` (a BatchNorm-like train/eval gap; the buffer starts as
  ``None``, so ``eval()`` before training crashes and strict checkpoint loading fails). We use each sample's own
  ``Σ`` in both modes: the output is a function of that sample alone, and samples on different meshes are not
  pooled. With one sample per batch and uniform weights the two coincide in training mode.
- **Cholesky jitter.** Published: ``jitter`` only after a failed factorisation (1e-6, ×10 up to 10 times). We
  always add ``cov_jitter · tr(Σ)/k`` to the diagonal (relative, default 1e-4): the whitening is then
  differentiable, traceable and bounded when ``ψ`` is nearly rank deficient.
- Measured on graded point sets (``python -m benchmarks run refinement --set operator='"ono"'``, defaults,
  n = 16 … 128): relative distance to the continuum value 4.3e-3 → 7.6e-5 with the quadrature, 0.21 throughout with equal weights
  (our layer with ``weights=None``, which already has the mean projection; the bare sum would add its ``N`` growth).
- **Nyström attention** (the README's Darcy runs) is not offered: its landmarks are means over consecutive blocks of
  tokens and it convolves along the token order, so it is not a quadrature of any integral and depends on the
  point order and on ``N``.

Model (``variant="published"``, the default, as ``ONOmodel2.py``): ``[x_ψ, f] = Lin([x, a])`` (``d + C_in -> 2C``,
split in two) and ``ψ = Lin(x_ψ)`` (``C -> k``), the blocks, and the output of the last ``MLP2``; init
``trunc_normal(0.02)``, zero biases, ``μ = 0``. ``variant="sciattn_v1"`` (what sciattn shipped before; 155k against
130k parameters at width 64) makes the lift ``Lin(d + C_in -> rC) - GELU - Lin(rC -> 2C)`` and the projection
``Lin(C -> C) - GELU - Lin(C -> k)``; its measured effect is on ``docs/operators/ono.md``.

Shapes: as :class:`sciattn.operators.transolver.Transolver` (grids ``(B, C_in, *spatial)``; point sets ``x``
``(B, N, C_in)``, ``pos`` ``(B, N, d)``, ``weights`` and ``mask`` ``(B, N)``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from sciattn._checks import check_choice
from sciattn.partial_sums import exp_sums

from .point_parts import Stage
from .registry import register_operator
from .token_operator import TokenOperator, check_nonnegative_float, init_published

__all__ = ["ONO", "LinearAttention", "cholesky_factor", "orthonormalize", "VARIANTS"]


def cholesky_factor(cov: torch.Tensor, jitter: float) -> torch.Tensor:
    """``L`` with ``L Lᵀ = Σ + jitter tr(Σ)/k I`` for covariances ``cov`` ``(B, k, k)``."""
    k = cov.shape[-1]
    eye = torch.eye(k, dtype=cov.dtype, device=cov.device)
    cov = cov + (jitter * cov.diagonal(dim1=-2, dim2=-1).sum(-1) / k)[:, None, None] * eye
    return torch.linalg.cholesky(cov)


def orthonormalize(psi: torch.Tensor, w: torch.Tensor, jitter: float) -> torch.Tensor:
    """``ψ L^{-T}`` with ``L Lᵀ = Σ_i w_i ψ_i ψ_iᵀ + jitter tr(Σ)/k I`` per sample; ``psi`` ``(B, N, k)``, ``w`` ``(B, N)``."""
    chol = cholesky_factor((psi * w.to(psi.dtype)[..., None]).transpose(-1, -2) @ psi, jitter)
    return torch.linalg.solve_triangular(chol.transpose(-1, -2), psi, upper=True, left=False)


class LinearAttention(nn.Module):
    """Linear attention (softmax over features for ``q``, quadrature-weighted softmax over points for ``k``).

    Its one sum over the points is ``k~ᵀ v`` (an :class:`~sciattn.partial_sums.ExpSums` per head, ``(B, H, d, d)``)."""

    def __init__(self, width: int, n_heads: int):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, width // n_heads
        self.q = nn.Linear(width, width, bias=False)
        self.k = nn.Linear(width, width, bias=False)
        self.v = nn.Linear(width, width, bias=False)
        self.out = nn.Linear(width, width)

    def _heads(self, t):
        b, n, _ = t.shape
        return t.reshape(b, n, self.n_heads, self.head_dim).transpose(1, 2)

    def partial(self, h, w):
        return (exp_sums(self._heads(self.k(h)), w[:, None, :, None], self._heads(self.v(h))),), None

    def apply(self, h, sums, cache=None):
        b, n, c = h.shape
        q = torch.softmax(self._heads(self.q(h)), dim=-1) * self.head_dim ** -0.5
        out = q @ sums[0].mean
        return self.out(out.transpose(1, 2).reshape(b, n, c))

    def forward(self, h, w):
        return self.apply(h, self.partial(h, w)[0])


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.GELU(), nn.Linear(hidden, n_out))


VARIANTS = ("published", "sciattn_v1")


class _ONOBlock(nn.Module):
    """Two stages on the state ``(x, f)``: the linear attention of the ``x`` stream (sums ``k~ᵀ v``), then the
    spectral update of ``f`` (sums ``Σ = Σ_i w_i ψ_i ψ_iᵀ`` and ``Σ_i w_i ψ_i f_iᵀ``; with ``L Lᵀ = Σ + jitter``,
    ``ψ^ = ψ L^{-T}`` and ``Σ_i w_i ψ^_i f_iᵀ = L^{-1} Σ_i w_i ψ_i f_iᵀ``, so one pass over the points gives both)."""

    def __init__(self, width, n_heads, mlp_ratio, psi_dim, cov_jitter, out_channels, linear_proj=True):
        super().__init__()
        self.cov_jitter = cov_jitter
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(width), nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = LinearAttention(width, n_heads)
        self.mlp = _mlp(width, width * mlp_ratio, width)
        self.proj = nn.Linear(width, psi_dim) if linear_proj else _mlp(width, width, psi_dim)
        self.mu = nn.Parameter(torch.zeros(psi_dim))
        self.mlp2 = nn.Linear(width, out_channels) if out_channels else _mlp(width, width * mlp_ratio, width)

    def _attention_partial(self, state, w):
        u = self.ln1(state[0])
        return self.attn.partial(u, w)[0], u

    def _attention_apply(self, state, w, sums, u):
        x, f = state
        x = x + self.attn.apply(self.ln1(x) if u is None else u, sums)
        return x + self.mlp(self.ln2(x)), f

    def _spectral_partial(self, state, w):
        x, f = state
        psi = self.proj(x)
        wpsi = (psi * w.to(psi.dtype)[..., None]).transpose(-1, -2)
        return (wpsi @ psi, wpsi @ f), psi                                          # (B, k, k), (B, k, C)

    def _spectral_apply(self, state, w, sums, psi):
        x, f = state
        psi = self.proj(x) if psi is None else psi
        cov, cross = sums
        chol = cholesky_factor(cov, self.cov_jitter)
        psi = torch.linalg.solve_triangular(chol.transpose(-1, -2), psi, upper=True, left=False)  # ψ^
        coeff = torch.linalg.solve_triangular(chol, cross, upper=False)             # Σ_j w_j ψ^_j f_jᵀ  (B, k, C)
        f = (psi * F.softplus(self.mu)) @ coeff + f
        return x, self.mlp2(self.ln3(f))

    def stages(self):
        return [Stage(self._attention_partial, self._attention_apply), Stage(self._spectral_partial, self._spectral_apply)]

    def forward(self, x, f, w):
        state = (x, f)
        for stage in self.stages():
            state = stage.apply(state, w, *stage.partial(state, w))
        return state


@register_operator("ono")
class ONO(TokenOperator):
    """ONO neural operator, quadrature-weighted; grids and point sets.

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        spatial_dims: dimension ``d`` of the domain (1, 2 or 3).
        width: token width ``C`` of each stream (upstream ``n_hidden``).
        n_layers: number of blocks.
        n_heads: heads of the linear attention (``width`` must be divisible by it).
        psi_dim: number ``k`` of learned orthonormal features ``ψ``.
        mlp_ratio: hidden width of the MLPs (and of the lift) as a multiple of ``width``.
        cov_jitter: relative Cholesky jitter: ``cov_jitter · tr(Σ)/k`` is added to the diagonal of ``Σ``.
        variant: ``"published"`` (default): the lift ``[x_ψ, f] = Lin([x, a])`` and the projection ``ψ = Lin(x_ψ)``
            are single Linears, as in the authors' code; ``"sciattn_v1"``: both are 2-layer GELU MLPs (the layout
            sciattn shipped before issue 38; a checkpoint whose config has no ``variant`` key loads as it).
    """

    # a config stored without ``variant`` was trained with sciattn's earlier layout (MLP lift and projection, ...)
    legacy_defaults = {"variant": "sciattn_v1"}

    display_name = "ONO"

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        width: int = 64,
        n_layers: int = 4,
        n_heads: int = 4,
        psi_dim: int = 16,
        mlp_ratio: int = 1,
        cov_jitter: float = 1e-4,
        variant: str = "published",
    ) -> None:
        super().__init__()
        check_choice("variant", variant, VARIANTS)
        self.variant = variant
        published = variant == "published"
        self._set_sizes(spatial_dims, in_channels=in_channels, out_channels=out_channels, width=width,
                        n_layers=n_layers, n_heads=n_heads, psi_dim=psi_dim, mlp_ratio=mlp_ratio)
        cov_jitter = check_nonnegative_float("cov_jitter", cov_jitter)
        self.width = width
        self.lift = (nn.Linear(spatial_dims + in_channels, 2 * width) if published
                     else _mlp(spatial_dims + in_channels, width * mlp_ratio, 2 * width))
        self.blocks = nn.ModuleList(
            _ONOBlock(width, n_heads, mlp_ratio, psi_dim, cov_jitter, out_channels if i == n_layers - 1 else None,
                      linear_proj=published)
            for i in range(n_layers)
        )
        init_published(self)

    def lift_state(self, a, pos):
        return tuple(self.lift(torch.cat([pos, a], dim=-1)).chunk(2, dim=-1))

    def stages(self):
        return [stage for block in self.blocks for stage in block.stages()]

    def readout(self, state):
        return state[1]
