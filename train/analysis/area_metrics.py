"""Area-weighted errors on sphere grids and an autoregressive rollout evaluation.

On a latitude–longitude grid the points near the poles cover little area, so a plain mean over grid points
over-counts them. With area weights ``q_kj`` (e.g. :meth:`sciattn.domain.SphereGrid.quadrature_weights`,
``Σ q = 4π``) the errors of one sample and channel are quadratures of surface integrals:

    L2 (absolute)   ( Σ q (p − t)² / Σ q )^{1/2}              ≈ ( ∫ (p − t)² dA / 4π )^{1/2}
    L2 (relative)   ( Σ q (p − t)² / Σ q t² )^{1/2}
    L1 (absolute)   Σ q |p − t| / Σ q
    L1 (relative)   Σ q |p − t| / Σ q |t|

(absolute errors are area means, as torch-harmonics' ``L2LossS2`` / ``L1LossS2`` with weights normalised to
sum to one). A sample–channel whose target is identically zero has an infinite (or NaN) relative error.
Relative errors of a field with a large mean (the geopotential ``φ ≈ g havg``) are tiny; evaluate
normalised fields or anomalies.

``reduction``: ``"none"`` -> ``(B, C)``, ``"channel"`` -> ``(C,)`` (mean over the batch), ``"mean"`` -> ``()``
(mean over batch and channels).

Shapes:
    pred, target ``(B, C, nlat, nlon)``; weights ``(nlat, nlon)``, non-negative with a positive sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sciattn._checks import check_choice, check_finite, check_rank

from .rollout import stability_verdict

__all__ = ["REDUCTIONS", "area_weighted_l2", "area_weighted_l1", "RolloutResult", "rollout_errors"]

REDUCTIONS = ("none", "channel", "mean")


def _check(pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor, reduction: str) -> torch.Tensor:
    check_rank("pred", pred, 4, "(B, C, nlat, nlon)")
    check_rank("target", target, 4, "(B, C, nlat, nlon)")
    if pred.shape != target.shape:
        raise ValueError(f"pred, target: expected equal shapes, got {tuple(pred.shape)} and {tuple(target.shape)}")
    check_rank("weights", weights, 2, "(nlat, nlon)")
    if tuple(weights.shape) != tuple(pred.shape[-2:]):
        raise ValueError(f"weights: expected shape {tuple(pred.shape[-2:])} (nlat, nlon), got {tuple(weights.shape)}")
    check_finite("weights", weights)
    if bool((weights < 0).any()) or not bool(weights.sum() > 0):
        raise ValueError("weights: expected non-negative values with a positive sum")
    check_choice("reduction", reduction, REDUCTIONS)
    return weights.to(dtype=pred.dtype, device=pred.device)


def _reduce(err: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return err
    return err.mean(0) if reduction == "channel" else err.mean()


def _wsum(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return (x * q).sum((-2, -1))


def area_weighted_l2(
    pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor, relative: bool = True, reduction: str = "mean"
) -> torch.Tensor:
    """Area-weighted L2 error per sample and channel, then reduced (see the module docstring)."""
    q = _check(pred, target, weights, reduction)
    num = _wsum((pred - target) ** 2, q)
    den = _wsum(target**2, q) if relative else q.sum()
    return _reduce(torch.sqrt(num / den), reduction)


def area_weighted_l1(
    pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor, relative: bool = True, reduction: str = "mean"
) -> torch.Tensor:
    """Area-weighted L1 error per sample and channel, then reduced (see the module docstring)."""
    q = _check(pred, target, weights, reduction)
    num = _wsum((pred - target).abs(), q)
    den = _wsum(target.abs(), q) if relative else q.sum()
    return _reduce(num / den, reduction)


@dataclass(frozen=True)
class RolloutResult:
    """Errors of an autoregressive rollout.

    Attributes:
        errors: ``(T, C)`` error per step and channel (mean over the batch); step ``k`` (0-based) compares the
            prediction after ``k + 1`` applications of ``step_fn`` with ``targets_over_time[:, k]``.
        mean_errors: ``(T,)`` mean over channels.
        bound: the stability bound on ``mean_errors``.
        stable: every prediction finite and every ``mean_errors`` entry ``<= bound``.
        first_failure: 0-based index of the first step that is non-finite or above the bound, ``None`` if stable.
        verdict: the package-wide stability rule (:func:`sciattn.train.analysis.rollout.stability_verdict`) applied to
            ``mean_errors`` with ``threshold = bound``: ``"stable"``, ``"growing"`` or ``"unstable"`` and why.
    """

    errors: torch.Tensor
    mean_errors: torch.Tensor
    bound: float
    stable: bool
    first_failure: int | None
    verdict: dict


def rollout_errors(
    step_fn: Callable[[torch.Tensor], torch.Tensor],
    initial_states: torch.Tensor,
    targets_over_time: torch.Tensor,
    weights: torch.Tensor,
    *,
    metric: str = "l2",
    relative: bool = True,
    bound: float = 1.0,
) -> RolloutResult:
    """Roll ``step_fn`` forward from ``initial_states`` and score every step against the targets.

    ``u_{k+1} = step_fn(u_k)``, ``u_0 = initial_states``; error ``e_k = metric(u_{k+1}, targets[:, k])``
    (:func:`area_weighted_l2` or :func:`area_weighted_l1`, per channel, mean over the batch), under
    ``torch.no_grad``. The verdict is *stable* when every prediction is finite and the channel-mean error stays
    ``<= bound``; the default ``bound = 1`` for relative errors means "never worse than predicting zero".

    Shapes:
        initial_states ``(B, C, nlat, nlon)``; targets_over_time ``(B, T, C, nlat, nlon)``;
        weights ``(nlat, nlon)``; ``step_fn`` maps ``(B, C, nlat, nlon)`` to the same shape.
    """
    check_choice("metric", metric, ("l2", "l1"))
    check_rank("initial_states", initial_states, 4, "(B, C, nlat, nlon)")
    check_rank("targets_over_time", targets_over_time, 5, "(B, T, C, nlat, nlon)")
    b, _, c, h, w = targets_over_time.shape
    if tuple(initial_states.shape) != (b, c, h, w):
        raise ValueError(
            f"initial_states: expected shape {(b, c, h, w)} to match targets_over_time {tuple(targets_over_time.shape)}, "
            f"got {tuple(initial_states.shape)}"
        )
    if not callable(step_fn):
        raise TypeError(f"step_fn: expected a callable, got {type(step_fn).__name__}")
    bound = float(bound)
    if not bound > 0:
        raise ValueError(f"bound: expected a positive number, got {bound}")
    fn = area_weighted_l2 if metric == "l2" else area_weighted_l1
    errors, finite = [], []
    state = initial_states
    with torch.no_grad():
        for k in range(targets_over_time.shape[1]):
            state = step_fn(state)
            if not isinstance(state, torch.Tensor) or tuple(state.shape) != (b, c, h, w):
                got = tuple(state.shape) if isinstance(state, torch.Tensor) else type(state).__name__
                raise ValueError(f"step_fn: expected to return shape {(b, c, h, w)}, got {got} at step {k}")
            target = targets_over_time[:, k]
            finite.append(bool(torch.isfinite(state).all()))
            errors.append(fn(state, target.to(state.dtype), weights, relative=relative, reduction="channel"))
    err = torch.stack(errors)
    mean = err.mean(-1)
    bad = [k for k in range(len(finite)) if not finite[k] or not bool(mean[k] <= bound)]
    per_step = [float(e) if finite[k] else math.nan for k, e in enumerate(mean)]
    verdict = stability_verdict(per_step, threshold=bound)
    return RolloutResult(err, mean, bound, not bad, bad[0] if bad else None, verdict)
