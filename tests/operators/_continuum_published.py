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


# ---- ViTNO: models/ViTNO/ViTNO_pytorch.py SimpleEncoder and its layers ------------------------------------------
# ``chop_to_patches`` (patch index row-major over the patch grid), ``linear_in = SpectralConv2d_in(C + 2, d,
# modes)`` on each patch, ``TransformerEncoderLayer_ViTNO`` with ``norm_first=False, do_layer_norm=True``:
# ``x = norm1(x + attn(x)); x = norm2(x + linear2(act(linear1(x))))``; ``MultiheadAttention_ViTNO``: heads split as
# ``view(..., d_k, nhead)`` (head index last), ``scores = einsum(q, k over pixels and d_k) / im_size²``, softmax
# over patches, ``einsum(α, v)``; the inverse reshape of the patches, ``linear_out``, then ``x + smoothing(x)``
# (``SpectralConv2d``; on whatever ``smoothing`` says, since the attribute is overwritten by the module). ``P``: our
# module's parameters; the spectral weights are the published complex tensors stored as real pairs.


def spectral_conv(u, w1, w2, modes):
    """Published ``SpectralConv2d(_in)``: ``u`` ``(..., C, n1, n2)``, complex ``w1, w2`` ``(C, O, m1, m2)``."""
    m1, m2 = modes
    u_ft = torch.fft.rfft2(u)
    out = torch.zeros(*u.shape[:-3], w1.shape[1], u.shape[-2], u.shape[-1] // 2 + 1, dtype=u_ft.dtype)
    out[..., :m1, :m2] = torch.einsum("...ixy,ioxy->...oxy", u_ft[..., :m1, :m2], w1)
    out[..., -m1:, :m2] = torch.einsum("...ixy,ioxy->...oxy", u_ft[..., -m1:, :m2], w2)
    return torch.fft.irfft2(out, s=(u.shape[-2], u.shape[-1]))


def chop_to_patches(x, patch_size):
    """``(B, C, im, im)`` -> ``(B, num_patches, p, p, C)`` by the published sequence of reshapes."""
    b, c, rows, cols = x.shape
    x = x.reshape(b, c, rows // patch_size, patch_size, cols // patch_size, patch_size)
    x = x.permute(0, 2, 4, 1, 3, 5).permute(0, 3, 4, 5, 1, 2)
    x = x.reshape(b, c, patch_size, patch_size, x.shape[4] * x.shape[5])
    return x.permute(0, 4, 2, 3, 1)


def vitno_forward(P, x, coords, *, patch_size, n_layers, n_heads, modes, smoothing_modes, activation="gelu",
                  eps=1e-5):
    """``x`` ``(B, C, im, im)``, ``coords`` ``(2, im, im)`` -> ``(B, C_out, im, im)``; ``patch_size`` in points
    (``set_im_size(im, patch_size)`` done: the score scale is ``im²``)."""
    cplx = torch.view_as_complex
    b, _, im, _ = x.shape
    u = chop_to_patches(torch.cat([x, coords.expand(b, *coords.shape)], dim=1), patch_size)
    h = spectral_conv(u.permute(0, 1, 4, 2, 3), cplx(P["lift.weights1"]), cplx(P["lift.weights2"]), modes)
    h = h.permute(0, 1, 3, 4, 2)  # (B, num_patches, p, p, d)
    d = h.shape[-1]
    d_k = d // n_heads
    act = F.gelu if activation == "gelu" else F.relu
    for i in range(n_layers):
        pre = f"blocks.{i}."
        q, k, v = (_lin(P, pre + f"attn.{m}", h).reshape(*h.shape[:4], d_k, n_heads).permute(0, 5, 1, 2, 3, 4)
                   for m in "qkv")
        scores = torch.einsum("bnpxyd,bnqxyd->bnpq", q, k) / (im ** 4) ** 0.5
        z = torch.einsum("bnpq,bnqxyd->bnpxyd", torch.softmax(scores, dim=-1), v).permute(0, 2, 3, 4, 5, 1)
        attn = _lin(P, pre + "attn.o", z.reshape(*h.shape[:4], n_heads * d_k))
        h = F.layer_norm(h + attn, (d,), P[pre + "ln1.weight"], P[pre + "ln1.bias"], eps)
        ff = _lin(P, pre + "fc2", act(_lin(P, pre + "fc1", h)))
        h = F.layer_norm(h + ff, (d,), P[pre + "ln2.weight"], P[pre + "ln2.bias"], eps)
    h = h.reshape(b, im // patch_size, im // patch_size, patch_size, patch_size, d).permute(0, 1, 3, 2, 4, 5)
    out = _lin(P, "head", h.reshape(b, im, im, d)).permute(0, 3, 1, 2)
    if smoothing_modes:
        out = out + spectral_conv(out, cplx(P["smoothing.weights1"]), cplx(P["smoothing.weights2"]),
                                  (smoothing_modes, smoothing_modes))
    return out


# ---- shared by the tests -------------------------------------------------------------------------------------------


def perturbed_model(name, config, seed=0):
    """``create_operator(name, **config)`` in float64, eval, every parameter moved by ``0.3 N(0, 1)`` (away from
    the initialisation, so that every term of the forward matters)."""
    from sciattn.operators import create_operator

    torch.manual_seed(seed)
    model = create_operator(name, **config).double().eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def rel(a, b):
    """Max-norm difference of ``a`` to ``b``, relative to the size of ``b``."""
    return float((a - b).abs().max().detach() / b.abs().max().detach())
