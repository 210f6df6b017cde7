"""Shared by the attention tests that build float64 cases: random queries, keys, values and key weights, and padding
poisoned with NaN so that a backend which reads it fails the comparison."""

from __future__ import annotations

import math

import torch

F64 = torch.float64


def random_inputs(g: torch.Generator, b: int, h: int, nq: int, nk: int, d: int, e: int,
                  weight_scale: float = 2.0, weight_min: float = 0.05) -> dict[str, torch.Tensor]:
    """Float64 ``q`` ``(b, h, nq, d)``, ``k`` ``(b, h, nk, d)``, ``v`` ``(b, h, nk, e)`` (standard normal) and
    non-uniform key ``weights`` ``(b, nk)``, uniform in ``[weight_min, weight_min + weight_scale)``, drawn from ``g``
    in that order."""
    return {
        "q": torch.randn(b, h, nq, d, generator=g, dtype=F64),
        "k": torch.randn(b, h, nk, d, generator=g, dtype=F64),
        "v": torch.randn(b, h, nk, e, generator=g, dtype=F64),
        "weights": torch.rand(b, nk, generator=g, dtype=F64) * weight_scale + weight_min,
    }


def poison_padding(t: dict[str, torch.Tensor], mask: torch.Tensor) -> None:
    """NaN in ``t``'s ``k``, ``v`` and ``weights`` at the padded keys (``mask`` ``(B, Nk)`` False), replaced in the
    dict."""
    t["k"] = t["k"].masked_fill(~mask[:, None, :, None], math.nan)
    t["v"] = t["v"].masked_fill(~mask[:, None, :, None], math.nan)
    t["weights"] = t["weights"].masked_fill(~mask, math.nan)
