r"""Custom ops ``sciattn::neighborhood_fwd`` / ``sciattn::neighborhood_bwd`` around the Triton kernels.

The forward op evaluates, per (batch, head) and query ``i`` with CSR neighbourhood ``N(i)``,

    o_i = Σ_{j∈N(i)} e^{s_ij − lse_i} v_j,   lse_i = log Σ_{j∈N(i)} e^{s_ij},   s_ij = scale q_i·k_j + log w_j

(the quadrature ``Σ_j w_j e^{s} v_j / Σ_j w_j e^{s}`` of ``∫_{D(x)} e^{s} v dμ / ∫_{D(x)} e^{s} dμ``)
and returns ``(o, lse)``; the backward op recomputes the scores from ``lse`` and returns
``(dq, dk, dv, dlog_w)``. Both are ``torch.library.custom_op`` with fake (meta) implementations
(``torch.compile(fullgraph=True)`` and ``torch.export`` trace through them) and pass
``torch.library.opcheck``; the forward's autograd formula calls the backward op.

The backward's key-side sums are deterministic (per-key programs over the transposed index) when
``torch.are_deterministic_algorithms_enabled()`` at backward time, and fp32 atomics otherwise.
The transposed index is built once per CSR index by :func:`transposed_csr` and cached while the
index tensors live and are not modified in place.

Importing this module does not import triton: the kernels (:mod:`._triton`) load on first use.

Shapes:
    q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)``; log_w ``(B, Nk)`` (``−inf`` on
    padding); row_offsets ``(Nq + 1,)``, col_indices ``(nnz,)`` int32/int64; returns
    o ``(B, H, Nq, E)`` (q's dtype) and lse ``(B, H, Nq)`` fp32.
"""

import weakref
from collections import OrderedDict

import torch
from torch import Tensor

__all__ = ["neighborhood_fwd", "neighborhood_bwd", "neighborhood_triton", "transposed_csr"]

_CACHE_SIZE = 8
_TRANSPOSES: "OrderedDict[tuple[int, int, int], tuple]" = OrderedDict()


def _version(t: Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # inference tensors carry no version counter (and cannot change in place)
        return -1


def _build_transpose(row_offsets: Tensor, col_indices: Tensor, n_cols: int) -> tuple[Tensor, Tensor]:
    n_rows = row_offsets.shape[0] - 1
    offsets = row_offsets.to(torch.int64)
    cols = col_indices.to(torch.int64)
    rows = torch.repeat_interleave(
        torch.arange(n_rows, device=cols.device), offsets.diff(), output_size=cols.shape[0]
    )
    order = torch.argsort(cols, stable=True)  # keys ascending, queries ascending within a key
    t_offsets = torch.zeros(n_cols + 1, dtype=torch.int64, device=cols.device)
    t_offsets[1:] = torch.cumsum(torch.bincount(cols, minlength=n_cols), 0)
    return t_offsets, rows[order].contiguous()


def transposed_csr(row_offsets: Tensor, col_indices: Tensor, n_cols: int) -> tuple[Tensor, Tensor]:
    """The transposed index ``(t_offsets (Nk + 1,), t_rows (nnz,))``: the queries whose neighbourhood
    holds key ``j`` are ``t_rows[t_offsets[j]:t_offsets[j + 1]]``, in ascending order.

    Cached per ``(row_offsets, col_indices)`` pair of tensor objects (at most 8 entries) and rebuilt
    if either is modified in place, so a layer that keeps its index pays for one ``argsort``."""
    key = (id(row_offsets), id(col_indices), int(n_cols))
    versions = (_version(row_offsets), _version(col_indices))
    hit = _TRANSPOSES.get(key)
    if hit is not None and hit[0]() is row_offsets and hit[1]() is col_indices and hit[2] == versions:
        _TRANSPOSES.move_to_end(key)
        return hit[3]

    def drop(_ref, key=key):
        _TRANSPOSES.pop(key, None)

    result = _build_transpose(row_offsets, col_indices, n_cols)
    _TRANSPOSES[key] = (weakref.ref(row_offsets, drop), weakref.ref(col_indices, drop), versions, result)
    while len(_TRANSPOSES) > _CACHE_SIZE:
        _TRANSPOSES.popitem(last=False)
    return result


@torch.library.custom_op("sciattn::neighborhood_fwd", mutates_args=())
def neighborhood_fwd(
    q: Tensor, k: Tensor, v: Tensor, log_w: Tensor, row_offsets: Tensor, col_indices: Tensor, scale: float
) -> tuple[Tensor, Tensor]:
    from ._triton import neighborhood_forward

    return neighborhood_forward(q, k, v, log_w, row_offsets, col_indices, scale)


@neighborhood_fwd.register_fake
def _fwd_fake(q, k, v, log_w, row_offsets, col_indices, scale):
    b, h, nq, _ = q.shape
    return q.new_empty((b, h, nq, v.shape[-1])), q.new_empty((b, h, nq), dtype=torch.float32)


@torch.library.custom_op("sciattn::neighborhood_bwd", mutates_args=())
def neighborhood_bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_w: Tensor,
    row_offsets: Tensor,
    col_indices: Tensor,
    out: Tensor,
    lse: Tensor,
    scale: float,
    deterministic: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients ``(dq, dk, dv, dlog_w)`` of ``neighborhood_fwd`` (``dlog_w`` fp32 ``(B, Nk)``); with
    ``deterministic`` the key-side sums run over the transposed index instead of atomics."""
    from ._triton import neighborhood_backward

    transpose = transposed_csr(row_offsets, col_indices, k.shape[2]) if deterministic else None
    return neighborhood_backward(dout, q, k, v, log_w, row_offsets, col_indices, out, lse, scale, transpose)


@neighborhood_bwd.register_fake
def _bwd_fake(dout, q, k, v, log_w, row_offsets, col_indices, out, lse, scale, deterministic):
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
            log_w.new_empty(log_w.shape, dtype=torch.float32))


def _setup_context(ctx, inputs, output):
    q, k, v, log_w, row_offsets, col_indices, scale = inputs
    ctx.save_for_backward(q, k, v, log_w, row_offsets, col_indices, output[0], output[1])
    ctx.scale = scale


def _backward(ctx, dout, _dlse):
    q, k, v, log_w, row_offsets, col_indices, out, lse = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv, dlw = neighborhood_bwd(
        dout.contiguous(), q, k, v, log_w, row_offsets, col_indices, out, lse, ctx.scale,
        torch.are_deterministic_algorithms_enabled(),
    )
    return dq, dk, dv, dlw.to(log_w.dtype) if ctx.needs_input_grad[3] else None, None, None, None


neighborhood_fwd.register_autograd(_backward, setup_context=_setup_context)


def neighborhood_triton(q, k, v, log_w, row_offsets, col_indices, scale):
    """The ``triton`` backend of :func:`sciattn.neighborhood.neighborhood_attention`.

    Takes the functional's prepared inputs (log weights ``−inf`` on padding, padded keys and values
    zeroed); keys and values are cast to q's dtype, log weights to fp32. Shapes: as the module
    docstring. Returns ``(B, H, Nq, E)``; gradients are deterministic under
    ``torch.use_deterministic_algorithms(True)``."""
    for name, t in (("row_offsets", row_offsets), ("col_indices", col_indices)):
        if t.device != q.device:
            raise ValueError(f"{name}: expected a tensor on q's device {q.device}, got {t.device}")
    k = k.to(q.dtype)
    v = v.to(q.dtype)
    if log_w.dtype != torch.float32:
        log_w = log_w.to(torch.float32)
    out, _ = neighborhood_fwd(q, k, v, log_w, row_offsets, col_indices, float(scale))
    return out
