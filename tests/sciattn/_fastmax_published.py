"""A float64 transcription of the published Fastmax forward (armingerami/fastmax @ 28eb11a, ``example.py``,
``fastmax_function``), written by us as the oracle of ``tests/sciattn/test_fastmax.py``. Their code, in our words:

- ``normalize``: ``q <- lim q / max_n |q_n|`` per (batch, head) (the infinity norm over tokens of the token norms),
  likewise ``k``; the temperature is then 1. Without ``normalize`` the temperature is also reset to 1 (their line
  ``temperature = temperature*sqrt(d)`` is immediately overwritten).
- ``p = 2``: ``k2 = vec(k kᵀ)`` and ``q2`` per token; unmasked:
  ``ans = a0 Σ_n v_n + a1 q (kᵀ v) + a2 q2 (k2ᵀ v)``, ``div = a0 N + a1 q·Σ_n k_n + a2 q2·Σ_n k2_n``, ``ans / div``.
  Masked (causal): the same with cumulative sums over tokens (``a0`` times the running count).
- ``p = 1``: the same without the ``a2`` terms.
- ``create_attn_matrix``: ``attn = a0 + a1 q kᵀ / t + a2 q2 k2ᵀ / t²`` (no normalisation of q, k; the given
  temperature), zeroed where a 0/1 ``mask`` tensor is 0, rows divided by their sums, times ``v``.

Dropout (on the feature maps) is left out: the oracle runs at rate 0.
"""

from __future__ import annotations

import torch


def _normalise(t, lim):
    token_norms = torch.linalg.norm(t, dim=3)  # (b, h, n)
    largest = torch.linalg.norm(token_norms, dim=2, ord=float("inf"))  # (b, h)
    return lim * t / largest[..., None, None]


def _square(t):
    return (t.unsqueeze(-1) @ t.unsqueeze(-2)).flatten(-2)  # (b, h, n, d*d)


def published_fastmax(q, k, v, mask=False, normalize=False, a0=1.0, a1=1.0, a2=0.5, lim=1.0, p=2):
    """``fastmax_function(q, k, v, mask, 0.0, normalize, temperature, a0, a1, a2, lim, p)``: ``(b, h, n, d)``."""
    if normalize:
        q, k = _normalise(q, lim), _normalise(k, lim)
    n = k.shape[2]
    if not mask:
        ans = a0 * v.sum(-2)[:, :, None, :] + a1 * q @ (k.transpose(-2, -1) @ v)
        div = a0 * n + a1 * q @ k.sum(-2)[..., None]
        if p == 2:
            q2, k2 = _square(q), _square(k)
            ans = ans + a2 * q2 @ (k2.transpose(-2, -1) @ v)
            div = div + a2 * q2 @ k2.sum(-2)[..., None]
        return ans / div
    ans = a0 * v.cumsum(2) + a1 * torch.einsum("bhij,bhijk->bhik", q,
                                               torch.einsum("bhij,bhik->bhijk", k, v).cumsum(2))
    count = torch.arange(1, n + 1, dtype=q.dtype)[None, None, :]
    div = a0 * count + a1 * torch.einsum("bhij,bhij->bhi", q, k.cumsum(-2))
    if p == 2:
        q2, k2 = _square(q), _square(k)
        ans = ans + a2 * torch.einsum("bhij,bhijk->bhik", q2, torch.einsum("bhij,bhik->bhijk", k2, v).cumsum(2))
        div = div + a2 * torch.einsum("bhij,bhij->bhi", q2, k2.cumsum(-2))
    return ans / div[..., None]


def published_attn_matrix(q, k, v, temperature=1.0, a0=1.0, a1=1.0, a2=0.5, mask=None):
    """The ``create_attn_matrix`` path: ``(ans, attn)``."""
    attn = a0 + a1 * q @ k.transpose(-2, -1) / temperature + a2 * _square(q) @ _square(k).transpose(-2, -1) / (
        temperature * temperature)
    if mask is not None:
        attn = torch.where(mask == 0, torch.zeros((), dtype=attn.dtype), attn)
    attn = attn / attn.sum(3)[..., None]
    return attn @ v, attn
