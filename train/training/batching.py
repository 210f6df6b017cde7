"""Batches for the trainer and the evaluation: grid pairs stacked, point samples padded with a mask,
and the one call ``predict(model, batch, x_normalizer, y_normalizer)`` that serves both.

Grid samples ``{"x": (C_in, *spatial), "y": (C_out, *spatial)}`` stack to ``(B, C, *spatial)`` and
the model is called as ``model(x)``. Point samples ``{"x": (N_i, C_in), "y": (N_i, C_out),
"pos": (N_i, d), "weights": (N_i,)}`` (``N_i`` may differ) are padded to ``N = max N_i``:
``x``, ``y``, ``pos`` ``(B, N, ·)`` with zeros, ``weights`` ``(B, N)`` with zeros and ``mask``
``(B, N)`` True on real points; the model is called as ``model(x, pos=pos, mask=mask,
weights=weights)`` (Erwin, BSA and the point-set Galerkin Transformer all take these keywords).

Normalisers hold per-channel statistics of shape ``(1, C, 1)``; point features ``(B, N, C)`` are
encoded channels first (``(B, C, N)``) and transposed back.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["collate", "is_point_batch", "predict", "encode", "decode", "target_channels", "POINT_KEYS"]

POINT_KEYS = ("x", "y", "pos", "weights")


def _pad(ts: list[torch.Tensor], n: int) -> torch.Tensor:
    out = ts[0].new_zeros((len(ts), n, *ts[0].shape[1:]))
    for i, t in enumerate(ts):
        out[i, : t.shape[0]] = t
    return out


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack grid samples; pad point samples (those with ``pos``) and add ``mask``."""
    if "pos" not in samples[0]:
        return {k: torch.stack([s[k] for s in samples]) for k in ("x", "y")}
    n = max(s["x"].shape[0] for s in samples)
    out = {k: _pad([s[k] for s in samples], n) for k in POINT_KEYS if k in samples[0]}
    mask = torch.zeros(len(samples), n, dtype=torch.bool)
    for i, s in enumerate(samples):
        mask[i, : s["x"].shape[0]] = True
    out["mask"] = mask
    if "weights" not in out:
        out["weights"] = mask.float() / mask.sum(1, keepdim=True)
    return out


def is_point_batch(batch: dict[str, Any]) -> bool:
    return "mask" in batch


def encode(normalizer: nn.Module, x: torch.Tensor, points: bool) -> torch.Tensor:
    return normalizer.encode(x.transpose(1, 2)).transpose(1, 2) if points else normalizer.encode(x)


def decode(normalizer: nn.Module, x: torch.Tensor, points: bool) -> torch.Tensor:
    return normalizer.decode(x.transpose(1, 2)).transpose(1, 2) if points else normalizer.decode(x)


def predict(model: nn.Module, batch: dict[str, torch.Tensor], x_normalizer: nn.Module, y_normalizer: nn.Module,
            x: torch.Tensor | None = None, autocast=None) -> torch.Tensor:
    """The decoded prediction for ``batch`` (or for inputs ``x`` on the batch's geometry)."""
    points = is_point_batch(batch)
    x = batch["x"] if x is None else x
    ctx = autocast() if autocast is not None else torch.autocast("cpu", enabled=False)
    with ctx:
        if points:
            out = model(encode(x_normalizer, x, True), pos=batch["pos"], mask=batch["mask"],
                        weights=batch["weights"])
        else:
            out = model(x_normalizer.encode(x))
    return decode(y_normalizer, out.float(), points)


def target_channels(batch: dict[str, torch.Tensor]) -> int:
    """Channels of the batch's target ``y``."""
    return batch["y"].shape[-1] if is_point_batch(batch) else batch["y"].shape[1]


def to_device(batch: dict[str, torch.Tensor], device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}
