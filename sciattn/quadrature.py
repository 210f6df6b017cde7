"""Quadrature rules as pure functions returning ``(nodes, weights)``.

Every attention in sciattn discretises an integral ``∫_Ω f(y) dμ(y) ≈ Σ_j w_j f(y_j)``.
The rules here produce the nodes ``y_j`` and weights ``w_j`` of that sum. Weights sum to
the measure of the domain (``b - a`` in 1-D, the product of the side lengths for tensor
grids), so a constant field integrates to the domain's measure.

Rules on an interval ``[a, b]`` with ``n`` nodes:

=============  ===============================  ===================  ==============
rule           nodes                            weights              exact for
=============  ===============================  ===================  ==============
``uniform``    ``a + (b-a) i / n``, i < n       ``(b-a)/n``          periodic trig.
``midpoint``   ``a + (b-a) (i + 1/2) / n``      ``(b-a)/n``          linear, O(h²)
``trapezoid``  ``a + (b-a) i / (n-1)``, i ≤ n-1  ``(b-a)/(n-1)``,     linear, O(h²)
                                                 halved at the ends
=============  ===============================  ===================  ==============

``uniform`` is the layout of the FNO and neuraloperator grid files (left boundary included,
right boundary dropped); it is the trapezoid rule of a periodic function.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._checks import check_choice, check_positive_int

__all__ = ["RULES", "interval_rule", "tensor_rule"]

RULES = ("uniform", "midpoint", "trapezoid")


def interval_rule(
    n: int, a: float = 0.0, b: float = 1.0, rule: str = "uniform", dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes and weights of a 1-D rule on ``[a, b]``: two tensors of shape ``(n,)``."""
    check_positive_int("n", n)
    check_choice("rule", rule, RULES)
    if not b > a:
        raise ValueError(f"bounds: expected a < b, got a={a}, b={b}")
    length = b - a
    i = torch.arange(n, dtype=dtype)
    if rule == "uniform":
        nodes = a + length * i / n
        weights = torch.full((n,), length / n, dtype=dtype)
    elif rule == "midpoint":
        nodes = a + length * (i + 0.5) / n
        weights = torch.full((n,), length / n, dtype=dtype)
    else:
        if n < 2:
            raise ValueError(f"n: expected at least 2 nodes for the trapezoid rule, got {n}")
        nodes = a + length * i / (n - 1)
        weights = torch.full((n,), length / (n - 1), dtype=dtype)
        weights[0] = weights[-1] = 0.5 * length / (n - 1)
    return nodes, weights


def tensor_rule(
    shape: Sequence[int],
    bounds: Sequence[tuple[float, float]],
    rule: str = "uniform",
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tensor-product rule on a box.

    Returns ``nodes`` of shape ``(prod(shape), d)`` in C order (last axis fastest, matching
    ``field.flatten(-d)``) and ``weights`` of shape ``(prod(shape),)``.
    """
    if len(shape) != len(bounds):
        raise ValueError(f"bounds: expected {len(shape)} (a, b) pairs for shape {tuple(shape)}, got {len(bounds)}")
    rules = [interval_rule(n, a, b, rule, dtype) for n, (a, b) in zip(shape, bounds)]
    grids = torch.meshgrid(*[r[0] for r in rules], indexing="ij")
    nodes = torch.stack([g.reshape(-1) for g in grids], dim=-1)
    w = rules[0][1]
    for _, wk in rules[1:]:
        w = (w[:, None] * wk[None, :]).reshape(-1)
    return nodes, w
