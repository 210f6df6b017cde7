r"""Triton kernels of neighbourhood attention over a CSR index, with key log-weights.

For every (batch b, head h) and query i with neighbours ``N(i) = col[row[i]:row[i+1]]``, one
program runs an online (running-max) softmax over the neighbours, ``BLOCK_N`` gathered keys at
a time (the single-pass algorithm of Milakov & Gimelshein, 2018):

    s_ij  = scale q_i·k_j + log w_j,      j ∈ N(i)
    lse_i = log Σ_j e^{s_ij},   o_i = Σ_j e^{s_ij − lse_i} v_j                  ``_fwd_kernel``

No ``nnz``-sized score array exists at any time. The backward pass recomputes
``P_ij = e^{s_ij − lse_i}`` from the saved ``lse`` and, with ``Δ_i = dO_i·o_i`` and
``dS_ij = P_ij (dO_i·v_j − Δ_i)``,

    dq_i = scale Σ_{j∈N(i)} dS_ij k_j                                          ``_dq_kernel``
    dk_j = scale Σ_{i: j∈N(i)} dS_ij q_i,  dv_j = Σ_i P_ij dO_i,  d(log w_j) = Σ_{h,i} dS_ij

The key-side sums are computed one of two ways:

* ``deterministic=False``: the query-row programs of ``_dq_kernel`` scatter their terms with fp32
  atomic adds (one pass over the edges; the summation order, hence the last bits, may vary
  between runs on a GPU);
* ``deterministic=True``: ``_dkdv_kernel`` runs one program per (key, batch·head) over the
  *transposed* index (keys -> queries, built once and cached, see
  :func:`sciattn.neighborhood._ops.transposed_csr`), so every sum is accumulated in a fixed order
  by one program and the results are bitwise reproducible.

Products are evaluated as fp32 row-by-neighbour reductions (a query row meets each gathered key
once, so there is no tile for tensor cores to share). A query with no live neighbour (empty row,
or every neighbour with ``log w = −inf``) gets zeros and zero gradients. Masked loads never touch
memory outside the listed neighbours, so NaN in unreferenced or padded entries cannot leak.

This module imports triton; :mod:`sciattn.neighborhood._ops` loads it on first use. Under
``TRITON_INTERPRET=1`` (set before the first import) the kernels run on CPU tensors.

Shapes (the launchers):
    q ``(B, H, Nq, D)``, k ``(B, H, Nk, D)``, v ``(B, H, Nk, E)``, log_w ``(B, Nk)``,
    row_offsets ``(Nq + 1,)``, col_indices ``(nnz,)``; out ``(B, H, Nq, E)`` in q's dtype,
    lse ``(B, H, Nq)`` fp32. D, E <= 128.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton_helpers import MAX_HEAD_DIM, for_current_mode
from .._triton_helpers import block_size as _block
from .._triton_helpers import check_grid as _check_grid

__all__ = ["INTERPRETED", "MAX_HEAD_DIM", "neighborhood_forward", "neighborhood_backward"]

_helpers = for_current_mode()  # the shared helpers (sciattn/_triton_helpers.py), in the mode of the kernels below
INTERPRETED, _sum, _max, _tile, _program = _helpers.jit_helpers()


@triton.jit
def _row(ptr, base, cols, ncols, col_stride):
    """One feature row as fp32 (columns beyond ``ncols`` read as 0)."""
    return tl.load(ptr + base + cols * col_stride, mask=cols < ncols, other=0.0).to(tl.float32)


@triton.jit
def _gather(ptr, base, idx, ok, row_stride, cols, ncols, col_stride):
    """Rows ``idx`` of a (N, C) slab as an fp32 (BLOCK_N × BLOCK_C) tile; masked rows read 0."""
    return _tile(ptr, base, idx, ok, row_stride, cols, ncols, col_stride).to(tl.float32)


@triton.jit
def _csr_program(ROWS, H, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    """``(r, bh, b, h, cd, ce, start, end)``: the CSR row ``r`` this program owns (its index along grid axis 0, int64),
    its batch × head, batch and head, the feature columns of its tiles, and ``[start, end)``, the row's entries in the
    index (int64)."""
    r, bh, b, h, cd, ce = _program(H, BLOCK_D, BLOCK_E)
    r = r.to(tl.int64)
    return r, bh, b, h, cd, ce, tl.load(ROWS + r).to(tl.int64), tl.load(ROWS + r + 1).to(tl.int64)


@triton.jit
def _neighbours(COLS, e0, end, BLOCK_N: tl.constexpr):
    """``(ok, idx)``: the next ``BLOCK_N`` entries of a CSR row from ``e0`` (``idx`` 0 where not ``ok``)."""
    offs = e0 + tl.arange(0, BLOCK_N)
    ok = offs < end
    return ok, tl.load(COLS + offs, mask=ok, other=0)


@triton.jit
def _log_weights(LOGW, base, idx, ok, stride):
    """``log w`` of the keys ``idx`` in fp32, ``-inf`` where not ``ok``."""
    return tl.load(LOGW + base + idx.to(tl.int64) * stride, mask=ok, other=float("-inf")).to(tl.float32)


@triton.jit
def _fwd_kernel(
    Q, K, V, LOGW, ROWS, COLS, OUT, LSE,
    H, NQ, D, E, scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, sve, slb, sln, sob, soh, son, soe,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    i, bh, b, h, cd, ce, start, end = _csr_program(ROWS, H, BLOCK_D, BLOCK_E)
    q = _row(Q, b * sqb + h * sqh + i * sqn, cd, D, sqd)
    m_i = tl.full((), float("-inf"), dtype=tl.float32)
    l_i = tl.full((), 0.0, dtype=tl.float32)
    acc = tl.full((BLOCK_E,), 0.0, dtype=tl.float32)
    for e0 in range(start, end, BLOCK_N):
        ok, j = _neighbours(COLS, e0, end, BLOCK_N)
        k = _gather(K, b * skb + h * skh, j, ok, skn, cd, D, skd)
        lw = _log_weights(LOGW, b * slb, j, ok, sln)
        s = tl.where(ok, _sum(k * q[None, :], 1) * scale + lw, float("-inf"))
        m_new = tl.maximum(m_i, _max(s, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no live neighbour yet
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe)
        v = _gather(V, b * svb + h * svh, j, ok, svn, ce, E, sve)
        l_i = l_i * alpha + _sum(p, 0)
        acc = acc * alpha + _sum(p[:, None] * v, 0)
        m_i = m_new
    has_key = l_i > 0
    out = acc / tl.where(has_key, l_i, 1.0)
    lse = tl.where(has_key, m_i + tl.log(tl.where(has_key, l_i, 1.0)), 0.0)
    tl.store(OUT + b * sob + h * soh + i * son + ce * soe, out.to(OUT.dtype.element_ty), mask=ce < E)
    tl.store(LSE + bh.to(tl.int64) * NQ + i, lse)


@triton.jit
def _dq_kernel(
    Q, K, V, LOGW, ROWS, COLS, DO, LSE, DELTA, DQ, DK32, DV32, DLW32,
    H, NQ, NK, D, E, scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, sve, slb, sln, sdb, sdh, sdn, sde,
    ATOMIC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    i, bh, b, h, cd, ce, start, end = _csr_program(ROWS, H, BLOCK_D, BLOCK_E)
    q = _row(Q, b * sqb + h * sqh + i * sqn, cd, D, sqd)
    do = _row(DO, b * sdb + h * sdh + i * sdn, ce, E, sde)
    lse = tl.load(LSE + bh.to(tl.int64) * NQ + i)
    delta = tl.load(DELTA + bh.to(tl.int64) * NQ + i)
    dq = tl.full((BLOCK_D,), 0.0, dtype=tl.float32)
    for e0 in range(start, end, BLOCK_N):
        ok, j = _neighbours(COLS, e0, end, BLOCK_N)
        k = _gather(K, b * skb + h * skh, j, ok, skn, cd, D, skd)
        v = _gather(V, b * svb + h * svh, j, ok, svn, ce, E, sve)
        lw = _log_weights(LOGW, b * slb, j, ok, sln)
        s = _sum(k * q[None, :], 1) * scale + lw
        p = tl.where(ok, tl.exp(s - lse), 0.0)
        ds = p * (_sum(v * do[None, :], 1) - delta)
        dq += _sum(ds[:, None] * k, 0)
        if ATOMIC:
            rows = bh.to(tl.int64) * NK + j.to(tl.int64)
            tl.atomic_add(DK32 + rows[:, None] * D + cd[None, :], (ds * scale)[:, None] * q[None, :],
                          mask=ok[:, None] & (cd[None, :] < D), sem="relaxed")
            tl.atomic_add(DV32 + rows[:, None] * E + ce[None, :], p[:, None] * do[None, :],
                          mask=ok[:, None] & (ce[None, :] < E), sem="relaxed")
            tl.atomic_add(DLW32 + b * NK + j.to(tl.int64), ds, mask=ok, sem="relaxed")
    tl.store(DQ + (bh.to(tl.int64) * NQ + i) * D + cd, (dq * scale).to(DQ.dtype.element_ty), mask=cd < D)


@triton.jit
def _dkdv_kernel(
    Q, K, V, LOGW, TROWS, TCOLS, DO, LSE, DELTA, DK, DV, DLWP,
    H, NQ, NK, D, E, scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, sve, slb, sln, sdb, sdh, sdn, sde,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    j, bh, b, h, cd, ce, start, end = _csr_program(TROWS, H, BLOCK_D, BLOCK_E)
    k = _row(K, b * skb + h * skh + j * skn, cd, D, skd)
    v = _row(V, b * svb + h * svh + j * svn, ce, E, sve)
    lw = tl.load(LOGW + b * slb + j * sln).to(tl.float32)
    dk = tl.full((BLOCK_D,), 0.0, dtype=tl.float32)
    dv = tl.full((BLOCK_E,), 0.0, dtype=tl.float32)
    dlw = tl.full((BLOCK_N,), 0.0, dtype=tl.float32)
    for e0 in range(start, end, BLOCK_N):
        ok, i = _neighbours(TCOLS, e0, end, BLOCK_N)
        i = i.to(tl.int64)
        q = _gather(Q, b * sqb + h * sqh, i, ok, sqn, cd, D, sqd)
        do = _gather(DO, b * sdb + h * sdh, i, ok, sdn, ce, E, sde)
        lse = tl.load(LSE + bh.to(tl.int64) * NQ + i, mask=ok, other=0.0)
        delta = tl.load(DELTA + bh.to(tl.int64) * NQ + i, mask=ok, other=0.0)
        s = _sum(q * k[None, :], 1) * scale + lw
        p = tl.where(ok, tl.exp(s - lse), 0.0)
        ds = p * (_sum(do * v[None, :], 1) - delta)
        dv += _sum(p[:, None] * do, 0)
        dk += _sum(ds[:, None] * q, 0)
        dlw += ds
    row = bh.to(tl.int64) * NK + j
    tl.store(DK + row * D + cd, (dk * scale).to(DK.dtype.element_ty), mask=cd < D)
    tl.store(DV + row * E + ce, dv.to(DV.dtype.element_ty), mask=ce < E)
    tl.store(DLWP + row, _sum(dlw, 0))


# ----------------------------------------------------------------------------------------------
# Launchers


def _config(bd: int, be: int, kernel: str) -> tuple[int, int]:
    """(neighbours per step, warps). Head tiles up to 64 wide: the fastest of the sweep in
    ``benchmarks/results/gpu_tuning.jsonl`` (H200, 1° sphere, fp32, 64 channels; a query meets 10-40
    neighbours, so narrow steps and one or two warps per query keep more queries in flight). Wider
    tiles keep the spill-free sm_90 choice, not yet timed on hardware."""
    if max(bd, be) <= 64:
        return (16, 1) if kernel == "fwd" else (16, 2)
    return (32, 4) if kernel == "fwd" else (16, 4)


def _check_device(t: torch.Tensor) -> None:
    _helpers.check_device(t, "neighbourhood", __name__, INTERPRETED)


def neighborhood_forward(q, k, v, log_w, row_offsets, col_indices, scale):
    """``(out, lse)``: the attention output in q's dtype and the fp32 row log-normalisers."""
    _check_device(q)
    _check_grid(q.shape[0] * q.shape[1])
    row_offsets, col_indices = row_offsets.contiguous(), col_indices.contiguous()
    bsz, h, nq, d = q.shape
    e = v.shape[-1]
    out = torch.empty((bsz, h, nq, e), dtype=q.dtype, device=q.device)
    lse = torch.empty((bsz, h, nq), dtype=torch.float32, device=q.device)
    if nq == 0 or bsz * h == 0:
        return out, lse
    bd, be = _block(d), _block(e)
    bn, warps = _config(bd, be, "fwd")
    _fwd_kernel[(nq, bsz * h)](
        q, k, v, log_w, row_offsets, col_indices, out, lse,
        h, nq, d, e, float(scale),
        *q.stride(), *k.stride(), *v.stride(), *log_w.stride(), *out.stride(),
        BLOCK_N=bn, BLOCK_D=bd, BLOCK_E=be, num_warps=warps,
    )
    return out, lse


def neighborhood_backward(dout, q, k, v, log_w, row_offsets, col_indices, out, lse, scale, transpose=None):
    """Gradients ``(dq, dk, dv, dlog_w)`` of :func:`neighborhood_forward`; ``dlog_w`` is fp32 ``(B, Nk)``.

    With ``transpose = (t_offsets (Nk + 1,), t_rows (nnz,))``, the transposed index, the key-side
    gradients come from the deterministic per-key kernel; with ``None``, from fp32 atomics."""
    _check_device(q)
    _check_grid(q.shape[0] * q.shape[1])
    row_offsets, col_indices = row_offsets.contiguous(), col_indices.contiguous()
    bsz, h, nq, d = q.shape
    nk, e = k.shape[2], v.shape[-1]
    dev = q.device
    dq = torch.zeros((bsz, h, nq, d), dtype=q.dtype, device=dev)
    if nq == 0 or nk == 0 or bsz * h == 0:
        return (dq, torch.zeros_like(k), torch.zeros_like(v),
                torch.zeros((bsz, nk), dtype=torch.float32, device=dev))
    bd, be = _block(d), _block(e)
    bn, warps = _config(bd, be, "bwd")
    delta = (dout.to(torch.float32) * out.to(torch.float32)).sum(-1).contiguous()
    strides = (*q.stride(), *k.stride(), *v.stride(), *log_w.stride(), *dout.stride())
    meta = dict(BLOCK_N=bn, BLOCK_D=bd, BLOCK_E=be, num_warps=warps)
    if transpose is None:
        dk32 = torch.zeros((bsz, h, nk, d), dtype=torch.float32, device=dev)
        dv32 = torch.zeros((bsz, h, nk, e), dtype=torch.float32, device=dev)
        dlw = torch.zeros((bsz, nk), dtype=torch.float32, device=dev)
        _dq_kernel[(nq, bsz * h)](
            q, k, v, log_w, row_offsets, col_indices, dout, lse, delta, dq, dk32, dv32, dlw,
            h, nq, nk, d, e, float(scale), *strides, ATOMIC=True, **meta,
        )
        return dq, dk32.to(k.dtype), dv32.to(v.dtype), dlw
    t_offsets, t_rows = (t.contiguous() for t in transpose)
    _dq_kernel[(nq, bsz * h)](
        q, k, v, log_w, row_offsets, col_indices, dout, lse, delta, dq, dq, dq, dq,
        h, nq, nk, d, e, float(scale), *strides, ATOMIC=False, **meta,
    )
    dk = torch.empty((bsz, h, nk, d), dtype=k.dtype, device=dev)
    dv = torch.empty((bsz, h, nk, e), dtype=v.dtype, device=dev)
    dlwp = torch.empty((bsz, h, nk), dtype=torch.float32, device=dev)
    _dkdv_kernel[(nk, bsz * h)](
        q, k, v, log_w, t_offsets, t_rows, dout, lse, delta, dk, dv, dlwp,
        h, nq, nk, d, e, float(scale), *strides, **meta,
    )
    return dq, dk, dv, dlwp.sum(dim=1)
