"""Plain-PyTorch reference of codomain attention: the test oracle and the CPU backend.

Tokens are the physical variables ``a = 1..V``; each is a function on the domain. With
quadrature weights ``w_x`` (a probability measure over the points),

    s_ab   = Σ_x w_x q_a(x)·k_b(x)                 ≈ ∫_Ω q_a·k_b dμ / μ(Ω)
    α_ab   = softmax_b(scale · s_ab)               over the present variables b
    out_a  = Σ_b α_ab v_b(x)

The score sum costs ``O(V² N D)`` and the mix ``O(V² N E)``; both are linear in the number of
points ``N`` and need only ``(V, V)`` extra memory per head, so no chunking is needed. In the
domain-parallel form every rank holds a slice of the points; only the ``(B, H, V, V)`` score
sums cross ranks (``reduce`` below), the mix is local.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["codomain_logits_reference", "codomain_reference"]


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def codomain_logits_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    w: torch.Tensor,
    scale: torch.Tensor | float,
    reduce: Callable[[torch.Tensor], torch.Tensor] = _identity,
) -> torch.Tensor:
    """Scaled inner products ``scale · Σ_x w_x q_a(x)·k_b(x)`` before the softmax.

    Shapes:
        q, k: ``(B, H, V, N, D)``; w: ``(B, N)`` weights (already divided by the global total);
        scale: a float, or a tensor broadcastable to ``(B, H, V, V)``;
        returns ``(B, H, V, V)``. ``reduce`` sums the partial score sums over ranks.
    """
    s = torch.einsum("bhand,bhcnd->bhac", q * w[:, None, None, :, None], k)
    return reduce(s) * scale


def codomain_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    *,
    scale: torch.Tensor | float,
    var_mask: torch.Tensor | None = None,
    reduce: Callable[[torch.Tensor], torch.Tensor] = _identity,
) -> torch.Tensor:
    """Evaluate codomain attention with prepared inputs.

    Shapes:
        q, k: ``(B, H, V, N, D)``; v: ``(B, H, V, N, E)``; w: ``(B, N)``;
        var_mask: ``(B, V)`` bool, True for present variables (q, k, v already finite and
        zero on absent ones); returns ``(B, H, V, N, E)``, zero on absent query variables.
    """
    logits = codomain_logits_reference(q, k, w, scale, reduce)
    if var_mask is not None:
        logits = logits.masked_fill(~var_mask[:, None, None, :], float("-inf"))
    alpha = torch.softmax(logits, dim=-1)
    out = torch.einsum("bhac,bhcne->bhane", alpha, v)
    if var_mask is not None:
        out = torch.where(var_mask[:, None, :, None, None], out, torch.zeros((), dtype=out.dtype, device=out.device))
    return out
