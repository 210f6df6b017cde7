"""Atomic checkpoints that load with ``torch.load(weights_only=True)``.

A checkpoint is a dict of tensors and plain data only::

    {"format": "sciattn-checkpoint", "version": 2,
     "operator": str, "operator_config": JSON str, "operator_config_version": int, "run_config": JSON str,
     "model": state_dict, "x_normalizer": {...}, "y_normalizer": {...},
     "optimizer": state_dict | None, "scheduler": state_dict | None,
     "epoch": int, "step": int, "rng": ByteTensor, "metrics": JSON str,
     "training": {...}, "data_meta": JSON str}

``epoch`` counts completed epochs and ``step`` optimiser steps. ``training`` (version 2, written
by the trainer) holds what an exact continuation needs beyond the weights: the sampler position
(``batches_done`` of the current epoch), each rank's RNG states (:func:`capture_rng_state`: torch
CPU and CUDA, NumPy's global generator, Python's ``random``), the gradient scaler and the running
sums of the unfinished epoch. Version 1 files (no ``step``/``training``) still load.

``operator_config`` holds the constructor arguments (``model.config``) and ``operator_config_version`` the class's
``config_version``; :func:`load_model` passes them through the operator's own migrations
(:func:`~sciattn.operators.registry.migrate_stored`), so a config stored before a default changed rebuilds the model
it was saved with. Files without the version (before 2026-12) load with ``None``.

``data_meta`` (written by the trainer; see :mod:`.run_metadata`) describes the training data: variable
names, ``dt``, the domain, the data source, per-channel statistics and the training resolution. It is
a JSON string, so the file still loads with ``weights_only=True``; files without it still load and
:func:`~.run_metadata.read_data_meta` falls back to what they recorded.

It is written to a temporary file in the target directory (``.checkpoint.pt.<PID>.<random>.tmp``,
see :mod:`sciattn._io`), flushed to disk, given the umask's permissions (``0o666 & ~umask``) and
renamed over the target, so a killed run leaves either the previous checkpoint or the new one,
never a torn file; the temporary file a SIGKILL leaves behind is removed at the next start of a
run in that directory (:func:`remove_stale_temp_files`). A full disk raises ``OSError(ENOSPC)``
naming the checkpoint (torch's own writer would report a bare ``RuntimeError``).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sciattn._io import atomic_path, atomic_write_bytes, file_mode, remove_stale_temp_files
from sciattn.operators import create_operator
from sciattn.operators.registry import migrate_stored
from sciattn.pde_data.normalizers import normalizer_from_state, normalizer_to_state

__all__ = [
    "atomic_torch_save", "atomic_write_bytes", "capture_rng_state", "file_mode", "load_checkpoint", "load_model",
    "remove_stale_temp_files", "restore_rng_state", "save_checkpoint",
]

FORMAT = "sciattn-checkpoint"
VERSION = 2


def capture_rng_state() -> dict[str, Any]:
    """This process's RNG states as tensors and plain data (loadable with ``weights_only=True``)."""
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                  "cached_gaussian": float(gauss)},
        "python": {"version": int(py_version), "state": torch.tensor(py_state, dtype=torch.int64),
                   "gauss": py_gauss},
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["state"].tolist()), p["gauss"]))


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` through a temporary file and ``os.replace``. Saved through a Python file object,
    so write errors surface as ``OSError`` with their errno (``ENOSPC``: disk full)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        torch.save(obj, fh)
    return Path(path)


def save_checkpoint(
    path: str | os.PathLike,
    *,
    model: nn.Module,
    x_normalizer: nn.Module,
    y_normalizer: nn.Module,
    run_config: dict[str, Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    epoch: int = 0,
    metrics: dict[str, Any] | None = None,
    step: int = 0,
    training: dict[str, Any] | None = None,
    data_meta: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint of ``model`` (built by ``create_operator``) atomically.

    ``training``: the trainer's resumption state (tensors and plain data), stored as is.
    ``data_meta``: plain JSON data about the training data (:func:`~.run_metadata.collect_data_meta`),
    stored as a JSON string under ``state["data_meta"]``.
    """
    name = getattr(model, "operator_name", None)
    config = getattr(model, "config", None)
    if name is None or config is None:
        raise ValueError("model: expected an operator built by sciattn.operators.create_operator, got one without a config")
    if data_meta is not None and not isinstance(data_meta, dict):
        raise TypeError(f"data_meta: expected a dict of plain JSON data or None, got {type(data_meta).__name__}")
    try:
        data_meta_json = json.dumps(data_meta or {})
    except (TypeError, ValueError) as err:
        raise TypeError(f"data_meta: expected plain JSON data (numbers, strings, lists, dicts), got {err}") from None
    state = {
        "format": FORMAT,
        "version": VERSION,
        "operator": name,
        "operator_config": json.dumps(config),
        "operator_config_version": int(type(model).config_version),
        "run_config": json.dumps(run_config or {}),
        "model": model.state_dict(),
        "x_normalizer": normalizer_to_state(x_normalizer),
        "y_normalizer": normalizer_to_state(y_normalizer),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "epoch": int(epoch),
        "step": int(step),
        "rng": torch.get_rng_state(),
        "metrics": json.dumps(metrics or {}),
        "training": training or {},
        "data_meta": data_meta_json,
    }
    return atomic_torch_save(state, path)


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; errors name the path."""
    p = Path(path)
    if p.is_dir():
        p = p / "checkpoint.pt"
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint: expected an existing file, got {str(p)!r}")
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for corrupt files
        from sciattn._checks import unreadable_file

        raise unreadable_file("checkpoint", p, "a torch checkpoint", "torch", err) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"checkpoint: {str(p)!r} is not a sciattn checkpoint")
    return state


def _check_weights(path: str | os.PathLike, model: nn.Module, weights: Any) -> None:
    """The checkpoint's weights must fit the model its config builds: one line naming the
    checkpoint, the first mismatched key and both shapes."""
    p = Path(path)
    p = p / "checkpoint.pt" if p.is_dir() else p
    if not isinstance(weights, dict):
        raise ValueError(f"checkpoint: {str(p)!r}: expected a state_dict of weights, got {type(weights).__name__}")
    own = model.state_dict()
    bad = [k for k, v in weights.items()
           if k in own and isinstance(v, torch.Tensor) and tuple(v.shape) != tuple(own[k].shape)]
    if bad:
        key = bad[0]
        raise ValueError(
            f"checkpoint: {str(p)!r} does not match its config: weight {key!r} has shape "
            f"{tuple(weights[key].shape)} in the checkpoint, the model built from operator_config expects "
            f"{tuple(own[key].shape)} ({len(bad)} mismatched weight(s))"
        )


def _load_weights(path: str | os.PathLike, model: nn.Module, weights: Any) -> None:
    """``model.load_state_dict(weights)`` with shape mismatches and missing or unexpected keys
    reported in one line naming the checkpoint (the model's load hooks, e.g. a dropped legacy
    weight, still apply: keys are judged by torch's strict load, not before it)."""
    _check_weights(path, model, weights)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        p = Path(path)
        p = p / "checkpoint.pt" if p.is_dir() else p
        detail = " ".join(line.strip() for line in str(err).splitlines()[1:] if line.strip()) or str(err)
        raise ValueError(f"checkpoint: {str(p)!r} does not match its config: {detail}") from None


# The per-operator migrations of stored configs live on the operators (``Operator.migrate_config``, ``renamed_to``:
# :mod:`sciattn.operators.contract`); these names, each once one operator's migration, all apply them now.
migrate_mano_split = migrate_ball_modes = migrate_multipole_pyramid = migrate_variant = migrate_stored


def stored_operator(state: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(name, config)`` that rebuild the operator of a checkpoint ``state`` under this version's defaults
    (:func:`~sciattn.operators.registry.migrate_stored`: the operator's own migrations of its stored config)."""
    version = state.get("operator_config_version")
    return migrate_stored(str(state["operator"]), json.loads(state["operator_config"]),
                          int(version) if isinstance(version, int) else None)


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu"):
    """Rebuild ``(model, x_normalizer, y_normalizer, state)`` from a checkpoint or run directory."""
    state = load_checkpoint(path)
    name, config = stored_operator(state)
    model = create_operator(name, **config)
    _load_weights(path, model, state["model"])
    model.to(device).eval()
    xn = normalizer_from_state(state["x_normalizer"]).to(device)
    yn = normalizer_from_state(state["y_normalizer"]).to(device)
    return model, xn, yn, state
