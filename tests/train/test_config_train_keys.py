"""The [train] keys of robust and distributed training are validated, errors naming the key."""

from __future__ import annotations

import pytest

from sciattn.train.config import ConfigError, load_config

BASE = {
    "model": {"name": "galerkin_transformer", "d_model": 16},
    "data": {"format": "neuralop_pt", "train": "a.pt", "test": "b.pt"},
    "train": {"epochs": 2},
}


def test_defaults_and_valid_values():
    cfg = load_config(BASE)
    t = cfg.train
    assert (t.precision, t.grad_accum_steps, t.checkpoint_every_steps, t.tensorboard, t.wandb) == \
        ("fp32", 1, 0, False, False)
    cfg = load_config(BASE, ["train.precision=bf16", "train.grad_accum_steps=4", "train.batch_size=16",
                             "train.checkpoint_every_steps=50", "train.grad_clip=0", "train.wandb=true"])
    assert (cfg.train.precision, cfg.train.grad_accum_steps, cfg.train.checkpoint_every_steps) == ("bf16", 4, 50)
    assert cfg.train.grad_clip == 0 and cfg.train.wandb is True


@pytest.mark.parametrize(
    "override,match",
    [
        ("train.precision=fp8", r"train.precision: expected one of \['fp32', 'bf16', 'fp16'\], got 'fp8'"),
        ("train.grad_accum_steps=0", r"train.grad_accum_steps: expected an integer >= 1, got 0 \(int\)"),
        ("train.grad_accum_steps=1.5", r"train.grad_accum_steps: expected an integer >= 1, got 1.5 \(float\)"),
        ("train.checkpoint_every_steps=-1", r"train.checkpoint_every_steps: expected an integer >= 0, got -1"),
        ("train.grad_clip=-1.0", r"train.grad_clip: expected a finite number >= 0, got -1.0"),
        ("train.lr=0", r"train.lr: expected a finite number > 0, got 0"),
        ("train.tensorboard=yes", r"train.tensorboard: expected true or false, got 'yes' \(str\)"),
        ("train.wandb=1", r"train.wandb: expected true or false, got 1 \(int\)"),
        ("train.batch_size=true", r"train.batch_size: expected an integer >= 1, got True \(bool\)"),
        ("train.scheduler=step", r"train.scheduler: expected one of \['onecycle', 'cosine'\], got 'step'"),
    ],
)
def test_bad_values_name_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(BASE, [override])


def test_batch_must_split_into_the_micro_batches():
    with pytest.raises(ConfigError, match=r"train.batch_size: expected a multiple of train.grad_accum_steps = 4 "
                                          r"\(the batch is split into that many micro-batches\), got 6"):
        load_config(BASE, ["train.batch_size=6", "train.grad_accum_steps=4"])
