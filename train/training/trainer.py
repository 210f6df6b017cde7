"""Keyword-only trainer: AdamW, OneCycle or cosine schedule, relative L2/H1 losses; one process or
data parallel under ``torchrun``; mixed precision, gradient accumulation and clipping; exact resume.

The trainer works on datasets of sample dicts ``{"x": (C_in, *spatial), "y": (C_out, *spatial)}``.
Inputs are encoded with the input normaliser; the model's output is decoded with the output
normaliser and the loss is computed on physical values, so the reported relative errors are
those of the decoded prediction (the convention of the FNO and Galerkin Transformer papers).

One optimiser step on the global batch ``I`` (``batch_size`` samples, ``b`` per rank, split into
``k = grad_accum_steps`` micro-batches ``I_{r,j}``) minimises the batch mean

    L = (1/|I|) Σ_{i∈I} ℓ_i = Σ_r (1/W) Σ_j (|I_{r,j}| / b) · L_{r,j},   L_{r,j} = mean_{i∈I_{r,j}} ℓ_i,

so each micro-batch loss is weighted by its share of the rank's batch before ``backward`` and DDP
averages the ranks' gradients: the step equals one step on the whole batch in one process. The
gradient is then clipped to norm ``grad_clip`` and the optimiser and schedule step.

Persistence (``run_dir``): ``checkpoint.pt`` (atomic; see :mod:`.checkpoint`) after every epoch and
every ``checkpoint_every_steps`` optimiser steps, ``metrics.json`` and ``metrics.csv`` after every
epoch, all on rank 0. ``fit(resume=True)`` restores weights, optimiser, schedule, gradient scaler,
every rank's RNG states and the sampler position, and skips the batches of the current epoch that
were already trained on, so the continuation equals the uninterrupted run.

A non-finite loss stops training with ``FloatingPointError`` naming the epoch and step; the last
checkpoint on disk (written before the divergence) is left untouched.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from sciattn._checks import check_choice, check_positive_int

from ..analysis.rollout import autoregressive
from ..datasets.run_metadata import collect_data_meta
from .batching import collate, is_point_batch, predict, to_device
from .checkpoint import atomic_write_bytes
from .distributed import (
    ResumableDistributedSampler,
    all_reduce_sum,
    current_context,
    init_domain_mesh,
    per_rank_batch,
    resolve_device,
    seed_everything,
    wrap_ddp,
)
from .evaluation import evaluate_dataset, evaluate_sharded
from .loggers import MetricLogger
from .losses import make_loss
from .precision import Precision
from .train_state import restore_training_state, write_training_state

__all__ = ["Trainer", "evaluate_dataset"]


class Trainer:
    """Train an operator on grid data, in one process or data parallel.

    When a ``torch.distributed`` process group is initialised (``torchrun``, see
    :mod:`.distributed`) the model is wrapped in ``DistributedDataParallel``, each rank trains on
    its shard of every global batch, evaluation is sharded and summed over ranks, and only rank 0
    logs and writes files. With ``domain_parallel = D > 1`` the ranks form a ``(W / D) × D`` mesh:
    each group of ``D`` ranks trains on the same samples, each rank on its part of their points (the
    operator and the loss sum over the group; :class:`.distributed.DomainMesh`).

    Args:
        model: an operator from :func:`sciattn.operators.create_operator`.
        train_data: training dataset of sample dicts.
        test_data: ``{name: dataset}`` evaluated after every epoch.
        x_normalizer, y_normalizer: fitted on ``train_data`` only.
        spatial_dims: number of spatial axes of the fields.
        epochs, batch_size, lr, weight_decay: AdamW recipe; ``batch_size`` is the global batch of
            one optimiser step (a multiple of world size × ``grad_accum_steps``).
        scheduler: ``"onecycle"`` or ``"cosine"``, stepped every optimiser step.
        pct_start: warm-up fraction of OneCycle.
        loss: ``"l2"``, ``"h1"`` or ``"l2+h1"``; h1_weight: weight of the H1 term.
        grad_clip: max gradient norm (``None`` or ``0``: off).
        grad_accum_steps: micro-batches per optimiser step.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (CUDA) autocast, see :mod:`.precision`.
        checkpoint_every_steps: also checkpoint every that many optimiser steps (``0``/``None``: off).
        run_dir: where ``checkpoint.pt``, ``metrics.json`` and ``metrics.csv`` go (``None``: nowhere).
        run_config: plain dict stored in the checkpoint.
        seed: seed of the parameter-free randomness (shuffling; dropout with ``seed + rank``).
        device: torch device (``"cuda"`` means this rank's local GPU under torchrun).
        progress: show progress bars (rank 0).
        log: message sink (rank 0).
        loggers: streaming metric loggers (:mod:`.loggers`), or a function of the starting optimiser
            step (known after resuming) that makes them; used on rank 0 only.
        rollout_steps: applications of the model per training sample: ``1`` trains one step on the
            true inputs; ``k > 1`` feeds each prediction back as input (time series, frames as
            channels, see :mod:`.rollout`) and the loss compares all ``k`` predictions with the
            first target frames.
        data_meta: what the run records about its data (see :mod:`.run_metadata`); merged over
            :func:`~.run_metadata.collect_data_meta` of ``train_data`` (variable names, ``dt``, domain,
            source, statistics) and stored in every checkpoint as ``state["data_meta"]``.
        domain_parallel: ranks that split the points of each sample (point-set data, an operator with
            ``supports_domain_parallel``; a divisor of the world size); ``1``: data parallel only.
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        train_data: Dataset,
        test_data: dict[str, Dataset],
        x_normalizer: nn.Module,
        y_normalizer: nn.Module,
        spatial_dims: int,
        epochs: int = 15,
        batch_size: int = 8,
        lr: float = 3e-3,
        weight_decay: float = 1e-4,
        scheduler: str = "onecycle",
        pct_start: float = 0.3,
        loss: str = "l2",
        h1_weight: float = 0.0,
        grad_clip: float | None = 1.0,
        grad_accum_steps: int = 1,
        precision: str = "fp32",
        checkpoint_every_steps: int | None = 0,
        run_dir: str | Path | None = None,
        run_config: dict[str, Any] | None = None,
        seed: int = 0,
        device: str | torch.device = "cpu",
        progress: bool = True,
        log: Callable[[str], None] = print,
        loggers: Sequence[MetricLogger] | Callable[[int], Sequence[MetricLogger]] | None = None,
        data_meta: dict[str, Any] | None = None,
        rollout_steps: int = 1,
        domain_parallel: int = 1,
    ) -> None:
        check_positive_int("epochs", epochs)
        check_positive_int("batch_size", batch_size)
        check_positive_int("grad_accum_steps", grad_accum_steps)
        self.rollout_steps = check_positive_int("rollout_steps", rollout_steps)
        check_choice("scheduler", scheduler, ("onecycle", "cosine"))
        self.ctx = current_context()
        self.device = resolve_device(device, self.ctx)
        self.points = "pos" in train_data[0]  # point samples: padded batches with a mask (see .batching)
        self.domain = init_domain_mesh(self.ctx, domain_parallel, self.device)
        if self.domain.split:
            from sciattn.operators.point_parts import check_supports, set_domain_group

            if not self.points:
                raise ValueError(f"domain_parallel: splits the points of point-set samples (x (N, C) with pos); the "
                                 f"training data are grids, got domain_parallel = {domain_parallel}")
            check_supports(model, key="domain_parallel")
            set_domain_group(model, self.domain.domain_group)
        self.model = model.to(self.device)
        self.net: nn.Module = self.model
        if self.ctx.distributed:
            self.net = wrap_ddp(self.model, self.device)  # finds unused parameters where the model says so
        self.train_data, self.test_data = train_data, test_data
        self.x_normalizer = x_normalizer.to(self.device)
        self.y_normalizer = y_normalizer.to(self.device)
        self.spatial_dims = spatial_dims
        self.epochs, self.batch_size = epochs, batch_size
        self.rank_batch, self.micro_batch = per_rank_batch(batch_size, self.domain.data_size, grad_accum_steps)
        self.loss_fn = make_loss(loss, spatial_dims, h1_weight, points=self.points,
                                 group=self.domain.domain_group if self.domain.split else None)
        self.grad_clip = grad_clip
        self.precision = Precision(precision, self.device)
        self.checkpoint_every_steps = checkpoint_every_steps or 0
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.run_config = run_config or {}
        self.seed = seed
        self.progress = progress and self.ctx.is_main
        self.log = log if self.ctx.is_main else (lambda message: None)
        self._make_loggers = loggers if callable(loggers) else None
        self.loggers: list[MetricLogger] = list(loggers or []) if self.ctx.is_main and not callable(loggers) else []
        self.sampler = ResumableDistributedSampler(train_data, num_replicas=self.domain.data_size,
                                                   rank=self.domain.data_rank, seed=seed, batch_size=self.rank_batch)
        self.steps_per_epoch = self.sampler.batches_per_epoch
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        steps = epochs * self.steps_per_epoch
        if scheduler == "onecycle":
            self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
                self.optimizer, max_lr=lr, total_steps=steps, pct_start=pct_start, div_factor=1e2,
                final_div_factor=1e3,
            )
        else:
            self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=steps)
        sample = train_data[0]["x"]
        self.train_resolution = None if self.points else list(sample.shape[1:])
        self.data_meta = collect_data_meta(train_data, extra=data_meta, model_channels=(
            getattr(model, "in_channels", None), getattr(model, "out_channels", None)))
        self.epoch = 0  # completed epochs
        self.step = 0  # optimiser steps
        self.batches_done = 0  # optimiser steps done in the current epoch
        self._partial = {"loss_sum": 0.0, "count": 0, "seconds": 0.0}
        self._last_saved: tuple[int, int] | None = None
        self.history: list[dict[str, Any]] = []

    # -- persistence -------------------------------------------------------------------------
    def _metrics(self) -> dict[str, Any]:
        return {"epochs_done": self.epoch, "steps_done": self.step, "train_resolution": self.train_resolution,
                "world_size": self.ctx.world_size, "domain_parallel": self.domain.domain_size, "history": self.history,
                "final": self.history[-1] if self.history else {}}

    @property
    def checkpoint_path(self) -> Path | None:
        return self.run_dir / "checkpoint.pt" if self.run_dir is not None else None

    def _where(self) -> str:
        return f"epoch {self.epoch + 1}/{self.epochs}, step {self.step} (batch {self.batches_done}/{self.steps_per_epoch})"

    def _last_good(self) -> str:
        if self._last_saved is None:
            return "no checkpoint was written"
        e, s = self._last_saved
        return f"the last good checkpoint {str(self.checkpoint_path)!r} (after {e} epoch(s), step {s}) is kept"

    def save(self) -> None:
        """Checkpoint (all ranks take part: RNG states are gathered; rank 0 writes), see :mod:`.train_state`."""
        write_training_state(self)

    def resume(self) -> bool:
        """Restore the last checkpoint in ``run_dir``; returns whether one was found."""
        return restore_training_state(self)

    # -- loop ---------------------------------------------------------------------------------
    def _train_step(self, batch: dict[str, torch.Tensor]) -> tuple[float, int]:
        """One optimiser step on this rank's share of a global batch; returns the global (Σ loss·n, n)."""
        batch = to_device(batch, self.device)
        if self.domain.split:
            batch = self.model.split_points(batch, self.domain.domain_rank, self.domain.domain_size)
        n = batch["x"].shape[0]
        self.optimizer.zero_grad(set_to_none=True)
        parts = {k: v.split(self.micro_batch) for k, v in batch.items()}
        chunks = [{k: v[j] for k, v in parts.items()} for j in range(len(parts["x"]))]
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for j, mb in enumerate(chunks):
            last = j == len(chunks) - 1
            m = mb["x"].shape[0]
            sync = self.net.no_sync() if self.ctx.distributed and not last else contextlib.nullcontext()
            with sync:
                pred, target = self._predict(mb)
                loss = self.loss_fn(pred, target, mb)
                self.precision.backward(loss * (m / n) if len(chunks) > 1 else loss)
            loss_sum += loss.detach().double() * m
        stats = all_reduce_sum(torch.stack([loss_sum, loss_sum.new_tensor(float(n))]), self.ctx, self.domain.data_group)
        total, count = float(stats[0]), int(stats[1])
        if not math.isfinite(total):
            raise FloatingPointError(
                f"loss: expected a finite value, got {total / count} at epoch {self.epoch + 1}/{self.epochs}, step "
                f"{self.step + 1} (batch {self.batches_done + 1}/{self.steps_per_epoch}); training stopped and "
                f"{self._last_good()}; lower train.lr, set train.grad_clip or use train.precision = \"fp32\""
            )
        self.precision.unscale_(self.optimizer)
        if self.grad_clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.precision.step(self.optimizer)
        self.scheduler.step()
        return total, count

    def _predict(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(prediction, target)`` of a micro-batch: one application, or ``rollout_steps`` fed back."""
        def step(window):
            return predict(self.net, mb, self.x_normalizer, self.y_normalizer, x=window,
                           autocast=self.precision.autocast)

        dim = -1 if is_point_batch(mb) else 1
        if self.rollout_steps == 1:
            pred = step(mb["x"])
        else:
            pred = autoregressive(step, mb["x"], applications=self.rollout_steps, dim=dim)
        y = mb["y"]
        if y.shape[dim] < pred.shape[dim]:
            raise ValueError(f"rollout_steps: {self.rollout_steps} application(s) predict {pred.shape[dim]} "
                             f"channels, the targets hold only {y.shape[dim]}")
        return pred, y.narrow(dim, 0, pred.shape[dim])

    def train_epoch(self) -> float:
        """Train the rest of the current epoch; returns its mean training loss (over all ranks)."""
        self.net.train()
        self.sampler.set_position(self.epoch, self.batches_done)
        loader = DataLoader(self.train_data, batch_size=self.rank_batch, sampler=self.sampler,
                            generator=torch.Generator(), collate_fn=collate)  # the global RNG stays untouched
        seconds0, t0 = self._partial["seconds"], time.perf_counter()
        bar = tqdm(loader, desc=f"epoch {self.epoch + 1}/{self.epochs}", leave=False, disable=not self.progress,
                   initial=self.batches_done, total=self.steps_per_epoch)
        for batch in bar:
            total, count = self._train_step(batch)
            self.step += 1
            self.batches_done += 1
            self._partial["loss_sum"] += total
            self._partial["count"] += count
            self._partial["seconds"] = seconds0 + time.perf_counter() - t0
            mean = self._partial["loss_sum"] / self._partial["count"]
            bar.set_postfix(loss=f"{mean:.4f}")
            for logger in self.loggers:
                logger.log_step(self.step, {"loss": total / count, "lr": self.scheduler.get_last_lr()[0]})
            every = self.checkpoint_every_steps
            if every and self.step % every == 0 and self.batches_done < self.steps_per_epoch:
                self.save()
        loss = self._partial["loss_sum"] / max(self._partial["count"], 1)
        self.last_epoch_seconds = seconds0 + time.perf_counter() - t0
        self._partial = {"loss_sum": 0.0, "count": 0, "seconds": 0.0}
        self.batches_done = 0
        return loss

    def evaluate(self) -> dict[str, dict[str, float]]:
        """Errors on every test set (sharded over ranks and summed: every sample counted once)."""
        return {
            name: evaluate_sharded(self.model, ds, self.ctx, x_normalizer=self.x_normalizer,
                                   y_normalizer=self.y_normalizer, spatial_dims=self.spatial_dims, device=self.device,
                                   domain=self.domain)
            for name, ds in self.test_data.items()
        }

    def _write_stopped(self, message: str) -> None:
        if self.run_dir is not None and self.ctx.is_main:
            metrics = {**self._metrics(), "stopped": message}
            atomic_write_bytes((json.dumps(metrics, indent=2) + "\n").encode(), self.run_dir / "metrics.json")

    def fit(self, resume: bool = False) -> dict[str, Any]:
        """Train for the remaining epochs; returns the metrics dict also written to ``metrics.json``."""
        if not (resume and self.resume()):
            seed_everything(self.seed + self.ctx.rank)
        if self._make_loggers is not None and self.ctx.is_main:
            self.loggers = list(self._make_loggers(self.step))
        try:
            while self.epoch < self.epochs:
                train_loss = self.train_epoch()
                tests = self.evaluate()
                self.epoch += 1
                row = {"epoch": self.epoch, "step": self.step, "train_loss": train_loss,
                       "seconds": self.last_epoch_seconds, **{f"{k}_rel_l2": v["rel_l2"] for k, v in tests.items()}}
                self.history.append(row)
                self.log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
                self.save()
                for logger in self.loggers:
                    logger.log_epoch(self.step, row)
        except FloatingPointError as err:
            self._write_stopped(str(err))
            raise
        finally:
            for logger in self.loggers:
                logger.close()
        return self._metrics()
