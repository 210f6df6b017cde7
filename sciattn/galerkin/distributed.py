r"""Domain-parallel (sequence-parallel) Galerkin attention: each rank holds a slice of the points.

Galerkin attention only couples points through the per-head moment matrix and the total weight,

.. math::
    z_i = q_i \frac{\sum_j \tilde w_j\, k_j v_j^\top}{\sum_j \tilde w_j}
        = q_i \frac{\sum_r M_r}{\sum_r W_r},\qquad
    M_r = \sum_{j \in \text{rank } r} \tilde w_j\, k_j v_j^\top,\quad W_r = \sum_{j \in r} \tilde w_j ,

so a layer on an input too large for one device costs one all-reduce of ``B·H·D·E + B`` numbers,
whatever the number of points. The all-reduce is autograd-aware
(:func:`torch.distributed.nn.functional.all_reduce`), so gradients equal those of the layer on the
full input when each rank's loss is the rank's share of the total loss.

Shapes (per rank): q ``(B, H, Nq_r, D)``, k ``(B, H, Nk_r, D)``, v ``(B, H, Nk_r, E)``,
weights ``(Nk_r,)`` or ``(B, Nk_r)`` (raw, not normalised), mask ``(B, Nk_r)``; returns
``(B, H, Nq_r, E)``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .._checks import check_rank

__all__ = ["domain_parallel_galerkin_attention"]


def domain_parallel_galerkin_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weights: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """Galerkin attention over points split across the ranks of ``group`` (default: the world).

    Equivalent to :func:`sciattn.galerkin.galerkin_attention` on the concatenation of every
    rank's points, with the quadrature weights normalised over all of them.
    """
    from torch.distributed.nn.functional import all_reduce

    check_rank("q", q, 4, "(B, H, Nq, D)")
    check_rank("k", k, 4, "(B, H, Nk, D)")
    check_rank("v", v, 4, "(B, H, Nk, E)")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("group: expected an initialised torch.distributed process group, got none initialised")
    b, h, nk, _ = k.shape
    if tuple(v.shape[:3]) != (b, h, nk):
        raise ValueError(f"v: expected shape (B={b}, H={h}, Nk={nk}, E) to match k, got {tuple(v.shape)}")
    if weights is None:
        w = torch.ones(b, nk, dtype=q.dtype, device=q.device)
    else:
        if tuple(weights.shape) not in ((nk,), (b, nk)):
            raise ValueError(f"weights: expected shape ({nk},) or ({b}, {nk}), got {tuple(weights.shape)}")
        w = weights.to(q.dtype).expand(b, nk)
    if mask is not None:
        if tuple(mask.shape) != (b, nk) or mask.dtype != torch.bool:
            raise ValueError(f"mask: expected a bool tensor of shape ({b}, {nk}), got {mask.dtype} {tuple(mask.shape)}")
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        w = torch.where(mask, w, zero)
        k = torch.where(mask[:, None, :, None], k, zero)
        v = torch.where(mask[:, None, :, None], v, zero)
    group = group if group is not None else dist.group.WORLD
    moments = all_reduce(torch.einsum("bhnd,bhne->bhde", k * w[:, None, :, None], v), group=group)
    total = all_reduce(w.sum(dim=1), group=group)
    return torch.matmul(q, moments) / total[:, None, None, None]
