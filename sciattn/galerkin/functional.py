"""Functional Galerkin attention with quadrature weights, masks and backend dispatch."""

from __future__ import annotations

import torch

from .._checks import check_rank
from .._dispatch import Backend, register_backend, select_backend
from ..domain import normalized_weights
from .reference import galerkin_reference

__all__ = ["galerkin_attention"]


def galerkin_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weights: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    r"""Softmax-free linear attention as a quadrature of an integral operator (Cao, 2021).

    .. math::
        z(x_i) = \int_\Omega (q(x_i) \cdot k(y))\, v(y)\, d\mu(y)
               \approx \sum_j w_j\, (q_i \cdot k_j)\, v_j
               = q_i \Big(\sum_j w_j\, k_j v_j^\top\Big)

    The weights are normalised per sample to sum to one over the real (unmasked) key points,
    so uniform weights reproduce the paper's ``1/n`` and non-uniform meshes get their true
    quadrature. Galerkin and Fourier attention (Cao's two types) share this integral; they
    differ only in which of Q, K, V carry the layer norm, which the module applies.

    Equivalent PyTorch for uniform weights and no mask::

        z = q @ (k.transpose(-1, -2) @ v) / k.shape[-2]

    Args:
        q: ``(B, H, Nq, D)`` queries.
        k: ``(B, H, Nk, D)`` keys.
        v: ``(B, H, Nk, E)`` values.
        weights: ``(Nk,)`` or ``(B, Nk)`` non-negative quadrature weights of the key/value
            points; ``None`` means uniform.
        mask: ``(B, Nk)`` bool, True for real key/value points. Padded points contribute
            nothing, whatever values (even NaN) they hold.
        backend: force a backend by name (see :func:`sciattn.available_backends`).

    Returns:
        ``(B, H, Nq, E)``.
    """
    check_rank("q", q, 4, "(B, H, Nq, D)")
    check_rank("k", k, 4, "(B, H, Nk, D)")
    check_rank("v", v, 4, "(B, H, Nk, E)")
    b, h, nk, d = k.shape
    if q.shape[0] != b or q.shape[1] != h or q.shape[3] != d:
        raise ValueError(
            f"q: expected shape (B={b}, H={h}, Nq, D={d}) to match k {tuple(k.shape)}, got {tuple(q.shape)}"
        )
    if tuple(v.shape[:3]) != (b, h, nk):
        raise ValueError(f"v: expected shape (B={b}, H={h}, Nk={nk}, E) to match k, got {tuple(v.shape)}")
    if nk == 0:
        raise ValueError("k: expected at least one key/value point, got Nk=0")
    if weights is not None:
        if weights.shape not in ((nk,), (b, nk)):
            raise ValueError(
                f"weights: expected shape ({nk},) or ({b}, {nk}) matching the key/value points, got {tuple(weights.shape)}"
            )
    if mask is not None:
        if tuple(mask.shape) != (b, nk):
            raise ValueError(f"mask: expected shape ({b}, {nk}) matching the key/value points, got {tuple(mask.shape)}")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask: expected dtype torch.bool, got {mask.dtype}")
    chosen = select_backend(
        "galerkin",
        backend,
        device=q.device,
        dtype=q.dtype,
        head_dim=max(d, v.shape[-1]),
        has_mask=mask is not None,
        has_weights=weights is not None,
    )
    w = normalized_weights(weights, mask, (b, nk), q.dtype, q.device)
    if mask is not None:
        keep = mask[:, None, :, None]
        k = torch.where(keep, k, torch.zeros((), dtype=k.dtype, device=k.device))
        v = torch.where(keep, v, torch.zeros((), dtype=v.dtype, device=v.device))
    return chosen.fn(q, k, v, w)


register_backend(
    Backend(
        op="galerkin",
        name="reference",
        fn=galerkin_reference,
        priority=0,
        tolerances={torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 1e-6)},
    )
)
