r"""Triton kernels of quadrature-weighted softmax attention with an optional distance bias.

For every (batch b, head h) and query i the forward pass evaluates, in one pass over the keys
with an online (running-max) softmax,

    s_ij  = scale q_i·k_j + log w_j − λ_h ‖p_i − p_j‖                    (distance term optional)
    lse_i = log Σ_j e^{s_ij},    o_i = Σ_j e^{s_ij − lse_i} v_j            ``_fwd_kernel``

and never materialises the ``Nq × Nk`` scores or the distance matrix. The backward pass recomputes
``P_ij = e^{s_ij − lse_i}`` from the saved ``lse`` (O(N) activation memory) and, with
``Δ_i = dO_i·o_i`` and ``dS_ij = P_ij (dO_i·v_j − Δ_i)``,

    dv_j = Σ_i P_ij dO_i,   dk_j = scale Σ_i dS_ij q_i,   d(log w_j) = Σ_{h,i} dS_ij,
    dp_j (key positions) = Σ_{h,i} λ_h dS_ij (p_i − p_j)/‖p_i − p_j‖,
    dλ_h = −Σ_{b,i,j} dS_ij ‖p_i − p_j‖                                       ``_dkdv_kernel``
    dq_i = scale Σ_j dS_ij k_j,   dp_i (query positions) = −Σ_{h,j} λ_h dS_ij (p_i − p_j)/‖p_i − p_j‖
                                                                              ``_dq_kernel``

(the distance gradient is taken as zero where ``p_i = p_j``, like ``torch.cdist``). Each program
owns its output rows, so there are no atomics: sums over heads and blocks are written as partials
and added by ``torch.sum`` in a fixed order, and every result is bitwise reproducible for a given
device, shape and dtype.

Matrix products run on tensor cores in the storage dtype (fp16/bf16) or as 3xTF32 (fp32), always
accumulating in fp32; softmax statistics, positions and weights are fp32. Keys beyond ``Nk`` and
queries beyond ``Nq`` are never read (masked loads), and keys with ``log w_j = −inf`` (padding,
zero weight) get ``P_ij = 0`` exactly; a query with no such key gets zeros.

This module imports triton; :mod:`sciattn.weighted_softmax._ops` loads it on first use. Under
``TRITON_INTERPRET=1`` (set before the first import) the kernels run on CPU tensors.

Shapes (the launchers):
    q ``(B, H, Nq, D)``, k ``(B, H, Nk, D)``, v ``(B, H, Nk, E)``, log_w ``(B, Nk)``,
    q_pos ``(B, Nq, P)``, k_pos ``(B, Nk, P)``, distance_scale ``(H,)`` (or all three None);
    out ``(B, H, Nq, E)`` in q's dtype, lse ``(B, H, Nq)`` fp32. D, E <= 128.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton_helpers import MAX_HEAD_DIM, for_current_mode
from .._triton_helpers import block_size as _block
from .._triton_helpers import check_grid as _check_grid

__all__ = ["INTERPRETED", "MAX_HEAD_DIM", "softmax_forward", "softmax_backward"]

_helpers = for_current_mode()  # the shared helpers (sciattn/_triton_helpers.py), in the mode of the kernels below
INTERPRETED, _sum, _max, _tile, _program = _helpers.jit_helpers()


@triton.jit
def _pos_col(ptr, base, rows, ok, row_stride, c, col_stride):
    return tl.load(ptr + base + rows.to(tl.int64) * row_stride + c * col_stride, mask=ok, other=0.0).to(tl.float32)


@triton.jit
def _distance(QP, KP, qp_base, kp_base, offs_m, ok_m, offs_n, ok_n, sqpn, sqpp, skpn, skpp, NPOS: tl.constexpr):
    """‖p_i − p_j‖ for a (BLOCK_M × BLOCK_N) tile, one coordinate at a time (fp32)."""
    d2 = tl.full((offs_m.shape[0], offs_n.shape[0]), 0.0, dtype=tl.float32)
    for c in tl.static_range(NPOS):
        pq = _pos_col(QP, qp_base, offs_m, ok_m, sqpn, c, sqpp)
        pk = _pos_col(KP, kp_base, offs_n, ok_n, skpn, c, skpp)
        diff = pq[:, None] - pk[None, :]
        d2 += diff * diff
    return tl.sqrt(d2)


@triton.jit
def _mm(a, b, PREC: tl.constexpr, UPCAST: tl.constexpr):
    """``a @ b`` accumulated in fp32. ``UPCAST`` (bf16 under the interpreter, whose matmul cannot
    read bf16) multiplies the fp32 copies: bf16 products are exact in fp32, so the result is the
    tensor-core one up to the summation order."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=PREC)


@triton.jit
def _logits(q, k, lw, ok_n, scale, dist, lam, HAS_DIST: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr):
    s = _mm(q, tl.trans(k), PREC, UPCAST) * scale + lw[None, :]
    if HAS_DIST:
        s -= lam * dist
    return tl.where(ok_n[None, :], s, float("-inf"))


@triton.jit
def _key_block(K, V, LOGW, b, h, offs_n, ok_n, cd, ce, D, E, skb, skh, skn, skd, svb, svh, svn, sve, slb, sln):
    """Keys and values (storage dtype) and log-weights (fp32; ``-inf`` beyond ``Nk``) of the key rows ``offs_n``."""
    k = _tile(K, b * skb + h * skh, offs_n, ok_n, skn, cd, D, skd)
    v = _tile(V, b * svb + h * svh, offs_n, ok_n, svn, ce, E, sve)
    lw = tl.load(LOGW + b * slb + offs_n.to(tl.int64) * sln, mask=ok_n, other=float("-inf")).to(tl.float32)
    return k, v, lw


@triton.jit
def _head_scale(LAM, h, HAS_DIST: tl.constexpr):
    """``λ_h`` of the distance bias (fp32), or 0 without one."""
    lam = 0.0
    if HAS_DIST:
        lam = tl.load(LAM + h).to(tl.float32)
    return lam


@triton.jit
def _row_stats(LSE, DELTA, bh, NQ, offs_m, ok_m):
    """The saved ``lse_i`` and ``Δ_i = dO_i·o_i`` of the query rows ``offs_m`` (fp32)."""
    lse = tl.load(LSE + bh.to(tl.int64) * NQ + offs_m, mask=ok_m, other=0.0)
    delta = tl.load(DELTA + bh.to(tl.int64) * NQ + offs_m, mask=ok_m, other=0.0)
    return lse, delta


@triton.jit
def _fwd_kernel(
    Q, K, V, LOGW, QP, KP, LAM, OUT, LSE,
    H, NQ, NK, D, E, scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, sve, slb, sln,
    sqpb, sqpn, sqpp, skpb, skpn, skpp, sob, soh, son, soe,
    HAS_DIST: tl.constexpr, NPOS: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    pid_m, bh, b, h, cd, ce = _program(H, BLOCK_D, BLOCK_E)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ok_m = offs_m < NQ
    q = _tile(Q, b * sqb + h * sqh, offs_m, ok_m, sqn, cd, D, sqd)
    lam = _head_scale(LAM, h, HAS_DIST)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.full((BLOCK_M,), 0.0, dtype=tl.float32)
    acc = tl.full((BLOCK_M, BLOCK_E), 0.0, dtype=tl.float32)
    for n0 in range(0, NK, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        ok_n = offs_n < NK
        k, v, lw = _key_block(K, V, LOGW, b, h, offs_n, ok_n, cd, ce, D, E, skb, skh, skn, skd, svb, svh, svn, sve, slb, sln)
        dist = 0.0
        if HAS_DIST:
            dist = _distance(QP, KP, b * sqpb, b * skpb, offs_m, ok_m, offs_n, ok_n, sqpn, sqpp, skpn, skpp, NPOS)
        s = _logits(q, k, lw, ok_n, scale, dist, lam, HAS_DIST, PREC, UPCAST)
        m_new = tl.maximum(m_i, _max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with no live key yet
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + _sum(p, 1)
        acc = acc * alpha[:, None] + _mm(p.to(v.dtype), v, PREC, UPCAST)
        m_i = m_new
    has_key = l_i > 0
    out = acc / tl.where(has_key, l_i, 1.0)[:, None]
    lse = tl.where(has_key, m_i + tl.log(tl.where(has_key, l_i, 1.0)), 0.0)
    op = OUT + b * sob + h * soh + offs_m.to(tl.int64)[:, None] * son + ce[None, :] * soe
    tl.store(op, out.to(OUT.dtype.element_ty), mask=ok_m[:, None] & (ce[None, :] < E))
    tl.store(LSE + bh.to(tl.int64) * NQ + offs_m, lse, mask=ok_m)


@triton.jit
def _dkdv_kernel(
    Q, K, V, LOGW, QP, KP, LAM, DO, LSE, DELTA, DK, DV, DLWP, DKPP, DLAMP,
    H, NQ, NK, D, E, scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, sve, slb, sln,
    sqpb, sqpn, sqpp, skpb, skpn, skpp, sdb, sdh, sdn, sde,
    HAS_DIST: tl.constexpr, NPOS: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    pid_n, bh, b, h, cd, ce = _program(H, BLOCK_D, BLOCK_E)
    cp = tl.arange(0, BLOCK_P)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ok_n = offs_n < NK
    k, v, lw = _key_block(K, V, LOGW, b, h, offs_n, ok_n, cd, ce, D, E, skb, skh, skn, skd, svb, svh, svn, sve, slb, sln)
    lam = _head_scale(LAM, h, HAS_DIST)
    dk = tl.full((BLOCK_N, BLOCK_D), 0.0, dtype=tl.float32)
    dv = tl.full((BLOCK_N, BLOCK_E), 0.0, dtype=tl.float32)
    dlw = tl.full((BLOCK_N,), 0.0, dtype=tl.float32)
    dkp = tl.full((BLOCK_N, BLOCK_P), 0.0, dtype=tl.float32)
    dlam = tl.full((BLOCK_N,), 0.0, dtype=tl.float32)
    for m0 in range(0, NQ, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        ok_m = offs_m < NQ
        q = _tile(Q, b * sqb + h * sqh, offs_m, ok_m, sqn, cd, D, sqd)
        do = _tile(DO, b * sdb + h * sdh, offs_m, ok_m, sdn, ce, E, sde)
        lse, delta = _row_stats(LSE, DELTA, bh, NQ, offs_m, ok_m)
        dist = 0.0
        if HAS_DIST:
            dist = _distance(QP, KP, b * sqpb, b * skpb, offs_m, ok_m, offs_n, ok_n, sqpn, sqpp, skpn, skpp, NPOS)
        s = _logits(q, k, lw, ok_n, scale, dist, lam, HAS_DIST, PREC, UPCAST)
        p = tl.where(ok_m[:, None], tl.exp(s - lse[:, None]), 0.0)
        dv += _mm(tl.trans(p.to(do.dtype)), do, PREC, UPCAST)
        dp = _mm(do, tl.trans(v), PREC, UPCAST)
        ds = p * (dp - delta[:, None])
        dk += _mm(tl.trans(ds.to(q.dtype)), q, PREC, UPCAST)
        dlw += _sum(ds, 0)
        if HAS_DIST:
            dlam -= _sum(ds * dist, 0)
            coef = tl.where(dist > 0, ds * lam / tl.where(dist > 0, dist, 1.0), 0.0)
            for c in tl.static_range(NPOS):
                pq = _pos_col(QP, b * sqpb, offs_m, ok_m, sqpn, c, sqpp)
                pk = _pos_col(KP, b * skpb, offs_n, ok_n, skpn, c, skpp)
                g = _sum(coef * (pq[:, None] - pk[None, :]), 0)
                dkp += tl.where(cp[None, :] == c, g[:, None], 0.0)
    rows = bh.to(tl.int64) * NK + offs_n.to(tl.int64)
    tl.store(DK + rows[:, None] * D + cd[None, :], (dk * scale).to(DK.dtype.element_ty),
             mask=ok_n[:, None] & (cd[None, :] < D))
    tl.store(DV + rows[:, None] * E + ce[None, :], dv.to(DV.dtype.element_ty), mask=ok_n[:, None] & (ce[None, :] < E))
    tl.store(DLWP + rows, dlw, mask=ok_n)
    if HAS_DIST:
        tl.store(DKPP + rows[:, None] * NPOS + cp[None, :], dkp, mask=ok_n[:, None] & (cp[None, :] < NPOS))
        tl.store(DLAMP + bh.to(tl.int64) * tl.num_programs(0) + pid_n, _sum(dlam, 0))


@triton.jit
def _dq_kernel(
    Q, K, V, LOGW, QP, KP, LAM, DO, LSE, DELTA, DQ, DQPP,
    H, NQ, NK, D, E, scale,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, sve, slb, sln,
    sqpb, sqpn, sqpp, skpb, skpn, skpp, sdb, sdh, sdn, sde,
    HAS_DIST: tl.constexpr, NPOS: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    pid_m, bh, b, h, cd, ce = _program(H, BLOCK_D, BLOCK_E)
    cp = tl.arange(0, BLOCK_P)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ok_m = offs_m < NQ
    q = _tile(Q, b * sqb + h * sqh, offs_m, ok_m, sqn, cd, D, sqd)
    do = _tile(DO, b * sdb + h * sdh, offs_m, ok_m, sdn, ce, E, sde)
    lse, delta = _row_stats(LSE, DELTA, bh, NQ, offs_m, ok_m)
    lam = _head_scale(LAM, h, HAS_DIST)
    dq = tl.full((BLOCK_M, BLOCK_D), 0.0, dtype=tl.float32)
    dqp = tl.full((BLOCK_M, BLOCK_P), 0.0, dtype=tl.float32)
    for n0 in range(0, NK, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        ok_n = offs_n < NK
        k, v, lw = _key_block(K, V, LOGW, b, h, offs_n, ok_n, cd, ce, D, E, skb, skh, skn, skd, svb, svh, svn, sve, slb, sln)
        dist = 0.0
        if HAS_DIST:
            dist = _distance(QP, KP, b * sqpb, b * skpb, offs_m, ok_m, offs_n, ok_n, sqpn, sqpp, skpn, skpp, NPOS)
        s = _logits(q, k, lw, ok_n, scale, dist, lam, HAS_DIST, PREC, UPCAST)
        p = tl.where(ok_m[:, None], tl.exp(s - lse[:, None]), 0.0)
        dp = _mm(do, tl.trans(v), PREC, UPCAST)
        ds = p * (dp - delta[:, None])
        dq += _mm(ds.to(k.dtype), k, PREC, UPCAST)
        if HAS_DIST:
            coef = tl.where(dist > 0, ds * lam / tl.where(dist > 0, dist, 1.0), 0.0)
            for c in tl.static_range(NPOS):
                pq = _pos_col(QP, b * sqpb, offs_m, ok_m, sqpn, c, sqpp)
                pk = _pos_col(KP, b * skpb, offs_n, ok_n, skpn, c, skpp)
                g = -_sum(coef * (pq[:, None] - pk[None, :]), 1)
                dqp += tl.where(cp[None, :] == c, g[:, None], 0.0)
    rows = bh.to(tl.int64) * NQ + offs_m.to(tl.int64)
    tl.store(DQ + rows[:, None] * D + cd[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=ok_m[:, None] & (cd[None, :] < D))
    if HAS_DIST:
        tl.store(DQPP + rows[:, None] * NPOS + cp[None, :], dqp, mask=ok_m[:, None] & (cp[None, :] < NPOS))


# ----------------------------------------------------------------------------------------------
# Launchers


def _precision(dtype: torch.dtype) -> str:
    """fp32 inputs: plain fp32 dots ("ieee"); fp16/bf16 products are exact on tensor cores.

    fp32 once used 3xTF32. On an H200 with Triton 3.6 that build of ``_dkdv_kernel`` read shared
    memory out of bounds for D = 32, E = 8 (compute-sanitizer: invalid ``__shared__`` read in the
    ``tl.dot``), and the same inputs run clean with "ieee"; fp32 is not the speed path."""
    return "ieee"


def _upcast(dtype: torch.dtype) -> bool:
    return INTERPRETED and dtype == torch.bfloat16


# (BLOCK_M, BLOCK_N, warps, stages) per kernel, for 16-bit or fp32 storage and head tiles up to 64
# or 128 wide. Chosen so that ptxas for sm_90 reports no register spills with the distance bias on
# (a few hundred bytes remain for fp32 at width 128 in the backward). The 16-bit, 64-wide entry is
# the fastest of the H200 sweep in benchmarks/results/gpu_tuning.jsonl (N = 2^16, 8 heads × 64: forward
# 1.06× flash SDPA's time, forward+backward 1.66×); the others are not yet timed on a GPU.
_CONFIGS = {
    (True, False): {"fwd": (64, 128, 4, 3), "dkdv": (64, 64, 4, 3), "dq": (64, 64, 4, 3)},
    (True, True): {"fwd": (64, 32, 8, 2), "dkdv": (32, 64, 8, 2), "dq": (32, 32, 8, 2)},
    (False, False): {"fwd": (128, 32, 8, 3), "dkdv": (16, 64, 8, 2), "dq": (16, 32, 4, 2)},
    (False, True): {"fwd": (32, 32, 8, 2), "dkdv": (16, 32, 4, 2), "dq": (16, 32, 8, 2)},
}


def _config(dtype: torch.dtype, bd: int, be: int, kernel: str) -> tuple[int, int, int, int]:
    return _CONFIGS[(dtype != torch.float32, max(bd, be) > 64)][kernel]


def _check_device(t: torch.Tensor) -> None:
    _helpers.check_device(t, "weighted-softmax", __name__, INTERPRETED)


def _dist_args(q, q_pos, k_pos, distance_scale):
    """(has_dist, npos, q_pos, k_pos, lam) with harmless stand-ins when there is no distance bias."""
    if distance_scale is None:
        return False, 1, q, q, q
    return True, q_pos.shape[-1], q_pos, k_pos, distance_scale.contiguous()


def _pos_strides(has_dist, q_pos, k_pos):
    return (*q_pos.stride(), *k_pos.stride()) if has_dist else (0,) * 6


def softmax_forward(q, k, v, log_w, scale, q_pos, k_pos, distance_scale):
    """``(out, lse)``: the attention output in q's dtype and the fp32 row log-normalisers."""
    _check_device(q)
    _check_grid(q.shape[0] * q.shape[1])
    bsz, h, nq, d = q.shape
    nk, e = k.shape[2], v.shape[-1]
    out = torch.empty((bsz, h, nq, e), dtype=q.dtype, device=q.device)
    lse = torch.empty((bsz, h, nq), dtype=torch.float32, device=q.device)
    if nq == 0 or bsz * h == 0:
        return out, lse
    bd, be = _block(d), _block(e)
    bm, bn, warps, stages = _config(q.dtype, bd, be, "fwd")
    has_dist, npos, qp, kp, lam = _dist_args(q, q_pos, k_pos, distance_scale)
    _fwd_kernel[(triton.cdiv(nq, bm), bsz * h)](
        q, k, v, log_w, qp, kp, lam, out, lse,
        h, nq, nk, d, e, float(scale),
        *q.stride(), *k.stride(), *v.stride(), *log_w.stride(), *_pos_strides(has_dist, qp, kp), *out.stride(),
        HAS_DIST=has_dist, NPOS=npos, PREC=_precision(q.dtype), UPCAST=_upcast(q.dtype),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, BLOCK_E=be, num_warps=warps, num_stages=stages,
    )
    return out, lse


def softmax_backward(dout, q, k, v, log_w, out, lse, scale, q_pos, k_pos, distance_scale):
    """Gradients ``(dq, dk, dv, dlog_w, dq_pos, dk_pos, ddistance_scale)`` of :func:`softmax_forward`.

    ``dlog_w`` is fp32 ``(B, Nk)``; without a distance bias the three distance gradients are empty."""
    _check_device(q)
    _check_grid(q.shape[0] * q.shape[1])
    bsz, h, nq, d = q.shape
    nk, e = k.shape[2], v.shape[-1]
    dev = q.device
    has_dist, npos, qp, kp, lam = _dist_args(q, q_pos, k_pos, distance_scale)
    dq = torch.zeros((bsz, h, nq, d), dtype=q.dtype, device=dev)
    dk = torch.zeros((bsz, h, nk, d), dtype=k.dtype, device=dev)
    dv = torch.zeros((bsz, h, nk, e), dtype=v.dtype, device=dev)
    dlwp = torch.zeros((bsz, h, nk), dtype=torch.float32, device=dev)
    bd, be = _block(d), _block(e)
    bp = triton.next_power_of_2(npos)
    kv_m, kv_n, kv_warps, kv_stages = _config(q.dtype, bd, be, "dkdv")
    q_m, q_n, q_warps, q_stages = _config(q.dtype, bd, be, "dq")
    nblocks_n = triton.cdiv(nk, kv_n)
    dkpp = torch.zeros((bsz, h, nk, npos) if has_dist else (1,), dtype=torch.float32, device=dev)
    dqpp = torch.zeros((bsz, h, nq, npos) if has_dist else (1,), dtype=torch.float32, device=dev)
    dlamp = torch.zeros((bsz, h, nblocks_n) if has_dist else (1,), dtype=torch.float32, device=dev)
    if nq > 0 and bsz * h > 0:
        delta = (dout.to(torch.float32) * out.to(torch.float32)).sum(-1).contiguous()
        common = (
            h, nq, nk, d, e, float(scale),
            *q.stride(), *k.stride(), *v.stride(), *log_w.stride(), *_pos_strides(has_dist, qp, kp), *dout.stride(),
        )
        meta = dict(HAS_DIST=has_dist, NPOS=npos, PREC=_precision(q.dtype), UPCAST=_upcast(q.dtype),
                    BLOCK_D=bd, BLOCK_E=be, BLOCK_P=bp)
        _dkdv_kernel[(nblocks_n, bsz * h)](
            q, k, v, log_w, qp, kp, lam, dout, lse, delta, dk, dv, dlwp, dkpp, dlamp, *common,
            BLOCK_M=kv_m, BLOCK_N=kv_n, num_warps=kv_warps, num_stages=kv_stages, **meta,
        )
        _dq_kernel[(triton.cdiv(nq, q_m), bsz * h)](
            q, k, v, log_w, qp, kp, lam, dout, lse, delta, dq, dqpp, *common,
            BLOCK_M=q_m, BLOCK_N=q_n, num_warps=q_warps, num_stages=q_stages, **meta,
        )
    dlog_w = dlwp.sum(dim=1)
    if not has_dist:
        empty = q.new_empty((0,))
        return dq, dk, dv, dlog_w, empty, empty.clone(), empty.clone()
    dq_pos = dqpp.sum(dim=1).to(q_pos.dtype)
    dk_pos = dkpp.sum(dim=1).to(k_pos.dtype)
    dlam = dlamp.sum(dim=(0, 2)).to(distance_scale.dtype)
    return dq, dk, dv, dlog_w, dq_pos, dk_pos, dlam
