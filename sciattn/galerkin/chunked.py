r"""The ``chunked`` backend of Galerkin attention: plain PyTorch in cache-sized chunks, with an explicit backward.

It evaluates the same quadrature as :func:`sciattn.galerkin.reference.galerkin_reference`,

.. math::
    M = \sum_j w_j\, \mathrm{LN}_K(k_j)\, \mathrm{LN}_V(v_j)^\top \quad (D \times E \text{ per batch and head}),
    \qquad z_i = q_i M,

(the LayerNorms optional; they act on the first ``Dn`` / ``En`` features, the rest pass through; padded points
have ``w_j = 0`` and their keys and values are read as zero), in two passes over memory instead of one per
elementwise operation:

* **keys and values**, in chunks of rows that fit in the cache (:data:`CHUNK_ELEMENTS` per tensor): zero the
  padding, LayerNorm, multiply by ``w_j`` and accumulate ``M += LN(k)ᵀ (w·LN(v))`` with one ``baddbmm`` per
  chunk, every intermediate in a buffer reused from chunk to chunk (no allocation per chunk);
* **queries**: ``z = q M``, one ``bmm`` per batch element into the output.

The backward (an explicit :class:`torch.autograd.Function`, not autograd's graph of the elementwise steps, which
would store and reread every intermediate) makes one chunked pass over the queries, ``dM += q_cᵀ dz_c`` and
``dq_c = dz_c Mᵀ``, and one over the keys and values, recomputing their LayerNorms:

.. math::
    \partial\mathrm{LN}(k_j) = w_j\, \mathrm{LN}(v_j)\, dM^\top, \quad
    t_j = \mathrm{LN}(k_j)\, dM, \quad \partial\mathrm{LN}(v_j) = w_j t_j, \quad
    \partial w_j = \textstyle\sum_h t_j \cdot \mathrm{LN}(v_j),

then the LayerNorm backward ``dx = r (g − mean(g) − x̂ mean(g x̂))`` with ``g = γ ⊙ ∂LN`` (and
``dγ = Σ ∂LN ⊙ x̂``, ``dβ = Σ ∂LN``). A padded point's gradients come out exactly zero (its ``w_j`` is zero and
its keys and values are replaced by zeros before anything reads them). Second derivatives
(``create_graph=True``) are taken through the reference's autograd graph.

The same loops serve the ``cpu`` backend (:mod:`._cpu`): given its kernels (``lib``), each chunk's padding,
LayerNorm and weight steps, forward and backward, are one C++ pass per tensor instead of these PyTorch steps.

Shapes: q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)``; w ``(B, Nk)`` normalised weights (zero on
padding); mask ``(B, Nk)`` bool or None; LayerNorm weights ``(H, Dn)`` / ``(H, En)``; returns ``(B, H, Nq, E)``.
Any strides (e.g. heads split from a token-major projection) are read as they are.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["galerkin_chunked", "chunked_galerkin", "CHUNK_ELEMENTS"]

CHUNK_ELEMENTS = 1 << 17  # elements per chunk of one (B, H, rows, features) tensor: 512 KiB in fp32
MIN_ROWS = 64  # rows per chunk at least, whatever B, H and the features


class _Scratch:
    """Buffers reused by every chunk of one call (a differently shaped last chunk gets its own)."""

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self.dtype, self.device, self.bufs = dtype, device, {}
        self.zero = torch.zeros((), dtype=dtype, device=device)

    def __call__(self, name: str, *shape: int) -> Tensor:
        t = self.bufs.get(name)
        if t is None or tuple(t.shape) != shape:
            t = self.bufs[name] = torch.empty(shape, dtype=self.dtype, device=self.device)
        return t


def _rows(b: int, h: int, width: int) -> int:
    return max(MIN_ROWS, CHUNK_ELEMENTS // max(1, b * h * width))


def _flat(t: Tensor) -> Tensor | None:
    """``(B, H, n, f)`` as a ``(B·H, n, f)`` view when the strides allow it, else None."""
    if t.shape[0] == 1 or t.stride(0) == t.shape[1] * t.stride(1):
        return t.view(-1, t.shape[2], t.shape[3])
    return None


def _bmm(out: Tensor, a: Tensor, b: Tensor, accumulate: bool) -> None:
    """``out (+)= a @ b`` over the (B, H) batch; a, b, out ``(B, H, ·, ·)`` (transposed views allowed)."""
    fo, fa, fb = _flat(out), _flat(a), _flat(b)
    pairs = [(fo, fa, fb)] if fo is not None and fa is not None and fb is not None else list(zip(out, a, b))
    for o, x, y in pairs:
        if accumulate:
            o.baddbmm_(x, y)
        else:
            torch.bmm(x, y, out=o)


def _layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float, s: _Scratch, tag: str):
    """``(y, x̂, r)``: y = γ x̂ + β on the first ``Dn`` features of ``x`` ``(B, H, c, F)``, the rest copied;
    x̂ the normalised features, r the reciprocal standard deviation ``(B, H, c, 1)``; all in ``s``'s buffers."""
    b, h, c, f = x.shape
    dn = weight.shape[-1]
    xs = x[..., :dn]
    mu = torch.mean(xs, -1, keepdim=True, out=s(tag + "mu", b, h, c, 1))
    xhat = torch.sub(xs, mu, out=s(tag + "xhat", b, h, c, dn))
    sq = torch.mul(xhat, xhat, out=s(tag + "sq", b, h, c, dn))
    r = torch.mean(sq, -1, keepdim=True, out=s(tag + "r", b, h, c, 1)).add_(eps).rsqrt_()
    xhat.mul_(r)
    y = s(tag + "y", b, h, c, f)
    torch.addcmul(bias[:, None, :], xhat, weight[:, None, :], out=y[..., :dn])
    if dn < f:
        y[..., dn:].copy_(x[..., dn:])
    return y, xhat, r


def _padding(mask: Tensor | None, lo: int, hi: int) -> Tensor | None:
    """The ``(B, 1, c, 1)`` keep-mask of rows ``lo:hi``, or None when they hold no padding (the usual chunk)."""
    if mask is None or bool(mask[:, lo:hi].all()):
        return None
    return mask[:, None, lo:hi, None]


def _features(x: Tensor, keep: Tensor | None, ln, s: _Scratch, tag: str):
    """A chunk of keys or values with its padding zeroed and its LayerNorm applied: ``(y, x̂, r)``
    (``x̂``, ``r`` None without a LayerNorm)."""
    if keep is not None:
        x = torch.where(keep, x, s.zero, out=s(tag + "x", *x.shape))
    if ln is None:
        return x, None, None
    return _layer_norm(x, ln[0], ln[1], ln[2], s, tag)


def _layer_norm_backward(dy: Tensor, xhat: Tensor, r: Tensor, weight: Tensor, dx: Tensor, dparams, s: _Scratch,
                         tag: str) -> None:
    """Write the gradient of the LayerNorm's input into ``dx`` (the first ``Dn`` features; the rest pass ``dy``
    through) and add those of its weight and bias to ``dparams`` ``(dγ, dβ)`` (None: not needed)."""
    b, h, c, f = dy.shape
    dn = weight.shape[-1]
    dys = dy[..., :dn]
    g = torch.mul(dys, weight[:, None, :], out=s(tag + "g", b, h, c, dn))
    m1 = torch.mean(g, -1, keepdim=True, out=s(tag + "m1", b, h, c, 1))
    gx = torch.mul(g, xhat, out=s(tag + "gx", b, h, c, dn))
    m2 = torch.mean(gx, -1, keepdim=True, out=s(tag + "m2", b, h, c, 1))
    if dparams is not None:
        dgamma, dbeta = dparams
        torch.mul(dys, xhat, out=gx)
        dgamma += gx.sum(dim=(0, 2))
        dbeta += dys.sum(dim=(0, 2))
    g.sub_(m1).addcmul_(xhat, m2, value=-1)  # g − mean(g) − x̂·mean(g x̂)
    torch.mul(g, r, out=dx[..., :dn])
    if dn < f:
        dx[..., dn:].copy_(dy[..., dn:])


def _norm_args(norm, dtype):
    if norm is None:
        return None, None
    kw, kb, vw, vb, eps = norm
    return ((kw.to(dtype).contiguous(), kb.to(dtype).contiguous(), float(eps)),
            (vw.to(dtype).contiguous(), vb.to(dtype).contiguous(), float(eps)))


def _fused_args(x: Tensor, mask: Tensor | None, lo: int, hi: int, ln):
    """The fused kernels' common arguments for rows ``lo:hi`` of ``x``: ``(x_c, keep_c, γ, β, eps)``."""
    keep = None if mask is None else mask[:, lo:hi]
    gamma, beta, eps = (None, None, 0.0) if ln is None else ln
    return x[:, :, lo:hi], keep, gamma, beta, eps


def _fused_features(lib, k, v, w, mask, lo, hi, lnk, lnv, s: _Scratch):
    """``(LN(k̃_c), w_c · LN(ṽ_c))`` of rows ``lo:hi`` (padding read as zero), each one pass of the fused kernel
    (the keys a view of ``k`` where there is nothing to do)."""
    b, h, _, d = k.shape
    xk, keep, gk, bk, eps = _fused_args(k, mask, lo, hi, lnk)
    kn = xk
    if lnk is not None or mask is not None:
        kn = s("kn", b, h, hi - lo, d)
        lib.gal_features(xk, keep, None, gk, bk, eps, kn)
    xv, keep, gv, bv, eps = _fused_args(v, mask, lo, hi, lnv)
    vw = s("vw", b, h, hi - lo, v.shape[-1])
    lib.gal_features(xv, keep, w[:, lo:hi], gv, bv, eps, vw)
    return kn, vw


def _fused_backward(lib, k, v, w, mask, lo, hi, lnk, lnv, dm: Tensor, s: _Scratch, dk, dv, dw, dpk, dpv) -> None:
    """The keys' and values' pass of the backward over rows ``lo:hi`` with the fused kernels: the products
    ``∂LN(k) = (w·LN(v)) dMᵀ`` and ``t = LN(k) dM`` in BLAS, each LayerNorm backward (with ``∂w``, ``dγ``, ``dβ``
    and ``∂LN(v) = w t``) one pass of the fused kernel."""
    b, h, c, d = *k.shape[:2], hi - lo, k.shape[-1]
    kn, vw = _fused_features(lib, k, v, w, mask, lo, hi, lnk, lnv, s)
    if dk is not None or dpk is not None:
        dkc = None if dk is None else dk[:, :, lo:hi]
        dkn = dkc if lnk is None else s("dkn", b, h, c, d)
        _bmm(dkn, vw, dm.transpose(-1, -2), accumulate=False)
        if lnk is not None:
            xk, keep, gk, bk, eps = _fused_args(k, mask, lo, hi, lnk)
            lib.gal_features_backward(xk, keep, dkn, None, gk, bk, eps, dkc, None, *(dpk or (None, None)))
    if dv is not None or dw is not None or dpv is not None:
        t = s("t", b, h, c, v.shape[-1])
        _bmm(t, kn, dm, accumulate=False)
        xv, keep, gv, bv, eps = _fused_args(v, mask, lo, hi, lnv)
        lib.gal_features_backward(xv, keep, t, w[:, lo:hi], gv, bv, eps, None if dv is None else dv[:, :, lo:hi],
                                  None if dw is None else dw[:, lo:hi], *(dpv or (None, None)))


class _ChunkedGalerkin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, w, mask, k_weight, k_bias, v_weight, v_bias, eps, lib):
        norm = None if k_weight is None else (k_weight, k_bias, v_weight, v_bias, eps)
        lnk, lnv = _norm_args(norm, q.dtype)
        b, h, nk, d = k.shape
        e = v.shape[-1]
        s = _Scratch(q.dtype, q.device)
        m = torch.zeros(b, h, d, e, dtype=q.dtype, device=q.device)
        step = _rows(b, h, max(d, e))
        for lo in range(0, nk, step):
            hi = min(nk, lo + step)
            if lib is None:
                keep = _padding(mask, lo, hi)
                kn, _, _ = _features(k[:, :, lo:hi], keep, lnk, s, "k")
                vn, _, _ = _features(v[:, :, lo:hi], keep, lnv, s, "v")
                vw = torch.mul(vn, w[:, None, lo:hi, None], out=s("vw", b, h, hi - lo, e))
            else:
                kn, vw = _fused_features(lib, k, v, w, mask, lo, hi, lnk, lnv, s)
            _bmm(m, kn.transpose(-1, -2), vw, accumulate=True)
        z = torch.empty(b, h, q.shape[2], e, dtype=q.dtype, device=q.device)
        _bmm(z, q, m, accumulate=False)
        ctx.save_for_backward(q, k, v, w, mask, m, k_weight, k_bias, v_weight, v_bias)
        ctx.eps, ctx.lib = eps, lib
        return z

    @staticmethod
    def backward(ctx, dz):
        q, k, v, w, mask, m, k_weight, k_bias, v_weight, v_bias = ctx.saved_tensors
        need = ctx.needs_input_grad
        has_norm = k_weight is not None
        if torch.is_grad_enabled():  # create_graph=True: differentiate the reference's graph instead
            return _reference_vjp(need, dz, q, k, v, w, mask, k_weight, k_bias, v_weight, v_bias, ctx.eps)
        lnk, lnv = _norm_args((k_weight, k_bias, v_weight, v_bias, ctx.eps) if has_norm else None, q.dtype)
        b, h, nq, d = q.shape
        nk, e = k.shape[2], v.shape[-1]
        s = _Scratch(q.dtype, q.device)
        dz = dz.to(q.dtype)
        # Pass 1, the queries: dM = Σ_i q_iᵀ dz_i and dq_i = dz_i Mᵀ.
        dm = torch.zeros_like(m)
        dq = torch.empty_like(q) if need[0] else None
        mt = m.transpose(-1, -2)
        step = _rows(b, h, max(d, e))
        for lo in range(0, nq, step):
            hi = min(nq, lo + step)
            dzc = dz[:, :, lo:hi]
            _bmm(dm, q[:, :, lo:hi].transpose(-1, -2), dzc, accumulate=True)
            if dq is not None:
                _bmm(dq[:, :, lo:hi], dzc, mt, accumulate=False)
        # Pass 2, the keys and values (LayerNorms recomputed).
        dk = torch.empty_like(k) if need[1] else None
        dv = torch.empty_like(v) if need[2] else None
        dw = torch.zeros(b, nk, dtype=q.dtype, device=q.device) if need[3] else None
        dpk = [torch.zeros_like(p) for p in lnk[:2]] if has_norm and (need[5] or need[6]) else None
        dpv = [torch.zeros_like(p) for p in lnv[:2]] if has_norm and (need[7] or need[8]) else None
        dmt = dm.transpose(-1, -2)
        for lo in range(0, nk, step):
            hi = min(nk, lo + step)
            c = hi - lo
            if ctx.lib is not None:
                _fused_backward(ctx.lib, k, v, w, mask, lo, hi, lnk, lnv, dm, s, dk, dv, dw, dpk, dpv)
                continue
            keep = _padding(mask, lo, hi)
            wc = w[:, None, lo:hi, None]
            kn, xk, rk = _features(k[:, :, lo:hi], keep, lnk, s, "k")
            vn, xv, rv = _features(v[:, :, lo:hi], keep, lnv, s, "v")
            if dk is not None or dpk is not None:
                vw = torch.mul(vn, wc, out=s("vw", b, h, c, e))
                dkn = s("dkn", b, h, c, d) if has_norm else dk[:, :, lo:hi]
                _bmm(dkn, vw, dmt, accumulate=False)
                if has_norm:
                    dkc = dk[:, :, lo:hi] if dk is not None else s("dkc", b, h, c, d)
                    _layer_norm_backward(dkn, xk, rk, lnk[0], dkc, dpk, s, "k")
            if dv is not None or dw is not None or dpv is not None:
                t = s("t", b, h, c, e)
                _bmm(t, kn, dm, accumulate=False)
                if dw is not None:
                    tv = torch.mul(t, vn, out=s("tv", b, h, c, e))
                    dw[:, lo:hi] = tv.sum(dim=(1, 3))
                if has_norm:
                    dvn = torch.mul(t, wc, out=s("dvn", b, h, c, e))
                    dvc = dv[:, :, lo:hi] if dv is not None else s("dvc", b, h, c, e)
                    _layer_norm_backward(dvn, xv, rv, lnv[0], dvc, dpv, s, "v")
                elif dv is not None:
                    torch.mul(t, wc, out=dv[:, :, lo:hi])
        grads = [dq, dk, dv, dw, None]
        for dp, p_w, p_b in ((dpk, k_weight, k_bias), (dpv, v_weight, v_bias)):
            grads += [None, None] if dp is None else [dp[0].to(p_w.dtype), dp[1].to(p_b.dtype)]
        grads = [None if g is None or not n else g for g, n in zip(grads, need)]
        return (*grads, None, None)


def _reference_vjp(need, dz, q, k, v, w, mask, k_weight, k_bias, v_weight, v_bias, eps):
    """The vector-Jacobian product through the reference's autograd graph (kept when ``create_graph=True``)."""
    from .functional import KVNorm, _reference_backend

    norm = None if k_weight is None else KVNorm(k_weight, k_bias, v_weight, v_bias, eps)
    z = _reference_backend(q, k, v, w, mask, norm)
    inputs = (q, k, v, w, None, k_weight, k_bias, v_weight, v_bias)
    wanted = [t for t, n in zip(inputs, need) if n and t is not None]
    got = iter(torch.autograd.grad(z, wanted, dz, create_graph=True, allow_unused=True))
    return (*[next(got) if n and t is not None else None for t, n in zip(inputs, need)], None, None)


def galerkin_chunked(q: Tensor, k: Tensor, v: Tensor, w: Tensor, mask: Tensor | None, norm) -> Tensor:
    """The ``chunked`` backend: prepared inputs as the functional passes them (``w`` normalised, in q's dtype;
    ``norm`` a :class:`~sciattn.galerkin.functional.KVNorm` or None). Shapes: the module docstring.

    While tracing (``torch.compile``, ``torch.export``, ``torch.jit.trace``) it is the reference's computation,
    which those tracers record as ordinary differentiable ops (the chunk loop's ``out=`` buffers are not)."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        from .functional import _reference_backend

        return _reference_backend(q, k, v, w, mask, norm)
    return chunked_galerkin(q, k, v, w, mask, norm, None)


def chunked_galerkin(q: Tensor, k: Tensor, v: Tensor, w: Tensor, mask: Tensor | None, norm, lib) -> Tensor:
    """The chunk loops with their elementwise steps in PyTorch (``lib`` None) or in the fused CPU kernels of
    :mod:`._cpu` (``lib`` their ``torch.ops`` namespace)."""
    if norm is None:
        return _ChunkedGalerkin.apply(q, k, v, w.to(q.dtype), mask, None, None, None, None, 0.0, lib)
    return _ChunkedGalerkin.apply(q, k, v, w.to(q.dtype), mask, norm.k_weight, norm.k_bias, norm.v_weight,
                                  norm.v_bias, float(norm.eps), lib)
