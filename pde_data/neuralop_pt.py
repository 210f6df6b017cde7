"""Reader and writer for neuraloperator's ``.pt`` dataset files.

On disk, ``{name}_{split}_{res}.pt`` (split ``train`` or ``test``) is a ``torch.save``d dict with
keys ``"x"`` and ``"y"`` (extra keys are ignored by the reader). The tensors are
channel-squeezed, ``(N, *spatial)``; the reader adds the channel axis, giving
``x`` (N, 1, *spatial) and ``y`` (N, 1, *spatial) as float32 (Darcy's ``x`` is stored as bool and
becomes 0.0/1.0). Files are only read with ``torch.load(weights_only=True)``.
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

from .grid_dataset import GridPairDataset

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


def load_neuralop_pt(
    path: str | os.PathLike,
    *,
    n_samples: int | None = None,
    channel_squeezed: bool | tuple[bool, bool] = True,
) -> GridPairDataset:
    """Load one neuraloperator ``.pt`` file as a :class:`GridPairDataset`.

    Stored ``x``/``y`` are ``(N, *spatial)`` and come back as ``(N, 1, *spatial)`` float32. With
    ``channel_squeezed=False`` they are taken as already ``(N, C, *spatial)``; a pair
    ``(x_squeezed, y_squeezed)`` sets this per key (e.g. Burgers, ``x`` (N, 16) and ``y``
    (N, 17, 16) with the 17 time steps as output channels: ``(True, False)``).
    ``n_samples`` keeps the first ``n_samples`` samples.

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
    }
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
