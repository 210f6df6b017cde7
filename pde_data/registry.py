"""One entry point for every benchmark: ``load(name_or_path, split=..., resolution=..., root=...)``.

Named benchmarks are registered with their source, the files expected under ``root``, the split
convention of the paper that introduced them and the shapes of a sample; ``sciattn data list``
prints that table. A path instead of a name is dispatched on the file's content (a ``.mat``
header, HDF5 root attributes, a ``.pt`` dict, a NetCDF/Zarr store). Loaders never download:
``sciattn data fetch`` does that, separately.

``root`` defaults to ``$SCIATTN_DATA`` or ``~/.cache/sciattn/data``.

Splits. A registered benchmark and a file with a division of its own (FNO Burgers / Navier-Stokes
``.mat``: head and tail; PDEBench HDF5: ``test_fraction``; a neuraloperator ``{name}_{split}_{res}.pt``,
whose name is its split) follow their convention. A *single-split file* (``mini_car.pt``, a
NetCDF/Zarr store, one HDF5 file of The Well, a ``.pt`` whose name names no split) has none:
``split=None`` takes every sample, and ``split="train"``/``"test"`` are refused unless
``split_rule`` (``"last:K"``, :mod:`sciattn.pde_data.splits`) divides it, so that the two splits
are disjoint and never silently the same samples.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torch.utils.data import Dataset

from sciattn._checks import check_choice

from .splits import SplitSubset, describe_split, parse_split_rule, split_indices

__all__ = ["Benchmark", "BENCHMARKS", "register_benchmark", "list_benchmarks", "load", "default_root"]

SPLITS = ("train", "test")


@dataclass(frozen=True)
class Benchmark:
    """A registered benchmark.

    ``loader(root, split, resolution, **kwargs)`` returns a dataset of sample dicts.
    """

    name: str
    source: str
    files: str
    split: str
    shapes: str
    loader: Callable[..., Dataset]
    resolutions: str = "as stored"


BENCHMARKS: dict[str, Benchmark] = {}


def register_benchmark(benchmark: Benchmark) -> Benchmark:
    if benchmark.name in BENCHMARKS:
        raise ValueError(f"name: benchmark {benchmark.name!r} is already registered")
    BENCHMARKS[benchmark.name] = benchmark
    return benchmark


def list_benchmarks() -> list[Benchmark]:
    return [BENCHMARKS[k] for k in sorted(BENCHMARKS)]


def default_root() -> Path:
    return Path(os.environ.get("SCIATTN_DATA", "~/.cache/sciattn/data")).expanduser()


def _own_division(path: Path, split_rule: str | None, convention: str) -> None:
    if split_rule is not None:
        raise ValueError(f"split_rule: {str(path)!r} has a train/test division of its own ({convention}); "
                         f"expected None, got {split_rule!r}")


def _split_xarray(ds, path: Path, split: str | None, split_rule: str | None):
    idx = split_indices(len(ds), split, split_rule, what=repr(str(path)))
    ds.index = ds.index[list(idx)]
    ds.meta.update(split=split, split_rule=split_rule, split_convention=describe_split(split_rule))
    return ds


def _split_well(ds, path: Path, split: str | None, split_rule: str | None):
    """Divide The Well file(s) by whole trajectories (windows of one trajectory stay on one side)."""
    files = ds.meta["files"]
    units = [(k, t) for k, f in enumerate(files) for t in range(f["n_trajectories"])]
    idx = split_indices(len(units), split, split_rule, what=repr(str(path)), unit="trajectory")
    if split is None:
        return ds
    items = [ds._cum[k] + t * ds._windows[k] + w for k, t in (units[i] for i in idx) for w in range(ds._windows[k])]
    meta = {**ds.meta, "split": split, "split_rule": split_rule, "trajectories": [units[i] for i in idx],
            "split_convention": describe_split(split_rule, "trajectory")}
    return SplitSubset(ds, items, meta)


def _check_reader_kwargs(reader, path: Path, kwargs: dict) -> None:
    """Refuse, in one line, a keyword the reader detected for ``path`` does not take (instead of
    Python's ``reader() got an unexpected keyword argument``), listing those it accepts."""
    import inspect

    try:
        params = inspect.signature(reader).parameters.values()
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    accepted = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in kwargs:
        if key not in accepted:
            raise TypeError(f"{key}: not a keyword of {reader.__name__}, the reader detected for {str(path)!r}; "
                            f"it accepts {sorted(accepted)}")


def _load_path(path: Path, split: str | None, resolution: int | None, split_rule: str | None = None,
               **kwargs) -> Dataset:
    """Dispatch a file on its content."""
    from sciattn._checks import check_data_file, unreadable_file

    if path.is_dir() or path.suffix in (".nc", ".nc4", ".zarr", ".cdf"):
        from .xarray_data import load_xarray

        _check_reader_kwargs(load_xarray, path, kwargs)
        return _split_xarray(load_xarray(path, **kwargs), path, split, split_rule)
    check_data_file("name_or_path", path)
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"MATLAB"):
        _own_division(path, split_rule, "the FNO benchmark's train/test convention")
        split = split or "train"
        from .fno_mat import load_fno_burgers, load_fno_darcy, load_fno_navier_stokes, mat_variables

        keys = mat_variables(path)
        if "coeff" in keys and "sol" in keys:
            _check_reader_kwargs(load_fno_darcy, path, kwargs)
            return load_fno_darcy(path, resolution=resolution, split=split, **kwargs)
        if "a" in keys and "u" in keys and keys["u"] is not None and len(keys["u"]) == 2:
            _check_reader_kwargs(load_fno_burgers, path, kwargs)
            return load_fno_burgers(path, split=split, resolution=resolution, **kwargs)
        if "u" in keys and keys["u"] is not None and len(keys["u"]) == 4:
            _check_reader_kwargs(load_fno_navier_stokes, path, kwargs)
            return load_fno_navier_stokes(path, split=split, resolution=resolution, **kwargs)
        raise ValueError(f"name_or_path: {str(path)!r} is a MAT-file with keys {sorted(keys)}, which match no FNO "
                         "benchmark (Darcy coeff/sol, Burgers a/u, Navier-Stokes u (N, X, Y, T))")
    if head.startswith(b"\x89HDF"):
        import h5py

        try:
            with h5py.File(path, "r") as fh:
                is_well = "n_spatial_dims" in fh.attrs and "t0_fields" in fh
        except OSError as err:  # h5py: truncated or damaged superblock, no path in its message
            raise unreadable_file("name_or_path", path, "an HDF5 file", "HDF5", err) from None
        if is_well:
            from .the_well import TheWellDataset

            _check_reader_kwargs(TheWellDataset, path, kwargs)
            return _split_well(TheWellDataset(path, **kwargs), path, split, split_rule)
        from .pdebench import PDEBenchWindowDataset

        _own_division(path, split_rule, "PDEBench's test_fraction")
        _check_reader_kwargs(PDEBenchWindowDataset, path, kwargs)
        return PDEBenchWindowDataset(path, split=split or "train", **kwargs)
    if path.suffix == ".pt":
        return _load_pt(path, split, resolution, split_rule, **kwargs)
    raise ValueError(
        f"name_or_path: could not tell the format of {str(path)!r}; expected a registered benchmark name "
        f"({sorted(BENCHMARKS)}) or a .mat, HDF5, .pt, NetCDF or Zarr file"
    )


def _load_pt(path: Path, split: str | None, resolution: int | None, split_rule: str | None, **kwargs) -> Dataset:
    """neuraloperator ``.pt`` files: a dict with ``x``/``y`` (a ``y`` with one more axis than ``x``
    carries time steps as channels, e.g. the mini Burgers files), or the list of dicts of
    ``mini_car.pt``.

    A file named ``{name}_{split}_{res}.pt`` is that split: ``split`` must be it (or None); another
    ``.pt`` is a single-split file. ``split_rule`` divides either kind."""
    import torch

    from sciattn._checks import unreadable_file

    from .grid_dataset import GridPairDataset
    from .neuralop_pt import load_neuralop_pt, parse_neuralop_name

    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for corrupt files
        raise unreadable_file("name_or_path", path, "a torch .pt file", "torch", err) from None
    if isinstance(raw, dict):
        for key in ("x", "y"):
            if key in raw and not isinstance(raw[key], torch.Tensor):
                raise ValueError(f"{key}: expected a tensor in {str(path)!r}, got {type(raw[key]).__name__}")
    if isinstance(raw, list):
        from .shapenet_car import load_mini_car

        _check_reader_kwargs(load_mini_car, path, kwargs)
        return load_mini_car(path, split, split_rule=split_rule, **kwargs)
    if isinstance(raw, dict) and "x" in raw and "y" in raw and raw["y"].dim() == raw["x"].dim() + 1:
        kwargs.setdefault("channel_squeezed", (True, False))
    _check_reader_kwargs(load_neuralop_pt, path, kwargs)
    ds = load_neuralop_pt(path, **kwargs)
    named = parse_neuralop_name(path)
    if split_rule is None and named is not None:
        if split not in (None, named[1]):
            raise ValueError(f"split: {str(path)!r} holds the {named[1]!r} split (neuraloperator names its files "
                             f"{{name}}_{{split}}_{{res}}.pt), got split={split!r}; expected {named[1]!r} or None, "
                             "the matching file, or a split_rule to divide this one")
    else:
        idx = split_indices(len(ds), split, split_rule, what=repr(str(path)))
        sel = torch.as_tensor(list(idx), dtype=torch.long)
        meta = {**ds.meta, "split": split, "split_rule": split_rule, "indices": list(idx),
                "split_convention": describe_split(split_rule)}
        ds = GridPairDataset(ds.x[sel], ds.y[sel], meta)
    return _subsample_grid(ds, resolution, path)


def _subsample_grid(ds, resolution: int | None, path: Path):
    """Stride a periodic-layout grid dataset to ``resolution`` (neuraloperator's ``[::rate]``)."""
    if resolution is None or ds.resolution[0] == resolution:
        return ds
    from .grid_dataset import GridPairDataset

    n = ds.resolution[0]
    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution <= 0 or n % resolution:
        allowed = [r for r in range(1, n + 1) if n % r == 0]
        raise ValueError(f"resolution: {str(path)!r} stores {n} points per axis; expected one of {allowed}, "
                         f"got {resolution}")
    sl = (slice(None), slice(None)) + (slice(None, None, n // resolution),) * len(ds.resolution)
    return GridPairDataset(ds.x[sl], ds.y[sl], {**ds.meta, "resolution": resolution})


def load(
    name_or_path: str | os.PathLike,
    split: str | None = None,
    resolution: int | None = None,
    root: str | os.PathLike | None = None,
    *,
    split_rule: str | None = None,
    **kwargs,
) -> Dataset:
    """Load a registered benchmark by name, or any supported file by path.

    Args:
        name_or_path: a name from :func:`list_benchmarks` or a file path.
        split: ``"train"`` or ``"test"``, with the benchmark's (or file's) own convention. For a
            single-split file (module docstring) ``"train"``/``"test"`` need ``split_rule``.
            ``None`` (the default) asks for no particular split: a benchmark's, or a divided
            file's, train split; a ``{name}_{split}_{res}.pt`` file as it is; every sample of a
            single-split file.
        resolution: points per axis, subsampled with the benchmark's own convention.
        root: the folder holding a named benchmark's files (default :func:`default_root`).
        split_rule: divides a file without a division of its own: ``"last:K"`` (test = the last K
            samples, train = the rest; :mod:`sciattn.pde_data.splits`). Refused for benchmarks and
            files that have their own division.
        kwargs: passed to the benchmark's loader (e.g. ``n_train``, ``t_in``).
    """
    key = str(name_or_path)
    if split is not None:
        check_choice("split", split, SPLITS)
    if split_rule is not None:
        parse_split_rule(split_rule)
    if key in BENCHMARKS:
        if split_rule is not None:
            raise ValueError(f"split_rule: benchmark {key!r} has its own split ({BENCHMARKS[key].split}); "
                             f"expected None, got {split_rule!r}")
        split = split or "train"
        return BENCHMARKS[key].loader(Path(root).expanduser() if root else default_root(), split, resolution,
                                      **kwargs)
    path = Path(name_or_path).expanduser()
    if not path.exists() and os.sep not in key and "." not in key:
        raise ValueError(f"name_or_path: expected a registered benchmark, one of {sorted(BENCHMARKS)}, "
                         f"or an existing file, got {key!r}")
    return _load_path(path, split, resolution, split_rule, **kwargs)
