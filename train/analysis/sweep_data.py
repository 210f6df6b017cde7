"""The evaluation data of a resolution sweep, drawn from the run's own training distribution.

:func:`run_source` finds where the run's training data came from, in this order: the checkpoint's
``data_meta["source"]`` (:func:`.run_metadata.read_data_meta`), ``metrics.json``'s ``"data_source"``, and
for older runs the stored config's ``[data]`` (``format = "darcy_solver"`` → the built-in ``darcy``
generator with the run's seed; ``format = "neuralop_pt"`` → the ``train`` / ``test`` files).

:func:`sweep_sets` builds the same samples at every requested resolution from that source:

- a generated source: fresh samples (seed: the run's data seed + 1) of the recorded generator with the
  recorded parameters, solved once on a fine grid and restricted;
- a neuraloperator Darcy file (``x`` a 0/1 mask, one channel): the matched generator
  :mod:`sciattn.pde_data.darcy_neuralop` with its fitted law and rescaling, solved at 128 per axis (or
  finer) and restricted;
- any other file: restriction of the run's test file (else its training file) where it holds a multiple
  of the requested resolution; finer resolutions raise an error naming the file.

:func:`reference_statistics` returns the statistics of the training inputs and targets: the checkpoint's
``data_meta["statistics"]``, else ``metrics.json``'s ``"data_statistics"``, else recomputed from the
training file or generator (:func:`.data_stats.dataset_statistics`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from sciattn.pde_data.catalogue import catalogue_view
from sciattn.pde_data.grid_dataset import GridPairDataset

from ..datasets.data import POINT_GENERATED
from ..datasets.data_stats import dataset_statistics

__all__ = ["MATCHED_GENERATORS", "reference_statistics", "run_source", "sweep_sets", "source_label"]

#: generators this module draws from itself (beyond :data:`.data.GENERATED`): the catalogue's matched generators
MATCHED_GENERATORS: Mapping[str, Any] = catalogue_view(lambda r: r.matched_to is not None)


def _metrics_file(run_dir: Path) -> dict[str, Any]:
    path = (run_dir if run_dir.is_dir() else run_dir.parent) / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _data_meta(state: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    from ..datasets.run_metadata import read_data_meta

    try:
        return read_data_meta(state, run_dir)
    except ValueError:
        return {}


def run_source(state: dict[str, Any], run_dir: str | os.PathLike) -> dict[str, Any]:
    """The training data's source as ``{"kind": "generated" | "file", ...}`` (see the module docstring)."""
    run_dir = Path(run_dir)
    for candidate in (_data_meta(state, run_dir).get("source"), _metrics_file(run_dir).get("data_source")):
        if isinstance(candidate, dict) and candidate.get("kind") in ("generated", "file", "benchmark"):
            return dict(candidate)
    data = json.loads(state.get("run_config") or "{}").get("data", {})
    fmt = data.get("format")
    if fmt == "darcy_solver":
        return {"kind": "generated", "name": "darcy", "params": {}, "seed": int(data.get("seed", 0)),
                "resolution": int(data.get("train_resolution", 0)) or None}
    if fmt == "neuralop_pt" and data.get("train"):
        return {"kind": "file", "path": data["train"], "test_path": data.get("test") or None, "reader": "neuralop_pt",
                "options": {}}
    raise ValueError(f"run_dir: the run {str(run_dir)!r} records no data source (no data_meta source, no metrics.json "
                     f"data_source, config data.format {fmt!r}); pass --data NAME_OR_PATH")


def _resolve(path: str | os.PathLike, run_dir: Path) -> Path:
    p = Path(path).expanduser()
    for cand in (p, (run_dir if run_dir.is_dir() else run_dir.parent) / p):
        if cand.is_file():
            return cand
    raise FileNotFoundError(f"data source: the run's data file {str(path)!r} was not found (looked as given and "
                            f"relative to {str(run_dir)!r}); pass --data PATH")


def _read_file(path: Path, reader: str | None, options: dict[str, Any] | None = None) -> GridPairDataset:
    """The file as the run read it: with the reader options it recorded (e.g. ``t_in`` of a time series)."""
    from ..datasets.data import _as_grid, load_data_file

    if options and (reader == "neuralop_pt" or path.suffix == ".pt"):
        from sciattn.pde_data.neuralop_pt import load_neuralop_pt

        return _as_grid(load_neuralop_pt(path, **options))
    return _as_grid(load_data_file(path, "neuralop_pt" if reader == "neuralop_pt" or path.suffix == ".pt" else None))


def _is_neuralop_darcy(ds: GridPairDataset) -> bool:
    """One mask channel of 0/1 values and one target channel on a square 2-D grid."""
    x = ds.x
    return (x.dim() == 4 and x.shape[1] == 1 and ds.y.shape[1] == 1 and x.shape[-1] == x.shape[-2]
            and bool(((x == 0) | (x == 1)).all()))


def matched_generator(source: dict[str, Any], run_dir: str | os.PathLike = ".",
                      train: GridPairDataset | None = None) -> tuple[str, dict[str, Any]] | None:
    """``(generator name, parameters)`` whose samples share the source's distribution; ``None`` for a file
    that no generator matches (``train``: the source's file, already read)."""
    if source["kind"] == "generated":
        return str(source["name"]), dict(source.get("params") or {})
    if source["kind"] == "benchmark":
        return (str(source["name"]), dict(source.get("options") or {})) if source["name"] in POINT_GENERATED else None
    ds = train if train is not None else _read_file(_resolve(source["path"], Path(run_dir)), source.get("reader"),
                                                    source.get("options"))
    if _is_neuralop_darcy(ds):
        from sciattn.pde_data.darcy_neuralop import NEURALOP_DARCY_FIT

        return "darcy_neuralop", dict(NEURALOP_DARCY_FIT)
    return None


def source_label(source: dict[str, Any], generator: tuple[str, dict[str, Any]] | None) -> str:
    if generator is not None:
        return generator[0]
    if source["kind"] == "benchmark":
        return str(source["name"])
    return Path(str(source.get("test_path") or source["path"])).stem


def _restrict(ds: GridPairDataset, r: int, label: str) -> GridPairDataset:
    from ..datasets.data import _strided

    out = _strided(ds, r)
    if out is None:
        shape = tuple(ds.x.shape[2:])
        raise ValueError(f"resolutions: {label!r} holds {'x'.join(map(str, shape))} points and no generator matches "
                         f"it, so it can only be restricted to divisors of {shape[0]}, got {r}")
    return out


def generate_sets(name: str, params: dict[str, Any], resolutions: list[int], *, n_samples: int, seed: int,
                  root: str | os.PathLike | None = None, t_in: int | None = None, progress: bool = False,
                  solve_resolution: int | None = None) -> dict[int, Any]:
    """``{r: dataset}`` of one generator, the same ``n_samples`` samples at every resolution (points per sample
    for :data:`.data.POINT_GENERATED`); ``solve_resolution``: the grid of a single-grid solver (shallow water,
    :func:`.data.load_at_resolutions`)."""
    if name == "darcy_neuralop":
        from sciattn.pde_data.darcy_neuralop import generate_darcy_neuralop

        data = generate_darcy_neuralop(n_samples, resolutions, seed=seed, progress=progress, **params)
        fine = max(int(params.get("solve_resolution", 128)), math.lcm(*resolutions))
        return {r: GridPairDataset(torch.from_numpy(m)[:, None], torch.from_numpy(y)[:, None],
                                   {"name": name, "seed": seed, "resolution": r, "split": "generated",
                                    "fine_resolution_at_least": fine}) for r, (m, y) in data.items()}
    from ..datasets.data import load_at_resolutions

    params = dict(params)
    recorded_t_in = params.pop("t_in", None)  # a time-series run records its input frames among the options
    return load_at_resolutions(name, resolutions, root=root, n_samples=n_samples, seed=seed,
                               t_in=recorded_t_in if t_in is None else t_in, progress=progress,
                               solve_resolution=solve_resolution, **params)


def sweep_sets(source: dict[str, Any], resolutions: list[int], run_dir: str | os.PathLike, *, n_samples: int = 16,
               seed: int | None = None, root: str | os.PathLike | None = None, t_in: int | None = None,
               progress: bool = False) -> tuple[dict[int, GridPairDataset], dict[str, Any]]:
    """``({r: dataset}, description)`` from the run's source (module docstring). ``seed`` defaults to the
    source's seed + 1 (not the training samples)."""
    run_dir = Path(run_dir)
    res = sorted({int(r) for r in resolutions})
    train_path = _resolve(source["path"], run_dir) if source["kind"] == "file" else None
    train = _read_file(train_path, source.get("reader"), source.get("options")) if train_path is not None else None
    generator = matched_generator(source, run_dir, train)
    if generator is not None:
        name, params = generator
        seed = int(source.get("seed", 0) or 0) + 1 if seed is None else seed
        if root is None and source["kind"] == "benchmark" and source.get("root"):
            root = source["root"]  # the point-set benchmark caches its solves there
        sets = generate_sets(name, params, res, n_samples=n_samples, seed=seed, root=root, t_in=t_in,
                             progress=progress, solve_resolution=source.get("resolution"))
        built = {"kind": "generated", "generator": name, "params": params, "seed": seed, "n_samples": n_samples,
                 "matched_to": source.get("path")}
        first = next(iter(sets.values())).meta
        if name in POINT_GENERATED:
            built["layout"] = "points"
            built["fine_resolution"] = first.get("fine_resolution")
        if name == "shallow_water":
            built.update(solve_resolution=first.get("solve_resolution"), lmax=first.get("lmax"))
        return sets, built
    if source["kind"] == "benchmark":  # a registered (not generated) benchmark: its test split at each resolution
        from ..datasets.data import load_at_resolutions

        sets = load_at_resolutions(source["name"], res, split="test", root=root or source.get("root"),
                                   **dict(source.get("options") or {}))
        return sets, {"kind": "benchmark", "data": source["name"], "n_samples": len(next(iter(sets.values())))}
    test = source.get("test") if isinstance(source.get("test"), dict) else {}  # describe_source nests the test file
    path = _resolve(source.get("test_path") or test.get("path") or source["path"], run_dir)
    ds = train if path == train_path else _read_file(path, source.get("reader"), source.get("options"))
    return ({r: _restrict(ds, r, str(path)) for r in res},
            {"kind": "restricted file", "path": str(path), "n_samples": len(ds)})


def reference_statistics(state: dict[str, Any], run_dir: str | os.PathLike,
                         source: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, str]:
    """``(statistics of the training data, where they came from)``; ``(None, reason)`` when unknown."""
    run_dir = Path(run_dir)
    stats = _data_meta(state, run_dir).get("statistics")
    if isinstance(stats, dict) and "x" in stats:
        return stats, "checkpoint data_meta"
    stats = _metrics_file(run_dir).get("data_statistics")
    if isinstance(stats, dict) and "x" in stats:
        return stats, "metrics.json"
    if source is None:
        return None, "no source"
    if source["kind"] == "file":
        return dataset_statistics(_read_file(_resolve(source["path"], run_dir), source.get("reader"))), \
            "recomputed from the training file"
    if source["kind"] == "benchmark" and source.get("name") not in POINT_GENERATED:
        return None, "no statistics recorded"
    res = source.get("resolution") or 32
    params = dict(source.get("params") or source.get("options") or {})
    sets = generate_sets(str(source["name"]), params, [int(res)], n_samples=64, seed=int(source.get("seed", 0) or 0),
                         root=source.get("root"), solve_resolution=int(res))
    return dataset_statistics(sets[int(res)]), "recomputed from the recorded generator"


def generator_like(run_or_file: str | os.PathLike) -> tuple[str, dict[str, Any], int]:
    """``(generator, parameters, seed)`` whose samples share the distribution of a run's training data (a run
    directory or checkpoint) or of a data file; the seed is the recorded one + 1, so not the training samples."""
    path = Path(run_or_file).expanduser()
    if path.is_dir() or path.name == "checkpoint.pt":
        from ..training.checkpoint import load_checkpoint

        state = load_checkpoint(path)
        source = run_source(state, path)
    elif path.is_file():
        source = {"kind": "file", "path": str(path), "reader": "neuralop_pt" if path.suffix == ".pt" else None}
    else:
        raise FileNotFoundError(f"--like: expected a run directory, a checkpoint or a data file, got {str(path)!r}")
    generator = matched_generator(source, path if path.is_dir() else path.parent)
    if generator is None:
        raise ValueError(f"--like: no generator matches the data of {str(path)!r} (a file that is not a "
                         f"neuraloperator Darcy mask/pressure file); expected a run trained on generated data, "
                         f"or a file one of {['darcy', *MATCHED_GENERATORS]} reproduces")
    from ..datasets.data import TIME_SERIES

    params = dict(generator[1])
    if generator[0] in TIME_SERIES:  # the input/output split of the recorded frames is not a solver parameter
        params.pop("t_in", None)
    if generator[0] == "shallow_water" and source.get("resolution"):  # one solve grid, as sweep_sets
        params.setdefault("solve_resolution", int(source["resolution"]))
    return generator[0], params, int(source.get("seed", 0) or 0) + 1
