"""Resuming a run stored before an operator's current defaults keeps the settings it was trained with."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from sciattn.train.checkpoint import FORMAT
from sciattn.train.run import _keep_stored_settings


def _stored(tmp_path, operator: str, config: dict):
    torch.save({"format": FORMAT, "operator": operator, "operator_config": json.dumps(config)},
               tmp_path / "checkpoint.pt")
    return tmp_path


@pytest.mark.parametrize("operator, stored, key, kept", [
    ("erwin", {"ball_mode": None, "ball_sizes": None, "strides": None}, "ball_mode", "physical"),
    ("erwin", {"ball_mode": None, "ball_sizes": [8, 8], "strides": None}, "ball_mode", "points"),
    ("bsa_transformer", {"ball_size": 64}, "window", None),
    ("ono", {"width": 8}, "variant", "sciattn_v1"),
])
def test_a_run_stored_before_the_new_defaults_resumes_as_trained(tmp_path, operator, stored, key, kept):
    cfg = SimpleNamespace(model={"name": operator})
    _keep_stored_settings(cfg, _stored(tmp_path, operator, stored))
    assert key in cfg.model and cfg.model[key] == kept


def test_a_run_stored_with_the_new_keys_and_the_user_s_choice_are_left_alone(tmp_path):
    cfg = SimpleNamespace(model={"name": "erwin"})
    _keep_stored_settings(cfg, _stored(tmp_path, "erwin", {"ball_mode": None, "key_diameter": None}))
    assert cfg.model == {"name": "erwin"}  # stored under the multiscale default: nothing to keep
    cfg = SimpleNamespace(model={"name": "bsa_transformer", "window": 512})
    _keep_stored_settings(cfg, _stored(tmp_path, "bsa_transformer", {"ball_size": 64}))
    assert cfg.model["window"] == 512
