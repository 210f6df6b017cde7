"""Plain-PyTorch windowed softmax attention with a log-quadrature bias: the test oracle.

Inside one window ``W`` (``P`` cells), for query ``i``::

    out_i = Σ_{j∈W} ω_j exp(s_ij) v_j / Σ_{j∈W} ω_j exp(s_ij)
          = softmax_j(s_ij + log ω_j) · v ,      s_ij = scale · q_i·k_j (+ bias_ij)

Excluded keys (padding, masked cells) carry ``log ω_j = -inf``. A window with no admissible
key returns zero. The score tensor is ``(B, H, M, P, P)`` for ``M`` windows, i.e. ``N·P``
entries per head: linear in the number of cells ``N`` for a fixed window.

Also holds the grid <-> window reshapes shared by every backend.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["to_windows", "from_windows", "window_reference"]


def to_windows(t: torch.Tensor, window: Sequence[int]) -> torch.Tensor:
    """``(B, H, *N, C)`` with every ``N_a`` a multiple of ``window[a]`` -> ``(B, H, M, P, C)``.

    Windows are numbered in C order over the window grid; cells inside a window in C order.
    """
    d = len(window)
    b, h = t.shape[:2]
    grid = t.shape[2 : 2 + d]
    counts = [n // w for n, w in zip(grid, window)]
    split = [s for m, w in zip(counts, window) for s in (m, w)]
    t = t.reshape(b, h, *split, t.shape[-1])
    outer = [2 + 2 * a for a in range(d)]
    inner = [3 + 2 * a for a in range(d)]
    t = t.permute(0, 1, *outer, *inner, 2 + 2 * d)
    m = 1
    for c in counts:
        m *= c
    p = 1
    for w in window:
        p *= w
    return t.reshape(b, h, m, p, t.shape[-1])


def from_windows(t: torch.Tensor, grid: Sequence[int], window: Sequence[int]) -> torch.Tensor:
    """Inverse of :func:`to_windows`: ``(B, H, M, P, C)`` -> ``(B, H, *grid, C)``."""
    d = len(window)
    b, h = t.shape[:2]
    counts = [n // w for n, w in zip(grid, window)]
    t = t.reshape(b, h, *counts, *window, t.shape[-1])
    order = [a for pair in zip(range(2, 2 + d), range(2 + d, 2 + 2 * d)) for a in pair]
    t = t.permute(0, 1, *order, 2 + 2 * d)
    return t.reshape(b, h, *grid, t.shape[-1])


def window_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    logw: torch.Tensor,
    bias: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """Masked, log-weighted softmax in every window.

    Shapes:
        q, k: ``(B, H, M, P, D)``; v: ``(B, H, M, P, E)`` (finite everywhere);
        logw: ``(B, M, P)``, ``-inf`` for excluded keys (the layout of
        :func:`sciattn._blocked_sdpa.blocked_sdpa`, the ``sdpa`` backend); bias: ``None`` or broadcastable to
        ``(B, H, 1, P, P)``. Returns ``(B, H, M, P, E)``.
    """
    s = torch.matmul(q, k.transpose(-1, -2)) * scale + logw[:, None, :, None, :]
    if bias is not None:
        s = s + bias
    top = s.amax(dim=-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros((), dtype=s.dtype, device=s.device))
    e = torch.exp(s - top)
    den = e.sum(dim=-1, keepdim=True)
    den = torch.where(den > 0, den, torch.ones((), dtype=s.dtype, device=s.device))
    return torch.matmul(e, v) / den
