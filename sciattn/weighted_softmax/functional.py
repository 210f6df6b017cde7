r"""Quadrature-weighted softmax attention with an optional distance bias, and its backends.

.. math::
    u(x_i) = \frac{\int_\Omega e^{s(x_i, y)} v(y)\, d\mu(y)}{\int_\Omega e^{s(x_i, y)}\, d\mu(y)}
           \approx \frac{\sum_j w_j e^{s_{ij}} v_j}{\sum_j w_j e^{s_{ij}}},
    \qquad s_{ij} = \text{scale}\; q_i \cdot k_j \;-\; \lambda_h \lVert p_i - p_j \rVert

The quadrature weight of each key multiplies its exponential in numerator and denominator, so
it enters as the additive logit bias ``log w_j`` and any softmax kernel with a bias runs it. This
one operation serves spherical global attention (``w_j`` the area weights), ball attention
(the distance term, learned ``λ_h`` per head) and codomain attention.

Equivalent PyTorch::

    bias = torch.log(w)[:, None, None, :] - lam[None, :, None, None] * torch.cdist(pq, pk)[:, None]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)

Backends (see :func:`sciattn.available_backends`): ``cpu`` (:mod:`._cpu`: fused C++ kernels built on first
use, queries in the vector lanes, an online softmax over key blocks with the distance bias computed in registers
and a recompute backward, so nothing of size ``Nq · Nk`` is stored; the default on the CPU for fp32/fp64 where it
builds, ``SCIATTN_CPU_KERNELS=0`` switches it off), ``chunked`` (:mod:`.chunked`: PyTorch's fused
CPU attention by chunks of queries, each chunk's distance bias built in a reused buffer, and an explicit
chunked backward, so no ``(B, H, Nq, Nk)`` tensor is stored; the CPU default where ``cpu`` does not build),
``sdpa`` (PyTorch's fused attention with the bias as a float mask; the default elsewhere), ``flex`` (``flex_attention`` with the bias as a score mod and the
padding as a block mask), ``triton`` (:mod:`._triton`: a fused online-softmax kernel that computes
the log-weight and distance biases in registers, so neither the scores nor a distance matrix is
ever stored, and differentiates all of them) and ``reference`` (chunked plain PyTorch, the oracle).

Default order: ``cpu`` > ``chunked`` (CPU, fp32/fp64) > ``sdpa`` > ``flex`` > ``triton`` > ``reference``. Timed on an H200
(``benchmarks/results/gpu_targets.jsonl``, ``gpu_tuning.jsonl``), the ``triton`` kernel with weights only
is slower than PyTorch's flash SDPA without bias (forward 1.06×, forward+backward 1.66× its time
at N = 2^16 with the tuned tiles), so ``sdpa`` stays first. Its advantage is memory: with a
distance bias ``sdpa`` materialises a ``(B, H, Nq, Nk)`` bias and ``flex`` (``flex_attention``
called eagerly, i.e. its unfused path) the scores; ``triton`` stores neither.
"""

from __future__ import annotations

import math

import torch

from .._attention_inputs import (
    check_key_weights_and_mask,
    check_qkv,
    choose_backend,
    mask_padding,
    prepare_key_logweights,
    zero_padding,
)
from .._backend_registry import (
    cpu_kernel_backend,
    flex_unavailable,
    register_backend,
    standard_tolerances,
    torch_backend,
    triton_backend,
)
from .._checks import check_attention_dtypes, check_quadrature_weights, check_rank, sanitize_padded_rows
from ._cpu import unavailable as cpu_unavailable
from ._cpu import weighted_softmax_cpu
from ._ops import weighted_softmax_triton
from .chunked import weighted_softmax_chunked, weighted_softmax_sdpa
from .reference import weighted_softmax_reference

__all__ = ["weighted_softmax_attention"]


def _check_inputs(q, k, v, weights, mask, q_pos, k_pos, distance_scale):
    check_attention_dtypes(q, k, v, weights=weights, q_pos=q_pos, k_pos=k_pos, distance_scale=distance_scale)
    b, h, nk, d = check_qkv(q, k, v)
    nq = q.shape[2]
    check_key_weights_and_mask(weights, mask, b, nk)
    check_quadrature_weights("weights", weights, mask)
    given = [t is not None for t in (q_pos, k_pos, distance_scale)]
    if any(given) and not all(given):
        raise ValueError(
            "distance bias: expected q_pos, k_pos and distance_scale together, got "
            f"q_pos={'set' if given[0] else None}, k_pos={'set' if given[1] else None}, "
            f"distance_scale={'set' if given[2] else None}"
        )
    if all(given):
        check_rank("q_pos", q_pos, 3, "(B, Nq, P)")
        check_rank("k_pos", k_pos, 3, "(B, Nk, P)")
        if tuple(q_pos.shape[:2]) != (b, nq):
            raise ValueError(f"q_pos: expected shape ({b}, {nq}, P), got {tuple(q_pos.shape)}")
        if tuple(k_pos.shape[:2]) != (b, nk) or k_pos.shape[2] != q_pos.shape[2]:
            raise ValueError(f"k_pos: expected shape ({b}, {nk}, {q_pos.shape[2]}), got {tuple(k_pos.shape)}")
        if tuple(distance_scale.shape) != (h,):
            raise ValueError(f"distance_scale: expected shape ({h},) (one per head), got {tuple(distance_scale.shape)}")


def weighted_softmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weights: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    q_pos: torch.Tensor | None = None,
    k_pos: torch.Tensor | None = None,
    distance_scale: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Softmax attention whose keys carry quadrature weights (and optionally a distance bias).

    Args:
        dtypes: q, k, v floating and of one dtype; weights, q_pos, k_pos, distance_scale floating of any precision; an integer or bool
            tensor is a TypeError naming the argument (the policy in :mod:`sciattn._checks`).
        q: ``(B, H, Nq, D)``; k: ``(B, H, Nk, D)``; v: ``(B, H, Nk, E)``.
        weights: ``(Nk,)`` or ``(B, Nk)`` key weights (``None``: uniform), finite and ``>= 0``
            at real keys (else ``ValueError``; anything at padded keys). Only relative weights
            matter; zero-weight keys are ignored. The check reads values (a host sync on an
            accelerator) and is skipped under ``torch.compile``/``torch.export``/``torch.jit.trace``.
        mask: ``(B, Nk)`` bool, True for real keys. Padded keys never contribute, whatever
            values (NaN, ±inf) their keys, values, positions and weights hold, to the outputs or
            to any gradient; a query with no real key (or only zero weights) returns zeros. With
            ``Nq == Nk`` (self-attention on a padded batch) the mask indexes the queries too: a
            padded query row (and its ``q_pos``) may hold anything as well; its output is
            computed with non-finite entries read as zero and every gradient stays finite.
        scale: logit scale, default ``1/sqrt(D)``.
        q_pos, k_pos, distance_scale: ``(B, Nq, P)``, ``(B, Nk, P)`` and ``(H,)``: adds
            ``-distance_scale[h] * ‖q_pos_i - k_pos_j‖`` to the logits (differentiable in all three).
        backend: force a backend by name.

    Returns:
        ``(B, H, Nq, E)``.
    """
    _check_inputs(q, k, v, weights, mask, q_pos, k_pos, distance_scale)
    b, h, nk, d = k.shape
    chosen = choose_backend(
        "weighted_softmax", backend, q, v, mask=mask, weights=weights,
        grad_inputs=(q, k, v, weights, q_pos, k_pos, distance_scale),
    )
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    log_w = prepare_key_logweights(weights, mask, (b, nk), acc, q.device)
    if mask is not None:
        q, k, v = mask_padding(q, k, v, mask)
        (k_pos,) = zero_padding(mask[..., None], k_pos)
        if q_pos is not None and q.shape[2] == nk:  # self-attention layout: the mask indexes the queries too
            q_pos = sanitize_padded_rows(q_pos, mask[..., None])
    return chosen.fn(q, k, v, log_w, scale, q_pos, k_pos, distance_scale)


_sdpa = weighted_softmax_sdpa


def _flex(q, k, v, log_w, scale, q_pos, k_pos, distance_scale):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, h, nq, _ = q.shape
    nk = k.shape[2]
    finite = torch.isfinite(log_w)
    log_w0 = torch.where(finite, log_w, torch.zeros_like(log_w)).to(q.dtype)

    def key_is_real(b_, h_, q_idx, kv_idx):
        return finite[b_, kv_idx]

    if distance_scale is None:

        def score_mod(score, b_, h_, q_idx, kv_idx):
            return score + log_w0[b_, kv_idx]

    else:
        qp, kp, lam = q_pos.to(q.dtype), k_pos.to(q.dtype), distance_scale.to(q.dtype)

        def score_mod(score, b_, h_, q_idx, kv_idx):
            diff = qp[b_, q_idx] - kp[b_, kv_idx]
            return score + log_w0[b_, kv_idx] - lam[h_] * torch.sqrt((diff * diff).sum(-1))

    block_mask = create_block_mask(key_is_real, b, None, nq, nk, device=q.device.type)
    out = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
    has_key = finite.any(dim=-1)[:, None, None, None]
    return torch.where(has_key, out, torch.zeros((), dtype=out.dtype, device=out.device))


register_backend(
    torch_backend(
        "weighted_softmax", "sdpa", _sdpa, priority=10,
        tolerances=standard_tolerances(torch.float32, torch.float16, torch.bfloat16),
    )
)
# PyTorch's fused CPU attention by query chunks with an explicit chunked backward (chunked.py): the automatic
# choice on the CPU, where sdpa stores (B, H, Nq, Nk) scores to differentiate a distance bias.
register_backend(
    torch_backend(
        "weighted_softmax", "chunked", weighted_softmax_chunked, priority=11, devices=("cpu",),
        dtypes=(torch.float32, torch.float64),
    )
)
# The fused C++ kernels (_cpu.py, built on first use): above chunked on the CPU wherever they build (faster
# forward and forward+backward: benchmarks/results/kernels.jsonl).
register_backend(
    cpu_kernel_backend("weighted_softmax", weighted_softmax_cpu, priority=12, probe=cpu_unavailable)
)
register_backend(
    torch_backend(
        "weighted_softmax", "flex", _flex, priority=5, backward_devices=("cuda",), available=flex_unavailable,
        tolerances=standard_tolerances(torch.float32),
    )
)
register_backend(torch_backend("weighted_softmax", "reference", weighted_softmax_reference))


# bf16: d(distance_scale) sums dS_ij·‖p_i − p_j‖ over every (b, i, j), and Σ_j dS_ij = 0 per row, so
# the cancellation amplifies bf16's rounding of the output and its gradient (measured on a
# (1, 2, 17, 40) case: max error 6.7e-2·max|dλ| in bf16, 2.8e-3 in fp16, 4e-7 in fp32).
_TRITON_TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.float16: (1e-2, 2e-3), torch.bfloat16: (5e-2, 2e-2)}

# The fused kernels; priority below sdpa and flex (timed on an H200, see the module docstring).
# On CPU tensors they run only under Triton's interpreter (TRITON_INTERPRET=1 before their first
# use) and only when forced with backend="triton" (interpreter_devices).
register_backend(triton_backend("weighted_softmax", weighted_softmax_triton, priority=1, tolerances=_TRITON_TOLERANCES))
