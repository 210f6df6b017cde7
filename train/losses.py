"""Training losses and metrics, reusing neuraloperator's relative Lp and H1 losses.

All take channels-first fields ``(B, C, *spatial)`` and return the mean over the batch of
per-sample relative errors (the metric convention of the FNO papers).
"""

from __future__ import annotations

import torch
from neuralop.losses import H1Loss, LpLoss

from sciattn._checks import check_choice

__all__ = ["relative_l2", "relative_h1", "make_loss", "LOSSES"]

LOSSES = ("l2", "h1", "l2+h1")


def relative_l2(pred: torch.Tensor, target: torch.Tensor, spatial_dims: int) -> torch.Tensor:
    """Mean over samples and channels of ``‖pred − target‖₂ / ‖target‖₂`` (norms over space)."""
    return LpLoss(d=spatial_dims, p=2, reduction="mean")(pred, target)


def relative_h1(pred: torch.Tensor, target: torch.Tensor, spatial_dims: int) -> torch.Tensor:
    """Mean over samples of the relative H1 norm error (neuraloperator's finite differences)."""
    return H1Loss(d=spatial_dims, reduction="mean", periodic_in_x=False, periodic_in_y=False,
                  periodic_in_z=False)(pred, target)


def make_loss(name: str, spatial_dims: int, h1_weight: float = 0.0):
    """``loss(pred, target)`` for ``name`` in :data:`LOSSES`; ``l2+h1`` is ``l2 + h1_weight·h1``."""
    check_choice("loss", name, LOSSES)
    if name == "l2":
        return lambda p, t: relative_l2(p, t, spatial_dims)
    if name == "h1":
        return lambda p, t: relative_h1(p, t, spatial_dims)
    return lambda p, t: relative_l2(p, t, spatial_dims) + h1_weight * relative_h1(p, t, spatial_dims)
