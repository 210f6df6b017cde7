r"""The ``chunked`` backend of weighted softmax attention: PyTorch's fused CPU attention by query chunks, with an
explicit backward by query chunks.

It evaluates the same quadrature as :func:`sciattn.weighted_softmax.reference.weighted_softmax_reference`,

.. math::
    o_i = \frac{\sum_j w_j e^{s_{ij}} v_j}{\sum_j w_j e^{s_{ij}}}, \qquad
    s_{ij} = \text{scale}\; q_i \cdot k_j - \lambda_h \lVert p_i - p_j \rVert \quad (\text{distance term optional}),

as a softmax of the logits ``s_ij + log w_j`` (``log w = −inf`` on padding). The ``sdpa`` backend hands
``F.scaled_dot_product_attention`` a ``(B, H, N_q, N_k)`` bias when there is a distance term and, when anything
that bias depends on needs a gradient, PyTorch differentiates it through its unfused path, which stores the
``(B, H, N_q, N_k)`` scores and probabilities. Here:

* **forward**: without a distance term, one ``F.scaled_dot_product_attention`` with the log-weights as a
  broadcast ``(B, 1, 1, N_k)`` bias (PyTorch's fused CPU kernel); with one, the same per chunk of queries, each
  chunk's bias ``log w_j − λ_h d_ij`` built in a reused buffer from its distances ``d_ij = ‖p_i − p_j‖``
  (computed once for all heads, coordinate by coordinate, without ``cdist``'s matrix-product shortcut);
* **backward** (an explicit :class:`torch.autograd.Function`), per chunk of queries: the logits again (one
  ``baddbmm`` onto the bias), ``P = softmax``, ``dP = dO Vᵀ``, ``dS = P ⊙ (dP − rowsum(dO ⊙ O))``, then
  ``dV += Pᵀ dO``, ``dQ = scale·dS K``, ``dK += scale·dSᵀ Q``, ``d log w_j = Σ_{h,i} dS``,
  ``dλ_h = −Σ dS_h ⊙ d`` and, with ``G = Σ_h (−λ_h) dS_h / d`` (zero where ``d = 0``),
  ``dp_i = p_i Σ_j G_ij − G p_k`` and ``dp_j = p_j Σ_i G_ij − Gᵀ p_q``.

Memory is ``O(chunk · N_k)`` (:data:`CHUNK_SCORES` scores per chunk) beside the inputs, never ``O(N_q · N_k)``.
A query with no live key gets zeros and zero gradients. Second derivatives (``create_graph=True``) are taken
through the reference's autograd graph; under ``torch.compile``/``torch.export``/``torch.jit.trace`` the
backend is one fused SDPA call over all queries (:func:`weighted_softmax_sdpa`): a Python loop over query chunks
would pin ``N_q`` with a guard, so an exported program would hold one resolution.

Shapes: q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)``; log_w ``(B, Nk)``; q_pos ``(B, Nq, P)``,
k_pos ``(B, Nk, P)``, distance_scale ``(H,)`` or all None; returns ``(B, H, Nq, E)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .reference import distance_bias, weighted_softmax_reference

__all__ = ["weighted_softmax_chunked", "weighted_softmax_sdpa", "CHUNK_SCORES"]

CHUNK_SCORES = 1 << 21  # scores (B·H·rows·Nk) per chunk of queries: 8 MiB in fp32
MIN_ROWS = 16


def _rows(b: int, h: int, nk: int) -> int:
    return max(MIN_ROWS, CHUNK_SCORES // max(1, b * h * nk))


def _distances(q_pos: Tensor, k_pos: Tensor, out: Tensor, tmp: Tensor) -> Tensor:
    """``out[b, i, j] = ‖q_pos[b, i] − k_pos[b, j]‖`` coordinate by coordinate (``out``, ``tmp`` ``(B, c, Nk)``)."""
    for a in range(q_pos.shape[-1]):
        diff = torch.sub(q_pos[:, :, None, a], k_pos[:, None, :, a], out=tmp)
        if a == 0:
            torch.mul(diff, diff, out=out)
        else:
            out.addcmul_(diff, diff)
    return out.sqrt_()


def _bias(log_w: Tensor, d: Tensor | None, neg_lam: Tensor | None, out: Tensor) -> Tensor:
    """``log w_j − λ_h d_ij`` into ``out`` ``(B, H, c, Nk)``."""
    if d is None:
        return out.copy_(log_w[:, None, None, :].expand_as(out))
    return torch.addcmul(log_w[:, None, None, :], d[:, None], neg_lam[None, :, None, None], out=out)


def _bmm(out: Tensor, a: Tensor, b: Tensor, accumulate: bool, alpha: float = 1.0) -> None:
    """``out (+)= alpha·a @ b`` over the (B, H) batch, per batch element (any strides)."""
    for o, x, y in zip(out, a, b):
        if accumulate:
            o.baddbmm_(x, y, alpha=alpha)
        else:
            torch.bmm(x, y, out=o)
            if alpha != 1.0:
                o.mul_(alpha)


class _ChunkedWeightedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_w, scale, q_pos, k_pos, distance_scale):
        b, h, nq, _ = q.shape
        nk = k.shape[2]
        lw = log_w.to(q.dtype)
        if distance_scale is None:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=lw[:, None, None, :], scale=scale)
        else:
            out = torch.empty(b, h, nq, v.shape[-1], dtype=q.dtype, device=q.device)
            qp, kp, neg_lam = q_pos.to(q.dtype), k_pos.to(q.dtype), -distance_scale.to(q.dtype)
            step = _rows(b, h, nk)
            d = torch.empty(b, min(step, nq), nk, dtype=q.dtype, device=q.device)
            tmp, bias = torch.empty_like(d), torch.empty(b, h, min(step, nq), nk, dtype=q.dtype, device=q.device)
            for lo in range(0, nq, step):
                hi = min(nq, lo + step)
                c = hi - lo
                dc = _distances(qp[:, lo:hi], kp, d[:, :c], tmp[:, :c])
                bc = _bias(lw, dc, neg_lam, bias[:, :, :c])
                out[:, :, lo:hi] = F.scaled_dot_product_attention(q[:, :, lo:hi], k, v, attn_mask=bc, scale=scale)
        has_key = torch.isfinite(log_w).any(dim=-1)[:, None, None, None]
        out = torch.where(has_key, out, torch.zeros((), dtype=out.dtype, device=out.device))
        ctx.save_for_backward(q, k, v, log_w, out, q_pos, k_pos, distance_scale)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, log_w, out, q_pos, k_pos, distance_scale = ctx.saved_tensors
        need = ctx.needs_input_grad
        scale = ctx.scale
        if torch.is_grad_enabled():  # create_graph=True: differentiate the reference's graph instead
            return _reference_vjp(need, dout, q, k, v, log_w, scale, q_pos, k_pos, distance_scale)
        b, h, nq, _ = q.shape
        nk = k.shape[2]
        dt, dev = q.dtype, q.device
        lw = log_w.to(dt)
        dout = dout.to(dt)
        delta = (dout * out).sum(-1, keepdim=True)  # (B, H, Nq, 1)
        distance = distance_scale is not None
        if distance:
            qp, kp, neg_lam = q_pos.to(dt), k_pos.to(dt), -distance_scale.to(dt)
        dq = torch.empty_like(q) if need[0] else None
        dk = torch.zeros_like(k) if need[1] else None
        dv = torch.zeros_like(v) if need[2] else None
        dlw = torch.zeros(b, nk, dtype=dt, device=dev) if need[3] else None
        dqp = torch.zeros(b, nq, qp.shape[-1], dtype=dt, device=dev) if distance and need[5] else None
        dkp = torch.zeros(b, nk, kp.shape[-1], dtype=dt, device=dev) if distance and need[6] else None
        dlam = torch.zeros(h, dtype=dt, device=dev) if distance and need[7] else None
        need_g = dqp is not None or dkp is not None
        step = _rows(b, h, nk)
        rows = min(step, nq)
        s_buf = torch.empty(b, h, rows, nk, dtype=dt, device=dev)
        dp_buf = torch.empty_like(s_buf)
        if distance:
            d_buf, tmp = torch.empty(b, rows, nk, dtype=dt, device=dev), torch.empty(b, rows, nk, dtype=dt, device=dev)
        kt, vt = k.transpose(-1, -2), v.transpose(-1, -2)
        for lo in range(0, nq, step):
            hi = min(nq, lo + step)
            c = hi - lo
            qc, doc = q[:, :, lo:hi], dout[:, :, lo:hi]
            dc = _distances(qp[:, lo:hi], kp, d_buf[:, :c], tmp[:, :c]) if distance else None
            p = _bias(lw, dc, neg_lam if distance else None, s_buf[:, :, :c])
            _bmm(p, qc, kt, accumulate=True, alpha=scale)  # the logits
            m = p.amax(-1, keepdim=True)
            m = torch.where(torch.isfinite(m), m, torch.zeros((), dtype=dt, device=dev))
            p.sub_(m).exp_()
            z = p.sum(-1, keepdim=True)
            p.div_(torch.where(z > 0, z, torch.ones((), dtype=dt, device=dev)))  # P; 0 on a row with no live key
            ds = dp_buf[:, :, :c]
            _bmm(ds, doc, vt, accumulate=False)  # dP
            ds.sub_(delta[:, :, lo:hi]).mul_(p)  # dS = P (dP − δ)
            if dv is not None:
                _bmm(dv, p.transpose(-1, -2), doc, accumulate=True)
            if dq is not None:
                _bmm(dq[:, :, lo:hi], ds, k, accumulate=False, alpha=scale)
            if dk is not None:
                _bmm(dk, ds.transpose(-1, -2), qc, accumulate=True, alpha=scale)
            if dlw is not None:
                dlw += ds.sum(dim=(1, 2))
            if dlam is not None:  # dλ_h = −Σ dS_h d
                for dsb, db in zip(ds, dc):
                    dlam -= dsb.reshape(h, -1) @ db.reshape(-1)
            if need_g:  # G = Σ_h (−λ_h) dS_h / d, zero where d = 0
                g = torch.stack([(neg_lam @ dsb.reshape(h, -1)).view(c, nk) for dsb in ds])
                g.mul_(torch.where(dc > 0, dc.reciprocal(), torch.zeros((), dtype=dt, device=dev)))
                if dqp is not None:
                    dqp[:, lo:hi] = qp[:, lo:hi] * g.sum(-1, keepdim=True) - torch.bmm(g, kp)
                if dkp is not None:
                    dkp += kp * g.sum(1)[..., None] - torch.bmm(g.transpose(1, 2), qp[:, lo:hi])
        if dlw is not None:
            dlw = torch.where(torch.isfinite(log_w), dlw, torch.zeros((), dtype=dt, device=dev)).to(log_w.dtype)
        grads = [dq, dk, dv, dlw, None]
        if distance:
            grads += [None if dqp is None else dqp.to(q_pos.dtype), None if dkp is None else dkp.to(k_pos.dtype),
                      None if dlam is None else dlam.to(distance_scale.dtype)]
        else:
            grads += [None, None, None]
        return tuple(g if n else None for g, n in zip(grads, need))


def _reference_vjp(need, dout, q, k, v, log_w, scale, q_pos, k_pos, distance_scale):
    """The vector-Jacobian product through the reference's autograd graph (kept when ``create_graph=True``)."""
    o = weighted_softmax_reference(q, k, v, log_w, scale, q_pos, k_pos, distance_scale)
    inputs = (q, k, v, log_w, None, q_pos, k_pos, distance_scale)
    wanted = [t for t, n in zip(inputs, need) if n and t is not None]
    got = iter(torch.autograd.grad(o, wanted, dout, create_graph=True, allow_unused=True))
    return tuple(next(got) if n and t is not None else None for t, n in zip(inputs, need))


def weighted_softmax_chunked(q, k, v, log_w, scale, q_pos=None, k_pos=None, distance_scale=None):
    """The ``chunked`` backend: prepared inputs as the functional passes them (keys, values and key positions
    zeroed on padding, ``log_w`` ``−inf`` there). Shapes: the module docstring."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return weighted_softmax_sdpa(q, k, v, log_w, scale, q_pos, k_pos, distance_scale)
    return _ChunkedWeightedSoftmax.apply(q, k, v, log_w, float(scale), q_pos, k_pos, distance_scale)


def weighted_softmax_sdpa(q, k, v, log_w, scale, q_pos=None, k_pos=None, distance_scale=None):
    """One fused SDPA call with the bias ``log w_j`` (and the distance term) as a float mask, over all queries (the
    ``sdpa`` backend, and ``chunked`` under tracing); a query with no live key gets zeros."""
    bias = log_w[:, None, None, :].to(q.dtype)
    if distance_scale is not None:
        bias = bias + distance_bias(q_pos, k_pos, distance_scale).to(q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    has_key = torch.isfinite(log_w).any(dim=-1)[:, None, None, None]
    return torch.where(has_key, out, torch.zeros((), dtype=out.dtype, device=out.device))
