"""Spherical transformer and its planar baseline: equivariance, global/neighbourhood consistency,
matching sizes, runs on other grids with the same weights and errors."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sciattn.operators import create_operator
from sciattn.operators.spherical_transformer import (
    PlanarTransformer,
    SphericalTransformer,
    planar_sincos_embedding,
    spherical_harmonic_embedding,
    zonal_legendre_embedding,
)
from sciattn.quadrature import sphere_quadrature

F64 = torch.float64
SMALL = dict(in_channels=3, out_channels=2, nlat=9, nlon=16, embed_dim=8, n_layers=2, n_heads=2)


def _n_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("attention", ["global", "neighborhood"])
def test_planar_baseline_has_the_same_parameter_count(attention):
    sph = SphericalTransformer(**SMALL, attention=attention)
    pla = PlanarTransformer(**SMALL, attention=attention)
    assert _n_params(sph) == _n_params(pla)
    assert [tuple(p.shape) for p in sph.parameters()] == [tuple(p.shape) for p in pla.parameters()]


@pytest.mark.parametrize("name", ["spherical_transformer", "planar_transformer"])
@pytest.mark.parametrize("attention", ["global", "neighborhood"])
def test_registry_forward_backward_and_plain_json_config(name, attention):
    cfg = dict(SMALL, attention=attention)
    model = create_operator(name, **cfg)
    config = json.loads(json.dumps(model.config))
    assert {k: config[k] for k in cfg} == cfg
    assert config["pos_embed"] == ("zonal" if name == "spherical_transformer" else "sincos")  # defaults recorded
    x = torch.randn(2, 3, 9, 16)
    out = model(x)
    assert out.shape == (2, 2, 9, 16) and torch.isfinite(out).all()
    out.square().mean().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(bool(g.abs().sum() > 0) for g in grads) > len(grads) // 2


def test_neighborhood_variant_with_cutoff_pi_equals_the_global_variant():
    glob = SphericalTransformer(**SMALL, attention="global").double()
    neigh = SphericalTransformer(**SMALL, attention="neighborhood", theta_cutoff=math.pi).double()
    neigh.load_state_dict(glob.state_dict())
    x = torch.randn(2, 3, 9, 16, dtype=F64)
    torch.testing.assert_close(neigh(x), glob(x), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("attention", ["global", "neighborhood"])
@pytest.mark.parametrize("pos_embed", ["zonal", "none"])
def test_spherical_model_commutes_with_longitude_rolls_and_planar_does_not(attention, pos_embed):
    """With the default (zonal) embedding or none, every layer of the spherical model commutes with
    rotations by the internal longitude spacing (2 input columns); the planar image model has edges
    at λ = 0, and the all-harmonics embedding breaks the symmetry."""
    x = torch.randn(1, 3, 9, 16, dtype=F64)
    sph = SphericalTransformer(**SMALL, attention=attention, pos_embed=pos_embed).double()
    out = sph(x)
    for shift in (2, 6):
        torch.testing.assert_close(sph(x.roll(shift, -1)), out.roll(shift, -1), rtol=1e-10, atol=1e-12)
    pla = PlanarTransformer(**SMALL, attention=attention, pos_embed="none").double()
    assert (pla(x.roll(2, -1)) - pla(x).roll(2, -1)).abs().max() > 1e-4
    spectral = SphericalTransformer(**SMALL, attention=attention, pos_embed="spectral").double()
    assert (spectral(x.roll(2, -1)) - spectral(x).roll(2, -1)).abs().max() > 1e-4


def test_zonal_input_gives_a_zonal_output_without_longitude_downsampling():
    """With scale_factor=1 (internal grid equiangular, input Legendre–Gauss) every longitude shift is a
    symmetry of every layer, so a zonal input gives a zonal output."""
    cfg = dict(SMALL, nlat=8, scale_factor=1)
    model = SphericalTransformer(**cfg, grid="legendre-gauss", grid_internal="equiangular", pos_embed="none").double()
    theta = sphere_quadrature(8, "legendre-gauss")[0]
    x = torch.stack([torch.cos(k * theta) for k in (1, 2, 3)])[None, :, :, None].expand(1, 3, 8, 16)
    out = model(x.contiguous())
    torch.testing.assert_close(out, out[..., :1].expand_as(out), rtol=1e-10, atol=1e-12)
    assert (out[0, 0, 0, 0] - out[0, 0, -1, 0]).abs() > 1e-6  # but it does vary with latitude


def test_residual_prediction_adds_the_input():
    cfg = dict(SMALL, out_channels=3, residual_prediction=True)
    model = SphericalTransformer(**cfg)
    torch.nn.init.zeros_(model.proj[-1].weight)
    torch.nn.init.zeros_(model.proj[-1].bias)
    x = torch.randn(2, 3, 9, 16)
    torch.testing.assert_close(model(x), x)


def test_positional_embeddings_are_the_named_functions():
    emb = spherical_harmonic_embedding(9, 16, "equiangular", 4).double()  # Y_00, Y_1-1, Y_10, Y_11
    theta = sphere_quadrature(9, "equiangular")[0][:, None]
    lam = torch.arange(16, dtype=F64) * 2 * math.pi / 16
    torch.testing.assert_close(emb[0, 0], torch.ones(9, 16, dtype=F64), atol=1e-6, rtol=0)
    for got, want in zip(emb[0, 1:], (torch.sin(theta) * torch.sin(lam), torch.cos(theta).expand(9, 16),
                                      torch.sin(theta) * torch.cos(lam))):
        torch.testing.assert_close(got.abs(), want.abs(), atol=1e-6, rtol=0)
        assert (got * want).sum() > 0  # same sign convention
    zonal = zonal_legendre_embedding(5, 8, "legendre-gauss", 7).double()  # P_0 ... P_4, then zeros
    cos_t = torch.cos(sphere_quadrature(5, "legendre-gauss")[0])[:, None].expand(5, 8)
    for got, p_l in zip(zonal[0], (torch.ones_like(cos_t), cos_t, (3 * cos_t**2 - 1) / 2,
                                   (5 * cos_t**3 - 3 * cos_t) / 2, (35 * cos_t**4 - 30 * cos_t**2 + 3) / 8)):
        torch.testing.assert_close(got, p_l / p_l.abs().max(), atol=1e-6, rtol=0)
    assert zonal[0, 5:].abs().max() == 0  # only nlat = 5 distinct functions of latitude on 5 latitudes
    pe = planar_sincos_embedding(3, 5, 4)
    torch.testing.assert_close(pe[0, :, 2, 4], torch.tensor([math.sin(2), math.cos(2), math.sin(4), math.cos(4)]))


def test_fixed_grid_and_argument_errors_are_named():
    model = SphericalTransformer(**SMALL)
    with pytest.raises(ValueError, match=r"x: expected a grid this model can run on \(nlat valid for its latitude rule, "
                                         r"nlon a multiple or a divisor of its internal grid's nlon = 8; internal grid "
                                         r"5x8\), got 17x20: nlon: expected a multiple or a divisor"):
        model(torch.randn(1, 3, 17, 20))
    with pytest.raises(ValueError, match=r"x: expected size 3 along axis 1 \(input channels\), got 2"):
        model(torch.randn(1, 2, 9, 16))
    with pytest.raises(ValueError, match="x: expected finite values"):
        model(torch.full((1, 3, 9, 16), float("nan")))
    with pytest.raises(ValueError, match=r"scale_factor: expected a divisor of nlon=16 .*got 3"):
        SphericalTransformer(**SMALL, scale_factor=3)
    with pytest.raises(ValueError, match=r"attention: expected one of \['global', 'neighborhood'\], got 'local'"):
        PlanarTransformer(**SMALL, attention="local")
    with pytest.raises(ValueError, match=r"grid_internal: expected one of .*got 'gauss'"):
        SphericalTransformer(**SMALL, grid_internal="gauss")
    with pytest.raises(ValueError, match=r"residual_prediction: expected in_channels == out_channels, got 3 and 2"):
        SphericalTransformer(**SMALL, residual_prediction=True)
    with pytest.raises(ValueError, match=r"theta_cutoff: expected a finite positive float \(radians\) or None, got nan"):
        SphericalTransformer(**SMALL, theta_cutoff=float("nan"))
    with pytest.raises(ValueError, match=r"window_radius: expected a finite positive number of pixels or None, got -1"):
        PlanarTransformer(**SMALL, window_radius=-1)


@pytest.mark.parametrize("name", ["spherical_transformer", "planar_transformer"])
def test_runs_on_other_grids_with_the_same_weights(name):
    """Another grid: the same weights through that grid's geometry; ``on_grid`` copies agree, gradients reach
    the model's own parameters, and the global random stream is not consumed by building the geometry."""
    torch.manual_seed(0)
    model = create_operator(name, **SMALL)
    for shape in [(17, 32), (5, 8), (33, 64)]:
        x = torch.randn(2, 3, *shape, dtype=torch.float32)
        state = torch.random.get_rng_state()
        y = model(x)
        assert torch.equal(state, torch.random.get_rng_state())
        assert y.shape == (2, 2, *shape) and torch.isfinite(y).all()
        copy = model.on_grid(*shape)
        assert copy.shape == shape and copy.inner_shape == model.inner_shape == (5, 8)
        torch.testing.assert_close(copy(x), y, atol=1e-6, rtol=0)
        model.zero_grad()
        y.square().sum().backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters() if p.dim() > 1)
    x = torch.randn(1, 3, 9, 16)
    torch.testing.assert_close(model.on_grid(9, 16)(x), model(x), atol=0, rtol=0)  # own grid: same model
    with torch.no_grad():  # the weights are this model's: a change shows at other grids at once
        model.proj[2].bias += 1.0
    torch.testing.assert_close(model(torch.zeros(1, 3, 17, 32)), model.on_grid(17, 32)(torch.zeros(1, 3, 17, 32)))


def test_radii_are_physical_angles_fixed_at_construction():
    """Built at 17x32: the internal disc radius, the internal grid and the encoder radius stay those of the
    construction grid on every finer grid (a model built at 65x128 has other defaults: another operator)."""
    model = SphericalTransformer(**{**SMALL, "nlat": 17, "nlon": 32})
    inner_radius = model.blocks[0].attn.theta_cutoff
    assert inner_radius == pytest.approx(model.theta_cutoff)
    enc = model.encoder.attn.theta_cutoff
    for shape in [(33, 64), (65, 128)]:
        other = model.on_grid(*shape)
        assert other.inner_shape == model.inner_shape
        assert [b.attn.theta_cutoff for b in other.blocks] == [inner_radius] * SMALL["n_layers"]
        assert other.encoder.attn.theta_cutoff == enc and other.decoder.attn.theta_cutoff == enc
    rebuilt = SphericalTransformer(**{**SMALL, "nlat": 65, "nlon": 128})
    assert rebuilt.theta_cutoff < 0.3 * model.theta_cutoff  # the default follows the construction grid only
    coarse = model.on_grid(5, 8)  # an input grid coarser than the internal grid widens the encoder's discs
    assert coarse.encoder.attn.theta_cutoff == pytest.approx(math.pi / 4) and math.pi / 4 > enc  # 5 latitudes


@pytest.mark.parametrize("name", ["spherical_transformer", "planar_transformer"])
def test_checkpoint_without_internal_shape_loads_and_gives_the_same_output(name, tmp_path):
    """A checkpoint written before ``internal_shape`` existed (its config lacks the key) rebuilds the same
    model: the same output on its own grid, and it runs on other grids."""
    from sciattn.pde_data.normalizers import UnitGaussianNormalizer
    from sciattn.train.checkpoint import load_model, save_checkpoint

    torch.manual_seed(1)
    model = create_operator(name, **SMALL).eval()
    xn = UnitGaussianNormalizer().fit(torch.randn(4, 3, 9, 16))
    path = save_checkpoint(tmp_path / "checkpoint.pt", model=model, x_normalizer=xn, y_normalizer=xn)
    state = torch.load(path, weights_only=True)
    config = json.loads(state["operator_config"])
    del config["internal_shape"]
    state["operator_config"] = json.dumps(config)
    torch.save(state, path)
    loaded = load_model(path)[0]
    assert "internal_shape" not in json.loads(torch.load(path, weights_only=True)["operator_config"])
    x = torch.randn(2, 3, 9, 16)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), atol=0, rtol=0)
        x2 = torch.randn(1, 3, 17, 32)
        torch.testing.assert_close(loaded(x2), model(x2), atol=0, rtol=0)


def test_other_grids_geometry_cache_is_bounded_least_recently_used_first():
    """A sweep over more grids than ``grid_cache_size`` keeps only the most recent ones, and a grid rebuilt
    after eviction gives the same output."""
    torch.manual_seed(0)
    model = create_operator("planar_transformer", **SMALL)
    model.grid_cache_size = 2
    x = {s: torch.randn(1, 3, *s) for s in [(5, 8), (17, 32), (33, 64)]}
    first = model(x[(5, 8)])
    model(x[(17, 32)])
    model(x[(5, 8)])  # used again: now the most recent
    model(x[(33, 64)])  # evicts (17, 32), the least recently used
    assert [k[:2] for k in model._grid_models] == [(5, 8), (33, 64)]
    model(x[(17, 32)])
    assert [k[:2] for k in model._grid_models] == [(33, 64), (17, 32)]
    torch.testing.assert_close(model(x[(5, 8)]), first, atol=0, rtol=0)  # rebuilt: the same geometry
    assert len(model._grid_models) == 2
