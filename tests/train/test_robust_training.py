"""Robust training: gradient accumulation and clipping, mixed precision, early stop on a non-finite
loss with the last good checkpoint kept, and the CSV / TensorBoard / wandb logs."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from sciattn.train import loggers as loggers_module
from sciattn.train.loggers import make_loggers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ddp_worker import make_trainer, problem  # noqa: E402


def _batch(n: int = 4):
    train, _ = problem()
    return {"x": train.x[:n], "y": train.y[:n]}


def test_two_half_batches_accumulated_equal_one_full_batch_step():
    full = make_trainer(None)
    halves = make_trainer(None, grad_accum_steps=2)
    calls = []
    halves.model.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    full._train_step(_batch())
    halves._train_step(_batch())
    assert calls == [2, 2]  # two micro-batches of two samples
    for (name, a), b in zip(full.model.state_dict().items(), halves.model.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
    with torch.no_grad():  # and the step really moved the weights
        moved = sum(float((a - b).abs().sum()) for a, b in zip(full.model.state_dict().values(),
                                                                 make_trainer(None).model.state_dict().values()))
    assert moved > 1e-3


@pytest.mark.parametrize("clip", [1e-3, 0.0])
def test_gradient_clipping_bounds_the_norm_at_the_step(clip):
    tr = make_trainer(None, grad_clip=clip)
    norms = []

    def record(opt, args, kwargs):
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))))

    tr.optimizer.register_step_pre_hook(record)
    tr._train_step(_batch())
    if clip:
        assert norms[0] == pytest.approx(clip, rel=1e-4)
    else:
        assert norms[0] > 1e-2  # unclipped


def test_nan_loss_stops_with_epoch_and_step_and_keeps_the_last_good_checkpoint(tmp_path):
    tr = make_trainer(tmp_path, epochs=3)
    calls = {"n": 0}

    def poison(module, inputs, output):
        if module.training:
            calls["n"] += 1
            if calls["n"] == 6:  # epoch 2, second batch
                return output * float("nan")
        return output

    tr.model.register_forward_hook(poison)
    good = {}

    class Snapshot:
        def log_step(self, step, scalars):
            pass

        def log_epoch(self, step, row):
            good.update({k: v.clone() for k, v in tr.model.state_dict().items()})

        def close(self):
            pass

    tr.loggers = [Snapshot()]
    with pytest.raises(FloatingPointError, match=r"loss: expected a finite value, got nan at epoch 2/3, step 6 "
                                                 r"\(batch 2/4\).*last good checkpoint .*checkpoint.pt' \(after 1 "
                                                 r"epoch\(s\), step 4\) is kept"):
        tr.fit()
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 1 and state["step"] == 4
    for k, v in state["model"].items():
        assert torch.isfinite(v).all() and torch.equal(v, good[k]), k
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert "step 6" in metrics["stopped"] and len(metrics["history"]) == 1


def test_bf16_autocast_on_cpu_runs_linear_layers_in_bfloat16():
    tr = make_trainer(None, precision="bf16", epochs=1)
    ref = make_trainer(None, epochs=1)
    linear = next(m for m in tr.model.modules() if isinstance(m, torch.nn.Linear))
    dtypes = set()
    linear.register_forward_hook(lambda m, i, o: dtypes.add(o.dtype) if m.training else None)
    loss_bf16 = tr.train_epoch()
    loss_fp32 = ref.train_epoch()
    assert dtypes == {torch.bfloat16}
    assert loss_bf16 == pytest.approx(loss_fp32, rel=0.05) and loss_bf16 != loss_fp32


def test_fp16_on_the_cpu_is_an_error_naming_the_key():
    with pytest.raises(ValueError, match=r"train.precision: 'fp16' trains with a GradScaler, which needs a CUDA "
                                         r"device; use 'bf16' on the CPU"):
        make_trainer(None, precision="fp16")


def test_metrics_csv_and_tensorboard_hold_the_history(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tr = make_trainer(tmp_path, loggers=lambda step: make_loggers(tmp_path, tensorboard=True))
    metrics = tr.fit()
    with open(tmp_path / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["train_loss"]) for r in rows] == [h["train_loss"] for h in metrics["history"]]
    assert [float(r["test_rel_l2"]) for r in rows] == [h["test_rel_l2"] for h in metrics["history"]]
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    steps = acc.Scalars("train/loss")
    assert [e.step for e in steps] == list(range(1, 9))
    epoch_loss = [e.value for e in acc.Scalars("epoch/train_loss")]
    assert epoch_loss == pytest.approx([h["train_loss"] for h in metrics["history"]], rel=1e-6)
    assert sum(e.value for e in steps[:4]) / 4 == pytest.approx(metrics["history"][0]["train_loss"], rel=1e-5)


def test_missing_optional_loggers_are_skipped_with_a_message(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(loggers_module.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("tensorboard", "wandb") else real(name, *a))
    messages = []
    assert make_loggers(tmp_path, tensorboard=True, wandb=True, log=messages.append) == []
    assert "tensorboard is not installed" in messages[0] and "wandb is not installed" in messages[1]
    assert not (tmp_path / "tensorboard").exists()


def test_wandb_only_when_asked_and_resumes_its_run_id(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert make_loggers(tmp_path, tensorboard=False) == []  # wandb defaults to off
    (logger,) = make_loggers(tmp_path, tensorboard=False, wandb=True, run_config={"train": {"lr": 1.0}})
    logger.log_step(1, {"loss": 0.5})
    logger.log_epoch(1, {"epoch": 1, "train_loss": 0.5, "name": "not a number"})
    logger.close()
    run_id = (tmp_path / "wandb_id.txt").read_text()
    (again,) = make_loggers(tmp_path, tensorboard=False, wandb=True)
    again.close()
    assert (tmp_path / "wandb_id.txt").read_text() == run_id and len(run_id) >= 8
