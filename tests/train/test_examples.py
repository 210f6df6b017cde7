"""The shipped example configs are valid, and the demo's file copy matches the embedded default."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from sciattn.operators import create_operator
from sciattn.train.config import load_config
from sciattn.train.demo import DEMO_CONFIG
from sciattn.train.run import count_parameters

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_example_configs_are_valid(path):
    cfg = load_config(path)
    model = create_operator(cfg.model_name, **{"in_channels": 1, "out_channels": 1, **cfg.model_params})
    assert count_parameters(model) > 0


def test_demo_example_matches_the_embedded_default():
    assert tomllib.loads((CONFIGS / "darcy32_demo.toml").read_text()) == tomllib.loads(DEMO_CONFIG)


def test_darcy16_config_respects_the_parameter_budget():
    cfg = load_config(CONFIGS / "darcy16_galerkin.toml")
    assert cfg.train.epochs <= 15
    model = create_operator(cfg.model_name, in_channels=1, out_channels=1, **cfg.model_params)
    assert count_parameters(model) <= 250_000


def test_darcy16_config_trains_on_the_real_files(shared_data, tmp_path):
    from sciattn.train.run import train_run

    overrides = [f"data.train={json.dumps(str(shared_data / 'darcy_train_16.pt'))}",
                 f"data.test={json.dumps(str(shared_data / 'darcy_test_16.pt'))}",
                 "data.n_train=64", "train.epochs=1"]
    metrics = train_run(load_config(CONFIGS / "darcy16_galerkin.toml", overrides), tmp_path, progress=False,
                        log=lambda m: None)
    assert 0 < metrics["test"]["test_16x16"]["rel_l2"] < 1.0
