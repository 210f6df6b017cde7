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


def _prepared(q, k, mask, normalize, lim):
    """Padded keys (and, with ``Nq == Nk``, non-finite padded queries) read as zero, then the ``normalize`` rule."""
    nq, nk = q.shape[2], k.shape[2]
    if mask is not None:
        keep = mask[:, None, :, None]
        k = torch.where(keep, k, torch.zeros((), dtype=k.dtype, device=k.device))
        if nq == nk:
            q = torch.where(keep | torch.isfinite(q), q, torch.zeros((), dtype=q.dtype, device=q.device))
    return _scaled(q, normalize, lim, mask if nq == nk else None), _scaled(k, normalize, lim, mask)


def _kernel(q, k, coefficients, temperature):
    """``f(q_i·k_j / temperature)`` ``(B, H, Nq, Nk)`` by Horner's rule."""
    s = torch.einsum("bhid,bhjd->bhij", q, k) / temperature
    a = s * coefficients[-1]
    for c in reversed(coefficients[1:-1]):
        a = (a + c) * s
    return a + coefficients[0]


def _key_weights(weights, mask, b, nk, dtype, device):
    w = torch.ones(b, nk, dtype=dtype, device=device) if weights is None else weights.to(dtype).expand(b, nk)
    return w if mask is None else torch.where(mask, w, torch.zeros((), dtype=dtype, device=device))


def fastmax_matrix(q, k, weights=None, mask=None, *, coefficients=(1.0, 1.0, 0.5), normalize="max", lim=1.0,
                   temperature=1.0, causal=False):
    """The row-normalised attention matrix ``(B, H, Nq, Nk)`` (zero at padded keys and, with ``causal``, above the
    diagonal)."""
    q, k = _prepared(q, k, mask, normalize, lim)
    a = _kernel(q, k, tuple(coefficients), temperature)
    a = a * _key_weights(weights, mask, q.shape[0], k.shape[2], q.dtype, q.device)[:, None, None, :]
    if causal:
        a = torch.tril(a)
    return a / a.sum(-1, keepdim=True)


def fastmax_dense(q, k, v, weights=None, mask=None, *, order=2, coefficients=None, normalize="max", lim=1.0,
                  temperature=1.0, causal=False, block=None):
    """``A v`` with ``A`` the matrix of :func:`fastmax_matrix`, computed as ``(K (w ṽ))[:E] / (K (w ṽ))[E]`` with
    ``K_ij = f(s_ij)`` and ``ṽ = [v, 1]``; ``block``: that many query rows of ``K`` at a time."""
    coefficients = (1.0, 1.0, 0.5)[: order + 1] if coefficients is None else tuple(coefficients)
    if mask is not None:
        v = torch.where(mask[:, None, :, None], v, torch.zeros((), dtype=v.dtype, device=v.device))
    q, k = _prepared(q, k, mask, normalize, lim)
    w = _key_weights(weights, mask, q.shape[0], k.shape[2], q.dtype, q.device)
    vt = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1) * w[:, None, :, None]
    nq = q.shape[2]
    step = nq if block is None else block
    outs = []
    for i in range(0, nq, step):
        kmat = _kernel(q[:, :, i:i + step], k, coefficients, temperature)
        if causal:
            kmat = torch.tril(kmat, diagonal=i)
        outs.append(kmat @ vt)
    out = torch.cat(outs, dim=2)
    return out[..., :-1] / out[..., -1:]
