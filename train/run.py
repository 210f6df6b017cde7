"""End-to-end runs: train from a :class:`RunConfig`, evaluate a run directory on a data file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from sciattn.operators import create_operator
from sciattn.pde_data.normalizers import fit_normalizers

from .checkpoint import atomic_write_bytes, load_model
from .config import RunConfig
from .data import build_datasets, load_data_file
from .plots import plot_resolution_curve, plot_sample
from .trainer import Trainer, evaluate_dataset

__all__ = ["train_run", "evaluate_run", "count_parameters"]


def count_parameters(model: torch.nn.Module) -> int:
    """Real parameters; a complex parameter counts twice."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters())


def _resolution_of(name: str) -> int | None:
    tail = name.rsplit("_", 1)[-1].split("x")[0]
    return int(tail) if tail.isdigit() else None


def train_run(cfg: RunConfig, out: str | Path, *, resume: bool = False, progress: bool = True,
              log=print) -> dict[str, Any]:
    """Train the configured model; write ``checkpoint.pt``, ``metrics.json`` and PNGs into ``out``."""
    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t = cfg.train
    if t.threads:
        torch.set_num_threads(t.threads)
    torch.manual_seed(t.seed)
    train, tests = build_datasets(cfg.data, progress=progress)
    data_seconds = time.perf_counter() - started
    spatial_dims = len(train.resolution)
    params = dict(cfg.model_params)
    params.setdefault("in_channels", train.in_channels)
    params.setdefault("out_channels", train.out_channels)
    model = create_operator(cfg.model_name, **params)
    xn, yn = fit_normalizers(train, normalize_x=cfg.data.normalize_x, normalize_y=cfg.data.normalize_y)
    log(f"{cfg.model_name}: {count_parameters(model):,} parameters; {len(train)} training samples at "
        f"{'x'.join(map(str, train.resolution))}")
    trainer = Trainer(
        model=model, train_data=train, test_data=tests, x_normalizer=xn, y_normalizer=yn,
        spatial_dims=spatial_dims, epochs=t.epochs, batch_size=t.batch_size, lr=t.lr,
        weight_decay=t.weight_decay, scheduler=t.scheduler, pct_start=t.pct_start, loss=t.loss,
        h1_weight=t.h1_weight, grad_clip=t.grad_clip, run_dir=out, run_config=cfg.to_dict(), seed=t.seed,
        device=t.device, progress=progress, log=log,
    )
    metrics = trainer.fit(resume=resume)
    final = trainer.evaluate()
    metrics["test"] = final
    metrics["parameters"] = count_parameters(model)
    metrics["train_resolution"] = list(train.resolution)
    errors = {r: v["rel_l2"] for k, v in final.items() if (r := _resolution_of(k)) is not None}
    metrics["rel_l2_by_resolution"] = {str(r): e for r, e in sorted(errors.items())}
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
