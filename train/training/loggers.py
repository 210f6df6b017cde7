"""Metric logs of a run: ``metrics.csv`` (always), TensorBoard and Weights & Biases (optional).

* ``metrics.csv``: one row per completed epoch, rewritten atomically from the trainer's history,
  so after ``--resume`` it holds exactly the epochs of the resumed run.
* TensorBoard (``RUN_DIR/tensorboard``): ``train/loss`` and ``train/lr`` per optimiser step, the
  epoch row per epoch. Only when asked (``train.tensorboard = true``) and the ``tensorboard``
  package is installed (``pip install "sciattn[tensorboard]"``); asked for but missing, it is skipped
  with one message. On resume the writer purges events after the checkpoint's step.
* wandb: only when ``train.wandb = true`` *and* ``wandb`` is installed (never required). The run id
  is kept in ``RUN_DIR/wandb_id.txt`` so a resumed run continues the same wandb run.

Only rank 0 logs (the trainer passes no loggers to the other ranks).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from sciattn._io import atomic_write_bytes

__all__ = ["MetricLogger", "TensorBoardLogger", "WandbLogger", "make_loggers", "write_metrics_csv"]


def write_metrics_csv(history: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write one row per epoch; columns are the keys in order of first appearance."""
    columns: list[str] = []
    for row in history:
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in history:
        writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    return atomic_write_bytes(buf.getvalue().encode(), path)


class MetricLogger(Protocol):
    def log_step(self, step: int, scalars: dict[str, float]) -> None: ...

    def log_epoch(self, step: int, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class TensorBoardLogger:
    """Scalars to ``log_dir`` with ``torch.utils.tensorboard.SummaryWriter``."""

    def __init__(self, log_dir: str | Path, start_step: int = 0) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=start_step if start_step > 0 else None)

    def log_step(self, step: int, scalars: dict[str, float]) -> None:
        for k, v in scalars.items():
            self.writer.add_scalar(f"train/{k}", v, step)

    def log_epoch(self, step: int, row: dict[str, Any]) -> None:
        for k, v in _numbers(row).items():
            if k != "epoch":
                self.writer.add_scalar(f"epoch/{k}", v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """A wandb run in ``run_dir`` (project ``project``), resumed by the id in ``wandb_id.txt``."""

    def __init__(self, run_dir: str | Path, project: str, config: dict[str, Any]) -> None:
        import wandb

        run_dir = Path(run_dir)
        id_file = run_dir / "wandb_id.txt"
        if id_file.is_file():
            run_id = id_file.read_text().strip()
        else:
            run_id = uuid.uuid4().hex[:12]
            atomic_write_bytes(run_id.encode(), id_file)
        self.run = wandb.init(project=project, dir=str(run_dir), config=config, id=run_id, resume="allow",
                              name=run_dir.name)

    def log_step(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log({f"train/{k}": v for k, v in scalars.items()}, step=step)

    def log_epoch(self, step: int, row: dict[str, Any]) -> None:
        self.run.log({f"epoch/{k}": v for k, v in _numbers(row).items()}, step=step)

    def close(self) -> None:
        self.run.finish()


def make_loggers(
    run_dir: str | Path,
    *,
    tensorboard: bool = False,
    wandb: bool = False,
    wandb_project: str = "sciattn",
    run_config: dict[str, Any] | None = None,
    start_step: int = 0,
    log: Callable[[str], None] = print,
) -> list[MetricLogger]:
    """The streaming loggers the flags ask for and this environment can provide (a message through
    ``log`` only for one that was asked for and cannot be provided)."""
    out: list[MetricLogger] = []
    if tensorboard:
        if importlib.util.find_spec("tensorboard") is None:
            log('train.tensorboard = true but tensorboard is not installed; skipping TensorBoard logs '
                '(pip install "sciattn[tensorboard]")')
        else:
            out.append(TensorBoardLogger(Path(run_dir) / "tensorboard", start_step))
    if wandb:
        if importlib.util.find_spec("wandb") is None:
            log("train.wandb = true but wandb is not installed; skipping wandb logging (pip install wandb)")
        else:
            out.append(WandbLogger(run_dir, wandb_project, run_config or {}))
    return out
