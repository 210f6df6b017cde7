"""Keyword-only trainer: AdamW, OneCycle or cosine schedule, relative L2/H1 losses.

The trainer works on datasets of sample dicts ``{"x": (C_in, *spatial), "y": (C_out, *spatial)}``.
Inputs are encoded with the input normaliser; the model's output is decoded with the output
normaliser and the loss is computed on physical values, so the reported relative errors are
those of the decoded prediction (the convention of the FNO and Galerkin Transformer papers).

A checkpoint (``checkpoint.pt``) is written atomically after every epoch with the optimiser,
scheduler and RNG states, so ``fit(resume=True)`` continues a killed run from its last
completed epoch.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from sciattn._checks import check_choice, check_positive_int

from .checkpoint import atomic_write_bytes, load_checkpoint, save_checkpoint
from .losses import make_loss, relative_h1, relative_l2

__all__ = ["Trainer", "evaluate_dataset"]


@torch.no_grad()
def evaluate_dataset(
    model: nn.Module,
    dataset: Dataset,
    *,
    x_normalizer: nn.Module,
    y_normalizer: nn.Module,
    spatial_dims: int,
    batch_size: int = 32,
    device: str | torch.device = "cpu",
) -> dict[str, float]:
    """Mean per-sample relative L2 and H1 errors of the decoded prediction, and seconds per sample."""
    model.eval()
    l2_sum = h1_sum = 0.0
    n = 0
    t0 = time.perf_counter()
    for batch in DataLoader(dataset, batch_size=batch_size):
        x, y = batch["x"].to(device), batch["y"].to(device)
        pred = y_normalizer.decode(model(x_normalizer.encode(x)))
        l2_sum += float(relative_l2(pred, y, spatial_dims)) * x.shape[0]
        h1_sum += float(relative_h1(pred, y, spatial_dims)) * x.shape[0]
        n += x.shape[0]
    seconds = time.perf_counter() - t0
    return {"rel_l2": l2_sum / n, "rel_h1": h1_sum / n, "seconds_per_sample": seconds / n, "n_samples": n}


class Trainer:
    """Train an operator on grid data.

    Args:
        model: an operator from :func:`sciattn.operators.create_operator`.
        train_data: training dataset of sample dicts.
        test_data: ``{name: dataset}`` evaluated after every epoch.
        x_normalizer, y_normalizer: fitted on ``train_data`` only.
        spatial_dims: number of spatial axes of the fields.
        epochs, batch_size, lr, weight_decay: AdamW recipe.
        scheduler: ``"onecycle"`` or ``"cosine"``, stepped every batch.
        pct_start: warm-up fraction of OneCycle.
        loss: ``"l2"``, ``"h1"`` or ``"l2+h1"``; h1_weight: weight of the H1 term.
        grad_clip: max gradient norm (``None``: off).
        run_dir: where ``checkpoint.pt`` and ``metrics.json`` go (``None``: nowhere).
        run_config: plain dict stored in the checkpoint.
        seed: seed of the parameter-free randomness (shuffling, dropout).
        device: torch device.
        progress: show progress bars.
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
        run_dir: str | Path | None = None,
        run_config: dict[str, Any] | None = None,
        seed: int = 0,
        device: str | torch.device = "cpu",
        progress: bool = True,
        log: Callable[[str], None] = print,
    ) -> None:
        check_positive_int("epochs", epochs)
        check_positive_int("batch_size", batch_size)
        check_choice("scheduler", scheduler, ("onecycle", "cosine"))
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.train_data, self.test_data = train_data, test_data
        self.x_normalizer = x_normalizer.to(self.device)
        self.y_normalizer = y_normalizer.to(self.device)
        self.spatial_dims = spatial_dims
        self.epochs, self.batch_size = epochs, batch_size
        self.loss_fn = make_loss(loss, spatial_dims, h1_weight)
        self.grad_clip = grad_clip
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.run_config = run_config or {}
        self.seed = seed
        self.progress = progress
        self.log = log
        self.generator = torch.Generator().manual_seed(seed)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        steps = epochs * math.ceil(len(train_data) / batch_size)
        if scheduler == "onecycle":
            self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
                self.optimizer, max_lr=lr, total_steps=steps, pct_start=pct_start, div_factor=1e2,
                final_div_factor=1e3,
            )
        else:
            self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=steps)
        self.epoch = 0
        self.history: list[dict[str, Any]] = []

    # -- persistence -------------------------------------------------------------------------
    def _metrics(self) -> dict[str, Any]:
        return {"epochs_done": self.epoch, "history": self.history,
                "final": self.history[-1] if self.history else {}}

    def save(self) -> None:
        if self.run_dir is None:
            return
        metrics = self._metrics()
        save_checkpoint(
            self.run_dir / "checkpoint.pt", model=self.model, x_normalizer=self.x_normalizer,
            y_normalizer=self.y_normalizer, run_config=self.run_config, optimizer=self.optimizer,
            scheduler=self.scheduler, epoch=self.epoch, metrics=metrics,
        )
        atomic_write_bytes((json.dumps(metrics, indent=2) + "\n").encode(), self.run_dir / "metrics.json")

    def resume(self) -> bool:
        """Restore the last checkpoint in ``run_dir``; returns whether one was found."""
        if self.run_dir is None or not (self.run_dir / "checkpoint.pt").is_file():
            return False
        state = load_checkpoint(self.run_dir / "checkpoint.pt")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        self.epoch = state["epoch"]
        self.history = json.loads(state["metrics"]).get("history", [])
        self.log(f"resumed from {self.run_dir / 'checkpoint.pt'} after epoch {self.epoch}")
        return True

    # -- loop ---------------------------------------------------------------------------------
    def train_epoch(self) -> float:
        self.model.train()
        self.generator.manual_seed(self.seed + self.epoch)  # shuffling depends only on (seed, epoch)
        loader = DataLoader(self.train_data, batch_size=self.batch_size, shuffle=True, generator=self.generator)
        total, count = 0.0, 0
        bar = tqdm(loader, desc=f"epoch {self.epoch + 1}/{self.epochs}", leave=False, disable=not self.progress)
        for batch in bar:
            x, y = batch["x"].to(self.device), batch["y"].to(self.device)
            pred = self.y_normalizer.decode(self.model(self.x_normalizer.encode(x)))
            loss = self.loss_fn(pred, y)
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"loss: expected a finite value, got {float(loss)} at epoch {self.epoch + 1}; "
                    "lower train.lr or set train.grad_clip"
                )
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.grad_clip:
                nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.optimizer.step()
            self.scheduler.step()
            total += float(loss.detach()) * x.shape[0]
            count += x.shape[0]
            bar.set_postfix(loss=f"{total / count:.4f}")
        return total / count

    def evaluate(self) -> dict[str, dict[str, float]]:
        return {
            name: evaluate_dataset(self.model, ds, x_normalizer=self.x_normalizer, y_normalizer=self.y_normalizer,
                                   spatial_dims=self.spatial_dims, device=self.device)
            for name, ds in self.test_data.items()
        }

    def fit(self, resume: bool = False) -> dict[str, Any]:
        """Train for the remaining epochs; returns the metrics dict also written to ``metrics.json``."""
        if not (resume and self.resume()):
            torch.manual_seed(self.seed)
        while self.epoch < self.epochs:
            t0 = time.perf_counter()
            train_loss = self.train_epoch()
            seconds = time.perf_counter() - t0
            tests = self.evaluate()
            self.epoch += 1
            row = {"epoch": self.epoch, "train_loss": train_loss, "seconds": seconds,
                   **{f"{k}_rel_l2": v["rel_l2"] for k, v in tests.items()}}
            self.history.append(row)
            self.log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
            self.save()
        return self._metrics()
