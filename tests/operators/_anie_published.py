"""A plain-PyTorch transcription of the published ANIE forward (emazap7/ANIE @ 2071ad7), the float64 oracle of
``test_anie.py``. Our own rewrite from reading the code, not a copy; names follow the published modules.

* ``IE_source/kernels.py: model_blocks(dimension, dim_emb, n_head, n_blocks, n_ff, "galerkin")``: ``first =
  Linear(dimension + 1, dim_emb)``, ``n_blocks`` ``SimpleTransformerEncoderLayer``, ``last_block =
  Linear(dim_emb, dimension + 1)`` (``Final_block=False``, the notebooks' setting).
* ``IE_source/Galerkin_transformer.py: SimpleTransformerEncoderLayer`` at its defaults (``layer_norm=True``, so
  ``attn_norm=False``; ReLU; ``pos=None``): ``x = LN1(x + attn(x)); x = LN2(x + FFN(x))``; the attention is
  ``SimpleAttention`` of galerkin type without norms: ``linear_attention(q, k, v) = q (kᵀ v) / seq_len``, heads
  concatenated with no output projection. Dropout is taken as off: the published ``linear_attention`` calls
  ``F.dropout(p_attn)`` (p = 0.5, training mode) even in eval, which is not reproduced (docs page).
* ``IE_source/Attentional_IE_solver.py: Integral_spatial_attention_solver_multbatch.solve`` with ``use_support=False``
  and ``d = 1``: ``y_current = c``; ``y_guess = c + [T([y, x]) + [y, x]][..., :dim]``;
  ``error = sqrt(Σ over the whole batch (y - g)²)``; ``iteration = 0``; while ``error > tol``: ``y <- s y + (1 - s) g``,
  ``g <- rhs(y)``, ``iteration += 1``, break at ``max_iterations``; returns ``y_guess``. ``accumulate_grads=False``
  detaches the token tensor (``y_in``) before ``T``.

``P`` maps names to tensors: ``first.weight``, ``first.bias``, ``blocks.{l}.{q,k,v}.{weight,bias}``,
``blocks.{l}.{ln1,ln2}.{weight,bias}``, ``blocks.{l}.ff.{0,1}.{weight,bias}``, ``last.weight``, ``last.bias`` (the
last with ``dimension + 1`` rows: state and coordinates).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def model_blocks(P, x, n_blocks, n_head, eps=1e-5):
    """``T`` on tokens ``x`` ``(B, N, dim + p)`` -> ``(B, N, dim + p)``."""
    x = F.linear(x, P["first.weight"], P["first.bias"])
    bsz, n, d_model = x.shape
    d_k = d_model // n_head
    for i in range(n_blocks):
        b = f"blocks.{i}."
        q, k, v = (F.linear(x, P[b + f"{m}.weight"], P[b + f"{m}.bias"]).view(bsz, -1, n_head, d_k).transpose(1, 2)
                   for m in "qkv")
        seq_len = q.size(-2)
        p_attn = torch.matmul(k.transpose(-2, -1), v) / seq_len
        att = torch.matmul(q, p_attn).transpose(1, 2).contiguous().view(bsz, -1, n_head * d_k)
        x = F.layer_norm(x + att, (d_model,), P[b + "ln1.weight"], P[b + "ln1.bias"], eps)
        ff = F.linear(F.relu(F.linear(x, P[b + "ff.0.weight"], P[b + "ff.0.bias"])), P[b + "ff.1.weight"],
                      P[b + "ff.1.bias"])
        x = F.layer_norm(x + ff, (d_model,), P[b + "ln2.weight"], P[b + "ln2.bias"], eps)
    return F.linear(x, P["last.weight"], P["last.bias"])


def solve(P, c, coords, *, n_blocks, n_head, max_iterations=3, smoothing_factor=0.5, tol=1e-6,
          accumulate_grads=True, errors=None):
    """The published solve: free function ``c`` ``(B, N, dim)``, coordinates ``(N, p)`` -> ``y_guess``.

    ``errors``: a list that receives every global error, in order (to pick tolerances in tests)."""
    dim = c.shape[-1]

    def rhs(y):
        y_in = torch.cat([y, coords.expand(y.shape[0], *coords.shape)], -1)
        if not accumulate_grads:
            y_in = y_in.detach().requires_grad_(True)
        z = model_blocks(P, y_in, n_blocks, n_head) + y_in
        return c + 1.0 * z[:, :, :dim]

    def global_error(a, b):
        diff = a - b
        return torch.sqrt(torch.dot(diff.flatten(), diff.flatten()))

    y_current = c
    y_guess = rhs(y_current)
    error_current = global_error(y_current, y_guess)
    if errors is not None:
        errors.append(float(error_current.detach()))
    iteration = 0
    while error_current > tol:
        new_current = smoothing_factor * y_current + (1 - smoothing_factor) * y_guess
        new_guess = rhs(new_current)
        new_error = global_error(new_current, new_guess)
        y_current, y_guess, error_current = new_current, new_guess, new_error
        if errors is not None:
            errors.append(float(error_current.detach()))
        iteration += 1
        if max_iterations is not None and iteration >= max_iterations:
            break
    return y_guess


def params_of(model, extra_rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """The published parameter dict of our :class:`~sciattn.operators.ANIE` ``model``: its kernel's tensors, the
    FFN renamed, and ``last`` given the ``extra_rows`` (``(p, width)`` weights then ``(p,)`` biases stacked as
    ``(p, width + 1)``) for the coordinate outputs that the published solver computes and drops."""
    P = {}
    for k, t in model.named_parameters():
        if k.startswith(("encoder.", "decoder.")):
            continue
        P[k.replace(".ffn.0.", ".ff.0.").replace(".ffn.3.", ".ff.1.").replace(".attn.", ".")] = t
    P["last.weight"] = torch.cat([model.last.weight, extra_rows[:, :-1]])
    P["last.bias"] = torch.cat([model.last.bias, extra_rows[:, -1]])
    return P
