r"""The physical pyramid's relative-position bias: a learned score bias over the query–key displacement.

With ``rel_pos_bias=R`` (:class:`~sciattn.multipole.MultipoleAttention`) the score of query ``i`` and key cell ``y``
of a level (``m`` cells and windows of ``c`` cells per axis) gains

.. math::
    b_h(δ) = \sum_{k} T_h[k] \prod_a \max(0, 1 - |u_a - k_a|), \qquad
    u_a = \mathrm{clamp}\big((δ_a + 1) R,\ 0,\ 2R\big), \quad δ_a = \frac{x_{i,a} - (y_a + 1/2)}{c_a},

the multilinear interpolation of the table ``T (H, 2R+1, …, 2R+1)`` at the displacement ``δ`` from the query
(``x_{i,a} = (i_a + 1/2) m_a / n_a``, in key cells) to the key cell's centre, in units of the window (a physical
length, so one table serves every level and resolution); ``δ_a`` beyond ``±1`` reads the end nodes.

:class:`RelativePositionBias` evaluates it two ways with the same sums:

* called on the per-axis displacements (the SDPA path, :func:`~sciattn.multipole.physical.level_attention`), it
  returns the bias of every (query, key) pair of a chunk;
* for the fused CPU kernels (:mod:`sciattn.multipole.box_attention`) it hands over the table as
  ``(H, K_0, K_1, K_2)`` (``K_a = 1`` on the unused leading axes) and, per axis, the node positions ``u_a`` of every
  (query, box cell) pair, :func:`box_node_positions`, shape ``(n_a, L_a)``, in the layout of the box tables of
  :mod:`sciattn.multipole.geometry`. The kernels contract the table with the hat weights of the leading axes once
  per query row and interpolate the last axis per score; the table's gradient is ``Σ ∂L/∂s · hat weights``.
"""

from __future__ import annotations

import functools
import itertools
import math

import torch

from .geometry import GEOMETRY_CACHE_SIZE, _axis_float64, _widened_float64

__all__ = ["RelativePositionBias", "box_node_positions", "table_nodes"]


def table_nodes(delta: torch.Tensor, radius: int) -> torch.Tensor:
    """The table coordinate ``clamp((δ + 1) R, 0, 2R)`` of displacements ``δ`` in window units (module docstring):
    the one formula of the SDPA path and the kernels' node positions."""
    return ((delta + 1) * radius).clamp(0, 2 * radius)


class RelativePositionBias:
    """The bias ``b_h(δ)`` of a table ``(H, 2R+1, …, 2R+1)`` (``d`` axes) with ``R = radius`` (module docstring)."""

    def __init__(self, table: torch.Tensor, radius: int):
        if isinstance(radius, bool) or not isinstance(radius, int) or radius < 1:
            raise ValueError(f"radius: expected an int >= 1, got {radius!r}")
        if table.dim() < 2 or any(s != 2 * radius + 1 for s in table.shape[1:]):
            raise ValueError(f"table: expected shape (H, {2 * radius + 1}, ...) for radius {radius}, "
                             f"got {tuple(table.shape)}")
        self.table, self.radius, self.spatial_dims = table, radius, table.dim() - 1

    def __call__(self, deltas: list[torch.Tensor]) -> torch.Tensor:
        """``b_h(δ)`` from the per-axis displacements ``deltas`` (window units, broadcasting to
        ``(Mc, G_1..G_d, P_1..P_d)``); returns ``(H, Mc, G, P)``."""
        r, d = self.radius, self.spatial_dims
        flat = self.table.flatten(1)
        nodes = [table_nodes(dl, r) for dl in deltas]
        lows = [nd.floor().clamp(0, 2 * r - 1) for nd in nodes]
        fracs = [nd - lo for nd, lo in zip(nodes, lows)]
        lows = [lo.long() for lo in lows]
        out = None
        for corner in itertools.product((0, 1), repeat=d):
            weight, idx = None, None
            for a, c in enumerate(corner):
                wa = fracs[a] if c else 1 - fracs[a]
                ia = (lows[a] + c) * (2 * r + 1) ** (d - 1 - a)
                weight = wa if weight is None else weight * wa
                idx = ia if idx is None else idx + ia
            term = weight * flat[:, idx]  # (H, Mc, G.., P..)
            out = term if out is None else out + term
        mc = out.shape[1]
        return out.reshape(out.shape[0], mc, -1, math.prod(out.shape[2 + d:]))

    def kernel_table(self, dtype: torch.dtype) -> torch.Tensor:
        """The table as ``(H, K_0, K_1, K_2)`` in ``dtype`` (a view of the parameter where it can be, so its gradient
        reaches it), the unused leading axes of size 1."""
        t = self.table.to(dtype)
        return t.reshape(t.shape[0], *(1,) * (3 - self.spatial_dims), *t.shape[1:]).contiguous()


@functools.lru_cache(maxsize=GEOMETRY_CACHE_SIZE)
def _positions_float64(n: int, m: int, c: int, taper: bool, extra: int, radius: int) -> torch.Tensor:
    geo = _widened_float64(n, m, c, taper, False, extra) if extra else _axis_float64(n, m, c, taper)
    xq = (torch.arange(n, dtype=torch.float64) + 0.5) * m / n  # query positions in key cells
    cells = geo.start[:, None] + torch.arange(geo.length)  # (n, L) key cells of every box
    delta = (xq[:, None] - (cells.to(torch.float64) + 0.5)) / c
    return table_nodes(delta, radius).contiguous()


@functools.lru_cache(maxsize=GEOMETRY_CACHE_SIZE)
def _positions_cast(n, m, c, taper, extra, radius, dtype, device) -> torch.Tensor:
    return _positions_float64(n, m, c, taper, extra, radius).to(dtype=dtype, device=device)


def box_node_positions(n: int, m: int, c: int, taper: bool, radius: int, extra: int = 0,
                       dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu") -> torch.Tensor:
    """``u (n, L)``: the table coordinate ``clamp((δ + 1) R, 0, 2R)`` of every (query, box cell) pair along one axis
    of a level (``n`` queries, ``m`` key cells, windows of ``c``), for the boxes of
    :func:`~sciattn.multipole.geometry.axis_geometry` (widened by ``extra`` cells:
    :func:`~sciattn.multipole.geometry.widened_axis_geometry`). Cached per arguments."""
    return _positions_cast(int(n), int(m), int(c), bool(taper), int(extra), int(radius), dtype, torch.device(device))
