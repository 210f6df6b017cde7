r"""Custom ops ``sciattn::weighted_softmax_fwd`` / ``sciattn::weighted_softmax_bwd`` around the Triton kernels.

The forward op evaluates, per (batch, head) and query,

    o_i = Σ_j e^{s_ij − lse_i} v_j,   lse_i = log Σ_j e^{s_ij},
    s_ij = scale q_i·k_j + log w_j − λ_h ‖p_i − p_j‖      (distance term optional)

(the quadrature ``Σ_j w_j e^{s} v_j / Σ_j w_j e^{s}`` of ``∫ e^{s(x,y)} v(y) dμ(y) / ∫ e^{s(x,y)} dμ(y)``)
and returns ``(o, lse)``; ``lse`` is the fp32 by-product the backward uses to recompute the
probabilities instead of storing them. Both ops are ``torch.library.custom_op`` with fake (meta)
implementations, so ``torch.compile(fullgraph=True)`` and ``torch.export`` trace through them; the
forward has an autograd formula (``register_autograd``) that calls the backward op, which returns
the gradients of q, k, v, log w and, with a distance bias, of both position sets and of ``λ``.
Both pass ``torch.library.opcheck``.

Importing this module does not import triton: the kernels (:mod:`._triton`) load on the first
call. CPU tensors run only under Triton's interpreter (``TRITON_INTERPRET=1`` before the first
call), and only when the ``triton`` backend is forced by name (see
:class:`~sciattn._dispatch.Backend` ``interpreter_devices``).

Shapes:
    q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)``; log_w ``(B, Nk)`` (``−inf`` on
    padding); q_pos ``(B, Nq, P)``, k_pos ``(B, Nk, P)``, distance_scale ``(H,)`` or all None;
    returns o ``(B, H, Nq, E)`` (q's dtype) and lse ``(B, H, Nq)`` fp32.
"""

from typing import Optional

import torch
from torch import Tensor

__all__ = ["weighted_softmax_fwd", "weighted_softmax_bwd", "weighted_softmax_triton"]


@torch.library.custom_op("sciattn::weighted_softmax_fwd", mutates_args=())
def weighted_softmax_fwd(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_w: Tensor,
    scale: float,
    q_pos: Optional[Tensor],
    k_pos: Optional[Tensor],
    distance_scale: Optional[Tensor],
) -> tuple[Tensor, Tensor]:
    from ._triton import softmax_forward

    return softmax_forward(q, k, v, log_w, scale, q_pos, k_pos, distance_scale)


@weighted_softmax_fwd.register_fake
def _fwd_fake(q, k, v, log_w, scale, q_pos, k_pos, distance_scale):
    b, h, nq, _ = q.shape
    return q.new_empty((b, h, nq, v.shape[-1])), q.new_empty((b, h, nq), dtype=torch.float32)


@torch.library.custom_op("sciattn::weighted_softmax_bwd", mutates_args=())
def weighted_softmax_bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_w: Tensor,
    out: Tensor,
    lse: Tensor,
    scale: float,
    q_pos: Optional[Tensor],
    k_pos: Optional[Tensor],
    distance_scale: Optional[Tensor],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Gradients ``(dq, dk, dv, dlog_w, dq_pos, dk_pos, ddistance_scale)`` of ``weighted_softmax_fwd``
    given the output gradient; ``dlog_w`` is fp32, the last three are empty without a distance bias."""
    from ._triton import softmax_backward

    return softmax_backward(dout, q, k, v, log_w, out, lse, scale, q_pos, k_pos, distance_scale)


@weighted_softmax_bwd.register_fake
def _bwd_fake(dout, q, k, v, log_w, out, lse, scale, q_pos, k_pos, distance_scale):
    grads = [q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
             log_w.new_empty(log_w.shape, dtype=torch.float32)]
    if distance_scale is None:
        grads += [q.new_empty((0,)) for _ in range(3)]
    else:
        grads += [q_pos.new_empty(q_pos.shape), k_pos.new_empty(k_pos.shape), distance_scale.new_empty(distance_scale.shape)]
    return tuple(grads)


def _setup_context(ctx, inputs, output):
    q, k, v, log_w, scale, q_pos, k_pos, distance_scale = inputs
    ctx.save_for_backward(q, k, v, log_w, output[0], output[1], q_pos, k_pos, distance_scale)
    ctx.scale = scale


def _backward(ctx, dout, _dlse):
    q, k, v, log_w, out, lse, q_pos, k_pos, distance_scale = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv, dlw, dqp, dkp, dlam = weighted_softmax_bwd(
        dout.contiguous(), q, k, v, log_w, out, lse, ctx.scale, q_pos, k_pos, distance_scale
    )
    need = ctx.needs_input_grad
    dlw = dlw.to(log_w.dtype) if need[3] else None
    if distance_scale is None:
        return dq, dk, dv, dlw, None, None, None, None
    return dq, dk, dv, dlw, None, dqp if need[5] else None, dkp if need[6] else None, dlam if need[7] else None


weighted_softmax_fwd.register_autograd(_backward, setup_context=_setup_context)


def weighted_softmax_triton(q, k, v, log_w, scale, q_pos=None, k_pos=None, distance_scale=None):
    """The ``triton`` backend of :func:`sciattn.weighted_softmax.weighted_softmax_attention`.

    Takes the functional's prepared inputs (log weights ``−inf`` on padding, padded keys and values
    zeroed); keys and values are cast to q's dtype, log weights to fp32 for fp16/bf16 inputs.
    Shapes: as the module docstring. Returns ``(B, H, Nq, E)``."""
    k = k.to(q.dtype)
    v = v.to(q.dtype)
    if log_w.dtype != torch.float32:
        log_w = log_w.to(torch.float32)
    out, _ = weighted_softmax_fwd(q, k, v, log_w, float(scale), q_pos, k_pos, distance_scale)
    return out
