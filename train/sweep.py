"""Resolution-invariance report of a trained run: errors and time per sample at several
resolutions (zero-shot above and below the training resolution), plus the autoregressive rollout
error against time step and a stability verdict for time-series data.

For each resolution ``r`` the same samples (:func:`.data.load_at_resolutions`) are evaluated with
the mean per-sample relative errors

    L2: ‖û − u‖₂ / ‖u‖₂,      H1: ‖û − u‖_{H¹} / ‖u‖_{H¹}  (finite differences on the r-grid),

and the wall time per sample of the forward pass (after one warm-up call). Time-series data
(inputs and outputs are consecutive steps; Navier–Stokes) report the error of one application of
the operator in the table and the rollout over the whole horizon (:mod:`.rollout`).

Writes ``RUN_DIR/eval/<label>.json``, ``<label>.md``, ``<label>_resolution.png`` and, for time
series, ``<label>_rollout.png``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from .checkpoint import atomic_write_bytes, load_model
from .data import GENERATED, TIME_SERIES, load_at_resolutions
from .plots import plot_resolution_sweep, plot_rollout
from .rollout import STABILITY_RULE, rollout_errors, stability_verdict
from .trainer import evaluate_dataset

__all__ = ["resolution_sweep", "sweep_markdown", "train_resolution_of"]


def train_resolution_of(state: dict[str, Any], run_dir: Path) -> list[int] | None:
    """Grid shape of the training data, from the checkpoint's metrics, ``metrics.json`` or config."""
    sources = [json.loads(state.get("metrics") or "{}")]
    metrics_file = (run_dir if run_dir.is_dir() else run_dir.parent) / "metrics.json"
    if metrics_file.is_file():
        sources.append(json.loads(metrics_file.read_text()))
    for src in sources:
        if src.get("train_resolution"):
            return [int(v) for v in src["train_resolution"]]
    data = json.loads(state.get("run_config") or "{}").get("data", {})
    return [int(data["train_resolution"])] * 2 if data.get("format") == "darcy_solver" else None


def _regime(r: int, train_res: int | None) -> str:
    if train_res is None:
        return "unknown"
    return "training" if r == train_res else ("zero-shot finer" if r > train_res else "zero-shot coarser")


def _one_step(ds, c_out: int):
    from sciattn.pde_data.grid_dataset import GridPairDataset

    if ds.y.shape[1] < c_out:
        raise ValueError(f"data: the model predicts {c_out} time steps, the data holds only {ds.y.shape[1]} after "
                         f"the inputs")
    return GridPairDataset(ds.x, ds.y[:, :c_out], ds.meta)


def resolution_sweep(
    run_dir: str | os.PathLike,
    data: str | os.PathLike,
    resolutions: list[int],
    *,
    split: str = "test",
    root: str | os.PathLike | None = None,
    n_samples: int = 16,
    seed: int | None = None,
    params: dict[str, Any] | None = None,
    batch_size: int = 8,
    device: str | torch.device = "cpu",
    threshold: float = 1.0,
    max_growth: float = 1.1,
    progress: bool = False,
    out_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Evaluate the run at every resolution and write the report (see the module docstring).

    ``data``: a generated benchmark name (:data:`.data.GENERATED`: fresh samples drawn with ``seed``,
    default the run's data seed + 1, so not the training samples), another registered benchmark or
    a file path. ``params``: solver parameters or loader keywords. Returns the JSON report.
    """
    run_dir = Path(run_dir)
    model, xn, yn, state = load_model(run_dir, device=device)
    train_shape = train_resolution_of(state, run_dir)
    train_res = train_shape[0] if train_shape else None
    run_data = json.loads(state.get("run_config") or "{}").get("data", {})
    key = str(data)
    generated = key in GENERATED
    seed = int(run_data.get("seed", 0)) + 1 if seed is None else seed
    params = dict(params or {})
    t_in = params.pop("t_in", model.in_channels) if key in TIME_SERIES else None
    sets = load_at_resolutions(data, resolutions, split=split, root=root, n_samples=n_samples, seed=seed, t_in=t_in,
                               progress=progress, **params)
    label = key if generated or not Path(key).exists() else Path(key).stem
    rows, rollouts = [], {}
    for r, ds in sets.items():
        if ds.x.shape[1] != model.in_channels:
            raise ValueError(f"data: expected {model.in_channels} input channels for this model, got {ds.x.shape[1]} "
                             f"in {key!r} at resolution {r}")
        spatial = len(ds.resolution)
        if train_shape and spatial != len(train_shape):
            raise ValueError(f"data: the run was trained on {len(train_shape)}-D fields "
                             f"({'x'.join(map(str, train_shape))}), got {spatial}-D fields "
                             f"({'x'.join(map(str, ds.resolution))}) from {key!r}")
        time_series = bool(ds.meta.get("time_series")) or ds.y.shape[1] != model.out_channels
        step_ds = _one_step(ds, model.out_channels) if time_series else ds
        with torch.no_grad():  # warm-up: first-call allocations and kernel selection are not timed
            model(xn.encode(ds.x[:1].to(device)))
        m = evaluate_dataset(model, step_ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=spatial,
                             batch_size=batch_size, device=device)
        rows.append({"resolution": r, "regime": _regime(r, train_res), "rel_l2": m["rel_l2"], "rel_h1": m["rel_h1"],
                     "ms_per_sample": 1e3 * m["seconds_per_sample"], "n_samples": m["n_samples"]})
        if time_series:
            t0 = time.perf_counter()
            roll = rollout_errors(model, ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=spatial,
                                  batch_size=batch_size, device=device)
            roll["ms_per_sample"] = 1e3 * (time.perf_counter() - t0) / roll["n_samples"]
            roll.update(stability_verdict(roll["frame_errors"], threshold=threshold, max_growth=max_growth))
            rollouts[r] = roll
    ref = next((row["rel_l2"] for row in rows if row["resolution"] == train_res), None)
    for row in rows:
        row["ratio_to_training"] = row["rel_l2"] / ref if ref else None
    report = {
        "run_dir": str(run_dir), "operator": state["operator"], "data": key, "split": "generated" if generated else split,
        "seed": seed if generated else None, "params": params, "train_resolution": train_res,
        "one_step": bool(rollouts), "rows": rows,
        "rollout": {str(r): v for r, v in rollouts.items()} if rollouts else None,
        "stability_rule": STABILITY_RULE if rollouts else None,
    }
    out = Path(out_dir) if out_dir is not None else (run_dir if run_dir.is_dir() else run_dir.parent) / "eval"
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / f"{label}.json", "markdown": out / f"{label}.md", "plot": out / f"{label}_resolution.png"}
    plot_resolution_sweep(rows, files["plot"], train_res, title=f"{state['operator']} on {label}")
    if rollouts:
        files["rollout_plot"] = out / f"{label}_rollout.png"
        plot_rollout({r: v["frame_errors"] for r, v in rollouts.items()}, files["rollout_plot"], threshold,
                     title=f"{state['operator']} rollout on {label}")
    report["files"] = {k: str(v) for k, v in files.items()}
    atomic_write_bytes(sweep_markdown(report).encode(), files["markdown"])
    atomic_write_bytes((json.dumps(report, indent=2) + "\n").encode(), files["json"])
    return report


def _fmt(v: float | None, spec: str = ".4f") -> str:
    return "—" if v is None else format(v, spec)


def sweep_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown tables."""
    what = "one application of the operator" if report["one_step"] else "the prediction"
    lines = [
        f"# Resolution sweep: {report['operator']} on {report['data']}",
        "",
        f"Run `{report['run_dir']}`, trained at {report['train_resolution']} points per axis; errors of {what}, "
        f"mean over samples.",
        "",
        "| resolution | regime | relative L2 | relative H1 | L2 / L2 at training res. | ms/sample | samples |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(f"| {r['resolution']} | {r['regime']} | {r['rel_l2']:.4f} | {r['rel_h1']:.4f} | "
                     f"{_fmt(r['ratio_to_training'], '.2f')} | {r['ms_per_sample']:.2f} | {r['n_samples']} |")
    if report["rollout"]:
        lines += [
            "",
            "## Autoregressive rollout",
            "",
            "| resolution | frames | first-frame L2 | final L2 | max L2 | growth / frame | verdict | ms/sample |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r, v in report["rollout"].items():
            e = v["frame_errors"]
            lines.append(f"| {r} | {len(e)} | {e[0]:.4f} | {e[-1]:.4f} | {v['max_error']:.4f} | "
                         f"{_fmt(v['growth_per_frame'], '.3f')} | {v['verdict']} ({v['reason']}) | "
                         f"{v['ms_per_sample']:.2f} |")
        lines += ["", f"Rule (threshold {next(iter(report['rollout'].values()))['threshold']}, max growth "
                      f"{next(iter(report['rollout'].values()))['max_growth']}): {report['stability_rule']}."]
    return "\n".join(lines) + "\n"
