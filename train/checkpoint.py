"""Atomic checkpoints that load with ``torch.load(weights_only=True)``.

A checkpoint is a dict of tensors and plain data only::

    {"format": "sciattn-checkpoint", "version": 1,
     "operator": str, "operator_config": JSON str, "run_config": JSON str,
     "model": state_dict, "x_normalizer": {...}, "y_normalizer": {...},
     "optimizer": state_dict | None, "scheduler": state_dict | None,
     "epoch": int, "rng": ByteTensor, "metrics": JSON str}

It is written to a temporary file in the target directory, flushed to disk and renamed over
the target, so a killed run leaves either the previous checkpoint or the new one, never a
torn file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sciattn._io import atomic_path, atomic_write_bytes
from sciattn.operators import create_operator
from sciattn.pde_data.normalizers import normalizer_from_state, normalizer_to_state

__all__ = ["save_checkpoint", "load_checkpoint", "load_model", "atomic_write_bytes", "atomic_torch_save"]

FORMAT = "sciattn-checkpoint"


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` through a temporary file and ``os.replace``."""
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)
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
) -> Path:
    """Write a checkpoint of ``model`` (built by ``create_operator``) atomically."""
    name = getattr(model, "operator_name", None)
    config = getattr(model, "config", None)
    if name is None or config is None:
        raise ValueError("model: expected an operator built by sciattn.operators.create_operator, got one without a config")
    state = {
        "format": FORMAT,
        "version": 1,
        "operator": name,
        "operator_config": json.dumps(config),
        "run_config": json.dumps(run_config or {}),
        "model": model.state_dict(),
        "x_normalizer": normalizer_to_state(x_normalizer),
        "y_normalizer": normalizer_to_state(y_normalizer),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "epoch": int(epoch),
        "rng": torch.get_rng_state(),
        "metrics": json.dumps(metrics or {}),
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
        raise ValueError(f"checkpoint: could not read {str(p)!r}: {err}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"checkpoint: {str(p)!r} is not a sciattn checkpoint")
    return state


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu"):
    """Rebuild ``(model, x_normalizer, y_normalizer, state)`` from a checkpoint or run directory."""
    state = load_checkpoint(path)
    model = create_operator(state["operator"], **json.loads(state["operator_config"]))
    model.load_state_dict(state["model"])
    model.to(device).eval()
    xn = normalizer_from_state(state["x_normalizer"]).to(device)
    yn = normalizer_from_state(state["y_normalizer"]).to(device)
    return model, xn, yn, state
