"""Lazy time-window reader for PDEBench HDF5 files (Takamoto et al. 2022).

Layouts (detected from the HDF5 contents by :func:`pdebench_layout`, never from the file name)

``"single"``
    Root dataset ``tensor`` of shape ``(N, T, X1, ...)`` (one scalar variable), optional 1-D
    coordinate datasets ``x-coordinate``, ``y-coordinate``, ``z-coordinate``, ``t-coordinate``
    (the last may hold ``T + 1`` entries). Advection, Burgers, 1-D diffusion-reaction.
``"cfd"``
    Compressible Navier-Stokes: one root dataset per variable, each ``(N, T, X1, ...)``:
    ``density``, ``pressure``, ``Vx`` (+ ``Vy`` in 2-D, + ``Vz`` in 3-D), plus the coordinate
    datasets above. Variables are stacked in PDEBench's order
    ``[density, pressure, Vx, Vy, Vz]`` (:data:`CFD_VARIABLES`) unless ``variables`` says otherwise.
``"darcy"``
    2-D Darcy flow (steady): root datasets ``nu`` ``(N, X, Y)`` (the coefficient, the input)
    and ``tensor`` ``(N, 1, X, Y)`` (the solution, the output; ``(N, X, Y)`` is accepted too).
``"seed_groups"``
    Every root member is a group named by zero-padded seed (``"0000"``, ``"0001"``, ...) holding
    ``data`` ``(T, X1, ..., C)`` (variables LAST) and ``grid/x``, (``grid/y``, ``grid/z``),
    ``grid/t``. Radial dam break, 2-D diffusion-reaction, 1-D diffusion-sorption.

Split conventions (those of PDEBench's own loaders; they differ between layouts)

* single, cfd, darcy (``FNODatasetSingle``): ``k = int(N * test_fraction)``; test = the FIRST
  ``k`` samples ``[0, k)``, train = the rest ``[k, N)``.
* seed_groups (``FNODatasetMult``): group names sorted, ``k = int(G * (1 - test_fraction))``;
  train = the first ``k`` groups, test = the LAST ``G - k`` groups.

Samples (:class:`PDEBenchWindowDataset`)

``{"x": (C * t_in, *spatial), "y": (C * t_out, *spatial)}``, float32, channels first: ``x`` holds
``t_in`` consecutive (time-strided) frames of all ``C`` variables and ``y`` the next ``t_out``
frames, as autoregressive training pairs (PDEBench's ``initial_step``). Channels are TIME-MAJOR:
channel ``k * C + v`` holds frame ``k`` of the window and variable ``v``. Every valid window start of
every sample of the split is one item, sample-major: item ``i`` is sample ``i // W`` of the split
at window start ``i % W`` (``W`` windows per sample). For Darcy an item is ``x = nu`` ``(1, X, Y)``
and ``y = tensor`` ``(1, X, Y)``.

The dataset keeps only the path and the metadata; the file is opened on first access in each
process (so DataLoader workers each get their own handle) and every item reads just its own
hyperslab (one sample, the window's frames, strided), never the whole file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import Dataset

from sciattn._checks import check_choice, check_file, check_positive_int

from .._hdf5 import open_hdf5 as _open
from .._hdf5 import uniform_step as _uniform_step
from .._hdf5 import where as _where
from ..grid_dataset import GridPairDataset

__all__ = [
    "CFD_VARIABLES",
    "LAYOUTS",
    "SPLITS",
    "PDEBenchWindowDataset",
    "pdebench_layout",
]

LAYOUTS = ("single", "cfd", "darcy", "seed_groups")
SPLITS = ("train", "test")
#: PDEBench's channel order for the compressible-flow files.
CFD_VARIABLES = ("density", "pressure", "Vx", "Vy", "Vz")
_VELOCITIES = ("Vx", "Vy", "Vz")
_AXES = ("x", "y", "z")

_SPLIT_WORDS = {
    "head": (
        "PDEBench FNODatasetSingle: k = int(N * test_fraction); test = first k samples [0, k), "
        "train = samples [k, N)"
    ),
    "tail": (
        "PDEBench FNODatasetMult: groups sorted by name, k = int(G * (1 - test_fraction)); "
        "train = first k groups, test = last G - k groups"
    ),
}


def _members(g: h5py.Group) -> list[str]:
    return sorted(g.keys())


def _detect(f: h5py.File, p: Path) -> str:
    keys = set(f.keys())
    if "tensor" in keys and isinstance(f["tensor"], h5py.Dataset):
        return "darcy" if "nu" in keys else "single"
    if keys & set(CFD_VARIABLES):
        return "cfd"
    if keys and all(isinstance(f[k], h5py.Group) for k in keys):
        return "seed_groups"
    raise ValueError(
        f"{_where(p)}: not a recognised PDEBench layout; expected a root dataset 'tensor' (single; "
        f"with 'nu': darcy), the datasets {list(CFD_VARIABLES[:3])} (cfd) or only seed groups "
        f"'0000', '0001', ... each with 'data' (seed_groups); root holds {sorted(keys)}"
    )


def pdebench_layout(path: str | os.PathLike) -> str:
    """The layout of a PDEBench HDF5 file: ``"single"``, ``"cfd"``, ``"darcy"`` or ``"seed_groups"``.

    Decided from the contents: root ``tensor`` with ``nu`` is darcy, ``tensor`` alone is single,
    any of ``density``/``pressure``/``Vx``/``Vy``/``Vz`` at the root is cfd, a root made only of
    groups is seed_groups. Raises FileNotFoundError (missing file) or ValueError naming the path
    (not HDF5, truncated, or none of these layouts; the message lists the root members).
    """
    p = check_file("path", path)
    with _open(p) as f:
        return _detect(f, p)


def _split_range(n: int, split: str, test_fraction: float, convention: str) -> range:
    if convention == "head":
        k = int(n * test_fraction)
        return range(0, k) if split == "test" else range(k, n)
    k = int(n * (1 - test_fraction))
    return range(k, n) if split == "test" else range(0, k)


def _n_strided(size: int, stride: int) -> int:
    return math.ceil(size / stride)


class PDEBenchWindowDataset(Dataset):
    """Time-window pairs from one PDEBench HDF5 file, read lazily item by item.

    Parameters
    ----------
    path:
        The ``.hdf5`` / ``.h5`` file; its layout is detected (see the module docstring).
    t_in, t_out:
        Frames in the input and in the target (after ``time_stride``). Must stay 1 for Darcy.
    time_stride:
        Keep every ``time_stride``-th frame (``frames[::time_stride]``; PDEBench's
        ``reduced_resolution_t``). Must stay 1 for Darcy.
    spatial_stride:
        Keep every ``spatial_stride``-th point along every spatial axis (``[::s]``; PDEBench's
        ``reduced_resolution``). Must leave at least 2 points per axis.
    split:
        ``"train"`` or ``"test"``, with the layout's own convention (module docstring).
    test_fraction:
        Fraction of samples (or seed groups) in the test split, in ``(0, 1)``; PDEBench uses 0.1.
    variables:
        cfd only: the variables to stack, in this order (default: those present, in the order
        of :data:`CFD_VARIABLES`).

    Notes
    -----
    Items are ``{"x": (C * t_in, *spatial), "y": (C * t_out, *spatial)}`` float32, channels
    time-major (channel ``k * C + v`` = frame ``k``, variable ``v``); Darcy items are
    ``{"x": nu (1, X, Y), "y": tensor (1, X, Y)}``. ``len`` is (samples in the split) x (window
    starts per sample).

    ``meta`` holds ``source``, ``layout``, ``variables``, ``split``, ``split_convention`` (in words),
    ``samples`` (file indices, or group names), ``windows_per_sample``, ``resolution`` and
    ``grid`` (1-D coordinate arrays ``x``/``y``/``z``/``t`` as found in the file, after striding).

    Raises FileNotFoundError for a missing file and ValueError naming the path for: a file that
    is not HDF5 or is truncated, a missing dataset or group (listing what is present), variables
    of different shapes, ``t_in + t_out`` longer than the (strided) time axis, a spatial stride
    that leaves fewer than 2 points, a split with no samples, or an unknown ``split``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        t_in: int = 1,
        t_out: int = 1,
        time_stride: int = 1,
        spatial_stride: int = 1,
        split: str = "train",
        test_fraction: float = 0.1,
        variables: Sequence[str] | None = None,
    ):
        p = check_file("path", path)
        check_choice("split", split, SPLITS)
        for name, value in (
            ("t_in", t_in),
            ("t_out", t_out),
            ("time_stride", time_stride),
            ("spatial_stride", spatial_stride),
        ):
            check_positive_int(name, value)
        if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)):
            raise TypeError(f"test_fraction: expected a float in (0, 1), got {type(test_fraction).__name__}")
        if not 0.0 < float(test_fraction) < 1.0:
            raise ValueError(f"test_fraction: expected a float in (0, 1), got {test_fraction}")
        self.path = p
        self.t_in, self.t_out = t_in, t_out
        self.time_stride, self.spatial_stride = time_stride, spatial_stride
        self.split = split
        self.test_fraction = float(test_fraction)
        self._file: h5py.File | None = None
        self._pid: int | None = None

        with _open(p) as f:
            self.layout = _detect(f, p)
            if self.layout != "cfd" and variables is not None:
                raise ValueError(
                    f"variables: only the cfd layout has named variables to choose, "
                    f"but {str(p)!r} is {self.layout!r}; got {list(variables)!r}"
                )
            if self.layout == "darcy":
                if (t_in, t_out, time_stride) != (1, 1, 1):
                    raise ValueError(
                        f"{_where(p)}: the darcy layout is steady (no time axis); t_in, t_out and "
                        f"time_stride must stay 1, got {t_in}, {t_out}, {time_stride}"
                    )
                full_spatial, n_frames, grid = self._scan_darcy(f, p)
            elif self.layout == "seed_groups":
                full_spatial, n_frames, grid = self._scan_seeds(f, p)
            else:
                full_spatial, n_frames, grid = self._scan_root(f, p, variables)

        convention = "tail" if self.layout == "seed_groups" else "head"
        rng = _split_range(self._n_file, split, self.test_fraction, convention)
        if len(rng) == 0:
            raise ValueError(
                f"{_where(p)}: split {split!r} is empty: {self._n_file} samples with "
                f"test_fraction={self.test_fraction} ({_SPLIT_WORDS[convention]})"
            )
        self._samples = rng

        # strides
        for axis, size in enumerate(full_spatial):
            if _n_strided(size, spatial_stride) < 2:
                raise ValueError(
                    f"{_where(p)}: spatial_stride={spatial_stride} leaves "
                    f"{_n_strided(size, spatial_stride)} point(s) along spatial axis {axis} "
                    f"(size {size}); need at least 2"
                )
        self.resolution = tuple(_n_strided(s, spatial_stride) for s in full_spatial)
        self._full_spatial = tuple(full_spatial)
        if self.layout == "darcy":
            self._n_windows = 1
            frames = None
        else:
            frames = _n_strided(n_frames, time_stride)
            need = t_in + t_out
            if frames < need:
                after = f" ({frames} after time_stride={time_stride})" if time_stride > 1 else ""
                raise ValueError(
                    f"{_where(p)}: t_in + t_out = {t_in} + {t_out} = {need} frames do not fit in the time "
                    f"axis of {n_frames} frames{after}"
                )
            self._n_windows = frames - need + 1
        self._n_frames = n_frames

        samples: list[Any] = [self._keys[i] for i in rng] if self.layout == "seed_groups" else list(rng)
        self.meta: dict[str, Any] = {
            "source": str(p),
            "format": "pdebench",
            "layout": self.layout,
            "variables": list(self.variables),
            "channel_order": (
                "time-major: channel k * C + v holds frame k of the window and variable v"
                if self.layout != "darcy"
                else "x: nu, y: tensor (one channel each)"
            ),
            "split": split,
            "split_convention": _SPLIT_WORDS[convention],
            "test_fraction": self.test_fraction,
            "n_samples_in_file": self._n_file,
            "samples": samples,
            "t_in": t_in if self.layout != "darcy" else None,
            "t_out": t_out if self.layout != "darcy" else None,
            "time_stride": time_stride,
            "spatial_stride": spatial_stride,
            "n_frames_in_file": n_frames,
            "n_frames": frames,
            "windows_per_sample": self._n_windows,
            "resolution": self.resolution,
            "full_resolution": self._full_spatial,
            "grid": {k: (v[::time_stride] if k == "t" else v[::spatial_stride]) for k, v in grid.items()},
        }
        dt = _uniform_step(self.meta["grid"]["t"]) if "t" in self.meta["grid"] else None
        if dt is not None:  # the time between the taken frames: the file's t-coordinate, strided
            self.meta["dt"] = dt

    # ------------------------------------------------------------------ scanning (metadata only)

    def _coords(self, g: h5py.Group, names: dict[str, str]) -> dict[str, np.ndarray]:
        out = {}
        for key, name in names.items():
            if name in g and isinstance(g[name], h5py.Dataset) and g[name].ndim == 1:
                out[key] = np.asarray(g[name][()], dtype=np.float64)
        return out

    def _scan_root(self, f: h5py.File, p: Path, variables: Sequence[str] | None):
        present = _members(f)
        if self.layout == "single":
            names = ["tensor"]
        else:
            ref = next(v for v in CFD_VARIABLES if v in f)
            if not isinstance(f[ref], h5py.Dataset) or f[ref].ndim < 3:
                raise ValueError(
                    f"{_where(p)}: dataset {ref!r}: expected (N, T, X, ...), got "
                    f"{getattr(f[ref], 'shape', 'a group')}"
                )
            d = f[ref].ndim - 2
            if d > 3:
                raise ValueError(
                    f"{_where(p)}: dataset {ref!r}: expected 1 to 3 spatial axes, got shape {f[ref].shape}"
                )
            required = ["density", "pressure", *_VELOCITIES[:d]]
            missing = [v for v in required if v not in f]
            if missing:
                raise ValueError(
                    f"{_where(p)}: {d}-D cfd file lacks dataset(s) {missing} "
                    f"(expected {required}); present: {present}"
                )
            available = [v for v in CFD_VARIABLES if v in f]
            if variables is None:
                names = available
            else:
                names = list(variables)
                unknown = [v for v in names if v not in available]
                if unknown or not names or len(set(names)) != len(names):
                    raise ValueError(
                        f"variables: expected distinct names among {available} (in {str(p)!r}), got {names!r}"
                    )
        shape = None
        for v in names:
            ds = f[v]
            if not isinstance(ds, h5py.Dataset):
                raise ValueError(f"{_where(p)}: {v!r} is a group, expected a dataset; present: {present}")
            if ds.ndim < 3:
                raise ValueError(
                    f"{_where(p)}: dataset {v!r}: expected (N, T, X, ...) with at least one spatial axis, "
                    f"got shape {ds.shape}"
                )
            if shape is None:
                shape = ds.shape
            elif ds.shape != shape:
                raise ValueError(
                    f"{_where(p)}: dataset {v!r} has shape {ds.shape}, but {names[0]!r} has {shape}"
                )
        self.variables = tuple(names)
        self._n_file = shape[0]
        self._keys = None
        grid = self._coords(f, {a: f"{a}-coordinate" for a in (*_AXES, "t")})
        return shape[2:], shape[1], grid

    def _scan_darcy(self, f: h5py.File, p: Path):
        nu, u = f["nu"], f["tensor"]
        present = _members(f)
        if not isinstance(nu, h5py.Dataset) or not isinstance(u, h5py.Dataset):
            raise ValueError(f"{_where(p)}: 'nu' and 'tensor' must be datasets; present: {present}")
        if nu.ndim < 2:
            raise ValueError(f"{_where(p)}: dataset 'nu': expected (N, X, Y), got shape {nu.shape}")
        if u.ndim == nu.ndim + 1 and u.shape[1] == 1:
            self._squeeze_tensor = True
        elif u.ndim == nu.ndim:
            self._squeeze_tensor = False
        else:
            raise ValueError(
                f"{_where(p)}: dataset 'tensor': expected (N, 1, X, Y) or (N, X, Y) to match 'nu' "
                f"{nu.shape}, got {u.shape}"
            )
        u_spatial = u.shape[2:] if self._squeeze_tensor else u.shape[1:]
        if u.shape[0] != nu.shape[0] or tuple(u_spatial) != tuple(nu.shape[1:]):
            raise ValueError(
                f"{_where(p)}: datasets 'tensor' {u.shape} and 'nu' {nu.shape} differ in samples or grid"
            )
        self.variables = ("nu", "tensor")
        self._n_file = nu.shape[0]
        self._keys = None
        grid = self._coords(f, {a: f"{a}-coordinate" for a in _AXES})
        return nu.shape[1:], None, grid

    def _scan_seeds(self, f: h5py.File, p: Path):
        keys = sorted(f.keys())
        first = f[keys[0]]
        if "data" not in first or not isinstance(first["data"], h5py.Dataset):
            raise ValueError(
                f"{_where(p)}: group {keys[0]!r} has no dataset 'data' (T, X, ..., C); "
                f"it holds {_members(first)}"
            )
        shape = first["data"].shape
        if len(shape) < 3:
            raise ValueError(
                f"{_where(p)}: group {keys[0]!r} dataset 'data': expected (T, X, ..., C) with at least "
                f"one spatial axis, got shape {shape}"
            )
        self._seed_shape = shape
        self.variables = tuple(f"data[..., {c}]" for c in range(shape[-1]))
        self._n_file = len(keys)
        self._keys = keys
        grid: dict[str, np.ndarray] = {}
        if "grid" in first and isinstance(first["grid"], h5py.Group):
            grid = self._coords(first["grid"], {a: a for a in (*_AXES, "t")})
        return shape[1:-1], shape[0], grid

    # ------------------------------------------------------------------ lazy file handle

    def _h5(self) -> h5py.File:
        if self._file is None or self._pid != os.getpid():
            self._file = _open(self.path)
            self._pid = os.getpid()
        return self._file

    def close(self) -> None:
        """Close this process's file handle (it is reopened on the next access)."""
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        self._file = None
        self._pid = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_file"] = None  # h5py handles are not picklable nor shareable across processes
        state["_pid"] = None
        return state

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: h5py may already be gone
            pass

    # ------------------------------------------------------------------ items

    def __len__(self) -> int:
        return len(self._samples) * self._n_windows

    def locate(self, i: int) -> tuple[int | str, int]:
        """``(sample, first_frame)`` of item ``i``: the file sample index (or seed group name) and the
        index in the file's time axis of the window's first frame (``start * time_stride``)."""
        n = len(self)
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"i: expected an int index, got {type(i).__name__}")
        if not -n <= i < n:
            raise IndexError(f"i: expected an index in [-{n}, {n}), got {i}")
        i = int(i) % n
        s, w = divmod(i, self._n_windows)
        sample = self._samples[s]
        if self.layout == "seed_groups":
            sample = self._keys[sample]
        return sample, w * self.time_stride

    def _read(self, ds: h5py.Dataset, sel: tuple, what: str) -> np.ndarray:
        try:
            return np.asarray(ds[sel], dtype=np.float32)
        except OSError as e:
            raise ValueError(
                f"{_where(self.path)}: could not read {what} (truncated or corrupt?): {e}"
            ) from e

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        """Item ``i``: ``{"x": (C * t_in, *spatial), "y": (C * t_out, *spatial)}`` float32."""
        sample, t0 = self.locate(i)
        f = self._h5()
        sp = (slice(None, None, self.spatial_stride),) * len(self._full_spatial)
        if self.layout == "darcy":
            x = self._read(f["nu"], (sample, *sp), f"'nu'[{sample}]")
            u_sel = (sample, 0, *sp) if self._squeeze_tensor else (sample, *sp)
            y = self._read(f["tensor"], u_sel, f"'tensor'[{sample}]")
            return {"x": torch.from_numpy(x)[None], "y": torch.from_numpy(y)[None]}
        n_win = self.t_in + self.t_out
        ts = slice(t0, t0 + (n_win - 1) * self.time_stride + 1, self.time_stride)
        if self.layout == "seed_groups":
            g = f[sample]
            if "data" not in g:
                raise ValueError(
                    f"{_where(self.path)}: group {sample!r} has no dataset 'data'; it holds {_members(g)}"
                )
            ds = g["data"]
            if ds.shape != self._seed_shape:
                raise ValueError(
                    f"{_where(self.path)}: group {sample!r} dataset 'data' has shape {ds.shape}, "
                    f"but group {self._keys[0]!r} has {self._seed_shape}"
                )
            win = self._read(ds, (ts, *sp, slice(None)), f"group {sample!r} 'data'")  # (W, *sp, C)
            win = np.moveaxis(win, -1, 1)  # (W, C, *sp)
        else:
            win = np.stack(
                [self._read(f[v], (sample, ts, *sp), f"{v!r}[{sample}]") for v in self.variables], axis=1
            )  # (W, C, *sp)
        win = np.ascontiguousarray(win)
        c = win.shape[1]
        spatial = win.shape[2:]
        x = win[: self.t_in].reshape(self.t_in * c, *spatial)
        y = win[self.t_in :].reshape(self.t_out * c, *spatial)
        return {"x": torch.from_numpy(x.copy()), "y": torch.from_numpy(y.copy())}

    # ------------------------------------------------------------------ conveniences

    @property
    def in_channels(self) -> int:
        return 1 if self.layout == "darcy" else len(self.variables) * self.t_in

    @property
    def out_channels(self) -> int:
        return 1 if self.layout == "darcy" else len(self.variables) * self.t_out

    def to_grid_dataset(self) -> GridPairDataset:
        """Read every item into memory as a :class:`GridPairDataset` (for small files / splits)."""
        items = [self[i] for i in range(len(self))]
        x = torch.stack([it["x"] for it in items])
        y = torch.stack([it["y"] for it in items])
        return GridPairDataset(x, y, self.meta)

    def __repr__(self) -> str:
        return (
            f"PDEBenchWindowDataset({str(self.path)!r}, layout={self.layout!r}, split={self.split!r}, "
            f"n={len(self)}, in_channels={self.in_channels}, out_channels={self.out_channels}, "
            f"resolution={self.resolution})"
        )
