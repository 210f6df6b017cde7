"""MANO as published (``mano``): architecture, any resolution, global receptive field, physical default
against cell-counted windows, old checkpoints of the pre-split ``mano``, errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from sciattn.operators import create_operator
from sciattn.train.checkpoint import load_model, migrate_mano_split, save_checkpoint

F64 = torch.float64
LEGACY = Path(__file__).resolve().parent / "data" / "legacy_mano_configs.pt"


def _model(**kw):
    cfg = dict(in_channels=1, out_channels=1, width=16, n_layers=2, n_heads=2)
    cfg.update(kw)
    return create_operator("mano", **cfg).eval()


def _smooth_input(n):
    """A smooth field sampled on the ``n × n`` grid of nodes ``i / n`` (the package's grid convention)."""
    t = torch.arange(n, dtype=F64) / n
    x = torch.sin(2 * math.pi * t)[:, None] * torch.cos(2 * math.pi * t)[None] + 0.5 * t[:, None] * t[None]
    return x[None, None].float()


@pytest.mark.parametrize("shape", [(48, 48), (100, 100), (50, 37)])
@pytest.mark.parametrize("options", ["default", "cells"])
def test_a_model_runs_unchanged_at_other_sizes(shape, options):
    model = _model(width=8, **({} if options == "default" else dict(window=4)))
    with torch.no_grad():
        out = model(torch.randn(1, 1, *shape))
    assert out.shape == (1, 1, *shape) and torch.isfinite(out).all()


def test_architecture_is_the_published_one():
    """Pointwise linear lift of [a, x], Norm -> attention and Norm -> MLP residual blocks, final Norm, and the
    projection Q_2 tanh(Q_1 h): with the blocks' residual branches zeroed the operator is that composition."""
    torch.manual_seed(0)
    model = _model(n_layers=1).double()
    with torch.no_grad():
        model.blocks[0].attn.out_proj.weight.zero_()
        model.blocks[0].attn.out_proj.bias.zero_()
        model.blocks[0].ffn.fc2.weight.zero_()
        model.blocks[0].ffn.fc2.bias.zero_()
        x = torch.randn(2, 1, 12, 10, dtype=F64)
        s, t = torch.meshgrid(torch.arange(12, dtype=F64) / 12, torch.arange(10, dtype=F64) / 10, indexing="ij")
        u = torch.cat([x, s.expand(2, 1, 12, 10), t.expand(2, 1, 12, 10)], dim=1).movedim(1, -1)
        h = torch.nn.functional.layer_norm(u @ model.lift.fc.weight.T + model.lift.fc.bias, (16,),
                                           model.norm.norm.weight, model.norm.norm.bias)
        want = torch.tanh(h @ model.proj.fc1.weight.T + model.proj.fc1.bias) @ model.proj.fc2.weight.T
        want = (want + model.proj.fc2.bias).movedim(-1, 1)
        torch.testing.assert_close(model(x), want)
    names = {n.split(".")[0] for n, _ in model.named_parameters()}
    assert names == {"lift", "blocks", "norm", "proj"}
    assert sum(p.numel() for p in model.lift.parameters()) == 3 * 16 + 16  # one linear map of (a, x, y)


def test_extended_options_are_not_mano_keys():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['gate', 'head'\] for operator 'mano'"):
        create_operator("mano", in_channels=1, out_channels=1, gate=True, head="spectral")


def test_receptive_field_is_global():
    for options in (dict(window=4), {}):
        model = _model(**options)
        x = torch.randn(1, 1, 32, 32)
        bumped = x.clone()
        bumped[..., 0, 0] += 10.0
        with torch.no_grad():
            delta = (model(bumped) - model(x))[0, 0]
        assert delta[-1, -1].abs() > 1e-6  # the opposite corner feels the perturbation


def test_default_converges_under_refinement_and_cells_do_not():
    """At initialisation, one smooth input at 32..256 nodes per axis: the default's output at the nodes shared
    with the coarse grid converges to the 256² output (at 128² within 5% and at most 0.6x the 64² gap), the
    MANO code's cell-counted windows (window=8) stay O(1) apart (a level is added per refinement)."""
    gaps = {}
    for name, options in (("default", {}), ("cells", dict(window=8))):
        torch.manual_seed(0)
        model = _model(width=8, **options)
        with torch.no_grad():
            outs = {n: model(_smooth_input(n))[0, 0] for n in (64, 128, 256)}
        scale = outs[256].abs().max().item()
        gaps[name] = [(outs[256][:: 256 // n, :: 256 // n] - outs[n]).abs().max().item() / scale for n in (64, 128)]
    assert gaps["default"][1] < 0.05 and gaps["default"][1] < 0.6 * gaps["default"][0], gaps
    assert gaps["cells"][1] > 2 * gaps["default"][1], gaps


def test_cells_add_levels_and_the_default_does_not():
    default = _model().blocks[0].attn
    assert len(default.plan((64, 64))) == len(default.plan((256, 256)))  # the same physical hierarchy
    cells = _model(window=8).blocks[0].attn  # a window counted in cells adds a level per refinement
    assert len(cells.plan((256, 256))) == len(cells.plan((64, 64))) + 2


def test_one_dimensional_and_three_dimensional_grids():
    m1 = create_operator("mano", in_channels=2, out_channels=3, spatial_dims=1, width=8, n_layers=1, n_heads=2)
    assert m1(torch.randn(2, 2, 30)).shape == (2, 3, 30)
    m3 = create_operator("mano", in_channels=1, out_channels=1, spatial_dims=3, width=8, n_layers=1, n_heads=2,
                         window=2)
    assert m3(torch.randn(1, 1, 6, 5, 4)).shape == (1, 1, 6, 5, 4)


# ------------------------------------------------------------------ checkpoints of the pre-split "mano"
# tests/operators/data/legacy_mano_configs.pt: two models built by operators/mano.py at commit 82a8d3d (when
# "mano" held every extended option), weights perturbed away from initialisation, with their outputs on a fixed
# input: "extended" (stencil lift, bias, gate, QK-norm, GLU, spectral head on a 16-node grid, window_fraction
# 0.25 with coarse_cells 4) and "plain" (that code's defaults with window=4 cells). Each config holds every
# constructor key, as create_operator stored it.
@pytest.mark.parametrize("case", ["extended", "plain"])
def test_a_checkpoint_saved_as_the_old_mano_loads_as_mano_extended(case, tmp_path):
    legacy = torch.load(LEGACY, weights_only=True)
    config, state = legacy[case]["config"], legacy[case]["state"]
    name, migrated = migrate_mano_split("mano", config)
    assert name == "mano_extended"
    model = create_operator(name, **migrated)
    model.load_state_dict(state)
    model.operator_name, model.config = "mano", config  # written the old way: name "mano", the old keys
    from sciattn.pde_data.normalizers import UnitGaussianNormalizer

    norm = UnitGaussianNormalizer(torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    path = save_checkpoint(tmp_path / "checkpoint.pt", model=model, x_normalizer=norm, y_normalizer=norm)
    stored = torch.load(path, weights_only=True)
    assert stored["operator"] == "mano" and json.loads(stored["operator_config"]) == config
    loaded, *_ = load_model(path)
    assert loaded.operator_name == "mano_extended"
    with torch.no_grad():
        torch.testing.assert_close(loaded(legacy["x"]), legacy[case]["y"], rtol=1e-5, atol=1e-6)


def test_a_new_mano_config_is_left_as_it_is():
    config = _model().config
    assert migrate_mano_split("mano", config) == ("mano", config)
    assert migrate_mano_split("galerkin_transformer", {"head": 1}) == ("galerkin_transformer", {"head": 1})


def test_bad_inputs_name_the_problem():
    model = _model(window=8)
    with pytest.raises(ValueError, match=r"expected a grid of at least window=\(8, 8\) cells per axis"):
        model(torch.randn(1, 1, 4, 4))
    model = _model()
    with pytest.raises(ValueError, match=r"x: expected size 1 along axis 1 \(input channels\), got 3"):
        model(torch.randn(1, 3, 16, 16))
    with pytest.raises(ValueError, match="x: expected finite values"):
        model(torch.full((1, 1, 16, 16), float("nan")))
    with pytest.raises(ValueError, match="weights: expected non-negative"):  # checked by the first block
        model(torch.randn(1, 1, 16, 16), weights=-torch.ones(16, 16))
    with pytest.raises(ValueError, match=r"spatial_dims: expected 1, 2 or 3, got 4"):
        _model(spatial_dims=4)
    with pytest.raises(ValueError, match=r"width: expected a positive int"):
        _model(width=0)
