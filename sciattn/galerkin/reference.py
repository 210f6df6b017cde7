"""Plain-PyTorch reference of Galerkin (softmax-free linear) attention: the test oracle.

    z_i = Σ_j w_j (q_i · k_j) v_j  =  q_i · ( Σ_j w_j k_j v_jᵀ )

The right-hand form costs O(N (D·E)) time and O((D·E)) extra memory per head, so the
reference is already linear in the number of points; no chunking is needed.
"""

from __future__ import annotations

import torch

__all__ = ["galerkin_reference"]


def galerkin_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Evaluate the quadrature with prepared inputs.

    Shapes:
        q: ``(B, H, Nq, D)``; k: ``(B, H, Nk, D)``; v: ``(B, H, Nk, E)``;
        w: ``(B, Nk)`` weights, already zero on padding (and k, v finite there).
        returns ``(B, H, Nq, E)``.
    """
    kv = torch.einsum("bhnd,bhne->bhde", k * w[:, None, :, None], v)
    return torch.matmul(q, kv)
