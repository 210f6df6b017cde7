"""Prediction on point sets for :class:`~.surrogate.Surrogate`: features at points, their positions and their
quadrature weights in, the operator's output at the same points out.

A point-set run (Erwin, BSA, MSPT, or a token operator trained with ``as_points``) was trained on samples
``x (N, C_in)``, ``pos (N, d)``, ``weights (N,)`` and is called as the trainer calls it
(:func:`sciattn.train.training.batching.predict`): features encoded channel by channel with the run's
normaliser, ``model(x, pos=pos, mask=mask, weights=weights)``, the output decoded.

Shapes: ``x`` ``(N, C_in)`` or ``(B, N, C_in)``; ``pos`` ``(N, d)`` or ``(B, N, d)`` with ``d`` the run's
spatial dims; ``weights`` ``(N,)`` or ``(B, N)``, non-negative with a positive sum per cloud (default: ``1/N`` on
every point, as the trainer gives clouds stored without weights); returns ``(N, C_out)`` or ``(B, N, C_out)``, a
NumPy array for NumPy input (the input's float dtype, float32 for integer input) and a tensor for tensor input.
A batch holds clouds of one size; clouds of different sizes are separate calls (an output never depends on the
rest of its batch, so this changes no value).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sciattn._checks import check_finite

__all__ = ["predict_points"]


def _tensor(name: str, a: Any) -> tuple[torch.Tensor, bool]:
    if isinstance(a, np.ndarray):
        if a.dtype.kind not in "biuf":
            raise TypeError(f"{name}: expected a real array, got dtype {a.dtype}")
        return torch.from_numpy(np.ascontiguousarray(a)), True
    if isinstance(a, torch.Tensor):
        if a.is_complex():
            raise TypeError(f"{name}: expected a real tensor, got dtype {a.dtype}")
        return a.detach(), False
    raise TypeError(f"{name}: expected a numpy.ndarray or torch.Tensor, got {type(a).__name__}")


def predict_points(sur, x: Any, pos: Any, weights: Any = None, *, chunk_points: int | None = None) -> Any:
    """The surrogate's operator at the points of ``x`` / ``pos`` (shapes: the module docstring)."""
    from sciattn.operators.point_parts import chunked_points

    from ..training.batching import predict

    xt, is_np = _tensor("x", x)
    pt, _ = _tensor("pos", pos)
    if xt.dim() not in (2, 3):
        raise ValueError(f"x: expected 2 dims (N, C) or 3 dims (B, N, C) for a point set, got shape {tuple(xt.shape)}")
    batched = xt.dim() == 3
    xb = xt if batched else xt.unsqueeze(0)
    pb = pt if batched else pt.unsqueeze(0)
    b, n, c = xb.shape
    d = sur.spatial_dims
    if tuple(pb.shape) != (b, n, d):
        want = f"({b}, {n}, {d})" if batched else f"({n}, {d})"
        raise ValueError(f"pos: expected shape {want} (the points of x, {d} coordinates each), got {tuple(pt.shape)}")
    if n == 0 or c == 0:
        raise ValueError(f"x: expected at least one point and one channel, got shape {tuple(xt.shape)}")
    if sur.in_channels is not None and c != sur.in_channels:
        raise ValueError(f"x: expected {sur.in_channels} input channel(s){sur._names_hint()} on the last axis, got {c}")
    if weights is None:
        wb = torch.full((b, n), 1.0 / n, dtype=torch.float64)
    else:
        wt, _ = _tensor("weights", weights)
        wb = wt if batched else wt.unsqueeze(0)
        if tuple(wb.shape) != (b, n):
            want = f"({b}, {n})" if batched else f"({n},)"
            raise ValueError(f"weights: expected shape {want} (one per point of x), got {tuple(wt.shape)}")
        wb = wb.to(torch.float64)
        check_finite("weights", wb)
        if bool((wb < 0).any()) or bool((wb.sum(1) <= 0).any()):
            raise ValueError("weights: expected non-negative values with a positive sum per cloud, got "
                             f"min {float(wb.min()):.3g}, smallest cloud sum {float(wb.sum(1).min()):.3g}")
    dev, dt = sur.device, sur.compute_dtype
    batch = {"x": xb.to(device=dev, dtype=dt), "pos": pb.to(device=dev, dtype=dt),
             "weights": wb.to(device=dev, dtype=dt), "mask": torch.ones(b, n, dtype=torch.bool, device=dev)}
    check_finite("x", batch["x"])
    check_finite("pos", batch["pos"])
    chunk = sur.chunk_points if chunk_points is None else chunk_points
    with torch.no_grad(), chunked_points(sur.model, chunk):
        y = predict(sur.model, batch, sur.x_normalizer, sur.y_normalizer)
    y = y if batched else y[0]
    if is_np:
        out_dtype = x.dtype if x.dtype.kind == "f" else np.float32
        return y.cpu().numpy().astype(out_dtype, copy=False)
    return y.to(device=x.device, dtype=x.dtype if x.is_floating_point() else dt)
