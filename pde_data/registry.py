"""One entry point for every benchmark: ``load(name_or_path, split=..., resolution=..., root=...)``.

Named benchmarks are registered with their source, the files expected under ``root``, the split
convention of the paper that introduced them and the shapes of a sample; ``sciattn data list``
prints that table. A path instead of a name is dispatched on the file's content (a ``.mat``
header, HDF5 root attributes, a ``.pt`` dict, a NetCDF/Zarr store). Loaders never download:
``sciattn data fetch`` does that, separately.

``root`` defaults to ``$SCIATTN_DATA`` or ``~/.cache/sciattn/data``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torch.utils.data import Dataset

from sciattn._checks import check_choice

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


def _load_path(path: Path, split: str, resolution: int | None, **kwargs) -> Dataset:
    """Dispatch a file on its content."""
    from sciattn._checks import check_file

    if path.is_dir() or path.suffix in (".nc", ".nc4", ".zarr", ".cdf"):
        from .xarray_data import load_xarray

        return load_xarray(path, **kwargs)
    check_file("name_or_path", path)
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"MATLAB"):
        from .fno_mat import load_fno_burgers, load_fno_darcy, load_fno_navier_stokes, mat_variables

        keys = mat_variables(path)
        if "coeff" in keys and "sol" in keys:
            return load_fno_darcy(path, resolution=resolution, split=split, **kwargs)
        if "a" in keys and "u" in keys and keys["u"] is not None and len(keys["u"]) == 2:
            return load_fno_burgers(path, split=split, resolution=resolution, **kwargs)
        if "u" in keys and keys["u"] is not None and len(keys["u"]) == 4:
            return load_fno_navier_stokes(path, split=split, resolution=resolution, **kwargs)
        raise ValueError(f"name_or_path: {str(path)!r} is a MAT-file with keys {sorted(keys)}, which match no FNO "
                         "benchmark (Darcy coeff/sol, Burgers a/u, Navier-Stokes u (N, X, Y, T))")
    if head.startswith(b"\x89HDF"):
        import h5py

        with h5py.File(path, "r") as fh:
            is_well = "n_spatial_dims" in fh.attrs and "t0_fields" in fh
        if is_well:
            from .the_well import TheWellDataset

            return TheWellDataset(path, **kwargs)
        from .pdebench import PDEBenchWindowDataset

        return PDEBenchWindowDataset(path, split=split, **kwargs)
    if path.suffix == ".pt":
        return _load_pt(path, resolution, **kwargs)
    raise ValueError(
        f"name_or_path: could not tell the format of {str(path)!r}; expected a registered benchmark name "
        f"({sorted(BENCHMARKS)}) or a .mat, HDF5, .pt, NetCDF or Zarr file"
    )


def _load_pt(path: Path, resolution: int | None, **kwargs) -> Dataset:
    """neuraloperator ``.pt`` files: a dict with ``x``/``y`` (a ``y`` with one more axis than ``x``
    carries time steps as channels, e.g. the mini Burgers files), or the list of dicts of
    ``mini_car.pt``."""
    import torch

    from .neuralop_pt import load_neuralop_pt

    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for corrupt files
        raise ValueError(f"name_or_path: could not read {str(path)!r} as a torch .pt file: {err}") from None
    if isinstance(raw, list):
        from .shapenet_car import load_mini_car

        return load_mini_car(path, **kwargs)
    if isinstance(raw, dict) and "x" in raw and "y" in raw and raw["y"].dim() == raw["x"].dim() + 1:
        kwargs.setdefault("channel_squeezed", (True, False))
    return _subsample_grid(load_neuralop_pt(path, **kwargs), resolution, path)


def _subsample_grid(ds, resolution: int | None, path: Path):
    """Stride a periodic-layout grid dataset to ``resolution`` (neuraloperator's ``[::rate]``)."""
    if resolution is None or ds.resolution[0] == resolution:
        return ds
    from .grid_dataset import GridPairDataset

    n = ds.resolution[0]
    if n % resolution:
        allowed = [r for r in range(1, n + 1) if n % r == 0]
        raise ValueError(f"resolution: {str(path)!r} stores {n} points per axis; expected one of {allowed}, "
                         f"got {resolution}")
    sl = (slice(None), slice(None)) + (slice(None, None, n // resolution),) * len(ds.resolution)
    return GridPairDataset(ds.x[sl], ds.y[sl], {**ds.meta, "resolution": resolution})


def load(
    name_or_path: str | os.PathLike,
    split: str = "train",
    resolution: int | None = None,
    root: str | os.PathLike | None = None,
    **kwargs,
) -> Dataset:
    """Load a registered benchmark by name, or any supported file by path.

    Args:
        name_or_path: a name from :func:`list_benchmarks` or a file path.
        split: ``"train"`` or ``"test"``, with the benchmark's own convention.
        resolution: points per axis, subsampled with the benchmark's own convention.
        root: the folder holding a named benchmark's files (default :func:`default_root`).
        kwargs: passed to the benchmark's loader (e.g. ``n_train``, ``t_in``).
    """
    check_choice("split", split, SPLITS)
    key = str(name_or_path)
    if key in BENCHMARKS:
        return BENCHMARKS[key].loader(Path(root).expanduser() if root else default_root(), split, resolution,
                                      **kwargs)
    path = Path(name_or_path).expanduser()
    if not path.exists() and os.sep not in key and "." not in key:
        raise ValueError(f"name_or_path: expected a registered benchmark, one of {sorted(BENCHMARKS)}, "
                         f"or an existing file, got {key!r}")
    return _load_path(path, split, resolution, **kwargs)
