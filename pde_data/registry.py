"""One entry point for every benchmark: ``load(name_or_path, split=..., resolution=..., root=...)``.

Named benchmarks are records of the dataset catalogue (:mod:`.catalogue`) with their source, the files
expected under ``root``, the split convention of the paper that introduced them and the shapes of a sample;
``sciattn data list`` prints that table. A path instead of a name is dispatched on the file's content by the
catalogue's formats (:mod:`.formats`: a ``.mat`` header, HDF5 root attributes, a ``.pt`` dict, a NetCDF/Zarr
store). Loaders never download:
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
from collections.abc import Mapping
from pathlib import Path

from torch.utils.data import Dataset

from sciattn._checks import check_choice

from . import catalogue
from .catalogue import XARRAY_SUFFIXES, Probe, Record, catalogue_view
from .transforms.splits import parse_split_rule

__all__ = ["Benchmark", "BENCHMARKS", "register_benchmark", "list_benchmarks", "load", "default_root"]

SPLITS = ("train", "test")


#: The older name of a catalogue record (its first seven fields are the same).
Benchmark = Record

#: The datasets :func:`load` accepts by name: a live view of the catalogue's records that have a loader.
BENCHMARKS: Mapping[str, Record] = catalogue_view(lambda r: r.loader is not None)


def register_benchmark(benchmark: Record) -> Record:
    if catalogue.get(benchmark.name) is not None:
        raise ValueError(f"name: benchmark {benchmark.name!r} is already registered")
    return catalogue.register(benchmark)


def list_benchmarks() -> list[Record]:
    return [BENCHMARKS[k] for k in sorted(BENCHMARKS)]


def default_root() -> Path:
    return Path(os.environ.get("SCIATTN_DATA", "~/.cache/sciattn/data")).expanduser()


def _unreadable(path: Path):
    from sciattn._checks import unreadable_file

    return lambda what, lib, err: unreadable_file("name_or_path", path, what, lib, err)


def _load_path(path: Path, split: str | None, resolution: int | None, split_rule: str | None = None,
               **kwargs) -> Dataset:
    """Dispatch a file on its content: the first catalogue format whose ``detect`` accepts it."""
    from sciattn._checks import check_data_file

    if not (path.is_dir() or path.suffix in XARRAY_SUFFIXES):
        check_data_file("name_or_path", path)
    probe = Probe(path, _unreadable(path))
    record = catalogue.detect(probe, "name_or_path")
    if record is None:
        raise ValueError(
            f"name_or_path: could not tell the format of {str(path)!r}; expected a registered benchmark name "
            f"({sorted(BENCHMARKS)}) or a .mat, HDF5, .pt, NetCDF or Zarr file"
        )
    return record.open(path, probe, split, resolution, split_rule, **kwargs)


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
