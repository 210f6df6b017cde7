"""Lazy time-window reader for The Well HDF5 files (Ohana et al. 2024).

Schema: root attrs ``dataset_name``, ``grid_type``, ``n_spatial_dims``, ``n_trajectories``; groups
``dimensions`` (attr ``spatial_dims``; datasets ``time`` and one per spatial dim),
``boundary_conditions``, ``scalars`` and ``t{0,1,2}_fields`` (attr ``field_names``, maybe empty).
A field of order ``o`` has attrs ``sample_varying``, ``time_varying``, ``dim_varying`` and shape
``[B if sample_varying] + [T if time_varying] + [size_d if dim_varying[d]] + [D] * o``.

Channels ``C``: t0 fields, then each t1 field's ``D`` components, then each t2 field's ``D * D``
(row-major), in ``field_names`` order, named ``f``, ``f_x``, ``f_y``, ``f_xx``, ``f_xy``, ...
(suffixes = ``spatial_dims``). Fields constant in time, over trajectories or along an axis are
repeated there. Items ``{"x": (C * n_steps_input, *spatial), "y": (C * n_steps_output, *spatial)}``
float32, TIME-MAJOR: channel ``k * C + c`` is frame ``k``, channel ``c`` (neuralop's
``"b c t ... -> b (t c) ..."``). The window at start ``s`` holds steps ``s, s + stride, ...,
s + stride * (n_in + n_out - 1)``; every ``s`` (step 1) is an item, i.e.
``T - stride * (n_in + n_out - 1)`` windows per trajectory as in The Well, ordered by file (sorted
by name), trajectory, start. ``normalize``: ``(x - mean) / max(std, 1e-4)`` from ``stats.yaml``
(field -> scalar, list of D or D x D nested list; a scalar covers all components). Files are
opened on first use in each process; an item reads only its own hyperslabs.
"""

from __future__ import annotations

import ast
import bisect
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import Dataset

from sciattn._checks import check_choice, check_positive_int

from .._hdf5 import open_hdf5 as _open
from .._hdf5 import uniform_step as _uniform_step
from .._hdf5 import where as _where

__all__ = ["MIN_STD", "SPLITS", "TheWellDataset", "load_stats"]

SPLITS = ("train", "valid", "test")
MIN_STD = 1e-4
_FIELDS = ("t0_fields", "t1_fields", "t2_fields")
_GROUPS = ("dimensions", "boundary_conditions", "scalars", *_FIELDS)
_ROOT_ATTRS = ("dataset_name", "grid_type", "n_spatial_dims", "n_trajectories")
_SPLIT_WORDS = "The Well: a folder per split, <dataset>/data/{train,valid,test}, with disjoint trajectories"


def _py(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return [_py(x) for x in v.tolist()]
    return v.item() if isinstance(v, np.generic) else v


def _strs(v: Any) -> list[str]:
    v = _py(v)
    return [str(x) for x in (v if isinstance(v, list) else [v])]


def _attr(obj: Any, name: str, p: Path, what: str) -> Any:
    if name not in obj.attrs:
        raise ValueError(f"{_where(p)}: {what} lacks attribute {name!r}; present: {sorted(obj.attrs)}")
    return obj.attrs[name]


def _dataset(g: h5py.Group, name: str, p: Path) -> h5py.Dataset:
    if name not in g or not isinstance(g[name], h5py.Dataset):
        raise ValueError(f"{_where(p)}: missing dataset {g.name}/{name}; {g.name!r} holds {sorted(g)}")
    return g[name]


def _scalar(s: str) -> Any:
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError):
        return s.strip("'\"")


def _block(lines: list[list], i: int, ind: int) -> tuple[Any, int]:
    """Parse the mapping or (nested) sequence at indent ``ind`` from line ``i``."""
    seq = lines[i][1].startswith("-")
    out: Any = [] if seq else {}
    while i < len(lines) and lines[i][0] == ind and lines[i][1].startswith("-") == seq:
        text = lines[i][1]
        key, _, rest = ("", "", text[1:].lstrip()) if seq else text.partition(":")
        rest = rest.strip()
        if seq and rest.startswith("- "):  # "- - 1.0" opens a nested sequence on this line
            lines[i] = [ind + len(text) - len(rest), rest]
            v, i = _block(lines, i, lines[i][0])
        elif rest:
            v, i = _scalar(rest), i + 1
        elif i + 1 < len(lines) and (lines[i + 1][0] > ind or not seq and lines[i + 1][1][:1] == "-"):
            v, i = _block(lines, i + 1, lines[i + 1][0])
        else:
            v, i = None, i + 1
        out.append(v) if seq else out.__setitem__(key.strip(), v)
    return out, i


def load_stats(path: str | os.PathLike) -> dict[str, Any]:
    """``stats.yaml`` via PyYAML, or without it a parser for its subset (nested lists of numbers)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"stats_path: expected an existing file, got {str(p)!r}")
    text = p.read_text()
    try:
        import yaml
    except ImportError:
        yaml = None
    try:
        if yaml is not None:
            out = yaml.safe_load(text)
        else:
            lines = [[len(ln) - len(ln.lstrip()), ln.strip()] for ln in text.splitlines()]
            lines = [ln for ln in lines if ln[1] and not ln[1].startswith(("#", "---"))]
            out = _block(lines, 0, lines[0][0])[0] if lines else None
    except Exception as e:
        raise ValueError(f"{_where(p)}: could not parse as YAML: {e}") from e
    if not isinstance(out, dict):
        raise ValueError(f"{_where(p)}: expected a mapping with keys 'mean' and 'std'")
    return out


def _scan(f: h5py.File, p: Path) -> dict[str, Any]:
    for a in _ROOT_ATTRS:
        _attr(f, a, p, "the root")
    missing = [g for g in _GROUPS if not isinstance(f.get(g), h5py.Group)]
    if missing:
        raise ValueError(f"{_where(p)}: missing group(s) {missing}; the root holds {sorted(f)}")
    d, b = int(_py(f.attrs["n_spatial_dims"])), int(_py(f.attrs["n_trajectories"]))
    dims, sc = f["dimensions"], f["scalars"]
    names = _strs(_attr(dims, "spatial_dims", p, "group 'dimensions'"))
    if len(names) != d:
        raise ValueError(f"{_where(p)}: spatial_dims {names} do not match n_spatial_dims={d}")
    coords = {n: np.asarray(_dataset(dims, n, p)[()], dtype=np.float64) for n in ["time", *names]}
    res, n_steps = tuple(coords[n].shape[-1] for n in names), coords["time"].shape[-1]
    info: dict[str, Any] = {
        "dataset_name": str(_py(f.attrs["dataset_name"])),
        "grid_type": str(_py(f.attrs["grid_type"])),
        "n_spatial_dims": d,
        "spatial_dims": names,
        "n_trajectories": b,
        "n_steps": n_steps,
        "resolution": res,
        "coordinates": coords,
        "simulation_parameters": {
            k: _py(f.attrs.get(k)) for k in _strs(f.attrs.get("simulation_parameters", []))
        },
        "boundary_conditions": {
            k: {a: str(_py(v)).upper() if a == "bc_type" else _py(v) for a, v in g.attrs.items()}
            for k, g in f["boundary_conditions"].items()
        },
        "scalars": {n: np.asarray(_dataset(sc, n, p)[()]) for n in _strs(sc.attrs.get("field_names", []))},
    }
    fields, variables = [], []
    for order, gname in enumerate(_FIELDS):
        g = f[gname]
        for name in _strs(_attr(g, "field_names", p, f"group {gname!r}")):
            ds, what = _dataset(g, name, p), f"dataset {gname}/{name}"
            sv, tv = (bool(_py(_attr(ds, a, p, what))) for a in ("sample_varying", "time_varying"))
            dv = tuple(bool(x) for x in np.atleast_1d(_py(_attr(ds, "dim_varying", p, what))))
            want = (b,) * sv + (n_steps,) * tv + tuple(n for n, v in zip(res, dv) if v) + (d,) * order
            if ds.shape != want or len(dv) != d:
                raise ValueError(
                    f"{_where(p)}: {what} has shape {ds.shape}, expected {want} (B={b}, T={n_steps}, grid "
                    f"{res}, D={d}; sample_varying={sv}, time_varying={tv}, dim_varying={list(dv)})"
                )
            fields.append((gname, name, order, sv, tv, dv))
            comps = [""]
            for _ in range(order):
                comps = [c + s for c in comps for s in names]
            variables += [f"{name}_{c}" if c else name for c in comps]
    if not fields:
        raise ValueError(f"{_where(p)}: t0_fields, t1_fields and t2_fields hold no fields")
    info["fields"], info["variables"] = fields, variables
    return info


class TheWellDataset(Dataset):
    """Time-window pairs from The Well HDF5 file(s), read lazily (module docstring).

    ``path_or_dir``: one ``.hdf5``/``.h5`` file or a folder of them; with ``split`` (``"train"``,
    ``"valid"``, ``"test"``) the dataset root, read from ``<root>/data/<split>`` (else
    ``<root>/<split>``). Files must agree in ``dataset_name``, ``n_spatial_dims``, grid, channels.
    ``spatial_stride`` keeps ``[::s]`` per axis. ``stats_path`` defaults to the first
    ``stats.yaml`` in the data folder, its parent or grandparent (The Well: next to ``data/``).

    ``meta`` holds ``paths``, ``dataset_name``, ``grid_type``, ``n_spatial_dims``, ``variables``,
    ``split_convention``, ``coordinates`` (``time`` unstrided, space ``[..., ::spatial_stride]``),
    ``boundary_conditions``, ``scalars`` (first file) and per-file details under ``files``.

    Raises FileNotFoundError (file, split folder, stats file) or ValueError naming the file:
    corrupt HDF5, missing group/dataset/attribute (listing what is present), shapes against the
    schema, files that disagree, window longer than the time axis, unknown split, bad stats.
    """

    def __init__(
        self,
        path_or_dir: str | os.PathLike,
        *,
        split: str | None = None,
        n_steps_input: int = 1,
        n_steps_output: int = 1,
        time_stride: int = 1,
        spatial_stride: int = 1,
        normalize: bool = False,
        stats_path: str | os.PathLike | None = None,
    ):
        args = dict(n_steps_input=n_steps_input, n_steps_output=n_steps_output)
        args.update(time_stride=time_stride, spatial_stride=spatial_stride)
        for name, value in args.items():
            check_positive_int(name, value)
        self.paths, folder = _resolve(Path(path_or_dir), split)
        self.split, self.normalize = split, bool(normalize)
        self.n_steps_input, self.n_steps_output = n_steps_input, n_steps_output
        self.time_stride, self.spatial_stride = time_stride, spatial_stride
        self._files: dict[int, h5py.File] = {}
        self._pid: int | None = None

        span = 1 + time_stride * (n_steps_input + n_steps_output - 1)
        infos: list[dict[str, Any]] = []
        for p in self.paths:
            with _open(p) as f:
                info = _scan(f, p)
            if info["n_steps"] < span:
                raise ValueError(
                    f"{_where(p)}: the window spans {span} steps; the time axis has {info['n_steps']}"
                )
            for key in ("dataset_name", "n_spatial_dims", "resolution", "variables"):
                if infos and info[key] != infos[0][key]:
                    raise ValueError(
                        f"{_where(p)}: {key} {info[key]!r} differs from {infos[0][key]!r} in {str(self.paths[0])!r}"
                    )
            info["windows"] = info["n_steps"] - span + 1
            infos.append(info)
        first = infos[0]
        self.variables = tuple(first["variables"])
        self._fields = [i["fields"] for i in infos]
        self._windows = [i["windows"] for i in infos]
        self._cum = np.cumsum([0, *(i["n_trajectories"] * i["windows"] for i in infos)]).tolist()
        self.resolution = tuple(-(-n // spatial_stride) for n in first["resolution"])
        if min(self.resolution) < 2:
            raise ValueError(f"{_where(self.paths[0])}: spatial_stride leaves a {self.resolution} grid (< 2)")
        self._mean = self._std = None
        if self.normalize:
            stats_path = _stats_file(folder, stats_path)
            self._mean, self._std = _stats_vectors(stats_path, first)
        keys = ("n_trajectories", "n_steps", "simulation_parameters", "boundary_conditions", "scalars")
        coords = first["coordinates"]
        self.meta: dict[str, Any] = {
            "paths": [str(p) for p in self.paths],
            "format": "the_well",
            **{k: first[k] for k in ("dataset_name", "grid_type", "n_spatial_dims", "spatial_dims")},
            "variables": list(self.variables),
            "channel_order": "time-major: channel k * C + c = frame k of the window, channel c",
            "split": split,
            "split_convention": _SPLIT_WORDS,
            **args,
            "resolution": self.resolution,
            "coordinates": {k: v if k == "time" else v[..., ::spatial_stride] for k, v in coords.items()},
            "boundary_conditions": first["boundary_conditions"],
            "scalars": first["scalars"],
            "files": [
                {"path": str(p), "windows_per_trajectory": i["windows"], **{k: i[k] for k in keys}}
                for p, i in zip(self.paths, infos)
            ],
            "stats_path": str(stats_path) if self.normalize else None,
        }
        step = _uniform_step(coords["time"]) if "time" in coords else None
        if step is not None:  # the time between the taken frames: the file's time grid times time_stride
            self.meta["dt"] = step * time_stride

    def _h5(self, k: int) -> h5py.File:
        if self._pid != os.getpid():
            self._files, self._pid = {}, os.getpid()
        if k not in self._files:
            self._files[k] = _open(self.paths[k])
        return self._files[k]

    def close(self) -> None:
        """Close this process's file handles (reopened on the next access)."""
        if self._pid == os.getpid():
            for f in self._files.values():
                f.close()
        self._files, self._pid = {}, None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_files"], state["_pid"] = {}, None  # h5py handles are neither picklable nor shareable
        return state

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __len__(self) -> int:
        return self._cum[-1]

    def locate(self, i: int) -> tuple[Path, int, int]:
        """``(file, trajectory, start)`` of item ``i``; its window's first frame is step ``start``."""
        k, traj, start = self._loc(i)
        return self.paths[k], traj, start

    def _loc(self, i: int) -> tuple[int, int, int]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"i: expected an index in [-{n}, {n}), got {i}")
        i = int(i) % n
        k = bisect.bisect_right(self._cum, i) - 1
        return (k, *divmod(i - self._cum[k], self._windows[k]))

    def _read(self, k: int, key: str, sel: tuple) -> np.ndarray:
        try:
            return np.asarray(self._h5(k)[key][sel], dtype=np.float32)
        except (OSError, KeyError) as e:
            raise ValueError(
                f"{_where(self.paths[k])}: could not read {key} (truncated or corrupt?): {e}"
            ) from e

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        """Item ``i``: ``{"x": (C * n_steps_input, *spatial), "y": (C * n_steps_output, *spatial)}``."""
        k, traj, start = self._loc(i)
        n_win, res = self.n_steps_input + self.n_steps_output, self.resolution
        ts = slice(start, start + self.time_stride * (n_win - 1) + 1, self.time_stride)
        sp = slice(None, None, self.spatial_stride)
        parts = []
        for gname, name, _, sv, tv, dv in self._fields[k]:
            a = self._read(k, f"{gname}/{name}", (traj,) * sv + (ts,) * tv + tuple(sp for v in dv if v))
            a = a if tv else a[None]
            for axis in (j for j, v in enumerate(dv) if not v):
                a = np.expand_dims(a, 1 + axis)
            a = np.broadcast_to(a, (n_win, *res, *a.shape[1 + len(dv) :]))
            parts.append(np.moveaxis(a.reshape(n_win, *res, -1), -1, 1))
        win = np.concatenate(parts, axis=1)  # (n_win, C, *spatial)
        if self.normalize:
            shape = (1, -1) + (1,) * len(res)
            win = ((win - self._mean.reshape(shape)) / self._std.reshape(shape)).astype(np.float32)
        x = win[: self.n_steps_input].reshape(-1, *res)
        y = win[self.n_steps_input :].reshape(-1, *res)
        return {"x": torch.from_numpy(x.copy()), "y": torch.from_numpy(y.copy())}

    @property
    def in_channels(self) -> int:
        return len(self.variables) * self.n_steps_input

    @property
    def out_channels(self) -> int:
        return len(self.variables) * self.n_steps_output

    def __repr__(self) -> str:
        m = self.meta
        return f"TheWellDataset({m['dataset_name']!r}, files={len(self.paths)}, n={len(self)}, C={len(m['variables'])})"


def _resolve(p: Path, split: str | None) -> tuple[list[Path], Path]:
    if split is not None:
        check_choice("split", split, SPLITS)
    if p.is_file():
        if split is not None:
            raise ValueError(f"split: only meaningful for a dataset directory, got the file {str(p)!r}")
        return [p], p.parent
    if not p.is_dir():
        raise FileNotFoundError(f"path_or_dir: expected an existing file or directory, got {str(p)!r}")
    folder = p
    if split is not None:
        found = [t for t in (p / "data" / split, p / split) if t.is_dir()]
        if not found:
            raise FileNotFoundError(
                f"split {split!r}: neither {str(p / 'data' / split)!r} nor {str(p / split)!r} is a "
                f"directory; {str(p)!r} holds {sorted(c.name for c in p.iterdir())}"
            )
        folder = found[0]
    files = sorted(c for c in folder.iterdir() if c.is_file() and c.suffix in (".hdf5", ".h5"))
    if not files:
        raise FileNotFoundError(f"path_or_dir: no .hdf5/.h5 files in {str(folder)!r}")
    return files, folder


def _stats_file(folder: Path, stats_path: str | os.PathLike | None) -> Path:
    if stats_path is not None:
        return Path(stats_path)  # load_stats reports a missing file
    tried = [folder / "stats.yaml", folder.parent / "stats.yaml", folder.parent.parent / "stats.yaml"]
    for t in tried:
        if t.is_file():
            return t
    raise FileNotFoundError(f"normalize=True: no stats.yaml found; tried {[str(t) for t in tried]}")


def _stats_vectors(sp: Path, info: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel ``mean`` and floored ``std`` (``max(std, MIN_STD)``) from ``stats.yaml``."""
    stats, d, out = load_stats(sp), info["n_spatial_dims"], []
    for key in ("mean", "std"):
        table = stats.get(key)
        if not isinstance(table, dict):
            raise ValueError(f"{_where(sp)}: expected a mapping {key!r}; top-level keys: {sorted(stats)}")
        vec = []
        for _, name, order, *_ in info["fields"]:
            if name not in table:
                raise ValueError(f"{_where(sp)}: {key!r} lacks field {name!r}; present: {sorted(table)}")
            v = np.asarray(table[name], dtype=np.float64).ravel()
            if v.size not in (1, d**order):
                raise ValueError(
                    f"{_where(sp)}: {key}[{name!r}] has {v.size} values, expected 1 or {d**order}"
                )
            vec.append(np.broadcast_to(v, (d**order,)))
        out.append(np.concatenate(vec))
    return out[0], np.maximum(out[1], MIN_STD)
