"""Training losses and metrics, reusing neuraloperator's relative Lp and H1 losses.

The grid losses take channels-first fields ``(B, C, *spatial)`` and return the mean over the batch of
per-sample relative errors (the metric convention of the FNO papers). Point-set losses take
channels-last features ``(B, N, C)`` of padded clouds with a ``mask`` ``(B, N)`` and quadrature
``weights`` ``(B, N)``: padding points never enter, and the norms are the weighted discrete L2 norms
``‖f‖² = Σ_n w_n f_n²`` of the real points (uniform weights give the plain relative L2 error).
"""

from __future__ import annotations

import torch

from sciattn._checks import check_choice

__all__ = ["relative_l2", "relative_h1", "relative_l2_points", "make_loss", "LOSSES", "POINT_LOSSES"]

LOSSES = ("l2", "h1", "l2+h1")
POINT_LOSSES = ("l2",)


def relative_l2(pred: torch.Tensor, target: torch.Tensor, spatial_dims: int) -> torch.Tensor:
    """Mean over samples and channels of ``‖pred − target‖₂ / ‖target‖₂`` (norms over space)."""
    from neuralop.losses import LpLoss  # slow to import: only when a loss is evaluated

    return LpLoss(d=spatial_dims, p=2, reduction="mean")(pred, target)


def relative_h1(pred: torch.Tensor, target: torch.Tensor, spatial_dims: int) -> torch.Tensor:
    """Mean over samples of the relative H1 norm error (neuraloperator's finite differences)."""
    from neuralop.losses import H1Loss

    return H1Loss(d=spatial_dims, reduction="mean", periodic_in_x=False, periodic_in_y=False,
                  periodic_in_z=False)(pred, target)


def relative_l2_points(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None,
                       weights: torch.Tensor | None = None, eps: float = 1e-12, group=None) -> torch.Tensor:
    """Mean over clouds and channels of ``sqrt(Σ_n w_n (p_n − t_n)²) / sqrt(Σ_n w_n t_n²)`` over the real
    points (``mask``) of ``pred``/``target`` ``(B, N, C)``; ``weights`` ``(B, N)`` default uniform.

    ``group``: the points are this rank's part of each cloud, split over the ranks of ``group``; the two sums
    over the points are all-reduced (differentiably), so every rank returns the error of the whole clouds."""
    w = torch.ones(pred.shape[:2], dtype=pred.dtype, device=pred.device) if weights is None else weights.to(pred.dtype)
    if mask is not None:
        w = torch.where(mask, w, torch.zeros((), dtype=w.dtype, device=w.device))
    diff = pred - target
    zero = torch.zeros((), dtype=pred.dtype, device=pred.device)
    if mask is not None:  # padding may hold anything, even non-finite values: select, do not multiply
        diff = torch.where(mask[..., None], diff, zero)
        target = torch.where(mask[..., None], target, zero)
    num, den = (w[..., None] * diff.square()).sum(1), (w[..., None] * target.square()).sum(1)
    if group is not None:
        from sciattn.partial_sums import RankSums

        num, den = RankSums(group)((num, den))
    return (num.sqrt() / den.sqrt().clamp_min(eps)).mean()


def make_loss(name: str, spatial_dims: int, h1_weight: float = 0.0, points: bool = False, group=None):
    """``loss(pred, target, batch=None)`` for ``name`` in :data:`LOSSES`; ``l2+h1`` is ``l2 + h1_weight·h1``.

    ``points``: the point-set relative L2 error (:func:`relative_l2_points`, with the batch's
    ``mask`` and ``weights``; ``group``: the points split over its ranks); only ``"l2"`` is defined there
    (H1 needs a grid)."""
    if points:
        check_choice("loss (point-set data)", name, POINT_LOSSES)
        return lambda p, t, batch=None: relative_l2_points(
            p, t, None if batch is None else batch.get("mask"), None if batch is None else batch.get("weights"),
            group=group)
    check_choice("loss", name, LOSSES)
    inner = _grid_loss(name, spatial_dims, h1_weight)
    return lambda p, t, batch=None: inner(p, t)


def _grid_loss(name: str, spatial_dims: int, h1_weight: float):
    if name == "l2":
        return lambda p, t: relative_l2(p, t, spatial_dims)
    if name == "h1":
        return lambda p, t: relative_h1(p, t, spatial_dims)
    return lambda p, t: relative_l2(p, t, spatial_dims) + h1_weight * relative_h1(p, t, spatial_dims)
