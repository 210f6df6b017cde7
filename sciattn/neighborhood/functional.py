r"""Sparse neighbourhood attention over a CSR index, with key quadrature weights, and its backends.

.. math::
    u(x_i) = \frac{\int_{D(x_i)} e^{s(x_i, y)} v(y)\, d\mu(y)}{\int_{D(x_i)} e^{s(x_i, y)}\, d\mu(y)}
           \approx \frac{\sum_{j \in N(i)} w_j e^{s_{ij}} v_j}{\sum_{j \in N(i)} w_j e^{s_{ij}}},
    \qquad s_{ij} = \text{scale}\; q_i \cdot k_j

``N(i)`` is the discretised neighbourhood ``D(x_i)`` of query ``i`` (a geodesic disc on the
sphere, a set of selected balls in a tree), given as a CSR index shared by the batch and heads
(:mod:`sciattn.neighborhood.csr`). With every key in every neighbourhood this is
:func:`sciattn.weighted_softmax.weighted_softmax_attention`; the tests use that as an
independent oracle.

Equivalent dense PyTorch (quadratic memory, for checking only)::

    allowed = torch.zeros(Nq, Nk, dtype=torch.bool)
    allowed[torch.repeat_interleave(torch.arange(Nq), row_offsets.diff()), col_indices] = True
    bias = torch.where(allowed, torch.log(w), -inf)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)  # NaN rows -> 0

Backends (see :func:`sciattn.available_backends`): ``triton`` (:mod:`._triton`: one program per
query row and batch·head runs an online softmax over the gathered neighbours; the backward
recomputes the scores and is deterministic under ``torch.use_deterministic_algorithms(True)``;
the default on CUDA), ``cpu`` (:mod:`._cpu`: fused C++ kernels built on first use, one pass per query row
over its gathered neighbours, recompute backward, deterministic; the default on CPU in float32/float64 where
it builds), ``sparse`` (:mod:`._sparse`: scores sampled at the neighbour pairs and a
sparse-times-dense product with PyTorch's sparse kernels, recompute backward, deterministic; the
CPU default otherwise) and ``reference`` (chunked segment softmax in plain PyTorch, the oracle).
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
)
from .._backend_registry import (
    cpu_kernel_backend,
    register_backend,
    standard_tolerances,
    torch_backend,
    triton_backend,
)
from .._checks import check_attention_dtypes, check_quadrature_weights
from ._cpu import neighborhood_cpu
from ._cpu import unavailable as cpu_unavailable
from ._ops import neighborhood_triton
from ._sparse import neighborhood_sparse
from .csr import check_csr
from .reference import neighborhood_reference

__all__ = ["neighborhood_attention"]


def neighborhood_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    row_offsets: torch.Tensor,
    col_indices: torch.Tensor,
    weights: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    validate: bool = True,
    backend: str | None = None,
) -> torch.Tensor:
    """Softmax attention restricted to each query's CSR neighbourhood.

    Args:
        dtypes: q, k, v floating and of one dtype; weights floating of any precision; an integer or bool
            tensor is a TypeError naming the argument (the policy in :mod:`sciattn._checks`).
        q: ``(B, H, Nq, D)``; k: ``(B, H, Nk, D)``; v: ``(B, H, Nk, E)``.
        row_offsets: ``(Nq + 1,)`` int; col_indices: ``(nnz,)`` int in ``[0, Nk)``.
        weights: ``(Nk,)`` or ``(B, Nk)`` key quadrature weights (``None``: uniform), finite and
            ``>= 0`` at real keys (else ``ValueError`` when ``validate``); anything at padded keys.
        mask: ``(B, Nk)`` bool, True for real keys. Padded keys never contribute, whatever values
            (NaN, ±inf) their keys, values and weights hold, to the outputs or to any gradient.
            With ``Nq == Nk`` (self-attention on a padded batch) the mask indexes the queries too:
            a padded query row may hold anything as well; its output is computed with non-finite
            entries read as zero and every gradient stays finite.
        scale: logit scale, default ``1/sqrt(D)``.
        validate: check the CSR index and the weights (reads values: a host sync on an
            accelerator; layers with a cached index pass False). Skipped anyway for the weights
            under ``torch.compile``/``torch.export``/``torch.jit.trace``.
        backend: force a backend by name.

    Returns:
        ``(B, H, Nq, E)``; a query with no live neighbour gets zeros.
    """
    check_attention_dtypes(q, k, v, weights=weights)
    b, h, nk, d = check_qkv(q, k, v, need_keys=False)
    nq = q.shape[2]
    check_key_weights_and_mask(weights, mask, b, nk)
    if validate:
        check_csr(row_offsets, col_indices, nq, nk)
        check_quadrature_weights("weights", weights, mask)
    chosen = choose_backend("neighborhood", backend, q, v, mask=mask, weights=weights, grad_inputs=(q, k, v, weights))
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    log_w = prepare_key_logweights(weights, mask, (b, nk), acc, q.device)
    if mask is not None:
        q, k, v = mask_padding(q, k, v, mask)
    return chosen.fn(q, k, v, log_w, row_offsets, col_indices, scale)


# The plain-PyTorch backends (float64 to 1e-12); their half-precision tolerances are their own.
_TORCH_TOLERANCES = {
    **standard_tolerances(torch.float64, torch.float32),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
}
register_backend(torch_backend("neighborhood", "reference", neighborhood_reference, tolerances=_TORCH_TOLERANCES))

_TRITON_TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.float16: (1e-2, 2e-3), torch.bfloat16: (5e-2, 1e-2)}

# The fused kernels: the automatic choice on CUDA. On CPU tensors they run only under Triton's
# interpreter (TRITON_INTERPRET=1 before their first use) and only when forced with
# backend="triton"; the automatic choice on CPU stays the reference (interpreter_devices).
register_backend(triton_backend("neighborhood", neighborhood_triton, priority=10, tolerances=_TRITON_TOLERANCES))
# Above the reference, below triton: the default on CPU. Plain torch sparse ops; widen to CUDA once checked on a GPU.
register_backend(
    torch_backend("neighborhood", "sparse", neighborhood_sparse, priority=5, devices=("cpu",), tolerances=_TORCH_TOLERANCES)
)
# The fused C++ kernels (_cpu.py, built on first use): above sparse on the CPU wherever they build.
register_backend(
    cpu_kernel_backend("neighborhood", neighborhood_cpu, priority=7, probe=cpu_unavailable, tolerances=_TORCH_TOLERANCES)
)
