"""Multipole attention on grids (after MANO, Colagrande et al., arXiv 2507.02748), discretisation-convergent.

The layer approximates the kernel integral of softmax attention over the domain ``Ω = [0, 1]^d``,

    u(x) = ∫_Ω softmax_y(q(x)·k(y)) v(y) dy ,

by a near field plus far fields at several physical scales (multipole), each a softmax attention
over a bounded set of keys, so the cost per query is a fixed number of keys.

Default: the physical pyramid (``pyramid="physical"``)
-----------------------------------------------------
Key grids of fixed physical size, queries at full resolution. With ``f = window_fraction`` (a
window's extent as a fraction of the domain per axis) and ``c = coarse_cells`` (cells per window)
the finest key grid has ``m_0 = c / f`` cells per axis, level ``ℓ`` has ``m_ℓ = m_0 / s^ℓ``
(``s = pool_factor``), until one window holds the level: 64, 32, 16, 8 cells per axis by default
(``f = 1/8``, ``c = 8``, ``s = 2``), whatever the input resolution ``n``.

* Keys and values of level ``ℓ`` are projections of quadrature-weighted cell means of the input
  features, ``x̄_c = Σ_{j: x_j ∈ c} ω_j x_j / ω_c`` with ``ω_c = Σ_{j: x_j ∈ c} ω_j`` (each input cell
  in the key cell containing its centre; a reshape-mean when ``n`` is a multiple of ``m_ℓ``,
  ``index_add`` otherwise). On an input coarser than a key grid (``n < m_ℓ``) a key cell takes the
  input cell containing its centre and an equal share of its weight, so ``Σ_c ω_c = Σ_j ω_j``.
  The mean is taken before the (shared, affine) K/V projections: ``W x̄ + b`` is exactly the mean
  of ``W x_j + b`` because the weights of a mean sum to one (bias included); only ``qk_norm``'s
  LayerNorm, which is not affine, is applied after pooling, to the pooled keys.
* Queries stay at the input cells ``x_i``. For level ``ℓ`` each key cell ``c`` (centre ``y_c``) enters
  the query's softmax with the window weight ``φ_ℓ(x_i, y_c)`` as a quadrature weight, scores
  ``q_i·k̄_c / sqrt(D) + log ω_c + log φ_ℓ(x_i, y_c) (+ b_h(δ))``: the discretisation of

      A_ℓ(x) = ∫ φ_ℓ(x, y) e^{s(x,y)} v_ℓ(y) dy / ∫ φ_ℓ(x, y) e^{s(x,y)} dy ,
      A_ℓ(x_i) = Σ_c φ_ℓ(x_i, y_c) ω_c e^{s_ic} v̄_c / Σ_c φ_ℓ(x_i, y_c) ω_c e^{s_ic} .

  ``φ_ℓ = Π_a φ_a`` per axis, a window of ``c`` key cells sliding with the query and clamped to the
  domain. Tapered (``window_taper="linear"``, default): with ``u = x m_ℓ - 1/2`` (the query between
  key-cell centres ``j + 1/2`` and ``j + 3/2``, ``θ = u - j``) the blend ``(1-θ) W(j) + θ W(j+1)`` of
  the clamped windows ``W(j)`` starting at ``clamp(j - c//2, 0, m_ℓ - c)``: ``c + 1`` key cells per
  axis, the two at the edges weighted ``1-θ`` and ``θ``, so a key enters and leaves the window with
  weight going continuously to 0 and the output is continuous in ``x`` (in the interior ``φ_a`` is the
  trapezoid ``clamp((c+1)/2 - |m_ℓ(x - y) - o|, 0, 1)``, ``o = 1/2`` for even ``c``, 0 for odd; near the
  boundary, where the window is clamped, it stops sliding and ``φ`` is frozen at the hard window).
  Hard (``window_taper="none"``): ``φ = 1`` on the ``Π c_a`` cells of the window of the query's key
  cell ``j``, 0 elsewhere, so the output jumps where a query crosses a key-cell edge. The coarsest
  level (one window) is global either way (``φ = 1``).

* The local term covers what lies below the finest key scale ``1/m_0``: softmax attention of each
  query over the clamped sliding window of ``local_window`` input cells per axis (3 by default,
  ``0`` disables it; quadrature-weighted keys). Its extent is ``local_window / n``, shrinking under
  refinement, so on a continuous field it converges to the pointwise value ``v(x_i)`` at first order
  in ``1/n``: the one resolution-dependent piece, and a vanishing one. It needs no taper: its queries
  sit on its key cells' centres, where the tapered window equals the hard one.
* ``out = local + Σ_ℓ γ_{ℓ,h} A_ℓ`` (all at the full-resolution queries; nothing is upsampled),
  learned per-head level weights ``γ`` initialised to 1, then ``y = W_o out`` (gated by
  ``SiLU(W_g x)`` with ``gate=True``).
* Relative-position bias (``rel_pos_bias=R``): ``b_h(δ)`` with ``δ = (x_i - x̄_c) / (c / m_ℓ)`` the
  physical displacement from the query to the key cell's centre in units of the level's window,
  read from the same learned table at every level (below).

Discretisation: for a smooth field the key cell means converge at second order and the far
fields with them; the key sets depend on the query position only, so at fixed weights the
output converges under refinement (``python -m benchmarks run multipole_scaling`` measures it).

Cost: per query ``Σ_ℓ Π c_ℓ + Π local_window`` keys with hard windows (4·64 + 9 = 265 in 2-D), with
the taper ``Π (c_ℓ + 1)`` on every level but the global one (3·81 + 64 + 9 = 316 in 2-D by default), a
fixed number: time and memory linear in the cell count (the computed halo is ``tile + c + 1`` key cells
per axis instead of ``tile + c - 1``, see below). The levels run as fused
``F.scaled_dot_product_attention`` calls over groups of queries: the queries of a tile of key cells
(one key cell when it holds 8 or more input cells per axis) attend to the tile's halo of key cells,
masked to each query's own window (``n`` a multiple of ``m_ℓ``: the groups are a reshape, otherwise
padded groups), in chunks of about ``2^20`` scores on the CPU; the keys of a level are gathered once
(``groups × halo`` cells: fixed on the key levels, about ``1.6 N`` for the local term, which runs the
same way on the input grid) and split into chunks, so the backward pass stays linear too
(:mod:`sciattn.multipole.physical`). Under ``torch.export`` the sizes ``n = K·m_0``
(``K >= 2``) make every level a reshape (the taper's per-query weights are computed from the
symbolic sizes), so one traced program takes all of them
(:meth:`MultipoleAttention.export_unit`).

Differences from the MANO paper's method (and code): queries at full resolution against every
level (MANO pools queries too and upsamples each level's output); windows that slide, clamped to
the domain (MANO: Unfold/Fold blocks that never shift, whose edges show as jumps); levels of fixed
physical size (MANO: ``log_s(image size)`` levels fixed at construction, windows in cells); a local
near-field term; quadrature-weighted keys; learned level weights ``γ`` (MANO: ``1/(j+1)``).

The input pyramid (``pyramid="input"``, resolution-dependent)
-------------------------------------------------------------
The earlier behaviour, kept for explicit cell windows and stored configurations: ``window=w``
(cells) selects it (``pyramid`` defaults to ``"input"`` then), and ``pyramid="input"`` with
``window_fraction`` (with or without ``coarse_cells``) gives the earlier fraction modes exactly.
With windows in cells the number of levels grows with the grid, so the layer depends on the
resolution; the fraction modes keep level 0 at the input resolution, where a window holds ``f·n``
cells per axis, so the cost per query grows with ``n`` (time exponent about 1.46 in 2-D).

Level 0 is the input grid ``n``. Level ``ℓ+1`` pools level ``ℓ`` by the factor ``s`` per axis,
``n_{ℓ+1} = ceil(n_ℓ / s)``: a coarse cell holds the quadrature-weighted mean of its real
children, ``x_c = Σ_{j∈c} ω_j x_j / Σ_{j∈c} ω_j``, and their total weight ``ω_c = Σ_{j∈c} ω_j``
(the measure it represents; a boundary cell with fewer real children weighs less). At every
level windowed attention (:func:`window_attention`, keys weighted by ``ω``) gives ``A_ℓ``, and
the levels are combined coarse to fine,

    out_{L-1} = A_{L-1},     out_ℓ = A_ℓ + γ_{ℓ+1, h} · Up(out_{ℓ+1}),     y = W_o out_0 ,

with learned per-head level weights ``γ`` (initialised to 1, i.e. near field plus far field).
Optionally (``gate=True``) the combined field is gated by the query point's own features,
``y = W_o (SiLU(W_g x) ⊙ out_0)``: a product of a local feature and an aggregate over the
window hierarchy, which plain softmax attention (a convex combination of values) cannot form.

With ``qk_norm=True`` queries and keys are layer-normalised over the head dimension before the
scores, ``s_ij = LN_q(q_i)·LN_k(k_j)/sqrt(D)`` (one LayerNorm pair per layer, shared by heads and
levels): the score scale no longer drifts with the size of the features, so attention is
sharper at initialisation and its temperature is learned through the LayerNorm gains.

Relative-position bias (``rel_pos_bias=R``): inside every window the score of the pair
``(i, j)`` gains ``b_h(δ)``, ``δ = (x_i - x_j) / w`` the displacement in units of the window
(per axis, ``|δ_a| < 1``), read by multilinear interpolation from a learned per-head table on the
nodes ``δ_a ∈ {-1, -(R-1)/R, …, 1}``. It is the same at every level (the levels are self-similar
in window units) and depends only on the physical displacement relative to the window, so a model
trained with ``window_fraction`` sees the same bias at any resolution; with ``R`` equal to the
window in cells at the training resolution the training displacements fall exactly on nodes.
The table starts at zero, i.e. as plain attention.

Design choices:

* **Levels at run time.** Pooling continues until the coarsest level fits in one window, so
  every cell sees the whole domain in one layer at any resolution (``max_levels`` caps it).
* **Any size.** No cropping of the input: windows and pooling blocks pad internally with a
  validity mask, padded cells never act as keys nor enter a pooled mean, outputs are cropped.
* **Physical windows.** ``window_fraction=f`` gives ``round(f·n_a)`` cells (at least 1) on
  axis ``a`` of the input grid; the same number of cells is used at every level, so level ``ℓ``
  covers ``f·s^ℓ`` of the domain whatever the resolution, and the number of levels is then
  resolution-invariant. ``window`` (cells) instead keeps the cell count fixed and adds one level
  per refinement by ``s``.
* **Fixed coarse levels** (``coarse_cells=c``, with ``window_fraction``). By default the coarse
  levels keep the input's cell count per window, so their cells shrink as the input is refined:
  a pooled key at level 1 averages ``s^d`` input cells, i.e. a smaller area on a finer grid, and
  since softmax is non-linear in the keys (``e^{q·k̄} ≠ mean e^{q·k}``) the far field a model
  learnt at one resolution changes at another. With ``coarse_cells`` level ``ℓ >= 1`` is instead
  the grid with ``c`` cells per window, ``n_ℓ = round(c / (f s^ℓ))`` per axis (capped by
  ``ceil(n_{ℓ-1}/s)`` on coarse inputs), reached by quadrature-weighted block means of the level
  above (adaptive bins where the ratio is not ``s``): its cells are a fixed fraction of the
  domain, so only level 0 (a quadrature over a fixed physical window) depends on the input
  resolution. At the resolution ``n = c / f`` the two pyramids coincide. Needs ``pool="avg"`` and
  a ``nearest`` or ``linear`` unpool (the learned resamplers assume the factor ``s``).
* **Shared projections.** One Q/K/V projection serves every level (as in MANO), so the layer
  runs with any number of levels; levels are told apart by ``γ`` and by their pooled inputs.
  ``γ`` has ``max_levels - 1`` rows (15 by default); deeper levels reuse the last row.
* ``pool="conv"`` is a strided convolution applied to the mask- and weight-normalised input;
  it is initialised to the average, and ``unpool="transposed"`` to nearest, so every variant
  starts as the plain multipole average. ``unpool="linear"`` is cell-centred multilinear.

Differences from the MANO code: levels not fixed from an image size, non-power sizes work, the
``1/(j+1)`` damping of coarse levels is learned, and keys carry quadrature weights.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import (
    check_choice,
    check_dim,
    check_finite,
    check_input_dtype,
    check_positive_int,
    check_quadrature_weights,
    check_rank,
    check_tensor,
)
from .functional import _pad_spatial, normalize_window, window_attention
from .physical import level_attention, local_attention, physical_levels, pool_to_grid

__all__ = ["MultipoleAttention"]

POOLS = ("avg", "conv")
PYRAMIDS = ("physical", "input")
WINDOW_TAPERS = ("linear", "none")
UNPOOLS = ("nearest", "linear", "transposed")
_LINEAR_MODES = {1: "linear", 2: "bilinear", 3: "trilinear"}
_DEFAULT_LEVEL_CAPACITY = 16


class MultipoleAttention(nn.Module):
    """Multi-head multipole (multiscale windowed) softmax attention on a 1-, 2- or 3-D grid.

    The default is the physical pyramid (module docstring): discretisation-convergent, linear cost.

    Args:
        dim: channels ``C`` (divisible by ``n_heads``).
        n_heads: heads ``H``.
        spatial_dims: ``d`` in 1..3.
        window: window size in cells (int or ``d`` ints): selects the input pyramid (resolution-dependent);
            with ``pyramid="input"`` default 8 if neither it nor ``window_fraction`` is given.
        window_fraction: window as a fraction of the domain per axis (float or ``d`` floats
            in (0, 1]), converted to ``max(1, round(f·n))`` cells of the input grid.
        pool_factor: ``s >= 2``, pooling factor per axis between levels.
        pool: ``"avg"`` (masked, quadrature-weighted mean) or ``"conv"`` (strided conv).
        unpool: ``"nearest"``, ``"linear"`` or ``"transposed"`` (transposed conv).
        max_levels: cap on the number of levels (``None``: as many as a global receptive field needs).
        coarse_cells: cells per window on the coarse levels (int or ``d`` ints), which then have
            a fixed physical resolution (the physical pyramid above); needs ``window_fraction``.
            Set it to the window in cells at the training resolution. ``None``: as many cells
            as the input level's window.
        rel_pos_bias: ``R >= 1`` adds the learned relative-position bias (table of ``2R+1`` nodes
            per axis and head); ``0`` (default) leaves the scores unbiased.
        gate: multiply the combined attention field by ``SiLU(W_g x)`` before the output projection.
        qk_norm: layer-normalise queries and keys over the head dimension.
        backend: force a windowed-attention backend (input pyramid; the physical pyramid always runs
            fused SDPA).
        local_window: physical pyramid only: cells per axis (int or ``d`` ints) of the local near-field
            window on the input grid; ``None``: 3; ``0``: no local term.
        pyramid: ``"physical"`` (the default unless ``window`` is given: key grids of fixed physical
            size, ``window_fraction`` default ``1/8`` and ``coarse_cells`` default 8, see the module
            docstring) or ``"input"`` (the earlier levels pooled from the input grid: ``window`` in
            cells, default 8, or ``window_fraction`` with optional ``coarse_cells``).
        window_taper: physical pyramid only: ``"linear"`` (``None``, the default: tapered windows, a key
            enters and leaves a query's window with weight going continuously to 0, see the module
            docstring) or ``"none"`` (hard windows: the layer before 2026-12-02's taper, whose output
            jumps where a query crosses a key-cell edge).

    Shapes:
        x: ``(B, C, *n)``; weights: ``(*n)`` or ``(B, *n)`` quadrature weights (uniform if None);
        returns ``(B, C, *n)``.
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        spatial_dims: int = 2,
        *,
        window: int | Sequence[int] | None = None,
        window_fraction: float | Sequence[float] | None = None,
        pool_factor: int = 2,
        pool: str = "avg",
        unpool: str = "nearest",
        max_levels: int | None = None,
        coarse_cells: int | Sequence[int] | None = None,
        rel_pos_bias: int = 0,
        gate: bool = False,
        qk_norm: bool = False,
        backend: str | None = None,
        local_window: int | Sequence[int] | None = None,
        pyramid: str | None = None,
        window_taper: str | None = None,
    ) -> None:
        super().__init__()
        check_positive_int("dim", dim)
        check_positive_int("n_heads", n_heads)
        if dim % n_heads:
            raise ValueError(f"n_heads: expected a divisor of dim={dim}, got {n_heads}")
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        check_positive_int("pool_factor", pool_factor)
        if pool_factor < 2:
            raise ValueError(f"pool_factor: expected an int >= 2, got {pool_factor}")
        check_choice("pool", pool, POOLS)
        check_choice("unpool", unpool, UNPOOLS)
        if max_levels is not None:
            check_positive_int("max_levels", max_levels)
        if isinstance(rel_pos_bias, bool) or not isinstance(rel_pos_bias, int) or rel_pos_bias < 0:
            raise ValueError(f"rel_pos_bias: expected an int >= 0 (0 = off), got {rel_pos_bias!r}")
        for name, flag in (("gate", gate), ("qk_norm", qk_norm)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name}: expected a bool, got {type(flag).__name__}")
        d = spatial_dims
        if pyramid is None:
            pyramid = "input" if window is not None else "physical"
        check_choice("pyramid", pyramid, PYRAMIDS)
        if pyramid == "physical":
            if window is not None:
                raise ValueError(f"window: expected None with pyramid='physical' (windows are window_fraction of the "
                                 f"domain there; window in cells needs pyramid='input'), got window={window!r}")
            if pool != "avg" or unpool != "nearest":
                raise ValueError(f"pool: expected pool='avg' and unpool='nearest' with pyramid='physical' (keys are "
                                 f"cell means, queries stay at full resolution: nothing is upsampled), got "
                                 f"pool={pool!r}, unpool={unpool!r}")
        elif local_window not in (None, 0):
            raise ValueError(f"local_window: expected None or 0 with pyramid='input' (the local term belongs to the "
                             f"physical pyramid), got {local_window!r}")
        self.pyramid = pyramid
        if window_taper is not None:
            check_choice("window_taper", window_taper, WINDOW_TAPERS)
            if pyramid != "physical" and window_taper != "none":
                raise ValueError(f"window_taper: expected None or 'none' with pyramid='input' (the taper belongs to "
                                 f"the physical pyramid), got {window_taper!r}")
        self.window_taper = (window_taper or "linear") if pyramid == "physical" else "none"
        if window is not None and window_fraction is not None:
            raise ValueError(
                f"window_fraction: expected None when window is given, got window={window!r}, "
                f"window_fraction={window_fraction!r}"
            )
        if window_fraction is not None:
            fr = (window_fraction,) * d if isinstance(window_fraction, (int, float)) else tuple(window_fraction)
            if len(fr) != d or not all(isinstance(f, (int, float)) and 0 < f <= 1 for f in fr):
                raise ValueError(f"window_fraction: expected a float or {d} floats in (0, 1], got {window_fraction!r}")
            self.window_fraction: tuple[float, ...] | None = tuple(float(f) for f in fr)
            self.window = None
        else:
            self.window = normalize_window(8 if window is None else window, d)
            self.window_fraction = None
        self.coarse_cells: tuple[int, ...] | None = None
        self.local_window: tuple[int, ...] | None = None
        if pyramid == "physical":
            fr = 0.125 if window_fraction is None else window_fraction
            fr = (fr,) * d if isinstance(fr, (int, float)) else tuple(fr)
            if len(fr) != d or not all(isinstance(f, (int, float)) and 0 < f <= 1 for f in fr):
                raise ValueError(f"window_fraction: expected a float or {d} floats in (0, 1], got {window_fraction!r}")
            self.window_fraction, self.window = tuple(float(f) for f in fr), None
            self.coarse_cells = normalize_window(8 if coarse_cells is None else coarse_cells, d, "coarse_cells")
            lw = 3 if local_window is None else local_window
            if not (isinstance(lw, int) and not isinstance(lw, bool) and lw == 0):
                self.local_window = normalize_window(lw, d, "local_window")
            self.levels = physical_levels(self.window_fraction, self.coarse_cells, pool_factor, max_levels)
            coarse_cells = None  # handled
        elif coarse_cells is not None:
            if self.window_fraction is None:
                raise ValueError(f"coarse_cells: expected None unless window_fraction is given (a physical pyramid "
                                 f"needs physical windows), got coarse_cells={coarse_cells!r} with window={self.window}")
            if pool != "avg" or unpool not in ("nearest", "linear"):
                raise ValueError(f"coarse_cells: expected pool='avg' and unpool 'nearest' or 'linear' (the learned "
                                 f"resamplers assume the factor pool_factor), got pool={pool!r}, unpool={unpool!r}")
            self.coarse_cells = normalize_window(coarse_cells, d, "coarse_cells")
        self.dim, self.n_heads, self.spatial_dims = dim, n_heads, d
        self.head_dim = dim // n_heads
        self.pool_factor, self.pool, self.unpool = pool_factor, pool, unpool
        self.max_levels, self.backend = max_levels, backend
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        rows = (max_levels if max_levels is not None else _DEFAULT_LEVEL_CAPACITY) - 1
        if pyramid == "physical":  # one weight per key level (the level count does not depend on the input)
            rows = len(self.levels)
        self.level_weight = nn.Parameter(torch.ones(rows, n_heads))
        self.rel_pos_bias, self.gate = rel_pos_bias, gate
        # (H, 2R+1, ..., 2R+1): bias on the displacement nodes δ_a = r / R, r = -R..R.
        self.rel_bias_table = (nn.Parameter(torch.zeros(n_heads, *(2 * rel_pos_bias + 1,) * d))
                               if rel_pos_bias else None)
        self.gate_proj = nn.Linear(dim, dim) if gate else None
        self.qk_norm = qk_norm
        self.q_norm = nn.LayerNorm(self.head_dim) if qk_norm else None
        self.k_norm = nn.LayerNorm(self.head_dim) if qk_norm else None
        s = pool_factor
        self.down = getattr(nn, f"Conv{d}d")(dim, dim, s, stride=s, bias=False) if pool == "conv" else None
        self.up = getattr(nn, f"ConvTranspose{d}d")(dim, dim, s, stride=s, bias=False) if unpool == "transposed" else None
        self.reset_resampling()

    def reset_resampling(self) -> None:
        """Initialise the learned pooling to the average and the transposed conv to nearest."""
        eye = torch.eye(self.dim)[(...,) + (None,) * self.spatial_dims]
        with torch.no_grad():
            if self.down is not None:
                self.down.weight.copy_(eye.expand_as(self.down.weight) / self.pool_factor**self.spatial_dims)
            if self.up is not None:
                self.up.weight.copy_(eye.expand_as(self.up.weight))

    # ----------------------------------------------------------------------------- planning
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

    # ----------------------------------------------------------------------------- pieces
    def _pool(self, x: torch.Tensor, w: torch.Tensor, exact: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Weighted mean pooling with padding: ``x (B, C, *n)``, ``w (B, *n)`` -> coarse both. ``exact``: the
        sizes are multiples of the factor (symbolic sizes under :meth:`export_unit`), no padding."""
        d, s = self.spatial_dims, self.pool_factor
        pads = [0] * d if exact else [(-n) % s for n in x.shape[2:]]
        x = _pad_spatial(x, pads, 0)
        w = _pad_spatial(w, pads, 0).unsqueeze(1)  # padded cells weigh 0
        avg = getattr(F, f"avg_pool{d}d")
        total = avg(w, s) * s**d  # (B, 1, *m): coarse weights
        spread = total
        for a in range(d):
            spread = spread.repeat_interleave(s, dim=2 + a)
        ratio = torch.where(spread > 0, w * s**d / torch.where(spread > 0, spread, 1.0), 0.0)
        x = x * ratio  # a plain block mean/conv of this is the weighted mean over real children
        pooled = avg(x, s) if self.down is None else self.down(x)
        return pooled, total[:, 0]

    def _pool_to(self, x: torch.Tensor, w: torch.Tensor, shape: Sequence[int],
                 exact: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Weighted mean pooling onto the grid ``shape`` (any ratio: adaptive bins), ``x (B, C, *n)``,
        ``w (B, *n)`` -> ``(B, C, *shape)`` means and ``(B, *shape)`` weights; the ratio ``s`` goes
        through :meth:`_pool` (padding, exact blocks). ``exact``: symbolic sizes that are multiples of ``shape``
        (torch.export, ``coarse_cells``), always adaptive bins, each ``n // m`` cells."""
        if not exact and all(m == -(-n // self.pool_factor) for m, n in zip(shape, x.shape[2:])):
            return self._pool(x, w)
        pool = getattr(F, f"adaptive_avg_pool{self.spatial_dims}d")
        w = w.unsqueeze(1)
        den = pool(w, tuple(shape))
        num = pool(x * w, tuple(shape))
        mean = torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 0.0)
        cells = math.prod((n // m if exact else n / m) for n, m in zip(x.shape[2:], shape))  # fine cells per coarse cell
        return mean, den[:, 0] * cells

    def _upsample(self, r: torch.Tensor, shape: Sequence[int], exact: bool = False,
                  physical: bool = False) -> torch.Tensor:
        """``r`` onto the finer grid ``shape``; ``exact``: ``shape`` is ``s`` times ``r``'s (symbolic sizes);
        ``physical``: any ratio, interpolated (symbolic sizes onto a fixed coarse level)."""
        s = self.pool_factor
        if physical or not exact and any(-(-n // s) != m for n, m in zip(shape, r.shape[2:])):  # physical pyramid, ratio not s
            mode = "nearest" if self.unpool == "nearest" else _LINEAR_MODES[self.spatial_dims]
            kwargs = {} if mode == "nearest" else {"align_corners": False}
            return F.interpolate(r, size=tuple(shape), mode=mode, **kwargs)
        if self.unpool == "nearest":
            up = r
            for a in range(self.spatial_dims):
                up = up.repeat_interleave(s, dim=2 + a)
        elif self.unpool == "linear":
            up = F.interpolate(r, scale_factor=s, mode=_LINEAR_MODES[self.spatial_dims], align_corners=False)
        else:
            up = self.up(r)
        return up if exact else up[(slice(None), slice(None)) + tuple(slice(0, n) for n in shape)]

    def relative_bias(self, window: Sequence[int]) -> torch.Tensor | None:
        """Score bias ``(H, P, P)`` of a window of ``window`` cells (``P`` = their product, cells in
        C order), ``b_h((x_i - x_j) / w)`` interpolated multilinearly from the table; ``None`` if off."""
        if self.rel_bias_table is None:
            return None
        table, r = self.rel_bias_table, self.rel_pos_bias
        d, dev = self.spatial_dims, table.device
        cells = torch.stack(torch.meshgrid(*[torch.arange(w, device=dev) for w in window], indexing="ij"), -1)
        cells = cells.reshape(-1, d)
        size = (torch.tensor(window, dtype=table.dtype, device=dev) if all(isinstance(w, int) for w in window)
                else torch.stack([torch.full((), w, dtype=table.dtype, device=dev) for w in window]))  # symbolic
        node = ((cells[:, None, :] - cells[None, :, :]).to(table.dtype) / size + 1) * r  # (P, P, d) in [0, 2R]
        low = node.floor().clamp(0, 2 * r - 1)
        frac = node - low
        low = low.long()
        strides = torch.tensor([(2 * r + 1) ** (d - 1 - a) for a in range(d)], device=dev)
        flat = table.flatten(1)  # (H, (2R+1)^d)
        bias = torch.zeros(table.shape[0], *node.shape[:2], dtype=table.dtype, device=dev)
        for corner in itertools.product((0, 1), repeat=d):
            c = torch.tensor(corner, device=dev)
            weight = torch.where(c.bool(), frac, 1 - frac).prod(-1)  # (P, P)
            bias = bias + weight * flat[:, ((low + c) * strides).sum(-1)]
        return bias

    def _attend(self, x: torch.Tensor, w: torch.Tensor | None, window: tuple[int, ...],
                bias: torch.Tensor | None, tiles: tuple[int, ...] | None = None) -> torch.Tensor:
        """Project ``x (B, C, *n)`` to heads, attend in windows, return ``(B, C, *n)`` head-major.

        ``tiles`` (symbolic sizes, windows growing with the grid): ``n = tiles · window`` per axis; the
        windows are folded into the batch and each attended as one whole grid, so no size is divided
        by a symbolic window (which torch.export cannot simplify)."""
        b, _, *grid = x.shape
        t = self.qkv(x.movedim(1, -1)).unflatten(-1, (3, self.n_heads, self.head_dim))
        q, k, v = (t.select(-3, i).movedim(-2, 1) for i in range(3))  # (B, H, *n, Dh)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if tiles is None or all(n == 1 for n in tiles):
            z = window_attention(q, k, v, window, weights=w, bias=bias, backend=self.backend, validate=False)
            return z.movedim(-1, 2).reshape(b, self.dim, *grid)
        d, count = self.spatial_dims, math.prod(tiles)
        split = [n for pair in zip(tiles, window) for n in pair]
        order = [2 + 2 * a for a in range(d)] + [1] + [3 + 2 * a for a in range(d)] + [2 + 2 * d]

        def fold(u):  # (B, H, *n, E) -> (B·T, H, *window, E)
            u = u.reshape(b, u.shape[1], *split, u.shape[-1]).permute(0, *order)
            return u.reshape(b * count, u.shape[1 + d], *window, u.shape[-1])

        if w is not None:
            w = fold(w.expand(b, *grid)[:, None, ..., None])[:, 0, ..., 0]
        z = window_attention(fold(q), fold(k), fold(v), window, weights=w, bias=bias, backend=self.backend,
                             validate=False)
        z = z.reshape(b, *tiles, self.n_heads, *window, z.shape[-1])
        z = z.permute(0, d + 1, *[i for a in range(d) for i in (1 + a, d + 2 + a)], 2 * d + 2)
        return z.reshape(b, self.n_heads, *grid, self.head_dim).movedim(-1, 2).reshape(b, self.dim, *grid)

    # ----------------------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor, weights: torch.Tensor | None = None, *, validate: bool = True) -> torch.Tensor:
        """``validate=False`` skips the value checks (finite ``x``, finite non-negative ``weights``;
        each a full pass and, on an accelerator, a host sync), for callers that checked them once
        for a stack of layers. Shapes are always checked."""
        d = self.spatial_dims
        check_rank("x", x, 2 + d, f"(B, C, {d} spatial axes)")
        check_dim("x", x, 1, self.dim, "channels")
        check_input_dtype("x", x, self)
        b, grid = x.shape[0], tuple(x.shape[2:])
        if validate:
            check_finite("x", x)
        if weights is not None:
            check_tensor("weights", weights)
            if tuple(weights.shape) not in (grid, (b, *grid)):
                raise ValueError(f"weights: expected shape {grid} or {(b, *grid)} matching x, got {tuple(weights.shape)}")
            if validate:
                check_finite("weights", weights)  # "NaN"/"Inf" counts, then the package's weight policy
                check_quadrature_weights("weights", weights)
        if self.pyramid == "physical":
            return self._forward_physical(x, weights)
        unit = None if all(isinstance(n, int) for n in grid) else self.export_unit()
        if unit is None:
            levels, tiles = self.plan(grid), None
        else:  # symbolic sizes (torch.export), multiples of the unit: its pyramid scaled (see export_unit)
            levels = self.plan(unit if self.coarse_cells is None else self.export_min_size())
            tiles = ([tuple(g // w for g, w in zip(*level)) for level in levels] if self.window_fraction is not None
                     else None)  # windows grow with the grid: a fixed number of windows per axis
            if self.coarse_cells is not None:  # levels >= 1 have fixed sizes: concrete, as in eager mode
                tiles = tiles[:1] + [None] * (len(levels) - 1)
        coarse = unit is not None and self.coarse_cells is not None
        outs = []
        biases: dict[tuple[str, ...], torch.Tensor | None] = {}  # one per distinct window, shared by levels
        feats, w = x, weights
        for i, (_, window) in enumerate(levels):
            if i > 0:
                if w is None:
                    w = torch.ones((b, *feats.shape[2:]), dtype=x.dtype, device=x.device)
                w = w.to(x.dtype).expand(b, *feats.shape[2:])
                if coarse:  # symbolic input level onto fixed level 1 (exact bins), then fixed sizes as in eager mode
                    feats, w = self._pool_to(feats, w, levels[i][0], exact=i == 1)
                elif unit is not None:
                    feats, w = self._pool(feats, w, exact=True)
                else:
                    feats, w = self._pool_to(feats, w, levels[i][0])
            if tiles is not None and tiles[i] is not None:
                window = tuple(n // t for n, t in zip(feats.shape[2:], tiles[i]))
            key = tuple(map(str, window))  # a symbolic size (torch.export) is not hashable
            if key not in biases:
                biases[key] = self.relative_bias(window)
            outs.append(self._attend(feats, w, window, biases[key], None if tiles is None else tiles[i]))
        r = outs[-1]
        rows = self.level_weight.shape[0]
        for i in range(len(levels) - 1, 0, -1):
            gamma = self.level_weight[min(i, rows) - 1].repeat_interleave(self.head_dim)
            if coarse:
                up = (self._upsample(r, outs[0].shape[2:], physical=True) if i == 1 else
                      self._upsample(r, levels[i - 1][0]))
            else:
                up = (self._upsample(r, levels[i - 1][0]) if unit is None else
                      self._upsample(r, outs[i - 1].shape[2:], exact=True))
            r = outs[i - 1] + up * gamma.to(r.dtype).reshape(1, -1, *(1,) * d)
        r = r.movedim(1, -1)
        if self.gate_proj is not None:
            r = F.silu(self.gate_proj(x.movedim(1, -1))) * r
        return self.out_proj(r).movedim(-1, 1)

    def _table_bias(self, deltas: list[torch.Tensor]) -> torch.Tensor:
        """``b_h(δ)`` from the relative-position table, multilinear in ``δ`` (per-axis displacements in window
        units, broadcasting to ``(Mc, G_1..G_d, P_1..P_d)``); returns ``(H, Mc, G, P)``."""
        table, r, d = self.rel_bias_table, self.rel_pos_bias, self.spatial_dims
        flat = table.flatten(1)
        nodes = [((dl + 1) * r).clamp(0, 2 * r) for dl in deltas]
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

    def _forward_physical(self, x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        """``pyramid="physical"`` (class docstring): ``y = W_o (local + Σ_ℓ γ_ℓ A_ℓ)``."""
        b, grid = x.shape[0], tuple(x.shape[2:])
        h, dh = self.n_heads, self.head_dim
        w = (torch.ones((), dtype=x.dtype, device=x.device) if weights is None else weights.to(x.dtype))
        w = w.expand(b, *grid).contiguous()  # (B, *n) materialised: reshapes of an expanded tensor guard on B
        xl = x.movedim(1, -1)
        qw, kw, vw = self.qkv.weight.split(self.dim)
        qb, kb, vb = self.qkv.bias.split(self.dim)

        def heads(t):  # (B, *n, C) -> (B, *n, H, Dh), channels last
            return t.unflatten(-1, (h, dh))

        q = heads(F.linear(xl, qw, qb))
        if self.q_norm is not None:
            q = self.q_norm(q)
        scale = 1.0 / math.sqrt(dh)
        neg = torch.full((), -math.inf, dtype=x.dtype, device=x.device)
        out = torch.zeros((), dtype=x.dtype, device=x.device)
        if self.local_window is not None:
            k, v = heads(F.linear(xl, kw, kb)), heads(F.linear(xl, vw, vb))
            if self.k_norm is not None:
                k = self.k_norm(k)
            logw = torch.where(w > 0, torch.log(torch.where(w > 0, w, 1.0)), neg)
            out = local_attention(q, k, v, logw, self.local_window, scale)
        bias = self._table_bias if self.rel_bias_table is not None else None
        prev = None  # (grid, means, weights) of the level above, when it nests exactly on the input
        for i, (m, c) in enumerate(self.levels):
            if prev is not None and all(a % b == 0 for a, b in zip(prev[0], m)):
                xm, wm = pool_to_grid(prev[1], prev[2], m)  # a weighted mean of weighted means: the same means
            else:
                xm, wm = pool_to_grid(x, w, m)  # means then projection: exact (the weighted mean is affine)
            nested = all(not isinstance(n, int) or n % a == 0 for n, a in zip(grid, m))
            prev = (m, xm, wm) if nested else None
            xm = xm.movedim(1, -1)
            k, v = heads(F.linear(xm, kw, kb)), heads(F.linear(xm, vw, vb))
            if self.k_norm is not None:
                k = self.k_norm(k)
            logw = torch.where(wm > 0, torch.log(torch.where(wm > 0, wm, 1.0)), neg)
            a = level_attention(q, k, v, logw, c, scale, bias, taper=self.window_taper == "linear")
            out = torch.addcmul(out, a, self.level_weight[i].to(a.dtype).view(h, 1))
        r = out.flatten(-2)  # (B, *n, C) head-major
        if self.gate_proj is not None:
            r = F.silu(self.gate_proj(xl)) * r
        return self.out_proj(r).movedim(-1, 1)

    def extra_repr(self) -> str:
        win = f"window={self.window}" if self.window is not None else f"window_fraction={self.window_fraction}"
        if self.pyramid == "physical":
            win += f", local_window={self.local_window}, window_taper={self.window_taper!r}"
        return (f"dim={self.dim}, n_heads={self.n_heads}, spatial_dims={self.spatial_dims}, pyramid={self.pyramid!r}, "
                f"{win}, "
                f"pool_factor={self.pool_factor}, pool={self.pool!r}, unpool={self.unpool!r}, "
                f"max_levels={self.max_levels}, coarse_cells={self.coarse_cells}, "
                f"rel_pos_bias={self.rel_pos_bias}, gate={self.gate}, "
                f"qk_norm={self.qk_norm}")
