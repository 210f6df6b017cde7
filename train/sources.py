"""What a ``[data] train = ...`` string names: a built-in generator, a registered benchmark or a file,
which reader a file goes to, and which keyword options that reader or generator takes.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Source", "Reader", "READERS", "GENERATORS", "RESERVED_OPTIONS", "resolve_source", "detect_reader",
           "option_names", "generator_option_names", "benchmark_parameters"]

#: Options set by their own ``[data]`` keys, never through ``[data] options``.
RESERVED_OPTIONS = {
    "split": "data.test / data.split_rule", "split_rule": "data.split_rule", "resolution": "data.resolution", "root": "data.root",
    "n_train": "data.n_train", "n_test": "data.n_test", "n_samples": "data.n_train / data.n_test",
    "seed": "data.seed", "progress": "(always set by the trainer)", "cache_dir": "data.cache_dir",
    "nlat": "data.resolution", "nlon": "data.resolution (nlon = 2 nlat)", "n_points": "data.resolution",
    "path": "data.train", "path_or_dir": "data.train",
}

XARRAY_SUFFIXES = (".nc", ".nc4", ".zarr", ".cdf")


@dataclass(frozen=True)
class Reader:
    """A file reader: ``splits`` — it applies a train/test split of its own; ``resolution`` — it
    subsamples to ``resolution`` itself; ``target`` — the function whose keywords it accepts."""

    name: str
    target: Callable[[], Callable[..., Any]]
    splits: bool
    resolution: bool


def _fno(fn: str):
    def get():
        from sciattn.pde_data import fno_mat

        return getattr(fno_mat, fn)

    return get


def _pdebench():
    from sciattn.pde_data.pdebench import PDEBenchWindowDataset

    return PDEBenchWindowDataset


def _the_well():
    from sciattn.pde_data.the_well import TheWellDataset

    return TheWellDataset


def _neuralop():
    from sciattn.pde_data.neuralop_pt import load_neuralop_pt

    return load_neuralop_pt


def _mini_car():
    from sciattn.pde_data.shapenet_car import load_mini_car

    return load_mini_car


def _xarray():
    from sciattn.pde_data.xarray_data import XarrayDataset

    return XarrayDataset


READERS: dict[str, Reader] = {r.name: r for r in [
    Reader("fno_darcy_mat", _fno("load_fno_darcy"), splits=False, resolution=True),
    Reader("fno_burgers_mat", _fno("load_fno_burgers"), splits=True, resolution=True),
    Reader("fno_navier_stokes_mat", _fno("load_fno_navier_stokes"), splits=True, resolution=True),
    Reader("pdebench", _pdebench, splits=True, resolution=False),
    Reader("the_well", _the_well, splits=False, resolution=False),
    Reader("neuralop_pt", _neuralop, splits=False, resolution=True),
    Reader("mini_car", _mini_car, splits=False, resolution=False),
    Reader("xarray", _xarray, splits=False, resolution=False),
]}


def _defaults(module: str, name: str, *extra: str) -> Callable[[], set[str]]:
    def get() -> set[str]:
        import importlib

        mod = importlib.import_module(f"sciattn.pde_data.{module}")
        table = getattr(mod, name)
        keys = set(table) if not isinstance(next(iter(table.values())), dict) else set().union(*table.values())
        return keys | set(extra)

    return get


#: Built-in generators trained from ``[data] train = "<name>"``: name -> the solver options they take.
GENERATORS: dict[str, Callable[[], set[str]]] = {
    "darcy": _defaults("darcy", "DARCY_DEFAULTS", "fine_resolution"),
    "darcy_neuralop": _defaults("darcy_neuralop", "NEURALOP_DARCY_FIT", "fine_resolution"),
    "burgers": _defaults("burgers", "BURGERS_DEFAULTS", "fine_resolution", "batch_size"),
    "navier_stokes": _defaults("navier_stokes", "NS_DEFAULTS", "fine_resolution", "batch_size", "t_in"),
    "shallow_water": _defaults("shallow_water", "SWE_DEFAULTS", "grid", "dt", "n_steps_between", "lmax", "spinup",
                               "n_traj", "traj_len", "batch_size"),
    "coupled_navier_stokes": _defaults("coupled_navier_stokes", "COUPLED_DEFAULTS", "system", "fine_resolution",
                                       "batch_size"),
}


@dataclass(frozen=True)
class Source:
    """``kind`` is ``"generated"``, ``"benchmark"`` or ``"file"``; ``name`` the generator or benchmark
    name, or the file's path as given; ``path`` the absolute path of a file; ``reader`` its reader."""

    kind: str
    name: str
    path: Path | None = None
    reader: str | None = None

    @property
    def reader_info(self) -> Reader | None:
        return READERS.get(self.reader) if self.reader else None


def detect_reader(path: str | os.PathLike) -> str:
    """The :data:`READERS` name of the file at ``path``, by its content (as :func:`sciattn.pde_data.load`
    dispatches it); a NetCDF/Zarr suffix or a directory is ``"xarray"``."""
    p = Path(path).expanduser()
    if p.is_dir() or p.suffix in XARRAY_SUFFIXES:
        return "xarray"
    if not p.is_file():
        raise FileNotFoundError(f"path: expected an existing file, got {str(p)!r}")
    with open(p, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"MATLAB"):
        from sciattn.pde_data.fno_mat import mat_variables

        keys = mat_variables(p)
        if "coeff" in keys and "sol" in keys:
            return "fno_darcy_mat"
        if "a" in keys and "u" in keys and keys["u"] is not None and len(keys["u"]) == 2:
            return "fno_burgers_mat"
        if "u" in keys and keys["u"] is not None and len(keys["u"]) == 4:
            return "fno_navier_stokes_mat"
        raise ValueError(f"path: {str(p)!r} is a MAT-file with keys {sorted(keys)}, which match no FNO benchmark "
                         "(Darcy coeff/sol, Burgers a/u, Navier-Stokes u (N, X, Y, T))")
    if head.startswith(b"\x89HDF"):
        import h5py

        with h5py.File(p, "r") as fh:
            if "n_spatial_dims" in fh.attrs and "t0_fields" in fh:
                return "the_well"
            if "sciattn_inputs" in fh.attrs:  # NetCDF-4 written without a NetCDF suffix
                return "xarray"
        return "pdebench"
    if head.startswith(b"CDF"):
        return "xarray"
    if p.suffix == ".pt" or head.startswith(b"PK"):
        import torch

        try:
            raw = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises several types for corrupt files
            raise ValueError(f"path: could not read {str(p)!r} as a torch .pt file: {err}") from None
        return "mini_car" if isinstance(raw, (list, tuple)) else "neuralop_pt"
    raise ValueError(f"path: could not tell the format of {str(p)!r}; expected a .mat (FNO), HDF5 (PDEBench, The "
                     "Well), .pt (neuraloperator, mini_car) or NetCDF/Zarr (xarray) file")


def resolve_source(spec: str, *, fmt: str = "auto") -> Source:
    """Classify ``spec`` (a ``[data] train``/``test`` string). A path that does not exist yet is a file
    source with ``reader=None`` (checked again when the data is built)."""
    from sciattn.pde_data.registry import BENCHMARKS

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


# registered benchmarks whose loader forwards **kwargs to another function: what that function takes
_BENCHMARK_TARGETS: dict[str, Callable[[], Callable[..., Any]]] = {
    "fno_burgers": _fno("load_fno_burgers"),
    "shapenet_car": lambda: __import__("sciattn.pde_data.shapenet_car", fromlist=["x"]).load_shapenet_car,
    "the_well": _the_well,
    "darcy_irregular": lambda: __import__("sciattn.pde_data.irregular", fromlist=["x"]).generate_darcy_irregular,
    "navier_stokes_irregular":
        lambda: __import__("sciattn.pde_data.irregular", fromlist=["x"]).generate_navier_stokes_irregular,
}


def _benchmark_target(name: str):
    if name in _BENCHMARK_TARGETS:
        return _BENCHMARK_TARGETS[name]()
    if name.startswith("fno_navier_stokes_"):
        return _fno("load_fno_navier_stokes")()
    if name.startswith("geofno_"):
        from sciattn.pde_data import geofno

        return getattr(geofno, {"airfoil": "load_airfoil", "pipe": "load_pipe", "elasticity": "load_elasticity",
                                "plasticity": "load_plasticity"}[name[len("geofno_"):]])
    return None


def benchmark_parameters(name: str) -> set[str]:
    """Every keyword a registered benchmark's loader takes, including those it forwards."""
    from sciattn.pde_data.registry import BENCHMARKS

    names, _ = _params(BENCHMARKS[name].loader)
    target = _benchmark_target(name)
    return names | (_params(target)[0] if target is not None else set())


def generator_option_names(name: str) -> set[str]:
    return GENERATORS[name]()


def option_names(source: Source) -> set[str] | None:
    """The keyword options ``source`` accepts (without :data:`RESERVED_OPTIONS`); ``None`` when it
    cannot be known yet (a file that does not exist)."""
    if source.kind == "generated":
        names = generator_option_names(source.name)
    elif source.kind == "benchmark":
        from sciattn.pde_data.registry import BENCHMARKS

        names, var_kw = _params(BENCHMARKS[source.name].loader)
        target = _benchmark_target(source.name)
        if target is not None:
            more, var_kw = _params(target)
            names |= more
        if var_kw and source.name in ("darcy_irregular", "navier_stokes_irregular"):
            base = "darcy" if source.name.startswith("darcy") else "navier_stokes"
            names |= generator_option_names(base) - {"fine_resolution", "batch_size", "t_in"}
        if source.name == "navier_stokes_irregular":
            names.add("t_in")
    else:
        if source.reader is None:
            return None
        names, _ = _params(READERS[source.reader].target())
    return names - set(RESERVED_OPTIONS)
