"""What every attention functional does to its inputs before a backend runs: shared checks and preparation.

The families' functionals (``galerkin_attention``, ``weighted_softmax_attention``, ``neighborhood_attention``,
``window_attention``, ``ball_attention``, ``codomain_attention``) take the same kinds of inputs and prepare them
the same way, so that is written once here:

- the shape checks of ``q``, ``k``, ``v`` and of the key weights and padding mask, with errors naming the
  argument, the expected shape and the shape given (:func:`check_qkv`, :func:`check_kv_like_q`,
  :func:`check_key_weights_and_mask`);
- the backend choice from the inputs' properties (:func:`choose_backend`: device, dtype, head size, mask,
  weights, and whether a gradient is needed);
- the quadrature weights as the additive logit bias of a softmax, ``log w_j`` with ``-inf`` at padded and
  zero-weight keys (:func:`prepare_key_logweights`): the weight multiplies ``e^{s_ij}`` in numerator and
  denominator, ``Σ_j w_j e^{s_ij} v_j / Σ_j w_j e^{s_ij}``;
- padding read as zero (:func:`zero_padding`, :func:`mask_padding`): a padded key's NaN or inf never reaches
  an output or a gradient (``torch.where``, not a product: ``0 · NaN`` is NaN).

Shapes: point sets ``q`` ``(B, H, Nq, D)``, ``k`` ``(B, H, Nk, D)``, ``v`` ``(B, H, Nk, E)``, ``weights``
``(Nk,)`` or ``(B, Nk)``, ``mask`` ``(B, Nk)`` bool (True at real keys).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from ._backend_registry import Backend
from ._checks import check_quadrature_weights, check_rank, check_tensor, sanitize_padded_rows
from ._dispatch import select_backend

__all__ = [
    "check_qkv",
    "check_kv_like_q",
    "check_key_weights_and_mask",
    "choose_backend",
    "prepare_key_logweights",
    "zero_padding",
    "mask_padding",
]


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, need_keys: bool = True) -> tuple[int, int, int, int]:
    """``q`` ``(B, H, Nq, D)``, ``k`` ``(B, H, Nk, D)``, ``v`` ``(B, H, Nk, E)`` with matching sizes (and
    ``Nk > 0`` with ``need_keys``), else ``ValueError`` naming the argument. Returns ``(B, H, Nk, D)``."""
    check_rank("q", q, 4, "(B, H, Nq, D)")
    check_rank("k", k, 4, "(B, H, Nk, D)")
    check_rank("v", v, 4, "(B, H, Nk, E)")
    b, h, nk, d = k.shape
    if q.shape[0] != b or q.shape[1] != h or q.shape[3] != d:
        raise ValueError(f"q: expected shape (B={b}, H={h}, Nq, D={d}) to match k {tuple(k.shape)}, got {tuple(q.shape)}")
    if tuple(v.shape[:3]) != (b, h, nk):
        raise ValueError(f"v: expected shape (B={b}, H={h}, Nk={nk}, E) to match k, got {tuple(v.shape)}")
    if need_keys and nk == 0:
        raise ValueError("k: expected at least one key/value point, got Nk=0")
    return b, h, nk, d


def check_kv_like_q(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Self-attention layouts (balls, windows): ``k`` of ``q``'s shape, ``v`` of it but for the last axis."""
    if k.shape != q.shape:
        raise ValueError(f"k: expected the shape of q {tuple(q.shape)}, got {tuple(k.shape)}")
    if v.shape[:-1] != q.shape[:-1]:
        raise ValueError(f"v: expected shape {tuple(q.shape)[:-1] + ('E',)} matching q, got {tuple(v.shape)}")


def check_key_weights_and_mask(
    weights: torch.Tensor | None, mask: torch.Tensor | None, b: int, n: int, matching: str = "the keys"
) -> None:
    """``weights`` ``(n,)`` or ``(b, n)`` and ``mask`` a bool ``(b, n)`` (either may be None); ``matching``
    names what their last axis indexes in the error (``"the keys"``, ``"q"``, ...)."""
    if weights is not None and tuple(check_tensor("weights", weights).shape) not in ((n,), (b, n)):
        raise ValueError(f"weights: expected shape ({n},) or ({b}, {n}) matching {matching}, got {tuple(weights.shape)}")
    if mask is not None:
        if tuple(check_tensor("mask", mask).shape) != (b, n):
            raise ValueError(f"mask: expected shape ({b}, {n}) matching {matching}, got {tuple(mask.shape)}")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask: expected dtype torch.bool, got {mask.dtype}")


def choose_backend(
    op: str,
    backend: str | None,
    q: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: object,
    weights: object,
    grad_inputs: Iterable[object] = (),
) -> Backend:
    """:func:`sciattn._dispatch.select_backend` for these inputs: ``q``'s device and dtype, the head size
    ``max(D, E)``, whether a mask and weights are given, and whether any tensor of ``grad_inputs`` needs a
    gradient (with grad mode on)."""
    return select_backend(
        op,
        backend,
        device=q.device,
        dtype=q.dtype,
        head_dim=max(q.shape[-1], v.shape[-1]),
        has_mask=mask is not None,
        has_weights=weights is not None,
        requires_grad=torch.is_grad_enabled()
        and any(isinstance(t, torch.Tensor) and t.requires_grad for t in grad_inputs),
    )


def prepare_key_logweights(
    weights: torch.Tensor | None,
    mask: torch.Tensor | None,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    *,
    check: bool = False,
) -> torch.Tensor:
    """``shape`` ``(B, *n)`` log quadrature weights of the keys, ``-inf`` at padding and at zero weights.

    ``weights`` broadcastable to ``shape``, non-negative at real keys (None: uniform, all zeros); ``mask`` bool
    of ``shape`` (None: every key real). Padded weights are never read, so NaN there cannot reach a gradient.
    With ``check``, the weights (cast and expanded) go through :func:`sciattn._checks.check_quadrature_weights`.
    """
    if weights is None:
        logw = torch.zeros(shape, dtype=dtype, device=device)
    else:
        w = weights.to(dtype=dtype, device=device).expand(shape)
        if check:
            check_quadrature_weights("weights", w, mask)
        if mask is not None:
            w = torch.where(mask, w, torch.ones((), dtype=dtype, device=device))
        logw = torch.log(w)
    if mask is not None:
        logw = torch.where(mask, logw, torch.full((), -math.inf, dtype=dtype, device=device))
    return logw


def zero_padding(keep: torch.Tensor, *tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """Each tensor with its entries where ``keep`` (bool, broadcastable) is False replaced by zeros."""
    return tuple(
        t if t is None else torch.where(keep, t, torch.zeros((), dtype=t.dtype, device=t.device)) for t in tensors
    )


def mask_padding(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Point-set layout ``(B, H, N, ·)``: padded keys and values read as zero; when ``Nq == Nk``
    (self-attention on a padded batch) the mask indexes the queries too, and a padded query row's non-finite
    entries read as zero (:func:`sciattn._checks.sanitize_padded_rows`)."""
    keep = mask[:, None, :, None]
    k, v = zero_padding(keep, k, v)
    if q.shape[2] == k.shape[2]:
        q = sanitize_padded_rows(q, keep)
    return q, k, v
