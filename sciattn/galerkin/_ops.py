"""Custom ops ``sciattn::galerkin_fwd`` / ``sciattn::galerkin_bwd`` around the Triton kernels.

The forward op evaluates, per (batch, head),

    M = Σ_j w_j LN_K(k_j) LN_V(v_j)ᵀ ,   z_i = q_i M

(the quadrature of ``∫ (q(x)·LN k(y)) LN v(y) dμ(y)``; the LayerNorms are optional and act on the
first ``Dn`` / ``En`` features, the rest pass through) and returns ``(z, M)``. ``M`` is an fp32
``(B, H, D, E)`` by-product that the backward reuses instead of any N-sized intermediate. The ops
are registered with ``torch.library.custom_op`` with fake (meta) implementations, so
``torch.compile(fullgraph=True)`` and ``torch.export`` trace through them, and the forward has an
autograd formula (``register_autograd``) that calls the backward op. Both pass
``torch.library.opcheck``. The backward op has no autograd formula of its own, so second
derivatives (``create_graph=True``) need the reference backend.

Importing this module does not import triton: the kernels (:mod:`._triton`) load on the first call.
On CPU tensors they run only under Triton's interpreter (``TRITON_INTERPRET=1`` set before the
first call): the backend's ``interpreter_devices`` then add the CPU, but only for a caller that forces
the backend by name (see :class:`sciattn._dispatch.Backend`), so automatic selection never lands on
the slow interpreter even when the variable is set for the whole process.

Shapes:
    q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)``; w ``(B, Nk)`` normalised weights
    (zero on padding); mask ``(B, Nk)`` bool or None; k_weight/k_bias ``(H, Dn)``, v_weight/v_bias
    ``(H, En)`` or None; returns z ``(B, H, Nq, E)`` (q's dtype) and M ``(B, H, D, E)`` fp32.
"""

from typing import Optional

import torch
from torch import Tensor

__all__ = [
    "galerkin_fwd",
    "galerkin_bwd",
    "galerkin_triton",
]


@torch.library.custom_op("sciattn::galerkin_fwd", mutates_args=())
def galerkin_fwd(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    w: Tensor,
    mask: Optional[Tensor],
    k_weight: Optional[Tensor],
    k_bias: Optional[Tensor],
    v_weight: Optional[Tensor],
    v_bias: Optional[Tensor],
    eps: float,
) -> tuple[Tensor, Tensor]:
    from ._triton import galerkin_forward

    return galerkin_forward(q, k, v, w, mask, k_weight, k_bias, v_weight, v_bias, eps)


@galerkin_fwd.register_fake
def _galerkin_fwd_fake(q, k, v, w, mask, k_weight, k_bias, v_weight, v_bias, eps):
    b, h, nq, d = q.shape
    e = v.shape[-1]
    return q.new_empty((b, h, nq, e)), q.new_empty((b, h, d, e), dtype=torch.float32)


@torch.library.custom_op("sciattn::galerkin_bwd", mutates_args=())
def galerkin_bwd(
    dz: Tensor,
    dm: Optional[Tensor],
    q: Tensor,
    k: Tensor,
    v: Tensor,
    w: Tensor,
    mask: Optional[Tensor],
    m: Tensor,
    k_weight: Optional[Tensor],
    k_bias: Optional[Tensor],
    v_weight: Optional[Tensor],
    v_bias: Optional[Tensor],
    eps: float,
    need_dw: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv, dw, dk_weight, dk_bias, dv_weight, dv_bias) of ``galerkin_fwd``
    given the output gradients ``dz`` and (optionally) ``dm``; dw is empty unless ``need_dw``,
    the LayerNorm gradients are empty without a LayerNorm."""
    from ._triton import galerkin_backward

    return galerkin_backward(dz, dm, q, k, v, w, mask, m, k_weight, k_bias, v_weight, v_bias, eps, need_dw)


@galerkin_bwd.register_fake
def _galerkin_bwd_fake(dz, dm, q, k, v, w, mask, m, k_weight, k_bias, v_weight, v_bias, eps, need_dw):
    dw = w.new_empty(w.shape) if need_dw else w.new_empty((0,))
    ln = [q.new_empty((0,)) if p is None else p.new_empty(p.shape) for p in (k_weight, k_bias, v_weight, v_bias)]
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dw, *ln)


def _setup_context(ctx, inputs, output):
    q, k, v, w, mask, k_weight, k_bias, v_weight, v_bias, eps = inputs
    ctx.save_for_backward(q, k, v, w, mask, output[1], k_weight, k_bias, v_weight, v_bias)
    ctx.eps = eps


def _backward(ctx, dz, dm):
    q, k, v, w, mask, m, k_weight, k_bias, v_weight, v_bias = ctx.saved_tensors
    if dz is None:
        dz = torch.zeros((*q.shape[:3], v.shape[-1]), dtype=q.dtype, device=q.device)
    need_dw = bool(ctx.needs_input_grad[3])
    dq, dk, dv, dw, dkw, dkb, dvw, dvb = galerkin_bwd(
        dz, dm, q, k, v, w, mask, m, k_weight, k_bias, v_weight, v_bias, ctx.eps, need_dw
    )
    has_norm = k_weight is not None
    ln = (dkw, dkb, dvw, dvb) if has_norm else (None, None, None, None)
    return dq, dk, dv, dw if need_dw else None, None, *ln, None


galerkin_fwd.register_autograd(_backward, setup_context=_setup_context)


def galerkin_triton(
    q: Tensor, k: Tensor, v: Tensor, w: Tensor, mask: Optional[Tensor], norm
) -> Tensor:
    """The ``triton`` backend of :func:`sciattn.galerkin.galerkin_attention`: the fused custom op.

    Shapes: as the module docstring; ``norm`` is a :class:`~sciattn.galerkin.functional.KVNorm`
    or None. Returns z ``(B, H, Nq, E)``."""
    if norm is None:
        z, _ = galerkin_fwd(q, k, v, w, mask, None, None, None, None, 0.0)
    else:
        z, _ = galerkin_fwd(q, k, v, w, mask, norm.k_weight, norm.k_bias, norm.v_weight, norm.v_bias, float(norm.eps))
    return z
