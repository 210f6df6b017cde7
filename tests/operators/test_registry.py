"""Smoke tests generated from the operator registry, plus registry errors."""

from __future__ import annotations

import json

import pytest
import torch

from sciattn.operators import create_operator, list_operators
from sciattn.operators.registry import operator_kind, operator_parameters

# Small configurations for each registered operator: (config, grid input shape, point input?).
SMALL = {
    "galerkin_transformer": dict(in_channels=2, out_channels=1, d_model=16, n_layers=2, n_heads=2,
                                 regressor_width=8, n_modes=4),
    "mano": dict(in_channels=2, out_channels=1, width=16, n_layers=2, n_heads=2, window=4),
    "mano_extended": dict(in_channels=2, out_channels=1, width=16, n_layers=2, n_heads=2, head_width=8, head_modes=4,
                          head_layers=1),
    "codano": dict(variables=["a", "b"], in_channels=2, out_channels=2, width=8, n_layers=2, n_heads=2, n_modes=4,
                   pos_modes=2),
    "erwin": dict(in_channels=2, out_channels=1, spatial_dims=2, c_hidden=[8, 16], ball_sizes=[8, 8], enc_depths=[1, 1],
                  dec_depths=[1], strides=[2], n_heads=2, mlp_ratio=2),
    "bsa_transformer": dict(in_channels=2, out_channels=1, spatial_dims=2, width=8, depth=2, n_heads=2, ball_size=8,
                            block_size=2, top_k=2, mlp_ratio=2),
    "mspt": dict(in_channels=2, out_channels=1, spatial_dims=2, width=8, depth=2, n_heads=2, mlp_ratio=2),
    "spherical_transformer": dict(in_channels=2, out_channels=1, nlat=9, nlon=16, embed_dim=8, n_layers=1, n_heads=2),
    "planar_transformer": dict(in_channels=2, out_channels=1, nlat=9, nlon=16, embed_dim=8, n_layers=1, n_heads=2),
    "transolver": dict(in_channels=2, out_channels=1, width=16, n_layers=2, n_heads=2, slice_num=4),
    "linear_no": dict(in_channels=2, out_channels=1, width=16, n_layers=2, n_heads=2, key_ratio=4),
    "ono": dict(in_channels=2, out_channels=1, width=16, n_layers=2, n_heads=2, psi_dim=4),
    "gnot": dict(in_channels=2, out_channels=1, width=16, n_layers=2, n_heads=2, mlp_layers=1),
    "factformer": dict(in_channels=2, out_channels=1, width=16, n_layers=2, n_heads=2, dim_head=8, rff_features=8),
    "oformer": dict(in_channels=2, out_channels=1, width=16, n_layers=2, n_heads=2, dim_head=8, latent_width=16,
                    rff_features=8),
    "fno": dict(in_channels=2, out_channels=1, n_modes=[4, 4], hidden_channels=8, n_layers=2),
    "anie": dict(in_channels=2, out_channels=1, state_channels=4, width=8, n_layers=2, n_heads=2, dim_ff=16),
    "funcattn": dict(in_channels=2, out_channels=1, width=16, n_layers=2, n_heads=2, basis_num=4),
    "fastmax_transformer": dict(in_channels=2, out_channels=1, width=8, n_layers=2, n_heads=2, dim_ff=16),
    "schwarz_transformer": dict(in_channels=2, out_channels=1, width=8, n_layers=2, n_heads=2, subdomains=2, overlap=0.125),
    "continuum_transformer": dict(in_channels=2, out_channels=1, width=8, n_layers=2, n_heads=2, dim_ff=16),
    "continuum_vitno": dict(in_channels=2, out_channels=1, width=8, n_layers=2, n_heads=2, dim_ff=16, modes=2,
                            smoothing_modes=4),
}
# Operators on a sphere grid (input_kind "sphere") are built for one (nlat, nlon) grid and run on others whose nlon is
# a multiple or a divisor of their internal grid's (here 8), with the same weights.
FIXED_GRID = {n: (c["nlat"], c["nlon"]) for n, c in SMALL.items() if operator_kind(n) == "sphere"}
SPHERE_OTHER_GRID = (17, 32)
# Operators on point clouds (input_kind "points") take features (B, N, C) and positions (B, N, d); the rest grid fields.
POINT_INPUT = {n for n in SMALL if operator_kind(n) == "points"}

def _run(model, name, batch, size):
    """Run ``model`` on random input of ``size`` grid cells (as a cloud of as many points for point operators)."""
    c_in, c_out = SMALL[name]["in_channels"], SMALL[name]["out_channels"]
    if name in POINT_INPUT:
        n = size[0] * size[1]
        return model(torch.randn(batch, n, c_in), torch.rand(batch, n, 2)), (batch, n, c_out)
    return model(torch.randn(batch, c_in, *size)), (batch, c_out, *size)


def test_every_registered_operator_has_a_smoke_config():
    assert set(list_operators()) == set(SMALL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_forward_backward_finite_and_resolution_change(name):
    model = create_operator(name, **SMALL[name])
    out, shape = _run(model, name, 2, FIXED_GRID.get(name, (12, 12)))
    assert out.shape == shape
    assert torch.isfinite(out).all()
    out.square().mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    model.eval()
    with torch.no_grad():
        fine, shape = _run(model, name, 1, SPHERE_OTHER_GRID if name in FIXED_GRID else (24, 20))
    assert fine.shape == shape and torch.isfinite(fine).all()


@pytest.mark.parametrize("name", sorted(SMALL))
def test_config_is_plain_json_and_records_every_default(name):
    """The stored config holds the given keys and every other parameter at its default, so a checkpoint
    rebuilds the same model even if a default changes in a later release."""
    model = create_operator(name, **SMALL[name])
    config = json.loads(json.dumps(model.config))
    params = operator_parameters(name)
    assert set(config) == set(params)
    assert {k: config[k] for k in SMALL[name]} == json.loads(json.dumps(SMALL[name]))
    for k, p in params.items():
        if k not in SMALL[name]:
            assert config[k] == json.loads(json.dumps(p.default)), k


def test_unknown_operator_name_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"name: expected a registered operator, one of \['anie', 'bsa_transformer', 'codano', 'continuum_transformer', 'continuum_vitno', 'erwin', 'factformer', 'fastmax_transformer', 'fno', 'funcattn', 'galerkin_transformer', 'gnot', 'linear_no', 'mano', 'mano_extended', 'mspt', 'oformer', 'ono', 'planar_transformer'"):
        create_operator("galerkin_transfomer", in_channels=1, out_channels=1)


def test_unknown_config_key_is_named():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['d_modle'\]"):
        create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_modle=32)


def test_missing_required_key_is_named():
    with pytest.raises(ValueError, match=r"missing required key\(s\) \['out_channels'\]"):
        create_operator("galerkin_transformer", in_channels=1)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_contract_and_a_current_config_passes_its_migration_unchanged(name):
    """Every registered operator declares the contract (sciattn.operators.contract), and the config it stores today
    is what its migration returns: a checkpoint written now rebuilds the same model, under the same name."""
    from sciattn.operators import ExportPolicy, Operator
    from sciattn.operators.registry import INPUT_KINDS, migrate_stored, operator_class

    cls = operator_class(name)
    assert issubclass(cls, Operator) and cls.input_kind in INPUT_KINDS and isinstance(cls.export_policy, ExportPolicy)
    model = create_operator(name, **SMALL[name])
    stored = json.loads(json.dumps(model.config))
    assert migrate_stored(name, stored, cls.config_version) == (name, stored)
    assert migrate_stored(name, stored) == (name, stored)
