"""The Fastmax transformer (``sciattn.operators.fastmax_transformer``): float64, matched weights, its forward against
the same network whose attention is the transcription of the published forward (``tests/sciattn/_fastmax_published``,
uniform weights: the published average), outputs and gradients; grids as point sets with the grid's weights;
padding; the weights reach the answer; errors naming the argument."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from sciattn.domain import Grid
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sciattn"))
import _fastmax_published as pub  # noqa: E402

TOL = 1e-10
CFG = dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, dim_ff=16)


def _model(seed=0, **change):
    torch.manual_seed(seed)
    return create_operator("fastmax_transformer", **{**CFG, **change}).double().eval()


def _rel(a, b):
    return float((a - b).abs().max().detach() / b.abs().max().detach())


def _published_network(model, a, pos, normalize=True, lim=1.0, p=2):
    """Our lift, blocks and projection, with the attention of the published ``fastmax_function``."""
    h = model.lift(torch.cat([a, pos], dim=-1))
    for blk in model.blocks:
        b, n, c = h.shape
        q, k, v = blk.qkv(blk.ln1(h)).reshape(b, n, 3, blk.n_heads, c // blk.n_heads).permute(2, 0, 3, 1, 4)
        z = pub.published_fastmax(q, k, v, normalize=normalize, lim=lim, p=p)
        h = h + blk.out(z.transpose(1, 2).reshape(b, n, c))
        h = h + blk.ffn(blk.ln2(h))
    return model.proj(model.norm(h))


def _cloud(seed=1, b=2, n=40):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, n, 2, generator=g, dtype=torch.float64), torch.rand(b, n, 2, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("change,published", [
    ({}, dict()),
    (dict(normalize=None), dict(normalize=False)),
    (dict(order=1, lim=0.8), dict(p=1, lim=0.8)),
])
def test_forward_and_gradients_equal_the_published_attention(change, published):
    model = _model(**change)
    a, pos = _cloud()
    a.requires_grad_()
    grads = []
    for fn in (lambda: model(a, pos), lambda: _published_network(model, a, pos, **published)):
        model.zero_grad()
        a.grad = None
        out = fn()
        (out.square().sum() + out.sum()).backward()
        grads.append([out.detach(), a.grad.clone()] + [p.grad.clone() for p in model.parameters()])
    for x, y in zip(*grads):
        assert _rel(x, y) <= TOL


def test_attention_matters():
    """The blocks' attention changes the output: a model whose attention is uniform averaging differs."""
    model = _model()
    a, pos = _cloud()
    full = model(a, pos)
    for blk in model.blocks:
        blk.kernel = {**blk.kernel, "coefficients": (1.0, 0.0, 0.0)}
    assert _rel(model(a, pos), full) > 1e-3


def test_grid_equals_the_point_set_with_the_grid_weights_and_padding_is_ignored():
    model = _model()
    x = torch.randn(1, 2, 6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    grid_out = model(x).flatten(2).transpose(1, 2)
    nodes, w = Grid.from_field(x, 2).nodes_and_weights(torch.float64)
    pts, pos = x.flatten(2).transpose(1, 2), nodes[None]
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    assert _rel(model(pts[:, perm], pos[:, perm], w[None, perm]), grid_out[:, perm]) <= 1e-12
    pad = torch.full((1, 7, 2), float("nan"), dtype=torch.float64)
    mask = torch.cat([torch.ones(1, 30, dtype=torch.bool), torch.zeros(1, 7, dtype=torch.bool)], 1)
    padded = model(torch.cat([pts, pad], 1), torch.cat([pos, pad], 1), torch.cat([w[None], pad[..., 0]], 1), mask)
    assert _rel(padded[:, :30], grid_out) <= 1e-12
    assert (padded[:, 30:] == 0).all()
    # the grid's cell weights are equal: the published average; other weights reach the answer
    assert _rel(model(pts, pos), grid_out) <= 1e-12
    graded = torch.linspace(0.5, 1.5, 30, dtype=torch.float64)[None]
    assert _rel(model(pts, pos, graded), grid_out) > 1e-4


@pytest.mark.parametrize("key,value,exc", [("order", 3, ValueError), ("coefficients", [1.0, 1.0], ValueError),
                                           ("normalize", "l2", ValueError), ("lim", 0.0, ValueError),
                                           ("dropout", 1.0, ValueError), ("n_heads", 3, ValueError),
                                           ("spatial_dims", 4, ValueError)])
def test_bad_hyperparameters_name_the_argument(key, value, exc):
    with pytest.raises(exc, match=key):
        create_operator("fastmax_transformer", **{**CFG, key: value})
