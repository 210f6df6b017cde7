r"""The ``cpu`` backend of neighbourhood attention: fused C++ kernels over the canonical CSR index.

    out_i = Σ_{j∈N(i)} w_j e^{s_ij} v_j / Σ_{j∈N(i)} w_j e^{s_ij},    s_ij = scale · q_i·k_j

Why our own kernel: the ``sparse`` backend runs the operator as library kernels (SDDMM, a segment softmax, SpMM)
with a pass over memory per step, and at N = 2^20 points, 49 neighbours, 4 heads of 32 it reaches about 6% of
the CPU's limit (``benchmarks/kernels.py``). Here one pass per query row computes its logits (dot products with
the gathered key rows), their exponentials and the weighted sum of the gathered value rows in registers and a
row-sized buffer; the backward recomputes the probabilities from the saved log-sum-exp (``csrc/csr_attention.cpp``
states the formulas). Memory is the inputs, the output and ``lse`` ``(B, H, Nq)``: nothing of size ``nnz``.

The index is the cached canonical plan of :mod:`._sparse` (columns sorted, a pair listed ``m`` times merged with
``+log m`` on its logit), so both backends sum the same terms. The kernels are built on first use by
:mod:`sciattn._cpu_build` (no compiler, or ``SCIATTN_CPU_KERNELS=0``: the backend reports itself unavailable and
the dispatcher takes ``sparse``). float32 and float64; the float64 path equals the reference to round-off
(``tests/sciattn/test_neighborhood_cpu.py``). Like the other backends it is differentiable once; under
``torch.compile`` the backend is the (traceable) reference.

Shapes: q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)`` (finite, zero on padding); log_w ``(B, Nk)``
(``-inf`` on padding); row_offsets ``(Nq + 1,)``; col_indices ``(nnz,)``. Returns ``(B, H, Nq, E)``.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from .._cpu_build import CpuExtension, unit_stride_rows
from ._sparse import SparsePlan, sparse_plan
from .reference import neighborhood_reference

__all__ = ["neighborhood_cpu", "EXTENSION", "unavailable"]

EXTENSION = CpuExtension("sciattn_csr", Path(__file__).with_name("csrc"))


#: The backend's availability probe: why the kernels cannot be built here, or None (builds them once).
unavailable = EXTENSION.why_not


def _edge_bias(plan: SparsePlan, dtype: torch.dtype) -> torch.Tensor | None:
    return None if plan.log2_mult is None else (plan.log2_mult * math.log(2.0)).to(dtype)


class _CpuNeighborhoodAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_w, plan: SparsePlan, scale: float):
        lib = EXTENSION.load()
        b, h, nq, _ = q.shape
        qr, kr, vr = (unit_stride_rows(t) for t in (q, k, v))
        lw = log_w.to(q.dtype).contiguous()
        # token-major (B, Nq, H, E) memory seen as (B, H, Nq, E): a layer's merge of the heads is then a view
        out = torch.empty(b, nq, h, v.shape[-1], dtype=q.dtype).transpose(1, 2)
        lse = torch.empty(b, h, nq, dtype=q.dtype)
        bias = _edge_bias(plan, q.dtype)
        lib.csr_forward(qr, kr, vr, lw, plan.row_offsets, plan.col_indices, bias, scale, out, lse)
        ctx.save_for_backward(qr, kr, vr, lw, out, lse)
        ctx.plan, ctx.scale, ctx.bias, ctx.log_w_dtype = plan, scale, bias, log_w.dtype
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        q, k, v, lw, out, lse = ctx.saved_tensors
        plan, scale = ctx.plan, ctx.scale
        need = ctx.needs_input_grad
        lib = EXTENSION.load()
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)  # q's, k's and v's strides
        dlw = torch.zeros(k.shape[:3], dtype=q.dtype) if need[3] else None
        lib.csr_backward(q, k, v, lw, plan.row_offsets, plan.col_indices, ctx.bias, scale, out, lse,
                         unit_stride_rows(grad_out.to(q.dtype)), dq, dk, dv, dlw)
        if dlw is not None:
            dlw = torch.where(torch.isfinite(lw), dlw.sum(1), torch.zeros((), dtype=q.dtype)).to(ctx.log_w_dtype)
        grads = (dq, dk, dv, dlw)
        return (*(g if n else None for g, n in zip(grads, need)), None, None)


def neighborhood_cpu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_w: torch.Tensor,
                     row_offsets: torch.Tensor, col_indices: torch.Tensor, scale: float) -> torch.Tensor:
    """The ``cpu`` backend: prepared inputs as the functional passes them. Shapes: the module docstring."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return neighborhood_reference(q, k, v, log_w, row_offsets, col_indices, scale)
    plan = sparse_plan(row_offsets, col_indices, n_keys=k.shape[2], device=q.device)
    return _CpuNeighborhoodAttention.apply(q, k, v, log_w, plan, float(scale))
