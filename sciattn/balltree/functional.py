"""Functional ball attention (Erwin's BMSA) with quadrature weights, masks, distance bias and dispatch.

Points are in ball-tree order (:func:`sciattn.balltree.build_ball_tree`), so ball ``β`` is the
contiguous slice ``[β m, (β+1) m)``. Every query attends to the keys of its own ball,

.. math::
    out_i = \\frac{\\sum_{j \\in β(i)} w_j\\, e^{s_{ij}} v_j}{\\sum_{j \\in β(i)} w_j\\, e^{s_{ij}}},
    \\qquad s_{ij} = \\mathrm{scale}\\; q_i \\cdot k_j - σ_h \\lVert x_i - x_j \\rVert ,

the quadrature of ``∫_{β(i)} κ(q(x_i), k(y)) v(y) dμ(y)`` normalised by the kernel's mass, with
the weights ``w_j`` of the **key** points (a softmax with the additive bias ``log w_j``). ``σ_h``
is a per-head scale of the distance bias (Erwin eq. 10); it is differentiable, the distances
are not (positions are geometry). Padding (``mask == False``) and zero-weight keys are excluded
whatever values they hold (NaN too); a ball without an admissible key returns zero.

Backends (op ``"ball"``): ``sdpa`` (default; ``F.scaled_dot_product_attention`` on the
``(B, H, P/m, m, ·)`` ball layout with one additive float mask), ``flex``
(``torch.nn.attention.flex_attention`` on the flat sequence with a block-diagonal
:class:`BlockMask` and the bias as ``score_mod``; compiled on CUDA, eager — materialising
``P×P`` scores — on CPU, where PyTorch also has no backward for ``q, k, v``: use it on CPU for
checks and inference only) and ``reference`` (explicit softmax, the oracle). Cost of ``sdpa``/``reference``: ``O(P·m·(D+E))`` time and ``O(P·m)`` memory per head.
"""

from __future__ import annotations

import functools
import math
import warnings

import torch

from .._attention_inputs import (
    check_key_weights_and_mask,
    check_kv_like_q,
    choose_backend,
    prepare_key_logweights,
    zero_padding,
)
from .._backend_registry import (
    FLOAT_DTYPES,
    flex_unavailable,
    register_backend,
    sdpa_backend,
    standard_tolerances,
    torch_backend,
)
from .._blocked_sdpa import blocked_sdpa
from .._checks import (
    check_attention_dtypes,
    check_positive_int,
    check_rank,
    check_tensor,
)
from .reference import ball_distances, ball_reference

__all__ = ["ball_attention", "prepare_key_logweights"]


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def ball_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pos: torch.Tensor,
    ball_size: int,
    mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    sigma: torch.Tensor | None = None,
    scale: float | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Softmax attention inside contiguous balls of ``ball_size`` tokens, with quadrature weights.

    Equivalent PyTorch for uniform weights, no mask, no distance bias::

        qb, kb, vb = (t.unflatten(2, (P // m, m)) for t in (q, k, v))
        out = F.scaled_dot_product_attention(qb, kb, vb).flatten(2, 3)

    Args:
        dtypes: q, k, v floating and of one dtype; pos, weights, sigma floating of any precision; an integer or bool
            tensor is a TypeError naming the argument (the policy in :mod:`sciattn._checks`).
        q, k: ``(B, H, P, D)`` in tree order, ``P`` a multiple of ``ball_size``.
        v: ``(B, H, P, E)``.
        pos: ``(B, P, d)`` positions in tree order (used by the distance bias only).
        ball_size: ``m``, tokens per ball.
        mask: ``(B, P)`` bool, True for real points. Masked slots never act as keys and may hold
            anything; their query rows are computed from zeroed inputs.
        weights: ``(P,)`` or ``(B, P)`` non-negative key weights (None: uniform; only ratios within
            a ball matter; zero removes a key).
        sigma: ``(H,)`` distance-bias scales ``σ_h`` (None: no distance bias).
        scale: score scale, default ``1/sqrt(D)``.
        backend: force a backend by name (see :func:`sciattn.available_backends`).

    Returns:
        ``(B, H, P, E)``; zero for a query whose ball holds no admissible key.

    Shapes:
        q, k ``(B, H, P, D)``, v ``(B, H, P, E)``, pos ``(B, P, d)``, mask ``(B, P)``,
        weights ``(P,)`` or ``(B, P)``, sigma ``(H,)`` -> ``(B, H, P, E)``.
    """
    check_attention_dtypes(q, k, v, pos=pos, weights=weights, sigma=sigma)
    check_rank("q", q, 4, "(B, H, P, D)")
    check_rank("k", k, 4, f"(B, H, P, D) like q {_shape(q)}")
    check_rank("v", v, 4, "(B, H, P, E)")
    check_kv_like_q(q, k, v)
    b, h, p, _ = q.shape
    check_positive_int("ball_size", ball_size)
    if p == 0 or p % ball_size:
        raise ValueError(f"q: expected a token count that is a positive multiple of ball_size={ball_size}, got {p}")
    check_rank("pos", pos, 3, "(B, P, d)")
    if _shape(pos)[:2] != (b, p):
        raise ValueError(f"pos: expected shape {(b, p, 'd')} matching q, got {_shape(pos)}")
    check_key_weights_and_mask(weights, mask, b, p, "q")
    if sigma is not None:
        check_tensor("sigma", sigma)
        if _shape(sigma) != (h,):
            raise ValueError(f"sigma: expected shape {(h,)} (one scale per head), got {_shape(sigma)}")
    chosen = choose_backend("ball", backend, q, v, mask=mask, weights=weights)  # as before: no requires_grad
    logw = prepare_key_logweights(weights, mask, (b, p), q.dtype, q.device, check=True)
    pos = pos.to(q.dtype)
    if mask is not None:
        q, k, v = zero_padding(mask[:, None, :, None], q, k, v)
        (pos,) = zero_padding(mask[..., None], pos)
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    return chosen.fn(q, k, v, pos, logw, sigma, ball_size, sc)


def ball_sdpa(q, k, v, pos, logw, sigma, ball_size, scale):
    """The same maths through fused ``F.scaled_dot_product_attention`` calls over the balls
    (:func:`sciattn._blocked_sdpa.blocked_sdpa`: 4-D calls, CPU chunks; the distance bias is
    computed per chunk, once per ball for all heads)."""
    m = ball_size
    bias = None
    if sigma is not None:
        sig = sigma.to(q.dtype).view(1, -1, 1, 1, 1)

        def bias(start: int, count: int) -> torch.Tensor:  # (B, H, count, m, m)
            return -sig * ball_distances(pos[:, start * m : (start + count) * m], m).to(q.dtype)

    blocks = (t.unflatten(2, (t.shape[2] // m, m)) for t in (q, k, v))
    out = blocked_sdpa(*blocks, logw.unflatten(1, (-1, m)), bias, scale)
    return out.flatten(2, 3)


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def _ball_block_mask(p: int, ball_size: int, mask_mod, device, block: int = 128):
    """Block-diagonal :class:`BlockMask` built from its block lists (``O(P/block)`` memory, no dense mask)."""
    from torch.nn.attention.flex_attention import BlockMask

    nb = -(-p // block)
    rows = torch.arange(nb, device=device)
    if ball_size >= block:  # a ball spans `per` whole blocks
        per = ball_size // block
        first = (rows // per) * per
    else:  # a block holds whole balls: only the diagonal block
        per = 1
        first = rows
    cols = first[:, None] + torch.arange(per, device=device)[None, :]
    kv_indices = torch.zeros(1, 1, nb, nb, dtype=torch.int32, device=device)
    kv_indices[0, 0, :, :per] = cols.to(torch.int32)
    kv_num = torch.full((1, 1, nb), per, dtype=torch.int32, device=device)
    return BlockMask.from_kv_blocks(kv_num, kv_indices, BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(p, p))


def ball_flex(q, k, v, pos, logw, sigma, ball_size, scale):
    """``flex_attention`` over the flat sequence: block-diagonal block mask, key padding in the
    ``mask_mod``, log-weights and the distance bias in the ``score_mod``."""
    from torch.nn.attention.flex_attention import flex_attention

    p, d, m = q.shape[2], pos.shape[-1], ball_size
    valid = torch.isfinite(logw)
    lw = torch.where(valid, logw, torch.zeros((), dtype=logw.dtype, device=logw.device))
    x = pos.detach()

    def mask_mod(b, h, qi, ki):
        return (qi // m == ki // m) & valid[b, ki]

    def score_mod(score, b, h, qi, ki):
        score = score + lw[b, ki]
        if sigma is None:
            return score
        sq = (x[b, qi, 0] - x[b, ki, 0]) ** 2
        for a in range(1, d):
            sq = sq + (x[b, qi, a] - x[b, ki, a]) ** 2
        return score - sigma[h] * torch.sqrt(sq)

    block_mask = _ball_block_mask(p, m, mask_mod, q.device)
    if q.device.type == "cpu" and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise RuntimeError(
            "backend: 'flex' cannot differentiate q, k or v on CPU (PyTorch's flex_attention has no CPU "
            "backward; gradients of sigma and of the weights do work); use backend='sdpa' or 'reference' "
            "to train on CPU, or run under torch.no_grad()"
        )
    if q.device.type == "cuda":
        return _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
    with warnings.catch_warnings():  # eager flex on CPU is the intended (test-only) path
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


register_backend(torch_backend("ball", "reference", ball_reference))
register_backend(sdpa_backend("ball", ball_sdpa))
register_backend(
    torch_backend(
        "ball", "flex", ball_flex, priority=5, dtypes=FLOAT_DTYPES, available=flex_unavailable,
        tolerances={**standard_tolerances(), torch.float64: (1e-10, 1e-11)},
    )
)
