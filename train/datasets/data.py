"""Build the train and test datasets that a :class:`DataConfig` describes (:func:`build_datasets`),
record where they came from (:func:`describe_source`), and load one data set at several
resolutions for a resolution sweep (:func:`load_at_resolutions`).

Every source goes through one path: :func:`.sources.resolve_source` says whether ``[data] train``
names a generator, a registered benchmark or a file (and the file's reader), the reader or
generator is called with ``[data] options``, and the result is held in memory as either

* grid pairs, a :class:`~sciattn.pde_data.grid_dataset.GridPairDataset` of
  ``{"x": (C_in, *spatial), "y": (C_out, *spatial)}``, or
* point samples, a :class:`~sciattn.pde_data.geofno.PointSetDataset` of
  ``{"x": (N, C_in), "y": (N, C_out), "pos": (N, d), "weights": (N,)}`` (``N`` may differ
  between samples; :mod:`.batching` pads them and adds a mask).

Each dataset's ``meta`` carries ``variables`` (``{"x": [...], "y": [...]}``), ``layout``
(``"grid"``/``"points"``), ``time_series`` with ``t_in`` (input frames) and ``frame_channels``
(variables per frame, frames stored time-major as channels), and ``dt`` where known.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from sciattn._checks import check_positive_int
from sciattn.pde_data import load
from sciattn.pde_data.catalogue import XARRAY_SUFFIXES, catalogue_view
from sciattn.pde_data.generated_pairs import frame_names, generate_pairs, pair_meta, sample_at_resolutions
from sciattn.pde_data.generated_pairs import sphere_transfer as _sphere_transfer  # noqa: F401  (tests use it)
from sciattn.pde_data.geofno import PointSetDataset
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.registry import BENCHMARKS, default_root

from ..config import ConfigError, DataConfig
from .sources import GENERATORS, READERS, Source, benchmark_parameters, detect_reader, resolve_source

__all__ = ["build_datasets", "describe_source", "frame_names", "stepper_names", "load_data_file", "load_at_resolutions", "data_layout",
           "DATA_FORMATS", "GENERATED", "POINT_GENERATED", "TIME_SERIES"]

DATA_FORMATS = ("auto", "neuralop_pt", "darcy_solver")
#: sweepable grid solvers: any resolution, the same samples at each (:func:`load_at_resolutions`)
GENERATED: Mapping[str, Any] = catalogue_view(lambda r: r.kind == "generator" and r.matched_to is None)
#: generated point-set benchmarks: a resolution is a number of points per sample (the catalogue's point records)
POINT_GENERATED: Mapping[str, Any] = catalogue_view(lambda r: r.points)
TIME_SERIES: Mapping[str, Any] = catalogue_view(lambda r: r.time_series)  # inputs, outputs: time steps of one field

_SINGLE_RESOLUTION: Mapping[str, Any] = catalogue_view(lambda r: r.single_grid)


# ------------------------------------------------------------------------------------ provenance


def _root(cfg: DataConfig) -> Path:
    return Path(cfg.root).expanduser().resolve() if cfg.root else default_root()


def _cache(cfg: DataConfig) -> Path:
    return Path(cfg.cache_dir).expanduser().resolve() if cfg.cache_dir else _root(cfg) / "generated"


def _sizes(cfg: DataConfig, name: str) -> tuple[int, int, int, list[int]]:
    d = GENERATORS[name].defaults  # the catalogue record's
    n_train, n_test, res = d["n_train"], d["n_test"], d["resolution"]
    r = cfg.train_res or res
    return cfg.n_train or n_train, cfg.n_test or n_test, r, list(cfg.test_resolutions or [r])


def _describe_one(cfg: DataConfig, spec: str) -> dict[str, Any]:
    src = resolve_source(spec, fmt=cfg.format)
    if src.kind == "generated":
        n_train, n_test, r, test_res = _sizes(cfg, src.name)
        return {"kind": "generated", "name": src.name, "params": dict(cfg.options), "seed": cfg.seed,
                "resolution": r, "test_resolutions": test_res, "n_train": n_train, "n_test": n_test,
                "cache_dir": str(_cache(cfg))}
    if src.kind == "benchmark":
        return {"kind": "benchmark", "name": src.name, "root": str(_root(cfg)), "options": dict(cfg.options),
                "resolution": cfg.train_res, "test_resolutions": cfg.test_resolutions, "seed": cfg.seed,
                "n_train": cfg.n_train, "n_test": cfg.n_test}
    reader = src.reader or (detect_reader(src.path) if src.path.exists() else None)
    return {"kind": "file", "path": str(src.path), "reader": reader, "options": dict(cfg.options),
            "resolution": cfg.train_res, "test_resolutions": cfg.test_resolutions, "n_train": cfg.n_train,
            "n_test": cfg.n_test, "split_rule": _split_rule(cfg, src, reader) if not cfg.test else "separate file"}


def describe_source(cfg: DataConfig) -> dict[str, Any]:
    """Where the training (and test) data came from, as plain JSON, so a later evaluation can rebuild
    matched data: ``{"kind": "generated", "name", "params", "seed", "resolution", ...}``,
    ``{"kind": "file", "path" (absolute), "reader", "options", "split_rule", ...}`` or
    ``{"kind": "benchmark", "name", "root", "options", ...}``; a separate ``[data] test`` source is
    described under ``"test"``."""
    out = _describe_one(cfg, cfg.source)
    if cfg.test:
        out["test"] = _describe_one(cfg, cfg.test)
    return out


# ------------------------------------------------------------------------------------ normalising samples


def _is_points(sample: dict[str, torch.Tensor]) -> bool:
    """Point samples hold ``pos (N, d)`` and ``x (N, C)``; structured meshes hold ``pos (d, *grid)``."""
    pos = sample.get("pos")
    return pos is not None and pos.dim() == 2 and sample["x"].dim() == 2 and pos.shape[0] == sample["x"].shape[0]


def _grid_points(shape: tuple[int, ...]) -> torch.Tensor:
    axes = [torch.linspace(0.0, 1.0, n) for n in shape]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, len(shape))


def _as_point_sample(s: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A point sample of ``s``: as is, or a grid / structured-mesh sample flattened (channels last)."""
    if _is_points(s):
        out = {"x": s["x"].float(), "y": s["y"].float(), "pos": s["pos"].float()}
        n = out["x"].shape[0]
        out["weights"] = s["weights"].float() if "weights" in s else torch.full((n,), 1.0 / n)
        return out
    x, y = s["x"].float(), s["y"].float()
    shape = tuple(x.shape[1:])
    pos = s["pos"].float().flatten(1).T if "pos" in s else _grid_points(shape)
    n = pos.shape[0]
    w = s["weights"].float().reshape(-1) if "weights" in s else torch.full((n,), 1.0 / n)
    return {"x": x.flatten(1).T.contiguous(), "y": y.flatten(1).T.contiguous(), "pos": pos.contiguous(),
            "weights": w / w.sum()}


def stepper_names(variables: list[str], c_in: int, c_out: int) -> dict[str, list[str]] | None:
    """Input and output channel names of a time stepper on frames of ``variables`` (``None`` when the channel
    counts are not whole frames): ``c_in / len(variables)`` input frames; one output frame is named after the variables
    themselves (``["u"]``, ``["w"]``), several after their frame index after the inputs."""
    v = len(variables)
    if not v or c_in % v or c_out % v:
        return None
    t_in = c_in // v
    out_frames = c_out // v
    return {"x": frame_names(variables, t_in), "y": list(variables) if out_frames == 1 else
            frame_names(variables, out_frames, first=t_in)}


def _frame_variables(meta: dict[str, Any]) -> list[str] | None:
    """The variable names of a time series' frames (``["w"]``), where the reader or generator records them."""
    fv = meta.get("frame_variables")
    if isinstance(fv, (list, tuple)) and fv and all(isinstance(n, str) for n in fv):
        return [str(n) for n in fv]
    v = meta.get("variables")
    if isinstance(v, (list, tuple)) and v and all(isinstance(n, str) for n in v):
        return [str(n) for n in v]
    if isinstance(v, dict) and meta.get("t_in") is not None and isinstance(v.get("x"), str) and v.get("x") == v.get("y"):
        return [v["x"]]  # a reader's {"x": "u", "y": "u"}: frames of the file's variable u
    return None


def _variables(meta: dict[str, Any], c_in: int, c_out: int) -> dict[str, list[str]]:
    v = meta.get("variables")
    if isinstance(v, dict) and isinstance(v.get("x"), (list, tuple)) and isinstance(v.get("y"), (list, tuple)):
        # (a reader's {"x": "a", "y": "u"} maps fields to keys in its file: those are not variable names)
        x, y = list(v["x"]), list(v["y"])
        if len(x) == c_in and len(y) == c_out:
            return {"x": [str(n) for n in x], "y": [str(n) for n in y]}
    series = bool(meta.get("time_series") or meta.get("t_in") is not None
                  or meta.get("format") in ("pdebench", "the_well"))
    names = _frame_variables(meta) if series or isinstance(v, (list, tuple)) else None
    if names and c_in % len(names) == 0 and c_out % len(names) == 0:
        t_in = c_in // len(names)  # time-major frames of these variables; a time series' targets follow its inputs
        return {"x": frame_names(names, t_in), "y": frame_names(names, c_out // len(names), first=t_in if series else 0)}
    return {"x": [f"x{i}" for i in range(c_in)], "y": [f"y{i}" for i in range(c_out)]}


def _time_series(meta: dict[str, Any], c_in: int) -> tuple[bool, int | None, int]:
    """``(time_series, t_in, frame_channels)`` from a reader's ``meta``."""
    v = meta.get("variables")
    n_var = len(v) if isinstance(v, (list, tuple)) and v and meta.get("format") in ("pdebench", "the_well") else 1
    if meta.get("format") == "the_well":
        return True, int(meta.get("n_steps_input", c_in // n_var)), n_var
    if meta.get("t_in") is not None:
        return True, int(meta["t_in"]), n_var
    attrs = meta.get("attrs") if isinstance(meta.get("attrs"), dict) else {}
    if meta.get("time_series") or attrs.get("pde") == "navier_stokes":
        return True, c_in // n_var, n_var
    return False, None, n_var


def _finish(ds, meta: dict[str, Any], as_points: bool, split: str):
    """``ds`` held in memory as grid pairs or point samples, with the normalised ``meta``."""
    meta = {**meta, "split": split}
    if isinstance(ds, GridPairDataset) and not as_points:
        grid = ds
    else:
        samples = [ds[i] for i in range(len(ds))]
        if not samples:
            raise ValueError(f"data: the {split} split is empty")
        if as_points or _is_points(samples[0]):
            pts = [_as_point_sample(s) for s in samples]
            c_in, c_out = pts[0]["x"].shape[1], pts[0]["y"].shape[1]
            ts, t_in, fc = _time_series(meta, c_in)
            meta.update(layout="points", variables=_variables(meta, c_in, c_out), time_series=ts, t_in=t_in,
                        frame_channels=fc, n_points=[int(p["x"].shape[0]) for p in pts][:1000])
            if ts and _frame_variables(meta):
                meta["frame_variables"] = _frame_variables(meta)
            return PointSetDataset(pts, meta)
        grid = GridPairDataset(torch.stack([s["x"] for s in samples]), torch.stack([s["y"] for s in samples]), meta)
    ts, t_in, fc = _time_series(meta, grid.in_channels)
    frames = _frame_variables(meta) if ts else None
    meta.update(layout="grid", variables=_variables(meta, grid.in_channels, grid.out_channels), time_series=ts,
                t_in=t_in, frame_channels=fc, resolution=list(grid.resolution))
    if frames and len(frames) == fc:
        meta["frame_variables"] = frames
    return GridPairDataset(grid.x, grid.y, meta)


def data_layout(ds) -> str:
    """``"points"`` or ``"grid"``."""
    return "points" if getattr(ds, "meta", {}).get("layout") == "points" or (
        len(ds) and _is_points(ds[0])) else "grid"


def _take(ds, indices: range | list[int]):
    if isinstance(ds, GridPairDataset):
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        return GridPairDataset(ds.x[idx], ds.y[idx], ds.meta)
    return _Items(ds, list(indices))


class _Items(torch.utils.data.Dataset):
    def __init__(self, base, indices: list[int]):
        self.base, self.indices, self.meta = base, indices, dict(getattr(base, "meta", {}))

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        return self.base[self.indices[i]]


# ------------------------------------------------------------------------------------ generators


def _generate_pairs(name: str, n: int, res: list[int], **kwargs):
    """:func:`sciattn.pde_data.generated_pairs.generate_pairs`, a bad option raised as :class:`ConfigError`."""
    return generate_pairs(name, n, res, error=ConfigError, known=tuple(sorted(GENERATORS)), **kwargs)


def _generate(cfg: DataConfig, name: str, progress: bool):
    n_train, n_test, r, test_res = _sizes(cfg, name)
    n = n_train + n_test
    res = sorted({r, *test_res})
    if name in _SINGLE_RESOLUTION and res != [r]:
        raise ConfigError(f"data.test_resolutions: the {name} generator solves on one grid (nlat = data.resolution "
                          f"= {r}); expected [{r}], got {cfg.test_resolutions}")
    pairs, meta = _generate_pairs(name, n, res, options=cfg.options, seed=cfg.seed, cache=_cache(cfg),
                                  progress=progress, solve_resolution=r)
    meta = {k: v for k, v in meta.items() if k not in ("fine_resolution", "solve_resolution", "lmax")}
    train_x, train_y = pairs[r]
    train = GridPairDataset(train_x[:n_train], train_y[:n_train], pair_meta(meta, r))
    tests = {k: GridPairDataset(pairs[k][0][n_train:n], pairs[k][1][n_train:n], pair_meta(meta, k))
             for k in test_res}
    return train, tests


# ------------------------------------------------------------------------------------ readers and benchmarks


def _split_rule(cfg: DataConfig, src: Source, reader: str | None) -> str:
    splits = src.kind != "file" or (reader is not None and READERS[reader].own_split)
    rule = cfg.split_rule
    if rule == "auto":
        return "reader" if splits else "test_last"
    if rule == "reader" and not splits:
        raise ConfigError(f"data.split_rule: reader {reader!r} of {src.name!r} has no train/test split of its own; "
                          f"expected 'test_last' or 'test_first' (with data.n_test), or a data.test file")
    return rule


def _accepts(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def _read(cfg: DataConfig, src: Source, split: str | None, resolution: int | None, n: int | None, key: str):
    """One split of a benchmark or file (``split=None``: the whole file of a reader without splits)."""
    opts = dict(cfg.options)
    if src.kind == "benchmark":
        accepted = benchmark_parameters(src.name)
        if "n_train" in accepted:
            opts.update({k: v for k, v in (("n_train", cfg.n_train), ("n_test", cfg.n_test)) if v is not None})
        elif "n_samples" in accepted and n is not None:
            opts["n_samples"] = n
        if "seed" in accepted:
            opts["seed"] = cfg.seed
        if "progress" in accepted:
            opts["progress"] = False
        return load(src.name, split=split or "train", resolution=resolution, root=_root(cfg), **opts)
    if not src.path.exists():
        raise FileNotFoundError(f"data.{key}: expected an existing file, got {str(src.path)!r}")
    reader = src.reader or detect_reader(src.path)
    info = READERS[reader]
    if resolution is not None and not info.subsamples:
        raise ConfigError(f"data.resolution: reader {reader!r} of {src.name!r} reads the stored grid only; expected "
                          f"no data.resolution / data.test_resolutions (use its options, e.g. spatial_stride), got "
                          f"{resolution}")
    accepted = _accepts(info.target())
    if split is not None and "n_train" in accepted:
        opts.update({k: v for k, v in (("n_train", cfg.n_train), ("n_test", cfg.n_test)) if v is not None})
    elif "n_samples" in accepted and n is not None:
        opts["n_samples"] = n
    if cfg.format == "neuralop_pt":  # the older format key: the file as neuraloperator wrote it
        from sciattn.pde_data.neuralop_pt import load_neuralop_pt

        return _subsample(load_neuralop_pt(src.path, **opts), resolution, key)
    # split=None: the whole file (a single-split file), or the reader's own train split
    return load(src.path, split=split if info.own_split else None, resolution=resolution, **opts)


def _subsample(ds: GridPairDataset, r: int | None, key: str) -> GridPairDataset:
    return ds if r is None else _at_resolution(ds, r, key)


def _head(ds, n: int | None, key: str):
    if n is None or n == len(ds):
        return ds
    if n > len(ds):
        raise ConfigError(f"data.{key}: expected at most the {len(ds)} samples the source holds, got {n}")
    return _take(ds, range(n))


def _from_source(cfg: DataConfig, progress: bool):
    src = resolve_source(cfg.source, fmt=cfg.format)
    generated = src.kind == "generated"
    r = cfg.train_res
    test_res = list(cfg.test_resolutions or [r])
    as_points = cfg.as_points
    if generated:
        train, tests = _generate(cfg, src.name, progress)
    elif cfg.test:
        tsrc = resolve_source(cfg.test, fmt=cfg.format)
        train = _head(_read(cfg, src, "train", r, cfg.n_train, "train"), cfg.n_train, "n_train")
        tests = {t: _head(_read(cfg, tsrc, "test", t, cfg.n_test, "test"), cfg.n_test, "n_test") for t in test_res}
    else:
        reader = src.reader or (detect_reader(src.path) if src.kind == "file" and src.path.exists() else None)
        if src.kind == "file" and reader is None:
            raise FileNotFoundError(f"data.train: expected an existing file, got {str(src.path)!r}")
        rule = _split_rule(cfg, src, reader)
        if rule == "reader":
            train = _head(_read(cfg, src, "train", r, cfg.n_train, "train"), cfg.n_train, "n_train")
            tests = {t: _head(_read(cfg, src, "test", t, cfg.n_test, "train"), cfg.n_test, "n_test")
                     for t in test_res}
        else:
            full = _read(cfg, src, None, r, None, "train")
            total = len(full)
            n_test = cfg.n_test or max(1, total // 5)
            n_train = cfg.n_train or total - n_test
            if n_train + n_test > total or total < 2:
                raise ConfigError(f"data.n_train / data.n_test: {cfg.source!r} holds {total} samples; expected "
                                  f"n_train + n_test <= {total}, got {n_train} + {n_test}")
            if rule == "test_last":
                train_idx, test_idx = range(n_train), range(total - n_test, total)
            else:
                train_idx, test_idx = range(total - n_train, total), range(n_test)
            train = _take(full, train_idx)
            tests = {}
            for t in test_res:
                other = full if t == r else _read(cfg, src, None, t, None, "train")
                tests[t] = _take(other, test_idx)
    meta = dict(getattr(train, "meta", {}))
    train = _finish(train, {**meta, "source_spec": cfg.source}, as_points, "train")
    tests = {t: _finish(ds, {**getattr(ds, "meta", {}), "source_spec": cfg.test or cfg.source}, as_points, "test")
             for t, ds in tests.items()}
    return train, tests, generated


def build_datasets(cfg: DataConfig, progress: bool = False) -> tuple[Any, dict[str, Any]]:
    """``(train, {test_name: test})`` for ``cfg``. Test names: ``"test_<r>"`` for generated data,
    ``"test_<shape>"`` (e.g. ``test_16x16``) for grids read from files or benchmarks, ``"test"`` (or
    ``"test_<r>"`` with resolutions) for point samples."""
    train, tests, generated = _from_source(cfg, progress)
    out: dict[str, Any] = {}
    for r, ds in tests.items():
        if generated or data_layout(ds) == "points":
            name = "test" if r is None else f"test_{r}"
        else:
            name = f"test_{'x'.join(map(str, ds.resolution))}"
        out[name] = ds
    return train, out


# ------------------------------------------------------------------------------------ single files, sweeps


def load_data_file(path: str | os.PathLike, fmt: str | None = None, split: str | None = None):
    """Load one data file of any supported format (``fmt=None``: detected from the content), or a
    registered benchmark name. ``split=None``: a file's every sample, a benchmark's test split."""
    if fmt not in (None, "auto"):
        from sciattn._checks import check_choice
        from sciattn.pde_data.neuralop_pt import load_neuralop_pt

        check_choice("format", fmt, ("auto", "neuralop_pt"))
        return load_neuralop_pt(Path(path))
    if str(path) not in BENCHMARKS and Path(path).suffix in XARRAY_SUFFIXES:
        from sciattn.pde_data.xarray_data import load_xarray

        return load_xarray(Path(path).expanduser())
    if split is None and str(path) in BENCHMARKS:
        split = "test"
    return load(path, split=split)


def _as_grid(ds) -> GridPairDataset:
    if isinstance(ds, GridPairDataset):
        return ds
    samples = [ds[i] for i in range(len(ds))]
    return GridPairDataset(torch.stack([s["x"] for s in samples]), torch.stack([s["y"] for s in samples]),
                           getattr(ds, "meta", {}))


def _strided(grid: GridPairDataset, r: int) -> GridPairDataset | None:
    """``grid`` itself at ``r`` points per axis, or strided to ``r`` from a multiple of ``r``; ``None`` when it
    holds neither."""
    n = grid.resolution[0]
    if all(s == r for s in grid.resolution):
        return grid
    if n < r or n % r or any(s != n for s in grid.resolution):
        return None
    sl = (slice(None), slice(None)) + (slice(None, None, n // r),) * len(grid.resolution)
    return GridPairDataset(grid.x[sl], grid.y[sl], {**grid.meta, "resolution": r})


def _at_resolution(ds, r: int, label: str) -> GridPairDataset:
    """``ds`` at ``r`` points per axis (:func:`_strided`), or an error naming ``label``."""
    grid = _as_grid(ds)
    out = _strided(grid, r)
    if out is None:
        n = grid.resolution[0]
        raise ValueError(f"resolutions: {label!r} holds {'x'.join(map(str, grid.resolution))} points and cannot be "
                         f"restricted to {r} per axis; expected a divisor of {n}, or a generated benchmark "
                         f"{list(GENERATED)}")
    return out


def load_at_resolutions(
    name_or_path: str | os.PathLike,
    resolutions: list[int],
    *,
    split: str = "test",
    root: str | os.PathLike | None = None,
    n_samples: int = 16,
    seed: int = 0,
    t_in: int | None = None,
    progress: bool = False,
    solve_resolution: int | None = None,
    **params: Any,
) -> dict[int, Any]:
    """``{r: dataset}``: the same samples at every resolution ``r``.

    A generated benchmark (:data:`GENERATED`) draws ``n_samples`` fresh samples with ``seed`` through the
    generator path of training (:func:`_generate_pairs`): solved once on the grid ``S = lcm(resolutions)``
    and restricted by slicing (``u_r[j] = u_S[j · S / r]``), cached under ``root/generated``; shallow water
    (one grid per solve) is solved at ``nlat = solve_resolution`` (default the coarsest ``r``) and
    spectrally transferred to the other ``nlat`` (the same band-limited states). ``params`` override the
    solver's defaults and ``t_in`` (Navier–Stokes) is the number of input time steps.

    A generated point-set benchmark (:data:`POINT_GENERATED`): ``r`` is the number of points per sample;
    the ``n_samples`` PDE samples (seed ``seed``, solved once at the benchmark's ``fine_resolution``) are
    the same at every ``r``, each evaluated at its own ``r`` random points (drawn per sample and ``r``).

    Anything else goes through :func:`sciattn.pde_data.load` with ``split`` and ``resolution=r`` (each
    benchmark's own subsampling rule; a dataset returned at a multiple of ``r`` is strided).

    Shapes:
        darcy ``x (1, r, r)``, ``y (1, r, r)``; burgers ``x (1, r)``, ``y (1, r)``;
        navier_stokes ``x (t_in, r, r)``, ``y (T - t_in, r, r)`` (time steps as channels);
        coupled_navier_stokes ``x, y (V, r, r)``; shallow_water ``x, y (3, r, 2r)``;
        point sets ``x (r, C_in)``, ``y (r, C_out)``, ``pos (r, 2)``, ``weights (r,)`` per sample.
    """
    if not resolutions:
        raise ValueError("resolutions: expected at least one resolution, got none")
    res = sorted({check_positive_int("resolutions", r) for r in resolutions})
    key = str(name_or_path)
    if key not in GENERATED and key not in POINT_GENERATED:
        kw = {"root": root} if root is not None else {}
        src = resolve_source(key)
        if src.kind == "file" and src.reader is not None and not READERS[src.reader].own_split:
            split = None  # a file without a division of its own: every sample (pde_data.splits)
        return {r: _at_resolution(load(name_or_path, split=split, resolution=r, **kw, **params), r, key)
                for r in res}
    return sample_at_resolutions(key, res, root=root, n_samples=n_samples, seed=seed, progress=progress,
                                 points=key in POINT_GENERATED,
                                 t_in=t_in if key in TIME_SERIES or key in POINT_GENERATED else None,
                                 solve_resolution=solve_resolution, error=ConfigError,
                                 known=tuple(sorted(GENERATORS)), **params)
