"""ANIE (``sciattn.operators.anie``) against a transcription of the published forward (``_anie_published.py``):
float64, matched weights, uniform quadrature (the published ``1/N``), parameters drawn away from the small
initialisation so that the attention and every iteration matter; outputs, the stopping rule and gradients."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from sciattn.domain import Grid
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _anie_published as pub  # noqa: E402

TOL = 1e-10
CFG = dict(in_channels=2, out_channels=3, spatial_dims=2, state_channels=4, width=8, n_layers=2, n_heads=2,
           dim_ff=16)


def _model(seed=0, **change):
    torch.manual_seed(seed)
    model = create_operator("anie", **{**CFG, **change}).double().eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():  # away from the near-identity init: the kernel is O(1)
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _extra(model, seed=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(model.spatial_dims, model.last.in_features + 1, generator=g, dtype=torch.float64)


def _rel(a, b):
    return float((a - b).abs().max().detach() / b.abs().max().detach())


def _published_forward(model, x, **kw):
    """The published solve between our pointwise encoder and decoder, at the grid's nodes."""
    grid = Grid.from_field(x, model.spatial_dims)
    nodes, _ = grid.nodes_and_weights(x.dtype)
    c = model.encoder(x.flatten(2).transpose(1, 2))
    y = pub.solve(pub.params_of(model, _extra(model)), c, nodes, n_blocks=len(model.blocks),
                  n_head=model.blocks[0].attn.n_heads, max_iterations=model.max_iterations,
                  smoothing_factor=model.smoothing, accumulate_grads=model.accumulate_grads, **kw)
    return model.decoder(y).transpose(1, 2).reshape(x.shape[0], model.out_channels, *grid.shape)


@pytest.mark.parametrize("iterations", [1, 3, 6])
def test_forward_equals_the_published_solver(iterations):
    model = _model(max_iterations=iterations)
    x = torch.randn(1, 2, 12, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    ours, ref = model(x), _published_forward(model, x)
    assert _rel(ours, ref) <= TOL
    # the iterations change the answer: one fewer is far from it
    fewer = _model(max_iterations=iterations - 1)(x) if iterations > 1 else None
    if fewer is not None:
        assert _rel(fewer, ref) > 1e-3


def test_one_dimensional_batch_equals_the_published_solver():
    model = _model(spatial_dims=1, max_iterations=3)
    x = torch.randn(3, 2, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    # published errors are over the whole batch; none falls under 1e-6 here, so every sample runs 3 updates
    assert _rel(model(x), _published_forward(model, x)) <= TOL


def test_stopping_rule_is_the_published_one_per_sample():
    """With one sample the published global norm is ``sqrt(N)`` times our quadrature norm (``w_j = 1/N``): a
    tolerance between two published errors stops both solvers at the same iteration."""
    model = _model(max_iterations=6)
    x = torch.randn(1, 2, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    errors: list[float] = []
    full = _published_forward(model, x, errors=errors)
    assert len(errors) == 7 and errors[2] > 1e-3
    tol_pub = 0.5 * (errors[1] + errors[2]) if errors[2] < errors[1] else errors[1] * 0.999
    stopped = _published_forward(model, x, tol=tol_pub)
    model.tolerance = tol_pub / 8.0  # sqrt(N) = 8
    ours = model(x)
    assert _rel(ours, stopped) <= TOL
    assert _rel(ours, full) > 1e-6  # it did stop early


@pytest.mark.parametrize("accumulate", [True, False])
def test_gradients_equal_the_published_solver(accumulate):
    """Full unrolling (the PDE experiments) and the truncated gradient (``accumulate_grads=False``)."""
    model = _model(accumulate_grads=accumulate, max_iterations=2)
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(6), requires_grad=True)
    grads = []
    for fn in (model, lambda t: _published_forward(model, t)):
        model.zero_grad()
        x.grad = None
        out = fn(x)
        (out.square().sum() + out.sum()).backward()
        grads.append([x.grad.clone()] + [p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        assert _rel(a, b) <= TOL


def test_truncated_gradient_differs_from_the_unrolled_one():
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    gs = []
    for acc in (True, False):
        model = _model(accumulate_grads=acc)
        model(x).square().sum().backward()
        gs.append(model.first.weight.grad)
    assert _rel(gs[1], gs[0]) > 1e-3


def test_batch_stopping_does_not_depend_on_the_rest_of_the_batch():
    """A converged sample beside one that is not: ours stops each alone (the published rule stops neither)."""
    model = _model(max_iterations=5)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 2, 8, 8, dtype=torch.float64, generator=g)
    full = model(x[:1])
    errs: list[float] = []
    _published_forward(model, x[:1], errors=errs)
    model.tolerance = 0.5 * (errs[1] + errs[2]) / 8.0 if errs[2] < errs[1] else errs[1] * 0.999 / 8.0
    alone = [model(x[i:i + 1]) for i in range(2)]
    batched = model(x)
    assert _rel(alone[0], full) > 1e-6  # sample 0 stopped early
    for i in range(2):
        assert _rel(batched[i:i + 1], alone[i]) <= 1e-12


def test_point_set_equals_the_grid_with_the_grid_weights_and_padding_is_ignored():
    model = _model()
    x = torch.randn(1, 2, 6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    grid_out = model(x)
    nodes, w = Grid.from_field(x, 2).nodes_and_weights(torch.float64)
    pts, pos = x.flatten(2).transpose(1, 2), nodes[None]
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    out = model(pts[:, perm], pos[:, perm], w[None, perm])
    assert _rel(out, grid_out.flatten(2).transpose(1, 2)[:, perm]) <= 1e-12
    pad = torch.full((1, 7, 2), float("nan"), dtype=torch.float64)
    mask = torch.cat([torch.ones(1, 30, dtype=torch.bool), torch.zeros(1, 7, dtype=torch.bool)], 1)
    padded = model(torch.cat([pts, pad], 1), torch.cat([pos, pad], 1), torch.cat([w[None], pad[..., 0]], 1), mask)
    assert _rel(padded[:, :30], grid_out.flatten(2).transpose(1, 2)) <= 1e-12
    assert (padded[:, 30:] == 0).all()


def test_bad_hyperparameters_name_the_argument():
    for key, value, exc in [("smoothing", 1.0, ValueError), ("tolerance", -1.0, ValueError),
                            ("max_iterations", 0, ValueError), ("accumulate_grads", 1, TypeError),
                            ("n_heads", 3, ValueError)]:
        with pytest.raises(exc, match=key if key != "n_heads" else "n_heads"):
            create_operator("anie", **{**CFG, key: value})
