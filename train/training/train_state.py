"""The trainer's resumable state: what a checkpoint holds so that a continuation equals the
uninterrupted run, and its restoration (see :mod:`.checkpoint` for the file format).

Written at the end of every epoch and every ``checkpoint_every_steps`` optimiser steps:

* model, optimiser, schedule and gradient-scaler states, normalisers, run config;
* ``epoch`` (completed), ``step`` (optimiser steps), ``batches_done`` in the current epoch and the
  sampler's seed — the epoch permutation is a function of ``(seed, epoch)``, so skipping
  ``batches_done`` batches replays the same shuffling;
* every rank's RNG states (torch CPU/CUDA, NumPy, ``random``), gathered to rank 0;
* the running loss sum, sample count and seconds of the unfinished epoch.

Weights holding NaN or Inf are never written: the last good checkpoint stays on disk.

A trainer built with more ``epochs`` than the checkpointed run (a finished run extended) restores
a cosine schedule onto the new total: from the resumed step on, the learning rate is the one of a
run configured with the new ``epochs`` from the start. A OneCycle schedule of another length is
refused (see :func:`~sciattn.train.training.run.check_resume_config`).
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

from .checkpoint import (
    atomic_write_bytes,
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from .distributed import gather_objects, seed_everything
from .loggers import write_metrics_csv

__all__ = ["write_training_state", "restore_training_state"]


def write_training_state(tr: Any) -> None:
    """Checkpoint the :class:`~sciattn.train.training.trainer.Trainer` ``tr`` (a collective under torchrun)."""
    if tr.run_dir is None:
        return
    bad = [n for n, p in tr.model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise FloatingPointError(
            f"model: parameters {bad[:3]} hold NaN or Inf at {tr._where()}; training stopped and {tr._last_good()}"
        )
    rng_states = gather_objects(capture_rng_state(), tr.ctx)
    if tr.ctx.is_main:
        training = {
            "batches_done": tr.batches_done, "steps_per_epoch": tr.steps_per_epoch,
            "world_size": tr.ctx.world_size, "seed": tr.seed, "rng_states": rng_states,
            "sampler": tr.sampler.state_dict(), "scaler": tr.precision.state_dict(),
            "partial": dict(tr._partial), "precision": tr.precision.name,
        }
        metrics = tr._metrics()
        save_checkpoint(
            tr.checkpoint_path, model=tr.model, x_normalizer=tr.x_normalizer, y_normalizer=tr.y_normalizer,
            run_config=tr.run_config, optimizer=tr.optimizer, scheduler=tr.scheduler, epoch=tr.epoch, step=tr.step,
            metrics=metrics, training=training, data_meta=getattr(tr, "data_meta", None),
        )
        if tr.batches_done == 0:
            atomic_write_bytes((json.dumps(metrics, indent=2) + "\n").encode(), tr.run_dir / "metrics.json")
            write_metrics_csv(tr.history, tr.run_dir / "metrics.csv")
    tr._last_saved = (tr.epoch, tr.step)


def _fit_schedule(tr: Any) -> None:
    """After loading a schedule written for another number of epochs: a cosine continues on the
    cosine of ``tr.epochs · steps_per_epoch`` steps; a OneCycle is refused."""
    sched, total = tr.scheduler, tr.epochs * tr.steps_per_epoch
    if isinstance(sched, torch.optim.lr_scheduler.OneCycleLR) and sched.total_steps != total:
        raise ValueError(
            f"resume: {str(tr.checkpoint_path)!r} holds a OneCycle schedule of {sched.total_steps} steps, this run has "
            f"{total} ({tr.epochs} epochs); a OneCycle run cannot be extended, start a new run or use the cosine schedule"
        )
    if not isinstance(sched, torch.optim.lr_scheduler.CosineAnnealingLR) or sched.T_max == total:
        return
    step = sched.last_epoch
    if step > total:
        raise ValueError(f"resume: {str(tr.checkpoint_path)!r} has taken {step} optimiser steps, more than the "
                         f"{total} of {tr.epochs} epochs")
    sched.T_max = total
    lrs = [sched.eta_min + (base - sched.eta_min) * (1 + math.cos(math.pi * step / total)) / 2
           for base in sched.base_lrs]
    for group, lr in zip(tr.optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    sched._last_lr = list(lrs)  # get_last_lr(); the recursive cosine continues from group["lr"]
    tr.log(f"resume: cosine schedule continued over {tr.epochs} epochs ({total} steps); lr {lrs[0]:.4g} at step {step}")


def restore_training_state(tr: Any) -> bool:
    """Restore ``tr`` from ``tr.run_dir/checkpoint.pt``; returns whether a checkpoint was found."""
    if tr.run_dir is None or not tr.checkpoint_path.is_file():
        return False
    state = load_checkpoint(tr.checkpoint_path)
    saved = state.get("training") or {}  # empty in version-1 checkpoints
    stored = saved.get("steps_per_epoch", tr.steps_per_epoch)
    if stored != tr.steps_per_epoch:
        raise ValueError(
            f"resume: {str(tr.checkpoint_path)!r} was written with {stored} optimiser steps per epoch, this run "
            f"has {tr.steps_per_epoch}; train.batch_size or the training data changed, start a new run instead"
        )
    tr.model.load_state_dict(state["model"])
    tr.optimizer.load_state_dict(state["optimizer"])
    tr.scheduler.load_state_dict(state["scheduler"])
    _fit_schedule(tr)
    tr.precision.load_state_dict(saved.get("scaler"))
    tr.epoch = state["epoch"]
    tr.step = state.get("step", tr.epoch * tr.steps_per_epoch)
    tr.batches_done = saved.get("batches_done", 0)
    tr._partial = dict(saved.get("partial") or {"loss_sum": 0.0, "count": 0, "seconds": 0.0})
    rngs = saved.get("rng_states")
    if rngs and len(rngs) == tr.ctx.world_size:
        restore_rng_state(rngs[tr.ctx.rank])
    elif rngs:
        tr.log(f"resume: checkpoint written by {len(rngs)} rank(s), now {tr.ctx.world_size}; the global RNGs are "
               f"reseeded with seed + rank + step (the shuffling does not depend on them)")
        seed_everything(tr.seed + tr.ctx.rank + tr.step)
    else:
        torch.set_rng_state(state["rng"])
    tr.history = json.loads(state["metrics"]).get("history", [])
    tr._last_saved = (tr.epoch, tr.step)
    tr.log(f"resumed from {tr.checkpoint_path} after epoch {tr.epoch}, step {tr.step} "
           f"(batch {tr.batches_done}/{tr.steps_per_epoch} of epoch {tr.epoch + 1})")
    return True
