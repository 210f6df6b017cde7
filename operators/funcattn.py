"""Functional Attention (Xiao, Gao, Weber, Yang, Cremers, ICML 2026, arXiv 2605.31559), quadrature-weighted,
on grids and point sets.

Per head of width ``d`` on tokens ``h_i`` at points ``x_i`` with quadrature weights ``w_i`` (``Σ_i w_i = 1``, zero
on padding), functional attention is the discretisation of

    φ_g(x)  = softmax_g(W_b W_x h(x) / τ)                         adaptive basis, G = ``basis_num`` (Σ_g φ_g = 1)
    S_g     = ∫ φ_g(y) W_f h(y) dμ(y) / ∫ φ_g(y) dμ(y)            basis coefficients (L²(μ) projection), S (G × d)
    Q, K, V = S W_q, S W_k, S W_v
    C       = Q ((1 - a) KᵀK + a I_d)^{-1} Kᵀ = Q Kᵀ ((1 - a) K Kᵀ + a I_G)^{-1}     functional map (G × G)
    (A h)(x) = W_o Σ_g φ_g(x) (C V)_g                                back to the points

    S_g ≈ Σ_i w_i φ_ig f_i / (Σ_i w_i φ_ig + ε),    a = sigmoid(α) (α learnable, init ``alpha_init``).

So the pairwise softmax affinities of attention are replaced by a ridge least-squares map between the basis
coefficients of keys and queries (``(1 - a) C = argmin_C ‖C K - Q‖² + λ‖C‖²``, ``λ = a / (1 - a)``); the only
softmax is over the G basis functions at each point. ``C V`` is formed as ``Q (M^{-1} (Kᵀ V))``,
``M = (1 - a) KᵀK + a I`` (a ``d × d`` solve with ``d`` right-hand sides; the published code forms ``C`` first,
``G × G``: the same product in another order, equal up to round-off). The solve runs in at least float32, outside
autocast (``linalg.solve`` is unsupported or unstable in half precision).

Published code (xjffff/FUNCATTN ``PDE-StandardBenchmark/model/Functional_attention.py`` and
``Functional_Attention_Irregular_Mesh_Shared.py``, the Elasticity model: the only one whose basis projections are
pointwise ``Linear`` maps) has ``w_i = 1`` and ``ε = 1e-5``: a ratio of plain sums over the points, i.e. the uniform
average. On a uniform grid our weights are equal and the two agree up to the scale of ``ε`` (ours is relative to a
unit mass, the published one to a mass of ``N``: ``basis_eps = 1e-5 / N`` reproduces it); on a point set the
published form is our layer with ``weights=None`` (equal weights). Differences, all measured on
``docs/operators/funcattn.md``:

- ``τ`` is clamped to ``[0.1, 5]`` (the structured-mesh variants and Transolver do; the irregular-mesh model does
  not). Equal while ``τ`` stays in that range (it starts at 0.5).
- The structured-mesh variants (3×3 convolutions for ``W_x``, ``W_f``; a stencil fixed in grid cells, so not the
  same operator at another resolution) are not offered; every input uses the pointwise ``Linear`` maps.
- Not implemented: dropout (0 in the scripts), time input, ``unified_pos``.

Model (``Functional_Attention_Irregular_Mesh_Shared.Model``): ``h = MLP([x, a]) + p`` (``Lin(d + C_in -> 2C) - GELU
- Lin(2C -> C)``, learnable vector ``p``), blocks ``h <- h + A(LN(h))``, ``h <- h + MLP(LN(h))`` (``Lin(C -> rC) -
GELU - Lin(rC -> C)``), and after the last block ``u = Lin(LN(h))``. ``shared_basis=True`` (default, as published):
one ``W_x``, ``W_f``, ``W_b``, ``τ`` for all blocks, each block's basis computed from its own ``LN(h)``; ``False``:
one basis projection per block (the structured-mesh ``Structured_Mesh_2D`` layout, with ``Linear`` maps).
Initialisation as published: the blocks' Linear ``trunc_normal(0.02)``, zero bias; the shared basis projections keep
PyTorch's default init with an orthogonal ``W_b`` (the published model creates them after its init pass); per-block
ones are overwritten by ``trunc_normal(0.02)`` like the rest; ``p ~ U(0, 1/C)``.

Shapes: as :class:`sciattn.operators.transolver.Transolver`: grid ``x`` ``(B, C_in, *spatial)`` ->
``(B, C_out, *spatial)``; point set ``x`` ``(B, N, C_in)``, ``pos`` ``(B, N, d)``, optional ``weights`` and ``mask``
``(B, N)`` -> ``(B, N, C_out)``, zeros on padding.
"""

from __future__ import annotations

import torch
from torch import nn

from .registry import register_operator
from .token_operator import TokenOperator, check_nonnegative_float, init_published
from .transolver import SliceBlock, Transolver

__all__ = ["AdaptiveBasis", "FunctionalAttention", "FuncAttn", "functional_map"]


def functional_map(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``C V`` with ``C = Q ((1 - a) KᵀK + a I)^{-1} Kᵀ`` for coefficients ``q``, ``k``, ``v`` ``(..., G, d)`` and a
    ridge weight ``a`` in (0, 1) (a 0-d tensor); returns ``(..., G, d)``, in at least float32."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    with torch.autocast(q.device.type, enabled=False):
        q, k, v, a = q.to(dtype), k.to(dtype), v.to(dtype), a.to(dtype)
        kt = k.transpose(-1, -2)
        eye = torch.eye(k.shape[-1], dtype=dtype, device=k.device)
        return q @ torch.linalg.solve((1 - a) * (kt @ k) + a * eye, kt @ v)


class AdaptiveBasis(nn.Module):
    """The adaptive basis ``φ = softmax_G(W_b (W_x h)_head / clamp(τ, 0.1, 5))`` ``(B, H, N, G)`` and the values
    ``f = (W_f h)_head`` ``(B, H, N, d)`` of tokens ``h`` ``(B, N, C)``."""

    def __init__(self, width: int, n_heads: int, basis_num: int):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, width // n_heads
        self.in_x, self.in_f = nn.Linear(width, width), nn.Linear(width, width)
        self.basis = nn.Linear(self.head_dim, basis_num)
        nn.init.orthogonal_(self.basis.weight)
        self.temperature = nn.Parameter(torch.full((1, n_heads, 1, 1), 0.5))

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.reshape(b, n, self.n_heads, self.head_dim).transpose(1, 2)

    def functions(self, h: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.basis(self._heads(self.in_x(h))) / self.temperature.clamp(0.1, 5.0), dim=-1)

    def values(self, h: torch.Tensor) -> torch.Tensor:
        return self._heads(self.in_f(h))


class FunctionalAttention(nn.Module):
    """Quadrature-weighted functional attention on tokens ``h`` ``(B, N, C)`` with weights ``w`` ``(B, N)`` (sum 1).

    Its sums over the points are the basis masses ``Σ_i w_i φ_ig`` ``(B, H, G)`` and moments ``Σ_i w_i φ_ig f_i``
    ``(B, H, G, d)`` (:meth:`partial`); everything else is pointwise (:meth:`apply`). ``own_basis``: an
    :class:`AdaptiveBasis` of its own, or (``False``) a shared one given to :meth:`use_basis`."""

    def __init__(self, width: int, n_heads: int, basis_num: int, basis_eps: float, alpha_init: float,
                 own_basis: bool = True):
        super().__init__()
        self.n_heads, self.head_dim, self.basis_eps = n_heads, width // n_heads, basis_eps
        self.own_basis = AdaptiveBasis(width, n_heads, basis_num) if own_basis else None
        self._shared: tuple[AdaptiveBasis, ...] = ()
        self.q = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.k = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.v = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.out = nn.Linear(width, width)

    def use_basis(self, basis: AdaptiveBasis) -> None:
        """Compute the basis with ``basis`` (owned and registered elsewhere: a tuple keeps it unregistered here)."""
        self._shared = (basis,)

    @property
    def basis(self) -> AdaptiveBasis:
        return self.own_basis if self.own_basis is not None else self._shared[0]

    def partial(self, h: torch.Tensor, w: torch.Tensor):
        """``((mass (B, H, G), moment (B, H, G, d)), φ)`` over the points of ``h``."""
        phi = self.basis.functions(h)
        wphi = phi * w[:, None, :, None].to(phi.dtype)
        return (wphi.sum(dim=2), torch.einsum("bhng,bhnd->bhgd", wphi, self.basis.values(h))), phi

    def apply(self, h: torch.Tensor, sums, phi: torch.Tensor | None = None) -> torch.Tensor:
        """The layer's output at the points of ``h`` from the sums over all points (``phi``: their basis values)."""
        b, n, c = h.shape
        phi = self.basis.functions(h) if phi is None else phi
        mass, moment = sums
        s = moment / (mass + self.basis_eps)[..., None]                                 # (B, H, G, d)
        mapped = functional_map(self.q(s), self.k(s), self.v(s), torch.sigmoid(self.alpha)).to(s.dtype)
        out = torch.einsum("bhgd,bhng->bhnd", mapped, phi)
        return self.out(out.transpose(1, 2).reshape(b, n, c))

    def forward(self, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        sums, phi = self.partial(h, w)
        return self.apply(h, sums, phi)


@register_operator("funcattn")
class FuncAttn(TokenOperator):
    """Functional Attention neural operator, quadrature-weighted; grids and point sets.

    Args:
        in_channels: input channels ``C_in`` (upstream ``fun_dim``).
        out_channels: output channels ``C_out``.
        spatial_dims: dimension ``d`` of the domain (1, 2 or 3).
        width: token width ``C`` (upstream ``n_hidden``; 128 in the published scripts).
        n_layers: number of blocks (8 published).
        n_heads: heads (``width`` must be divisible by it; 8 published).
        basis_num: basis functions ``G`` per head (64 published, 32 for Navier-Stokes).
        mlp_ratio: hidden width of the block MLPs as a multiple of ``width`` (2 for Elasticity, 1 otherwise).
        basis_eps: ``ε`` added to each basis function's mass (a unit total mass; upstream ``1e-5`` on a mass of ``N``).
        alpha_init: initial ``α``; the ridge weight is ``a = sigmoid(α)`` (1e-3 in the irregular-mesh model, 0 in
            the structured-mesh ones: ``a ≈ 0.5``).
        shared_basis: one basis projection for all blocks (as published for Elasticity, Airfoil and Darcy), or one
            per block (as the Plasticity, Pipe and Navier-Stokes models).
    """

    display_name = "FuncAttn"

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        width: int = 64,
        n_layers: int = 4,
        n_heads: int = 4,
        basis_num: int = 32,
        mlp_ratio: int = 1,
        basis_eps: float = 1e-5,
        alpha_init: float = 1e-3,
        shared_basis: bool = True,
    ) -> None:
        super().__init__()
        self._set_sizes(spatial_dims, in_channels=in_channels, out_channels=out_channels, width=width,
                        n_layers=n_layers, n_heads=n_heads, basis_num=basis_num, mlp_ratio=mlp_ratio)
        basis_eps = check_nonnegative_float("basis_eps", basis_eps)
        if isinstance(alpha_init, bool) or not isinstance(alpha_init, (int, float)) or not abs(alpha_init) < 50:
            raise ValueError(f"alpha_init: expected a finite number with |alpha_init| < 50 (the ridge weight is "
                             f"sigmoid(alpha_init)), got {alpha_init!r}")
        if not isinstance(shared_basis, bool):
            raise ValueError(f"shared_basis: expected True or False, got {shared_basis!r}")
        self.lift = nn.Sequential(nn.Linear(spatial_dims + in_channels, 2 * width), nn.GELU(),
                                  nn.Linear(2 * width, width))
        self.blocks = nn.ModuleList(
            SliceBlock(width, FunctionalAttention(width, n_heads, basis_num, basis_eps, alpha_init, not shared_basis),
                       mlp_ratio, out_channels if i == n_layers - 1 else None)
            for i in range(n_layers)
        )
        init_published(self)
        self.placeholder = nn.Parameter(torch.rand(width) / width)
        if shared_basis:  # created after the init pass, as published: PyTorch's default init, orthogonal W_b
            self.basis = AdaptiveBasis(width, n_heads, basis_num)
            for block in self.blocks:
                block.attn.use_basis(self.basis)

    # the same skeleton as Transolver's: lift [x, a] -> tokens, one stage per block, the last block's head
    lift_state = Transolver.lift_state
    stages = Transolver.stages
    readout = Transolver.readout
