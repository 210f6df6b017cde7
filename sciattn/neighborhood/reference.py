r"""Plain-PyTorch reference of neighbourhood attention over a CSR index: the test oracle.

    out_i = Σ_{j ∈ N(i)} w_j e^{s_ij} v_j / Σ_{j ∈ N(i)} w_j e^{s_ij},    s_ij = scale · q_i·k_j

The edges ``(i, j)`` are processed in chunks with scatter reductions (a segment softmax). The
forward pass saves only the inputs and the per-query log-normaliser ``lse_i``; the backward pass
recomputes the edge probabilities ``P_ij = w_j e^{s_ij − lse_i}`` chunk by chunk, so activation
memory is ``O(N·C)`` plus one chunk, never ``O(nnz·C)``:

    dv_j = Σ_i P_ij dO_i,    dS_ij = P_ij (dO_i·v_j − dO_i·O_i),
    dq_i = scale Σ_j dS_ij k_j,    dk_j = scale Σ_i dS_ij q_i,    d(log w_j) = Σ_i dS_ij

Accumulation uses ``index_add_``: deterministic on CPU, and on CUDA under
``torch.use_deterministic_algorithms(True)``.
"""

from __future__ import annotations

import torch

__all__ = ["neighborhood_reference"]

CHUNK_ELEMENTS = 1 << 22  # floats per gathered (B, H, chunk, C) block


def _edge_rows(row_offsets: torch.Tensor, n_rows: int, nnz: int) -> torch.Tensor:
    counts = row_offsets.diff()
    # output_size keeps the length static (no host sync; fullgraph compile works)
    return torch.repeat_interleave(torch.arange(n_rows, device=row_offsets.device), counts, output_size=nnz)


def _chunks(nnz: int, b: int, h: int, c: int):
    # While tracing (torch.export / torch.compile) the batch may be symbolic: size the chunks without it, so the
    # chunk count stays a constant and the traced program keeps a dynamic batch.
    per = (1 if torch.compiler.is_compiling() else b) * h * c
    step = max(1, CHUNK_ELEMENTS // max(1, per))
    for s in range(0, nnz, step):
        yield slice(s, min(nnz, s + step))


def _logits(q, k, log_w, r, c, scale):
    return scale * (q[:, :, r] * k[:, :, c]).sum(-1) + log_w[:, None, c]


class _NeighborhoodAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_w, rows, cols, scale):
        b, h, nq, _ = q.shape
        acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        qf, kf, vf, lw = q.to(acc_dtype), k.to(acc_dtype), v.to(acc_dtype), log_w.to(acc_dtype)
        row_max = torch.full((b, h, nq), -torch.inf, dtype=acc_dtype, device=q.device)
        chunks = list(_chunks(rows.numel(), b, h, max(q.shape[-1], v.shape[-1])))
        for sl in chunks:
            r, c = rows[sl], cols[sl]
            row_max.scatter_reduce_(2, r.expand(b, h, -1), _logits(qf, kf, lw, r, c, scale), "amax")
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        denom = torch.zeros_like(row_max)
        acc = torch.zeros(b, h, nq, v.shape[-1], dtype=acc_dtype, device=q.device)
        for sl in chunks:
            r, c = rows[sl], cols[sl]
            p = torch.exp(_logits(qf, kf, lw, r, c, scale) - row_max[:, :, r])
            denom.index_add_(2, r, p)
            acc.index_add_(2, r, p[..., None] * vf[:, :, c])
        has_mass = denom > 0
        out = acc / torch.where(has_mass, denom, torch.ones_like(denom))[..., None]
        lse = torch.where(has_mass, row_max + torch.log(torch.where(has_mass, denom, torch.ones_like(denom))),
                          torch.zeros_like(denom))
        ctx.save_for_backward(q, k, v, log_w, rows, cols, out, lse)
        ctx.scale = scale
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, log_w, rows, cols, out, lse = ctx.saved_tensors
        scale = ctx.scale
        b, h, _, _ = q.shape
        acc_dtype = out.dtype
        qf, kf, vf, lw = q.to(acc_dtype), k.to(acc_dtype), v.to(acc_dtype), log_w.to(acc_dtype)
        go = grad_out.to(acc_dtype)
        delta = (go * out).sum(-1)  # (B, H, Nq)
        dq, dk, dv = torch.zeros_like(qf), torch.zeros_like(kf), torch.zeros_like(vf)
        dlogw = torch.zeros(b, k.shape[2], dtype=acc_dtype, device=q.device)
        for sl in _chunks(rows.numel(), b, h, max(q.shape[-1], v.shape[-1])):
            r, c = rows[sl], cols[sl]
            p = torch.exp(_logits(qf, kf, lw, r, c, scale) - lse[:, :, r])
            go_r = go[:, :, r]
            dv.index_add_(2, c, p[..., None] * go_r)
            ds = p * ((go_r * vf[:, :, c]).sum(-1) - delta[:, :, r])
            dq.index_add_(2, r, scale * ds[..., None] * kf[:, :, c])
            dk.index_add_(2, c, scale * ds[..., None] * qf[:, :, r])
            dlogw.index_add_(1, c, ds.sum(1))
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dlogw.to(log_w.dtype), None, None, None


def neighborhood_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_w: torch.Tensor,
    row_offsets: torch.Tensor,
    col_indices: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Evaluate with prepared inputs.

    Shapes:
        q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)`` (finite, zero on padding);
        log_w ``(B, Nk)`` log key weights, ``-inf`` on padding; row_offsets ``(Nq + 1,)``;
        col_indices ``(nnz,)``. Returns ``(B, H, Nq, E)``, zero for a query with no live key.
    """
    rows = _edge_rows(row_offsets.to(torch.int64), q.shape[2], col_indices.shape[0])
    return _NeighborhoodAttention.apply(q, k, v, log_w, rows, col_indices.to(torch.int64), scale)
