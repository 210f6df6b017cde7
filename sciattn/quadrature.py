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
``trapezoid``  ``a + (b-a) i / (n-1)``, i < n    ``(b-a)/(n-1)``,     linear, O(h²)
                                                 halved at the ends
=============  ===============================  ===================  ==============

``uniform`` is the layout of the FNO and neuraloperator grid files (left boundary included,
right boundary dropped); it is the trapezoid rule of a periodic function.

Latitude rules on the sphere (:func:`sphere_quadrature`) integrate over ``x = cos θ`` on
``[-1, 1]``, so the ``sin θ`` Jacobian is inside the weights, which sum to 2:

==================  =======================================  =====================  =======
grid                colatitude nodes θ_k                     exact for P(cos θ) of  poles
==================  =======================================  =====================  =======
``equiangular``     ``π k / (n-1)`` (Clenshaw–Curtis)        degree ≤ n - 1         yes
``legendre-gauss``  roots of ``P_n(cos θ)``                  degree ≤ 2n - 1        no
``lobatto``         ±1 and roots of ``P'_{n-1}(cos θ)``      degree ≤ 2n - 3        yes
==================  =======================================  =====================  =======

Nodes are ordered by colatitude, north pole first; the weights follow the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from numpy.polynomial import legendre

from ._checks import check_choice, check_positive_int

__all__ = ["RULES", "SPHERE_GRIDS", "interval_rule", "sphere_quadrature", "tensor_rule"]

RULES = ("uniform", "midpoint", "trapezoid")
SPHERE_GRIDS = ("equiangular", "legendre-gauss", "lobatto")


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


def _clenshaw_curtis(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``cos(π k/(n-1))`` (descending from 1 to -1) and Clenshaw–Curtis weights on ``[-1, 1]``."""
    m = n - 1
    theta = np.pi * np.arange(n) / m
    w = np.ones(n)
    for j in range(1, m // 2 + 1):
        b = 1.0 if 2 * j == m else 2.0
        w -= b * np.cos(2 * j * theta) / (4 * j * j - 1)
    w *= 2.0 / m
    w[0] *= 0.5
    w[-1] *= 0.5
    return np.cos(theta), w


def _lobatto(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Lobatto nodes (descending) and weights ``2 / (n (n-1) P_{n-1}(x)²)`` on ``[-1, 1]``."""
    p = legendre.Legendre.basis(n - 1)
    dp, ddp = p.deriv(), p.deriv(2)
    interior = np.sort(dp.roots().real) if n > 2 else np.zeros(0)
    for _ in range(3):  # Newton polish of the companion-matrix roots
        interior = interior - dp(interior) / ddp(interior)
    x = np.concatenate([[-1.0], interior, [1.0]])
    w = 2.0 / (n * (n - 1) * p(x) ** 2)
    return x[::-1].copy(), w[::-1].copy()


def sphere_quadrature(
    nlat: int, grid: str = "equiangular", dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Colatitudes and latitude weights of a sphere grid.

    The weights discretise ``∫_{-1}^{1} f dx`` with ``x = cos θ``, so ``Σ_k w_k = 2``; the area
    weight of grid point ``(k, j)`` on an ``nlat × nlon`` grid is ``2π w_k / nlon`` and these sum
    to ``4π`` (see :class:`sciattn.domain.SphereGrid`).

    Returns:
        ``colatitudes`` ``(nlat,)`` ascending from the north pole (``0`` or just below) to the
        south pole, and ``weights`` ``(nlat,)`` in the same order.
    """
    check_positive_int("nlat", nlat)
    check_choice("grid", grid, SPHERE_GRIDS)
    if grid != "legendre-gauss" and nlat < 2:
        raise ValueError(f"nlat: expected at least 2 latitudes for the {grid!r} grid (it holds both poles), got {nlat}")
    if grid == "equiangular":
        x, w = _clenshaw_curtis(nlat)
    elif grid == "lobatto":
        x, w = _lobatto(nlat)
    else:
        x, w = legendre.leggauss(nlat)
        x, w = x[::-1].copy(), w[::-1].copy()
    theta = np.arccos(np.clip(x, -1.0, 1.0))
    return torch.as_tensor(theta, dtype=dtype), torch.as_tensor(w, dtype=dtype)
