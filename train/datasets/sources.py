"""What a ``[data] train = ...`` string names: a record of the dataset catalogue
(:mod:`sciattn.pde_data.catalogue`) — a built-in generator, a registered benchmark, or the file format a path is
detected as — and which keyword options that record's reader or generator takes.

Three kinds of source (:func:`resolve_source`):

* ``"generated"``: a built-in solver (:data:`GENERATORS`), solved once at the finest requested grid
  and restricted, so every resolution holds the same samples;
* ``"benchmark"``: another name registered with :func:`sciattn.pde_data.load` (real files under
  ``root``, or the point-set generators ``darcy_irregular`` / ``navier_stokes_irregular``);
* ``"file"``: a path, dispatched on its content exactly as :func:`sciattn.pde_data.load` does
  (:func:`detect_reader`); a NetCDF/Zarr path goes to the xarray reader by its suffix, never to
  ``torch.load``.

:func:`option_names` lists the keyword options a source accepts, read from the signatures of its
reader or solver, so ``[data] options`` can be checked when the config loads.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciattn.pde_data import catalogue
from sciattn.pde_data.catalogue import XARRAY_SUFFIXES, Probe, Record, catalogue_view
from sciattn.pde_data.registry import BENCHMARKS

__all__ = ["Source", "READERS", "GENERATORS", "RESERVED_OPTIONS", "resolve_source", "detect_reader",
           "option_names", "generator_option_names", "benchmark_parameters"]

#: Options set by their own ``[data]`` keys, never through ``[data] options``.
RESERVED_OPTIONS = {
    "split": "data.test / data.split_rule", "split_rule": "data.split_rule", "resolution": "data.resolution", "root": "data.root",
    "n_train": "data.n_train", "n_test": "data.n_test", "n_samples": "data.n_train / data.n_test",
    "seed": "data.seed", "progress": "(always set by the trainer)", "cache_dir": "data.cache_dir",
    "nlat": "data.resolution", "nlon": "data.resolution (nlon = 2 nlat)", "n_points": "data.resolution",
    "path": "data.train", "path_or_dir": "data.train",
}

#: the catalogue's file formats, by name (records with ``detect``; :mod:`sciattn.pde_data.formats`)
READERS: Mapping[str, Record] = catalogue_view(lambda r: r.detect is not None)
#: the built-in grid generators trained from ``[data] train = "<name>"`` (records of kind ``"generator"``)
GENERATORS: Mapping[str, Record] = catalogue_view(lambda r: r.kind == "generator")


@dataclass(frozen=True)
class Source:
    """``kind`` is ``"generated"``, ``"benchmark"`` or ``"file"``; ``name`` the generator or benchmark
    name, or the file's path as given; ``path`` the absolute path of a file; ``reader`` its reader."""

    kind: str
    name: str
    path: Path | None = None
    reader: str | None = None

    @property
    def reader_info(self) -> Record | None:
        return READERS.get(self.reader) if self.reader else None


def _unreadable(p: Path):
    def error(what: str, lib: str, err: BaseException) -> Exception:
        if lib == "HDF5":
            return err
        return ValueError(f"path: could not read {str(p)!r} as {what}: {err}")

    return error


def detect_reader(path: str | os.PathLike) -> str:
    """The :data:`READERS` name of the file at ``path``, by its content (the catalogue's detection, as
    :func:`sciattn.pde_data.load` dispatches it); a NetCDF/Zarr suffix or a directory is ``"xarray"``."""
    p = Path(path).expanduser()
    if not (p.is_dir() or p.suffix in XARRAY_SUFFIXES or p.is_file()):
        raise FileNotFoundError(f"path: expected an existing file, got {str(p)!r}")
    record = catalogue.detect(Probe(p, _unreadable(p)), "path")
    if record is None:
        raise ValueError(f"path: could not tell the format of {str(p)!r}; expected a .mat (FNO), HDF5 (PDEBench, The "
                         "Well), .pt (neuraloperator, mini_car) or NetCDF/Zarr (xarray) file")
    return record.name


def resolve_source(spec: str, *, fmt: str = "auto") -> Source:
    """Classify ``spec`` (a ``[data] train``/``test`` string). A path that does not exist yet is a file
    source with ``reader=None`` (checked again when the data is built)."""
    if fmt == "darcy_solver":
        return Source("generated", "darcy")
    if spec in GENERATORS and fmt == "auto":
        return Source("generated", spec)
    if spec in BENCHMARKS and fmt == "auto":
        return Source("benchmark", spec)
    path = Path(spec).expanduser().resolve()
    from sciattn.pde_data.presets import PRESETS

    if spec in PRESETS and fmt == "auto" and not path.exists():
        raise ValueError(f"data.train / data.test: {spec!r} is a data preset, not a source; write it first with `sciattn data "
                         f"generate {spec} --n N --resolution {PRESETS[spec].resolution} --out DIR` and point data.train "
                         f"to the written DIR/{spec}_{PRESETS[spec].resolution}.nc")
    if fmt == "neuralop_pt":
        return Source("file", spec, path, "neuralop_pt")
    if path.suffix in XARRAY_SUFFIXES:
        return Source("file", spec, path, "xarray")
    return Source("file", spec, path, detect_reader(path) if path.exists() else None)


def _params(fn: Callable[..., Any]) -> tuple[set[str], bool]:
    sig = inspect.signature(fn)
    names = {k for k, p in sig.parameters.items()
             if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and k != "self"}
    return names, any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


def benchmark_parameters(name: str) -> set[str]:
    """Every keyword a registered benchmark's loader takes, including those it forwards (to its ``target``)."""
    record = catalogue.get(name)
    names, _ = _params(record.loader)
    return names | (_params(record.target())[0] if record.target is not None else set())


def generator_option_names(name: str) -> set[str]:
    return GENERATORS[name].options()


def option_names(source: Source) -> set[str] | None:
    """The keyword options ``source`` accepts (without :data:`RESERVED_OPTIONS`); ``None`` when it
    cannot be known yet (a file that does not exist)."""
    if source.kind == "generated":
        names = generator_option_names(source.name)
    elif source.kind == "benchmark":
        record = catalogue.get(source.name)
        names = benchmark_parameters(source.name)
        if record.points and record.options is not None:  # a point-set generator forwards its solver's options
            names |= record.options()
    else:
        if source.reader is None:
            return None
        names, _ = _params(READERS[source.reader].target())
    return names - set(RESERVED_OPTIONS)
