"""Shared by the ball-attention tests: the O(N²) float64 oracle of quadrature-weighted softmax attention with a
distance bias, over all pairs or a given subset."""

from __future__ import annotations

import math

import torch


def dense_biased_attention(q, k, v, pos, logw, sigma, allowed=None):
    """``Σ_j w_j e^{s_ij} v_j / Σ_j w_j e^{s_ij}`` with ``s_ij = q_i·k_j/√D − σ_h ‖x_i − x_j‖``, over the pairs where
    the bool ``allowed`` ``(B, H or 1, N, N)`` is True (all pairs without it).

    ``q``, ``k`` ``(B, H, N, D)``, ``v`` ``(B, H, N, E)``, ``pos`` ``(B, N, d)``, ``logw`` ``(B, N)`` the log weights
    (``-inf`` excludes a key), ``sigma`` ``(H,)``; a query with no admitted key gets zeros."""
    dist = (pos[:, :, None, :] - pos[:, None, :, :]).pow(2).sum(-1).sqrt()
    s = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.shape[-1]) + logw[:, None, None, :]
    s = s - sigma.view(1, -1, 1, 1) * dist[:, None]
    if allowed is not None:
        s = s.masked_fill(~allowed, -math.inf)
    return torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0) @ v
