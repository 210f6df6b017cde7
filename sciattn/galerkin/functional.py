"""Functional Galerkin attention with quadrature weights, masks, a fused key/value LayerNorm and
backend dispatch."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from .._attention_inputs import check_key_weights_and_mask, check_qkv, choose_backend, zero_padding
from .._backend_registry import (
    cpu_kernel_backend,
    register_backend,
    torch_backend,
    triton_backend,
)
from .._checks import check_attention_dtypes, check_quadrature_weights, check_tensor, sanitize_padded_rows
from ..domain import normalized_weights
from ._cpu import galerkin_cpu
from ._cpu import unavailable as cpu_unavailable
from ._ops import galerkin_triton
from .chunked import galerkin_chunked
from .reference import galerkin_reference

__all__ = ["galerkin_attention", "KVNorm", "head_layer_norm"]


class KVNorm(NamedTuple):
    """Per-head affine LayerNorms of keys and values, applied inside :func:`galerkin_attention`.

    ``k_weight``/``k_bias`` are ``(H, Dn)`` with ``Dn <= D``: the LayerNorm acts on the first ``Dn``
    features of every key and the remaining ``D - Dn`` (e.g. concatenated point coordinates) pass
    through unchanged; likewise ``v_weight``/``v_bias`` ``(H, En)`` for the values. ``eps`` is the
    LayerNorm epsilon (shared by both)."""

    k_weight: torch.Tensor
    k_bias: torch.Tensor
    v_weight: torch.Tensor
    v_bias: torch.Tensor
    eps: float


def head_layer_norm(t: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """Affine LayerNorm per head of the first ``weight.shape[-1]`` features; the rest pass through.

    Shapes: t ``(B, H, N, D)``; weight, bias ``(H, Dn)`` with ``Dn <= D``; returns ``(B, H, N, D)``.
    """
    dn = weight.shape[-1]
    head = F.layer_norm(t[..., :dn], (dn,), eps=eps) * weight[:, None, :].to(t.dtype) + bias[:, None, :].to(t.dtype)
    return head if dn == t.shape[-1] else torch.cat([head, t[..., dn:]], dim=-1)


def _check_kv_norm(kv_norm: object, h: int, d: int, e: int) -> KVNorm:
    if not isinstance(kv_norm, tuple) or len(kv_norm) != 5:
        raise TypeError(
            f"kv_norm: expected (k_weight, k_bias, v_weight, v_bias, eps), got {type(kv_norm).__name__} {kv_norm!r}"
        )
    norm = KVNorm(*kv_norm)
    for name, width, full in (("k", d, "D"), ("v", e, "E")):
        weight, bias = check_tensor(f"kv_norm.{name}_weight", getattr(norm, f"{name}_weight")), getattr(norm, f"{name}_bias")
        check_tensor(f"kv_norm.{name}_bias", bias)
        if weight.dim() != 2 or weight.shape[0] != h or not 1 <= weight.shape[1] <= width:
            raise ValueError(
                f"kv_norm.{name}_weight: expected shape (H={h}, n) with 1 <= n <= {full}={width}, got {tuple(weight.shape)}"
            )
        if bias.shape != weight.shape:
            raise ValueError(f"kv_norm.{name}_bias: expected shape {tuple(weight.shape)} like {name}_weight, got {tuple(bias.shape)}")
    if isinstance(norm.eps, bool) or not isinstance(norm.eps, (int, float)) or not norm.eps > 0:
        raise ValueError(f"kv_norm.eps: expected a positive float, got {norm.eps!r}")
    return norm


def galerkin_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weights: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    backend: str | None = None,
    kv_norm: KVNorm | tuple | None = None,
) -> torch.Tensor:
    r"""Softmax-free linear attention as a quadrature of an integral operator (Cao, 2021).

    .. math::
        z(x_i) = \int_\Omega (q(x_i) \cdot k(y))\, v(y)\, d\mu(y)
               \approx \sum_j w_j\, (q_i \cdot k_j)\, v_j
               = q_i \Big(\sum_j w_j\, k_j v_j^\top\Big)

    The weights are normalised per sample to sum to one over the real (unmasked) key points,
    so uniform weights reproduce the paper's ``1/n`` and non-uniform meshes get their true
    quadrature. Galerkin and Fourier attention (Cao's two types) share this integral; they
    differ only in which of Q, K, V carry the layer norm. With ``kv_norm`` the Galerkin type's
    per-head LayerNorms of K and V are applied inside the operation, ``k_j -> LN_K(k_j)`` and
    ``v_j -> LN_V(v_j)``, which lets the ``triton`` backend fuse them into its single pass over
    the points instead of materialising normalised copies.

    Equivalent PyTorch for uniform weights and no mask::

        k, v = head_layer_norm(k, kw, kb, eps), head_layer_norm(v, vw, vb, eps)  # if kv_norm
        z = q @ (k.transpose(-1, -2) @ v) / k.shape[-2]

    Backends: ``triton`` (fused kernels, the default on CUDA), ``cpu`` (``chunked``'s chunk loops with the
    padding, LayerNorm and weight passes of each chunk fused in C++ kernels built on first use,
    :mod:`sciattn.galerkin._cpu`; the default on the CPU for fp32/fp64 where they build), ``chunked`` (plain
    PyTorch in cache-sized chunks with an explicit backward, :mod:`sciattn.galerkin.chunked`; the CPU default
    where ``cpu`` does not build or ``SCIATTN_CPU_KERNELS=0``) and ``reference`` (the float64 oracle,
    :mod:`sciattn.galerkin.reference`).
    Backends (``sciattn.available_backends()``) receive ``fn(q, k, v, w, mask, kv_norm)`` with the
    normalised weights ``w`` ``(B, Nk)`` (zero on padding; fp32 for fp16/bf16 inputs) and must ignore
    whatever padded rows of ``k`` and ``v`` hold.

    Args:
        dtypes: q, k, v floating and of one dtype; weights floating of any precision; an integer or bool
            tensor is a TypeError naming the argument (the policy in :mod:`sciattn._checks`).
        q: ``(B, H, Nq, D)`` queries.
        k: ``(B, H, Nk, D)`` keys.
        v: ``(B, H, Nk, E)`` values.
        weights: ``(Nk,)`` or ``(B, Nk)`` quadrature weights of the key/value points; ``None``
            means uniform. At real points they must be finite and ``>= 0`` with a positive total
            per sample (they are normalised by it), else ``ValueError``; at padded points they
            may hold anything. The check reads values (a host sync on an accelerator) and is
            skipped under ``torch.compile``/``torch.export``/``torch.jit.trace``.
        mask: ``(B, Nk)`` bool, True for real key/value points; every sample needs at least one
            (else ``ValueError``). Padded points contribute nothing, whatever values (NaN, ±inf)
            their keys, values and weights hold, to the outputs or to any gradient. With
            ``Nq == Nk`` (self-attention on a padded batch) the mask indexes the queries too: a
            padded query row may hold anything as well; its output is computed with non-finite
            entries read as zero (finite, meaningless) and every gradient stays finite.
        backend: force a backend by name (see :func:`sciattn.available_backends`).
        kv_norm: ``(k_weight, k_bias, v_weight, v_bias, eps)`` (a :class:`KVNorm`) to LayerNorm
            keys and values per head first; the weights are ``(H, Dn)`` / ``(H, En)`` and normalise
            the first ``Dn`` / ``En`` features only, so concatenated coordinates pass through.

    Returns:
        ``(B, H, Nq, E)``.
    """
    check_attention_dtypes(q, k, v, weights=weights)
    b, h, nk, d = check_qkv(q, k, v)
    check_key_weights_and_mask(weights, mask, b, nk, "the key/value points")
    norm = None if kv_norm is None else _check_kv_norm(kv_norm, h, d, v.shape[-1])
    check_quadrature_weights("weights", weights, mask, need_mass=True)
    chosen = choose_backend(
        "galerkin", backend, q, v, mask=mask, weights=weights, grad_inputs=(q, k, v, weights, *(norm[:4] if norm else ()))
    )
    wdtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    w = normalized_weights(weights, mask, (b, nk), wdtype, q.device)
    if mask is not None and q.shape[2] == nk:  # self-attention layout: the mask indexes the queries too
        q = sanitize_padded_rows(q, mask[:, None, :, None])
    return chosen.fn(q, k, v, w, mask, norm)


def _reference_backend(q, k, v, w, mask, norm):
    """Zero the padding, LayerNorm (if asked), then the plain-PyTorch quadrature."""
    if mask is not None:
        k, v = zero_padding(mask[:, None, :, None], k, v)
    if norm is not None:
        k = head_layer_norm(k, norm.k_weight, norm.k_bias, norm.eps)
        v = head_layer_norm(v, norm.v_weight, norm.v_bias, norm.eps)
    return galerkin_reference(q, k, v, w.to(q.dtype))


register_backend(torch_backend("galerkin", "reference", _reference_backend))


# Plain PyTorch in cache-sized chunks with an explicit backward (chunked.py): the automatic choice on the CPU.
# Plain torch ops; widen to CUDA once timed there (triton is the CUDA path).
register_backend(
    torch_backend("galerkin", "chunked", galerkin_chunked, priority=5, devices=("cpu",), dtypes=(torch.float32, torch.float64))
)

# The chunk loops with their elementwise steps fused in C++ (_cpu.py, built on first use): above chunked on the CPU
# wherever they build.
register_backend(
    cpu_kernel_backend("galerkin", galerkin_cpu, priority=6, probe=cpu_unavailable)
)


# The fused kernels: the automatic choice on CUDA. On CPU tensors they run only under Triton's
# interpreter (TRITON_INTERPRET=1 before their first use) and only when forced with
# backend="triton": the automatic choice on CPU stays the reference (interpreter_devices).
register_backend(
    triton_backend(
        "galerkin",
        galerkin_triton,
        priority=10,
        tolerances={torch.float32: (1e-4, 1e-5), torch.float16: (1e-2, 5e-3), torch.bfloat16: (5e-2, 2e-2)},
    )
)
