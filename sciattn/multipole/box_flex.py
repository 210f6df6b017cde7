r"""Box attention through ``torch.nn.attention.flex_attention``: the physical pyramid's GPU path.

The same sums as :mod:`sciattn.multipole.box_attention` (every query cell ``i`` over the box of key cells
``y = start(i) + p`` of a level, scores ``scale q_i·k_y + log ω_y + Σ_a log φ_a[i_a, p_a]``), written as one
flex attention over the flattened grids: a block mask admits the pairs whose key lies in the query's box on every
axis, and a score modification adds the key's log weight and the per-axis log window weights read from the
per-grid tables (:func:`sciattn.multipole.geometry.axis_geometry`). Only the blocks of key cells that some query
of a block of queries can see are computed, so the work is that of the boxes, not of the dense ``N × M`` matrix.

On CUDA the flex call is compiled (``torch.compile``, one graph per grid); elsewhere it runs eagerly (PyTorch's
unfused implementation: the CPU tests hold it to the fused CPU kernels in float64). A query without an
admissible key gets 0, as on the other paths.

Shapes (channels first): ``q (B, H, D, *n)``, ``k, v (B, H, D, *m)``, ``logw (B, *m)``; returns ``(B, H, D, *n)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

from .geometry import axis_geometry

__all__ = ["box_flex"]


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def _split(idx: torch.Tensor, sizes: Sequence[int]) -> list[torch.Tensor]:
    """Per-axis coordinates of flat C-order indices on a grid of ``sizes``."""
    out = []
    for a in range(len(sizes)):
        stride = math.prod(sizes[a + 1:])
        out.append((idx // stride) % sizes[a])
    return out


def box_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, logw: torch.Tensor, window: Sequence[int],
             scale: float, taper: bool = True) -> torch.Tensor:
    """Box attention of one level through flex attention (module docstring)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, h, dh = q.shape[:3]
    n, m = tuple(int(a) for a in q.shape[3:]), tuple(int(a) for a in k.shape[3:])
    dev = q.device
    tables = [axis_geometry(na, ma, ca, taper, torch.float32 if q.dtype != torch.float64 else q.dtype, dev)
              for na, ma, ca in zip(n, m, window)]
    starts = [t.start for t in tables]
    lengths = [t.length for t in tables]
    logphi = [t.logphi for t in tables]
    lw = logw.to(q.dtype).reshape(b, -1)
    live = torch.isfinite(lw)
    lw0 = torch.where(live, lw, torch.zeros((), dtype=lw.dtype, device=dev))

    def offsets(q_idx, kv_idx):
        qi, ki = _split(q_idx, n), _split(kv_idx, m)
        return qi, [y - s[i] for y, s, i in zip(ki, starts, qi)]

    def mask_mod(b_, h_, q_idx, kv_idx):
        _, p = offsets(q_idx, kv_idx)
        inside = live[b_, kv_idx]
        for pa, length in zip(p, lengths):
            inside = inside & (pa >= 0) & (pa < length)
        return inside

    def score_mod(score, b_, h_, q_idx, kv_idx):
        qi, p = offsets(q_idx, kv_idx)
        out = score + lw0[b_, kv_idx].to(score.dtype)
        for i, pa, length, lp in zip(qi, p, lengths, logphi):
            out = out + lp[i, pa.clamp(0, length - 1)].to(score.dtype)
        return out

    nq, nk = math.prod(n), math.prod(m)
    block_mask = create_block_mask(mask_mod, b, None, nq, nk, device=dev.type)
    qf, kf, vf = (t.reshape(b, h, dh, -1).transpose(2, 3) for t in (q, k, v))  # (B, H, N, D)
    attend = _compiled_flex() if dev.type == "cuda" else flex_attention
    try:  # torch >= 2.9 asks for the log-sum-exp through AuxRequest
        from torch.nn.attention.flex_attention import AuxRequest

        out, aux = attend(qf, kf, vf, score_mod=score_mod, block_mask=block_mask, scale=scale,
                          return_aux=AuxRequest(lse=True))
        lse = aux.lse
    except ImportError:  # pragma: no cover - older torch
        out, lse = attend(qf, kf, vf, score_mod=score_mod, block_mask=block_mask, scale=scale, return_lse=True)
    out = torch.where(torch.isfinite(lse)[..., None], out, torch.zeros((), dtype=out.dtype, device=dev))
    return out.transpose(2, 3).reshape(b, h, dh, *n)
