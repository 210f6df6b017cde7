"""GalerkinAttention layer: faithfulness to Cao (2021), invariances and discretisation convergence."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from sciattn import GalerkinAttention
from sciattn.quadrature import interval_rule


def _manual(layer: GalerkinAttention, x, pos, context, context_pos, w):
    """Independent dense formula of the layer, from its parameters (no shared helper code)."""
    h, dk = layer.n_heads, layer.head_dim
    out_heads = []
    for i in range(h):
        sl = slice(i * dk, (i + 1) * dk)
        q = x @ layer.q_proj.weight[sl].T + layer.q_proj.bias[sl]
        k = context @ layer.k_proj.weight[sl].T + layer.k_proj.bias[sl]
        v = context @ layer.v_proj.weight[sl].T + layer.v_proj.bias[sl]

        def ln(t, norm, i=i):
            return F.layer_norm(t, (dk,), eps=norm.eps) * norm.weight[i] + norm.bias[i]

        if layer.attention_type == "galerkin":
            k, v = ln(k, layer.norm_a), ln(v, layer.norm_b)
        else:
            q, k = ln(q, layer.norm_a), ln(k, layer.norm_b)
        q, k, v = torch.cat([q, pos], -1), torch.cat([k, context_pos], -1), torch.cat([v, context_pos], -1)
        scores = torch.einsum("bid,bjd->bij", q, k) * (w / w.sum())[None, None, :]
        z = scores @ v
        if layer.attention_type == "fourier":
            z = z / math.sqrt(q.shape[-1])
        out_heads.append(z)
    return layer.out_proj(torch.cat(out_heads, -1))


@pytest.mark.parametrize("attention_type", ["galerkin", "fourier"])
def test_layer_matches_the_papers_formula_with_cross_attention(attention_type):
    torch.manual_seed(0)
    layer = GalerkinAttention(8, 2, attention_type=attention_type, pos_dim=2, xavier_gain=1.0).double()
    with torch.no_grad():  # make the affine LN parameters non-trivial
        for p in list(layer.norm_a.parameters()) + list(layer.norm_b.parameters()):
            p.add_(0.3 * torch.randn_like(p))
    x, context = torch.randn(3, 5, 8, dtype=torch.float64), torch.randn(3, 9, 8, dtype=torch.float64)
    pos, cpos = torch.rand(3, 5, 2, dtype=torch.float64), torch.rand(3, 9, 2, dtype=torch.float64)
    w = torch.rand(9, dtype=torch.float64) + 0.1
    got = layer(x, pos, weights=w, context=context, context_pos=cpos)
    torch.testing.assert_close(got, _manual(layer, x, pos, context, cpos, w), rtol=1e-10, atol=1e-12)


def test_initialisation_is_small_xavier_plus_diagonal():
    layer = GalerkinAttention(32, 4, xavier_gain=1e-2, diagonal_weight=1e-2)
    off = layer.q_proj.weight - 1e-2 * torch.eye(32)
    bound = 1e-2 * math.sqrt(6 / 64)
    assert off.abs().max() <= bound + 1e-7
    assert torch.equal(layer.q_proj.bias, torch.zeros(32))


def test_dropout_is_off_in_eval_mode():
    layer = GalerkinAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 6, 8)
    layer.eval()
    torch.testing.assert_close(layer(x), layer(x))
    layer.train()
    assert not torch.allclose(layer(x), layer(x))


def test_padding_never_changes_real_outputs():
    torch.manual_seed(1)
    layer = GalerkinAttention(8, 2, pos_dim=2, xavier_gain=1.0).double()
    x, pos = torch.randn(1, 6, 8, dtype=torch.float64), torch.rand(1, 6, 2, dtype=torch.float64)
    w = torch.rand(1, 6, dtype=torch.float64) + 0.1
    ref = layer(x, pos, weights=w)
    xp = torch.cat([x, torch.full((1, 4, 8), float("nan"), dtype=torch.float64)], 1)
    pp = torch.cat([pos, torch.full((1, 4, 2), float("nan"), dtype=torch.float64)], 1)
    wp = torch.cat([w, torch.full((1, 4), float("nan"), dtype=torch.float64)], 1)
    mask = torch.tensor([[True] * 6 + [False] * 4])
    out = layer(xp, pp, weights=wp, mask=mask)
    torch.testing.assert_close(out[:, :6], ref)
    assert torch.equal(out[:, 6:], torch.zeros(1, 4, 8, dtype=torch.float64))


def test_permuting_points_permutes_the_output():
    torch.manual_seed(2)
    layer = GalerkinAttention(8, 2, pos_dim=3, xavier_gain=1.0).double()
    x, pos = torch.randn(2, 11, 8, dtype=torch.float64), torch.rand(2, 11, 3, dtype=torch.float64)
    w = torch.rand(2, 11, dtype=torch.float64) + 0.1
    perm = torch.randperm(11)
    out = layer(x, pos, weights=w)
    torch.testing.assert_close(layer(x[:, perm], pos[:, perm], weights=w[:, perm]), out[:, perm])


def _smooth_tokens(y: torch.Tensor, lift: torch.Tensor) -> torch.Tensor:
    feats = torch.stack([torch.sin(2 * math.pi * y), torch.cos(3 * y), y**2, torch.exp(-y)], -1)
    return torch.tanh(feats @ lift)[None]


@pytest.mark.parametrize("attention_type", ["galerkin", "fourier"])
def test_discretisation_convergence(attention_type):
    """Refining the quadrature of a smooth input makes the output converge: each successive
    difference at fixed query points shrinks by at least 2x (the midpoint rule gives ~4x)."""
    torch.manual_seed(3)
    layer = GalerkinAttention(32, 2, attention_type=attention_type, pos_dim=1, xavier_gain=1.0).double()
    lift = 0.5 * torch.randn(4, 32, dtype=torch.float64)
    xq = torch.linspace(0.05, 0.95, 10, dtype=torch.float64)
    outs = []
    for n in (32, 64, 128, 256):
        y, w = interval_rule(n, 0.0, 1.0, "midpoint")
        out = layer(_smooth_tokens(xq, lift), xq[None, :, None], weights=w,
                    context=_smooth_tokens(y, lift), context_pos=y[None, :, None])
        outs.append(out.detach())
    diffs = [float((a - b).norm()) for a, b in zip(outs, outs[1:])]
    assert diffs[0] > 1e-8  # the layer is not trivially constant
    for a, b in zip(diffs, diffs[1:]):
        assert a / b >= 2.0, diffs


def test_layer_errors_name_the_argument():
    with pytest.raises(ValueError, match="n_heads: expected a divisor of d_model=10"):
        GalerkinAttention(10, 3)
    with pytest.raises(ValueError, match="attention_type: expected one of"):
        GalerkinAttention(8, 2, attention_type="softmax")
    layer = GalerkinAttention(8, 2, pos_dim=2)
    with pytest.raises(ValueError, match=r"x: expected size 8 along axis -1 \(d_model\), got 7"):
        layer(torch.randn(1, 4, 7), torch.rand(1, 4, 2))
    with pytest.raises(ValueError, match="x: expected a 3-D tensor"):
        layer(torch.randn(4, 8))
    with pytest.raises(ValueError, match="pos: expected coordinates of width pos_dim=2, got None"):
        layer(torch.randn(1, 4, 8))
