"""The multipole layer's input pyramid (``pyramid="input"``): levels pooled from the input grid, windows in cells.

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

from .functional import _pad_spatial, window_attention

__all__ = ["InputPyramid"]

_LINEAR_MODES = {1: "linear", 2: "bilinear", 3: "trilinear"}


class InputPyramid:
    """The input pyramid's pooling, resampling, windowed attention and forward, mixed into
    :class:`~sciattn.multipole.MultipoleAttention` (whose parameters and spec they read)."""

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

    def _forward_input(self, x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        """``pyramid=\"input\"``: levels pooled by ``pool_factor``, windowed attention per level, combined coarse to
        fine (module docstring)."""
        b, d, grid = x.shape[0], self.spatial_dims, tuple(x.shape[2:])
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
