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
fixed number: time and memory linear in the cell count. Every level and the local term is a *box attention*
(:mod:`sciattn.multipole.box_attention`): each query attends to the box of key cells its windows can weigh,
with per-axis window weights from tables cached per grid (:mod:`sciattn.multipole.geometry`). On the CPU
(float32/float64) the boxes run through fused C++ kernels (queries in the vector lanes for boxes that slide with
the query, keys in the lanes for boxes shared by runs of queries; built on first use; the relative-position bias
included, :mod:`sciattn.multipole.relative_bias`); elsewhere and under ``torch.compile`` / ``torch.export``, through fused
``F.scaled_dot_product_attention`` over groups of queries against a halo of key cells masked to each query's
window (:mod:`sciattn.multipole.physical`), or flex attention with ``backend="flex"``. The forward is channels
first (the projections are matrix products on ``(B, C, N)``), and at inference each level is added into the
output in place. Without the bias, the kernels fold a level finer than the input onto the input grid (its key cells only repeat
input cells: :mod:`sciattn.multipole.geometry`; at 32² the 64-cell level's 9 × 9 keys become 5 × 5), and the local
term and the levels on the input grid share one key projection. Under ``torch.export`` the sizes ``n = K·m_0``
(``K >= 2``) make every level a reshape (the taper's per-query weights are computed from the symbolic sizes), so one
traced program takes all of them (:meth:`MultipoleAttention.export_unit`).

Differences from the MANO paper's method (and code): queries at full resolution against every
level (MANO pools queries too and upsamples each level's output); windows that slide, clamped to
the domain (MANO: Unfold/Fold blocks that never shift, whose edges show as jumps); levels of fixed
physical size (MANO: ``log_s(image size)`` levels fixed at construction, windows in cells); a local
near-field term; quadrature-weighted keys; learned level weights ``γ`` (MANO: ``1/(j+1)``).

The input pyramid (``pyramid="input"``, ``window`` in cells, resolution-dependent) is kept for explicit cell
windows and stored configurations: :mod:`sciattn.multipole.input_pyramid`. Settings and defaults:
:mod:`sciattn.multipole.spec`; the fused CPU kernels: :mod:`sciattn.multipole.box_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import (
    check_dim,
    check_finite,
    check_heads,
    check_input_dtype,
    check_quadrature_weights,
    check_rank,
    check_tensor,
)
from .box_attention import accumulate_box_attention, box_attention, box_attention_backend, local_box_attention
from .input_pyramid import InputPyramid
from .physical import pool_to_grid
from .relative_bias import RelativePositionBias
from .spec import POOLS, PYRAMIDS, UNPOOLS, WINDOW_TAPERS, MultipoleSpec

__all__ = ["MultipoleAttention"]

_DEFAULT_LEVEL_CAPACITY = 16
_ = (POOLS, PYRAMIDS, UNPOOLS, WINDOW_TAPERS)  # re-exported for callers that imported them from here


class MultipoleAttention(InputPyramid, nn.Module):
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
        backend: force a windowed-attention backend (input pyramid); for the physical pyramid ``"flex"`` (flex
            attention, the GPU path) or ``"sdpa"`` forces its box attention's backend, and ``None`` takes the fused
            CPU kernels where they apply, SDPA elsewhere (:mod:`sciattn.multipole.box_attention`).
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
        spec: MultipoleSpec | None = None,
    ) -> None:
        super().__init__()
        check_heads("dim", dim, n_heads)
        if isinstance(rel_pos_bias, bool) or not isinstance(rel_pos_bias, int) or rel_pos_bias < 0:
            raise ValueError(f"rel_pos_bias: expected an int >= 0 (0 = off), got {rel_pos_bias!r}")
        for name, flag in (("gate", gate), ("qk_norm", qk_norm)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name}: expected a bool, got {type(flag).__name__}")
        if spec is None:
            spec = MultipoleSpec.resolve(spatial_dims, window=window, window_fraction=window_fraction,
                                         pool_factor=pool_factor, pool=pool, unpool=unpool, max_levels=max_levels,
                                         coarse_cells=coarse_cells, local_window=local_window, pyramid=pyramid,
                                         window_taper=window_taper)
        elif spec.spatial_dims != spatial_dims:
            raise ValueError(f"spec: expected a spec for spatial_dims={spatial_dims}, got one for {spec.spatial_dims}")
        self.spec = spec
        d = spatial_dims
        self.dim, self.n_heads, self.spatial_dims = dim, n_heads, d
        self.head_dim = dim // n_heads
        self.backend = backend
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        rows = (spec.max_levels if spec.max_levels is not None else _DEFAULT_LEVEL_CAPACITY) - 1
        if spec.pyramid == "physical":  # one weight per key level (the level count does not depend on the input)
            rows = len(spec.levels)
        self.level_weight = nn.Parameter(torch.ones(rows, n_heads))
        self.rel_pos_bias, self.gate = rel_pos_bias, gate
        # (H, 2R+1, ..., 2R+1): bias on the displacement nodes δ_a = r / R, r = -R..R.
        self.rel_bias_table = (nn.Parameter(torch.zeros(n_heads, *(2 * rel_pos_bias + 1,) * d))
                               if rel_pos_bias else None)
        self.gate_proj = nn.Linear(dim, dim) if gate else None
        self.qk_norm = qk_norm
        self.q_norm = nn.LayerNorm(self.head_dim) if qk_norm else None
        self.k_norm = nn.LayerNorm(self.head_dim) if qk_norm else None
        s = spec.pool_factor
        self.down = getattr(nn, f"Conv{d}d")(dim, dim, s, stride=s, bias=False) if spec.pool == "conv" else None
        self.up = (getattr(nn, f"ConvTranspose{d}d")(dim, dim, s, stride=s, bias=False)
                   if spec.unpool == "transposed" else None)
        self.reset_resampling()

    # the spec's settings, read by the pieces of both pyramids
    pyramid = property(lambda self: self.spec.pyramid)
    window = property(lambda self: self.spec.window)
    window_fraction = property(lambda self: self.spec.window_fraction)
    coarse_cells = property(lambda self: self.spec.coarse_cells)
    local_window = property(lambda self: self.spec.local_window)
    window_taper = property(lambda self: self.spec.window_taper)
    pool_factor = property(lambda self: self.spec.pool_factor)
    pool = property(lambda self: self.spec.pool)
    unpool = property(lambda self: self.spec.unpool)
    max_levels = property(lambda self: self.spec.max_levels)
    levels = property(lambda self: list(self.spec.levels) if self.spec.levels is not None else None)

    def reset_resampling(self) -> None:
        """Initialise the learned pooling to the average and the transposed conv to nearest."""
        eye = torch.eye(self.dim)[(...,) + (None,) * self.spatial_dims]
        with torch.no_grad():
            if self.down is not None:
                self.down.weight.copy_(eye.expand_as(self.down.weight) / self.pool_factor**self.spatial_dims)
            if self.up is not None:
                self.up.weight.copy_(eye.expand_as(self.up.weight))

    # ----------------------------------------------------------------------------- planning (the spec's)
    def window_cells(self, shape: Sequence[int]) -> tuple[int, ...]:
        """Window in cells for an input grid ``shape`` (:meth:`MultipoleSpec.window_cells`)."""
        return self.spec.window_cells(shape)

    def plan(self, shape: Sequence[int]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """``[(grid, window), ...]`` per level, finest first (:meth:`MultipoleSpec.plan`)."""
        return self.spec.plan(shape)

    def export_unit(self) -> tuple[int, ...] | None:
        """Per-axis size unit of exported programs (:meth:`MultipoleSpec.export_unit`)."""
        return self.spec.export_unit()

    def export_min_size(self) -> tuple[int, ...] | None:
        """Smallest exported size per axis (:meth:`MultipoleSpec.export_min_size`)."""
        return self.spec.export_min_size()

    def export_unit_why_not(self) -> str | None:
        """Why :meth:`export_unit` is ``None`` (:meth:`MultipoleSpec.export_unit_why_not`)."""
        return self.spec.export_unit_why_not()

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
        return self._forward_input(x, weights)

    def _box_backend(self) -> str | None:
        """The physical pyramid's backend: ``backend="flex"`` or ``"sdpa"`` forces it, anything else (the input
        pyramid's window backends) leaves the choice to :func:`~sciattn.multipole.box_attention.box_attention`."""
        return self.backend if self.backend in ("flex", "sdpa") else None

    def _forward_physical(self, x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        """``pyramid="physical"`` (class docstring): ``y = W_o (local + Σ_ℓ γ_ℓ A_ℓ)``, channels first throughout:
        the projections are matrix products on ``(B, C, N)``, whose ``(B, H, D, N)`` views are what the fused CPU
        kernels take (:mod:`sciattn.multipole.box_attention`), so nothing is transposed."""
        b, grid = x.shape[0], tuple(x.shape[2:])
        h, dh, c = self.n_heads, self.head_dim, self.dim
        w = (torch.ones((), dtype=x.dtype, device=x.device) if weights is None else weights.to(x.dtype))
        w = w.expand(b, *grid).contiguous()  # (B, *n) materialised: reshapes of an expanded tensor guard on B
        xf = x.reshape(b, c, -1)
        qw, kw, vw = self.qkv.weight.split(c)
        qb, kb, vb = self.qkv.bias.split(c)

        def project(weight, bias, feats):  # (B, C, *g) -> (B, H, D, *g): W feats + b per point
            g = feats.shape[2:]
            y = torch.baddbmm(bias[None, :, None].expand(b, c, math.prod(g)), weight[None].expand(b, c, c),
                              feats.reshape(b, c, -1))
            return y.view(b, h, dh, *g)

        def norm(t, ln):  # LayerNorm over the head channels of (B, H, D, *g)
            return t if ln is None else ln(t.movedim(2, -1)).movedim(-1, 2).contiguous()

        q = norm(project(qw, qb, xf), self.q_norm)
        scale = 1.0 / math.sqrt(dh)
        neg = torch.full((), -math.inf, dtype=x.dtype, device=x.device)
        out = torch.zeros((), dtype=x.dtype, device=x.device)
        bias = (RelativePositionBias(self.rel_bias_table, self.rel_pos_bias) if self.rel_bias_table is not None
                else None)
        # the CPU kernels fold levels finer than the input onto the input grid (sciattn.multipole.geometry)
        fold = bias is None and self._box_backend() is None and box_attention_backend(q)[0] == "cpu"
        prev = None  # (grid, means, weights) of the level above, when it nests exactly on the input
        keys = None  # (key grid, k, v, log weights) of the last grid: the local term and levels on one grid share them
        if self.local_window is not None:
            k, v = norm(project(kw, kb, xf), self.k_norm), project(vw, vb, xf)
            logw = torch.where(w > 0, torch.log(torch.where(w > 0, w, 1.0)), neg)
            out = local_box_attention(q.view(b, h, dh, *grid), k.view(b, h, dh, *grid), v.view(b, h, dh, *grid),
                                      logw, self.local_window, scale, backend=self._box_backend())
            if all(isinstance(n, int) for n in grid):  # a level on the input grid: its cell means are x itself
                keys, prev = (grid, k.view(b, h, dh, *grid), v.view(b, h, dh, *grid), logw), (grid, x, w)
        for i, (m, win) in enumerate(self.levels):
            mk = tuple(min(a, n) for a, n in zip(m, grid)) if fold else m
            if keys is None or keys[0] != mk:
                if prev is not None and all(a % b == 0 for a, b in zip(prev[0], mk)):
                    xm, wm = pool_to_grid(prev[1], prev[2], mk)  # a weighted mean of weighted means: the same means
                else:
                    xm, wm = pool_to_grid(x, w, mk)  # means then projection: exact (the weighted mean is affine)
                nested = all(not isinstance(n, int) or n % a == 0 for n, a in zip(grid, mk))
                prev = (mk, xm, wm) if nested else None
                keys = (mk, norm(project(kw, kb, xm), self.k_norm), project(vw, vb, xm),
                        torch.where(wm > 0, torch.log(torch.where(wm > 0, wm, 1.0)), neg))
            _, k, v, logw = keys
            taper = self.window_taper == "linear"
            fine = m if mk != m else None
            if (out.dim() > 0 and not out.requires_grad and self._box_backend() is None
                    and accumulate_box_attention(out, self.level_weight[i], q.view(b, h, dh, *grid), k, v, logw, win,
                                                 scale, taper, key_grid=fine, bias=bias)):
                continue  # inference: the kernel added γ_ℓ A_ℓ into out in place
            a = box_attention(q.view(b, h, dh, *grid), k, v, logw, win, scale, bias, taper=taper,
                              backend=self._box_backend(), key_grid=fine)
            out = torch.addcmul(out, a, self.level_weight[i].to(a.dtype).view(h, *(1,) * (1 + len(grid))))
        r = out.reshape(b, c, -1)  # (B, C, N) head-major
        if self.gate_proj is not None:
            gw, gb = self.gate_proj.weight, self.gate_proj.bias
            r = F.silu(torch.baddbmm(gb[None, :, None].expand_as(r), gw[None].expand(b, c, c), xf)) * r
        y = torch.baddbmm(self.out_proj.bias[None, :, None].expand_as(r), self.out_proj.weight[None].expand(b, c, c), r)
        return y.view(b, c, *grid)

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
