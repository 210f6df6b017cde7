"""LinearNO (operators/linear_no.py) against a from-scratch transcription of its linear attention (Hu et al. 2025,
HiPRL/LinearNO as described in the reference notes), and its quadrature, padding, permutation and input checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import sciattn.operators.linear_no  # noqa: F401  (registers "linear_no")
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _token_checks as tc  # noqa: E402

NAME = "linear_no"
CFG = dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, key_ratio=5, mlp_ratio=2)


def reference_linear_no(p, a, x, w, cfg, temperature=False):
    """Per head: m = W_in h, q = softmax_G(W_q m / τ_q), k_jg = w_j exp(s_jg) / Σ_l w_l exp(s_lg) with s = W_k m / τ_k,
    out_i = Σ_g q_ig Σ_j k_jg (W_v m)_j; the published code has w_j = 1 (a plain softmax over the points)."""
    heads = cfg["n_heads"]
    d = cfg["width"] // heads
    h = tc.lin(p, "lift.2", tc.gelu(tc.lin(p, "lift.0", torch.cat([x, a], -1))))
    for layer in range(cfg["n_layers"]):
        b = f"blocks.{layer}"
        m = tc.lin(p, f"{b}.attn.inp", tc.ln(p, f"{b}.ln1", h))
        outs = []
        for hd in range(heads):
            mh = m[..., hd * d:(hd + 1) * d]
            sq = mh @ p[f"{b}.attn.q.weight"].T
            sk = mh @ p[f"{b}.attn.k.weight"].T
            if temperature:
                sq = sq / p[f"{b}.attn.temperature_q"][0, hd, 0, 0].clamp(0.01, 1)
                sk = sk / p[f"{b}.attn.temperature_k"][0, hd, 0, 0].clamp(0.01, 1)
            q = tc.softmax(sq, -1)
            e = w[..., None] * torch.exp(sk)
            k = e / e.sum(1, keepdim=True)
            v = mh @ p[f"{b}.attn.v.weight"].T
            out = torch.zeros_like(v)
            for g in range(q.shape[-1]):
                out = out + q[..., g:g + 1] * (k[..., g:g + 1] * v).sum(1, keepdim=True)
            outs.append(out)
        h = h + tc.lin(p, f"{b}.attn.out", torch.cat(outs, -1))
        h = h + tc.lin(p, f"{b}.mlp.2", tc.gelu(tc.lin(p, f"{b}.mlp.0", tc.ln(p, f"{b}.ln2", h))))
    last = f"blocks.{cfg['n_layers'] - 1}"
    return tc.lin(p, f"{last}.head", tc.ln(p, f"{last}.ln3", h))


@pytest.mark.parametrize("temperature", [False, True])
def test_grid_equals_the_published_softmax_over_points(temperature):
    model = tc.build(NAME, {**CFG, "learn_temperature": temperature})
    if temperature:
        with torch.no_grad():
            for blk in model.blocks:
                blk.attn.temperature_q.uniform_(0.005, 1.5)  # both sides of the clamp
                blk.attn.temperature_k.uniform_(0.3, 0.9)
    a = torch.randn(2, 2, 6, 5, dtype=torch.float64)
    ref = reference_linear_no(tc.params(model), a.flatten(2).transpose(1, 2), tc.grid_nodes(6, 5).expand(2, -1, -1),
                              torch.ones(2, 30, dtype=torch.float64), CFG, temperature)
    assert (model(a).flatten(2).transpose(1, 2) - ref).abs().max() <= 1e-10


def test_points_equal_the_weighted_transcription():
    model = tc.build(NAME, CFG)
    x, pos, w = tc.cloud()
    ref = reference_linear_no(tc.params(model), x, pos, w, CFG)
    assert (model(x, pos, w) - ref).abs().max() <= 1e-10
    assert ref.abs().mean() > 0.05


# test_weights_enter_as_a_quadrature, test_padding_is_ignored, test_permutation_equivariance,
# test_one_and_three_dimensional_grids, test_grid_is_the_point_set_of_its_nodes
globals().update(tc.property_tests(NAME, CFG, skip=("test_gradients_are_finite_and_reach_the_input",)))


def test_gradients_are_finite_and_reach_the_input():
    tc.check_gradients(tc.build(NAME, CFG))
    tc.check_gradients(tc.build(NAME, {**CFG, "learn_temperature": True}))


def test_bad_inputs_name_the_argument():
    tc.check_bad_inputs(tc.build(NAME, CFG), NAME, CFG)
    with pytest.raises(ValueError, match=r"learn_temperature: expected True or False, got 1"):
        create_operator(NAME, **{**CFG, "learn_temperature": 1})
    with pytest.raises(ValueError, match=r"key_ratio: expected a positive"):
        create_operator(NAME, **{**CFG, "key_ratio": -2})
