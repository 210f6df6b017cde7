"""A plain-PyTorch transcription of the published transformer neural operator forward
(EdoardoCalvello/TransformerNeuralOperators @ a546ae0), the float64 oracle of ``test_continuum_transformer.py``.
Our own rewrite from reading the code, not a copy; names follow the published modules.

* ``models/TNO/TNO_pytorch.py: SimpleEncoder.forward`` with ``append_position_to_x=True``,
  ``use_positional_encoding=False``, ``include_y0_input=False`` (the run scripts' CDE setting): ``x =
  linear_in_position(cat(x, coords))``, ``x = encoder(x, coords)``, ``x = linear_out(x)``.
* ``models/transformer_custom.py: TransformerEncoderLayer.forward``: ``x = norm1(x + attn(x)); x = norm2(x +
  fc2(act(fc1(x))))`` (dropout off: evaluation).
* ``MultiHeadAttention``: ``W_q, W_k, W_v`` split as ``view(B, N, H, d_k).transpose(1, 2)``, heads combined back
  the same way, then ``W_o``.
* ``ScaledDotProductAttention``: ``scores = q kᵀ / sqrt(d_k)``; with one coordinate per time (``coords`` of shape
  ``(N, 1, ...)``) the trapezoid ``custom_softmax``: ``dx = |t[1:] - t[:-1]|``, ``e = exp(s - max s)``,
  ``α = e / Σ_s ½ dx_s (e_{s+1} + e_s)``, ``out = ½ (Σ_s α_{s+1} dx_s v_{s+1} + Σ_s α_s dx_s v_s)``; otherwise
  the plain softmax ``out = softmax(s) v``.

``P`` maps names to tensors: ``lift``, ``blocks.{l}.attn.{q,k,v,o}``, ``blocks.{l}.{ln1,ln2,fc1,fc2}``, ``head``
(each ``.weight`` / ``.bias``): ``dict(model.named_parameters())`` of our module.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _lin(P, name, x):
    return F.linear(x, P[name + ".weight"], P[name + ".bias"])


def scaled_dot_product_attention(q, k, v, times=None):
    """Published attention of ``q, k, v`` ``(B, H, N, d_k)``; ``times`` ``(N,)`` selects the trapezoid branch."""
    scores = torch.einsum("bhld,bhsd->bhls", q, k) / q.shape[-1] ** 0.5
    e = torch.exp(scores - scores.max(dim=-1, keepdim=True)[0])
    if times is None:
        return torch.einsum("bhls,bhsd->bhld", e / e.sum(dim=-1, keepdim=True), v)
    dx = (times[1:] - times[:-1]).abs()  # (N - 1,)
    alpha = e / (0.5 * dx * (e[..., 1:] + e[..., :-1])).sum(dim=-1, keepdim=True)
    right = torch.einsum("bhls,bhsd->bhld", alpha[..., 1:], dx[:, None] * v[..., 1:, :])
    left = torch.einsum("bhls,bhsd->bhld", alpha[..., :-1], dx[:, None] * v[..., :-1, :])
    return 0.5 * (right + left)


def tno_forward(P, a, coords, *, n_layers, n_heads, activation="gelu", trapezoid=True, eps=1e-5):
    """``a`` ``(B, N, C_in)`` at ``coords`` ``(N, d)`` -> ``(B, N, C_out)``; ``trapezoid`` (1-D only): the
    published branch taken when the domain is one-dimensional."""
    b, n, _ = a.shape
    x = _lin(P, "lift", torch.cat([a, coords.expand(b, *coords.shape)], dim=-1))
    width = x.shape[-1]
    d_k = width // n_heads
    act = F.gelu if activation == "gelu" else F.relu
    times = coords[:, 0] if trapezoid else None
    for i in range(n_layers):
        pre = f"blocks.{i}."
        q, k, v = (_lin(P, pre + f"attn.{m}", x).view(b, -1, n_heads, d_k).transpose(1, 2) for m in "qkv")
        z = scaled_dot_product_attention(q, k, v, times)
        attn = _lin(P, pre + "attn.o", z.transpose(1, 2).contiguous().view(b, -1, n_heads * d_k))
        x = F.layer_norm(x + attn, (width,), P[pre + "ln1.weight"], P[pre + "ln1.bias"], eps)
        ff = _lin(P, pre + "fc2", act(_lin(P, pre + "fc1", x)))
        x = F.layer_norm(x + ff, (width,), P[pre + "ln2.weight"], P[pre + "ln2.bias"], eps)
    return _lin(P, "head", x)
