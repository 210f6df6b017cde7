"""The transformer neural operator (``sciattn.operators.continuum_transformer``) against a transcription of the
published forward (``_continuum_published.py``): float64, matched weights (every parameter drawn away from its
initialisation), outputs and gradients; the 1-D trapezoid branch on grids and on unevenly sampled times, the plain
softmax branch on 2-D grids; and the error texts of bad arguments."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from sciattn.domain import Grid
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _continuum_published as pub  # noqa: E402
import _token_checks as tc  # noqa: E402

TOL = 1e-10
CFG = dict(in_channels=2, out_channels=3, width=8, n_layers=2, n_heads=2, dim_ff=16)


def _model(seed=0, **change):
    return pub.perturbed_model("continuum_transformer", {**CFG, **change}, seed)


_rel = pub.rel


def _published(model, a, coords, trapezoid):
    P = dict(model.named_parameters())
    return pub.tno_forward(P, a, coords, n_layers=len(model.blocks), n_heads=model.blocks[0].attn.n_heads,
                           activation=model.config["activation"], trapezoid=trapezoid)


def _grid_published(model, x):
    nodes, _ = Grid.from_field(x, model.spatial_dims, rule=model.rule).nodes_and_weights(x.dtype)
    y = _published(model, x.flatten(2).transpose(1, 2), nodes, trapezoid=model.rule == "trapezoid")
    return y.transpose(1, 2).reshape(x.shape[0], model.out_channels, *x.shape[2:])


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_one_dimensional_trapezoid_equals_the_published_forward_and_gradients(activation):
    model = _model(spatial_dims=1, rule="trapezoid", activation=activation)
    x = torch.randn(3, 2, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    ours, ref = model(x), _grid_published(model, x)
    assert _rel(ours, ref) <= TOL
    g = torch.randn_like(ref)
    (go,) = torch.autograd.grad((ours * g).sum(), x)
    (gr,) = torch.autograd.grad((ref * g).sum(), x)
    assert _rel(go, gr) <= TOL
    # the trapezoid ends matter: the uniform rule (weights 1/N, nodes i/N) is another answer
    assert _rel(_model(spatial_dims=1, activation=activation)(x), ref) > 1e-4


def test_uneven_times_with_trapezoid_weights_equal_the_published_forward_in_any_order():
    """Point-set input at sorted random times on [0, 2) (the published code's commented-out random time stamps),
    with the trapezoid weights of those times: the published 1-D branch; a permutation of the points permutes
    the output (the weights travel with their points)."""
    g = torch.Generator().manual_seed(5)
    t = torch.sort(2 * torch.rand(37, generator=g, dtype=torch.float64)).values
    dx = t[1:] - t[:-1]
    w = torch.zeros_like(t)
    w[1:] += 0.5 * dx
    w[:-1] += 0.5 * dx
    model = _model(spatial_dims=1)
    a = torch.randn(2, 37, 2, generator=g, dtype=torch.float64)
    pos = t[None, :, None].expand(2, -1, -1)
    ref = _published(model, a, t[:, None], trapezoid=True)
    assert _rel(model(a, pos, weights=w.expand(2, -1)), ref) <= TOL
    perm = torch.randperm(37, generator=g)
    out = model(a[:, perm], pos[:, perm], weights=w[perm].expand(2, -1))
    assert _rel(out, ref[:, perm]) <= TOL


def test_two_dimensional_grid_equals_the_published_softmax_branch_and_gradients():
    model = _model()
    x = torch.randn(2, 2, 9, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(4), requires_grad=True)
    ours, ref = model(x), _grid_published(model, x)
    assert _rel(ours, ref) <= TOL
    g = torch.randn_like(ref)
    grads_o = torch.autograd.grad((ours * g).sum(), [x, *model.parameters()])
    grads_r = torch.autograd.grad((ref * g).sum(), [x, *model.parameters()])
    # one vector: the key bias has a zero gradient (softmax is shift-invariant), round-off on both sides
    assert _rel(torch.cat([t.flatten() for t in grads_o]), torch.cat([t.flatten() for t in grads_r])) <= TOL


def test_attention_is_the_weighted_softmax_of_the_padding_contract():
    """Padding: a padded cloud gives the real points' answer of the unpadded one, zeros on the padding."""
    model = _model(spatial_dims=2)
    g = torch.Generator().manual_seed(6)
    a, pos, w = (torch.randn(1, 20, 2, generator=g, dtype=torch.float64), torch.rand(1, 20, 2, generator=g,
                 dtype=torch.float64), torch.rand(1, 20, generator=g, dtype=torch.float64) + 0.1)
    ref = model(a, pos, weights=w)
    pad = lambda t: torch.cat([t, torch.full((1, 5, *t.shape[2:]), float("nan"), dtype=t.dtype)], 1)  # noqa: E731
    mask = torch.arange(25)[None] < 20
    out = model(pad(a), pad(pos), weights=pad(w), mask=mask)
    assert _rel(out[:, :20], ref) <= TOL and bool((out[:, 20:] == 0).all())


@pytest.mark.parametrize("change,exc,words", [
    (dict(rule="gauss"), ValueError, ("rule", "uniform", "trapezoid", "gauss")),
    (dict(activation="tanh"), ValueError, ("activation", "gelu", "tanh")),
    (dict(n_heads=3), ValueError, ("width", "3")),
    (dict(dropout=1.5), ValueError, ("dropout", "[0, 1)", "1.5")),
    (dict(spatial_dims=4), ValueError, ("spatial_dims", "1, 2 or 3", "4")),
    (dict(width=0), ValueError, ("width", "positive", "0")),
])
def test_bad_arguments_name_the_argument_the_expectation_and_the_value(change, exc, words):
    tc.check_bad_argument("continuum_transformer", CFG, change, exc, words)


def test_bad_input_names_the_argument():
    model = create_operator("continuum_transformer", **CFG)
    with pytest.raises(ValueError, match="x"):
        model(torch.randn(2, 3, 8, 8))
    with pytest.raises(ValueError, match="pos"):
        model(torch.randn(2, 8, 2), torch.randn(2, 8, 3))
