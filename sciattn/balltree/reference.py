"""Plain references: ball attention in PyTorch (the oracle of op ``"ball"``) and a NumPy ball tree.

Ball attention, for query ``i`` in ball ``β(i)`` (a contiguous slice of ``m`` slots in tree order)::

    out_i = Σ_{j∈β(i)} w_j exp(s_ij) v_j / Σ_{j∈β(i)} w_j exp(s_ij)
          = softmax_j(s_ij + log w_j) · v ,     s_ij = scale · q_i·k_j - σ_h ‖x_i - x_j‖

Excluded keys (padding, zero weight) carry ``log w_j = -inf``; a ball without an admissible key
returns zero. Scores are ``(B, H, M, m, m)`` for ``M = P/m`` balls: ``P·m`` entries per head,
linear in ``P`` for a fixed ball size.

:func:`ball_tree_numpy` is a recursive NumPy transcription of the splitting rule of
:func:`sciattn.balltree.build_ball_tree` for one cloud, independent of the batched tensor
version; it serves as its test oracle and as the NumPy baseline of the scaling benchmark.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

__all__ = ["ball_reference", "ball_distances", "to_balls", "ball_tree_numpy"]


def to_balls(t: torch.Tensor, ball_size: int) -> torch.Tensor:
    """``(B, H, P, C)`` -> ``(B, H, P/m, m, C)`` (a view; balls are contiguous in tree order)."""
    return t.unflatten(2, (t.shape[2] // ball_size, ball_size))


def ball_distances(pos: torch.Tensor, ball_size: int) -> torch.Tensor:
    """Pairwise distances inside every ball: ``(B, P, d)`` -> ``(B, 1, M, m, m)``.

    Positions are geometry, not parameters: they are detached, so the bias is differentiable in
    ``σ`` only (and the zero distance on the diagonal never produces a NaN gradient).
    """
    x = pos.detach().unflatten(1, (pos.shape[1] // ball_size, ball_size))
    return torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").unsqueeze(1)  # exact, no (m, m, d)


def ball_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pos: torch.Tensor,
    logw: torch.Tensor,
    sigma: torch.Tensor | None,
    ball_size: int,
    scale: float,
) -> torch.Tensor:
    """Masked, log-weighted, distance-biased softmax in every ball (explicit formula).

    Shapes:
        q, k: ``(B, H, P, D)``; v: ``(B, H, P, E)`` (finite); pos: ``(B, P, d)`` finite;
        logw: ``(B, P)`` with ``-inf`` for excluded keys; sigma: ``(H,)`` or None.
        Returns ``(B, H, P, E)``.
    """
    qb, kb, vb = (to_balls(t, ball_size) for t in (q, k, v))
    s = torch.matmul(qb, kb.transpose(-1, -2)) * scale  # (B, H, M, m, m)
    s = s + logw.unflatten(1, (-1, ball_size))[:, None, :, None, :]
    if sigma is not None:
        s = s - sigma.to(s.dtype).view(1, -1, 1, 1, 1) * ball_distances(pos, ball_size).to(s.dtype)
    top = s.amax(dim=-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros((), dtype=s.dtype, device=s.device))
    e = torch.exp(s - top)
    den = e.sum(dim=-1, keepdim=True)
    den = torch.where(den > 0, den, torch.ones((), dtype=s.dtype, device=s.device))
    return (torch.matmul(e, vb) / den).flatten(2, 3)


def ball_tree_numpy(points: np.ndarray, ball_size: int) -> np.ndarray:
    """Tree order of one cloud of real points ``(n, d)``: ``(P_b,)`` point indices, ``-1`` on padding.

    ``P_b = max(2^⌈log2 n⌉, ball_size)``. Arithmetic stays in the dtype of ``points``, like the
    tensor version, so both pick the same axis. A node of capacity ``c`` with ``k`` points sorts them by
    (coordinate along the axis of largest spread, then every coordinate in axis order, then index: the
    order-independent tie-break of the tensor version) and sends ``⌊k/2⌋`` (``c > ball_size``)
    or ``min(k, c/2)`` (inside a ball) to the left half of its slots; recursion until ``c = 1``.
    """
    pts = np.asarray(points)
    if not np.issubdtype(pts.dtype, np.floating):
        pts = pts.astype(np.float64)
    n = pts.shape[0]
    pb = max(1 << max(0, (n - 1).bit_length()), ball_size)
    out = np.full(pb, -1, dtype=np.int64)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * pb.bit_length() + 100))

    def rec(idx: np.ndarray, start: int, c: int) -> None:
        if len(idx) == 0:
            return
        if c == 1:
            out[start] = idx[0]
            return
        x = pts[idx]
        axis = int(np.argmax(x.max(0) - x.min(0)))
        srt = idx[np.lexsort((idx, *(x[:, a] for a in range(x.shape[1] - 1, -1, -1)), x[:, axis]))]
        left = len(idx) // 2 if c > ball_size else min(len(idx), c // 2)
        rec(srt[:left], start, c // 2)
        rec(srt[left:], start + c // 2, c // 2)

    rec(np.arange(n), 0, pb)
    return out
