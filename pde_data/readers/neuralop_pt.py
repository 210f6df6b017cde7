"""Reader and writer for neuraloperator's ``.pt`` dataset files.

On disk, ``{name}_{split}_{res}.pt`` (split ``train`` or ``test``) is a ``torch.save``d dict with
keys ``"x"`` and ``"y"`` (extra keys are ignored by the reader). The tensors are
channel-squeezed, ``(N, *spatial)``; the reader adds the channel axis, giving
``x`` (N, 1, *spatial) and ``y`` (N, 1, *spatial) as float32 (Darcy's ``x`` is stored as bool and
becomes 0.0/1.0). Files are only read with ``torch.load(weights_only=True)``.

Time series (``t_in``). A file whose ``y`` holds trajectories ``(N, T, *spatial)`` (time after the sample axis,
``y[:, 0] == x``: neuraloperator's Burgers files, 17 snapshots on ``t in [0, 0.96]``) trains a time stepper:
with ``t_in`` set, the frames ``u_0, u_s, u_2s, ...`` (``s = time_stride``) of each trajectory give
``x = (u_0 … u_{t_in-1})`` and ``y`` = the next ``t_out`` frames (default: all that remain), as FNO's
Navier-Stokes reader does. ``dt`` is the time between the taken frames: ``s`` times the file's step, read from
the ``dt`` argument or, for a file recognised as neuraloperator's Burgers (name ``burgers``, 17 snapshots and a
``visc`` entry), from its documented span (``t_final = 0.96``, :data:`~.burgers_neuralop.NEURALOP_BURGERS_FILE`).

Nodes. ``meta["nodes"]`` records the grid convention: neuraloperator's files are sampled at ``x_i = i / n`` on
``[0, 1]`` per axis (its ``GridEmbedding``: ``linspace(0, 1, n + 1)[:-1]``; the Darcy files hold ≈ 0 on the
first row and column, the wall at 0, and not on the last), so ``"endpoint": False`` is recorded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import torch

from sciattn._checks import (
    check_choice,
    check_data_file,
    check_finite,
    check_positive_int,
    check_tensor,
    unreadable_file,
)
from sciattn._io import atomic_path

from ..grid_dataset import GridPairDataset

__all__ = [
    "SPLITS",
    "load_neuralop_pt",
    "load_neuralop_split",
    "neuralop_pt_path",
    "parse_neuralop_name",
    "write_neuralop_pt",
]

SPLITS = ("train", "test")
_NAME_RE = re.compile(r"^(?P<name>.+)_(?P<split>train|test)_(?P<res>[1-9][0-9]*)\.pt$")


def parse_neuralop_name(path: str | os.PathLike) -> tuple[str, str, int] | None:
    """``(name, split, resolution)`` from a file name like ``darcy_train_16.pt``; None if it does not match."""
    m = _NAME_RE.match(Path(path).name)
    if m is None:
        return None
    return m["name"], m["split"], int(m["res"])


def neuralop_pt_path(root: str | os.PathLike, name: str, split: str, resolution: int) -> Path:
    """``root / f"{name}_{split}_{resolution}.pt"``."""
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise ValueError(f"name: expected a non-empty file-name stem without a directory, got {name!r}")
    check_choice("split", split, SPLITS)
    check_positive_int("resolution", resolution)
    return Path(root) / f"{name}_{split}_{resolution}.pt"


def _read_dict(p: Path) -> dict:
    try:
        data = torch.load(p, weights_only=True, map_location="cpu")
    except Exception as e:  # any failure to unpickle means the file is not usable
        raise unreadable_file("path", p, "a torch .pt file", "torch", e) from None
    if not isinstance(data, Mapping):
        raise ValueError(
            f"path: expected {str(p)!r} to hold a dict with keys 'x' and 'y', got {type(data).__name__}"
        )
    found = sorted(str(k) for k in data.keys())
    for key in ("x", "y"):
        if key not in data:
            raise ValueError(f"path: {str(p)!r} has no key {key!r} (keys found: {found})")
        if not isinstance(data[key], torch.Tensor):
            raise ValueError(f"{key}: expected a tensor in {str(p)!r}, got {type(data[key]).__name__}")
    return data


def _to_grid(p: Path, key: str, t: torch.Tensor, squeezed: bool) -> torch.Tensor:
    min_rank, layout = (2, "(N, *spatial)") if squeezed else (3, "(N, C, *spatial)")
    if t.dim() < min_rank:
        raise ValueError(
            f"path: {str(p)!r} key {key!r}: expected a tensor {layout} with at least one spatial axis "
            f"(channel_squeezed={squeezed}), got shape {tuple(t.shape)}"
        )
    if t.is_complex():
        raise ValueError(f"path: {str(p)!r} key {key!r}: expected a real or bool tensor, got dtype {t.dtype}")
    t = t.to(torch.float32)
    return t.unsqueeze(1) if squeezed else t


def _burgers_step(p: Path, data: Mapping, n_times: int) -> float | None:
    """The documented time step of a neuraloperator Burgers file (``None`` if ``p`` is not one)."""
    from ..solvers.burgers_neuralop import NEURALOP_BURGERS_FILE

    parsed = parse_neuralop_name(p)
    name = parsed[0] if parsed else p.stem
    if "burgers" in name.lower() and "visc" in data and n_times == int(NEURALOP_BURGERS_FILE["n_times"]):
        return float(NEURALOP_BURGERS_FILE["t_final"]) / (n_times - 1)
    return None


def _time_series(p: Path, data: Mapping, x: torch.Tensor, y: torch.Tensor, *, t_in: int, t_out: int | None,
                 time_stride: int, dt: float | None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """``(x, y, meta)`` of the stepper pairs of the trajectories ``y`` ``(N, T, *spatial)``."""
    check_positive_int("t_in", t_in)
    check_positive_int("time_stride", time_stride)
    if t_out is not None:
        check_positive_int("t_out", t_out)
    if y.dim() != x.dim() + 1:
        raise ValueError(f"t_in: a time series needs y (N, T, *spatial) with one axis more than x (N, *spatial) in "
                         f"{str(p)!r}, got x {tuple(x.shape)} and y {tuple(y.shape)}; drop t_in for this file")
    if not torch.equal(y[:, 0].to(x.dtype), x):
        raise ValueError(f"t_in: expected y[:, 0] == x in {str(p)!r} (the trajectory's first frame, as "
                         "neuraloperator's Burgers files store it), got a y whose first frame differs from x")
    n_times = y.shape[1]
    frames = list(range(0, n_times, time_stride))
    remaining = len(frames) - t_in
    t_out_eff = remaining if t_out is None else t_out
    if remaining < 1 or t_out_eff > remaining:
        raise ValueError(f"t_in, t_out: {str(p)!r} holds {n_times} frames, {len(frames)} at time_stride="
                         f"{time_stride}; expected t_in + t_out <= {len(frames)} with t_out >= 1, got t_in={t_in}, "
                         f"t_out={t_out}")
    if dt is not None:
        if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not dt > 0 or dt == float("inf"):
            raise ValueError(f"dt: expected a positive finite number (the file's time step), got {dt!r}")
        step = float(dt)
        dt_source = "the dt argument"
    else:
        step = _burgers_step(p, data, n_times)
        dt_source = "neuraloperator's Burgers files span t in [0, 0.96] (17 snapshots)" if step else None
    keep = frames[: t_in + t_out_eff]
    traj = y[:, keep]
    meta = {"t_in": t_in, "t_out": t_out_eff, "time_stride": time_stride, "time_series": True,
            "time_steps": {"x": [keep[0], keep[t_in - 1]], "y": [keep[t_in], keep[-1]]}, "n_times_in_file": n_times}
    if step is not None:
        meta.update(dt=step * time_stride, dt_source=dt_source, times=[round(step * k, 12) for k in keep])
    return traj[:, :t_in].contiguous(), traj[:, t_in:].contiguous(), meta


def load_neuralop_pt(
    path: str | os.PathLike,
    *,
    n_samples: int | None = None,
    channel_squeezed: bool | tuple[bool, bool] = True,
    t_in: int | None = None,
    t_out: int | None = None,
    time_stride: int = 1,
    dt: float | None = None,
    variable: str = "u",
) -> GridPairDataset:
    """Load one neuraloperator ``.pt`` file as a :class:`GridPairDataset`.

    Stored ``x``/``y`` are ``(N, *spatial)`` and come back as ``(N, 1, *spatial)`` float32. With
    ``channel_squeezed=False`` they are taken as already ``(N, C, *spatial)``; a pair
    ``(x_squeezed, y_squeezed)`` sets this per key (e.g. Burgers, ``x`` (N, 16) and ``y``
    (N, 17, 16) with the 17 time steps as output channels: ``(True, False)``).
    ``n_samples`` keeps the first ``n_samples`` samples.

    ``t_in`` (a time stepper; module docstring): ``x`` (N, t_in, *spatial) and ``y`` (N, t_out, *spatial) are
    frames of the trajectories stored in ``y`` (N, T, *spatial), taken every ``time_stride`` frames; ``dt`` is
    the file's time step when the file does not document it; ``variable`` names the field (``meta["variables"]
    = [variable]``, frames time-major). ``channel_squeezed`` is ignored then.

    Raises FileNotFoundError (missing file) or ValueError (unreadable file, not a dict, missing key,
    sample counts of ``x`` and ``y`` differ, fewer than ``n_samples`` samples, non-finite values),
    each naming the path.
    """
    p = check_data_file("path", path)
    if isinstance(channel_squeezed, bool):
        squeeze_x = squeeze_y = channel_squeezed
    else:
        squeeze_x, squeeze_y = channel_squeezed
    if n_samples is not None:
        check_positive_int("n_samples", n_samples)
    data = _read_dict(p)
    x, y = data["x"], data["y"]
    for key, value, default in (("time_stride", time_stride, 1), ("t_out", t_out, None), ("dt", dt, None)):
        if t_in is None and value != default:
            raise ValueError(f"{key}: applies to a time series; set t_in (input frames) too, got {key}={value!r} "
                             "without t_in")
    if not isinstance(variable, str) or not variable:
        raise ValueError(f"variable: expected a non-empty str (the field's name), got {variable!r}")
    if x.dim() == 0 or y.dim() == 0 or x.shape[0] != y.shape[0]:
        raise ValueError(
            f"path: {str(p)!r}: expected x and y with the same number of samples N, "
            f"got x {tuple(x.shape)} and y {tuple(y.shape)}"
        )
    n_file = x.shape[0]
    if n_samples is not None:
        if n_samples > n_file:
            raise ValueError(f"n_samples: expected at most {n_file} (samples in {str(p)!r}), got {n_samples}")
        if n_samples < n_file:  # clone so the slices do not keep the whole file's storage alive
            x, y = x[:n_samples].clone(), y[:n_samples].clone()
    series: dict = {}
    if t_in is not None:
        x, y, series = _time_series(p, data, x, y, t_in=t_in, t_out=t_out, time_stride=time_stride, dt=dt)
        squeeze_x = squeeze_y = False
    x = _to_grid(p, "x", x, squeeze_x)
    y = _to_grid(p, "y", y, squeeze_y)
    check_finite(f"path {str(p)!r} key 'x'", x)
    check_finite(f"path {str(p)!r} key 'y'", y)
    parsed = parse_neuralop_name(p)
    meta = {
        "source": str(p),
        "format": "neuralop_pt",
        "name": parsed[0] if parsed else p.stem,
        "split": parsed[1] if parsed else None,
        "resolution": parsed[2] if parsed else None,
        "variables": {"x": "x", "y": "y"},  # dataset field -> key in the file
        "n_samples_in_file": n_file,
        "stored_dtypes": {"x": str(data["x"].dtype), "y": str(data["y"].dtype)},
        "bounds": [[0.0, 1.0]] * (x.dim() - 2),
        "nodes": {"endpoint": False, "rule": "x_i = i / n on [0, 1] (neuraloperator's GridEmbedding)"},
    }
    if series:
        meta.update(series, variables=[variable], frame_channels=1)
        meta["stored_dtypes"] = {"x": str(data["y"].dtype), "y": str(data["y"].dtype)}
    try:
        return GridPairDataset(x, y, meta)
    except ValueError as e:
        hint = (
            " (if a stored tensor already has a channel axis, pass channel_squeezed=False or a per-key pair)"
        )
        raise ValueError(f"path: {str(p)!r}: {e}{hint}") from e


def load_neuralop_split(
    root: str | os.PathLike,
    name: str,
    split: str,
    resolution: int,
    *,
    n_samples: int | None = None,
    channel_squeezed: bool | tuple[bool, bool] = True,
) -> GridPairDataset:
    """Load ``root/{name}_{split}_{resolution}.pt``; see :func:`load_neuralop_pt`."""
    path = neuralop_pt_path(root, name, split, resolution)
    return load_neuralop_pt(path, n_samples=n_samples, channel_squeezed=channel_squeezed)


def _for_disk(name: str, t: object, allow_bool: bool) -> torch.Tensor:
    t = check_tensor(name, t)
    ok = t.is_floating_point() or (allow_bool and t.dtype == torch.bool)
    if not ok:
        want = "a floating or bool tensor" if allow_bool else "a floating tensor"
        raise TypeError(f"{name}: expected {want}, got dtype {t.dtype}")
    if t.dim() < 2:
        raise ValueError(f"{name}: expected a tensor (N, *spatial), got shape {tuple(t.shape)}")
    # clone: torch.save writes a view's whole storage
    return t.detach().to("cpu").clone(memory_format=torch.contiguous_format)


def write_neuralop_pt(
    path: str | os.PathLike,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    extra: Mapping[str, torch.Tensor] | None = None,
) -> Path:
    """Write ``{"x": x, "y": y, **extra}`` in the on-disk layout read by :func:`load_neuralop_pt`.

    ``x`` (N, *spatial) floating or bool, ``y`` (N, *spatial) floating, channel-squeezed and
    saved with their dtypes. The file is written to a temporary file in the same directory
    (created if needed) and moved into place with ``os.replace``, so readers never see a partial
    file. Returns the path.
    """
    p = Path(path)
    x = _for_disk("x", x, allow_bool=True)
    y = _for_disk("y", y, allow_bool=False)
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"x, y: expected the same number of samples N, got x {tuple(x.shape)} and y {tuple(y.shape)}"
        )
    check_finite("y", y)
    obj: dict[str, torch.Tensor] = {"x": x, "y": y}
    for key, value in (extra or {}).items():
        if key in obj:
            raise ValueError(f"extra: key {key!r} clashes with the x/y entries")
        obj[key] = check_tensor(f"extra[{key!r}]", value).detach().to("cpu").clone()
    with atomic_path(p) as tmp:
        torch.save(obj, tmp)
    return p
