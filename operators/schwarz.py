"""Two-level overlapping Schwarz transformer (Köhler & Rheinbach, "Hierarchical Attention via Domain Decomposition",
arXiv 2606.18525; no public code: built from the paper's operator, docs/operators/schwarz_transformer.md).

Tokens ``h = Lin([a(x), x])``, then ``n_layers`` pre-norm blocks and a pointwise projection::

    h <- h + Wo A(LN1(h));   h <- h + FFN(LN2(h));   u = Lin(LN(h))

``A`` is :func:`sciattn.multipole.schwarz.schwarz_attention`, softmax-free and per head: local low-rank blocks
``Q_i K_i^T`` on overlapping subdomains weighted by ``D_i^{1/2}`` on both sides (``Q_i = R_i Q``, ``Q = Lin(h)``),
plus a coarse block ``Φ Q_0 K_0^T Φ^T`` whose ``Q_0``, ``K_0`` are Linear maps of the hat-weighted coarse tokens
:func:`~sciattn.multipole.schwarz.coarse_pool`; every sum over points carries the quadrature weights.

Defaults: subdomains and overlap in physical units (``geometry="physical"``: ``subdomains`` equal cores per axis of
the unit box, extended by ``overlap``, a fraction of the domain), which converges under refinement. The paper's
algebraic form is ``geometry="points"`` (index blocks extended by ``overlap_points`` nodes, ``D_i = 1/multiplicity``;
grids only) with ``quadrature=False`` (plain sums ``Σ_j`` as in ``M_θ^{-1} f``).

Shapes: grid ``x`` ``(B, C_in, *spatial)`` -> ``(B, C_out, *spatial)``; point set ``x`` ``(B, N, C_in)`` with ``pos``
``(B, N, d)`` in the unit box, optional ``weights`` and ``mask`` ``(B, N)`` -> ``(B, N, C_out)`` (physical
geometry only), zeros on padding.
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn._checks import check_choice, check_heads, check_per_axis_ints, check_positive_int
from sciattn.multipole.schwarz import (
    coarse_hats,
    coarse_pool,
    physical_partition,
    points_partition,
    schwarz_attention,
)

from ._token_inputs import grid_tokens, point_tokens, to_grid, zero_padding
from .contract import Operator
from .registry import register_operator

__all__ = ["SchwarzAttention", "SchwarzTransformer"]


class SchwarzAttention(nn.Module):
    """Multi-head two-level Schwarz attention on tokens ``(B, N, C)`` with a given partition and coarse hats."""

    def __init__(self, width: int, n_heads: int, coarse: bool):
        super().__init__()
        self.n_heads = n_heads
        self.q, self.k, self.v, self.out = (nn.Linear(width, width) for _ in range(4))
        self.q0 = nn.Linear(width, width) if coarse else None
        self.k0 = nn.Linear(width, width) if coarse else None

    def heads(self, t):
        return t.reshape(*t.shape[:2], self.n_heads, t.shape[-1] // self.n_heads)

    def forward(self, h, w, partition, hats=None):
        q, k, v = (self.heads(lin(h)) for lin in (self.q, self.k, self.v))
        q0 = k0 = None
        if self.q0 is not None:
            h0 = coarse_pool(h, w, hats.expand(h.shape[0], -1, -1))
            q0, k0 = self.heads(self.q0(h0)), self.heads(self.k0(h0))
        z = schwarz_attention(q, k, v, w, partition, hats if self.q0 is not None else None, q0, k0)
        return self.out(z.flatten(2))


class _Block(nn.Module):
    def __init__(self, width, n_heads, mlp_ratio, coarse):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = SchwarzAttention(width, n_heads, coarse)
        self.ffn = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(), nn.Linear(mlp_ratio * width, width))

    def forward(self, h, w, partition, hats):
        h = h + self.attn(self.ln1(h), w, partition, hats)
        return h + self.ffn(self.ln2(h))


@register_operator("schwarz_transformer")
class SchwarzTransformer(Operator):
    """Transformer of two-level overlapping Schwarz attention blocks (grids in 1-3 dimensions, point sets).

    Args:
        in_channels, out_channels: input and output channels.
        spatial_dims: dimension ``d`` of the domain (1, 2 or 3).
        width: token width (32); n_layers: blocks (4); n_heads: heads (4); mlp_ratio: FFN width / width (2).
        subdomains: subdomain cores per axis (an int or one per axis; 4).
        overlap: physical overlap, the extension of each subdomain beyond its core on each side as a fraction of
            the domain, in ``(0, 1 / (2 subdomains)]`` (1/16).
        coarse_nodes: coarse hat-function nodes per axis, ``>= 2`` (``None``: ``subdomains + 1``, the cores'
            vertices, the usual two-level choice).
        coarse: add the coarse level (``False``: one-level, local blocks only).
        geometry: ``"physical"`` (default) or ``"points"`` (the paper's algebraic subdomains, grids only).
        overlap_points: nodes added on each side of a core with ``geometry="points"`` (1).
        quadrature: quadrature weights on every sum (default); ``False``: the paper's plain sums (grids only).
    """

    input_kind = "grid"

    def __init__(self, *, in_channels: int, out_channels: int, spatial_dims: int = 2, width: int = 32,
                 n_layers: int = 4, n_heads: int = 4, mlp_ratio: int = 2, subdomains: int | list[int] = 4,
                 overlap: float = 0.0625, coarse_nodes: int | list[int] | None = None, coarse: bool = True,
                 geometry: str = "physical", overlap_points: int = 1, quadrature: bool = True) -> None:
        super().__init__()
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("width", width),
                            ("n_layers", n_layers), ("n_heads", n_heads), ("mlp_ratio", mlp_ratio)]:
            check_positive_int(name, value)
        check_heads("width", width, n_heads)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        self.subdomains = check_per_axis_ints("subdomains", subdomains, spatial_dims)
        nodes = tuple(s + 1 for s in self.subdomains) if coarse_nodes is None else \
            check_per_axis_ints("coarse_nodes", coarse_nodes, spatial_dims)
        if min(nodes) < 2:
            raise ValueError(f"coarse_nodes: expected at least 2 nodes per axis, got {coarse_nodes!r}")
        limit = 1 / (2 * max(self.subdomains))
        if isinstance(overlap, bool) or not isinstance(overlap, (int, float)) or not 0 < overlap <= limit:
            raise ValueError(f"overlap: expected a fraction of the domain in (0, 1/(2*subdomains)] = (0, {limit}], "
                             f"got {overlap!r}")
        self.geometry = check_choice("geometry", geometry, ("physical", "points"))
        if isinstance(overlap_points, bool) or not isinstance(overlap_points, int) or overlap_points < 0:
            raise ValueError(f"overlap_points: expected an int >= 0, got {overlap_points!r}")
        for name, flag in (("coarse", coarse), ("quadrature", quadrature)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name}: expected a bool, got {flag!r}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.overlap, self.overlap_points, self.coarse_nodes = float(overlap), overlap_points, nodes
        self.coarse, self.quadrature = coarse, quadrature
        self.lift = nn.Linear(in_channels + spatial_dims, width)
        self.blocks = nn.ModuleList(_Block(width, n_heads, mlp_ratio, coarse) for _ in range(n_layers))
        self.norm = nn.LayerNorm(width)
        self.project = nn.Linear(width, out_channels)

    def encode(self, a, pos, w, partition, mask=None):
        """Tokens ``(B, N, C_in)`` at ``pos`` with weights ``w`` ``(B, N)`` and partition ``(B|1, N, S)``."""
        if not self.quadrature:
            w = torch.ones_like(w) if mask is None else mask.to(w.dtype)
        hats = coarse_hats(pos, self.coarse_nodes) if self.coarse else None
        h = self.lift(torch.cat([a, pos], dim=-1))
        for block in self.blocks:
            h = block(h, w, partition, hats)
        return self.project(self.norm(h))

    def forward(self, x, pos=None, weights=None, mask=None, *, y=None):
        """``y`` is accepted and ignored (neuraloperator's ``Trainer`` calls ``model(**sample)``)."""
        del y
        if pos is None:
            a, p, w, grid = grid_tokens(self, x, "SchwarzTransformer")
            if self.geometry == "points":
                part = points_partition(grid.shape, self.subdomains, self.overlap_points, a.dtype, a.device)[None]
            else:
                part = physical_partition(p[:1], self.subdomains, self.overlap)
            return to_grid(self.encode(a, p, w, part), self, grid)
        if self.geometry == "points" or not self.quadrature:
            raise ValueError(f"pos: point sets need geometry='physical' and quadrature=True (subdomains in points "
                             f"and plain sums are defined on grids), got geometry={self.geometry!r}, "
                             f"quadrature={self.quadrature!r}")
        a, p, w, keep = point_tokens(self, x, pos, weights, mask)
        return zero_padding(self.encode(a, p, w, physical_partition(p, self.subdomains, self.overlap), mask), keep)
