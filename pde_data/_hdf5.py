"""HDF5 plumbing shared by the readers and the generators' caches.

* :func:`open_hdf5` opens a file read-only and turns h5py's ``OSError`` into a ``ValueError``
  naming the path.
* :func:`cached_pairs` is the solvers' cache: one HDF5 file ``<prefix>_<hash>.h5`` per set of
  parameters, holding ``<input_key>_{r}`` and ``u_{r}`` for every resolution ``r`` plus every
  parameter as a root attribute, written atomically and read back when the attributes match.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import h5py
import numpy as np

from sciattn._checks import check_data_file, unreadable_file
from sciattn._io import atomic_path

__all__ = ["where", "open_hdf5", "attrs_match", "cached_pairs"]


def where(p: Path) -> str:
    return f"path: {str(p)!r}"


def open_hdf5(p: Path) -> h5py.File:
    """``h5py.File(p, "r")``; a missing, empty or unreadable file is one line naming the path and the cause."""
    check_data_file("path", p)
    try:
        return h5py.File(p, "r")
    except OSError as e:
        raise unreadable_file("path", p, "an HDF5 file", "HDF5", e) from None


def attrs_match(attrs: Mapping, params: Mapping) -> bool:
    """Whether the HDF5 attributes hold exactly ``params`` (lists, strings and numbers)."""
    for key, want in params.items():
        if key not in attrs:
            return False
        got = attrs[key]
        if isinstance(got, bytes):
            got = got.decode()
        if isinstance(want, list):
            if list(np.atleast_1d(np.asarray(got)).tolist()) != want:
                return False
        elif isinstance(want, str):
            if str(got) != want:
                return False
        elif np.asarray(got).item() != want:
            return False
    return True


def cached_pairs(
    cache_dir: str | os.PathLike,
    prefix: str,
    meta: dict,
    res: list[int],
    make: Callable[[], dict[int, tuple[np.ndarray, np.ndarray]]],
    *,
    input_key: str = "a",
    extra: Mapping[str, np.ndarray] | None = None,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``{r: (input, output)}`` from ``cache_dir/<prefix>_<hash of meta>.h5``, or from ``make()``
    (then written, with ``extra`` datasets and ``meta`` as attributes). A file whose attributes
    differ from ``meta`` is regenerated with a warning."""
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"cache_dir: expected a path (str or os.PathLike), got {type(cache_dir).__name__}")
    cache = Path(cache_dir)
    if cache.exists() and not cache.is_dir():
        raise ValueError(f"cache_dir: expected a directory, got {str(cache)!r} (an existing file)")
    cache.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
    path = cache / f"{prefix}_{digest}.h5"
    if path.is_file():
        try:
            with open_hdf5(path) as fh:
                if attrs_match(fh.attrs, meta):
                    return {r: (fh[f"{input_key}_{r}"][()], fh[f"u_{r}"][()]) for r in res}
            warnings.warn(f"{path}: cached parameters differ from the request; regenerating", stacklevel=3)
        except (ValueError, OSError, KeyError) as err:  # a cache is derived data: a damaged one is solved again
            warnings.warn(f"{path}: the cached file cannot be read ({err}); regenerating", stacklevel=3)
    data = make()
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as fh:
        for key, value in meta.items():
            fh.attrs[key] = np.asarray(value, dtype=np.int64) if isinstance(value, list) else value
        for key, value in (extra or {}).items():
            fh.create_dataset(key, data=value)
        for r, (a, u) in data.items():
            fh.create_dataset(f"{input_key}_{r}", data=a)
            fh.create_dataset(f"u_{r}", data=u)
    return data


def uniform_step(values) -> float | None:
    """The spacing of uniformly spaced times (at least two, increasing), else ``None``: a reader's ``dt``."""
    import numpy as np

    try:
        t = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return None
    if t.size < 2:
        return None
    steps = np.diff(t)
    h = float(steps[0])
    if not h > 0 or not np.allclose(steps, h, rtol=1e-6, atol=0.0):
        return None
    return h
