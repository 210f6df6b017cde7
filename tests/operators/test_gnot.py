"""GNOT (operators/gnot.py) against a from-scratch transcription of the published equations, and its quadrature,
padding, permutation and input checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import sciattn.operators.gnot  # noqa: F401  (registers "gnot")
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _token_checks as tc  # noqa: E402

CFG = dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, n_inner=2, mlp_layers=1,
           n_experts=2,
           variant="sciattn_v1")  # the transcription below is of the earlier layout (published: test_published_forwards.py)


def _model(**change):
    torch.manual_seed(0)
    return create_operator("gnot", **{**CFG, **change}).double()


# ----------------------------------------------------------------------------- transcription of the paper's maths
def _lin(p, name, x):
    return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]


def _ln(p, name, x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _gelu(x):
    return 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))


def _mlp(p, name, x, n_res):
    h = _gelu(_lin(p, f"{name}.inp", x))
    for i in range(n_res):
        h = _gelu(_lin(p, f"{name}.hidden.{i}", h)) + h
    return _lin(p, f"{name}.out", h)


def _attention(p, name, hq, hk, w, heads):
    """out_i = q~_i + Σ_j w_j (q~_i·k~_j) v_j / Σ_j w_j (q~_i·k~_j), per head, with the explicit N×N matrix."""
    c = hq.shape[-1]
    d = c // heads
    q, k, v = _lin(p, f"{name}.q", hq), _lin(p, f"{name}.k", hk), _lin(p, f"{name}.v", hk)
    outs = []
    for hd in range(heads):
        sl = slice(hd * d, (hd + 1) * d)
        qt = torch.exp(q[..., sl]) / torch.exp(q[..., sl]).sum(-1, keepdim=True)
        kt = torch.exp(k[..., sl]) / torch.exp(k[..., sl]).sum(-1, keepdim=True)
        a = qt @ kt.transpose(-1, -2) * w[:, None, :]              # (B, N, N): w_j q~_i·k~_j
        outs.append(qt + (a @ v[..., sl]) / a.sum(-1, keepdim=True))
    return _lin(p, f"{name}.proj", torch.cat(outs, -1))


def _ffn(p, name, h, gate, n_experts):
    out = 0
    for e in range(n_experts):
        y = _lin(p, f"{name}.experts.{e}.2", _gelu(_lin(p, f"{name}.experts.{e}.0", h)))
        out = out + (gate[..., e:e + 1] * y if gate is not None else y)
    return out


def reference_gnot(p, a, x, w, cfg):
    """GNOT of Hao et al. (thu-ml/GNOT): query stream h = MLP(x), fixed z = MLP([x, a]), blocks of
    cross-attention, gated FFN, self-attention, gated FFN; weights w (B, N) sum to one."""
    heads, n_res, e = cfg["n_heads"], cfg["mlp_layers"], cfg["n_experts"]
    h = _mlp(p, "query_mlp", x, n_res)
    z = _mlp(p, "input_mlp", torch.cat([x, a], -1), n_res)
    gate = None
    if e > 1:
        g = _lin(p, "gate.4", _gelu(_lin(p, "gate.2", _gelu(_lin(p, "gate.0", x)))))
        gate = torch.exp(g) / torch.exp(g).sum(-1, keepdim=True)
    for i in range(cfg["n_layers"]):
        b = f"blocks.{i}"
        h = h + _attention(p, f"{b}.cross", _ln(p, f"{b}.ln1", h), _ln(p, f"{b}.ln2", z), w, heads)
        h = h + _ln(p, f"{b}.ln3", _ffn(p, f"{b}.ffn1", h, gate, e))
        hn = _ln(p, f"{b}.ln4", h)
        h = h + _attention(p, f"{b}.self_attn", hn, hn, w, heads)
        h = h + _ln(p, f"{b}.ln5", _ffn(p, f"{b}.ffn2", h, gate, e))
    return _mlp(p, "output_mlp", h, n_res)


def _cloud(b=2, n=30, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, n, 2, generator=g, dtype=torch.float64), torch.rand(b, n, 2, generator=g, dtype=torch.float64),
            torch.rand(b, n, generator=g, dtype=torch.float64) + 0.2)


@pytest.mark.parametrize("n_experts", [1, 2])
def test_equals_the_transcribed_equations_on_a_weighted_point_set(n_experts):
    model = _model(n_experts=n_experts)
    a, x, w = _cloud()
    ref = reference_gnot(dict(model.state_dict()), a, x, w / w.sum(1, keepdim=True), {**CFG, "n_experts": n_experts})
    out = model(a, pos=x, weights=w)
    assert float((out - ref).abs().max()) <= 1e-10 * float(ref.abs().max())


def test_grid_input_is_the_point_set_of_its_nodes_with_uniform_weights():
    model = _model()
    field = torch.randn(2, 2, 6, 5, dtype=torch.float64)
    ii, jj = torch.meshgrid(torch.arange(6.0, dtype=torch.float64) / 6,
                            torch.arange(5.0, dtype=torch.float64) / 5, indexing="ij")
    pos = torch.stack([ii, jj], -1).reshape(1, 30, 2).expand(2, 30, 2)
    tokens = field.flatten(2).transpose(1, 2)
    ref = reference_gnot(dict(model.state_dict()), tokens, pos, torch.full((2, 30), 1 / 30, dtype=torch.float64), CFG)
    out = model(field)
    assert out.shape == (2, 3, 6, 5)
    assert float((out.flatten(2).transpose(1, 2) - ref).abs().max()) <= 1e-10 * float(ref.abs().max())


def test_weights_enter_as_a_quadrature():
    model = _model()
    a, x, w = _cloud(1, 20)
    base = model(a, pos=x, weights=w)
    # a point split into two copies of half its weight: the same quadrature, the same output
    dup = [*range(20), 7]
    w2 = w[:, dup].clone()
    w2[:, 7] /= 2
    w2[:, 20] /= 2
    out = model(a[:, dup], pos=x[:, dup], weights=w2)
    assert (out[:, :20] - base).abs().max() <= 1e-12 and (out[:, 20] - base[:, 7]).abs().max() <= 1e-12
    # a scale of every weight is the same measure; a non-uniform change is not
    assert (model(a, pos=x, weights=3 * w) - base).abs().max() <= 1e-12
    assert (model(a, pos=x) - base).abs().max() > 1e-4


def test_padding_with_garbage_changes_no_real_output():
    model = _model()
    a, x, w = _cloud(2, 20)
    ref = model(a, pos=x, weights=w)
    ap, xp, wp, mask = tc.pad_cloud(a, x, w, 5)
    out = model(ap, pos=xp, weights=wp, mask=mask)
    assert (out[:, :20] - ref).abs().max() <= 1e-12 and (out[:, 20:] == 0).all()


def test_permutation_equivariant_and_gradients_finite():
    tc.check_permutation_and_gradients(_model(), *_cloud(2, 25))


def test_bad_inputs_name_the_argument():
    model = _model()
    a, x, w = _cloud(2, 10)
    with pytest.raises(ValueError, match="pos: expected 2 coordinates per point, got 3"):
        model(a, pos=torch.rand(2, 10, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="x: expected"):
        model(torch.randn(2, 10, 5, dtype=torch.float64), pos=x)
    with pytest.raises(ValueError, match="weights: expected non-negative finite values"):
        model(a, pos=x, weights=-w)
    with pytest.raises(ValueError, match=r"weights: expected shape \(2, 10\)"):
        model(a, pos=x, weights=w[:, :5])
    with pytest.raises(ValueError, match="x: GNOT needs at least 2 points along every spatial axis"):
        model(torch.randn(1, 2, 1, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="n_heads: expected a divisor of width=8, got 3"):
        create_operator("gnot", in_channels=1, out_channels=1, width=8, n_heads=3)
    with pytest.raises(ValueError, match="spatial_dims: expected 1, 2 or 3, got 4"):
        create_operator("gnot", in_channels=1, out_channels=1, spatial_dims=4)


@pytest.mark.slow
def test_default_config_converges_under_grid_refinement():
    """At initialisation, a smooth input on 32², 64², 128² against 256² at the shared nodes: the difference
    shrinks at first order (the left-point rule of a non-periodic integrand)."""
    tc.check_default_config_converges("gnot")
