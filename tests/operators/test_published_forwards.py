"""The default ONO, GNOT, FactFormer and OFormer are the published architectures: each equals, in float64 at matched
weights, a transcription of the authors' forward pass (written from their code, in their module names and
layouts: fused ``to_qkv``, ``[sin, cos]`` features, ``GeAct``/``GeGELU``, unbiased GroupNorm ...), with only the
documented patches applied (the quadrature ``1/N`` where the published sum is bare, FactFormer's pointwise head,
ONO's per-sample covariance and relative jitter, set to 0 here). The weights are copied from our model into the
published names by :func:`_published_names` maps, so a renamed or reshaped module fails the copy, not silently.
``"sciattn_v1"`` keeps the earlier layout, and a checkpoint stored without ``variant`` loads as it."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

import sciattn.operators.factformer  # noqa: F401
import sciattn.operators.gnot  # noqa: F401
import sciattn.operators.oformer  # noqa: F401
import sciattn.operators.ono  # noqa: F401
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _token_checks as tc  # noqa: E402

F64 = torch.float64
lin, gelu = tc.lin, tc.gelu


def _ln(p, name, x, eps=1e-5):
    var, mu = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
    return (x - mu) / torch.sqrt(var + eps) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _wide(model):
    """Draw weights away from the small published inits so every path contributes (see _token_checks.build)."""
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5 / p.shape[1] ** 0.5 if p.dim() >= 2 else 0.1)
    return model


def _copy(ours: dict, mapping: dict[str, str]) -> dict:
    """``{published name: tensor}``; every one of our parameters must be mapped (none dropped silently)."""
    unmapped = sorted(set(ours) - set(mapping.values()))
    assert not unmapped, f"weights without a published counterpart: {unmapped}"
    return {pub: ours[mine] for pub, mine in mapping.items()}


def _rotate_half(t):
    x1, x2 = t.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def _rotary(t, coord, dim, scale_over_min_freq):
    """lucidrains' RotaryEmbedding(dim) as FactFormer/OFormer use it: freqs = t·(scale/min_freq)·10000^(-2k/dim)."""
    inv = 1.0 / 10000 ** (torch.arange(0, dim, 2, dtype=F64) / dim)
    f = torch.einsum("...i,j->...ij", coord * scale_over_min_freq, inv)
    f = torch.cat([f, f], dim=-1)
    return t * f.cos() + _rotate_half(t) * f.sin()


# ============================================================================================= ONO (xzppp/ONO)
def published_ono(P, x, fx, *, n_layers, heads, proj_scale):
    """``ONO2.forward`` (ONOmodel2.py, orth=True, the default linear attention) in training mode for one sample.
    ``proj_scale``: the documented patch, the projection ``x_ᵀ fx`` times 1/N (1 gives the published bare sum)."""
    h = lin(P, "preprocess", torch.cat([x, fx], -1))
    x, fx = h.chunk(2, dim=-1)
    for i in range(n_layers):
        b = f"blocks.{i}"
        u = _ln(P, f"{b}.ln_1", x)
        q, k, v = (lin(P, f"{b}.Attn.to_{t}", u, bias=False) for t in "qkv")
        n, c = q.shape
        d = c // heads
        q, k, v = (t.reshape(n, heads, d).transpose(0, 1) for t in (q, k, v))
        q = q.softmax(dim=-1) * d ** -0.5  # lucidrains linear_attn: q over features, k over the sequence
        k = k.softmax(dim=-2)
        att = (q @ (k.transpose(-1, -2) @ v)).transpose(0, 1).reshape(n, c)
        x = lin(P, f"{b}.Attn.to_out", att) + x
        x = lin(P, f"{b}.mlp.linear_post", gelu(lin(P, f"{b}.mlp.linear_pre.0", _ln(P, f"{b}.ln_2", x)))) + x
        x_ = lin(P, f"{b}.proj", x)
        cov = torch.einsum("lc,ld->cd", x_, x_) / x_.shape[0]  # / batch (1) / points
        x_ = x_ @ torch.linalg.cholesky(cov).inverse().transpose(-2, -1)
        fx = (x_ * torch.nn.functional.softplus(P[f"{b}.mu"])) @ (proj_scale * (x_.transpose(-2, -1) @ fx)) + fx
        if i == n_layers - 1:
            fx = lin(P, f"{b}.mlp2", _ln(P, f"{b}.ln_3", fx))
        else:
            fx = lin(P, f"{b}.mlp2.linear_post", gelu(lin(P, f"{b}.mlp2.linear_pre.0", _ln(P, f"{b}.ln_3", fx))))
    return fx


def _ono_names(n_layers):
    m = {"preprocess.weight": "lift.weight", "preprocess.bias": "lift.bias"}
    for i in range(n_layers):
        b = f"blocks.{i}"
        for ln in ("1", "2", "3"):
            m |= {f"{b}.ln_{ln}.{t}": f"{b}.ln{ln}.{t}" for t in ("weight", "bias")}
        m |= {f"{b}.Attn.to_{t}.weight": f"{b}.attn.{t}.weight" for t in "qkv"}
        m |= {f"{b}.Attn.to_out.{t}": f"{b}.attn.out.{t}" for t in ("weight", "bias")}
        m |= {f"{b}.mlp.linear_pre.0.{t}": f"{b}.mlp.0.{t}" for t in ("weight", "bias")}
        m |= {f"{b}.mlp.linear_post.{t}": f"{b}.mlp.2.{t}" for t in ("weight", "bias")}
        m |= {f"{b}.proj.{t}": f"{b}.proj.{t}" for t in ("weight", "bias")} | {f"{b}.mu": f"{b}.mu"}
        if i == n_layers - 1:
            m |= {f"{b}.mlp2.{t}": f"{b}.mlp2.{t}" for t in ("weight", "bias")}
        else:
            m |= {f"{b}.mlp2.linear_pre.0.{t}": f"{b}.mlp2.0.{t}" for t in ("weight", "bias")}
            m |= {f"{b}.mlp2.linear_post.{t}": f"{b}.mlp2.2.{t}" for t in ("weight", "bias")}
    return m


def test_ono_default_is_the_published_forward_with_the_quadrature_projection():
    cfg = dict(in_channels=1, out_channels=1, spatial_dims=2, width=8, n_layers=2, n_heads=2, psi_dim=3,
               mlp_ratio=2, cov_jitter=0.0)
    torch.manual_seed(0)
    model = _wide(create_operator("ono", **cfg).double()).train()
    assert isinstance(model.lift, torch.nn.Linear) and isinstance(model.blocks[0].proj, torch.nn.Linear)
    P = _copy(tc.params(model), _ono_names(2))
    a = torch.randn(1, 1, 6, 5, dtype=F64)
    pos, fx = tc.grid_nodes(6, 5), a.flatten(2)[0].T
    ref = published_ono(P, pos, fx, n_layers=2, heads=2, proj_scale=1 / 30)
    out = model(a).flatten(2)[0].T.detach()
    assert float((out - ref).abs().max()) <= 1e-10 * float(ref.abs().max())
    bare = published_ono(P, pos, fx, n_layers=2, heads=2, proj_scale=1.0)  # the unpatched sum differs
    assert float((out - bare).abs().max()) > 1e-3 * float(ref.abs().max())


# ============================================================================================= GNOT (thu-ml/GNOT)
def _gnot_mlp(P, name, x, n_res):
    h = gelu(lin(P, f"{name}.linear_pre", x))
    for j in range(n_res):
        h = gelu(lin(P, f"{name}.linears.{j}", h)) + h
    return lin(P, f"{name}.linear_post", h)


def _heads(t, heads):
    n, c = t.shape
    return t.reshape(n, heads, c // heads).transpose(0, 1)


def published_gnot(P, pos, a, *, n_layers, heads, n_experts, mlp_layers):
    """``GNOT.forward`` (models/mmgpt.py) for one sample and one input function ``[pos, a]``: trunk MLP on the node
    features (the coordinates), the ``MIOECrossAttentionBlock`` stack with a gate network per block, out MLP."""
    x = _gnot_mlp(P, "trunk_mlp", pos, mlp_layers)
    z = _gnot_mlp(P, "branch_mlps.0", torch.cat([pos, a], -1), mlp_layers)
    for i in range(n_layers):
        b = f"blocks.{i}"
        g = P.get(f"{b}.gatenet.0.weight")
        gate = torch.softmax(lin(P, f"{b}.gatenet.4", gelu(lin(P, f"{b}.gatenet.2", gelu(lin(P, f"{b}.gatenet.0", pos))))),
                             dim=-1) if g is not None else torch.ones(pos.shape[0], 1, dtype=F64)
        # cross attention (LinearCrossAttention, one input)
        q = _heads(lin(P, f"{b}.crossattn.query", _ln(P, f"{b}.ln1", x)), heads).softmax(dim=-1)
        y = _ln(P, f"{b}.ln2_branch.0", z)
        k = _heads(lin(P, f"{b}.crossattn.keys.0", y), heads).softmax(dim=-1)
        v = _heads(lin(P, f"{b}.crossattn.values.0", y), heads)
        d_inv = 1.0 / (q * k.sum(dim=-2, keepdim=True)).sum(dim=-1, keepdim=True)
        out = q + (q @ (k.transpose(-2, -1) @ v)) * d_inv
        x = x + lin(P, f"{b}.crossattn.proj", out.transpose(0, 1).reshape(x.shape))
        moe = torch.stack([lin(P, f"{b}.moe_mlp1.{e}.2", gelu(lin(P, f"{b}.moe_mlp1.{e}.0", x)))
                           for e in range(n_experts)], dim=-1)
        x = x + _ln(P, f"{b}.ln3", (gate[:, None, :] * moe).sum(-1))
        # self attention (LinearAttention, 'l1')
        u = _ln(P, f"{b}.ln4", x)
        q = _heads(lin(P, f"{b}.selfattn.query", u), heads).softmax(dim=-1)
        k = _heads(lin(P, f"{b}.selfattn.key", u), heads).softmax(dim=-1)
        v = _heads(lin(P, f"{b}.selfattn.value", u), heads)
        d_inv = 1.0 / (q * k.sum(dim=-2, keepdim=True)).sum(dim=-1, keepdim=True)
        x = x + lin(P, f"{b}.selfattn.proj", ((q @ (k.transpose(-2, -1) @ v)) * d_inv + q).transpose(0, 1).reshape(x.shape))
        moe = torch.stack([lin(P, f"{b}.moe_mlp2.{e}.2", gelu(lin(P, f"{b}.moe_mlp2.{e}.0", x)))
                           for e in range(n_experts)], dim=-1)
        x = x + _ln(P, f"{b}.ln5", (gate[:, None, :] * moe).sum(-1))
    return _gnot_mlp(P, "out_mlp", x, mlp_layers)


def _gnot_names(n_layers, n_experts, mlp_layers):
    wb = ("weight", "bias")
    m = {}
    for pub, mine in (("trunk_mlp", "query_mlp"), ("branch_mlps.0", "input_mlp"), ("out_mlp", "output_mlp")):
        m |= {f"{pub}.linear_pre.{t}": f"{mine}.inp.{t}" for t in wb}
        m |= {f"{pub}.linear_post.{t}": f"{mine}.out.{t}" for t in wb}
        m |= {f"{pub}.linears.{j}.{t}": f"{mine}.hidden.{j}.{t}" for j in range(mlp_layers) for t in wb}
    for i in range(n_layers):
        b = f"blocks.{i}"
        m |= {f"{b}.ln{k}.{t}": f"{b}.ln{k}.{t}" for k in (1, 3, 4, 5) for t in wb}
        m |= {f"{b}.ln2_branch.0.{t}": f"{b}.ln2.{t}" for t in wb}
        m |= {f"{b}.crossattn.{p}.{t}": f"{b}.cross.{o}.{t}" for p, o in (("query", "q"), ("keys.0", "k"),
                                                                          ("values.0", "v"), ("proj", "proj")) for t in wb}
        m |= {f"{b}.selfattn.{p}.{t}": f"{b}.self_attn.{o}.{t}" for p, o in (("query", "q"), ("key", "k"),
                                                                             ("value", "v"), ("proj", "proj")) for t in wb}
        for f in (1, 2):
            m |= {f"{b}.moe_mlp{f}.{e}.{j}.{t}": f"{b}.ffn{f}.experts.{e}.{j}.{t}" for e in range(n_experts)
                  for j in (0, 2) for t in wb}
        if n_experts > 1:
            m |= {f"{b}.gatenet.{j}.{t}": f"{b}.gate.{j}.{t}" for j in (0, 2, 4) for t in wb}
    return m


@pytest.mark.parametrize("heads,n_experts", [(1, 1), (2, 2)])
def test_gnot_default_is_the_published_forward(heads, n_experts):
    cfg = dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=heads, n_inner=2,
               mlp_layers=1, n_experts=n_experts)
    torch.manual_seed(0)
    model = _wide(create_operator("gnot", **cfg).double())
    if n_experts > 1:
        assert model.gate is None and all(b.gate[0].out_features == 2 * 8 for b in model.blocks)  # n_inner·C
    P = _copy(tc.params(model), _gnot_names(2, n_experts, 1))
    a = torch.randn(1, 2, 6, 5, dtype=F64)
    ref = published_gnot(P, tc.grid_nodes(6, 5), a.flatten(2)[0].T, n_layers=2, heads=heads, n_experts=n_experts,
                         mlp_layers=1)
    out = model(a).flatten(2)[0].T.detach()
    assert float((out - ref).abs().max()) <= 1e-10 * float(ref.abs().max())


# ============================================================================================= FactFormer
def published_factformer(P, a, coords, *, n_layers, heads, dim_head, km, rope_scale, n_points):
    """``FactorizedTransformer`` + ``FABlock2D`` (BaratiLab/FactFormer libs/, examples/darcy2d_fact.py) on ``a``
    ``(nx, ny, C_in)``, then the documented patches: the pointwise head ``Lin(GELU(Lin(u)))`` in place of the
    fixed-size convolutional head, and GroupNorm's eps scaled by N² (our kernel carries the quadrature 1/n per
    axis; GroupNorm is scale-invariant otherwise)."""
    px, py = coords
    nx, ny = px.shape[0], py.shape[0]
    u = lin(P, "to_in", a)
    pos = torch.stack(torch.meshgrid(px, py, indexing="ij"), dim=-1)
    rank = dim_head * km
    for i in range(n_layers):
        e = f"encoder.layers.{i}"
        proj = 2 * math.pi * pos @ P[f"{e}.0.0._B"]  # GaussianFourierFeatureTransform: [sin, cos](2π x B)
        u = u + lin(P, f"{e}.0.1", torch.cat([proj.sin(), proj.cos()], -1))
        b = f"{e}.1"
        h = _ln(P, f"{b}.in_norm", u)
        v = lin(P, f"{b}.to_v", h, bias=False)
        h = lin(P, f"{b}.to_in", h, bias=False)
        kernels = []
        for axis, (name, pts) in enumerate((("to_x", px), ("to_y", py))):
            r = f"{b}.{name}.0"
            t = lin(P, f"{r}.to_in", h if axis == 0 else h.transpose(0, 1), bias=False).mean(dim=1)
            t = _ln(P, f"{r}.out_ffn.norm", t)
            t = lin(P, f"{r}.out_ffn.fn.net.0", t)
            t = gelu(t[..., :t.shape[-1] // 2]) * t[..., t.shape[-1] // 2:]  # GeAct
            t = lin(P, f"{r}.out_ffn.fn.net.3", t)
            kn = f"{b}.low_rank_kernel_{'xy'[axis]}"
            q = lin(P, f"{kn}.to_q", t, bias=False).reshape(-1, heads, rank).transpose(0, 1)
            k = lin(P, f"{kn}.to_k", t, bias=False).reshape(-1, heads, rank).transpose(0, 1)
            q, k = _rotary(q, pts, rank, rope_scale), _rotary(k, pts, rank, rope_scale)
            kernels.append(torch.einsum("hid,hjd->hij", q, k) * (1 / math.sqrt(rank) if km > 4 else 1.0))
        phi = v.reshape(nx, ny, heads, dim_head).permute(2, 0, 1, 3)  # b i l (h c) -> b h i l c
        phi = torch.einsum("hij,hjmc->himc", kernels[0], phi)
        phi = torch.einsum("hlm,himc->hilc", kernels[1], phi)
        phi = phi.permute(1, 2, 0, 3).reshape(nx, ny, heads * dim_head)
        g = phi.reshape(nx * ny, heads, dim_head).transpose(0, 1).reshape(heads, -1)  # domain-wise groups
        mean, var = g.mean(-1, keepdim=True), g.var(-1, keepdim=True)  # torch.var: unbiased
        g = (g - mean) / (var + 1e-8 * n_points ** 2).sqrt()
        phi = g.reshape(heads, nx * ny, dim_head).transpose(0, 1).reshape(nx, ny, -1)
        u = lin(P, f"{b}.to_out.3", gelu(lin(P, f"{b}.to_out.1", phi, bias=False)), bias=False) + u
    return lin(P, "head.2", gelu(lin(P, "head.0", u)))


def _factformer_names(n_layers):
    wb = ("weight", "bias")
    m = {f"to_in.{t}": f"lift.{t}" for t in wb} | {f"head.{j}.{t}": f"head.{j}.{t}" for j in (0, 2) for t in wb}
    for i in range(n_layers):
        e, b = f"encoder.layers.{i}", f"blocks.{i}"
        m |= {f"{e}.0.1.{t}": f"pos_lifts.{i}.{t}" for t in wb}
        m |= {f"{e}.1.in_norm.{t}": f"{b}.ln.{t}" for t in wb}
        m |= {f"{e}.1.to_v.weight": f"{b}.to_v.weight", f"{e}.1.to_in.weight": f"{b}.to_in.weight",
              f"{e}.1.to_out.1.weight": f"{b}.out.0.weight", f"{e}.1.to_out.3.weight": f"{b}.out.2.weight"}
        for axis, name in enumerate(("to_x", "to_y")):
            r, k = f"{e}.1.{name}.0", f"{b}.kernels.{axis}"
            m |= {f"{r}.to_in.weight": f"{k}.proj.weight"} | {f"{r}.out_ffn.norm.{t}": f"{k}.ln.{t}" for t in wb}
            m |= {f"{r}.out_ffn.fn.net.{j}.{t}": f"{k}.mlp.{o}.{t}" for j, o in ((0, 0), (3, 2)) for t in wb}
            m |= {f"{e}.1.low_rank_kernel_{'xy'[axis]}.to_{t}.weight": f"{k}.{t}.weight" for t in "qk"}
    return m


def test_factformer_default_is_the_published_forward():
    cfg = dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, dim_head=4,
               kernel_multiplier=2, rope_scale=5.0)
    torch.manual_seed(0)
    model = _wide(create_operator("factformer", **cfg).double())
    assert model.rff_freqs.shape == (2, 2, 4)  # each layer its own frequencies, dim // 2 of them
    P = _copy(tc.params(model), _factformer_names(2))
    for i in range(2):
        P[f"encoder.layers.{i}.0.0._B"] = model.rff_freqs[i].double()
    a = torch.randn(1, 2, 6, 5, dtype=F64)
    coords = [torch.arange(n, dtype=F64) / n for n in (6, 5)]  # the Grid domain's nodes, given to both
    ref = published_factformer(P, a[0].movedim(0, -1), coords, n_layers=2, heads=2, dim_head=4, km=2,
                               rope_scale=5.0, n_points=30)
    out = model(a)[0].movedim(0, -1).detach()
    assert float((out - ref).abs().max()) <= 1e-10 * float(ref.abs().max())


# ============================================================================================= OFormer
def _instance_norm(t):  # InstanceNorm1d on (b·h, n, d): each point's d features
    var, mu = torch.var_mean(t, dim=-1, keepdim=True, unbiased=False)
    return (t - mu) / torch.sqrt(var + 1e-5)


def _oformer_attention(P, name, xq, z, pq, pz, heads, dim_head, s, fused):
    """``LinearAttention`` / ``CrossLinearAttention`` ('galerkin', relative_emb_dim=2): IN on k, v; 2-D RoPE
    (``RotaryEmbedding(dim_head // 2)``, first half x, second half y); ``q (kᵀ v) / N``; ``to_out``."""
    if fused:
        q, k, v = lin(P, f"{name}.to_qkv", xq, bias=False).chunk(3, dim=-1)
    else:
        q = lin(P, f"{name}.to_q", xq, bias=False)
        k, v = lin(P, f"{name}.to_kv", z, bias=False).chunk(2, dim=-1)
    q, k, v = (_heads(t, heads) for t in (q, k, v))
    k, v = _instance_norm(k), _instance_norm(v)
    half = dim_head // 2

    def rope(t, p):
        return torch.cat([_rotary(t[..., :half], p[:, 0], half, s), _rotary(t[..., half:], p[:, 1], half, s)], -1)

    q, k = rope(q, pq), rope(k, pz)
    out = (q @ (k.transpose(-1, -2) @ v)) / z.shape[0]
    out = out.transpose(0, 1).reshape(xq.shape[0], -1)
    return lin(P, f"{name}.to_out.0", out) if f"{name}.to_out.0.weight" in P else out


def _geglu(P, name, x, j_in, j_out):
    h = lin(P, f"{name}.net.{j_in}", x)
    c = h.shape[-1] // 2
    return lin(P, f"{name}.net.{j_out}", gelu(h[..., :c]) * h[..., c:])


def published_oformer(P, a, pos, *, depth, heads, enc_head, dec_head, scales, dec_scale):
    """``SpatialEncoder2D`` + ``PointWiseDecoder2DSimple`` (BaratiLab/OFormer uniform_grids/nn_module), eval mode
    (no dropout), for one sample; ``scales`` are the encoder's RoPE ``scale_l / min_freq`` (published
    ``[res, res // 4, 1, ...] · res``) and ``dec_scale`` the decoder's (``16 · res``)."""
    x = lin(P, "encoder.to_embedding.0", torch.cat([a, pos], -1), bias=False)
    for i in range(depth):
        layer = f"encoder.s_transformer.layers.{i}"
        x = _ln(P, f"{layer}.0", x)
        x = _oformer_attention(P, f"{layer}.1", x, x, pos, pos, heads, enc_head, scales[i], fused=True) + x
        x = _ln(P, f"{layer}.2", x)
        x = _geglu(P, f"{layer}.3", x, 0, 3) + x
    z = lin(P, "encoder.to_out.0", x, bias=False)
    proj = 2 * math.pi * pos @ P["decoder.coordinate_projection.0._B"]
    e = lin(P, "decoder.coordinate_projection.1", torch.cat([proj.sin(), proj.cos()], -1), bias=False)
    e = lin(P, "decoder.coordinate_projection.3", gelu(e), bias=False)
    t = "decoder.decoding_transformer"
    e = _oformer_attention(P, f"{t}.cross_attn_module", e, z, pos, pos, heads, dec_head, dec_scale, fused=False) + e
    e = _geglu(P, f"{t}.ffn", e, 0, 3) + e
    h = gelu(lin(P, "decoder.to_out.0", torch.cat([e, pos], -1), bias=False))
    h = gelu(lin(P, "decoder.to_out.2", h, bias=False))
    return lin(P, "decoder.to_out.4", h)


def _oformer_names(model, depth):
    P = tc.params(model)
    wb = ("weight", "bias")
    m, fused = {"encoder.to_embedding.0.weight": "lift.weight", "encoder.to_out.0.weight": "to_latent.weight",
                "decoder.coordinate_projection.1.weight": "query_embed.0.weight",
                "decoder.coordinate_projection.3.weight": "query_embed.2.weight",
                "decoder.decoding_transformer.cross_attn_module.to_q.weight": "cross.q.weight"}, {}
    for i in range(depth):
        layer, ours = f"encoder.s_transformer.layers.{i}", f"layers.{i}"
        m |= {f"{layer}.0.{t}": f"{ours}.ln1.{t}" for t in wb} | {f"{layer}.2.{t}": f"{ours}.ln2.{t}" for t in wb}
        if f"{ours}.attn.out.weight" in P:
            m |= {f"{layer}.1.to_out.0.{t}": f"{ours}.attn.out.{t}" for t in wb}
        m |= {f"{layer}.3.net.{j}.{t}": f"{ours}.ffn.{o}.{t}" for j, o in ((0, "inp"), (3, "out")) for t in wb}
        fused[f"{layer}.1.to_qkv.weight"] = [f"{ours}.attn.{t}.weight" for t in "qkv"]
    t = "decoder.decoding_transformer"
    if "cross.out.weight" in P:
        m |= {f"{t}.cross_attn_module.to_out.0.{w}": f"cross.out.{w}" for w in wb}
    m |= {f"{t}.ffn.net.{j}.{w}": f"decoder_ffn.{o}.{w}" for j, o in ((0, "inp"), (3, "out")) for w in wb}
    m |= {f"decoder.to_out.{j}.weight": f"head.{j}.weight" for j in (0, 2, 4)} | {"decoder.to_out.4.bias": "head.4.bias"}
    fused[f"{t}.cross_attn_module.to_kv.weight"] = ["cross.k.weight", "cross.v.weight"]
    used = set(m.values()) | {n for names in fused.values() for n in names}
    assert not sorted(set(P) - used), f"weights without a published counterpart: {sorted(set(P) - used)}"
    out = {pub: P[mine] for pub, mine in m.items()}
    out |= {pub: torch.cat([P[n] for n in names]) for pub, names in fused.items()}  # fused rows [q; k; v]
    out["decoder.coordinate_projection.0._B"] = model.rff_freqs.double()
    return out


@pytest.mark.parametrize("heads", [1, 2])
def test_oformer_default_is_the_published_darcy_model(heads):
    res, depth, width, latent = 8, 3, 8, 12
    scales = [res * res, (res // 4) * res] + [res] * (depth - 2)  # scale_l / min_freq with min_freq = 1/res
    cfg = dict(in_channels=1, out_channels=2, spatial_dims=2, width=width, n_layers=depth, n_heads=heads,
               latent_width=latent, rope_scales=[float(s) for s in scales], decoder_rope_scale=16.0 * res)
    torch.manual_seed(0)
    model = _wide(create_operator("oformer", **cfg).double())
    if heads == 1:  # one head of the stream's width: no output projection, as published
        assert isinstance(model.layers[0].attn.out, torch.nn.Identity)
    P = _oformer_names(model, depth)
    a = torch.randn(1, 1, res, res, dtype=F64)
    pos = tc.grid_nodes(res, res)
    ref = published_oformer(P, a.flatten(2)[0].T, pos, depth=depth, heads=heads, enc_head=width, dec_head=latent,
                            scales=scales, dec_scale=16.0 * res)
    out = model(a).flatten(2)[0].T.detach()
    assert float((out - ref).abs().max()) <= 1e-10 * float(ref.abs().max())


# ============================================================================================= variants and old checkpoints
@pytest.mark.parametrize("name", ["ono", "gnot", "factformer", "oformer"])
def test_a_checkpoint_stored_without_variant_loads_as_the_earlier_layout(name, tmp_path):
    """Configs store every constructor key, so one written before ``variant`` existed lacks it: it was trained
    with what is now ``"sciattn_v1"`` and must load (and compute) as that, not as the new default."""
    from sciattn.pde_data.normalizers import UnitGaussianNormalizer
    from sciattn.train.checkpoint import load_model, save_checkpoint

    torch.manual_seed(0)
    kw = {"n_experts": 2} if name == "gnot" else {}
    model = create_operator(name, in_channels=1, out_channels=1, variant="sciattn_v1", **kw)
    old = {k: v for k, v in model.config.items() if k != "variant"}  # as stored before the key existed
    for key in ("rff_features", "dim_head"):
        if key in old and old[key] is None:  # the earlier defaults were numbers, stored as such
            old[key] = 32
    model.config = old
    norm = UnitGaussianNormalizer(torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    path = save_checkpoint(tmp_path / "checkpoint.pt", model=model, x_normalizer=norm, y_normalizer=norm)
    assert "variant" not in json.loads(torch.load(path, weights_only=True)["operator_config"])
    loaded, *_ = load_model(path)
    assert loaded.variant == "sciattn_v1"
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model.eval()(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="variant"):
        create_operator(name, in_channels=1, out_channels=1, variant="ours")


# tests/operators/data/legacy_variant_checkpoints.pt: small ONO, GNOT (two experts), FactFormer and OFormer models built
# by the operators' code at commit e9567a7 (before the published defaults), weights perturbed away from their init,
# each config holding every constructor key as create_operator stored it (no "variant"), with their outputs on x.
LEGACY = Path(__file__).resolve().parent / "data" / "legacy_variant_checkpoints.pt"


@pytest.mark.parametrize("name", ["ono", "gnot", "factformer", "oformer"])
def test_a_checkpoint_of_the_earlier_code_computes_what_it_was_trained_to(name, tmp_path):
    from sciattn.pde_data.normalizers import IdentityNormalizer
    from sciattn.train.checkpoint import load_model, save_checkpoint

    legacy = torch.load(LEGACY, weights_only=True)
    config, state = legacy[name]["config"], legacy[name]["state"]
    assert "variant" not in config
    model = create_operator(name, **config, variant="sciattn_v1")
    model.load_state_dict(state)
    model.config = config  # stored the old way
    path = save_checkpoint(tmp_path / "checkpoint.pt", model=model, x_normalizer=IdentityNormalizer(),
                           y_normalizer=IdentityNormalizer())
    loaded, *_ = load_model(path)
    assert loaded.variant == "sciattn_v1"
    with torch.no_grad():
        torch.testing.assert_close(loaded(legacy["x"]), legacy[name]["y"], rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError):  # the new default cannot even hold these weights
        create_operator(name, **config).load_state_dict(state)
