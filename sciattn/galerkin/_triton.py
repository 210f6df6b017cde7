"""Triton kernels of Galerkin attention with the per-head LayerNorm of keys and values fused in.

For every (batch b, head h), with ``LN`` the affine LayerNorm of the first ``Dn`` (``En``) features
of a key (value) row and the identity on the remaining ones (the point coordinates):

    forward    M = Σ_j w_j LN_K(k_j) LN_V(v_j)ᵀ                 (D × E, fp32)   ``_kv_kernel``
               z_i = q_i M                                                      ``_qm_kernel``
    backward   dq_i = dz_i Mᵀ,   dM = Σ_i q_iᵀ dz_i (+ an upstream dM)          ``_dq_dm_kernel``
               d LN_K(k_j) = w_j dM LN_V(v_j),   d LN_V(v_j) = w_j dMᵀ LN_K(k_j),
               dw_j = Σ_h LN_K(k_j)ᵀ dM LN_V(v_j),  then the LayerNorm backward
               and the per-program partial sums of dγ, dβ                      ``_dkv_kernel``

One pass over the key/value points builds ``M``; only ``M`` (not the N-sized normalised keys and
values) is kept for the backward, which recomputes the LayerNorm of each row in registers.
Loads and arithmetic are fp32 whatever the storage dtype (fp32/fp16/bf16). Padded rows
(``mask == False`` or beyond ``Nk``) are never read: their loads are masked and replaced by zeros,
so NaN in padding cannot leak. Reductions over the points are split over a fixed number of
programs that each write a partial sum; the partials are added by ``torch.sum`` in a fixed order,
so results are bitwise reproducible for a given device, shape and dtype (no atomics).

This module imports triton; it is loaded lazily by :mod:`sciattn.galerkin._ops` on first use.
Under ``TRITON_INTERPRET=1`` (set before this module is imported) the kernels run on CPU tensors.

Shapes (the launchers):
    q ``(B, H, Nq, D)``, k ``(B, H, Nk, D)``, v ``(B, H, Nk, E)``, w ``(B, Nk)`` normalised weights,
    mask ``(B, Nk)`` bool or None, LN weights/biases ``(H, Dn)`` / ``(H, En)`` or None;
    z ``(B, H, Nq, E)``, M ``(B, H, D, E)`` fp32. D, E <= 128.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton_helpers import MAX_HEAD_DIM, for_current_mode
from .._triton_helpers import block_size as _block

__all__ = ["INTERPRETED", "MAX_HEAD_DIM", "galerkin_forward", "galerkin_backward"]

_helpers = for_current_mode()  # the shared helpers (sciattn/_triton_helpers.py), in the mode of the kernels below
INTERPRETED, _sum, _max, _tile, _program = _helpers.jit_helpers()


@triton.jit
def _load_rows(ptr, base, offs, row_stride, col_stride, ok, cols, ncols):
    """A (rows × cols) tile in fp32; masked-off rows and columns read as 0, never from memory."""
    return _tile(ptr, base, offs, ok, row_stride, cols, ncols, col_stride).to(tl.float32)


@triton.jit
def _program_rows(s, rows_per_prog, N):
    """``[start, end)``: the rows of the ``s``-th program of a row-split kernel over ``N`` rows."""
    start = s * rows_per_prog
    return start, tl.minimum(start + rows_per_prog, N)


@triton.jit
def _layer_norm(x, cols, nnorm, g_ptr, b_ptr, eps):
    """Affine LayerNorm of the first ``nnorm`` columns of each row; later columns pass through.

    Returns (y, xhat, rstd) with xhat zero outside the normalised columns."""
    in_norm = cols < nnorm
    mean = _sum(tl.where(in_norm[None, :], x, 0.0), axis=1) / nnorm
    xc = tl.where(in_norm[None, :], x - mean[:, None], 0.0)
    var = _sum(xc * xc, axis=1) / nnorm
    rstd = 1.0 / tl.sqrt(var + eps)
    xhat = xc * rstd[:, None]
    gamma = tl.load(g_ptr + cols, mask=in_norm, other=0.0).to(tl.float32)
    beta = tl.load(b_ptr + cols, mask=in_norm, other=0.0).to(tl.float32)
    y = tl.where(in_norm[None, :], xhat * gamma[None, :] + beta[None, :], x)
    return y, xhat, rstd


@triton.jit
def _layer_norm_bwd(dy, xhat, rstd, cols, nnorm, g_ptr):
    """Input gradient of ``_layer_norm`` given the output gradient ``dy``."""
    in_norm = cols < nnorm
    gamma = tl.load(g_ptr + cols, mask=in_norm, other=0.0).to(tl.float32)
    g = tl.where(in_norm[None, :], dy * gamma[None, :], 0.0)
    mean_g = _sum(g, axis=1) / nnorm
    mean_gx = _sum(g * xhat, axis=1) / nnorm
    dx = (g - mean_g[:, None] - xhat * mean_gx[:, None]) * rstd[:, None]
    return tl.where(in_norm[None, :], dx, dy)


@triton.jit
def _row_mask(MASK, W, b, offs, NK, smb, smn, swb, swn, HAS_MASK: tl.constexpr):
    """Which rows are real key/value points, and their weights (0 elsewhere)."""
    ok = offs < NK
    if HAS_MASK:
        ok = ok & (tl.load(MASK + b * smb + offs.to(tl.int64) * smn, mask=ok, other=0) != 0)
    w = tl.load(W + b * swb + offs.to(tl.int64) * swn, mask=ok, other=0.0).to(tl.float32)
    return ok, w


@triton.jit
def _kv_rows(
    K, V, W, MASK, KG, KB, VG, VB, b, h, n0, NK, D, E, DN, EN, eps, cd, ce,
    skb, skh, skn, skd, svb, svh, svn, sve, swb, swn, smb, smn,
    HAS_MASK: tl.constexpr, HAS_NORM: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """The ``BLOCK_N`` key/value rows of (b, h) from row ``n0``: ``(offs, ok, w, kn, vn, kx, kr, vx, vr)``, the row
    indices, which are real points and their weights (:func:`_row_mask`), the fp32 key and value tiles after the
    per-head LayerNorms with ``HAS_NORM`` (as loaded without), and the LayerNorms' ``(xhat, rstd)`` of keys and of
    values for the backward (without ``HAS_NORM``: the tiles and ``w``, placeholders never read)."""
    offs = n0 + tl.arange(0, BLOCK_N)
    ok, w = _row_mask(MASK, W, b, offs, NK, smb, smn, swb, swn, HAS_MASK)
    kn = _load_rows(K, b * skb + h * skh, offs, skn, skd, ok, cd, D)
    vn = _load_rows(V, b * svb + h * svh, offs, svn, sve, ok, ce, E)
    kx, kr, vx, vr = kn, w, vn, w
    if HAS_NORM:
        kn, kx, kr = _layer_norm(kn, cd, DN, KG + h * DN, KB + h * DN, eps)
        vn, vx, vr = _layer_norm(vn, ce, EN, VG + h * EN, VB + h * EN, eps)
    return offs, ok, w, kn, vn, kx, kr, vx, vr


@triton.jit
def _kv_kernel(
    K, V, W, MASK, KG, KB, VG, VB, MPART,
    H, NK, D, E, DN, EN, eps, rows_per_prog,
    skb, skh, skn, skd, svb, svh, svn, sve, swb, swn, smb, smn,
    HAS_MASK: tl.constexpr, HAS_NORM: tl.constexpr, PREC: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    s, bh, b, h, cd, ce = _program(H, BLOCK_D, BLOCK_E)
    acc = tl.full((BLOCK_D, BLOCK_E), 0.0, tl.float32)
    start, end = _program_rows(s, rows_per_prog, NK)
    for n0 in range(start, end, BLOCK_N):
        _offs, ok, w, kt, vt, _kx, _kr, _vx, _vr = _kv_rows(
            K, V, W, MASK, KG, KB, VG, VB, b, h, n0, NK, D, E, DN, EN, eps, cd, ce,
            skb, skh, skn, skd, svb, svh, svn, sve, swb, swn, smb, smn, HAS_MASK, HAS_NORM, BLOCK_N,
        )
        kt = tl.where(ok[:, None], kt * w[:, None], 0.0)
        acc += tl.dot(tl.trans(kt), vt, input_precision=PREC)
    nsplit = tl.num_programs(0)
    out = MPART + ((bh.to(tl.int64) * nsplit + s) * D + cd[:, None]) * E + ce[None, :]
    tl.store(out, acc, mask=(cd[:, None] < D) & (ce[None, :] < E))


@triton.jit
def _qm_kernel(
    Q, M, Z,
    H, NQ, D, E, rows_per_prog,
    sqb, sqh, sqn, sqd, szb, szh, szn, sze,
    PREC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    s, bh, b, h, cd, ce = _program(H, BLOCK_D, BLOCK_E)
    mptr = M + (bh.to(tl.int64) * D + cd[:, None]) * E + ce[None, :]
    m = tl.load(mptr, mask=(cd[:, None] < D) & (ce[None, :] < E), other=0.0)
    start, end = _program_rows(s, rows_per_prog, NQ)
    for n0 in range(start, end, BLOCK_N):
        offs = n0 + tl.arange(0, BLOCK_N)
        ok = offs < NQ
        qt = _load_rows(Q, b * sqb + h * sqh, offs, sqn, sqd, ok, cd, D)
        z = tl.dot(qt, m, input_precision=PREC)
        zp = Z + b * szb + h * szh + offs.to(tl.int64)[:, None] * szn + ce[None, :] * sze
        tl.store(zp, z.to(Z.dtype.element_ty), mask=ok[:, None] & (ce[None, :] < E))


@triton.jit
def _dq_dm_kernel(
    Q, DZ, M, DQ, DMPART,
    H, NQ, D, E, rows_per_prog,
    sqb, sqh, sqn, sqd, szb, szh, szn, sze,
    PREC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    s, bh, b, h, cd, ce = _program(H, BLOCK_D, BLOCK_E)
    de = (cd[:, None] < D) & (ce[None, :] < E)
    m = tl.load(M + (bh.to(tl.int64) * D + cd[:, None]) * E + ce[None, :], mask=de, other=0.0)
    acc = tl.full((BLOCK_D, BLOCK_E), 0.0, tl.float32)
    start, end = _program_rows(s, rows_per_prog, NQ)
    for n0 in range(start, end, BLOCK_N):
        offs = n0 + tl.arange(0, BLOCK_N)
        ok = offs < NQ
        qt = _load_rows(Q, b * sqb + h * sqh, offs, sqn, sqd, ok, cd, D)
        dz = _load_rows(DZ, b * szb + h * szh, offs, szn, sze, ok, ce, E)
        dq = tl.dot(dz, tl.trans(m), input_precision=PREC)
        dqp = DQ + ((bh.to(tl.int64) * NQ + offs.to(tl.int64)[:, None]) * D + cd[None, :])
        tl.store(dqp, dq.to(DQ.dtype.element_ty), mask=ok[:, None] & (cd[None, :] < D))
        acc += tl.dot(tl.trans(qt), dz, input_precision=PREC)
    nsplit = tl.num_programs(0)
    out = DMPART + ((bh.to(tl.int64) * nsplit + s) * D + cd[:, None]) * E + ce[None, :]
    tl.store(out, acc, mask=de)


@triton.jit
def _dkv_kernel(
    K, V, W, MASK, KG, KB, VG, VB, DM, DK, DV, DWP, DKGP, DKBP, DVGP, DVBP,
    H, NK, D, E, DN, EN, eps, rows_per_prog,
    skb, skh, skn, skd, svb, svh, svn, sve, swb, swn, smb, smn,
    HAS_MASK: tl.constexpr, HAS_NORM: tl.constexpr, NEED_DW: tl.constexpr, PREC: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
):
    s, bh, b, h, cd, ce = _program(H, BLOCK_D, BLOCK_E)
    dm = tl.load(DM + (bh.to(tl.int64) * D + cd[:, None]) * E + ce[None, :],
                 mask=(cd[:, None] < D) & (ce[None, :] < E), other=0.0)
    dkg = tl.full((BLOCK_D,), 0.0, tl.float32)
    dkb = tl.full((BLOCK_D,), 0.0, tl.float32)
    dvg = tl.full((BLOCK_E,), 0.0, tl.float32)
    dvb = tl.full((BLOCK_E,), 0.0, tl.float32)
    start, end = _program_rows(s, rows_per_prog, NK)
    for n0 in range(start, end, BLOCK_N):
        offs, ok, w, kn, vn, kx, kr, vx, vr = _kv_rows(
            K, V, W, MASK, KG, KB, VG, VB, b, h, n0, NK, D, E, DN, EN, eps, cd, ce,
            skb, skh, skn, skd, svb, svh, svn, sve, swb, swn, smb, smn, HAS_MASK, HAS_NORM, BLOCK_N,
        )
        tk = tl.dot(vn, tl.trans(dm), input_precision=PREC)  # rows: dM LN(v_j)
        tv = tl.dot(kn, dm, input_precision=PREC)  # rows: dMᵀ LN(k_j)
        if NEED_DW:
            dw = tl.where(ok, _sum(kn * tk, axis=1), 0.0)
            tl.store(DWP + bh.to(tl.int64) * NK + offs, dw, mask=offs < NK)
        dkn = tl.where(ok[:, None], tk * w[:, None], 0.0)
        dvn = tl.where(ok[:, None], tv * w[:, None], 0.0)
        if HAS_NORM:
            dkg += _sum(dkn * kx, axis=0)
            dkb += _sum(dkn, axis=0)
            dvg += _sum(dvn * vx, axis=0)
            dvb += _sum(dvn, axis=0)
            dkn = _layer_norm_bwd(dkn, kx, kr, cd, DN, KG + h * DN)
            dvn = _layer_norm_bwd(dvn, vx, vr, ce, EN, VG + h * EN)
        rows = bh.to(tl.int64) * NK + offs.to(tl.int64)[:, None]
        tl.store(DK + rows * D + cd[None, :], dkn.to(DK.dtype.element_ty),
                 mask=(offs < NK)[:, None] & (cd[None, :] < D))
        tl.store(DV + rows * E + ce[None, :], dvn.to(DV.dtype.element_ty),
                 mask=(offs < NK)[:, None] & (ce[None, :] < E))
    if HAS_NORM:
        part = bh.to(tl.int64) * tl.num_programs(0) + s
        tl.store(DKGP + part * DN + cd, dkg, mask=cd < DN)
        tl.store(DKBP + part * DN + cd, dkb, mask=cd < DN)
        tl.store(DVGP + part * EN + ce, dvg, mask=ce < EN)
        tl.store(DVBP + part * EN + ce, dvb, mask=ce < EN)


# ----------------------------------------------------------------------------------------------
# Launchers


def _precision(dtype: torch.dtype, width: int) -> str:
    """fp16/bf16 inputs: one TF32 pass (fp32 range, ~fp16 mantissa). fp32 inputs keep fp32
    accuracy: 3xTF32 up to 64 wide, plain FMA dots beyond (3xTF32 would not fit shared memory)."""
    if dtype != torch.float32:
        return "tf32"
    return "tf32x3" if width <= 64 else "ieee"


# (rows per block, warps, pipeline stages) per kernel, for fp16/bf16 and for fp32 inputs, and head
# tiles up to 64 or 128 wide. Chosen from sm_90 builds (Triton's ptxas, no GPU needed; see the slow
# test in tests/sciattn/test_galerkin_triton.py) so that no kernel spills registers or exceeds
# shared memory. The 16-bit, 64-wide backward entries are the fastest of the H200 sweep in
# benchmarks/results/gpu_tuning.jsonl (N = 2^20, 8 heads × 64). Its fastest forward tiles (64 rows with
# 4 warps, 128 with 8; about 6% faster) spill registers on sm_90, so the forward keeps the
# spill-free choice; the fp32 and 128-wide entries are not yet timed on a GPU.
_CONFIGS = {
    "half": {
        "kv": {64: (32, 8, 3), 128: (16, 8, 3)},
        "qm": {64: (64, 4, 3), 128: (32, 8, 3)},
        "dq_dm": {64: (64, 8, 3), 128: (16, 8, 2)},
        "dkv": {64: (64, 8, 3), 128: (16, 8, 2)},
    },
    "fp32": {
        "kv": {64: (32, 8, 3), 128: (16, 8, 1)},
        "qm": {64: (32, 8, 3), 128: (16, 8, 3)},
        "dq_dm": {64: (16, 8, 3), 128: (16, 8, 1)},
        "dkv": {64: (16, 8, 3), 128: (16, 16, 1)},
    },
}


def _config(kernel: str, bd: int, be: int, dtype: torch.dtype) -> tuple[int, int, int]:
    table = _CONFIGS["fp32" if dtype == torch.float32 else "half"][kernel]
    return table[64 if max(bd, be) <= 64 else 128]


PROGRAMS_PER_SM = 4  # programs launched per multiprocessor by the row-split kernels


def _splits(n: int, block: int, bh: int, device: torch.device) -> tuple[int, int]:
    """(programs per (b, h), rows per program): enough programs to fill the device, each a
    whole number of blocks. Depends only on the shape and the device, so runs are reproducible."""
    n_blocks = triton.cdiv(max(n, 1), block)
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
    target = PROGRAMS_PER_SM * sms
    splits = min(n_blocks, max(1, triton.cdiv(target, bh)))
    rows = triton.cdiv(n_blocks, splits) * block
    return triton.cdiv(max(n, 1), rows), rows


def _check_device(t: torch.Tensor) -> None:
    _helpers.check_device(t, "Galerkin", __name__, INTERPRETED)


def _check_shapes(q, k, v, w, mask, kg, vg, dz=None, m=None) -> None:
    """The ops can be called directly: refuse shapes the kernels would read out of bounds."""
    bsz, h, nq, d = q.shape
    nk, e = k.shape[2], v.shape[-1]
    want = {"k": (k, (bsz, h, nk, d)), "v": (v, (bsz, h, nk, e)), "w": (w, (bsz, nk)), "mask": (mask, (bsz, nk)),
            "dz": (dz, (bsz, h, nq, e)), "m": (m, (bsz, h, d, e))}
    for name, (t, shape) in want.items():
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")
    if max(d, e) > MAX_HEAD_DIM:
        raise ValueError(f"q: expected head dims <= {MAX_HEAD_DIM}, got D={d}, E={e}")
    for name, g, width in (("k_weight", kg, d), ("v_weight", vg, e)):
        if g is not None and (g.dim() != 2 or g.shape[0] != h or not 1 <= g.shape[1] <= width):
            raise ValueError(f"{name}: expected shape ({h}, n) with 1 <= n <= {width}, got {tuple(g.shape)}")


def _norm_args(k, v, kg, kb, vg, vb, eps):
    if kg is None:
        return False, k, k, v, v, k.shape[-1], v.shape[-1], 1.0
    return True, kg.contiguous(), kb.contiguous(), vg.contiguous(), vb.contiguous(), kg.shape[-1], vg.shape[-1], eps


def galerkin_forward(q, k, v, w, mask, kg, kb, vg, vb, eps):
    """``(z, M)``: the attention output in q's dtype and the fp32 moment matrix M (see module doc)."""
    _check_device(q)
    _check_shapes(q, k, v, w, mask, kg, vg)
    bsz, h, nq, d = q.shape
    nk, e = k.shape[2], v.shape[-1]
    bd, be = _block(d), _block(e)
    has_norm, kg, kb, vg, vb, dn, en, eps = _norm_args(k, v, kg, kb, vg, vb, eps)
    m8 = mask.view(torch.uint8) if mask is not None else w
    prec = _precision(q.dtype, max(bd, be))

    block, warps, stages = _config("kv", bd, be, q.dtype)
    splits, rows = _splits(nk, block, bsz * h, q.device)
    mpart = torch.empty((bsz * h, splits, d, e), dtype=torch.float32, device=q.device)
    _kv_kernel[(splits, bsz * h)](
        k, v, w, m8, kg, kb, vg, vb, mpart,
        h, nk, d, e, dn, en, float(eps), rows,
        *k.stride(), *v.stride(), *w.stride(), *(m8.stride() if mask is not None else (0, 0)),
        HAS_MASK=mask is not None, HAS_NORM=has_norm, PREC=prec,
        BLOCK_N=block, BLOCK_D=bd, BLOCK_E=be, num_warps=warps, num_stages=stages,
    )
    m = mpart.sum(dim=1) if splits > 1 else mpart[:, 0]
    m = m.reshape(bsz, h, d, e).contiguous()

    z = torch.empty((bsz, h, nq, e), dtype=q.dtype, device=q.device)
    block, warps, stages = _config("qm", bd, be, q.dtype)
    qsplits, qrows = _splits(nq, block, bsz * h, q.device)
    _qm_kernel[(qsplits, bsz * h)](
        q, m, z, h, nq, d, e, qrows, *q.stride(), *z.stride(),
        PREC=prec, BLOCK_N=block, BLOCK_D=bd, BLOCK_E=be, num_warps=warps, num_stages=stages,
    )
    return z, m


def galerkin_backward(dz, dm_extra, q, k, v, w, mask, m, kg, kb, vg, vb, eps, need_dw):
    """Gradients ``(dq, dk, dv, dw, dkg, dkb, dvg, dvb)`` of the forward; ``dw`` is ``(B, Nk)`` when
    ``need_dw`` else empty, the LayerNorm gradients are empty without a LayerNorm."""
    _check_device(q)
    _check_shapes(q, k, v, w, mask, kg, vg, dz, m)
    if dm_extra is not None and tuple(dm_extra.shape) != tuple(m.shape):
        raise ValueError(f"dm: expected shape {tuple(m.shape)} like M, got {tuple(dm_extra.shape)}")
    bsz, h, nq, d = q.shape
    nk, e = k.shape[2], v.shape[-1]
    bd, be = _block(d), _block(e)
    user_norm = kg is not None
    has_norm, kgc, kbc, vgc, vbc, dn, en, eps = _norm_args(k, v, kg, kb, vg, vb, eps)
    prec = _precision(q.dtype, max(bd, be))
    dev = q.device

    dq = torch.empty((bsz, h, nq, d), dtype=q.dtype, device=dev)
    block, warps, stages = _config("dq_dm", bd, be, q.dtype)
    qsplits, qrows = _splits(nq, block, bsz * h, dev)
    dmpart = torch.empty((bsz * h, qsplits, d, e), dtype=torch.float32, device=dev)
    _dq_dm_kernel[(qsplits, bsz * h)](
        q, dz, m, dq, dmpart, h, nq, d, e, qrows, *q.stride(), *dz.stride(),
        PREC=prec, BLOCK_N=block, BLOCK_D=bd, BLOCK_E=be, num_warps=warps, num_stages=stages,
    )
    dm = dmpart.sum(dim=1).reshape(bsz, h, d, e)
    if dm_extra is not None:
        dm = dm + dm_extra.to(torch.float32)
    dm = dm.contiguous()

    block, warps, stages = _config("dkv", bd, be, q.dtype)
    splits, rows = _splits(nk, block, bsz * h, dev)
    dk = torch.empty((bsz, h, nk, d), dtype=k.dtype, device=dev)
    dv = torch.empty((bsz, h, nk, e), dtype=v.dtype, device=dev)
    dwp = torch.empty((bsz, h, nk) if need_dw else (1,), dtype=torch.float32, device=dev)
    npart = bsz * h * splits if has_norm else 1
    dkgp, dkbp = (torch.empty((npart, dn if has_norm else 1), dtype=torch.float32, device=dev) for _ in range(2))
    dvgp, dvbp = (torch.empty((npart, en if has_norm else 1), dtype=torch.float32, device=dev) for _ in range(2))
    m8 = mask.view(torch.uint8) if mask is not None else w
    _dkv_kernel[(splits, bsz * h)](
        k, v, w, m8, kgc, kbc, vgc, vbc, dm, dk, dv, dwp, dkgp, dkbp, dvgp, dvbp,
        h, nk, d, e, dn, en, float(eps), rows,
        *k.stride(), *v.stride(), *w.stride(), *(m8.stride() if mask is not None else (0, 0)),
        HAS_MASK=mask is not None, HAS_NORM=has_norm, NEED_DW=bool(need_dw), PREC=prec,
        BLOCK_N=block, BLOCK_D=bd, BLOCK_E=be, num_warps=warps, num_stages=stages,
    )
    dw = dwp.sum(dim=1).to(w.dtype) if need_dw else w.new_empty((0,))
    if user_norm:
        def _param_grad(part, like):
            return part.view(bsz, h, splits, -1).sum(dim=(0, 2)).to(like.dtype)

        lngrads = (_param_grad(dkgp, kg), _param_grad(dkbp, kb), _param_grad(dvgp, vg), _param_grad(dvbp, vb))
    else:
        lngrads = tuple(q.new_empty((0,)) for _ in range(4))
    return (dq, dk, dv, dw, *lngrads)
