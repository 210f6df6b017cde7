"""Transolver (operators/transolver.py) against a from-scratch transcription of Physics-Attention (Wu et al. 2024,
and thuml/Transolver's irregular-mesh model as described in the reference notes), and its quadrature, padding,
permutation and input checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from numpy import interp

import sciattn.operators.transolver  # noqa: F401  (registers "transolver")
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _token_checks as tc  # noqa: E402

NAME = "transolver"
CFG = dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, slice_num=5, mlp_ratio=2)


def reference_transolver(p, a, x, w, cfg, eps):
    """Transolver with Physics-Attention, written from the equations: per head,
    s = softmax_G(W_s x_mid / clamp(τ, 0.1, 5)), z_g = Σ_i w_i s_ig f_i / (Σ_i w_i s_ig + eps),
    z' = softmax(z W_q (z W_k)ᵀ / √d) z W_v, out_i = Σ_g s_ig z'_g; the published code has w_i = 1."""
    heads = cfg["n_heads"]
    d = cfg["width"] // heads
    h = tc.lin(p, "lift.2", tc.gelu(tc.lin(p, "lift.0", torch.cat([x, a], -1)))) + p["placeholder"]
    for layer in range(cfg["n_layers"]):
        b = f"blocks.{layer}"
        u = tc.ln(p, f"{b}.ln1", h)
        xm, fm = tc.lin(p, f"{b}.attn.in_x", u), tc.lin(p, f"{b}.attn.in_f", u)
        outs = []
        for hd in range(heads):
            sl = slice(hd * d, (hd + 1) * d)
            tau = p[f"{b}.attn.temperature"][0, hd, 0, 0].clamp(0.1, 5)
            s = tc.softmax(tc.lin(p, f"{b}.attn.slice", xm[..., sl]) / tau, -1)         # (B, N, G)
            z = torch.zeros(s.shape[0], s.shape[2], d, dtype=s.dtype)
            for g in range(s.shape[2]):
                num = (w[..., None] * s[..., g:g + 1] * fm[..., sl]).sum(1)
                den = (w * s[..., g]).sum(1, keepdim=True) + eps
                z[:, g] = num / den
            q = z @ p[f"{b}.attn.q.weight"].T
            k = z @ p[f"{b}.attn.k.weight"].T
            v = z @ p[f"{b}.attn.v.weight"].T
            att = tc.softmax(q @ k.transpose(-1, -2) / d ** 0.5, -1)
            outs.append(s @ (att @ v))
        h = h + tc.lin(p, f"{b}.attn.out", torch.cat(outs, -1))
        h = h + tc.lin(p, f"{b}.mlp.2", tc.gelu(tc.lin(p, f"{b}.mlp.0", tc.ln(p, f"{b}.ln2", h))))
    last = f"blocks.{cfg['n_layers'] - 1}"
    return tc.lin(p, f"{last}.head", tc.ln(p, f"{last}.ln3", h))


def test_grid_equals_the_published_uniform_average():
    """On a grid the cell volumes are equal: our layer with slice_eps = 1e-5 / N is the published code's
    Σ_i s_ig f_i / (Σ_i s_ig + 1e-5) exactly."""
    n1, n2 = 6, 5
    model = tc.build(NAME, {**CFG, "slice_eps": 1e-5 / (n1 * n2)})
    a = torch.randn(2, 2, n1, n2, dtype=torch.float64)
    out = model(a)
    tokens = a.flatten(2).transpose(1, 2)
    ref = reference_transolver(tc.params(model), tokens, tc.grid_nodes(n1, n2).expand(2, -1, -1),
                               torch.ones(2, n1 * n2, dtype=torch.float64), CFG, 1e-5)
    assert (out.flatten(2).transpose(1, 2) - ref).abs().max() <= 1e-10


def test_points_equal_the_weighted_transcription():
    model = tc.build(NAME, CFG)
    x, pos, w = tc.cloud()
    ref = reference_transolver(tc.params(model), x, pos, w / w.sum(1, keepdim=True), CFG, 1e-5)
    assert (model(x, pos, w) - ref).abs().max() <= 1e-10
    assert ref.abs().mean() > 0.05  # not a trivial comparison


# test_weights_enter_as_a_quadrature, test_padding_is_ignored, test_permutation_equivariance,
# test_gradients_are_finite_and_reach_the_input, test_one_and_three_dimensional_grids,
# test_grid_is_the_point_set_of_its_nodes
globals().update(tc.property_tests(NAME, CFG))


def test_bad_inputs_name_the_argument():
    tc.check_bad_inputs(tc.build(NAME, CFG), NAME, CFG)
    with pytest.raises(ValueError, match=r"slice_eps: expected a non-negative number, got -1"):
        create_operator(NAME, **{**CFG, "slice_eps": -1})
    with pytest.raises(ValueError, match=r"slice_num: expected a positive"):
        create_operator(NAME, **{**CFG, "slice_num": 0})


@torch.no_grad()
def test_uniform_average_differs_from_quadrature_on_a_graded_cloud():
    """The quantity the refinement benchmark measures, in miniature: on a cloud graded towards x = 0 the published
    uniform average (no weights) and the quadrature (weights = cell sizes) give different outputs, and only the
    quadrature one agrees with a uniform grid of the same field."""
    model = tc.build(NAME, {**CFG, "spatial_dims": 1, "in_channels": 1, "out_channels": 1})
    n = 400
    t = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    pos = (t ** 2)[None, :, None]                                       # graded: dense near 0
    w = (2 * t / n)[None]                                               # dx/dt dt
    field = torch.sin(3 * pos) + pos
    weighted = model(field, pos, w)
    uniform = model(field, pos)
    grid_pos = t[None, :, None]
    on_grid = model(torch.sin(3 * grid_pos) + grid_pos, grid_pos)      # uniform samples: both rules agree
    # compare at matching locations through interpolation of the grid output at the graded points
    g = torch.as_tensor(interp(pos[0, :, 0].numpy(), t.numpy(), on_grid[0, :, 0].numpy()))
    err_w = float((weighted[0, :, 0] - g).abs().max())
    err_u = float((uniform[0, :, 0] - g).abs().max())
    assert err_w < 0.05 * err_u, (err_w, err_u)
