"""GNOT, the General Neural Operator Transformer (Hao et al., ICML 2023, arXiv 2302.14376), quadrature-weighted.

We follow the authors' code (thu-ml/GNOT ``models/mmgpt.py``), not the Neural-Solver-Library port: the query
stream ``h`` is the residual stream of every block and the input-function embedding ``z`` is fixed (NSL instead
restarts every block's queries from the coordinate embedding and feeds the previous block's output in as the
keys and values, a different network). One input function: the field ``a`` itself, given with its coordinates.

Architecture, for an input ``a`` sampled at points ``x_j`` with quadrature weights ``w_j`` (``Σ_j w_j = 1``)::

    h = MLP_q(x)                       query embedding from the coordinates
    z = MLP_z([x, a])                  input-function embedding, fixed through the blocks
    per block (n_layers):
      g = softmax_E(Gate_l(x))                            geometric gating over E experts (only if E > 1), one
                                                          gate network per block as published (``variant``)
      h <- h + HNA(LN1(h), LN2(z))                        cross-attention to the input function
      h <- h + LN3(Σ_e g_e FFN1_e(h))                     the FFN input is not normalised (as published)
      h <- h + NA(LN4(h))                                 self-attention
      h <- h + LN5(Σ_e g_e FFN2_e(h))
    u = MLP_out(h)

    MLP(in -> out): act(Lin(in -> C)), then mlp_layers × [act(Lin(C -> C)) + skip], then Lin(C -> out).

The normalised linear attention, per head of width ``d`` (``q, k, v`` Linear with bias; heads concatenated and
mixed by a Linear), is the Pattern-B quadrature of

    (A h)(x) = q~(x) + ∫ (q~(x)·k~(y)) v(y) dμ(y) / ∫ q~(x)·k~(y) dμ(y),   q~ = softmax_d(q), k~ = softmax_d(k),

    out_i = q~_i + (q~_i S) / (q~_i · n),   S = Σ_j w_j k~_j v_jᵀ  (d × d),   n = Σ_j w_j k~_j  (d).

The published code uses ``w_j = 1`` (the ratio is invariant to a constant, so this equals uniform weights); it is
consistent under uniform refinement of one sampling law, but on a non-uniform mesh it converges to the
sampling-density-weighted integral, and its zero-padded batches leak padding rows into ``S`` and ``n``
(thu-ml/GNOT issue 12). Here ``w`` are the grid's cell volumes or the given point weights, zero on padding.
Measured (``python -m benchmarks run refinement --set operator='"gnot"'``, defaults at initialisation, nested graded
grids ``(i/n)³`` per axis, rows in ``benchmarks/results/refinement.jsonl``): against the continuum value, the weighted
layer's difference falls 7.0e-4 → 9.8e-5 → 2.4e-5 → 6.2e-6 from 16 to 128 nodes per axis, while the published
uniform average stays at a 0.40 → 0.41 relative bias (it converges, to the density-weighted integral).
Everything else is pointwise (LayerNorms act on each point's features), so the layer converges under
refinement at the order of the quadrature.

Defaults follow ``args.py`` (one head, ``n_inner`` 4, ``mlp_layers`` 3, GELU, one expert: the README's CGPT
run) at a smaller width; PyTorch default initialisation (the custom init is commented out upstream). Dropout
is not implemented (0 upstream in the README recipe).

Shapes:
    grid input: ``x`` ``(B, C_in, *spatial)`` with ``spatial_dims`` axes -> ``(B, C_out, *spatial)``;
    point input: ``x`` ``(B, N, C_in)`` with ``pos`` ``(B, N, d)``, optional ``weights`` ``(B, N)`` and
    ``mask`` ``(B, N)`` (True at real points) -> ``(B, N, C_out)``, zeros on padding.
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn._checks import check_choice, check_positive_int

from .point_parts import Stage
from .registry import register_operator
from .token_operator import TokenOperator

__all__ = ["GNOT", "VARIANTS"]

VARIANTS = ("published", "sciattn_v1")


class _ResMLP(nn.Module):
    """``act(Lin(in->C))``, ``n_res`` residual ``act(Lin(C->C)) + skip`` layers, then ``Lin(C->out)``."""

    def __init__(self, n_in: int, width: int, n_out: int, n_res: int):
        super().__init__()
        self.inp = nn.Linear(n_in, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(n_res))
        self.out = nn.Linear(width, n_out)
        self.act = nn.GELU()

    def forward(self, x):
        h = self.act(self.inp(x))
        for lin in self.hidden:
            h = self.act(lin(h)) + h
        return self.out(h)


class _NormalizedLinearAttention(nn.Module):
    """GNOT's normalised linear attention with quadrature weights ``w`` ``(B, N_k)`` summing to one."""

    def __init__(self, width: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.q, self.k, self.v = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)
        self.proj = nn.Linear(width, width)

    def partial(self, z, w):
        """``(S (B, H, d, d), n (B, H, d))``: the sums over the key points ``z`` ``(B, N_k, C)``."""
        b, nk, c = z.shape
        heads = self.n_heads
        k = self.k(z).reshape(b, nk, heads, c // heads).softmax(dim=-1)
        v = self.v(z).reshape(b, nk, heads, c // heads)
        # two-operand einsums only: a three-operand one goes through opt_einsum, which fixes the sizes on export
        s = torch.einsum("bjhd,bjhe->bhde", k * w[:, :, None, None], v)
        norm = torch.einsum("bj,bjhd->bhd", w, k)
        return s, norm

    def apply(self, h, sums):
        """The attention at the query points ``h`` ``(B, N, C)`` from the sums over all key points."""
        b, n, c = h.shape
        s, norm = sums
        q = self.q(h).reshape(b, n, self.n_heads, c // self.n_heads).softmax(dim=-1)
        num = torch.einsum("bihd,bhde->bihe", q, s)
        den = torch.einsum("bihd,bhd->bih", q, norm)
        return self.proj((q + num / den[..., None]).reshape(b, n, c))

    def forward(self, h, z, w):
        return self.apply(h, self.partial(z, w))


class _MoEFFN(nn.Module):
    """``Σ_e g_e FFN_e(h)``, ``FFN_e = Lin(C -> inner) - GELU - Lin(inner -> C)``; one expert: no gate."""

    def __init__(self, width: int, inner: int, n_experts: int):
        super().__init__()
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(width, inner), nn.GELU(), nn.Linear(inner, width)) for _ in range(n_experts)
        )

    def forward(self, h, gate):
        if gate is None:
            return self.experts[0](h)
        return torch.stack([e(h) for e in self.experts], dim=-1).mul(gate[:, :, None, :]).sum(dim=-1)


def _gate_net(spatial_dims: int, hidden: int, n_experts: int) -> nn.Sequential:
    """GNOT's ``GateNet``: ``Lin(d -> hidden) - GELU - Lin(hidden -> hidden) - GELU - Lin(hidden -> E)``."""
    return nn.Sequential(nn.Linear(spatial_dims, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                         nn.Linear(hidden, n_experts))


class _Block(nn.Module):
    """Two stages on the state ``(h, z[, third])``: the cross-attention to ``z`` with the first FFN, then the
    self-attention with the second (each a sum over the points, then pointwise). ``third`` is the points'
    coordinates when the block has its own gate (``gate_hidden``, the published layout: ``g = softmax_E(Gate(x))``
    per block), or the gate shared by all blocks (``"sciattn_v1"``)."""

    def __init__(self, width, n_heads, inner, n_experts, spatial_dims=2, gate_hidden=None):
        super().__init__()
        self.ln1, self.ln2, self.ln3, self.ln4, self.ln5 = (nn.LayerNorm(width) for _ in range(5))
        self.cross = _NormalizedLinearAttention(width, n_heads)
        self.self_attn = _NormalizedLinearAttention(width, n_heads)
        self.ffn1, self.ffn2 = _MoEFFN(width, inner, n_experts), _MoEFFN(width, inner, n_experts)
        self.gate = _gate_net(spatial_dims, gate_hidden, n_experts) if gate_hidden and n_experts > 1 else None

    def _gate(self, rest):
        if self.gate is not None:
            return self.gate(rest[1]).softmax(dim=-1)  # rest[1]: the coordinates
        return rest[1] if len(rest) > 1 else None

    def _cross_partial(self, state, w):
        return self.cross.partial(self.ln2(state[1]), w), None

    def _cross_apply(self, state, w, sums, cache):
        h, *rest = state
        h = h + self.cross.apply(self.ln1(h), sums)
        return (h + self.ln3(self.ffn1(h, self._gate(rest))), *rest)

    def _self_partial(self, state, w):
        u = self.ln4(state[0])
        return self.self_attn.partial(u, w), u

    def _self_apply(self, state, w, sums, u):
        h, *rest = state
        h = h + self.self_attn.apply(self.ln4(h) if u is None else u, sums)
        return (h + self.ln5(self.ffn2(h, self._gate(rest))), *rest)

    def stages(self):
        return [Stage(self._cross_partial, self._cross_apply), Stage(self._self_partial, self._self_apply)]


@register_operator("gnot")
class GNOT(TokenOperator):
    """GNOT neural operator (grids and point sets).

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        spatial_dims: dimension ``d`` of the domain (1, 2 or 3).
        width: token width ``C`` (upstream ``n_hidden``).
        n_layers: number of blocks.
        n_heads: attention heads (``width`` must be divisible by it).
        n_inner: FFN hidden width as a multiple of ``width``.
        mlp_layers: residual hidden layers of the input, query and output MLPs.
        n_experts: experts of the gated FFNs; 1 builds no gate.
        variant: ``"published"`` (default): every block has its own gate network
            ``Lin(d -> n_inner·C) - GELU - Lin - GELU - Lin(-> E)`` on the coordinates, as in the authors' code;
            ``"sciattn_v1"``: one gate (hidden width ``4·C``) shared by all blocks, the layout sciattn shipped
            before issue 38 (a checkpoint whose config has no ``variant`` key loads as it). With one expert
            (the default) there is no gate and the two are the same network.
    """

    # a config stored without ``variant`` was trained with sciattn's earlier layout (MLP lift and projection, ...)
    legacy_defaults = {"variant": "sciattn_v1"}

    display_name = "GNOT"
    weights_in_pos_dtype = True

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        width: int = 64,
        n_layers: int = 3,
        n_heads: int = 1,
        n_inner: int = 4,
        mlp_layers: int = 3,
        n_experts: int = 1,
        variant: str = "published",
    ) -> None:
        super().__init__()
        check_choice("variant", variant, VARIANTS)
        self.variant = variant
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("width", width),
                            ("n_layers", n_layers), ("n_heads", n_heads), ("n_inner", n_inner),
                            ("n_experts", n_experts)]:
            check_positive_int(name, value)
        if isinstance(mlp_layers, bool) or not isinstance(mlp_layers, int) or mlp_layers < 0:
            raise ValueError(f"mlp_layers: expected a non-negative int, got {mlp_layers!r}")
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        if width % n_heads:
            raise ValueError(f"n_heads: expected a divisor of width={width}, got {n_heads}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.query_mlp = _ResMLP(spatial_dims, width, width, mlp_layers)
        self.input_mlp = _ResMLP(spatial_dims + in_channels, width, width, mlp_layers)
        self.gate = None
        per_block = variant == "published"
        if n_experts > 1 and not per_block:
            self.gate = _gate_net(spatial_dims, 4 * width, n_experts)
        self.blocks = nn.ModuleList(
            _Block(width, n_heads, n_inner * width, n_experts, spatial_dims,
                   gate_hidden=n_inner * width if per_block else None) for _ in range(n_layers))
        self.output_mlp = _ResMLP(width, width, out_channels, mlp_layers)

    def lift_state(self, a, pos):
        """``(h, z)``; with ``n_experts > 1`` a third entry: the coordinates ``(B, N, d)`` (each block gates from
        them), or with ``"sciattn_v1"`` the shared gate ``softmax_E(Gate(x))`` ``(B, N, E)``."""
        h = self.query_mlp(pos)
        z = self.input_mlp(torch.cat([pos, a], dim=-1))
        if self.gate is not None:
            return h, z, self.gate(pos).softmax(dim=-1)
        return (h, z, pos) if any(b.gate is not None for b in self.blocks) else (h, z)

    def stages(self):
        return [stage for block in self.blocks for stage in block.stages()]

    def readout(self, state):
        return self.output_mlp(state[0])
