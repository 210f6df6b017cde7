"""Exact resumption: a run SIGKILLed mid-epoch and resumed from its step checkpoint ends with the
weights and metrics of the uninterrupted run; checkpoints hold every piece of state."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from sciattn.train.checkpoint import capture_rng_state, restore_rng_state
from sciattn.train.cli import main
from sciattn.train.config import ConfigError, load_config
from sciattn.train.run import train_run

# Runs the CLI with every optimiser step slowed down by 0.15 s (numerics untouched), so that the
# test can see a mid-epoch checkpoint appear and kill the process long before the next one.
SLOW_CLI = """
import sys, time
from sciattn.train.trainer import Trainer
_step = Trainer._train_step
def slow_step(self, batch):
    out = _step(self, batch)
    time.sleep(0.15)
    return out
Trainer._train_step = slow_step
from sciattn.train.cli import main
sys.exit(main(sys.argv[1:]))
"""

OVERRIDES = ["train.batch_size=4", "train.epochs=3", "train.checkpoint_every_steps=3", "train.threads=1",
             "train.tensorboard=false"]


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny(tiny_darcy):
    return tiny_darcy("resume_exact", n_train=16, n_test=4, epochs=3)


def _kill_after_mid_epoch_checkpoint(cfg, run_dir, tmp_path) -> dict:
    script = tmp_path / "slow_cli.py"
    script.write_text(SLOW_CLI)
    sets = [a for o in OVERRIDES for a in ("--set", o)]
    proc = subprocess.Popen([sys.executable, str(script), "train", str(cfg), "--out", str(run_dir), "--no-progress",
                             *sets], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ckpt, seen, deadline = run_dir / "checkpoint.pt", None, time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if ckpt.is_file() and ckpt.stat().st_mtime_ns != seen:
                seen = ckpt.stat().st_mtime_ns
                state = torch.load(ckpt, weights_only=True)
                if state["training"]["batches_done"] > 0:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(timeout=30)
                    return state
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
    raise AssertionError(f"no mid-epoch checkpoint seen; rc={proc.returncode}, stderr={proc.stderr.read()[-2000:]!r}")


def test_sigkill_mid_epoch_then_resume_equals_uninterrupted(tiny, tmp_path, one_thread):
    root, cfg = tiny
    seen = _kill_after_mid_epoch_checkpoint(cfg, tmp_path / "killed", tmp_path)
    on_disk = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)
    assert on_disk["step"] == seen["step"] and 0 < on_disk["training"]["batches_done"] < 4  # killed mid-epoch
    assert not (tmp_path / "killed" / "metrics.csv").exists() or on_disk["epoch"] > 0

    # resume with the run's stored config (no CONFIG argument)
    assert main(["train", "--resume", str(tmp_path / "killed"), "--no-progress"]) == 0
    train_run(load_config(cfg, OVERRIDES), tmp_path / "full", progress=False, log=lambda m: None)

    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)
    b = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)
    assert a["step"] == b["step"] == 12
    for k in a["model"]:  # same ops in the same order on one thread: bit-equal
        assert torch.equal(b["model"][k], a["model"][k]), k
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        torch.testing.assert_close(sb["exp_avg_sq"], sa["exp_avg_sq"], rtol=0, atol=1e-9)
    ha, hb = (json.loads((tmp_path / d / "metrics.json").read_text())["history"] for d in ("full", "killed"))
    for ra, rb in zip(ha, hb, strict=True):
        assert rb["train_loss"] == pytest.approx(ra["train_loss"], rel=1e-6, abs=1e-7)
        assert rb["test_8x8_rel_l2"] == pytest.approx(ra["test_8x8_rel_l2"], rel=1e-6, abs=1e-7)
    rows = (tmp_path / "killed" / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("epoch,step,train_loss") and len(rows) == 4  # header + 3 epochs, none twice


def test_checkpoint_holds_the_whole_training_state(tiny, tmp_path, one_thread):
    root, cfg = tiny
    train_run(load_config(cfg, OVERRIDES + ["train.epochs=1"]), tmp_path / "r", progress=False, log=lambda m: None)
    s = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)
    assert s["version"] == 2 and s["epoch"] == 1 and s["step"] == 4
    assert s["optimizer"]["state"] and s["scheduler"]["last_epoch"] == 4
    assert s["x_normalizer"] and s["y_normalizer"]
    assert json.loads(s["run_config"])["train"]["checkpoint_every_steps"] == 3
    t = s["training"]
    assert t["batches_done"] == 0 and t["steps_per_epoch"] == 4 and t["sampler"]["seed"] == 3
    (rng,) = t["rng_states"]
    assert set(rng) == {"torch", "cuda", "numpy", "python"}


def test_rng_state_round_trip():
    state = capture_rng_state()
    before = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    restore_rng_state(state)
    after = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    assert torch.equal(before[0], after[0]) and np.array_equal(before[1], after[1]) and before[2] == after[2]


def test_resume_with_a_changed_config_names_the_key(tiny, tmp_path, one_thread):
    root, cfg = tiny
    train_run(load_config(cfg, OVERRIDES + ["train.epochs=1"]), tmp_path / "r", progress=False, log=lambda m: None)
    with pytest.raises(ConfigError, match=r"--resume: the config differs .* in train.lr: 0.005 -> 0.1"):
        train_run(load_config(cfg, OVERRIDES + ["train.epochs=1", "train.lr=0.1"]), tmp_path / "r", resume=True,
                  progress=False, log=lambda m: None)
    # the device, thread count and logging may change on resume
    train_run(load_config(cfg, OVERRIDES + ["train.epochs=1", "train.threads=2"]), tmp_path / "r", resume=True,
              progress=False, log=lambda m: None)
