"""End-to-end runs: train from a :class:`RunConfig`, evaluate a run directory on a data file.

``train_run`` works in one process or under ``torchrun`` (see :mod:`.distributed`): every rank
builds the data (rank 0 first, so a generated data set is solved and cached once), the model
(same seed, so same initial weights) and a :class:`Trainer`; only rank 0 writes metrics, plots,
logs and checkpoints.

Before anything is built, rank 0 prepares the run directory (:func:`prepare_run_dir`: the
existing-run, resume and writability checks, stale temporary files) and every rank raises its
error, so no rank races another on the file system and none trains into a directory that fails.
"""

from __future__ import annotations

import errno
import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from sciattn.operators import create_operator
from sciattn.operators.registry import operator_parameters
from sciattn.pde_data.normalizers import fit_normalizers

from ..analysis.plots import plot_loss_curve, plot_resolution_curve, plot_sample
from ..analysis.rollout import rollout_errors, stability_verdict
from ..config import ConfigError, RunConfig
from ..datasets.data import build_datasets, data_layout, describe_source, load_data_file
from .checkpoint import atomic_write_bytes, load_checkpoint, load_model, remove_stale_temp_files
from .distributed import barrier, gather_objects, init_distributed, shutdown_distributed
from .loggers import make_loggers
from .trainer import Trainer, evaluate_dataset

__all__ = ["train_run", "evaluate_run", "count_parameters", "check_resume_config", "check_resume_data",
           "data_fingerprint", "fit_data_normalizers",
           "prepare_run_dir", "RESUME_FREE_KEYS", "RUN_MARKERS"]

# keys that may differ between a run and its continuation without changing the computation
# (train.epochs: with the cosine schedule only, and never below what the run has trained; see
# check_resume_config)
RESUME_FREE_KEYS = frozenset({
    "train.device", "train.threads", "train.tensorboard", "train.wandb", "train.wandb_project",
    "train.checkpoint_every_steps", "data.train", "data.test", "data.cache_dir", "data.root", "train.epochs",
})

# files whose presence makes a directory a run (never overwritten without --resume or --force)
RUN_MARKERS = ("checkpoint.pt", "metrics.json")
# what a run writes into its directory; --force removes these before starting over
_RUN_FILES = ("checkpoint.pt", "metrics.json", "metrics.csv", "wandb_id.txt", "error_vs_resolution.png",
              "loss_curve.png")
_RUN_GLOBS = ("sample_*.png",)
_RUN_DIRS = ("tensorboard", "eval")
_PROBE = ".sciattn-write-probe"


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
    checkpoint (other than :data:`RESUME_FREE_KEYS`); nothing to check without a checkpoint.

    ``train.epochs`` may change on resume (a finished run continues for the added epochs) when the
    schedule allows it:

    * ``scheduler = "cosine"``: the run continues on the cosine of the *new* total, i.e. from the
      resumed step on the learning rate is the one a run configured with the new ``epochs`` from the
      start would have (``lr/2 · (1 + cos(π · step / (epochs · steps_per_epoch)))``); a finished run's
      rate, 0 at its end, so restarts at that value (e.g. ``lr/2`` when the epochs are doubled).
      Fewer epochs than the checkpoint has trained (a started epoch counts) are refused.
    * ``scheduler = "onecycle"``: refused. One cycle is a warm-up and an annealing over a fixed
      number of steps; a longer cycle would change the rates of the steps already taken, and a second
      cycle is a new run's schedule. Train a new run (``--force`` or another ``--out``), or use the
      cosine schedule for runs meant to be extended.
    """
    path = Path(run_dir) / "checkpoint.pt"
    if not path.is_file():
        return
    state = load_checkpoint(path)
    stored = _flat(json.loads(state["run_config"]))
    new = _flat(cfg.to_dict())
    diff = sorted(k for k in stored if k not in RESUME_FREE_KEYS and stored[k] != new.get(k))
    if diff:
        detail = ", ".join(f"{k}: {stored[k]!r} -> {new.get(k)!r}" for k in diff)
        raise ConfigError(f"--resume: the config differs from the one stored in {str(path)!r} in {detail}; resume "
                          f"with the run's own config (omit CONFIG) or train into a new run directory")
    old_epochs, epochs = stored.get("train.epochs"), new.get("train.epochs")
    if old_epochs is None or old_epochs == epochs:
        return
    if new.get("train.scheduler") == "onecycle":
        raise ConfigError(f"train.epochs: a OneCycle run cannot be extended or shortened ({old_epochs} -> {epochs} "
                          f"for {str(path)!r}): its one warm-up and annealing span the configured steps; start a new "
                          f"run (--force or another --out), or use train.scheduler = \"cosine\" for runs to extend")
    done = int(state.get("epoch", 0))
    started = done + (1 if (state.get("training") or {}).get("batches_done", 0) else 0)
    if epochs < started:
        raise ConfigError(f"train.epochs: {str(path)!r} has trained {done} epoch(s)"
                          + (" and part of the next" if started > done else "")
                          + f"; expected at least {started}, got {epochs}")


def _run_dir_error(out: Path, *, resume: bool, force: bool | None) -> str | None:
    """The one-line refusal for ``out`` (``None``: go ahead)."""
    if resume:
        if not (out / "checkpoint.pt").is_file():
            return (f"--resume: no checkpoint to resume in {str(out)!r} (expected {str(out / 'checkpoint.pt')!r}); "
                    f"train without --resume to start the run")
        return None
    found = [name for name in RUN_MARKERS if (out / name).exists()]
    if force is False and found:
        return (f"--out: {str(out)!r} already holds a run ({', '.join(found)}); pass --resume to continue it or "
                f"--force to replace it (Python: train_run(..., resume=True) or force=True)")
    return None


def _remove_run_files(out: Path) -> None:
    for name in _RUN_FILES:
        (out / name).unlink(missing_ok=True)
    for pattern in _RUN_GLOBS:
        for p in out.glob(pattern):
            p.unlink(missing_ok=True)
    for name in _RUN_DIRS:
        if (out / name).is_dir():
            shutil.rmtree(out / name)


def prepare_run_dir(out: str | Path, *, resume: bool = False, force: bool | None = None) -> list[Path]:
    """Check and prepare the run directory ``out`` before training; returns the stale temporary files removed.

    * ``resume``: ``out/checkpoint.pt`` must exist (``ConfigError`` otherwise).
    * ``force=False`` (the CLI without ``--force``): a directory holding a run (:data:`RUN_MARKERS`)
      is refused (``ConfigError``); ``force=True`` removes the run's files (checkpoint, metrics, logs,
      plots, ``tensorboard/``, ``eval/``) and starts over; ``force=None`` (the API default) writes
      over whatever is there, as before.
    * The directory is created and a probe file is written, fsynced, renamed and removed through
      the atomic-write helper, so a read-only, full or forbidden directory raises ``OSError`` (with
      the directory and the cause) now instead of after the first epoch.
    * Temporary files of atomic writes left by a killed writer are removed: one run directory has
      one writer (rank 0), so a temporary file whose writer PID is not alive is stale
      (:func:`~sciattn._io.remove_stale_temp_files`).

    Under torchrun only rank 0 calls it (:func:`train_run` shares its error with every rank).
    """
    out = Path(out)
    message = _run_dir_error(out, resume=resume, force=force)
    if message is not None:
        raise ConfigError(message)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out: expected a run directory, got the file {str(out)!r}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(b"sciattn: can this run directory be written?\n", out / _PROBE)
        (out / _PROBE).unlink()
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise
        raise OSError(err.errno, f"{err.strerror}; --out must be a writable directory (checked before training)",
                      str(out)) from None
    removed = remove_stale_temp_files(out)
    if force and not resume:
        _remove_run_files(out)
    return removed


def _prepare_on_main(ctx, out: Path, *, resume: bool, force: bool | None, log) -> None:
    """:func:`prepare_run_dir` on rank 0; its error is raised on every rank (no rank trains alone)."""
    error: BaseException | None = None
    if ctx.is_main:
        try:
            removed = prepare_run_dir(out, resume=resume, force=force)
            if removed:
                log(f"removed {len(removed)} temporary file(s) of an interrupted write in {str(out)!r}")
        except (OSError, ValueError) as err:
            error = err
    shared = gather_objects(error, ctx)[0] if ctx.distributed else error
    if shared is not None:
        if error is not None:
            raise error
        raise shared


def train_run(cfg: RunConfig, out: str | Path, *, resume: bool = False, force: bool | None = None,
              progress: bool = True, log=print, allow_other_data: bool = False) -> dict[str, Any]:
    """Train the configured model; write ``checkpoint.pt``, ``metrics.json``, ``metrics.csv``, logs and
    PNGs into ``out`` (rank 0). Under torchrun the process group is created here and destroyed at the end.

    ``resume``: continue from ``out/checkpoint.pt`` (which must exist), on data whose fingerprint
    (:func:`data_fingerprint`) is the one the run recorded; ``allow_other_data=True`` (CLI
    ``--allow-other-data``) continues on other data. ``force``: what to do with a run already in ``out``
    when not resuming — ``False`` refuses, ``True`` replaces it, ``None`` (default) writes over it; see
    :func:`prepare_run_dir`, which runs first (rank 0).

    A run that fails before it writes its first checkpoint (bad data, a config the data refuses, an error
    in the first epoch) leaves nothing behind: a run directory this call created is removed again, and
    one that existed keeps only what it held before."""
    t = cfg.train
    ctx = init_distributed(t.device)
    log = log if ctx.is_main else (lambda message: None)
    out = Path(out)
    created = not out.exists()
    try:
        _prepare_on_main(ctx, out, resume=resume, force=force, log=log)
        try:
            return _train_run(cfg, out, ctx, resume=resume, progress=progress and ctx.is_main, log=log,
                              allow_other_data=allow_other_data)
        except BaseException:
            if ctx.is_main and created and not (out / "checkpoint.pt").exists():
                shutil.rmtree(out, ignore_errors=True)  # nothing of value yet: no folder left behind
            raise
    finally:
        shutdown_distributed(ctx)


def data_fingerprint(ds) -> dict[str, Any]:
    """What identifies a training set without storing it: the shapes of a sample's ``x`` and ``y`` (and
    ``pos``), the sample count and a SHA-256 of the float32 bytes of the first (at most) 4 samples. Two data
    sets with the same fingerprint are, for a resumed run, the same data."""
    import hashlib

    n = len(ds)
    h = hashlib.sha256()
    for i in range(min(4, n)):
        s = ds[i]
        for key in ("x", "y", "pos"):
            if key in s:
                h.update(key.encode())
                h.update(s[key].detach().to(torch.float32).contiguous().numpy().tobytes())
    first = ds[0] if n else {}
    return {"n_samples": n, "x_shape": list(first["x"].shape) if n else None,
            "y_shape": list(first["y"].shape) if n else None, "sha256_first_samples": h.hexdigest()}


def check_resume_data(fingerprint: dict[str, Any], run_dir: str | Path, *, allow_other_data: bool = False) -> None:
    """Refuse (``ConfigError``) to resume the run in ``run_dir`` on data whose fingerprint differs from the one its
    checkpoint recorded, naming what differs; nothing to check for a checkpoint without one (older runs) or with
    ``allow_other_data``."""
    path = Path(run_dir) / "checkpoint.pt"
    if allow_other_data or not path.is_file():
        return
    state = load_checkpoint(path)
    try:
        stored = json.loads(state.get("data_meta") or "{}").get("fingerprint")
    except (TypeError, ValueError, AttributeError):
        return
    if not isinstance(stored, dict):
        return
    diff = [f"{k}: {stored.get(k)!r} -> {fingerprint.get(k)!r}" for k in sorted(fingerprint)
            if stored.get(k) != fingerprint.get(k)]
    if diff:
        raise ConfigError(f"--resume: the training data differ from the data {str(path)!r} was trained on ({'; '.join(diff)}); "
                          "resume on the run's own data, train into a new run directory, or pass --allow-other-data "
                          "(Python: train_run(..., allow_other_data=True)) to continue on these data")


def _model_params(cfg: RunConfig, train, c_out: int) -> dict[str, Any]:
    """The ``[model]`` arguments, with what the data decides filled in where the operator takes it and
    the config does not say: channels, ``spatial_dims`` (point sets), ``nlat``/``nlon`` (sphere grids),
    ``variables`` (codomain models)."""
    params = dict(cfg.model_params)
    accepted = operator_parameters(cfg.model_name)
    first = train[0]
    points = data_layout(train) == "points"
    c_in = first["x"].shape[-1] if points else first["x"].shape[0]
    fill: dict[str, Any] = {"in_channels": c_in, "out_channels": c_out}
    if points:
        fill["spatial_dims"] = first["pos"].shape[-1]
    else:
        shape = tuple(first["x"].shape[1:])
        fill["spatial_dims"] = len(shape)
        if len(shape) == 2:
            fill["nlat"], fill["nlon"] = shape
        names = train.meta.get("variables", {}).get("x")
        if isinstance(names, list) and len(names) == c_in and c_in == c_out:
            fill["variables"] = list(names)
    for key, value in fill.items():
        if key in accepted and key not in params:
            params[key] = value
    return params


def _time_series_plan(cfg: RunConfig, train) -> tuple[int, bool]:
    """``(c_out, time_series)``: channels the model predicts per application; checks ``[train]
    rollout_steps`` / ``frames_per_step`` against the data."""
    t = cfg.train
    meta = train.meta
    points = data_layout(train) == "points"
    c_y = train[0]["y"].shape[-1] if points else train[0]["y"].shape[0]
    if not meta.get("time_series"):
        for key, value in (("rollout_steps", t.rollout_steps), ("frames_per_step", t.frames_per_step)):
            if value != 1:
                raise ConfigError(f"train.{key}: needs time-series data (samples of input frames and later target "
                                  f"frames); {cfg.data.source!r} is not one, got {key} = {value}")
        return c_y, False
    v = int(meta.get("frame_channels") or 1)
    c_out = t.frames_per_step * v
    if t.rollout_steps * c_out > c_y:
        raise ConfigError(f"train.rollout_steps: {t.rollout_steps} step(s) of {t.frames_per_step} frame(s) need "
                          f"{t.rollout_steps * t.frames_per_step} target frames; the data holds {c_y // v}")
    return c_out, True


def _train_run(cfg: RunConfig, out: Path, ctx, *, resume: bool, progress: bool, log,
               allow_other_data: bool = False) -> dict[str, Any]:
    started = time.perf_counter()
    t = cfg.train
    if resume:
        check_resume_config(cfg, out)
        _keep_stored_settings(cfg, out)
    if t.threads:
        torch.set_num_threads(t.threads)
    torch.manual_seed(t.seed)
    if not ctx.is_main:
        barrier(ctx)  # rank 0 builds (and caches) the data first
    train, tests = build_datasets(cfg.data, progress=progress)
    if ctx.is_main:
        barrier(ctx)
    data_seconds = time.perf_counter() - started
    fingerprint = data_fingerprint(train)
    if resume:
        check_resume_data(fingerprint, out, allow_other_data=allow_other_data)
    source = describe_source(cfg.data)
    points = data_layout(train) == "points"
    c_out, time_series = _time_series_plan(cfg, train)
    spatial_dims = train[0]["pos"].shape[-1] if points else len(train.resolution)
    if points and t.loss != "l2":
        raise ConfigError(f"train.loss: point-set data supports 'l2' (H1 needs a grid), got {t.loss!r}")
    model = create_operator(cfg.model_name, **_model_params(cfg, train, c_out))
    _check_domain_parallel(t.domain_parallel, ctx, model, points)
    xn, yn = fit_data_normalizers(train, c_out, normalize_x=cfg.data.normalize_x, normalize_y=cfg.data.normalize_y)
    where = ("points" if points else "x".join(map(str, train.resolution)))
    d = t.domain_parallel
    log(f"{cfg.model_name}: {count_parameters(model):,} parameters; {len(train)} training samples at {where}"
        + (f"; time series, {t.rollout_steps}-step rollout loss" if time_series else "")
        + (f"; {ctx.world_size} ranks" if ctx.distributed else "")
        + (f" ({ctx.world_size // d} data x {d} domain: each sample's points split over {d} ranks)" if d > 1 else ""))

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
        data_meta={"source": source, "fingerprint": fingerprint},
        rollout_steps=t.rollout_steps, domain_parallel=t.domain_parallel,
    )
    metrics = trainer.fit(resume=resume)
    final = trainer.evaluate()
    metrics["test"] = final
    metrics["parameters"] = count_parameters(model)
    metrics["train_resolution"] = None if points else list(train.resolution)
    metrics["precision"] = t.precision
    metrics["data_source"] = source
    metrics["meta"] = {k: train.meta[k] for k in ("variables", "dt", "time_series", "t_in", "frame_channels", "layout")
                       if k in train.meta}
    if trainer.data_meta.get("variables"):  # the model's own channels (a stepper's outputs: the frames' variables)
        metrics["meta"]["variables"] = trainer.data_meta["variables"]
    errors = {r: v["rel_l2"] for k, v in final.items() if (r := _resolution_of(k)) is not None}
    metrics["rel_l2_by_resolution"] = {str(r): e for r, e in sorted(errors.items())}
    if time_series and not points:
        metrics["rollout"] = _rollouts(trainer, tests, spatial_dims, int(train.meta.get("frame_channels") or 1))
        for name, r in metrics["rollout"].items():
            log(f"rollout {name}: {r['verdict']}, error over {len(r['frame_errors'])} frames "
                f"{r['frame_errors'][0]:.4g} -> {r['frame_errors'][-1]:.4g}")
    if not ctx.is_main:
        return metrics
    model.eval()
    if trainer.history:
        plot_loss_curve(trainer.history, out / "loss_curve.png", title=f"{cfg.model_name}: training")
    if not points:
        for name, ds in tests.items():
            s = ds[0]
            with torch.no_grad():
                pred = yn.decode(model(xn.encode(s["x"][None].to(trainer.device))))[0]
            if len(train.resolution) <= 2:
                plot_sample(s["x"], s["y"][:pred.shape[0]], pred, out / f"sample_{name}.png",
                            title=f"{cfg.model_name}, {name}")
        if len(errors) > 1:
            plot_resolution_curve(errors, out / "error_vs_resolution.png", train.resolution[0])
    metrics["data_seconds"] = data_seconds
    metrics["wall_seconds"] = time.perf_counter() - started
    atomic_write_bytes((json.dumps(metrics, indent=2) + "\n").encode(), out / "metrics.json")
    return metrics


def _keep_stored_settings(cfg: RunConfig, out: Path) -> None:
    """A run stored before its operator's current defaults resumes with the settings it was trained with: every key
    the operator's migration of its stored config fills in or changes (:meth:`~sciattn.operators.Operator.migrate_config`,
    e.g. ``variant="sciattn_v1"``, Erwin's ball mode, BSA's global branches) is kept unless the config sets it. A
    config that another operator builds now (:meth:`~sciattn.operators.Operator.renamed_to`) is left alone."""
    from .checkpoint import stored_operator

    state = load_checkpoint(out / "checkpoint.pt")
    original = json.loads(state["operator_config"])
    name, stored = stored_operator(state)
    if name != state["operator"]:
        return
    for key, value in stored.items():
        changed = key not in original or original[key] != value
        if changed and key not in cfg.model:
            cfg.model[key] = value


def _check_domain_parallel(d: int, ctx, model, points: bool) -> None:
    """``train.domain_parallel`` against the launch, the data and the operator (``ConfigError`` naming the key)."""
    if d == 1:
        return
    from sciattn.operators.point_parts import check_supports

    if ctx.world_size % d:
        raise ConfigError(f"train.domain_parallel: expected a divisor of the number of ranks ({ctx.world_size}; launch "
                          f"with torchrun --nproc-per-node N, N a multiple of {d}), got {d}")
    if not points:
        raise ConfigError(f"train.domain_parallel: splits the points of point-set samples; the data are grids (set "
                          f"data.as_points = true, or train.domain_parallel = 1), got {d}")
    try:
        check_supports(model, key="train.domain_parallel")
    except ValueError as err:
        raise ConfigError(f"{err}; set train.domain_parallel = 1") from None


def _rollouts(trainer: Trainer, tests: dict[str, Any], spatial_dims: int, frame_channels: int) -> dict[str, Any]:
    """Autoregressive rollout error over each test set's whole horizon, with the stability verdict."""
    out = {}
    for name, ds in tests.items():
        roll = rollout_errors(trainer.model, ds, x_normalizer=trainer.x_normalizer, y_normalizer=trainer.y_normalizer,
                              spatial_dims=spatial_dims, device=trainer.device, frame_channels=frame_channels)
        roll.update(stability_verdict(roll["frame_errors"]))
        out[name] = roll
    return out


def fit_data_normalizers(train, c_out: int, *, normalize_x: bool = True, normalize_y: bool = True):
    """``(x_norm, y_norm)`` per channel on the training data; ``y`` on the ``c_out`` channels the model
    predicts (the first target frames of a time series). Point sets: over their real points."""
    from sciattn.pde_data.grid_dataset import GridPairDataset
    from sciattn.pde_data.normalizers import IdentityNormalizer, UnitGaussianNormalizer

    if data_layout(train) == "points":
        xs = torch.cat([train[i]["x"] for i in range(len(train))]).T[None]  # (1, C, total points)
        ys = torch.cat([train[i]["y"][:, :c_out] for i in range(len(train))]).T[None]
        xn = UnitGaussianNormalizer().fit(xs) if normalize_x else IdentityNormalizer()
        yn = UnitGaussianNormalizer().fit(ys) if normalize_y else IdentityNormalizer()
        return xn, yn
    return fit_normalizers(GridPairDataset(train.x, train.y[:, :c_out], train.meta), normalize_x=normalize_x,
                           normalize_y=normalize_y)


def evaluate_run(run_dir: str | Path, data: str | Path, *, fmt: str | None = None,
                 plot: str | Path | None = None, chunk_points: int | None = None) -> dict[str, Any]:
    """Evaluate a trained run on a data file (any supported format) at that file's own resolution.

    ``chunk_points``: evaluate the operator in chunks of that many query points (the same result, for meshes
    whose activations do not fit at once; operators with ``supports_chunked_points``)."""
    model, xn, yn, state = load_model(run_dir)
    from ..analysis.sweep import _model_channels
    from ..datasets.data import _is_points

    ds = load_data_file(data, fmt)
    sample = ds[0]
    first, points = sample["x"], _is_points(sample)
    c_in, spatial = (first.shape[-1], sample["pos"].shape[-1]) if points else (first.shape[0], first.dim() - 1)
    want = _model_channels(model)[0]
    if c_in != want:
        raise ValueError(f"data: expected {want} input channels for this model, got {c_in} in {str(data)!r}")
    resolution = [first.shape[0]] if points else list(first.shape[1:])
    result = evaluate_dataset(model, ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=spatial,
                              chunk_points=chunk_points)
    result.update({"data": str(data), "resolution": resolution, "operator": state["operator"]})
    if chunk_points is not None:
        result["chunk_points"] = chunk_points
    if plot is not None:
        from sciattn.operators.point_parts import chunked_points

        s = ds[0]
        with torch.no_grad(), chunked_points(model, chunk_points):
            pred = yn.decode(model(xn.encode(s["x"][None])))[0]
        plot_sample(s["x"], s["y"], pred, plot, title=f"{state['operator']} on {Path(data).name}")
    return result
