"""In-memory dataset of input/output pairs sampled on a regular grid.

A sample is ``{"x": Tensor (C_in, *spatial), "y": Tensor (C_out, *spatial)}``, float32, channels
first: the data contract of every sciattn loader.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import Dataset

from sciattn._checks import check_tensor

__all__ = ["GridPairDataset"]


def _as_float32(name: str, t: torch.Tensor) -> torch.Tensor:
    if t.is_complex():
        raise TypeError(f"{name}: expected a real or bool tensor, got dtype {t.dtype}")
    return t.to(torch.float32)


def _require_grid(name: str, t: torch.Tensor) -> None:
    if t.dim() < 3:
        raise ValueError(
            f"{name}: expected a tensor (N, C, *spatial) with at least one spatial axis, "
            f"got shape {tuple(t.shape)}"
        )


class GridPairDataset(Dataset):
    """Pairs ``x`` (N, C_in, *spatial) and ``y`` (N, C_out, *spatial) held in memory.

    Both tensors are cast to float32 (bool and integer inputs become 0/1 or their values).
    ``meta`` is free-form provenance (source path, name, split, resolution, variable names...);
    it is copied, not shared.

    Raises ``ValueError`` naming both shapes when ``x`` and ``y`` differ in the number of samples
    N or in the spatial shape.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, meta: Mapping[str, Any] | None = None):
        check_tensor("x", x)
        check_tensor("y", y)
        _require_grid("x", x)
        _require_grid("y", y)
        if x.shape[0] != y.shape[0] or x.shape[2:] != y.shape[2:]:
            raise ValueError(
                "x, y: expected the same number of samples N and the same spatial shape, "
                f"got x {tuple(x.shape)} (N, C_in, *spatial) and y {tuple(y.shape)} (N, C_out, *spatial)"
            )
        self.x = _as_float32("x", x)
        self.y = _as_float32("y", y)
        self.meta: dict[str, Any] = dict(meta or {})

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        """Sample ``i``: ``{"x": (C_in, *spatial), "y": (C_out, *spatial)}``."""
        return {"x": self.x[i], "y": self.y[i]}

    @property
    def resolution(self) -> tuple[int, ...]:
        """Spatial shape, e.g. ``(16, 16)``."""
        return tuple(self.x.shape[2:])

    @property
    def in_channels(self) -> int:
        return self.x.shape[1]

    @property
    def out_channels(self) -> int:
        return self.y.shape[1]

    def __repr__(self) -> str:
        return (
            f"GridPairDataset(n={len(self)}, in_channels={self.in_channels}, "
            f"out_channels={self.out_channels}, resolution={self.resolution}, meta={self.meta})"
        )
