"""OFormer (operators/oformer.py) against a from-scratch transcription of the published equations, and its
quadrature, padding, permutation and input checks."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

import sciattn.operators.oformer  # noqa: F401  (registers "oformer")
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _token_checks as tc  # noqa: E402

CFG = dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, dim_head=6,
           latent_width=8, rope_scales=[3.0, 1.0], decoder_rope_scale=2.0, rff_features=4,
           variant="sciattn_v1")  # the transcription below is of the earlier layout (published: test_published_forwards.py)


def _model(**change):
    torch.manual_seed(0)
    return create_operator("oformer", **{**CFG, **change}).double()


# ----------------------------------------------------------------------------- transcription of the paper's maths
_lin, _gelu = tc.lin, tc.gelu


def _ln(p, name, x):
    var, mu = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
    return (x - mu) / torch.sqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _rope(t, pos, scale):
    """Rotate each channel pair (c, c + m/2) of axis block a as the complex number t_c + i t_{c+m/2} times
    exp(i s x_a 10000^{-2k/m})."""
    n_axes, d = pos.shape[-1], t.shape[-1]
    m = 2 * (d // (2 * n_axes))
    out = t.clone()
    for a in range(n_axes):
        for k in range(m // 2):
            c1, c2 = a * m + k, a * m + k + m // 2
            z = torch.complex(t[..., c1], t[..., c2])
            rot = z * torch.exp(1j * scale * pos[..., a, None] * 10000.0 ** (-2 * k / m))
            out[..., c1], out[..., c2] = rot.real, rot.imag
    return out


def _galerkin(p, name, h, xq, z, xk, w, heads, dh, scale):
    """(GA h)(x_i) = Σ_j w_j (q_i · k_j) v_j per head (the explicit N×N kernel), k, v normalised per point."""
    q = _lin(p, f"{name}.q", h, bias=False)
    k = _lin(p, f"{name}.k", z, bias=False)
    v = _lin(p, f"{name}.v", z, bias=False)
    outs = []
    for hd in range(heads):
        sl = slice(hd * dh, (hd + 1) * dh)
        kh, vh = k[..., sl], v[..., sl]
        kh = (kh - kh.mean(-1, keepdim=True)) / torch.sqrt(kh.var(-1, unbiased=False, keepdim=True) + 1e-5)
        vh = (vh - vh.mean(-1, keepdim=True)) / torch.sqrt(vh.var(-1, unbiased=False, keepdim=True) + 1e-5)
        qh = _rope(q[..., sl][:, :, None], xq, scale)[:, :, 0]
        kh = _rope(kh[:, :, None], xk, scale)[:, :, 0]
        kernel = qh @ kh.transpose(-1, -2) * w[:, None, :]
        outs.append(kernel @ vh)
    return _lin(p, f"{name}.out", torch.cat(outs, -1))


def reference_oformer(p, a, x, w, cfg, xq=None):
    xq = x if xq is None else xq
    heads, dh = cfg["n_heads"], cfg["dim_head"]
    h = _lin(p, "lift", torch.cat([a, x], -1))
    for i, s in enumerate(cfg["rope_scales"]):
        b = f"layers.{i}"
        h = _ln(p, f"{b}.ln1", h)
        h = h + _galerkin(p, f"{b}.attn", h, x, h, x, w, heads, dh, s)
        h = _ln(p, f"{b}.ln2", h)
        h = h + _lin(p, f"{b}.ffn.2", _gelu(_lin(p, f"{b}.ffn.0", h)))
    z = _lin(p, "to_latent", h)
    phase = 2 * math.pi * xq @ p["rff_freqs"]
    e = _lin(p, "query_embed.2", _gelu(_lin(p, "query_embed.0", torch.cat([phase.cos(), phase.sin()], -1))))
    e = e + _galerkin(p, "cross", e, xq, z, x, w, heads, dh, cfg["decoder_rope_scale"])
    ag = _lin(p, "decoder_ffn.inp", e)
    f = ag.shape[-1] // 2
    e = e + _lin(p, "decoder_ffn.out", ag[..., :f] * _gelu(ag[..., f:]))
    return _lin(p, "head.2", _gelu(_lin(p, "head.0", torch.cat([e, xq], -1))))


def _cloud(b=2, n=30, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, n, 2, generator=g, dtype=torch.float64), torch.rand(b, n, 2, generator=g, dtype=torch.float64),
            torch.rand(b, n, generator=g, dtype=torch.float64) + 0.2)


def test_equals_the_transcribed_equations_on_a_weighted_point_set():
    model = _model()
    a, x, w = _cloud()
    ref = reference_oformer(dict(model.state_dict()), a, x, w / w.sum(1, keepdim=True), CFG)
    out = model(a, pos=x, weights=w).detach()
    assert float((out - ref).abs().max()) <= 1e-10 * float(ref.abs().max())


def test_grid_input_is_the_point_set_of_its_nodes_with_uniform_weights():
    model = _model()
    field = torch.randn(2, 2, 6, 5, dtype=torch.float64)
    ii, jj = torch.meshgrid(torch.arange(6.0, dtype=torch.float64) / 6, torch.arange(5.0, dtype=torch.float64) / 5,
                            indexing="ij")
    pos = torch.stack([ii, jj], -1).reshape(1, 30, 2).expand(2, 30, 2)
    tokens = field.flatten(2).transpose(1, 2)
    ref = reference_oformer(dict(model.state_dict()), tokens, pos, torch.full((2, 30), 1 / 30, dtype=torch.float64), CFG)
    out = model(field).detach()
    assert out.shape == (2, 3, 6, 5)
    assert float((out.flatten(2).transpose(1, 2) - ref).abs().max()) <= 1e-10 * float(ref.abs().max())


def test_decoder_at_other_query_points():
    """OFormer's decoder evaluates at any points: the transcription with separate queries, and the grid output
    is the decoder at the grid's nodes."""
    model = _model()
    a, x, w = _cloud(2, 30)
    xq = torch.rand(2, 11, 2, dtype=torch.float64)
    ref = reference_oformer(dict(model.state_dict()), a, x, w / w.sum(1, keepdim=True), CFG, xq)
    out = model(a, pos=x, weights=w, query_pos=xq).detach()
    assert out.shape == (2, 11, 3)
    assert float((out - ref).abs().max()) <= 1e-10 * float(ref.abs().max())
    assert float((model(a, pos=x, weights=w, query_pos=x) - model(a, pos=x, weights=w)).abs().max()) <= 1e-12
    field = torch.randn(2, 2, 6, 5, dtype=torch.float64)
    ii, jj = torch.meshgrid(torch.arange(6.0, dtype=torch.float64) / 6, torch.arange(5.0, dtype=torch.float64) / 5,
                            indexing="ij")
    nodes = torch.stack([ii, jj], -1).reshape(1, 30, 2).expand(2, 30, 2)
    on_nodes = model(field, query_pos=nodes).detach()
    assert float((on_nodes - model(field).detach().flatten(2).transpose(1, 2)).abs().max()) <= 1e-12
    with pytest.raises(ValueError, match="query_pos: expected"):
        model(a, pos=x, query_pos=torch.rand(2, 11, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="query_pos: expected"):
        model(a, pos=x, query_pos=torch.rand(3, 11, 2, dtype=torch.float64))


def test_published_query_initialisation():
    """Per head orthogonal with gain 1/d, plus I/d when the head is as wide as the model (d = C)."""
    wq = _model().layers[0].attn.q.weight.detach()[:6]
    torch.testing.assert_close(wq @ wq.T, torch.eye(6, dtype=torch.float64) / 36, rtol=0, atol=1e-7)  # float32 init
    square = _model(dim_head=8).layers[0].attn.q.weight.detach()[:8] - torch.eye(8, dtype=torch.float64) / 8
    torch.testing.assert_close(square @ square.T, torch.eye(8, dtype=torch.float64) / 64, rtol=0, atol=1e-7)


def test_weights_enter_as_a_quadrature():
    model = _model()
    a, x, w = _cloud(1, 20)
    base = model(a, pos=x, weights=w).detach()
    dup = [*range(20), 7]
    w2 = w[:, dup].clone()
    w2[:, 7] /= 2
    w2[:, 20] /= 2
    out = model(a[:, dup], pos=x[:, dup], weights=w2).detach()
    assert float((out[:, :20] - base).abs().max()) <= 1e-12 and float((out[:, 20] - base[:, 7]).abs().max()) <= 1e-12
    assert float((model(a, pos=x, weights=3 * w).detach() - base).abs().max()) <= 1e-12
    assert float((model(a, pos=x).detach() - base).abs().max()) > 1e-4


def test_padding_with_garbage_changes_no_real_output():
    model = _model()
    a, x, w = _cloud(2, 20)
    ref = model(a, pos=x, weights=w).detach()
    ap, xp, wp, mask = tc.pad_cloud(a, x, w, 5, far=float("inf"))
    out = model(ap, pos=xp, weights=wp, mask=mask).detach()
    assert float((out[:, :20] - ref).abs().max()) <= 1e-12 and (out[:, 20:] == 0).all()


def test_permutation_equivariant_and_gradients_finite():
    tc.check_permutation_and_gradients(_model(), *_cloud(2, 25))


def test_bad_inputs_name_the_argument():
    model = _model()
    a, x, w = _cloud(2, 10)
    with pytest.raises(ValueError, match="pos: expected 2 coordinates per point, got 1"):
        model(a, pos=torch.rand(2, 10, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="weights: expected non-negative finite values"):
        model(a, pos=x, weights=-w)
    with pytest.raises(ValueError, match="x: OFormer needs at least 2 points along every spatial axis"):
        model(torch.randn(1, 2, 8, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"rope_scales: expected 2 finite numbers \(one per layer\)"):
        create_operator("oformer", in_channels=1, out_channels=1, n_layers=2, rope_scales=[1.0])
    with pytest.raises(ValueError, match="rff_features: expected an even number"):
        create_operator("oformer", in_channels=1, out_channels=1, rff_features=5)


@pytest.mark.slow
def test_default_config_converges_under_grid_refinement():
    """At initialisation, a smooth input on 32², 64², 128² against 256² at the shared nodes: first order."""
    tc.check_default_config_converges("oformer")
