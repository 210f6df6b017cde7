r"""Plain-PyTorch reference of quadrature-weighted softmax attention: the test oracle.

    out_i = Σ_j w_j exp(s_ij) v_j / Σ_j w_j exp(s_ij),
    s_ij  = scale · q_i·k_j − λ_h ‖p_i − p_j‖            (distance term optional)

evaluated as a softmax of the logits ``s_ij + log w_j``. Queries are processed in chunks, so the
forward pass holds one ``(B, H, chunk, Nk)`` block of scores at a time.
"""

from __future__ import annotations

import torch

__all__ = ["weighted_softmax_reference", "distance_bias"]

QUERY_CHUNK = 1024


def distance_bias(q_pos: torch.Tensor, k_pos: torch.Tensor, distance_scale: torch.Tensor) -> torch.Tensor:
    """``-λ_h ‖p_i − p_j‖`` of shape ``(B, H, Nq, Nk)`` from ``(B, Nq, P)``, ``(B, Nk, P)`` and ``(H,)``.

    Distances are taken in at least fp32 and without ``cdist``'s matrix-product shortcut, which loses
    fp32 accuracy for close points."""
    acc = torch.promote_types(q_pos.dtype, torch.float32)
    dist = torch.cdist(q_pos.to(acc), k_pos.to(acc), compute_mode="donot_use_mm_for_euclid_dist")  # (B, Nq, Nk)
    return -distance_scale.to(acc)[None, :, None, None] * dist[:, None]


def weighted_softmax_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_w: torch.Tensor,
    scale: float,
    q_pos: torch.Tensor | None = None,
    k_pos: torch.Tensor | None = None,
    distance_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Evaluate the weighted softmax with prepared inputs.

    Shapes:
        q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)`` (finite, zero on padding);
        log_w ``(B, Nk)``: log weights, ``-inf`` on padding and zero-weight keys;
        q_pos ``(B, Nq, P)``, k_pos ``(B, Nk, P)``, distance_scale ``(H,)`` or all ``None``.
        Returns ``(B, H, Nq, E)``; a query whose keys all have zero weight gets zeros.
    """
    outs = []
    for start in range(0, q.shape[2], QUERY_CHUNK):
        qc = q[:, :, start : start + QUERY_CHUNK]
        logits = scale * torch.matmul(qc, k.transpose(-1, -2)) + log_w[:, None, None, :].to(q.dtype)
        if distance_scale is not None:
            logits = logits + distance_bias(q_pos[:, start : start + QUERY_CHUNK], k_pos, distance_scale).to(q.dtype)
        row_max = logits.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        p = torch.exp(logits - row_max)
        denom = p.sum(dim=-1, keepdim=True)
        out = torch.matmul(p, v) / torch.where(denom > 0, denom, torch.ones_like(denom))
        outs.append(out)
    return torch.cat(outs, dim=2)
