"""Smoke tests generated from the operator registry, plus registry errors."""

from __future__ import annotations

import json

import pytest
import torch

from sciattn.operators import create_operator, list_operators

# Small configurations for each registered operator: (config, grid input shape, point input?).
SMALL = {
    "galerkin_transformer": dict(in_channels=2, out_channels=1, d_model=16, n_layers=2, n_heads=2,
                                 regressor_width=8, n_modes=4),
    "mano": dict(in_channels=2, out_channels=1, width=16, n_layers=2, n_heads=2, window=4),
    "codano": dict(variables=["a", "b"], in_channels=2, out_channels=2, width=8, n_layers=2, n_heads=2, n_modes=4,
                   pos_modes=2),
}


def test_every_registered_operator_has_a_smoke_config():
    assert set(list_operators()) == set(SMALL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_forward_backward_finite_and_resolution_change(name):
    model = create_operator(name, **SMALL[name])
    x = torch.randn(2, SMALL[name]["in_channels"], 12, 12)
    out = model(x)
    assert out.shape == (2, SMALL[name]["out_channels"], 12, 12)
    assert torch.isfinite(out).all()
    out.square().mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    model.eval()
    with torch.no_grad():
        fine = model(torch.randn(1, SMALL[name]["in_channels"], 24, 20))
    assert fine.shape == (1, SMALL[name]["out_channels"], 24, 20) and torch.isfinite(fine).all()


@pytest.mark.parametrize("name", sorted(SMALL))
def test_config_is_plain_json(name):
    model = create_operator(name, **SMALL[name])
    assert json.loads(json.dumps(model.config)) == SMALL[name]


def test_unknown_operator_name_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"name: expected a registered operator, one of \['codano', 'galerkin_transformer', 'mano'"):
        create_operator("galerkin_transfomer", in_channels=1, out_channels=1)


def test_unknown_config_key_is_named():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['d_modle'\]"):
        create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_modle=32)


def test_missing_required_key_is_named():
    with pytest.raises(ValueError, match=r"missing required key\(s\) \['out_channels'\]"):
        create_operator("galerkin_transformer", in_channels=1)
