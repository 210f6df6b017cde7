"""Resolution-invariance report of a trained run: errors and time per sample at several
resolutions (zero-shot above and below the training resolution), plus the autoregressive rollout
error against time step and a stability verdict for time-series data.

For each resolution ``r`` the same samples (:func:`.data.load_at_resolutions`) are evaluated with
the mean per-sample relative errors

    L2: ‖û − u‖₂ / ‖u‖₂,      H1: ‖û − u‖_{H¹} / ‖u‖_{H¹}  (finite differences on the r-grid),

and the wall time per sample of the forward pass (after one warm-up call). Time-series data
(inputs and outputs are consecutive steps; Navier–Stokes) report the error of one application of
the operator in the table and the rollout over the whole horizon (:mod:`.rollout`).

Sphere runs (operators of kind ``"sphere"``): the resolution ``r`` is ``nlat`` and the grid is
``r x 2r`` (the shallow-water generator's grid). The model keeps its trained weights, internal grid and
radii and runs on each grid (:mod:`sciattn.operators.spherical_transformer`); a resolution whose ``2r``
is neither a multiple nor a divisor of the internal ``nlon`` is refused before any data is built. The
errors are plain grid norms (not area-weighted), as for every grid run.

Writes ``RUN_DIR/eval/<label>.json``, ``<label>.md``, ``<label>_resolution.png`` and, for time
series, ``<label>_rollout.png``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from sciattn.operators.point_parts import chunked_points

from ..datasets.data import GENERATED, POINT_GENERATED, TIME_SERIES, data_layout, load_at_resolutions
from ..datasets.data_stats import SHIFT_RULE, compare_statistics, dataset_statistics
from ..training.batching import collate, predict, to_device
from ..training.checkpoint import atomic_write_bytes, load_model
from ..training.trainer import evaluate_dataset
from .plots import plot_resolution_sweep, plot_rollout
from .rollout import STABILITY_RULE, rollout_errors, stability_verdict
from .sweep_data import (
    MATCHED_GENERATORS,
    _data_meta,
    _metrics_file,
    generate_sets,
    reference_statistics,
    run_source,
    source_label,
    sweep_sets,
)

__all__ = ["INVARIANCE_TOLERANCE", "resolution_sweep", "sweep_markdown", "sweep_verdict", "train_resolution_of"]

#: a sweep is "invariant" when every resolution's relative L2 is within this factor of the training one's
INVARIANCE_TOLERANCE = 1.5


def train_resolution_of(state: dict[str, Any], run_dir: Path) -> list[int] | None:
    """Grid shape of the training data, from the checkpoint's metrics, ``metrics.json`` or config."""
    sources = [json.loads(state.get("metrics") or "{}"), _metrics_file(run_dir), _data_meta(state, run_dir)]
    for src in sources:
        if src.get("train_resolution"):
            return [int(v) for v in src["train_resolution"]]
    data = json.loads(state.get("run_config") or "{}").get("data", {})
    return [int(data["train_resolution"])] * 2 if data.get("format") == "darcy_solver" else None


def _regime(r: int, train_res: int | None) -> str:
    if train_res is None:
        return "unknown"
    return "training" if r == train_res else ("zero-shot finer" if r > train_res else "zero-shot coarser")


def _is_sphere(operator: str) -> bool:
    from sciattn.operators.registry import operator_kind

    try:
        return operator_kind(operator) == "sphere"
    except ValueError:  # an operator this version does not register
        return False


def _check_runs_at(model, operator: str, resolutions: list[int], train_shape: list[int] | None) -> None:
    """A one-line error, before any data is built, when a sphere operator cannot run at a swept resolution.

    For a sphere run the resolution ``r`` is ``nlat`` and the grid is ``r x 2r`` (the shallow-water
    generator's ``nlon = 2 nlat``); the model runs there with its training weights, its internal grid and
    radii fixed at construction (:mod:`sciattn.operators.spherical_transformer`), when ``2r`` is a multiple
    or a divisor of the internal ``nlon`` and ``r`` suits the latitude rule."""
    if not _is_sphere(operator) or not hasattr(model, "on_grid"):
        return
    for r in sorted({int(r) for r in resolutions}):
        if train_shape and [r, 2 * r] == list(train_shape):
            continue
        try:
            model.on_grid(r, 2 * r)
        except ValueError as err:
            trained = "x".join(map(str, train_shape)) if train_shape else "?"
            inner = "x".join(map(str, model.inner_shape))
            raise ValueError(f"resolutions: operator {operator!r} (trained at {trained}, internal grid {inner}) "
                             f"cannot run at nlat = {r} (grid {r}x{2 * r}): expected nlat with 2·nlat a multiple or a "
                             f"divisor of {model.inner_shape[1]}, got {r} ({err})") from None


def _model_channels(model) -> tuple[int, int]:
    """``(input, output)`` channels of the model; CoDANO: one per variable."""
    n_var = len(getattr(model, "variables", ()) or ())
    return int(getattr(model, "in_channels", n_var)), int(getattr(model, "out_channels", n_var))


def _channels(ds, key: str, points: bool) -> int:
    return int(ds[0][key].shape[-1]) if points else int(getattr(ds, key).shape[1])


def _one_step(ds, c_out: int):
    from sciattn.pde_data.grid_dataset import GridPairDataset

    if ds.y.shape[1] < c_out:
        raise ValueError(f"data: the model predicts {c_out} time steps, the data holds only {ds.y.shape[1]} after "
                         f"the inputs")
    return GridPairDataset(ds.x, ds.y[:, :c_out], ds.meta)


#: A training-resolution relative L2 at or above this is a poor fit: an "invariant" verdict then says so.
POOR_FIT = 0.5


def sweep_verdict(rows: list[dict[str, Any]], train_res: int | None, shift: dict[str, list[str]],
                  tolerance: float = INVARIANCE_TOLERANCE) -> str:
    """One line: ``out of distribution``, ``not meaningful``, ``invariant`` or ``not invariant`` (with why).

    Invariance is claimed only for in-distribution data whose training-resolution error is finite and
    below 1 (a model that fits the data) and where every resolution's L2 is finite and within
    ``tolerance`` times it.
    """
    if shift:
        return (f"out of distribution: the evaluation data at {', '.join(shift)} lies outside the training "
                f"statistics, so these errors say nothing about resolution invariance")
    ref = next((row["rel_l2"] for row in rows if row["resolution"] == train_res), None)
    if ref is None:
        return "no verdict: the training resolution is not among the swept resolutions"
    if not math.isfinite(ref) or ref >= 1.0:
        return (f"not meaningful: the relative L2 at the training resolution is {ref:.3g} (>= 1: the model does "
                f"not fit this data)")
    bad = [row["resolution"] for row in rows if not math.isfinite(row["rel_l2"])]
    if bad:
        return f"not invariant: non-finite error at {bad}"
    worst = max(rows, key=lambda row: row["rel_l2"] / ref)
    ratio = worst["rel_l2"] / ref
    if ratio <= tolerance:
        weak = (f"; but the model fits poorly (relative L2 {ref:.3g} >= {POOR_FIT:g} at the training resolution), "
                f"so this says little") if ref >= POOR_FIT else ""
        return (f"invariant: every relative L2 within {tolerance:g}x the training-resolution error "
                f"(max {ratio:.2f}x){weak}")
    return (f"not invariant: relative L2 {ratio:.2f}x the training-resolution error at {worst['resolution']} "
            f"(tolerance {tolerance:g}x)")


def resolution_sweep(
    run_dir: str | os.PathLike,
    data: str | os.PathLike | None,
    resolutions: list[int],
    *,
    split: str | None = None,
    root: str | os.PathLike | None = None,
    n_samples: int = 16,
    seed: int | None = None,
    params: dict[str, Any] | None = None,
    batch_size: int = 8,
    device: str | torch.device = "cpu",
    threshold: float = 1.0,
    max_growth: float = 1.1,
    allow_distribution_shift: bool = False,
    tolerance: float = INVARIANCE_TOLERANCE,
    progress: bool = False,
    out_dir: str | os.PathLike | None = None,
    chunk_points: int | None = None,
) -> dict[str, Any]:
    """Evaluate the run at every resolution and write the report (see the module docstring).

    ``chunk_points``: evaluate the operator in chunks of that many query points, where its activations at the
    largest resolutions do not fit (the same result; :func:`sciattn.operators.point_parts.chunked_points`).

    ``data=None``: the run's own distribution (:mod:`.sweep_data`: the recorded generator and parameters,
    the generator matched to a neuraloperator Darcy file, or restriction of the run's file). Otherwise a
    generated benchmark name (:data:`.data.GENERATED` or ``darcy_neuralop``: fresh samples drawn with
    ``seed``, default the run's data seed + 1), another registered benchmark (``split``, default ``"test"``) or a
    file path (default: every sample of it); ``params``: solver parameters or loader keywords.

    Each resolution's data is checked against the statistics of the training data
    (:func:`.data_stats.compare_statistics`); data outside them raises ``ValueError`` unless
    ``allow_distribution_shift``, and then the report and its verdict say "out of distribution".
    Returns the JSON report.
    """
    run_dir = Path(run_dir)
    model, xn, yn, state = load_model(run_dir, device=device)
    train_shape = train_resolution_of(state, run_dir)
    train_res = train_shape[0] if train_shape else None
    _check_runs_at(model, state["operator"], resolutions, train_shape)
    model_in, model_out = _model_channels(model)
    trained_points = (_data_meta(state, run_dir).get("domain") or {}).get("kind") == "point_cloud"
    run_data = json.loads(state.get("run_config") or "{}").get("data", {})
    params = dict(params or {})
    source = None
    try:
        source = run_source(state, run_dir)
    except ValueError:
        if data is None:
            raise
    if data is None:
        t_in = params.pop("t_in", model_in) if source.get("name") in TIME_SERIES else None
        if params and source["kind"] in ("generated", "benchmark"):  # overrides of the recorded parameters
            field = "params" if source["kind"] == "generated" else "options"
            source = {**source, field: {**(source.get(field) or {}), **params}}
        sets, built = sweep_sets(source, resolutions, run_dir, n_samples=n_samples, seed=seed, root=root, t_in=t_in,
                                 progress=progress)
        key = source_label(source, (built["generator"], {}) if built["kind"] == "generated" else None)
        generated = built["kind"] == "generated"
        seed = built.get("seed")
    else:
        key = str(data)
        generated = key in GENERATED or key in MATCHED_GENERATORS or key in POINT_GENERATED
        seed = int(run_data.get("seed", 0)) + 1 if seed is None else seed
        t_in = params.pop("t_in", model_in) if key in TIME_SERIES else None
        if key in MATCHED_GENERATORS:
            from sciattn.pde_data.darcy_neuralop import NEURALOP_DARCY_FIT

            params = {**NEURALOP_DARCY_FIT, **params}
            sets = generate_sets(key, params, sorted(set(resolutions)), n_samples=n_samples, seed=seed)
        else:
            if split is None:  # a plain file is one set (its name says which split); a named benchmark: its test split
                split = None if Path(key).is_file() else "test"
            sets = load_at_resolutions(data, resolutions, split=split, root=root, n_samples=n_samples, seed=seed,
                                       t_in=t_in, progress=progress, solve_resolution=train_res, **params)
        built = {"kind": "generated" if generated else "given", "data": key, "params": params,
                 "seed": seed if generated else None}
    label = key if generated or not Path(key).exists() else Path(key).stem
    points = {r: data_layout(ds) == "points" for r, ds in sets.items()}
    for r, ds in sets.items():  # structural mismatches first: they are errors whatever the statistics say
        c_in = _channels(ds, "x", points[r])
        if c_in != model_in:
            raise ValueError(f"data: expected {model_in} input channels for this model, got {c_in} "
                             f"in {key!r} at resolution {r}")
        if points[r] != trained_points:
            want, got = ("point sets", "grid fields") if trained_points else ("grid fields", "point sets")
            raise ValueError(f"data: the run was trained on {want}, got {got} from {key!r} at resolution {r}")
        if points[r]:
            continue
        if train_shape and len(ds.resolution) != len(train_shape):
            raise ValueError(f"data: the run was trained on {len(train_shape)}-D fields "
                             f"({'x'.join(map(str, train_shape))}), got {len(ds.resolution)}-D fields "
                             f"({'x'.join(map(str, ds.resolution))}) from {key!r}")
    reference, reference_from = reference_statistics(state, run_dir, source)
    shift: dict[str, list[str]] = {}
    observed: dict[str, Any] = {}
    for r, ds in sets.items():
        if reference is None:
            break
        # a time-series run records the targets it trained on (one step, or the whole rollout window)
        if points[r]:  # point samples: statistics of the valid points, all target channels as trained
            observed[str(r)] = dataset_statistics(ds)
        else:
            reference_frames = len(reference.get("y", {}).get("mean", [])) or model_out
            frames = reference_frames if ds.y.shape[1] >= reference_frames else model_out
            observed[str(r)] = dataset_statistics(_one_step(ds, frames) if ds.y.shape[1] != frames else ds)
        reasons = compare_statistics(reference, observed[str(r)])
        if reasons:
            shift[str(r)] = reasons
    if shift and not allow_distribution_shift:
        first = next(iter(shift))
        raise ValueError(f"data: the evaluation data {label!r} lies outside the training data's statistics "
                         f"({reference_from}) at resolution(s) {', '.join(shift)}: {'; '.join(shift[first][:3])}; "
                         f"pass --allow-distribution-shift (Python: allow_distribution_shift=True) to sweep anyway (the "
                         f"report then says out of distribution)")
    if shift:
        msg = (f"OUT OF DISTRIBUTION: the evaluation data {label!r} lies outside the training statistics at "
               f"{', '.join(shift)}: {'; '.join(next(iter(shift.values()))[:3])}")
        warnings.warn(msg, stacklevel=2)
        print(f"WARNING: {msg}", file=sys.stderr)
    rows, rollouts = [], {}
    with chunked_points(model, chunk_points):
        for r, ds in sets.items():
            if points[r]:  # the error compares the first out_channels targets (evaluation.py); no rollout on points
                spatial, time_series, step_ds = int(ds[0]["pos"].shape[-1]), False, ds
            else:
                spatial = len(ds.resolution)
                time_series = bool(ds.meta.get("time_series")) or ds.y.shape[1] != model_out
                step_ds = _one_step(ds, model_out) if time_series else ds
            with torch.no_grad():  # warm-up: first-call allocations and kernel selection are not timed
                model.eval()
                predict(model, to_device(collate([step_ds[0]]), device), xn, yn)
            m = evaluate_dataset(model, step_ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=spatial,
                                 batch_size=batch_size, device=device)
            rows.append({"resolution": r, "regime": _regime(r, train_res), "rel_l2": m["rel_l2"], "rel_h1": m["rel_h1"],
                         "ms_per_sample": 1e3 * m["seconds_per_sample"], "n_samples": m["n_samples"],
                         "in_distribution": None if reference is None else str(r) not in shift})
            if time_series:
                t0 = time.perf_counter()
                roll = rollout_errors(model, ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=spatial,
                                      batch_size=batch_size, device=device)
                roll["ms_per_sample"] = 1e3 * (time.perf_counter() - t0) / roll["n_samples"]
                roll.update(stability_verdict(roll["frame_errors"], threshold=threshold, max_growth=max_growth))
                rollouts[r] = roll
    ref = next((row["rel_l2"] for row in rows if row["resolution"] == train_res), None)
    meaningful = ref is not None and math.isfinite(ref) and 0 < ref < 1.0
    for row in rows:
        row["ratio_to_training"] = row["rel_l2"] / ref if meaningful and math.isfinite(row["rel_l2"]) else None
    report = {
        "run_dir": str(run_dir), "operator": state["operator"], "data": key, "split": "generated" if generated else split,
        "seed": seed if generated else None, "params": params, "train_resolution": train_res,
        "layout": "points" if trained_points else "grid",
        "sphere": _is_sphere(state["operator"]),  # then each resolution r is the grid r x 2r
        "data_built": built, "one_step": bool(rollouts), "rows": rows,
        "distribution": {"reference": reference_from, "shift": shift, "rule": SHIFT_RULE,
                         "observed": observed, "allowed": bool(allow_distribution_shift)},
        "verdict": sweep_verdict(rows, train_res, shift, tolerance),
        "rollout": {str(r): v for r, v in rollouts.items()} if rollouts else None,
        "stability_rule": STABILITY_RULE if rollouts else None,
    }
    if reference is None:
        report["verdict"] += " (no training statistics recorded: the distribution was not checked)"
    out = Path(out_dir) if out_dir is not None else (run_dir if run_dir.is_dir() else run_dir.parent) / "eval"
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / f"{label}.json", "markdown": out / f"{label}.md", "plot": out / f"{label}_resolution.png"}
    plot_rows = [{**row, "rel_h1": math.nan if row["rel_h1"] is None else row["rel_h1"]} for row in rows]
    plot_resolution_sweep(plot_rows, files["plot"], train_res, title=f"{state['operator']} on {label}",
                          verdict=report["verdict"])
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


def _describe_built(built: dict[str, Any]) -> str:
    if built.get("kind") == "generated":
        what = f"generator `{built.get('generator', built.get('data'))}`"
        if built.get("matched_to"):
            what += f" matched to `{built['matched_to']}`"
        if built.get("layout") == "points":
            return (f"{what}, seed {built.get('seed')}: the same PDE samples at every point count (solved once on the "
                    f"benchmark's fine grid, {built.get('fine_resolution') or 'default'} per axis), each sample "
                    f"evaluated at its own random points, drawn anew for each point count")
        if built.get("solve_resolution"):
            return (f"{what}, seed {built.get('seed')}, solved once at nlat = {built['solve_resolution']} (band-limited "
                    f"to degrees l < {built.get('lmax')}) and spectrally transferred to each grid (same samples at "
                    f"each resolution)")
        return f"{what}, seed {built.get('seed')}, solved on a fine grid and restricted (same samples at each resolution)"
    if built.get("kind") == "benchmark":
        return f"benchmark `{built.get('data')}`, its test split at each resolution"
    if built.get("kind") == "restricted file":
        return f"`{built['path']}` restricted to each resolution"
    return f"`{built.get('data')}` as given"


def sweep_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown tables."""
    what = "one application of the operator" if report["one_step"] else "the prediction"
    lines = [
        f"# Resolution sweep: {report['operator']} on {report['data']}",
        "",
        (f"Run `{report['run_dir']}`, trained at nlat = {report['train_resolution']} (a sphere run's resolution is "
         f"nlat, on the grid nlat x 2 nlat); errors of {what}, mean over samples." if report.get("sphere") else
         f"Run `{report['run_dir']}`, trained at {report['train_resolution']} points per "
         f"{'sample' if report.get('layout') == 'points' else 'axis'}; errors of {what}, "
         f"mean over samples."),
        "",
        f"**Verdict: {report.get('verdict', '—')}**",
        "",
        f"Data: {_describe_built(report.get('data_built') or {})}.",
        "",
        "| resolution | regime | in distribution | relative L2 | relative H1 | L2 / L2 at training res. | ms/sample "
        "| samples |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        ind = {True: "yes", False: "**NO**", None: "unchecked"}[r.get("in_distribution")]
        lines.append(f"| {r['resolution']} | {r['regime']} | {ind} | {r['rel_l2']:.4f} | {_fmt(r['rel_h1'])} | "
                     f"{_fmt(r['ratio_to_training'], '.2f')} | {r['ms_per_sample']:.2f} | {r['n_samples']} |")
    dist = report.get("distribution") or {}
    if dist.get("shift"):
        lines += ["", f"## Out of distribution (reference statistics: {dist['reference']})", ""]
        for r, reasons in dist["shift"].items():
            lines += [f"- resolution {r}: " + "; ".join(reasons)]
        lines += ["", f"Rule: {dist['rule']}."]
    elif dist:
        lines += ["", f"Every resolution lies within the training statistics ({dist['reference']}); rule: "
                      f"{dist['rule']}."]
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
