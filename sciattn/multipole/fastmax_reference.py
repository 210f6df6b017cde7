"""The float64 oracle of :func:`sciattn.multipole.fastmax.fastmax_attention`: the dense ``(Nq, Nk)`` matrix of the
same polynomial kernel, ``A_ij = w_j f(c q_i·k_j)`` with ``f(s) = Σ_l a_l s^l``, rows normalised, then ``A v``.

``O(Nq Nk)`` memory per head, so for small ``N`` (tests, and the error columns of the benchmark
``benchmarks/fastmax_attention.py``); ``block`` computes the rows in blocks of that many queries, which bounds the
memory but not the quadratic time. The ``q``/``k`` normalisation is written out again here (not imported), so the
oracle shares no code with what it checks. Shapes as in :mod:`sciattn.multipole.fastmax`.
"""

from __future__ import annotations

import torch

__all__ = ["fastmax_dense", "fastmax_matrix"]


def _scaled(t, normalize, lim, mask):
    if normalize is None:
        return t
    n = t.square().sum(-1, keepdim=True).sqrt()
    if normalize == "max":
        if mask is not None:
            n = torch.where(mask[:, None, :, None], n, torch.zeros((), dtype=n.dtype, device=n.device))
        n = n.max(dim=2, keepdim=True).values
    return lim * t / n.clamp_min(torch.finfo(t.dtype).tiny)


def fastmax_matrix(q, k, weights=None, mask=None, *, coefficients=(1.0, 1.0, 0.5), normalize="max", lim=1.0,
                   temperature=1.0, causal=False):
    """The row-normalised attention matrix ``(B, H, Nq, Nk)`` (zero at padded keys and, with ``causal``, above the
    diagonal)."""
    b, _, nq, _ = q.shape
    nk = k.shape[2]
    keep = torch.ones(b, nk, dtype=torch.bool, device=q.device) if mask is None else mask
    if mask is not None:
        k = torch.where(keep[:, None, :, None], k, torch.zeros((), dtype=k.dtype, device=k.device))
        if nq == nk:
            q = torch.where(keep[:, None, :, None] | torch.isfinite(q), q, torch.zeros((), dtype=q.dtype))
    q = _scaled(q, normalize, lim, mask if nq == nk else None)
    k = _scaled(k, normalize, lim, mask)
    s = torch.einsum("bhid,bhjd->bhij", q, k) / temperature
    a = sum(c * s**p for p, c in enumerate(coefficients))
    w = torch.ones(b, nk, dtype=q.dtype, device=q.device) if weights is None else weights.to(q.dtype).expand(b, nk)
    w = torch.where(keep, w, torch.zeros((), dtype=q.dtype, device=q.device))
    a = a * w[:, None, None, :]
    if causal:
        a = torch.tril(a)
    return a / a.sum(-1, keepdim=True)


def fastmax_dense(q, k, v, weights=None, mask=None, *, order=2, coefficients=None, normalize="max", lim=1.0,
                  temperature=1.0, causal=False, block=None):
    """``A v`` with ``A`` from :func:`fastmax_matrix`; ``block``: that many query rows at a time (non-causal)."""
    coefficients = (1.0, 1.0, 0.5)[: order + 1] if coefficients is None else tuple(coefficients)
    if mask is not None:
        v = torch.where(mask[:, None, :, None], v, torch.zeros((), dtype=v.dtype, device=v.device))
    opts = dict(coefficients=coefficients, normalize=normalize, lim=lim, temperature=temperature, causal=causal)
    if block is None or causal or (mask is not None and q.shape[2] == k.shape[2]):
        return fastmax_matrix(q, k, weights, mask, **opts) @ v
    # normalise q over all queries first, so that blocks see the same maximum
    if mask is not None:
        k = torch.where(mask[:, None, :, None], k, torch.zeros((), dtype=k.dtype, device=k.device))
    qn = _scaled(q, normalize, lim, None)
    opts["normalize"] = None
    kn = _scaled(k, normalize, lim, mask)
    return torch.cat([fastmax_matrix(qn[:, :, i:i + block], kn, weights, mask, **opts) @ v
                      for i in range(0, q.shape[2], block)], dim=2)
