"""Per-channel statistics of a data set, and the rule that says when evaluation data is out of distribution.

:func:`dataset_statistics` summarises the inputs ``x`` and targets ``y`` of a data set as JSON-able
per-channel ``mean``, ``std``, ``min`` and ``max``, pooled over the samples and their spatial nodes
(grids, samples ``(C, *spatial)``) or their valid points (point sets, samples ``(N, C)`` with an optional
``mask`` ``(N,)`` that marks real points). A run records them for its training data; a resolution sweep
computes them for each evaluation set and asks :func:`compare_statistics` whether it falls outside.

The rule (:data:`SHIFT_RULE`), applied per variable (``x``, ``y``) and channel, with the reference's
mean ``m``, standard deviation ``s`` and range ``[lo, hi]``:

- the channel counts differ;
- ``|m_obs - m| > mean_tol * s`` (default ``mean_tol = 3``);
- ``s_obs / s`` lies outside ``[1 / std_ratio, std_ratio]`` (default ``std_ratio = 2``);
- ``[lo_obs, hi_obs]`` reaches beyond ``[lo - w, hi + w]`` with ``w = range_tol * (hi - lo)``
  (default ``range_tol = 0.5``).

For a constant reference channel (``s = 0``) the scale ``s`` is replaced by ``1e-3 * max(|m|, 1)``. The
thresholds are loose on purpose: a different sample of the same distribution, or the same distribution
restricted to another resolution, passes; data with another coefficient law or another scaling does not
(the built-in Darcy solver, coefficient 3/12 and pressure ≤ 0.014, against neuraloperator's files, mask 0/1
and pressure up to 2, fails on every channel).
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["SHIFT_RULE", "compare_statistics", "dataset_statistics"]

SHIFT_RULE = ("per channel of x and y: channel counts equal; |mean - ref mean| <= {mean_tol} ref std; "
              "std / ref std within [1/{std_ratio}, {std_ratio}]; [min, max] within the reference range widened "
              "by {range_tol} of its width on each side").format(mean_tol=3, std_ratio=2, range_tol=0.5)


class _Accumulator:
    """Running per-channel count, sum, sum of squares, min and max in float64."""

    def __init__(self) -> None:
        self.n = self.s = self.s2 = self.lo = self.hi = None

    def add(self, values: torch.Tensor) -> None:  # values (M, C)
        v = values.detach().to(torch.float64)
        if v.shape[0] == 0:
            return
        stats = (torch.tensor(float(v.shape[0]), dtype=torch.float64), v.sum(0), (v * v).sum(0),
                 v.amin(0), v.amax(0))
        if self.n is None:
            self.n, self.s, self.s2, self.lo, self.hi = stats
            return
        if v.shape[1] != self.s.shape[0]:
            raise ValueError(f"dataset: expected every sample to have {self.s.shape[0]} channels, got {v.shape[1]}")
        self.n = self.n + stats[0]
        self.s, self.s2 = self.s + stats[1], self.s2 + stats[2]
        self.lo, self.hi = torch.minimum(self.lo, stats[3]), torch.maximum(self.hi, stats[4])

    def result(self) -> dict[str, list[float]]:
        if self.n is None:
            raise ValueError("dataset: expected at least one sample with at least one valid point, got none")
        mean = self.s / self.n
        var = (self.s2 / self.n - mean * mean).clamp_min(0.0)
        return {"mean": mean.tolist(), "std": var.sqrt().tolist(), "min": self.lo.tolist(), "max": self.hi.tolist()}


def _rows(t: torch.Tensor, points: bool, mask: torch.Tensor | None) -> torch.Tensor:
    """One sample's values as ``(M, C)`` rows: grid ``(C, *spatial)`` or point set ``(N, C)``."""
    if points:
        return t[mask.to(torch.bool)] if mask is not None else t
    return t.reshape(t.shape[0], -1).T


def _indices(n: int, max_samples: int) -> list[int]:
    """At most ``max_samples`` indices spread evenly over ``range(n)`` (all of them when ``n`` is small)."""
    if n <= max_samples:
        return list(range(n))
    return sorted({int(i) for i in torch.linspace(0, n - 1, max_samples).round().tolist()})


def dataset_statistics(ds, max_samples: int = 256) -> dict[str, Any]:
    """Per-channel ``{"x": {"mean", "std", "min", "max"}, "y": {...}, "n_samples", "layout"}`` of ``ds``.

    ``ds`` yields dicts with ``"x"`` and ``"y"``: grid samples ``(C, *spatial)``, or point-set samples
    ``(N, C)`` (recognised by a ``"pos"`` of shape ``(N, d)``) with an optional boolean ``"mask"`` ``(N,)``
    of real points. Statistics pool all nodes (grids) or valid points (point sets) of at most
    ``max_samples`` samples spread evenly over ``ds``; ``std`` is the population standard deviation.
    """
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 1:
        raise ValueError(f"max_samples: expected a positive int, got {max_samples!r}")
    n = len(ds)
    if n == 0:
        raise ValueError("ds: expected a data set with at least one sample, got an empty one")
    idx = _indices(n, max_samples)
    acc = {"x": _Accumulator(), "y": _Accumulator()}
    layout = "grid"
    if hasattr(ds, "x") and hasattr(ds, "y") and isinstance(ds.x, torch.Tensor) and isinstance(ds.y, torch.Tensor):
        for key in ("x", "y"):  # GridPairDataset: (N, C, *spatial) in memory
            t = getattr(ds, key)[idx]
            acc[key].add(t.movedim(1, -1).reshape(-1, t.shape[1]))
    else:
        for i in idx:
            sample = ds[i]
            pos = sample.get("pos")
            points = pos is not None and pos.dim() == 2 and sample["x"].dim() == 2 and pos.shape[0] == sample["x"].shape[0]
            layout = "points" if points else "grid"
            for key in ("x", "y"):
                acc[key].add(_rows(sample[key], points, sample.get("mask")))
    return {"x": acc["x"].result(), "y": acc["y"].result(), "n_samples": len(idx), "layout": layout}


def compare_statistics(
    reference: dict[str, Any],
    observed: dict[str, Any],
    *,
    mean_tol: float = 3.0,
    std_ratio: float = 2.0,
    range_tol: float = 0.5,
) -> list[str]:
    """Why ``observed`` (from :func:`dataset_statistics`) lies outside ``reference``; empty when it does not.

    The rule and its default thresholds are in the module docstring (:data:`SHIFT_RULE`).
    """
    for name, v, lo in (("mean_tol", mean_tol, 0.0), ("std_ratio", std_ratio, 1.0), ("range_tol", range_tol, 0.0)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < lo:
            raise ValueError(f"{name}: expected a finite number >= {lo}, got {v!r}")
    reasons: list[str] = []
    for key in ("x", "y"):
        if key not in reference or key not in observed:
            raise ValueError(f"reference, observed: expected statistics with keys 'x' and 'y', got "
                             f"{sorted(reference)} and {sorted(observed)}")
        ref, obs = reference[key], observed[key]
        if len(ref["mean"]) != len(obs["mean"]):
            reasons.append(f"{key}: {len(obs['mean'])} channels, the reference has {len(ref['mean'])}")
            continue
        for c in range(len(ref["mean"])):
            m, s, lo, hi = ref["mean"][c], ref["std"][c], ref["min"][c], ref["max"][c]
            om, os_, olo, ohi = obs["mean"][c], obs["std"][c], obs["min"][c], obs["max"][c]
            where = f"{key}[{c}]"
            scale = s if s > 0 else 1e-3 * max(abs(m), 1.0)
            if not all(math.isfinite(v) for v in (om, os_, olo, ohi)):
                reasons.append(f"{where}: non-finite statistics (mean {om}, std {os_}, min {olo}, max {ohi})")
                continue
            if abs(om - m) > mean_tol * scale:
                reasons.append(f"{where}: mean {om:.4g} is {abs(om - m) / scale:.1f} reference stds from the "
                               f"reference mean {m:.4g} (allowed {mean_tol:g})")
            ratio = os_ / scale if s > 0 else (math.inf if os_ > scale else 1.0)
            if not 1.0 / std_ratio <= ratio <= std_ratio:
                reasons.append(f"{where}: std {os_:.4g} is {ratio:.3g}x the reference std {s:.4g} "
                               f"(allowed [{1 / std_ratio:.3g}, {std_ratio:g}])")
            w = range_tol * (hi - lo) if hi > lo else scale
            if olo < lo - w or ohi > hi + w:
                reasons.append(f"{where}: range [{olo:.4g}, {ohi:.4g}] leaves the reference range [{lo:.4g}, "
                               f"{hi:.4g}] widened by {w:.4g}")
    return reasons
