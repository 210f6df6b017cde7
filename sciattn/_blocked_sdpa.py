r"""Softmax attention inside equal blocks of tokens (balls, windows) through fused SDPA calls.

Tokens come grouped into ``M`` blocks of ``m``; every query attends to the keys of its own block,

.. math::
    out_i = \frac{\sum_{j \in β(i)} w_j\, e^{s_{ij}} v_j}{\sum_{j \in β(i)} w_j\, e^{s_{ij}}},
    \qquad s_{ij} = \mathrm{scale}\; q_i \cdot k_j + b_{ij},

the quadrature of a kernel integral over the block with key weights ``w_j`` (the additive bias
``log w_j``; ``-inf`` excludes a key) and an optional additive bias ``b_ij`` (relative position,
distance). A block without an admissible key returns zero.

Blocks are the batch entries of 4-D ``F.scaled_dot_product_attention`` calls ``(B, H·M, m, ·)``:
PyTorch fuses 4-D inputs (flash kernel on CPUs, memory-efficient or flash on GPUs) and sends
other ranks down its unfused math path. On the CPU the blocks go through in chunks of
:data:`CPU_SCORES_PER_CALL` scores, split with ``split`` (whose backward is one concatenation;
slicing would allocate a zero-filled full-size gradient per slice): every temporary then stays in
cache and below glibc's ``mmap`` threshold, and time and memory grow linearly in the token count.
Other devices take one call.

Shapes:
    q, k ``(B, H, M, m, D)``, v ``(B, H, M, m, E)``, logw ``(B, M, m)``; bias a tensor that
    broadcasts to ``(B, H, M, m, m)`` with a block axis of size 1 (the same in every block), or a
    function ``(start, count) -> (B|1, H|1, count, m, m)`` for blocks ``start .. start+count-1``;
    returns ``(B, H, M, m, E)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = ["CPU_SCORES_PER_CALL", "blocked_sdpa"]

# Score entries per SDPA call on the CPU (4 MiB in fp32). One call over 2^21 scores and more was
# 2-3x slower per token on a 2-core EPYC than chunks of this size.
CPU_SCORES_PER_CALL = 1 << 20


def blocked_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    logw: torch.Tensor,
    bias: torch.Tensor | Callable[[int, int], torch.Tensor] | None,
    scale: float,
    scores_per_call: int | None = None,
) -> torch.Tensor:
    """Block-diagonal weighted softmax attention (see the module docstring for maths and shapes).

    ``scores_per_call``: chunk size in score entries (default: :data:`CPU_SCORES_PER_CALL` on
    the CPU, everything in one call elsewhere).
    """
    b, h, nb, m = q.shape[:4]
    empty = torch.isinf(logw).all(dim=-1)  # (B, M)
    logw = torch.where(empty[..., None], torch.zeros((), dtype=logw.dtype, device=logw.device), logw)
    logw = logw.to(q.dtype)
    parts = []
    if torch.compiler.is_compiling():
        # One call while tracing (torch.export, torch.compile): the chunking below bounds eager CPU memory, and
        # its chunk count, computed from the sizes, would fix the batch and grid sizes of the traced program.
        chunks = iter([(0, q, k, v, logw)])
    else:
        if scores_per_call is None:
            scores_per_call = CPU_SCORES_PER_CALL if q.device.type == "cpu" else b * h * nb * m * m
        per = max(1, scores_per_call // (b * h * m * m))
        chunks = zip(range(0, nb, per), *(t.split(per, dim=2) for t in (q, k, v)), logw.split(per, dim=1))
    for start, qc, kc, vc, lc in chunks:
        mc = qc.shape[2]
        lc = lc[:, None, :, None, :]  # (B, 1, Mc, 1, m)
        extra = bias(start, mc) if callable(bias) else bias
        if extra is None:  # the log-weights broadcast over the queries: (B, H·Mc, 1, m)
            attn = lc.expand(b, h, mc, 1, m).reshape(b, h * mc, 1, m)
        else:
            attn = (lc + extra.to(q.dtype)).expand(b, h, mc, m, m).reshape(b, h * mc, m, m)
        qb, kb, vb = (t.reshape(b, h * mc, m, t.shape[-1]) for t in (qc, kc, vc))
        out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=attn, scale=scale)
        parts.append(out.view(b, h, mc, m, -1))
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    return torch.where(empty[:, None, :, None, None], torch.zeros((), dtype=out.dtype, device=out.device), out)
