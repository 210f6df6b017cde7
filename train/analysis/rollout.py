"""Autoregressive rollout error of a time-stepping operator, and a stability verdict.

A trajectory sample holds ``x = (u_1, ..., u_{C_in})`` and ``y = (u_{C_in+1}, ..., u_{C_in+K})``
(time steps as channels). An operator ``G`` maps ``C_in`` consecutive steps to the next ``C_out``.
The rollout feeds its own predictions back::

    w_0 = x;   p_j = G(w_{j-1});   w_j = last C_in steps of (w_{j-1}, p_j),   j = 1 .. ceil(K / C_out)

and the prediction ``û_{C_in+k}`` (``k = 1..K``) is frame ``k`` of ``(p_1, p_2, ...)``. The error at
frame ``k`` is the mean over samples of ``‖û_k − u_k‖₂ / ‖u_k‖₂`` (norms over the grid), which is
the discrete relative L2 error of that step.

Stability rule (:func:`stability_verdict`), on the per-frame errors ``e_1..e_K``:

1. ``"unstable"`` if some ``e_k`` is NaN or Inf, or exceeds ``threshold`` (default 1: the
   prediction is further from the truth than the zero field is);
2. otherwise ``"growing"`` if the per-frame growth factor ``g = exp(s)``, with ``s`` the least-squares
   slope of ``log e_k`` against ``k`` over the second half of the frames (at least 2), exceeds
   ``max_growth`` (default 1.1, i.e. +10 % per frame): bounded on this horizon but growing
   exponentially; the report gives the frame at which ``e_K · g^m`` would reach ``threshold``;
3. otherwise ``"stable"``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..training.losses import relative_l2

__all__ = ["autoregressive", "rollout_errors", "stability_verdict", "STABILITY_RULE"]

ROUND_OFF = 1e-9  # errors below ROUND_OFF * threshold are not tested for growth

STABILITY_RULE = (
    "unstable: an error is NaN/Inf or above the threshold; growing: below the threshold but the per-frame growth "
    "factor exp(slope of log error against frame, least squares over the second half of the frames) exceeds "
    "max_growth (not tested while the last error is below 1e-9 x threshold); stable: otherwise"
)


def autoregressive(step, x: torch.Tensor, *, applications: int | None = None, frames: int | None = None,
                   dim: int = 1) -> torch.Tensor:
    """The module's rollout of ``step`` from inputs ``x``: ``applications`` applications, or as many as
    cover ``frames`` channels (then cut to ``frames``); predictions concatenated along ``dim``
    (``1``: grids ``(B, C, *spatial)``; ``-1``: points ``(B, N, C)``). Differentiable (the
    training loss of ``[train] rollout_steps`` backpropagates through every application)."""
    if (applications is None) == (frames is None):
        raise ValueError("applications, frames: expected exactly one of them")
    c_in = x.shape[dim]
    window, preds, done, k = x, [], 0, 0
    while (k < applications) if applications is not None else (done < frames):
        p = step(window)
        preds.append(p)
        done += p.shape[dim]
        k += 1
        window = torch.cat([window, p.to(window.dtype)], dim=dim)
        window = window.narrow(dim, window.shape[dim] - c_in, c_in)
    out = torch.cat(preds, dim=dim)
    return out if frames is None else out.narrow(dim, 0, frames)


@torch.no_grad()
def rollout_errors(
    model: nn.Module,
    dataset: Dataset,
    *,
    x_normalizer: nn.Module,
    y_normalizer: nn.Module,
    spatial_dims: int,
    batch_size: int = 8,
    device: str | torch.device = "cpu",
    frame_channels: int = 1,
) -> dict[str, Any]:
    """Per-frame mean relative L2 error of the autoregressive rollout over each sample's horizon.

    Shapes:
        dataset samples: ``x (C_in, *spatial)``, ``y (K, *spatial)``; ``model``: ``(B, C_in, *spatial)``
        -> ``(B, C_out, *spatial)``. Returns ``frame_errors`` (K,) and the counts of applications.
        With ``frame_channels = V`` a frame is ``V`` consecutive channels (``V`` variables,
        time-major) and its error is the mean over those variables.
    """
    model.eval()
    sums: torch.Tensor | None = None
    n = 0
    c_in = c_out = n_frames = 0
    if isinstance(frame_channels, bool) or not isinstance(frame_channels, int) or frame_channels < 1:
        raise ValueError(f"frame_channels: expected an integer >= 1, got {frame_channels!r}")
    for batch in DataLoader(dataset, batch_size=batch_size, generator=torch.Generator()):
        x, y = batch["x"].to(device), batch["y"].to(device)
        c_in, n_frames = x.shape[1], y.shape[1] // frame_channels
        if y.shape[1] % frame_channels:
            raise ValueError(f"frame_channels: expected a divisor of the {y.shape[1]} target channels, got "
                             f"{frame_channels}")
        widths: list[int] = []

        def step(w, widths=widths):
            p = y_normalizer.decode(model(x_normalizer.encode(w)))
            widths.append(p.shape[1])
            return p

        pred = autoregressive(step, x, frames=y.shape[1])
        c_out = widths[0]
        v = frame_channels
        errs = torch.stack([relative_l2(pred[:, k * v:(k + 1) * v], y[:, k * v:(k + 1) * v], spatial_dims)
                            for k in range(n_frames)])
        sums = errs.double() * x.shape[0] if sums is None else sums + errs.double() * x.shape[0]
        n += x.shape[0]
    if sums is None:
        raise ValueError("dataset: expected at least one trajectory sample, got an empty dataset")
    return {"frame_errors": (sums / n).tolist(), "n_samples": n, "input_steps": c_in, "steps_per_application": c_out,
            "applications": math.ceil(n_frames * frame_channels / c_out)}


def stability_verdict(errors: list[float], *, threshold: float = 1.0, max_growth: float = 1.1) -> dict[str, Any]:
    """Apply the module's stability rule to per-frame errors ``e_1..e_K`` (frames counted from 1)."""
    if not errors:
        raise ValueError("errors: expected at least one per-frame error, got none")
    if not threshold > 0 or not max_growth >= 1:
        raise ValueError(f"threshold, max_growth: expected threshold > 0 and max_growth >= 1, got {threshold} and "
                         f"{max_growth}")
    out: dict[str, Any] = {"rule": STABILITY_RULE, "threshold": threshold, "max_growth": max_growth,
                           "max_error": max(errors), "final_error": errors[-1], "growth_per_frame": None}
    for k, e in enumerate(errors, start=1):
        if not math.isfinite(e):
            return {**out, "verdict": "unstable", "reason": f"non-finite error at frame {k}"}
        if e > threshold:
            return {**out, "verdict": "unstable", "reason": f"error {e:.3g} exceeds {threshold} at frame {k}"}
    tail = list(range(len(errors) // 2, len(errors)))
    if len(tail) >= 2 and errors[-1] > ROUND_OFF * threshold:  # growth of round-off-level errors is noise
        ks = torch.tensor(tail, dtype=torch.float64) + 1
        logs = torch.tensor([math.log(max(errors[i], 1e-300)) for i in tail], dtype=torch.float64)
        slope = float(((ks - ks.mean()) * (logs - logs.mean())).sum() / ((ks - ks.mean()) ** 2).sum())
        g = math.exp(slope)
        out["growth_per_frame"] = g
        if g > max_growth:
            frames = math.log(threshold / max(errors[-1], 1e-300)) / math.log(g)
            return {**out, "verdict": "growing",
                    "reason": f"error grows by x{g:.3g} per frame; it would reach {threshold} about "
                              f"{frames:.0f} frame(s) after frame {len(errors)}"}
    return {**out, "verdict": "stable", "reason": f"errors stay below {threshold}" + (
        f" and grow by at most x{out['growth_per_frame']:.3g} per frame" if out["growth_per_frame"] else "")}
