"""Functional windowed softmax attention on a grid, with quadrature weights, masks and dispatch.

One level of multipole attention: the grid is tiled into non-overlapping windows of
``w_a`` cells along axis ``a``; every query attends to the keys of its own window,

.. math::
    out_i = \\frac{\\sum_{j \\in W(i)} \\omega_j\\, e^{s_{ij}} v_j}{\\sum_{j \\in W(i)} \\omega_j\\, e^{s_{ij}}},
    \\qquad s_{ij} = \\frac{q_i \\cdot k_j}{\\sqrt{D}} + b_{ij},

the quadrature of ``∫_{W(i)} κ(q(x_i), k(y)) v(y) dμ(y)`` normalised by the kernel's mass,
with the weights ``ω_j`` of the **key** points. It is a softmax with the additive bias
``log ω_j``, equal to plain windowed softmax for uniform weights (the scale of ``ω`` cancels).

A grid that is not a multiple of the window is padded internally; padded cells (and cells
with ``mask == False``) are excluded from every sum, whatever values they hold (even NaN).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .._attention_inputs import check_kv_like_q, choose_backend, prepare_key_logweights, zero_padding
from .._backend_registry import (
    FLOAT_DTYPES,
    flex_unavailable,
    register_backend,
    sdpa_backend,
    torch_backend,
)
from .._blocked_sdpa import blocked_sdpa
from .._checks import (
    check_attention_dtypes,
    check_per_axis_ints,
    check_rank,
    check_tensor,
    sanitize_padded_rows,
)
from .reference import from_windows, to_windows, window_reference

__all__ = ["window_attention", "normalize_window"]


def normalize_window(window: int | Sequence[int], d: int, name: str = "window") -> tuple[int, ...]:
    """``window`` as a tuple of ``d`` positive ints (an int applies to every axis)."""
    return check_per_axis_ints(name, window, d)


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _pad_spatial(t: torch.Tensor, pads: Sequence[int], trailing: int, value: float = 0.0) -> torch.Tensor:
    """Pad the high end of the spatial axes that precede ``trailing`` non-spatial axes."""
    if not any(pads):
        return t
    spec = [0, 0] * trailing
    for p in reversed(pads):
        spec += [0, p]
    return F.pad(t, spec, value=value)


def window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int | Sequence[int],
    weights: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    scale: float | None = None,
    backend: str | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """Windowed softmax attention with quadrature weights on a 1-, 2- or 3-D grid.

    Equivalent PyTorch for a 1-D grid that is a multiple of the window, uniform weights::

        qw, kw, vw = (t.unflatten(2, (n // w, w)) for t in (q, k, v))
        out = F.scaled_dot_product_attention(qw, kw, vw).flatten(2, 3)

    Args:
        dtypes: q, k, v floating and of one dtype; weights, bias floating of any precision; an integer or bool
            tensor is a TypeError naming the argument (the policy in :mod:`sciattn._checks`).
        q, k: ``(B, H, *n, D)`` queries and keys on the same grid ``n`` (``d = len(n)`` in 1..3).
        v: ``(B, H, *n, E)`` values.
        window: window size in cells, an int or ``d`` ints.
        weights: ``(*n)`` or ``(B, *n)`` non-negative quadrature weights of the key points
            (``None``: uniform). Only ratios matter. A zero weight removes the key.
        mask: ``(B, *n)`` bool, True for real cells. Masked cells never act as keys, whatever
            their keys, values and weights hold (NaN, ±inf), in the outputs or any gradient; their
            query rows are still computed (from the real keys of their window), with non-finite
            query entries read as zero, so every gradient stays finite.
        bias: optional finite additive score bias ``(H, P, P)`` or ``(B, H, P, P)`` with
            ``P = prod(window)``, the same in every window (e.g. a relative-position bias).
        scale: score scale, default ``1/sqrt(D)``.
        backend: force a backend by name (see :func:`sciattn.available_backends`).
        validate: check that the weights are finite and non-negative at unmasked cells (a full
            pass and, on an accelerator, a host sync; skipped under tracing/compiling;
            :class:`~sciattn.multipole.MultipoleAttention` checks its input weights once and
            passes False for the pooled weights of every level).

    Returns:
        ``(B, H, *n, E)``; zero for a query whose window holds no admissible key.
    """
    check_attention_dtypes(q, k, v, weights=weights, bias=bias)
    d = q.dim() - 3
    check_rank("q", q, (4, 5, 6), "(B, H, *n, D) with 1 to 3 spatial axes")
    check_rank("k", k, q.dim(), f"(B, H, *n, D) like q {_shape(q)}")
    check_rank("v", v, q.dim(), f"(B, H, *n, E) like q {_shape(q)}")
    check_kv_like_q(q, k, v)
    b, h = q.shape[:2]
    grid = tuple(q.shape[2:-1])
    if min(grid) == 0:
        raise ValueError(f"q: expected at least one cell per axis, got grid {grid}")
    win = normalize_window(window, d)
    p = math.prod(win)
    if weights is not None:
        check_tensor("weights", weights)
        ws = tuple(weights.shape)  # lengths first: comparing (B, *n) with n elementwise would guard B != n_0
        if not ((len(ws) == d and ws == grid) or (len(ws) == d + 1 and ws == (b, *grid))):
            raise ValueError(f"weights: expected shape {grid} or {(b, *grid)} matching the grid, got {_shape(weights)}")
    if mask is not None:
        check_tensor("mask", mask)
        if _shape(mask) != (b, *grid):
            raise ValueError(f"mask: expected shape {(b, *grid)} matching the grid, got {_shape(mask)}")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask: expected dtype torch.bool, got {mask.dtype}")
    if bias is not None:
        check_tensor("bias", bias)
        if _shape(bias) not in ((h, p, p), (b, h, p, p)):
            raise ValueError(f"bias: expected shape {(h, p, p)} or {(b, h, p, p)} for window {win}, got {_shape(bias)}")
    chosen = choose_backend("multipole", backend, q, v, mask=mask, weights=weights, grad_inputs=(q, k, v, weights, bias))
    # Admissible keys and their log-weights, (B, *n); -inf excludes a key.
    logw = prepare_key_logweights(weights, mask, (b, *grid), q.dtype, q.device, check=validate)
    if mask is not None:
        keep = mask.reshape(b, 1, *grid, 1)
        k, v = zero_padding(keep, k, v)
        q = sanitize_padded_rows(q, keep)  # a masked cell's query row: NaN/inf read as 0, so no 0·NaN gradient

    pads = [(-n) % w for n, w in zip(grid, win)]
    padded = tuple(n + pd for n, pd in zip(grid, pads))
    q, k, v = (_pad_spatial(t, pads, 1) for t in (q, k, v))
    logw = _pad_spatial(logw, pads, 0, value=-math.inf)
    qw, kw, vw = (to_windows(t, win) for t in (q, k, v))
    lw = to_windows(logw.reshape(b, 1, *padded, 1), win)[:, 0, ..., 0]  # (B, M, P)
    if bias is not None:
        bias = bias.to(q.dtype).unsqueeze(-3)  # (.., H, 1, P, P)
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    out = chosen.fn(qw, kw, vw, lw, bias, sc)
    out = from_windows(out, padded, win)
    if any(pads):
        out = out[(slice(None), slice(None)) + tuple(slice(0, n) for n in grid)]
    return out


def window_flex(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    logw: torch.Tensor,
    bias: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """The same maths through ``flex_attention`` on the flattened windows: a block-diagonal block
    mask (window ``m`` sees only window ``m``, minus inadmissible keys) and a score mod adding
    ``log ω_j`` and the shared per-window bias. Only the ``M`` diagonal blocks are computed."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, h, m, p, _ = q.shape
    n = m * p
    lw = logw.reshape(b, n)
    live = torch.isfinite(lw)
    lw0 = torch.where(live, lw, torch.zeros((), dtype=lw.dtype, device=lw.device)).to(q.dtype)
    empty = ~live.view(b, m, p).any(dim=-1)  # (B, M)

    def same_window(b_, h_, q_idx, kv_idx):
        return (q_idx // p == kv_idx // p) & live[b_, kv_idx]

    if bias is None:

        def score_mod(score, b_, h_, q_idx, kv_idx):
            return score + lw0[b_, kv_idx]

    else:
        bb = bias.squeeze(-3).to(q.dtype)
        bb = bb.expand(b, *bb.shape[-3:]) if bb.dim() == 3 else bb  # (B, H, P, P)

        def score_mod(score, b_, h_, q_idx, kv_idx):
            return score + lw0[b_, kv_idx] + bb[b_, h_, q_idx % p, kv_idx % p]

    block_mask = create_block_mask(same_window, b, None, n, n, device=q.device.type)
    flat = [t.reshape(b, h, n, t.shape[-1]) for t in (q, k, v)]
    out = flex_attention(*flat, score_mod=score_mod, block_mask=block_mask, scale=scale)
    out = out.reshape(b, h, m, p, v.shape[-1])
    return torch.where(empty[:, None, :, None, None], torch.zeros((), dtype=out.dtype, device=out.device), out)


register_backend(torch_backend("multipole", "reference", window_reference))
# The same maths through fused ``F.scaled_dot_product_attention`` calls over the windows (4-D calls, CPU chunks);
# windows without an admissible key are zeroed.
register_backend(sdpa_backend("multipole", blocked_sdpa))
register_backend(
    torch_backend(
        "multipole", "flex", window_flex, priority=5, dtypes=FLOAT_DTYPES, backward_devices=("cuda",),
        available=flex_unavailable,
    )
)
