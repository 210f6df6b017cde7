"""The configuration of a multipole layer, resolved once: every default in one place, and the planning that
follows from it (the pyramid's levels on a grid, the sizes an exported program takes).

:class:`MultipoleSpec` is frozen. :class:`~sciattn.multipole.MultipoleAttention` builds one from its arguments
(:meth:`MultipoleSpec.resolve`) and reads every setting from it; the ``mano`` and ``mano_extended`` operators
build theirs with :meth:`MultipoleSpec.for_operator` (which also decides, once, that ``window`` in cells means
the input pyramid) and hand it to their blocks, so a default is written here and nowhere else.

The defaults (:data:`DEFAULTS`): the physical pyramid, windows of ``1/8`` of the domain per axis, 8 cells per
window on every key level, a 3-cell local near field, tapered windows, pooling factor 2; the input pyramid
(``window`` in cells) defaults to 8-cell windows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from .._checks import check_choice, check_per_axis_ints, check_positive_int
from .physical import physical_levels

__all__ = ["MultipoleSpec", "DEFAULTS", "POOLS", "PYRAMIDS", "UNPOOLS", "WINDOW_TAPERS"]

POOLS = ("avg", "conv")
PYRAMIDS = ("physical", "input")
WINDOW_TAPERS = ("linear", "none")
UNPOOLS = ("nearest", "linear", "transposed")

# Every default of the layer, once.
DEFAULTS = {
    "window_fraction": 0.125,  # physical pyramid: a window is this fraction of the domain per axis
    "coarse_cells": 8,  # cells per window on every key level
    "local_window": 3,  # cells per axis of the local near field (0: none)
    "window_taper": "linear",  # tapered windows (physical pyramid)
    "window_cells": 8,  # input pyramid: window in cells when neither window nor window_fraction is given
    "pool_factor": 2,
}


def _per_axis_fractions(value, d: int, name: str = "window_fraction") -> tuple[float, ...]:
    fr = (value,) * d if isinstance(value, (int, float)) else tuple(value)
    if len(fr) != d or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 1 for f in fr):
        raise ValueError(f"{name}: expected a float or {d} floats in (0, 1], got {value!r}")
    return tuple(float(f) for f in fr)


@dataclasses.dataclass(frozen=True)
class MultipoleSpec:
    """The resolved settings of one multipole layer (see :class:`~sciattn.multipole.MultipoleAttention` for their
    meaning). Build it with :meth:`resolve` or :meth:`for_operator`; ``levels`` (the physical pyramid's key grids
    and windows, finest first) is derived."""

    spatial_dims: int
    pyramid: str
    window: tuple[int, ...] | None
    window_fraction: tuple[float, ...] | None
    coarse_cells: tuple[int, ...] | None
    local_window: tuple[int, ...] | None
    window_taper: str
    pool_factor: int
    pool: str
    unpool: str
    max_levels: int | None
    levels: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] | None

    @classmethod
    def resolve(cls, spatial_dims: int = 2, *, window=None, window_fraction=None, pool_factor: int | None = None,
                pool: str = "avg", unpool: str = "nearest", max_levels: int | None = None, coarse_cells=None,
                local_window=None, pyramid: str | None = None, window_taper: str | None = None) -> MultipoleSpec:
        """The spec of the layer arguments (``None``: the default, :data:`DEFAULTS`); every inconsistent
        combination raises, naming the argument."""
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        d = spatial_dims
        pool_factor = DEFAULTS["pool_factor"] if pool_factor is None else pool_factor
        check_positive_int("pool_factor", pool_factor)
        if pool_factor < 2:
            raise ValueError(f"pool_factor: expected an int >= 2, got {pool_factor}")
        check_choice("pool", pool, POOLS)
        check_choice("unpool", unpool, UNPOOLS)
        if max_levels is not None:
            check_positive_int("max_levels", max_levels)
        if pyramid is None:
            pyramid = "input" if window is not None else "physical"
        check_choice("pyramid", pyramid, PYRAMIDS)
        if window is not None and window_fraction is not None:
            raise ValueError(f"window_fraction: expected None when window is given, got window={window!r}, "
                             f"window_fraction={window_fraction!r}")
        if window_taper is not None:
            check_choice("window_taper", window_taper, WINDOW_TAPERS)
        common = dict(spatial_dims=d, pool_factor=pool_factor, pool=pool, unpool=unpool, max_levels=max_levels)
        if pyramid == "physical":
            if window is not None:
                raise ValueError(f"window: expected None with pyramid='physical' (windows are window_fraction of the "
                                 f"domain there; window in cells needs pyramid='input'), got window={window!r}")
            if pool != "avg" or unpool != "nearest":
                raise ValueError(f"pool: expected pool='avg' and unpool='nearest' with pyramid='physical' (keys are "
                                 f"cell means, queries stay at full resolution: nothing is upsampled), got "
                                 f"pool={pool!r}, unpool={unpool!r}")
            fraction = _per_axis_fractions(DEFAULTS["window_fraction"] if window_fraction is None
                                           else window_fraction, d)
            cells = check_per_axis_ints("coarse_cells", DEFAULTS["coarse_cells"] if coarse_cells is None
                                        else coarse_cells, d)
            lw = DEFAULTS["local_window"] if local_window is None else local_window
            local = (None if isinstance(lw, int) and not isinstance(lw, bool) and lw == 0
                     else check_per_axis_ints("local_window", lw, d))
            levels = tuple(physical_levels(fraction, cells, pool_factor, max_levels))
            return cls(pyramid="physical", window=None, window_fraction=fraction, coarse_cells=cells,
                       local_window=local, window_taper=window_taper or DEFAULTS["window_taper"], levels=levels,
                       **common)
        if local_window not in (None, 0):
            raise ValueError(f"local_window: expected None or 0 with pyramid='input' (the local term belongs to the "
                             f"physical pyramid), got {local_window!r}")
        if window_taper not in (None, "none"):
            raise ValueError(f"window_taper: expected None or 'none' with pyramid='input' (the taper belongs to "
                             f"the physical pyramid), got {window_taper!r}")
        fraction = None if window_fraction is None else _per_axis_fractions(window_fraction, d)
        win = None if fraction is not None else check_per_axis_ints(
            "window", DEFAULTS["window_cells"] if window is None else window, d)
        cells = None
        if coarse_cells is not None:
            if fraction is None:
                raise ValueError(f"coarse_cells: expected None unless window_fraction is given (a physical pyramid "
                                 f"needs physical windows), got coarse_cells={coarse_cells!r} with window={win}")
            if pool != "avg" or unpool not in ("nearest", "linear"):
                raise ValueError(f"coarse_cells: expected pool='avg' and unpool 'nearest' or 'linear' (the learned "
                                 f"resamplers assume the factor pool_factor), got pool={pool!r}, unpool={unpool!r}")
            cells = check_per_axis_ints("coarse_cells", coarse_cells, d)
        return cls(pyramid="input", window=win, window_fraction=fraction, coarse_cells=cells, local_window=None,
                   window_taper="none", levels=None, **common)

    @classmethod
    def for_operator(cls, spatial_dims: int = 2, *, window=None, window_fraction=None, coarse_cells=None,
                     local_window=None, pool_factor: int | None = None, pool: str = "avg", unpool: str = "nearest",
                     max_levels: int | None = None, pyramid: str | None = None,
                     window_taper: str | None = None) -> MultipoleSpec:
        """The spec of one block of a MANO operator: ``window`` (cells) selects the input pyramid with cell-counted
        windows, so the physical sizes are not used with it; ``pyramid="input"`` with ``window_fraction`` is the
        layer's earlier fraction modes (no local term, no taper, ``local_window`` and ``window_taper`` not used)."""
        common = dict(pool_factor=pool_factor, pool=pool, unpool=unpool, max_levels=max_levels)
        if window is not None:
            return cls.resolve(spatial_dims, pyramid="input", window=window, **common)
        if pyramid == "input":
            return cls.resolve(spatial_dims, pyramid="input", window_fraction=window_fraction,
                               coarse_cells=coarse_cells, **common)
        return cls.resolve(spatial_dims, pyramid=pyramid, window_fraction=window_fraction, coarse_cells=coarse_cells,
                           local_window=local_window, window_taper=window_taper, **common)

    def layer_arguments(self) -> dict:
        """Keyword arguments of :class:`~sciattn.multipole.MultipoleAttention` that resolve to this spec."""
        out = dict(pyramid=self.pyramid, pool_factor=self.pool_factor, pool=self.pool, unpool=self.unpool,
                   max_levels=self.max_levels)
        if self.pyramid == "physical":
            return dict(out, window_fraction=self.window_fraction, coarse_cells=self.coarse_cells,
                        local_window=self.local_window or 0, window_taper=self.window_taper)
        return dict(out, window=self.window, window_fraction=self.window_fraction, coarse_cells=self.coarse_cells)

    def window_cells(self, shape: Sequence[int]) -> tuple[int, ...]:
        """Window in cells for an input grid ``shape`` (``window_fraction`` converted here)."""
        if self.window_fraction is None:
            return self.window  # type: ignore[return-value]
        return tuple(max(1, math.floor(f * n + 0.5)) for f, n in zip(self.window_fraction, shape))

    def plan(self, shape: Sequence[int]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """``[(grid, window), ...]`` per level, finest first, for an input grid ``shape``.

        Raises if the grid is smaller than one window along some axis.
        """
        if self.pyramid == "physical":  # key grids of fixed physical size, the same for every input
            return list(self.levels)
        shape = tuple(int(n) for n in shape)
        win = self.window_cells(shape)
        if any(n < w for n, w in zip(shape, win)):
            raise ValueError(f"x: expected a grid of at least window={win} cells per axis, got spatial shape {shape}")
        levels = [(shape, win)]
        cap = self.max_levels or math.inf
        s = self.pool_factor
        while any(n > w for n, w in zip(shape, win)) and len(levels) < cap:
            if self.coarse_cells is None:
                shape = tuple(-(-n // s) for n in shape)
                win = tuple(min(w, n) for w, n in zip(win, shape))
            else:  # level ℓ: c cells per window of f·s^ℓ of the domain, never finer than ceil(n/s)
                span = [f * s ** len(levels) for f in self.window_fraction]  # type: ignore[union-attr]
                shape = tuple(min(max(1, math.floor(c / a + 0.5)), -(-n // s))
                              for c, a, n in zip(self.coarse_cells, span, shape))
                win = tuple(min(n, max(1, math.floor(a * n + 0.5))) for a, n in zip(span, shape))
            levels.append((shape, win))
        return levels

    def export_unit(self) -> tuple[int, ...] | None:
        """Per-axis size ``M`` such that every grid ``n = K·M`` (``K >= 1`` per axis) has the pyramid of
        ``M`` scaled by ``K``, or ``None`` (then :meth:`export_unit_why_not` says why).

        On those grids every level divides exactly by ``pool_factor`` (no padding, no adaptive bins)
        and every window tiles its level, so :meth:`plan` on symbolic sizes is ``K`` times the plan at
        ``M`` and a traced program (``sciattn export``) takes every multiple of ``M``, with no upper
        bound: the level count does not change with ``K``.

        * ``window_fraction=f`` (the windows grow with the grid): ``M`` is the smallest size with
          ``f·M`` a whole number of cells whose pyramid divides exactly; e.g. ``f=1/4``, ``s=2``: ``M=4``
          (three levels, windows ``n/4`` at every level). A fraction that never tiles its levels
          exactly (``f=0.3``: ``10/3`` windows per axis) has no unit.
        * ``window=w`` cells: no unit. Without ``max_levels`` the level count grows by one per refinement
          by ``s``; with it the sizes ``K·w·s^(L-1)`` would share the pyramid, but the number of windows
          grows with ``K`` and torch.export pins it (a guard on the window tiling), so it is not offered.
        * ``coarse_cells``: levels ``ℓ >= 1`` have fixed sizes ``c_ℓ`` once the grid is fine enough (``ceil(n/s) >=
          c_1``), reached from the input level by adaptive pooling. ``M`` is the lcm of the window unit and ``c_1``,
          so the bins of that pooling are exact (``n / c_1`` cells, a symbolic integer) and only the input level
          scales with ``K``; :meth:`export_min_size` is the smallest multiple with that saturated pyramid (e.g.
          ``window_fraction=1/8``, ``coarse_cells=8``: ``M = 32``, levels ``n, 32, 16, 8`` from ``n = 64``).
        """
        return self._export_unit()[0]

    def export_min_size(self) -> tuple[int, ...] | None:
        """Smallest size per axis (a multiple of :meth:`export_unit`) a traced program takes: ``2M`` (at ``M`` a
        window is one cell, a size torch.export specialises), or with ``coarse_cells`` the smallest multiple whose
        pyramid has the fixed coarse levels."""
        return self._export_unit()[2]

    def export_unit_why_not(self) -> str | None:
        """Why :meth:`export_unit` is ``None`` (``None`` when it is not)."""
        return self._export_unit()[1]

    def _export_unit(self) -> tuple[tuple[int, ...] | None, str | None, tuple[int, ...] | None]:
        if self.pyramid == "physical":  # the key grids are fixed: on multiples of their lcm every level is a reshape
            unit = tuple(math.lcm(*(m[a] for m, _ in self.levels)) for a in range(self.spatial_dims))
            return unit, None, tuple(2 * u for u in unit)
        unit, why = self._export_unit_pair()
        if unit is None or self.coarse_cells is None:
            return unit, why, None if unit is None else tuple(2 * m for m in unit)
        return self._export_unit_coarse(unit)

    def _export_unit_coarse(self, base: tuple[int, ...]):
        """:meth:`_export_unit` with ``coarse_cells``: ``base`` is the window unit; the coarse levels of a fine
        grid are fixed, the unit adds exact bins onto level 1 and the minimum is where that pyramid starts."""
        ref = self.plan(tuple(m * 4096 for m in base))  # a fine grid: the fixed coarse levels
        coarse = ref[1:]
        if not coarse:
            return None, f"coarse_cells={self.coarse_cells}: the pyramid has one level, nothing to export", None
        unit = tuple(m * c // math.gcd(m, c) for m, c in zip(base, coarse[0][0]))  # exact bins onto level 1
        frac = self.window_fraction

        def fits(n):  # the pyramid at n: the input level, windows f*n tiling it (>= 2 cells), then ref's coarse levels
            plan = self.plan(n)
            return (plan[1:] == coarse and all(w == round(f * g) >= 2 and g % w == 0
                                               for f, g, w in zip(frac, n, plan[0][1])))

        kmin = next((k for k in range(1, 4097) if all(fits(tuple(j * m for m in unit)) for j in (k, k + 1, k + 2))),
                    None)
        if kmin is None:  # pragma: no cover - the coarse sizes are reached by every grid fine enough
            return None, f"coarse_cells={self.coarse_cells}: no grid size has the fixed coarse levels", None
        for k in (kmin + 3, kmin + 4, 2 * kmin + 5, 7 * kmin + 11, 64 * kmin + 1):  # guards the derivation above
            if not fits(tuple(k * m for m in unit)):  # pragma: no cover
                return None, f"coarse_cells={self.coarse_cells}: the pyramid at {k} * {unit} is not the fixed one", None
        return unit, None, tuple(kmin * m for m in unit)

    def _export_unit_pair(self) -> tuple[tuple[int, ...] | None, str | None]:
        s = self.pool_factor
        if self.window_fraction is None:
            if self.max_levels is None:
                return None, (f"window={self.window} cells without max_levels: the pyramid has 1 + ceil(log_s(n / "
                              f"window)) levels, one more per refinement by s={s}, so one traced graph cannot hold "
                              f"every resolution (window_fraction gives a level count independent of n)")
            return None, (f"window={self.window} cells with max_levels={self.max_levels}: the level count is fixed, "
                          f"but the number of windows grows with n and torch.export pins it (a guard on the window "
                          f"tiling); window_fraction exports dynamic sizes")
        else:
            base = []
            for f in self.window_fraction:  # smallest whole window c with c / f a whole number of cells
                c = next((c for c in range(1, 4097) if abs(round(c / f) * f - c) <= 1e-9 * c), None)
                if c is None:
                    return None, f"window_fraction={f}: no grid up to {round(4096 / f)} cells holds a whole window"
                base.append(round(c / f))
            levels = len(self.plan(tuple(base)))
            step = s ** (levels - 1)  # every level but the coarsest pools by s exactly
            unit = tuple(m * step // math.gcd(m, step) for m in base)
        if self.coarse_cells is not None:
            return tuple(base), None  # the window unit; the coarse pyramid is derived in _export_unit_coarse
        # check it: the pyramid of M divides exactly, and 2M and 3M have it scaled
        plan = self.plan(unit)
        for (grid, win), (nxt, _) in zip(plan, plan[1:] + [(None, None)]):
            if any(g % w for g, w in zip(grid, win)) or (nxt is not None and any(g != n * s for g, n in zip(grid, nxt))):
                return None, (f"window_fraction={self.window_fraction}: the windows do not tile the levels exactly "
                              f"at any grid size (the pyramid pads)")
        for k in (2, 3):
            scaled = [(tuple(k * g for g in grid), tuple(k * w for w in win) if self.window_fraction else win)
                      for grid, win in plan]
            if self.plan(tuple(k * m for m in unit)) != scaled:  # pragma: no cover - guards the derivation above
                return None, f"the pyramid at {tuple(k * m for m in unit)} is not the one at {unit} scaled by {k}"
        return unit, None
