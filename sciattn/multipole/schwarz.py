r"""Two-level overlapping Schwarz attention (Köhler & Rheinbach, "Hierarchical Attention via Domain Decomposition",
arXiv 2606.18525): softmax-free low-rank attention on overlapping subdomains, weighted by a partition of unity,
plus a coarse attention block on a coarse grid of hat functions.

The paper's operator (a matrix on ``n`` points) is

.. math::
    M_θ^{-1} = Φ Q_0 K_0^T Φ^T + \sum_{i=1}^{N} R_i^T D_i^{1/2} Q_i K_i^T D_i^{1/2} R_i,

``R_i`` the restriction to subdomain ``i``, ``D_i`` its partition-of-unity weights (``Σ_i R_i^T D_i R_i = I``) and
``Φ`` the coarse interpolation. As attention on tokens (per head, queries ``q``, keys ``k``, values ``v``, the
subdomain blocks ``Q_i = R_i Q``, ``K_i = R_i K``) with the quadrature weights ``W = diag(w)`` on the key side, it is
the discretisation of the integral operator with kernel ``κ(x, y) = (Φq_0)(x)·(Φk_0)(y) + Σ_i √(d_i(x) d_i(y))
q(x)·k(y)``:

.. math::
    z(x) = \sum_m φ_m(x)\, q_{0,m} \sum_{m'} k_{0,m'} \Big(\sum_j w_j φ_{m'}(x_j) v_j\Big)^T
         + \sum_i \sqrt{d_i(x)}\, q(x) \sum_j w_j \sqrt{d_i(x_j)}\, k_j v_j^T .

* :func:`physical_partition`: the subdomains in physical units (the default): per axis ``S`` equal cores
  ``[s/S, (s+1)/S]`` of the unit interval, each extended by ``overlap`` (a fraction of the domain) on both sides;
  ``ψ_s`` is 1 on the core less the overlap and ramps linearly to 0 across each overlap of width ``2 overlap``, so
  ``Σ_s ψ_s = 1`` everywhere; in ``d`` dimensions ``d_i(x) = Π_a ψ_{s_a}(x_a)`` (C order of the subdomain index).
* :func:`points_partition`: the algebraic form, in grid points (the paper's matrix setting): cores of
  ``floor(s n / S)`` to ``floor((s+1) n / S)`` nodes, extended by ``overlap_points`` nodes each side, and
  ``D_i = 1 / multiplicity`` (the number of subdomains that hold the node).
* :func:`coarse_hats`: piecewise-linear hat functions ``φ_m`` on ``M`` equispaced coarse nodes per axis of the unit
  box (boundary nodes included; tensor products in ``d`` dimensions), ``Σ_m φ_m = 1``.
* :func:`coarse_pool`: coarse tokens ``h_{0,m} = Σ_j w_j φ_m(x_j) h_j / Σ_j w_j φ_m(x_j)`` (zero where a hat holds
  no weight), from which a layer forms ``q_0`` and ``k_0``.
* :func:`schwarz_attention`: ``z`` above; every sum over points carries ``w``. A subdomain's weight ``d_i`` vanishes
  outside it, so a point holds at most ``2^d`` of the ``S`` subdomains (fewer than two on average with the default
  overlap): the local sums run per subdomain over the points it holds (``K_i^T D_i^{1/2} W_i V_i`` and
  ``D_i^{1/2} Q_i (…)`` as matrix products over gathered rows, scattered back), in ``O(N D E)`` times the mean
  multiplicity instead of ``O(N S D E)``. Where the subdomains hold more than :data:`SPARSE_BELOW` of ``S·N`` points
  (large overlaps), and under ``torch.compile`` / ``torch.export`` (the supports' sizes depend on the data), the
  dense form runs: matrix products ``(S·D × N_c) @ (N_c × E)`` over chunks of :data:`CHUNK_ELEMENTS` and the output
  ``(N_c × D) @ (D × S·E)`` weighted over ``i``. Both equal the per-point products in float64.

Shapes: ``q``, ``k`` ``(B, N, H, D)``, ``v`` ``(B, N, H, E)``, ``weights`` ``(B, N)`` (zero on padding),
partition ``(B or 1, N, S)``, hats ``(B or 1, N, M)``, ``q0``, ``k0`` ``(B, M, H, D)``; output ``(B, N, H, E)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["coarse_hats", "coarse_pool", "physical_partition", "points_partition", "schwarz_attention",
           "tensor_product"]


def tensor_product(factors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-axis factors ``[(..., N, S_1), (..., N, S_2), ...]`` -> ``(..., N, S_1 S_2 ...)`` (C order)."""
    out = factors[0]
    for f in factors[1:]:
        out = (out[..., :, None] * f[..., None, :]).flatten(-2)
    return out


def _axis_partition(t: torch.Tensor, count: int, overlap: float) -> torch.Tensor:
    """``ψ_s(t)`` ``(..., S)`` of the 1-D physical partition of unity at coordinates ``t`` ``(...)``."""
    s = torch.arange(count, dtype=t.dtype, device=t.device)
    lo, hi = s / count, (s + 1) / count
    inf = torch.full_like(lo, math.inf)
    t = t[..., None]
    up = torch.where(s > 0, (t - lo + overlap) / (2 * overlap), inf)
    down = torch.where(s < count - 1, (hi + overlap - t) / (2 * overlap), inf)
    return torch.minimum(up, down).clamp(0, 1)


def physical_partition(pos: torch.Tensor, subdomains: Sequence[int], overlap: float) -> torch.Tensor:
    """Partition of unity ``(..., N, Π S_a)`` at positions ``pos`` ``(..., N, d)`` in the unit box: ``S_a`` cores
    per axis, each extended by ``overlap`` (fraction of the domain, ``0 < overlap <= 1 / (2 max S_a)``)."""
    return tensor_product([_axis_partition(pos[..., a], s, overlap) for a, s in enumerate(subdomains)])


def _axis_points_partition(n: int, count: int, overlap_points: int, dtype, device) -> torch.Tensor:
    """``(n, S)``: multiplicity weights of ``S`` index blocks of ``n`` nodes extended by ``overlap_points``."""
    j = torch.arange(n, device=device)[:, None]
    s = torch.arange(count, device=device)
    start = torch.div(s * n, count, rounding_mode="floor") - overlap_points
    stop = torch.div((s + 1) * n, count, rounding_mode="floor") + overlap_points
    member = ((j >= start) & (j < stop)).to(dtype)
    return member / member.sum(-1, keepdim=True)


def points_partition(shape: Sequence[int], subdomains: Sequence[int], overlap_points: int,
                     dtype=torch.float32, device=None) -> torch.Tensor:
    """Algebraic partition of unity ``(N, Π S_a)`` of a grid of ``shape`` nodes (C order): index blocks extended by
    ``overlap_points`` nodes, weights ``1 / multiplicity``."""
    axes = [_axis_points_partition(n, s, overlap_points, dtype, device) for n, s in zip(shape, subdomains)]
    index = torch.meshgrid(*[torch.arange(n, device=device) for n in shape], indexing="ij")
    return tensor_product([f[i.reshape(-1)] for f, i in zip(axes, index)])


def coarse_hats(pos: torch.Tensor, nodes: Sequence[int]) -> torch.Tensor:
    """Hat functions ``(..., N, Π M_a)`` on ``M_a >= 2`` equispaced nodes per axis of the unit box, at ``pos``
    ``(..., N, d)`` (coordinates clamped to the box)."""
    factors = []
    for a, m in enumerate(nodes):
        t = pos[..., a].clamp(0, 1)[..., None] * (m - 1)
        factors.append((1 - (t - torch.arange(m, dtype=pos.dtype, device=pos.device)).abs()).clamp_min(0))
    return tensor_product(factors)


def coarse_pool(h: torch.Tensor, weights: torch.Tensor, hats: torch.Tensor) -> torch.Tensor:
    """Coarse tokens ``(B, M, C)``: hat-weighted quadrature means of ``h`` ``(B, N, C)``; zero where a hat has no
    weight."""
    wh = weights[..., None] * hats  # (B, N, M)
    mass = wh.sum(1)  # (B, M)
    total = torch.einsum("bnm,bnc->bmc", wh, h)
    safe = torch.where(mass > 0, mass, torch.ones_like(mass))
    return torch.where((mass > 0)[..., None], total / safe[..., None], torch.zeros_like(total))


# Elements of one chunk's per-point products (B, Nc, S, H, D): 8 MiB in float32, so they stay in cache and are never
# blocks the C library maps afresh at every call (the local sums as one (S·D x N) @ (N x E) product per chunk).
CHUNK_ELEMENTS = 1 << 21


# The per-subdomain (gathered) local sums run where the subdomains' supports hold at most this share of the S·N
# (point, subdomain) pairs the dense form computes.
SPARSE_BELOW = 0.5


def _supports(root: torch.Tensor) -> list[torch.Tensor] | None:
    """Per subdomain, the indices of the points where some batch row has a positive weight (``root (B or 1, N, S)``),
    or ``None`` where the dense form is the one to run (module docstring)."""
    if torch.compiler.is_compiling():
        return None
    member = (root > 0).any(0)  # (N, S)
    if int(member.sum()) > SPARSE_BELOW * member.numel():
        return None
    return [member[:, i].nonzero().squeeze(1) for i in range(member.shape[1])]


def _local_sparse(q, k, v, w, root, supports):
    """``Σ_i D_i^{1/2} Q_i K_i^T D_i^{1/2} W_i V_i`` (B, N, H, E) subdomain by subdomain over the points it holds."""
    b, n, h, _ = q.shape
    out = q.new_zeros(b, n, h, v.shape[-1])
    kw = k * w[..., None, None]
    for i, idx in enumerate(supports):
        if idx.numel() == 0:
            continue
        r = root[:, idx, i][..., None, None]  # (B, n_i, 1, 1)
        ki = (kw.index_select(1, idx) * r).permute(0, 2, 3, 1)  # (B, H, D, n_i)
        block = ki @ v.index_select(1, idx).transpose(1, 2)  # (B, H, D, E): K_i^T D_i^{1/2} W_i V_i
        y = q.index_select(1, idx).transpose(1, 2) @ block  # (B, H, n_i, E)
        out.index_add_(1, idx, y.transpose(1, 2) * r)
    return out


def _local_dense(q, k, v, w, root):
    """The same sums over every (point, subdomain) pair, as chunked matrix products (module docstring)."""
    b, n, h, d = q.shape
    e, s = v.shape[-1], root.shape[-1]
    sizes = max(1, CHUNK_ELEMENTS // max(1, b * s * h * max(d, e)))  # points per chunk (the last one shorter)
    local = None  # (B, H, S·D, E): K_i^T D_i^{1/2} W_i R_i V, one matrix product per chunk of points
    for r_c, k_c, v_c in zip(root.split(sizes, 1), (k * w[..., None, None]).split(sizes, 1), v.split(sizes, 1)):
        x = (r_c.transpose(1, 2)[:, None, :, None] * k_c.permute(0, 2, 3, 1)[:, :, None]).view(b, h, s * d, -1)
        part = x @ v_c.transpose(1, 2)
        local = part if local is None else local + part
    lt = local.view(b, h, s, d, e).transpose(2, 3).reshape(b, h, d, s * e)  # (B, H, D, S·E)
    parts = []
    for r_c, q_c in zip(root.split(sizes, 1), q.split(sizes, 1)):
        y = (q_c.transpose(1, 2) @ lt).view(b, h, -1, s, e)  # (B, H, Nc, S, E): q · (local block of every i)
        parts.append((y * r_c[:, None, :, :, None]).sum(3).transpose(1, 2))  # Σ_i D_i^{1/2}(x) ...: (B, Nc, H, E)
    return parts[0] if len(parts) == 1 else torch.cat(parts, 1)


def schwarz_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, weights: torch.Tensor,
                      partition: torch.Tensor, hats: torch.Tensor | None = None, q0: torch.Tensor | None = None,
                      k0: torch.Tensor | None = None) -> torch.Tensor:
    """Two-level overlapping Schwarz attention ``z`` (module docstring) ``(B, N, H, E)``.

    ``partition`` ``(B or 1, N, S)`` holds ``d_i(x_j)`` (summing to one over ``i``); ``hats`` ``(B or 1, N, M)``
    and coarse ``q0``, ``k0`` ``(B, M, H, D)`` add the coarse block (all three or none)."""
    if (hats is None) != (q0 is None) or (q0 is None) != (k0 is None):
        raise ValueError(f"hats, q0, k0: expected all three (coarse level) or none, got "
                         f"{[t is not None for t in (hats, q0, k0)]} given")
    for name, t, rank in (("q", q, 4), ("k", k, 4), ("v", v, 4), ("weights", weights, 2), ("partition", partition, 3)):
        if t.dim() != rank:
            raise ValueError(f"{name}: expected {rank} dimensions, got shape {tuple(t.shape)}")
    if partition.shape[1] != q.shape[1]:
        raise ValueError(f"partition: expected {q.shape[1]} points on axis 1 to match q, got {tuple(partition.shape)}")
    b = q.shape[0]
    root = partition.clamp_min(0).sqrt().to(q.dtype)  # D_i^{1/2}, (B or 1, N, S)
    supports = _supports(root)  # from the partition as given: a shared one is scanned once, not per batch row
    root = root.expand(b, -1, -1)
    w = weights.to(q.dtype)
    out = _local_dense(q, k, v, w, root) if supports is None else _local_sparse(q, k, v, w, root, supports)
    if hats is not None:
        hats = hats.to(q.dtype).expand(q.shape[0], -1, -1)
        v0 = torch.einsum("bnm,bnhe->bmhe", hats * w[..., None], v)  # Φ^T W V
        kv0 = torch.einsum("bmhd,bmhe->bhde", k0, v0)  # K_0^T Φ^T W V
        out = out + torch.einsum("bnm,bmhe->bnhe", hats, torch.einsum("bmhd,bhde->bmhe", q0, kv0))
    return out
