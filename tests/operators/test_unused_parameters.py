"""Every parameter of every registered operator takes part in the loss: one forward + backward leaves
no ``grad is None``, at the smoke configs, with each optional branch switched on, and at the
``[model]`` of every shipped config in examples/configs (new configs are picked up by the glob).
DistributedDataParallel fails on an unused parameter ("parameters that were not used in producing
loss"); this test catches that without torchrun."""

from __future__ import annotations

import glob
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from sciattn.operators import create_operator, list_operators

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_registry import FIXED_GRID, POINT_INPUT, SMALL  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(glob.glob(str(REPO / "examples" / "configs" / "*.toml")))

# Options that build extra modules, switched on one at a time on top of SMALL.
VARIANTS = {
    "galerkin_transformer": [dict(band_limited_output=True), dict(latent_resolution=8, conv_blocks=1),
                             dict(attention_type="fourier"), dict(regressor="pointwise"),
                             dict(regressor_layers=3, band_limited_output=True)],
    "mano": [dict(window=None), dict(max_levels=2)],
    "mano_extended": [dict(gate=False, qk_norm=False, ffn="mlp"), dict(head="pointwise", head_grid=None),
                      dict(lift_stencil=1, rel_pos_bias=0), dict(window=4, lift_spacing=1 / 12, rel_pos_bias=4)],
    "codano": [dict(mixer="spectral", mixer_modes=4), dict(learn_temperature=True), dict(qkv="pointwise")],
    "erwin": [dict(rotate=None), dict(rpe=False, distance_bias=False), dict(c_hidden=[8, 16, 16], ball_sizes=8,
                                                                             enc_depths=[1, 2, 1], dec_depths=[1, 1],
                                                                             strides=[2, 2]),
              dict(ball_sizes=None, strides=None)],  # physical balls (ball_mode inferred)
    "bsa_transformer": [dict(coarse_queries=False), dict(exclude_own_ball=False), dict(rotate=None),
                        dict(depth=3, group_size=4), dict(ball_size=None, block_size=None)],
    "mspt": [dict(ball_mode="points", n_patches=8), dict(patch_diameter=0.5, depth=3)],
    "spherical_transformer": [dict(n_layers=2)],
    "planar_transformer": [dict(n_layers=2)],
    "transolver": [dict(spatial_dims=1), dict(spatial_dims=3, mlp_ratio=2)],
    "linear_no": [dict(learn_temperature=True), dict(spatial_dims=3)],
    "ono": [dict(spatial_dims=1, n_layers=1), dict(psi_dim=16, mlp_ratio=2)],
    "gnot": [dict(n_experts=2), dict(spatial_dims=1), dict(mlp_layers=0, n_inner=1)],
    "factformer": [dict(spatial_dims=1), dict(spatial_dims=3), dict(kernel_multiplier=6, latent_width=8)],
    "oformer": [dict(spatial_dims=1), dict(spatial_dims=3, dim_head=6), dict(rope_scales=[64.0, 16.0], dim_ff=8)],
    "fno": [dict(norm="group_norm", domain_padding=0.25), dict(spatial_dims=1, n_modes=4),
            dict(factorization="tucker", rank=0.5, positional_embedding=None)],
    "anie": [dict(spatial_dims=1), dict(spatial_dims=3), dict(accumulate_grads=False, max_iterations=1)],
    "funcattn": [dict(spatial_dims=1), dict(spatial_dims=3, shared_basis=False, mlp_ratio=2)],
    "fastmax_transformer": [dict(spatial_dims=1), dict(spatial_dims=3, order=1, lim=0.9), dict(normalize="token")],
    "schwarz_transformer": [dict(spatial_dims=1), dict(coarse=False), dict(geometry="points", quadrature=False)],
    "continuum_transformer": [dict(spatial_dims=1, rule="trapezoid"), dict(spatial_dims=3, activation="relu")],
    "continuum_vitno": [dict(patches=None, patch_size=4, smoothing_modes=0)],
}


def _inputs(name: str, model, config: dict):
    """A batch of 2 random inputs on the domain ``model`` takes."""
    g = torch.Generator().manual_seed(0)
    c_in = getattr(model, "in_channels", None) or len(config["variables"])
    if name in POINT_INPUT:
        d = model.spatial_dims
        return torch.randn(2, 300, c_in, generator=g), torch.rand(2, 300, d, generator=g)
    if name in FIXED_GRID or "nlat" in config:
        return (torch.randn(2, c_in, config["nlat"], config["nlon"], generator=g),)
    d = config.get("spatial_dims", 2)
    return (torch.randn(2, c_in, *({1: (32,), 2: (16, 16), 3: (8, 8, 8)}[d]), generator=g),)


def _unused(name: str, config: dict) -> tuple[list[str], torch.nn.Module]:
    torch.manual_seed(0)
    model = create_operator(name, **config)
    out = model(*_inputs(name, model, config))
    (out.square().mean() + out.mean()).backward()
    return [k for k, p in model.named_parameters() if p.requires_grad and p.grad is None], model


def _cases():
    for name in sorted(SMALL):
        for i, v in enumerate([{}] + VARIANTS.get(name, [])):
            yield pytest.param(name, {**SMALL[name], **v}, id=f"{name}-{i}")


def test_every_registered_operator_has_variants():
    assert set(VARIANTS) == set(list_operators())


@pytest.mark.parametrize("name,config", list(_cases()))
def test_one_backward_reaches_every_parameter(name, config):
    unused, model = _unused(name, config)
    assert not getattr(model, "ddp_find_unused_parameters", False)
    assert unused == [], f"{name} {config}: parameters without a gradient: {unused}"


@pytest.mark.parametrize("path", CONFIGS, ids=[Path(p).stem for p in CONFIGS])
def test_shipped_configs_use_every_parameter(path):
    """The ``[model]`` of each example config at its shipped size (channels as the data would set them)."""
    model_cfg = dict(tomllib.loads(Path(path).read_text())["model"])
    name = model_cfg.pop("name")
    if "variables" not in model_cfg:
        model_cfg.setdefault("in_channels", 1)
        model_cfg.setdefault("out_channels", 1)
    unused, model = _unused(name, model_cfg)
    if getattr(model, "ddp_find_unused_parameters", False):
        pytest.skip(f"{name} declares a skipped branch (ddp_find_unused_parameters)")
    assert unused == [], f"{Path(path).name}: parameters without a gradient: {unused}"


def test_codano_declares_its_one_skipped_branch():
    """CoDANO's encodings of extra variables enter only a forward that names them: the model says so
    (wrap_ddp then turns on find_unused_parameters), and they are the only unused parameters."""
    config = {**SMALL["codano"], "extra_variables": ["c"]}
    unused, model = _unused("codano", config)
    assert model.ddp_find_unused_parameters
    assert unused and all(k.startswith("encoding.fields.var_c.") for k in unused)
    model.zero_grad(set_to_none=True)
    x = torch.randn(2, 3, 12, 12)
    model(x, variables=["a", "b", "c"]).square().mean().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_band_limited_regressor_loads_checkpoints_with_the_old_unused_bypass():
    """Checkpoints written before the fix hold ``regressor.skips.<last>``, never trained: they load
    (strictly) and give the same outputs."""
    config = {**SMALL["galerkin_transformer"], "band_limited_output": True}
    torch.manual_seed(0)
    model = create_operator("galerkin_transformer", **config)
    assert len(model.regressor.skips) == config.get("regressor_layers", 2) - 1
    old = dict(model.state_dict())
    old["regressor.skips.1.weight"] = torch.randn(8, 8, 1, 1)
    old["regressor.skips.1.bias"] = torch.randn(8)
    torch.manual_seed(1)
    fresh = create_operator("galerkin_transformer", **config)
    fresh.load_state_dict(old, strict=True)
    x = torch.randn(1, 2, 12, 12)
    torch.testing.assert_close(fresh(x), model(x), rtol=0, atol=0)
