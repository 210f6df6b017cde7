r"""The ``cpu`` backend of weighted softmax attention: fused C++ kernels with an online softmax.

.. math::
    o_i = \frac{\sum_j w_j e^{s_{ij}} v_j}{\sum_j w_j e^{s_{ij}}}, \qquad
    s_{ij} = \text{scale}\; q_i \cdot k_j - \lambda_h \lVert p_i - p_j \rVert \quad (\text{distance term optional}),

evaluated as a softmax of the logits ``s_ij + log w_j`` (``log w = −inf`` on padding).

Why our own kernel: the ``chunked`` backend builds the distance bias ``log w_j − λ_h d_ij`` per chunk of queries
with elementwise passes over ``(B, H, chunk, N_k)`` memory and differentiates it as a chain of elementwise torch
ops, so at N = 16,384 it reaches about a fifth of the matmul rate. Here a block of 64 queries sits in the vector
lanes (transposed), the scores of a block of keys are lane-wise fused multiply-adds, the bias (a square root per
pair) is added in registers, and an online softmax over key blocks keeps a running maximum and sum per lane; the
forward saves ``lse`` ``(B, H, Nq)`` and the backward recomputes the probabilities from it, per query block and key
block (``csrc/ops.cpp`` states the formulas, including ``G = Σ_h (−λ_h) dS_h / d`` with 0 where
``d = 0``, the convention of ``cdist``'s gradient that the reference uses). Memory is the inputs, the outputs,
``lse`` and per-head partial sums of the position and weight gradients: nothing of size ``Nq · Nk``.

Head sizes that are not multiples of 16 are padded with zero channels (the scores and outputs do not change). The
kernels are built on first use by :mod:`sciattn._cpu_build` (no compiler, or ``SCIATTN_CPU_KERNELS=0``: the
backend reports itself unavailable and the dispatcher takes ``chunked``). float32 and float64 run the same code;
float64 equals the reference to round-off (``tests/sciattn/test_weighted_softmax_cpu.py``). Second derivatives
(``create_graph=True``) go through the reference's autograd graph; under ``torch.compile``/``torch.export``/
``torch.jit.trace`` the backend is one fused SDPA call (:func:`.chunked.weighted_softmax_sdpa`).

Shapes: q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)`` (finite, zero on padding); log_w ``(B, Nk)``;
q_pos ``(B, Nq, P)``, k_pos ``(B, Nk, P)``, distance_scale ``(H,)`` or all None. Returns ``(B, H, Nq, E)``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from .._cpu_build import CpuExtension
from .chunked import _reference_vjp, weighted_softmax_sdpa

__all__ = ["weighted_softmax_cpu", "EXTENSION", "unavailable"]

EXTENSION = CpuExtension("sciattn_wsm", Path(__file__).with_name("csrc"))
LANES = 16  # the kernels' head sizes are multiples of this


#: The backend's availability probe: why the kernels cannot be built here, or None (builds them once).
unavailable = EXTENSION.why_not


def _padded(t: torch.Tensor) -> torch.Tensor:
    extra = -t.shape[-1] % LANES
    return (F.pad(t, (0, extra)) if extra else t).contiguous()


class _CpuWeightedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_w, scale, q_pos, k_pos, distance_scale):
        lib = EXTENSION.load()
        b, h, nq, _ = q.shape
        e = v.shape[-1]
        dt = q.dtype
        qc, kc, vc = _padded(q), _padded(k.to(dt)), _padded(v.to(dt))
        lw = log_w.to(dt).contiguous()
        pos = (None, None, None)
        if distance_scale is not None:
            pos = tuple(t.to(dt).contiguous() for t in (q_pos, k_pos, distance_scale))
        out = torch.empty(b, h, nq, vc.shape[-1], dtype=dt)
        lse = torch.empty(b, h, nq, dtype=dt)
        lib.wsm_forward(qc, kc, vc, lw, *pos, scale, out, lse)
        out = out[..., :e] if vc.shape[-1] != e else out
        ctx.save_for_backward(q, k, v, log_w, out, lse, q_pos, k_pos, distance_scale)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, log_w, out, lse, q_pos, k_pos, distance_scale = ctx.saved_tensors
        need, scale = ctx.needs_input_grad, ctx.scale
        if torch.is_grad_enabled():  # create_graph=True: differentiate the reference's graph instead
            return _reference_vjp(need, dout, q, k, v, log_w, scale, q_pos, k_pos, distance_scale)
        lib = EXTENSION.load()
        b, h, nq, d = q.shape
        nk, e, dt = k.shape[2], v.shape[-1], q.dtype
        dout = dout.to(dt)
        delta = (dout * out).sum(-1).contiguous()
        qc, kc, vc, gc = _padded(q), _padded(k.to(dt)), _padded(v.to(dt)), _padded(dout)
        lw = log_w.to(dt).contiguous()
        dq, dk, dv = torch.empty_like(qc), torch.zeros_like(kc), torch.zeros_like(vc)
        dlw = torch.zeros(b, h, nk, dtype=dt) if need[3] else None
        distance = distance_scale is not None
        pos, pgrads = (None, None, None), (None, None, None)
        if distance:
            pos = tuple(t.to(dt).contiguous() for t in (q_pos, k_pos, distance_scale))
            p = q_pos.shape[-1]
            pgrads = (torch.zeros(b, h, nq, p, dtype=dt), torch.zeros(b, h, nk, p, dtype=dt),
                      torch.zeros(b, h, dtype=dt))
        lib.wsm_backward(qc, kc, vc, lw, *pos, scale, lse, delta, gc, dq, dk, dv, dlw, *pgrads)
        if dlw is not None:
            dlw = torch.where(torch.isfinite(log_w), dlw.sum(1), torch.zeros((), dtype=dt)).to(log_w.dtype)
        grads = [dq[..., :d], dk[..., :d].to(k.dtype), dv[..., :e].to(v.dtype), dlw, None]
        if distance:
            dqp, dkp, dlam = pgrads
            grads += [dqp.sum(1).to(q_pos.dtype), dkp.sum(1).to(k_pos.dtype), dlam.sum(0).to(distance_scale.dtype)]
        else:
            grads += [None, None, None]
        return tuple(g if n else None for g, n in zip(grads, need))


def weighted_softmax_cpu(q, k, v, log_w, scale, q_pos=None, k_pos=None, distance_scale=None):
    """The ``cpu`` backend: prepared inputs as the functional passes them (keys, values and key positions zeroed on
    padding, ``log_w`` ``−inf`` there). Shapes: the module docstring."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return weighted_softmax_sdpa(q, k, v, log_w, scale, q_pos, k_pos, distance_scale)
    return _CpuWeightedSoftmax.apply(q, k, v, log_w, float(scale), q_pos, k_pos, distance_scale)
