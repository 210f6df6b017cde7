"""Compressed sparse row (CSR) neighbourhood indices.

A neighbourhood structure on ``Nq`` query points and ``Nk`` key points is stored as
``row_offsets`` ``(Nq + 1,)`` and ``col_indices`` ``(nnz,)`` (both int64): the keys of query ``i``
are ``col_indices[row_offsets[i]:row_offsets[i + 1]]``. The same index serves every batch
element and head (static geometry), so it is built once and cached by the layer that owns it.
"""

from __future__ import annotations

import torch

from .._checks import check_rank

__all__ = ["csr_from_pairs", "csr_within_distance", "check_csr"]


def csr_from_pairs(rows: torch.Tensor, cols: torch.Tensor, n_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR index from ``(row, col)`` pairs, sorted by row then column (deterministic)."""
    if rows.shape != cols.shape or rows.dim() != 1:
        raise ValueError(f"rows, cols: expected two 1-D tensors of equal length, got {tuple(rows.shape)} and {tuple(cols.shape)}")
    rows, cols = rows.to(torch.int64), cols.to(torch.int64)
    order = torch.argsort(rows * (int(cols.max()) + 1 if cols.numel() else 1) + cols, stable=True)
    rows, cols = rows[order], cols[order]
    counts = torch.bincount(rows, minlength=n_rows)
    offsets = torch.zeros(n_rows + 1, dtype=torch.int64, device=rows.device)
    offsets[1:] = torch.cumsum(counts, 0)
    return offsets, cols


def csr_within_distance(
    q_pos: torch.Tensor, k_pos: torch.Tensor, radius: float, *, chunk: int = 4096
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys within Euclidean ``radius`` of each query (inclusive), by chunked brute force.

    Shapes: ``q_pos`` ``(Nq, P)``, ``k_pos`` ``(Nk, P)``. Costs ``O(Nq·Nk)`` time once; use it for
    static geometry, or build structured indices (e.g. longitude arcs on the sphere) instead.
    """
    check_rank("q_pos", q_pos, 2, "(Nq, P)")
    check_rank("k_pos", k_pos, 2, "(Nk, P)")
    if q_pos.shape[1] != k_pos.shape[1]:
        raise ValueError(f"k_pos: expected {q_pos.shape[1]} coordinates like q_pos, got {k_pos.shape[1]}")
    rows, cols = [], []
    for start in range(0, q_pos.shape[0], chunk):
        near = torch.cdist(q_pos[start : start + chunk], k_pos) <= radius
        r, c = near.nonzero(as_tuple=True)
        rows.append(r + start)
        cols.append(c)
    return csr_from_pairs(torch.cat(rows), torch.cat(cols), q_pos.shape[0])


def check_csr(row_offsets: torch.Tensor, col_indices: torch.Tensor, n_rows: int, n_cols: int) -> None:
    """Validate a CSR index against ``n_rows`` queries and ``n_cols`` keys (one host sync)."""
    check_rank("row_offsets", row_offsets, 1, "(Nq + 1,)")
    check_rank("col_indices", col_indices, 1, "(nnz,)")
    for name, t in (("row_offsets", row_offsets), ("col_indices", col_indices)):
        if t.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{name}: expected an integer tensor (int32 or int64), got {t.dtype}")
    if row_offsets.shape[0] != n_rows + 1:
        raise ValueError(f"row_offsets: expected length Nq + 1 = {n_rows + 1}, got {row_offsets.shape[0]}")
    first, last = int(row_offsets[0]), int(row_offsets[-1])
    if first != 0 or last != col_indices.shape[0] or bool((row_offsets.diff() < 0).any()):
        raise ValueError(
            f"row_offsets: expected non-decreasing offsets from 0 to nnz={col_indices.shape[0]}, got {first}..{last}"
        )
    if col_indices.numel() and (int(col_indices.min()) < 0 or int(col_indices.max()) >= n_cols):
        raise ValueError(
            f"col_indices: expected key indices in [0, {n_cols}), got range "
            f"[{int(col_indices.min())}, {int(col_indices.max())}]"
        )
