r"""Sparse-BLAS backend of neighbourhood attention: sampled dense–dense products and sparse × dense products.

    out_i = Σ_{j∈N(i)} w_j e^{s_ij} v_j / Σ_{j∈N(i)} w_j e^{s_ij},    s_ij = scale · q_i·k_j

The attention matrix restricted to the neighbourhoods *is* a sparse matrix with the CSR pattern
of ``N``, so the operator is two library kernels around a segment softmax, in base 2 (``exp2`` is
several times cheaper than ``exp`` on CPUs; ``t_ij = log₂e·(s_ij + log w_j)``):

1. SDDMM (``torch.sparse.sampled_addmm``): ``t_ij = log₂e·scale·q_i·k_j + log₂ w_j`` at the pattern only;
2. per row: ``m_i = max_j t_ij``, ``p_ij = 2^{t_ij − m_i}``, ``Z_i = Σ_j p_ij``, ``lse_i = m_i + log₂ Z_i``;
3. SpMM (CSR ``@`` dense): ``out_i = (Σ_j p_ij v_j) / Z_i``.

The backward pass recomputes ``P_ij = 2^{t_ij − lse_i}`` from the saved inputs, output and
``lse`` (activation memory ``O(N·C)``; nothing of size ``nnz·C`` exists at any time):

    dV = Pᵀ dO,   dP_ij = dO_i·v_j (SDDMM),   dS = P ∘ (dP − rowsum(dO∘O)),
    dQ = scale·dS K,   dK = scale·dSᵀ Q,   d(log w_j) = Σ_i dS_ij,

with ``Pᵀ`` and ``dSᵀ`` as CSR matrices of the transposed pattern (a fixed permutation of the
values). The CSR index is canonicalised once and cached by the identity of the two index tensors:
columns sorted within each row, a pair listed ``m`` times merged into one entry with ``+log₂ m`` on
its logit (the same quadrature weight ``m·w_j``). Every reduction is a per-row or per-column
segment sum or a max, so results are deterministic. A row with no live key (empty, or every key at
``log w = −inf``) returns zeros and zero gradients. Plain PyTorch sparse kernels: MKL on CPUs,
cuSPARSE on CUDA.

Shapes:
    q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)`` (finite, zero on padding);
    log_w ``(B, Nk)`` (``-inf`` on padding); row_offsets ``(Nq + 1,)``; col_indices ``(nnz,)``.
    Returns ``(B, H, Nq, E)``.
"""

from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import dataclass, fields

import torch
from torch.autograd.function import once_differentiable

from .reference import neighborhood_reference

__all__ = ["SparsePlan", "build_sparse_plan", "neighborhood_sparse", "sparse_plan"]

_LOG2E = 1.0 / math.log(2.0)


@dataclass(frozen=True)
class SparsePlan:
    """Canonical CSR index and its transpose.

    Attributes:
        n_rows, n_keys: ``Nq``, ``Nk``.
        row_offsets ``(Nq + 1,)``, col_indices ``(nnz,)``: sorted, duplicate-free CSR.
        edge_rows ``(nnz,)``: row of each entry.
        log2_mult ``(nnz,)`` float64: ``log₂`` of how often the input listed the pair (``None`` if never twice).
        t_offsets ``(Nk + 1,)``, t_rows ``(nnz,)``: CSR of the transposed pattern.
        t_perm ``(nnz,)``: entry of the original pattern at each transposed position.
    """

    n_rows: int
    n_keys: int
    row_offsets: torch.Tensor
    col_indices: torch.Tensor
    edge_rows: torch.Tensor
    log2_mult: torch.Tensor | None
    t_offsets: torch.Tensor
    t_rows: torch.Tensor
    t_perm: torch.Tensor

    def to(self, device: torch.device | str) -> SparsePlan:
        return SparsePlan(**{f.name: (v.to(device) if isinstance(v := getattr(self, f.name), torch.Tensor) else v)
                             for f in fields(self)})


def build_sparse_plan(row_offsets: torch.Tensor, col_indices: torch.Tensor, n_keys: int) -> SparsePlan:
    """Canonicalise a validated CSR index over ``n_keys`` keys and build its transpose (on the CPU)."""
    ro = row_offsets.detach().to("cpu", torch.int64)
    ci = col_indices.detach().to("cpu", torch.int64)
    nq = ro.numel() - 1
    rows = torch.repeat_interleave(torch.arange(nq), ro.diff())
    pairs, mult = torch.unique(rows * n_keys + ci, return_counts=True)  # sorted by (row, col)
    rows, cols = pairs // n_keys, pairs % n_keys
    offsets = torch.zeros(nq + 1, dtype=torch.int64)
    offsets[1:] = torch.bincount(rows, minlength=nq).cumsum(0)
    perm = torch.argsort(cols * max(nq, 1) + rows)
    t_offsets = torch.zeros(n_keys + 1, dtype=torch.int64)
    t_offsets[1:] = torch.bincount(cols, minlength=n_keys).cumsum(0)
    log2_mult = torch.log2(mult.double()) if bool((mult > 1).any()) else None
    return SparsePlan(nq, n_keys, offsets, cols, rows, log2_mult, t_offsets, rows[perm], perm)


_CACHE: dict[tuple, tuple] = {}


def sparse_plan(row_offsets: torch.Tensor, col_indices: torch.Tensor, *, n_keys: int,
                device: torch.device) -> SparsePlan:
    """:func:`build_sparse_plan` on ``device``, cached by the identity and version of the index tensors
    (a layer that keeps its CSR as buffers converts it once)."""
    ident = (id(row_offsets), id(col_indices), row_offsets._version, col_indices._version, n_keys, str(device))
    hit = _CACHE.get(ident)
    if hit is not None and hit[0]() is row_offsets and hit[1]() is col_indices:
        return hit[2]
    plan = build_sparse_plan(row_offsets, col_indices, n_keys).to(device)
    if len(_CACHE) >= 16:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[ident] = (weakref.ref(row_offsets), weakref.ref(col_indices), plan)
    return plan


def _csr(offsets: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(offsets, cols, values, shape, check_invariants=False)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when its rows are unit-stride (a strided view, e.g. heads split from a
    token-major projection, feeds the forward's sparse kernels as it is: timed faster than copying
    it first on the spherical layers); a contiguous copy otherwise."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _spmm(out: torch.Tensor, a: torch.Tensor, x: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """``out = alpha·(a @ x)`` for CSR ``a`` into row-major ``out`` (several times faster than ``a @ x``)."""
    return torch.addmm(out, a, x, beta=0.0, alpha=alpha, out=out)


def _logits(plan: SparsePlan, bias: torch.Tensor, q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """Base-2 logits ``t_ij`` ``(nnz,)`` of one batch element and head (SDDMM)."""
    pattern = _csr(plan.row_offsets, plan.col_indices, bias, (plan.n_rows, plan.n_keys))
    return torch.sparse.sampled_addmm(pattern, q, k.t(), alpha=scale * _LOG2E).values()


def _row_max(plan: SparsePlan, t: torch.Tensor) -> torch.Tensor:
    """``max_j t_ij`` per row, ``-inf`` for an empty row."""
    if t.device.type == "cpu":  # a scatter-amax is about twice as fast as segment_reduce's max on CPUs
        return t.new_full((plan.n_rows,), -math.inf).scatter_reduce_(0, plan.edge_rows, t, "amax")
    return torch.segment_reduce(t, "max", offsets=plan.row_offsets)


def _biases(plan: SparsePlan, log_w: torch.Tensor) -> torch.Tensor:
    """``log₂ w_j (+ log₂ m_ij)`` per entry, ``(B, nnz)``."""
    bias = (log_w * _LOG2E).index_select(1, plan.col_indices)
    return bias if plan.log2_mult is None else bias + plan.log2_mult.to(bias.dtype)


class _SparseNeighborhoodAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_w, plan: SparsePlan, scale: float):
        b, h, nq, _ = q.shape
        e = v.shape[-1]
        acc = torch.float64 if q.dtype == torch.float64 else torch.float32
        qf, kf, vf = (_rows(t.to(acc)) for t in (q, k, v))
        bias = _biases(plan, log_w.to(acc))
        out = torch.empty(b, h, nq, e, dtype=acc, device=q.device)
        lse = torch.empty(b, h, nq, dtype=acc, device=q.device)
        rows, floor = plan.edge_rows, torch.finfo(acc).min
        for i in range(b):
            for j in range(h):
                t = _logits(plan, bias[i], qf[i, j], kf[i, j], scale)
                m = _row_max(plan, t).clamp_(min=floor)
                p = t.sub_(m.index_select(0, rows)).exp2_()
                z = torch.segment_reduce(p, "sum", offsets=plan.row_offsets).clamp_(min=1.0)  # Z ≥ 1 if any key is live
                _spmm(out[i, j], _csr(plan.row_offsets, plan.col_indices, p, (nq, plan.n_keys)), vf[i, j])
                out[i, j].div_(z[:, None])
                lse[i, j] = z.log2_().add_(m)
        ctx.save_for_backward(q, k, v, log_w, out, lse)
        ctx.plan, ctx.scale = plan, scale
        return out.to(q.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        q, k, v, log_w, out, lse = ctx.saved_tensors
        plan, scale = ctx.plan, ctx.scale
        b, h, nq, _ = q.shape
        nk = k.shape[2]
        acc = out.dtype
        qf, kf, vf = (t.to(acc).contiguous() for t in (q, k, v))  # here dense copies time faster
        go = grad_out.to(acc).contiguous()
        delta = (go * out).sum(-1)  # (B, H, Nq)
        bias = _biases(plan, log_w.to(acc))
        dq, dk, dv = torch.empty_like(qf), torch.empty_like(kf), torch.empty_like(vf)
        dlw = torch.zeros(b, nk, dtype=acc, device=q.device)
        rows, perm = plan.edge_rows, plan.t_perm
        for i in range(b):
            for j in range(h):
                p = _logits(plan, bias[i], qf[i, j], kf[i, j], scale).sub_(lse[i, j].index_select(0, rows)).exp2_()
                _spmm(dv[i, j], _csr(plan.t_offsets, plan.t_rows, p.index_select(0, perm), (nk, nq)), go[i, j])
                pattern = _csr(plan.row_offsets, plan.col_indices, p, (nq, nk))
                dp = torch.sparse.sampled_addmm(pattern, go[i, j], vf[i, j].t(), beta=0.0).values()
                ds = dp.sub_(delta[i, j].index_select(0, rows)).mul_(p)
                _spmm(dq[i, j], _csr(plan.row_offsets, plan.col_indices, ds, (nq, nk)), kf[i, j], scale)
                ds_t = ds.index_select(0, perm)
                _spmm(dk[i, j], _csr(plan.t_offsets, plan.t_rows, ds_t, (nk, nq)), qf[i, j], scale)
                dlw[i] += torch.segment_reduce(ds_t, "sum", offsets=plan.t_offsets)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dlw.to(log_w.dtype), None, None


def neighborhood_sparse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_w: torch.Tensor,
    row_offsets: torch.Tensor,
    col_indices: torch.Tensor,
    scale: float,
    plan: SparsePlan | None = None,
) -> torch.Tensor:
    """Evaluate with prepared inputs over the (cached) canonical plan of the CSR index.

    Shapes: as :func:`sciattn.neighborhood.reference.neighborhood_reference`; ``plan`` (optional) is a
    :class:`SparsePlan` of this index for ``Nk`` keys on ``q.device``; by default one is built and cached.
    Under ``torch.compile`` it defers to the (traceable) reference: sparse CSR kernels and the plan cache
    are opaque to Dynamo.
    """
    if torch.compiler.is_compiling():
        return neighborhood_reference(q, k, v, log_w, row_offsets, col_indices, scale)
    if plan is None:
        plan = sparse_plan(row_offsets, col_indices, n_keys=k.shape[2], device=q.device)
    if (plan.n_rows, plan.n_keys) != (q.shape[2], k.shape[2]):
        raise ValueError(f"plan: expected a plan for Nq={q.shape[2]} queries and Nk={k.shape[2]} keys, got "
                         f"Nq={plan.n_rows}, Nk={plan.n_keys}")
    return _SparseNeighborhoodAttention.apply(q, k, v, log_w, plan, float(scale))
