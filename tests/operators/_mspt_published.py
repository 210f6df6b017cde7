"""A float64 transcription (our own code) of the published MSPT forward, the oracle of ``test_mspt.py``.

Source read: ``pedrocurvo/Neural-Solver-Library-MSPT`` @ 9778fa7017c10d8c7bbcac9af06265f6e75ef2d1,
``models/MSPT.py``: ``MSPTUnstructured.forward`` in eval mode with ``chunking_mode="linear"`` (the patches are
contiguous runs of the given point order: feed the points in the operator's ball-tree order to compare), mean
pooling with ``Q = 1``, no RoPE, no flash attention, no time input, ``unified_pos=False``. Zero padding to a
multiple of ``V`` enters the pooling and the keys, as published.

Parameters are a dict keyed by the published module names (``preprocess.linear_pre.0.weight``,
``blocks.{i}.Attn.attn.in_proj_weight``, ...); :func:`forward` takes ``pos (B, N, d)``, ``fx (B, N, C)``.
"""

from __future__ import annotations

import math

import torch


def _linear(x, p, name):
    return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]


def _layer_norm(x, p, name, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _mha(x, p, name, heads):
    """``nn.MultiheadAttention(x, x, x)`` (batch first): packed in-projection, softmax per head, out-projection."""
    b, s, d = x.shape
    qkv = x @ p[f"{name}.in_proj_weight"].T + p[f"{name}.in_proj_bias"]
    q, k, v = (t.reshape(b, s, heads, d // heads).transpose(1, 2) for t in qkv.split(d, dim=-1))
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // heads), dim=-1)
    o = (a @ v).transpose(1, 2).reshape(b, s, d)
    return _linear(o, p, f"{name}.out_proj")


def _pmsa(x, prev, p, name, heads, n_patches):
    """``ChunkedGlobalPoolAttention.forward``: pad, mean-pool each chunk, add the carried supernodes, attend."""
    b, n, d = x.shape
    pad = (-n) % n_patches
    xp = torch.cat([x, x.new_zeros(b, pad, d)], 1)
    length = xp.shape[1] // n_patches
    chunks = xp.reshape(b, n_patches, length, d)
    glob = chunks.mean(2) + prev  # (B, V, D)
    seq = torch.cat([chunks, glob[:, None].expand(b, n_patches, n_patches, d)], 2)
    seq = seq.reshape(b * n_patches, length + n_patches, d)
    seq = seq + _mha(_layer_norm(seq, p, f"{name}.norm"), p, f"{name}.attn", heads)
    hid = _gelu(_linear(_layer_norm(seq, p, f"{name}.norm"), p, f"{name}.ff.0"))
    seq = seq + _linear(hid, p, f"{name}.ff.2")
    seq = seq.reshape(b, n_patches, length + n_patches, d)
    points = seq[:, :, :length].reshape(b, n_patches * length, d)[:, :n]
    return points, seq[:, :, length:].mean(1)


def forward(pos, fx, p, *, n_blocks, heads, n_patches):
    """The published ``MSPTUnstructured`` forward (module docstring) -> ``(B, N, out_dim)``."""
    t = torch.cat([pos, fx], -1)
    t = _linear(_gelu(_linear(t, p, "preprocess.linear_pre.0")), p, "preprocess.linear_post")
    t = t + p["placeholder"]
    sup = t.new_zeros(t.shape[0], n_patches, t.shape[-1])
    for i in range(n_blocks):
        name = f"blocks.{i}"
        attn, sup = _pmsa(_layer_norm(t, p, f"{name}.ln_1"), sup, p, f"{name}.Attn", heads, n_patches)
        t = t + attn
        hid = _gelu(_linear(_layer_norm(t, p, f"{name}.ln_2"), p, f"{name}.mlp.linear_pre.0"))
        t = t + _linear(hid, p, f"{name}.mlp.linear_post")
    name = f"blocks.{n_blocks - 1}"
    return _linear(_layer_norm(t, p, f"{name}.ln_3"), p, f"{name}.mlp2")


def published_parameters(model) -> dict[str, torch.Tensor]:
    """Our :class:`~sciattn.operators.MSPT`'s parameters under the published names (the embedding's input
    columns reordered: ours takes ``[x, pos]``, the published ``[pos, fx]``)."""
    d, sd = model.spatial_dims, model.state_dict()
    w0 = sd["embed.0.weight"]
    p = {"preprocess.linear_pre.0.weight": torch.cat([w0[:, -d:], w0[:, :-d]], 1),
         "preprocess.linear_pre.0.bias": sd["embed.0.bias"],
         "preprocess.linear_post.weight": sd["embed.2.weight"], "preprocess.linear_post.bias": sd["embed.2.bias"],
         "placeholder": sd["placeholder"]}
    pairs = {"ln_1": "ln_1", "ln_2": "ln_2", "Attn.norm": "attn.norm", "Attn.attn.out_proj": "attn.out_proj",
             "Attn.ff.0": "attn.ff.0", "Attn.ff.2": "attn.ff.2", "mlp.linear_pre.0": "mlp.0", "mlp.linear_post": "mlp.2"}
    last = len(model.blocks) - 1
    for i in range(len(model.blocks)):
        for theirs, ours in pairs.items():
            for s in ("weight", "bias"):
                p[f"blocks.{i}.{theirs}.{s}"] = sd[f"blocks.{i}.{ours}.{s}"]
        p[f"blocks.{i}.Attn.attn.in_proj_weight"] = sd[f"blocks.{i}.attn.in_proj.weight"]
        p[f"blocks.{i}.Attn.attn.in_proj_bias"] = sd[f"blocks.{i}.attn.in_proj.bias"]
    for s in ("weight", "bias"):
        p[f"blocks.{last}.ln_3.{s}"] = sd[f"norm.{s}"]
        p[f"blocks.{last}.mlp2.{s}"] = sd[f"head.{s}"]
    return p
