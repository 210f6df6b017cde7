"""What a run records about its training data, so that later steps need not be told again.

:func:`collect_data_meta` summarises a training dataset as plain JSON; the :class:`~.trainer.Trainer`
stores it in every checkpoint (``state["data_meta"]``, a JSON string) and :func:`read_data_meta`
reads it back, falling back to what older checkpoints recorded. The layout::

    {"version": 1,
     "variables": {"x": [...], "y": [...]},          # channel names (or absent)
     "dt": 0.5,                                       # time between input and output states (or absent)
     "domain": {"kind": "grid", "shape": [64, 64], "bounds": [[0, 1], [0, 1]],
                "periodic": [true, true] | null, "dims": ["x", "y"] | absent,
                "endpoint": true | false | absent}            # nodes a + (b - a) i / (n - 1) | i / n
             | {"kind": "sphere", "grid": "equiangular", "nlat": 32, "nlon": 64}
             | {"kind": "point_cloud", "dim": 2, "n_points": 1024, "name": "unit square" | absent},
     "source": {...} | "...",                         # where the data came from
     "statistics": {"x": {"mean", "std", "min", "max"}, "y": {...}, "n_samples", "layout"},
     "train_resolution": [64, 64],                   # spatial shape, or [N] points
     "time_series": false, "t_in": null,
     "name": "navier_stokes" | absent,
     "input_dtype": "bool" | absent}                   # the dtype the file stores x in (before float32)

Where each entry comes from: the dataset's ``meta`` dict (``variables``, ``dt``, ``domain``,
``bounds``, ``periodic``, ``grid``, ``coords``, ``source``, ``time_series``, ``t_in``,
``stored_dtypes``), its first
sample (shapes, ``pos``), :func:`sciattn.train.datasets.data_stats.dataset_statistics` (statistics) and the
caller (``source``, ``extra``). ``dt`` is taken from ``meta["dt"]`` or, failing that, from uniformly
spaced ``meta["times"]`` or a ``time``/``t`` coordinate; a solver's internal step is never used for it.
The grid's bounds default to the unit box, as :class:`sciattn.domain.Grid` does; its periodicity is
``null`` (unknown) unless the data says so or the benchmark is known (built-in Navier–Stokes and
Burgers are periodic, Darcy is not).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sciattn.pde_data import catalogue

__all__ = ["DATA_META_VERSION", "collect_data_meta", "legacy_run_metadata", "read_data_meta"]

DATA_META_VERSION = 1
_SPHERE_GRIDS = ("equiangular", "legendre-gauss", "lobatto")
_TIME_COORDS = ("time", "t")


def _known_periodic(name: str) -> bool | None:
    """The periodicity the catalogue records for dataset ``name`` (DESIGN §7: the torus and the periodic interval
    of the built-in Navier–Stokes and Burgers; Darcy has a Dirichlet boundary); ``None`` when unknown."""
    record = catalogue.get(name)
    return None if record is None else record.periodic


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (tensors and arrays become lists); ``None`` where impossible."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _jsonable(tolist())
    return str(value)


def _positive_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        tolist = getattr(value, "item", None)
        if not callable(tolist):
            return None
        try:
            value = float(tolist())
        except (TypeError, ValueError):
            return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def _uniform_step(values: Any) -> float | None:
    """The spacing of a uniformly spaced sequence of at least two numbers, else ``None``."""
    try:
        seq = [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]
    except (TypeError, ValueError):
        return None
    if len(seq) < 2:
        return None
    steps = [b - a for a, b in zip(seq, seq[1:])]
    h = steps[0]
    if not h > 0 or any(not math.isclose(s, h, rel_tol=1e-6, abs_tol=0.0) for s in steps):
        return None
    return h


def _dt(meta: Mapping[str, Any]) -> float | None:
    dt = _positive_number(meta.get("dt"))
    if dt is not None:
        return dt
    if "times" in meta:
        return _uniform_step(meta["times"])
    coords = meta.get("coords") if isinstance(meta.get("coords"), Mapping) else {}
    for key in _TIME_COORDS:
        if key in coords:
            return _uniform_step(coords[key])
    return None


def _variables(meta: Mapping[str, Any], c_in: int, c_out: int) -> dict[str, list[str]] | None:
    v = meta.get("variables")
    if not isinstance(v, Mapping):
        return None
    out = {}
    for key, n in (("x", c_in), ("y", c_out)):
        names = v.get(key)
        if isinstance(names, (list, tuple)) and len(names) == n and all(isinstance(s, str) for s in names):
            out[key] = [str(s) for s in names]
    return out or None


def _grid_bounds(meta: Mapping[str, Any], coords: Mapping[str, Any], dims: list[str] | None,
                 shape: list[int]) -> list[list[float]]:
    bounds = meta.get("bounds")
    if isinstance(bounds, (list, tuple)) and len(bounds) == len(shape):
        try:
            return [[float(a), float(b)] for a, b in bounds]
        except (TypeError, ValueError):
            pass
    if dims and all(d in coords for d in dims):
        out = []
        for d, n in zip(dims, shape):
            h = _uniform_step(coords[d])
            values = coords[d]
            if h is None or len(values) != n:
                break
            out.append([float(values[0]), float(values[0]) + n * h])  # uniform nodes a + (b - a) i / n
        else:
            return out
    return [[0.0, 1.0] for _ in shape]


def _domain(meta: Mapping[str, Any], sample: Mapping[str, Any]) -> dict[str, Any]:
    x = sample["x"]
    given = meta.get("domain") if isinstance(meta.get("domain"), Mapping) else {}
    pos = sample.get("pos")
    if pos is not None and getattr(pos, "dim", lambda: 0)() == 2 and x.dim() == 2:
        out = {"kind": "point_cloud", "dim": int(pos.shape[-1]), "n_points": int(pos.shape[0])}
        if isinstance(meta.get("domain"), str):
            out["name"] = meta["domain"]
        return {**out, **_jsonable(given)}
    shape = [int(n) for n in x.shape[1:]]
    grid = meta.get("grid")
    if given.get("kind") == "sphere" or (isinstance(grid, str) and grid in _SPHERE_GRIDS and len(shape) == 2):
        return {"kind": "sphere", "grid": grid if isinstance(grid, str) else None, "nlat": shape[0],
                "nlon": shape[1], **_jsonable(given)}
    coords = meta.get("coords") if isinstance(meta.get("coords"), Mapping) else {}
    dims = meta.get("spatial_dims")
    if not (isinstance(dims, (list, tuple)) and len(dims) == len(shape) and all(isinstance(d, str) for d in dims)):
        spatial = [d for d in coords if d not in _TIME_COORDS]
        dims = spatial if len(spatial) == len(shape) else None
    periodic = meta.get("periodic")
    if isinstance(periodic, bool):
        periodic = [periodic] * len(shape)
    elif not (isinstance(periodic, (list, tuple)) and len(periodic) == len(shape)):
        name = meta.get("name")
        if name is None and isinstance(meta.get("attrs"), Mapping):
            name = meta["attrs"].get("pde")
        known = _known_periodic(name) if isinstance(name, str) else None
        periodic = None if known is None else [known] * len(shape)
    out = {"kind": "grid", "shape": shape, "bounds": _grid_bounds(meta, coords, dims, shape),
           "periodic": None if periodic is None else [bool(p) for p in periodic]}
    nodes = meta.get("nodes")
    if isinstance(nodes, Mapping) and isinstance(nodes.get("endpoint"), bool):
        out["endpoint"] = nodes["endpoint"]  # True: the nodes include both walls, a + (b - a) i / (n - 1)
    if dims:
        out["dims"] = list(dims)
    return {**out, **_jsonable(given)}


def _statistics(train_data) -> dict[str, Any]:
    from .data_stats import dataset_statistics

    return dataset_statistics(train_data)


def _model_variables(meta: Mapping[str, Any], variables: dict[str, list[str]] | None, c_in: int, c_out: int,
                     model_channels) -> dict[str, list[str]] | None:
    """Channel names of the model's inputs and outputs. A time stepper predicts fewer frames than a sample holds as
    targets: its outputs are named after the frames' variables (``["w"]``), not after the data's target frames."""
    m_in, m_out = (model_channels or (None, None))
    m_in = m_in if isinstance(m_in, int) and not isinstance(m_in, bool) else c_in
    m_out = m_out if isinstance(m_out, int) and not isinstance(m_out, bool) else c_out
    frames = meta.get("frame_variables")
    if meta.get("time_series") and isinstance(frames, (list, tuple)) and frames:
        from .data import stepper_names

        named = stepper_names([str(n) for n in frames], m_in, m_out)
        if named is not None:
            return named
    if variables and (m_in, m_out) != (c_in, c_out):
        return {k: v for k, v in variables.items() if len(v) == (m_in if k == "x" else m_out)} or None
    return variables


def collect_data_meta(train_data, *, source: Any = None, extra: Mapping[str, Any] | None = None,
                      model_channels: tuple[int | None, int | None] | None = None) -> dict[str, Any]:
    """The JSON-able description of ``train_data`` that a run records (see the module docstring).

    Args:
        train_data: a dataset of sample dicts ``{"x", "y"[, "pos"]}``, optionally with a ``meta`` dict.
        source: where the data came from (e.g. ``sciattn.train.datasets.data.describe_source(cfg)``); default
            ``meta["source"]`` (with ``meta["name"]``), else ``None``.
        extra: entries merged over the collected ones (a ``domain`` dict is merged key by key).
        model_channels: ``(in, out)`` channels of the model trained on the data, when they differ from a sample's
            (a time stepper predicts one frame of a longer target): its output names are then the frames'
            variables (``frame_variables``: ``["w"]``), and ``variables`` names the model's channels.

    Raises ``ValueError`` naming ``train_data`` for an empty dataset or samples without ``"x"``/``"y"``,
    and ``TypeError`` naming ``extra`` when it is not a mapping or not plain JSON data.
    """
    if extra is not None and not isinstance(extra, Mapping):
        raise TypeError(f"extra: expected a mapping of metadata or None, got {type(extra).__name__}")
    if len(train_data) == 0:
        raise ValueError("train_data: expected at least one sample, got an empty dataset")
    sample = train_data[0]
    if not isinstance(sample, Mapping) or "x" not in sample or "y" not in sample:
        raise ValueError(f"train_data: expected samples that are dicts with 'x' and 'y', got {type(sample).__name__}")
    meta = getattr(train_data, "meta", None)
    meta = meta if isinstance(meta, Mapping) else {}
    x, y = sample["x"], sample["y"]
    points = sample.get("pos") is not None and x.dim() == 2
    c_in, c_out = (int(x.shape[-1]), int(y.shape[-1])) if points else (int(x.shape[0]), int(y.shape[0]))
    out: dict[str, Any] = {"version": DATA_META_VERSION}
    variables = _model_variables(meta, _variables(meta, c_in, c_out), c_in, c_out, model_channels)
    if variables:
        out["variables"] = variables
    frames = meta.get("frame_variables")
    if isinstance(frames, (list, tuple)) and frames and all(isinstance(n, str) for n in frames):
        out["frame_variables"] = [str(n) for n in frames]
    dt = _dt(meta)
    if dt is not None:
        out["dt"] = dt
    out["domain"] = _domain(meta, sample)
    if source is None and "source" in meta:
        source = {"source": meta["source"], **({"name": meta["name"]} if "name" in meta else {})}
    out["source"] = _jsonable(source)
    out["statistics"] = _statistics(train_data)
    out["train_resolution"] = [int(x.shape[0])] if points else [int(n) for n in x.shape[1:]]
    out["time_series"] = bool(meta.get("time_series", False))
    t_in = meta.get("t_in")
    out["t_in"] = int(t_in) if isinstance(t_in, int) and not isinstance(t_in, bool) else None
    if isinstance(meta.get("name"), str):
        out["name"] = meta["name"]
    stored = meta.get("stored_dtypes")
    if isinstance(stored, Mapping) and isinstance(stored.get("x"), str):
        out["input_dtype"] = stored["x"].removeprefix("torch.")  # what the file holds, before the float32 cast
    if extra:
        out = merge_data_meta(out, extra)
    return out


def merge_data_meta(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``; ``domain`` and ``variables`` dicts are merged key by key. Checks ``extra`` is JSON."""
    if not isinstance(extra, Mapping):
        raise TypeError(f"data_meta: expected a mapping of metadata or None, got {type(extra).__name__}")
    try:
        extra = json.loads(json.dumps(dict(extra)))
    except (TypeError, ValueError) as err:
        raise TypeError(f"data_meta: expected plain JSON values (numbers, strings, lists, dicts), got {err}") from None
    out = dict(base)
    for key, value in extra.items():
        if key in ("domain", "variables") and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    if "dt" in extra and extra["dt"] is not None and _positive_number(extra["dt"]) is None:
        raise ValueError(f"data_meta: expected 'dt' to be a positive finite number, got {extra['dt']!r}")
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def legacy_run_metadata(state: Mapping[str, Any], run_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """What a checkpoint without ``data_meta`` recorded: ``{"variables", "dt", "train_resolution"}``, each key
    present only when known.

    Looks at ``meta`` dicts in the checkpoint's run config and metrics and in ``metrics.json`` beside the
    checkpoint (later sources win), and at ``train_resolution`` in the metrics; runs of the built-in Darcy
    generator are known to map ``coefficient`` to ``pressure``.
    """
    run_config = json.loads(state.get("run_config") or "{}")
    metrics = json.loads(state.get("metrics") or "{}")
    file_metrics: dict[str, Any] = {}
    if run_dir is not None:
        p = Path(run_dir)
        file_metrics = _read_json((p if p.is_dir() else p.parent) / "metrics.json")
    out: dict[str, Any] = {}
    data_cfg = run_config.get("data") if isinstance(run_config.get("data"), dict) else {}
    if data_cfg.get("format") == "darcy_solver":
        out["variables"] = {k: list(v) for k, v in catalogue.get("darcy").variables.items()}
    for src in (run_config, metrics, file_metrics):
        meta = src.get("meta")
        if isinstance(meta, dict):
            out.update({k: v for k, v in meta.items() if k in ("variables", "dt")})
    for src in (metrics, file_metrics):
        res = src.get("train_resolution")
        if isinstance(res, list) and res and all(isinstance(n, int) for n in res):
            out["train_resolution"] = list(res)
    if "train_resolution" not in out and data_cfg.get("format") == "darcy_solver":
        res = data_cfg.get("train_resolution")
        if isinstance(res, int):
            out["train_resolution"] = [res, res]
    return out


def read_data_meta(state: Mapping[str, Any], run_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """The data metadata of a checkpoint ``state`` (from :func:`~.checkpoint.load_checkpoint`).

    A checkpoint written since this module exists holds ``state["data_meta"]`` (JSON); entries it lacks
    are filled from :func:`legacy_run_metadata`, which is all an older checkpoint has (then the result
    has only ``variables``, ``dt`` and ``train_resolution``, where known). Malformed JSON raises
    ``ValueError`` naming ``data_meta``.
    """
    legacy = legacy_run_metadata(state, run_dir)
    raw = state.get("data_meta")
    if raw is None:
        return legacy
    try:
        meta = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (TypeError, ValueError) as err:
        raise ValueError(f"data_meta: expected a JSON object in the checkpoint, got {str(raw)[:80]!r} ({err})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"data_meta: expected a JSON object in the checkpoint, got {type(meta).__name__}")
    return {**legacy, **meta}
