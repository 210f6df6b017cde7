"""The ``fno`` adapter (operators/fno.py) equals neuraloperator's FNO built with the same arguments and weights,
imports neuraloperator lazily, stores a JSON-plain config and checks its inputs."""

from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

import pytest
import torch

import sciattn.operators.fno  # noqa: F401  (registers "fno")
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _token_checks as tc  # noqa: E402

CFG = dict(in_channels=2, out_channels=3, n_modes=[4, 3], hidden_channels=8, n_layers=2)


@pytest.mark.parametrize("spatial_dims,shape,extra", [
    (1, (16,), dict(n_modes=5)),
    (2, (12, 10), {}),
    (2, (12, 10), dict(norm="group_norm", domain_padding=0.25, channel_mlp_skip="linear", fno_skip="identity")),
    (3, (6, 6, 5), dict(n_modes=[2, 2, 2], factorization="tucker", rank=0.5, positional_embedding=None)),
])
def test_equals_neuraloperator_fno_with_the_same_args_and_weights(spatial_dims, shape, extra):
    from neuralop.models import FNO

    torch.manual_seed(0)
    cfg = {**CFG, "spatial_dims": spatial_dims, **extra}
    ours = create_operator("fno", **cfg)
    modes = cfg["n_modes"] if isinstance(cfg["n_modes"], list) else [cfg["n_modes"]] * spatial_dims
    kwargs = {k: v for k, v in cfg.items() if k not in ("spatial_dims", "n_modes")}
    theirs = FNO(n_modes=tuple(modes), **kwargs)
    theirs.load_state_dict(ours.net.state_dict())
    x = torch.randn(2, 2, *shape)
    out = ours(x)
    assert out.shape == (2, 3, *shape)
    assert torch.equal(out, theirs(x))
    json.dumps(ours.config)
    assert ours.config["n_modes"] == cfg["n_modes"]


def test_neuraloperator_is_imported_only_when_the_model_is_built():
    tree = ast.parse((Path(__file__).resolve().parents[2] / "operators" / "fno.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any("neuralop" in (getattr(n, "module", None) or "") or any("neuralop" in a.name for a in n.names)
                   for n in top)


def test_resolution_change_and_gradients():
    model = create_operator("fno", **CFG)
    out = model(torch.randn(2, 2, 12, 12))
    out.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    with torch.no_grad():
        assert model(torch.randn(1, 2, 20, 24)).shape == (1, 3, 20, 24)


def test_bad_inputs_and_configs_name_the_argument():
    model = create_operator("fno", **CFG)
    with pytest.raises(ValueError, match="x: expected"):
        model(torch.randn(2, 2, 12))
    with pytest.raises(ValueError, match="x: expected"):
        model(torch.randn(2, 5, 12, 12))
    with pytest.raises(TypeError, match="x: expected dtype torch.float32"):
        model(torch.randn(2, 2, 12, 12, dtype=torch.float64))
    with pytest.raises(ValueError, match="x: FNO needs at least 2 points along every spatial axis"):
        model(torch.randn(2, 2, 1, 12))
    with pytest.raises(ValueError, match=r"n_modes: expected a positive int or 2 positive ints \(one per axis\), got \[4\]"):
        create_operator("fno", in_channels=1, out_channels=1, n_modes=[4])
    with pytest.raises(ValueError, match="norm: expected one of"):
        create_operator("fno", in_channels=1, out_channels=1, norm="batch_norm")


@pytest.mark.slow
def test_default_config_converges_under_grid_refinement():
    torch.manual_seed(0)
    model = create_operator("fno", in_channels=1, out_channels=1).eval()  # float32: complex weights ignore .double()
    errs = tc.grid_refinement_errors(model, dtype=torch.float32)
    assert errs[2] <= 0.05, errs


def test_state_dict_holds_weights_only_and_loads_with_weights_only(tmp_path):
    """neuraloperator adds its constructor arguments (functions among them) under ``_metadata``; the adapter's
    state dict drops them, so a checkpoint loads with ``weights_only=True`` and restores the same model."""
    torch.manual_seed(0)
    model = create_operator("fno", **CFG)
    torch.save(model.state_dict(), tmp_path / "w.pt")
    state = torch.load(tmp_path / "w.pt", weights_only=True)
    assert "_metadata" not in state
    torch.manual_seed(1)
    other = create_operator("fno", **CFG)
    other.load_state_dict(state)
    x = torch.randn(1, 2, 10, 10)
    assert torch.equal(other(x), model(x))


CLI_MODELS = {
    "fno": 'n_modes = [4, 4]\nhidden_channels = 8\nn_layers = 1',
    "gnot": "width = 16\nn_layers = 1\nn_heads = 2\nmlp_layers = 1",
    "oformer": "width = 16\nn_layers = 1\nn_heads = 2\ndim_head = 8\nlatent_width = 16\nrff_features = 8",
    "factformer": "width = 16\nn_layers = 1\nn_heads = 2\ndim_head = 8\nrff_features = 8",
}


def _cli_round_trip(name, tmp_path):
    """``sciattn train`` on built-in Darcy data, ``evaluate --resolutions 16 32`` and ``export`` of that run."""
    from sciattn.train.cli import main

    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f'[model]\nname = "{name}"\n{CLI_MODELS[name]}\n\n[data]\ntrain = "darcy"\nresolution = 16\n'
                   f'n_train = 16\nn_test = 4\ncache_dir = "{tmp_path / "cache"}"\n\n'
                   '[train]\nepochs = 1\nbatch_size = 8\nlr = 3e-3\nseed = 0\n')
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(run), "--no-progress"]) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert math.isfinite(metrics["history"][-1]["train_loss"])
    assert main(["evaluate", str(run), "--resolutions", "16", "32", "--n-samples", "2", "--no-progress",
                 "--root", str(tmp_path / "cache")]) == 0
    report = json.loads((run / "eval" / "darcy.json").read_text())
    assert [r["resolution"] for r in report["rows"]] == [16, 32]
    assert all(math.isfinite(r["rel_l2"]) for r in report["rows"])
    assert main(["export", str(run), "--out", str(tmp_path / "p.pt2")]) == 0
    program = torch.export.load(tmp_path / "p.pt2").module()
    for n in (16, 24):
        assert program(torch.rand(2, 1, n, n)).shape == (2, 1, n, n)


@pytest.mark.slow  # about 10 s of CPU each (train, a 16/32 sweep, export)
@pytest.mark.parametrize("name", ["fno", "gnot", "oformer", "factformer"])
def test_cli_train_evaluate_export_round_trip(name, tmp_path):
    _cli_round_trip(name, tmp_path)
