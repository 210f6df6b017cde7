"""A float64 transcription of the two-level overlapping Schwarz attention operator of Köhler & Rheinbach (arXiv
2606.18525; no public code), written by us as the oracle of tests/operators/test_schwarz.py.

The paper's operator, assembled as dense matrices on the ``n`` points::

    M = Φ Q0 K0ᵀ Φᵀ W + Σ_i R_iᵀ D_i^{1/2} Q_i K_iᵀ D_i^{1/2} R_i W,     z = M V   (per head)

``R_i`` the 0/1 restriction to the points of subdomain ``i`` (where its partition weight is positive), ``D_i`` the
diagonal of its partition-of-unity weights there, ``Φ`` the coarse interpolation (hat functions), ``Q_i = R_i Q``,
``K_i = R_i K`` and ``W = diag(w)`` the quadrature weights (the paper's plain sums: ``W = I``). The partitions and
hats are built here independently of sciattn (``numpy.interp`` on the published piecewise-linear definitions, and
counting loops for the algebraic multiplicity weights).
"""

from __future__ import annotations

import itertools

import numpy as np


def axis_partition_physical(t: np.ndarray, count: int, overlap: float) -> np.ndarray:
    """``(n, S)``: 1 on the core less the overlap, linear ramps across ``[a - δ, a + δ]`` and ``[b - δ, b + δ]``."""
    out = np.zeros((len(t), count))
    for s in range(count):
        a, b = s / count, (s + 1) / count
        xs, ys = [a - overlap, a + overlap, b - overlap, b + overlap], [0.0, 1.0, 1.0, 0.0]
        if s == 0:
            xs, ys = xs[2:], ys[2:]
        if s == count - 1:
            xs, ys = xs[:-2], ys[:-2]
        if len(xs) == 0:
            out[:, s] = 1.0
            continue
        out[:, s] = np.interp(t, xs, ys, left=ys[0], right=ys[-1])
    return out


def axis_partition_points(n: int, count: int, overlap_points: int) -> np.ndarray:
    """``(n, S)``: index blocks ``[floor(s n/S) - o, floor((s+1) n/S) + o)``, weight 1 / multiplicity."""
    member = np.zeros((n, count))
    for s in range(count):
        for j in range(max(0, s * n // count - overlap_points), min(n, (s + 1) * n // count + overlap_points)):
            member[j, s] = 1.0
    return member / member.sum(1, keepdims=True)


def axis_hats(t: np.ndarray, nodes: int) -> np.ndarray:
    """``(n, M)``: piecewise-linear interpolation of the unit vectors on ``M`` equispaced nodes of [0, 1]."""
    grid = np.linspace(0.0, 1.0, nodes)
    return np.stack([np.interp(np.clip(t, 0, 1), grid, np.eye(nodes)[m]) for m in range(nodes)], axis=1)


def per_point(factors: list[np.ndarray]) -> np.ndarray:
    """Per-axis per-point factors ``[(n, S_a)]`` -> ``(n, Π S_a)`` with the subdomain index in C order (loops)."""
    n = factors[0].shape[0]
    combos = list(itertools.product(*[range(f.shape[1]) for f in factors]))
    out = np.ones((n, len(combos)))
    for c, idx in enumerate(combos):
        for f, i in zip(factors, idx):
            out[:, c] *= f[:, i]
    return out


def schwarz_matrix(partition: np.ndarray, q: np.ndarray, k: np.ndarray, w: np.ndarray,
                   hats: np.ndarray | None = None, q0: np.ndarray | None = None, k0: np.ndarray | None = None):
    """The dense ``n x n`` operator ``M`` of one head: ``partition`` ``(n, S)``, ``q``, ``k`` ``(n, r)``, ``w``
    ``(n,)``; coarse ``hats`` ``(n, M)``, ``q0``, ``k0`` ``(M, r0)``."""
    n = len(w)
    big_w = np.diag(w)
    m = np.zeros((n, n))
    for i in range(partition.shape[1]):
        idx = np.nonzero(partition[:, i] > 0)[0]
        if len(idx) == 0:
            continue
        r = np.eye(n)[idx]  # R_i
        d_half = np.diag(np.sqrt(partition[idx, i]))  # D_i^{1/2}
        qi, ki = r @ q, r @ k  # Q_i = R_i Q, K_i = R_i K
        m += r.T @ d_half @ qi @ ki.T @ d_half @ r @ big_w
    if hats is not None:
        m += hats @ q0 @ k0.T @ hats.T @ big_w
    return m


def schwarz_forward(partition, q, k, v, w, hats=None, q0=None, k0=None) -> np.ndarray:
    """``z`` ``(B, n, H, E)`` for ``q``, ``k`` ``(B, n, H, D)``, ``v`` ``(B, n, H, E)``, ``w`` ``(B, n)``, per sample
    and head ``z = M V`` (coarse ``q0``, ``k0`` ``(B, M, H, D)``)."""
    b, n, h, _ = q.shape
    out = np.zeros((b, n, h, v.shape[-1]))
    for s in range(b):
        for j in range(h):
            coarse = (None, None, None) if hats is None else (hats, q0[s, :, j], k0[s, :, j])
            out[s, :, j] = schwarz_matrix(partition, q[s, :, j], k[s, :, j], w[s], *coarse) @ v[s, :, j]
    return out
