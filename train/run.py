"""End-to-end runs: train from a :class:`RunConfig`, evaluate a run directory on a data file.

``train_run`` works in one process or under ``torchrun`` (see :mod:`.distributed`): every rank
builds the data (rank 0 first, so a generated data set is solved and cached once), the model
(same seed, so same initial weights) and a :class:`Trainer`; only rank 0 writes metrics, plots,
logs and checkpoints.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from sciattn.operators import create_operator
from sciattn.pde_data.normalizers import fit_normalizers

from .checkpoint import atomic_write_bytes, load_checkpoint, load_model
from .config import ConfigError, RunConfig
from .data import build_datasets, load_data_file
from .distributed import barrier, init_distributed, shutdown_distributed
from .loggers import make_loggers
from .plots import plot_resolution_curve, plot_sample
from .trainer import Trainer, evaluate_dataset

__all__ = ["train_run", "evaluate_run", "count_parameters", "check_resume_config", "RESUME_FREE_KEYS"]

# keys that may differ between a run and its continuation without changing the computation
RESUME_FREE_KEYS = frozenset({
    "train.device", "train.threads", "train.tensorboard", "train.wandb", "train.wandb_project",
    "train.checkpoint_every_steps", "data.train", "data.test", "data.cache_dir",
})


def count_parameters(model: torch.nn.Module) -> int:
    """Real parameters; a complex parameter counts twice."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters())


def _resolution_of(name: str) -> int | None:
    tail = name.rsplit("_", 1)[-1].split("x")[0]
    return int(tail) if tail.isdigit() else None


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_resume_config(cfg: RunConfig, run_dir: str | Path) -> None:
    """Raise ``ConfigError`` naming the keys where ``cfg`` differs from the config stored in the run's
    checkpoint (other than :data:`RESUME_FREE_KEYS`); nothing to check without a checkpoint."""
    path = Path(run_dir) / "checkpoint.pt"
    if not path.is_file():
        return
    stored = _flat(json.loads(load_checkpoint(path)["run_config"]))
    new = _flat(cfg.to_dict())
    diff = sorted(k for k in stored if k not in RESUME_FREE_KEYS and stored[k] != new.get(k))
    if diff:
        detail = ", ".join(f"{k}: {stored[k]!r} -> {new.get(k)!r}" for k in diff)
        raise ConfigError(f"--resume: the config differs from the one stored in {str(path)!r} in {detail}; resume "
                          f"with the run's own config (omit CONFIG) or train into a new run directory")


def train_run(cfg: RunConfig, out: str | Path, *, resume: bool = False, progress: bool = True,
              log=print) -> dict[str, Any]:
    """Train the configured model; write ``checkpoint.pt``, ``metrics.json``, ``metrics.csv``, logs and
    PNGs into ``out`` (rank 0). Under torchrun the process group is created here and destroyed at the end."""
    t = cfg.train
    ctx = init_distributed(t.device)
    try:
        return _train_run(cfg, Path(out), ctx, resume=resume, progress=progress and ctx.is_main,
                          log=log if ctx.is_main else (lambda message: None))
    finally:
        shutdown_distributed(ctx)


def _train_run(cfg: RunConfig, out: Path, ctx, *, resume: bool, progress: bool, log) -> dict[str, Any]:
    started = time.perf_counter()
    t = cfg.train
    if resume:
        check_resume_config(cfg, out)
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
    if t.threads:
        torch.set_num_threads(t.threads)
    torch.manual_seed(t.seed)
    if not ctx.is_main:
        barrier(ctx)  # rank 0 builds (and caches) the data first
    train, tests = build_datasets(cfg.data, progress=progress)
    if ctx.is_main:
        barrier(ctx)
    data_seconds = time.perf_counter() - started
    spatial_dims = len(train.resolution)
    params = dict(cfg.model_params)
    params.setdefault("in_channels", train.in_channels)
    params.setdefault("out_channels", train.out_channels)
    model = create_operator(cfg.model_name, **params)
    xn, yn = fit_normalizers(train, normalize_x=cfg.data.normalize_x, normalize_y=cfg.data.normalize_y)
    log(f"{cfg.model_name}: {count_parameters(model):,} parameters; {len(train)} training samples at "
        f"{'x'.join(map(str, train.resolution))}" + (f"; {ctx.world_size} ranks" if ctx.distributed else ""))

    def loggers(start_step: int):
        return make_loggers(out, tensorboard=t.tensorboard, wandb=t.wandb, wandb_project=t.wandb_project,
                            run_config=cfg.to_dict(), start_step=start_step, log=log)

    trainer = Trainer(
        model=model, train_data=train, test_data=tests, x_normalizer=xn, y_normalizer=yn,
        spatial_dims=spatial_dims, epochs=t.epochs, batch_size=t.batch_size, lr=t.lr,
        weight_decay=t.weight_decay, scheduler=t.scheduler, pct_start=t.pct_start, loss=t.loss,
        h1_weight=t.h1_weight, grad_clip=t.grad_clip, grad_accum_steps=t.grad_accum_steps, precision=t.precision,
        checkpoint_every_steps=t.checkpoint_every_steps, run_dir=out, run_config=cfg.to_dict(), seed=t.seed,
        device=t.device, progress=progress, log=log, loggers=loggers,
    )
    metrics = trainer.fit(resume=resume)
    final = trainer.evaluate()
    metrics["test"] = final
    metrics["parameters"] = count_parameters(model)
    metrics["train_resolution"] = list(train.resolution)
    metrics["precision"] = t.precision
    errors = {r: v["rel_l2"] for k, v in final.items() if (r := _resolution_of(k)) is not None}
    metrics["rel_l2_by_resolution"] = {str(r): e for r, e in sorted(errors.items())}
    if not ctx.is_main:
        return metrics
    model.eval()
    for name, ds in tests.items():
        s = ds[0]
        with torch.no_grad():
            pred = yn.decode(model(xn.encode(s["x"][None].to(trainer.device))))[0]
        plot_sample(s["x"], s["y"], pred, out / f"sample_{name}.png", title=f"{cfg.model_name}, {name}")
    if len(errors) > 1:
        plot_resolution_curve(errors, out / "error_vs_resolution.png", train.resolution[0])
    metrics["data_seconds"] = data_seconds
    metrics["wall_seconds"] = time.perf_counter() - started
    atomic_write_bytes((json.dumps(metrics, indent=2) + "\n").encode(), out / "metrics.json")
    return metrics


def evaluate_run(run_dir: str | Path, data: str | Path, *, fmt: str | None = None,
                 plot: str | Path | None = None) -> dict[str, Any]:
    """Evaluate a trained run on a data file (any supported format) at that file's own resolution."""
    model, xn, yn, state = load_model(run_dir)
    ds = load_data_file(data, fmt)
    first = ds[0]["x"]
    if first.shape[0] != model.in_channels:
        raise ValueError(f"data: expected {model.in_channels} input channels for this model, got {first.shape[0]} "
                         f"in {str(data)!r}")
    resolution = list(first.shape[1:])
    result = evaluate_dataset(model, ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=len(resolution))
    result.update({"data": str(data), "resolution": resolution, "operator": state["operator"]})
    if plot is not None:
        s = ds[0]
        with torch.no_grad():
            pred = yn.decode(model(xn.encode(s["x"][None])))[0]
        plot_sample(s["x"], s["y"], pred, plot, title=f"{state['operator']} on {Path(data).name}")
    return result
