r"""Per-grid geometry of the physical pyramid's windows: box starts and log window weights, cached.

Along one axis, a level with ``m`` key cells and windows of ``c`` cells serves the ``n`` query cells of the input
(query ``i`` at ``x_i = (i + 1/2) / n``, key cell ``y`` with centre ``(y + 1/2) / m``). Every query attends to a
**box** of ``L`` consecutive key cells starting at ``start[i]`` with the per-axis window weights
``φ[i, p]`` of the box's cells ``start[i] + p`` (:func:`sciattn.multipole.physical.taper_weights`):

* tapered windows (``taper`` and ``m > c``): ``u = x_i m - 1/2``, ``j = ⌊u⌋``, ``θ = u - j``; the blend
  ``φ = (1-θ) [y ∈ W(j)] + θ [y ∈ W(j+1)]`` of the clamped windows ``W(j) = {s(j), …, s(j)+c-1}``,
  ``s(j) = clamp(clamp(j, 0, m-1) - ⌊c/2⌋, 0, m - c)``. ``W(j) ∪ W(j+1)`` is ``c + 1`` cells (``c`` where the
  boundary clamps both to one window), so the box is ``L = c + 1`` cells from ``min(s(j), m - c - 1)``: every
  key a query can weigh, and no other (the cell of weight 0 in a clamped box is excluded by ``log 0 = -inf``);
* hard windows: ``L = c``, the window of the key cell holding the query, ``φ = 1``; with ``m <= c`` this is the
  whole level (the global level), and with ``m = n`` the local near-field window around the query's own cell.

The product over axes of these per-axis weights is the window weight of a query cell and a key cell, so the
geometry of a ``d``-dimensional level is ``d`` small tables: ``start (n_a,)`` and ``log φ (n_a, L_a)``. They
depend on ``(n, m, c, taper)`` only, are computed once in float64 (the same arithmetic as the tables of
:func:`~sciattn.multipole.physical.level_attention`) and kept in a least-recently-used cache, per dtype and
device, so a call on a grid seen before builds nothing.

**Folded key grids.** A level finer than the input along an axis (``m > n``: the 64-cell level of a 32-cell input)
holds no new information there: :func:`~sciattn.multipole.physical.pool_to_grid` fills each key cell ``y`` with
the input cell ``u = src(y)`` containing its centre, with the weight ``w_u / share(u)`` (``share(u)`` key cells
per input cell). The level's sum over its box therefore gathers per input cell,

.. math::
    \sum_{p} φ[i, p]\, \frac{w_{src(s_i + p)}}{share(src(s_i + p))}\, f(src(s_i + p)) = \sum_{p'} Φ[i, p']\, w_{s'_i + p'}\, f(s'_i + p'),
    \qquad Φ[i, p'] = \sum_{p:\, src(s_i + p) = s'_i + p'} \frac{φ[i, p]}{share(s'_i + p')},

so the level is a box attention on the input grid with the folded per-axis weights ``Φ`` (:func:`folded_axis_geometry`):
the same sums with ``L' ≈ L n / m + 1`` keys per axis instead of ``L`` (at 32² the 64-cell level's 9 × 9 keys become
5 × 5), equal to the unfolded level up to rounding.

**Widened boxes.** The keys-in-lanes kernel loads a box once for every run of queries with the same box start. Where
runs are short along an axis (85 input cells on a 64-cell level: 1.5 queries per box start), the loads are barely
shared. :func:`widened_axis_geometry` groups consecutive queries whose boxes fit in ``L + extra`` cells into one run
with one start; each query keeps its own weights at its own cells and ``log 0 = -inf`` on the others, so the sums
are the same (added in another order: equal up to rounding).
"""

from __future__ import annotations

import functools

import torch

__all__ = ["AxisGeometry", "axis_geometry", "folded_axis_geometry", "widened_axis_geometry", "GEOMETRY_CACHE_SIZE"]

# Distinct (n, m, c, taper, dtype, device) tables kept; a layer at one resolution uses one per level and axis.
GEOMETRY_CACHE_SIZE = 512


class AxisGeometry(tuple):
    """``(start, logphi)``: box starts ``(n,)`` (int64) and log window weights ``(n, L)`` of one axis."""

    __slots__ = ()

    def __new__(cls, start: torch.Tensor, logphi: torch.Tensor):
        return super().__new__(cls, (start, logphi))

    @property
    def start(self) -> torch.Tensor:
        return self[0]

    @property
    def logphi(self) -> torch.Tensor:
        return self[1]

    @property
    def length(self) -> int:
        return self[1].shape[1]


def _window_starts(m: int, c: int) -> torch.Tensor:
    return (torch.arange(m) - c // 2).clamp(0, m - c)


@functools.lru_cache(maxsize=GEOMETRY_CACHE_SIZE)
def _axis_float64(n: int, m: int, c: int, taper: bool) -> AxisGeometry:
    """The tables of one axis in float64 on the CPU (module docstring)."""
    if n < 1 or m < 1 or not 1 <= c <= m:
        raise ValueError(f"axis geometry: expected n >= 1, m >= 1 and 1 <= c <= m, got n={n}, m={m}, c={c}")
    i = torch.arange(n, dtype=torch.float64)
    xq = (i + 0.5) * m / n  # query positions in key cells, [0, m]
    starts = _window_starts(m, c)
    if taper and m > c:
        u = xq - 0.5
        j = u.floor()
        theta = (u - j)[:, None]
        j = j.long()
        s0 = starts[j.clamp(0, m - 1)]
        s1 = starts[(j + 1).clamp(0, m - 1)]
        length = c + 1
        start = torch.minimum(s0, torch.full_like(s0, m - length))
        keys = start[:, None] + torch.arange(length)
        in0 = ((keys >= s0[:, None]) & (keys < s0[:, None] + c)).to(torch.float64)
        in1 = ((keys >= s1[:, None]) & (keys < s1[:, None] + c)).to(torch.float64)
        logphi = ((1 - theta) * in0 + theta * in1).log()
    else:
        cell = xq.floor().clamp(0, m - 1).long()
        start = starts[cell]
        logphi = torch.zeros(n, c, dtype=torch.float64)
    return AxisGeometry(start.contiguous(), logphi.contiguous())


@functools.lru_cache(maxsize=GEOMETRY_CACHE_SIZE)
def _widened_float64(n: int, m: int, c: int, taper: bool, folded: bool, extra: int) -> AxisGeometry:
    """The tables (folded ones when ``folded``) with runs of queries sharing one box of ``L + extra`` cells (module
    docstring), float64, CPU. ``m``: the level's own size (its key count is ``n`` when folded)."""
    base = (_folded_float64 if folded else _axis_float64)(n, m, c, taper)
    keys = n if folded else m
    length = base.length
    wide = min(length + extra, keys)
    starts = base.start.tolist()
    shared = []
    i = 0
    while i < n:  # starts never decrease along the axis: a run ends at the first box that leaves the shared one
        s0 = min(starts[i], keys - wide)
        j = i
        while j < n and starts[j] + length <= s0 + wide:
            j += 1
        shared += [s0] * (j - i)
        i = j
    start = torch.tensor(shared, dtype=torch.long)
    cols = (base.start - start)[:, None] + torch.arange(length)
    logphi = torch.full((n, wide), -torch.inf, dtype=torch.float64).scatter_(1, cols, base.logphi)
    return AxisGeometry(start, logphi)


@functools.lru_cache(maxsize=GEOMETRY_CACHE_SIZE)
def _axis_cast(n: int, m: int, c: int, taper: bool, dtype: torch.dtype, device: torch.device,
               folded: bool = False, extra: int = 0) -> AxisGeometry:
    if extra:
        base = _widened_float64(n, m, c, taper, folded, extra)
    else:
        base = (_folded_float64 if folded else _axis_float64)(n, m, c, taper)
    return AxisGeometry(base.start.to(device), base.logphi.to(dtype=dtype, device=device))


def axis_geometry(n: int, m: int, c: int, taper: bool, dtype: torch.dtype = torch.float64,
                  device: torch.device | str = "cpu") -> AxisGeometry:
    """Box starts and log window weights of one axis (module docstring), cached per arguments."""
    return _axis_cast(int(n), int(m), int(c), bool(taper), dtype, torch.device(device))


@functools.lru_cache(maxsize=GEOMETRY_CACHE_SIZE)
def _folded_float64(n: int, m: int, c: int, taper: bool) -> AxisGeometry:
    """The level ``(m, c)``'s tables folded onto the ``n < m`` input cells (module docstring), float64, CPU."""
    base = _axis_float64(n, m, c, taper)
    y = torch.arange(m)
    src = torch.div((2 * y + 1) * n, 2 * m, rounding_mode="floor")  # input cell containing each key cell's centre
    share = torch.bincount(src, minlength=n).to(torch.float64)
    keys = base.start[:, None] + torch.arange(base.length)  # (n, L) key cells of every box
    cells = src[keys]
    first = cells[:, 0]
    length = int((cells[:, -1] - first).max()) + 1
    start = torch.minimum(first, torch.full_like(first, n - length))
    weight = base.logphi.exp() / share[cells]
    folded = torch.zeros(n, length, dtype=torch.float64).scatter_add_(1, cells - start[:, None], weight)
    return AxisGeometry(start.contiguous(), folded.log().contiguous())


def folded_axis_geometry(n: int, m: int, c: int, taper: bool, dtype: torch.dtype = torch.float64,
                         device: torch.device | str = "cpu") -> AxisGeometry:
    """Box starts and log weights of the level ``(m, c)`` folded onto the ``n`` input cells of an axis where it is
    finer than the input (``m > n``; module docstring): the keys are the ``n`` input cells, the weights ``log Φ``
    include the key-weight share. Cached per arguments."""
    n, m, c = int(n), int(m), int(c)
    if not 1 <= n < m:
        raise ValueError(f"folded_axis_geometry: expected 1 <= n < m (a level finer than the input), got n={n}, m={m}")
    return _axis_cast(n, m, c, bool(taper), dtype, torch.device(device), True)


def widened_axis_geometry(n: int, m: int, c: int, taper: bool, extra: int, dtype: torch.dtype = torch.float64,
                          device: torch.device | str = "cpu", *, folded: bool = False) -> AxisGeometry:
    """The tables of :func:`axis_geometry` (of :func:`folded_axis_geometry` when ``folded``) with consecutive queries
    whose boxes fit in ``L + extra`` cells (at most the key count) given one start (module docstring): the same
    weights at the same key cells, ``-inf`` on the cells a query's own box does not hold. Cached per arguments."""
    n, m, c, extra = int(n), int(m), int(c), int(extra)
    if extra < 0:
        raise ValueError(f"widened_axis_geometry: expected extra >= 0, got {extra}")
    if folded and not 1 <= n < m:
        raise ValueError(f"widened_axis_geometry: expected 1 <= n < m with folded=True, got n={n}, m={m}")
    return _axis_cast(n, m, c, bool(taper), dtype, torch.device(device), bool(folded), extra)


@functools.lru_cache(maxsize=GEOMETRY_CACHE_SIZE)
def box_starts(n: int, m: int, c: int, taper: bool, folded: bool = False) -> int:
    """The number of distinct box starts along the axis (of the folded tables when ``folded``): ``n`` over it is
    the mean run of queries that share a box."""
    base = (_folded_float64 if folded else _axis_float64)(int(n), int(m), int(c), bool(taper))
    return int(torch.unique_consecutive(base.start).numel())


def box_keys(geometry: AxisGeometry) -> int:
    """Key cells per box along the axis (``L``)."""
    return geometry.length


def geometry_cache_info() -> dict[str, object]:
    """Hits, misses and sizes of the caches (float64 tables: plain, folded, widened; cast copies per dtype/device;
    box-start counts)."""
    return {"float64": _axis_float64.cache_info(), "cast": _axis_cast.cache_info(),
            "folded": _folded_float64.cache_info(), "widened": _widened_float64.cache_info(),
            "box_starts": box_starts.cache_info()}


def clear_geometry_cache() -> None:
    for cache in (_axis_float64, _axis_cast, _folded_float64, _widened_float64, box_starts):
        cache.cache_clear()

