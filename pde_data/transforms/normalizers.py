"""Per-channel normalisers, fitted on the training split only and saved with checkpoints.

Statistics have shape ``(1, C, 1, ..., 1)``: they reduce over samples and all spatial axes, so a
normaliser fitted on 16x16 data applies unchanged to 128x128 inputs of the same channels.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from sciattn._checks import check_choice

from ..grid_dataset import GridPairDataset

__all__ = [
    "IdentityNormalizer",
    "UnitGaussianNormalizer",  # noqa: F822  (module __getattr__: imported on first use)
    "fit_normalizers",
    "normalizer_from_state",
    "normalizer_to_state",
]

class IdentityNormalizer(nn.Module):
    """No-op normaliser with the same interface: ``encode(x) = decode(x) = x``."""

    fitted = True

    def fit(self, data: torch.Tensor) -> IdentityNormalizer:
        return self

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return x

    transform = encode
    inverse_transform = decode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def _unit_gaussian():
    """The Gaussian normaliser class, imported on first use (it imports neuraloperator)."""
    from .unit_gaussian import UnitGaussianNormalizer

    return UnitGaussianNormalizer


def __getattr__(name: str):
    if name == "UnitGaussianNormalizer":
        return _unit_gaussian()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


Normalizer = "UnitGaussianNormalizer | IdentityNormalizer"


def normalizer_to_state(n: Normalizer) -> dict[str, Any]:
    """Plain dict (str, float, CPU tensors) for ``torch.save`` and ``torch.load(weights_only=True)``."""
    if isinstance(n, IdentityNormalizer):
        return {"kind": "identity"}
    if f"{__package__}.unit_gaussian" in sys.modules and isinstance(n, _unit_gaussian()):
        if not n.fitted:
            raise ValueError("n: expected a fitted UnitGaussianNormalizer, got an unfitted one")
        return {
            "kind": "unit_gaussian",
            "mean": n.mean.detach().cpu().clone(),
            "std": n.std.detach().cpu().clone(),
            "eps": float(n.eps),
        }
    raise TypeError(f"n: expected a UnitGaussianNormalizer or IdentityNormalizer, got {type(n).__name__}")


def normalizer_from_state(d: dict[str, Any]) -> Normalizer:
    """Inverse of :func:`normalizer_to_state`."""
    if not isinstance(d, dict) or "kind" not in d:
        raise ValueError(f"d: expected a dict with a 'kind' entry, got {type(d).__name__}")
    kind = check_choice("d['kind']", d["kind"], ("identity", "unit_gaussian"))
    if kind == "identity":
        return IdentityNormalizer()
    missing = [k for k in ("mean", "std", "eps") if k not in d]
    if missing:
        raise ValueError(f"d: unit_gaussian state lacks {missing} (keys found: {sorted(d)})")
    return _unit_gaussian()(mean=d["mean"], std=d["std"], eps=d["eps"])


def fit_normalizers(
    train_dataset: GridPairDataset, *, normalize_x: bool = True, normalize_y: bool = True
) -> tuple[Normalizer, Normalizer]:
    """``(x_norm, y_norm)`` fitted on ``train_dataset.x`` (N, C_in, *spatial) and ``.y`` (N, C_out, *spatial).

    A disabled side gets an :class:`IdentityNormalizer`. Refuses a dataset whose ``meta["split"]``
    is ``"test"``: statistics come from the training split only.
    """
    if not isinstance(train_dataset, GridPairDataset):
        raise TypeError(f"train_dataset: expected a GridPairDataset, got {type(train_dataset).__name__}")
    if train_dataset.meta.get("split") == "test":
        raise ValueError(
            f"train_dataset: expected the training split, got split 'test' ({train_dataset.meta.get('source')})"
        )
    x_norm = _unit_gaussian()().fit(train_dataset.x) if normalize_x else IdentityNormalizer()
    y_norm = _unit_gaussian()().fit(train_dataset.y) if normalize_y else IdentityNormalizer()
    return x_norm, y_norm
