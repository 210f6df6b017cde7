"""The extended multipole attention neural operator (``mano_extended``): MANO's architecture
(:mod:`sciattn.operators.mano`) with the options benchmarked in ``examples/configs/darcy64_mano.toml``,
every one of them in physical units, so that one configuration trains and runs at any resolution unchanged.

Architecture, for an input ``a`` on a grid with coordinates ``x``::

    h_0 = Lift([a, x])                                   stencil of physical spacing, or pointwise MLP
    h_l = h_{l-1} + MultipoleAttention(Norm(h_{l-1}))    with relative-position bias, gate, QK-norm
    h_l = h_l + FFN(Norm(h_l))                           gated GLU, or MLP
    u   = Head(Norm(h_L))                                spectral head on a fixed node grid, or MLP

What differs from the published MANO (``mano``), each setting a physical size:

* **Lift.** ``lift_stencil=k`` (odd) lifts ``W_2 GELU(Σ_o W_o [a, x](x_i + o·δ))`` over the ``k^d``
  offsets ``o ∈ {-(k-1)/2..(k-1)/2}^d``: a ``k^d`` convolution whose stencil spacing ``δ = lift_spacing`` is a
  length (a fraction of the domain), not a cell, so the lift sees the same physical neighbourhood at every
  resolution (``δ·n`` cells; samples between nodes by linear interpolation, exact when ``δ·n`` is an integer;
  zero outside the domain, as a zero-padded convolution). On a grid coarser than ``1/δ`` the taps fall between
  nodes and are interpolated. ``lift_spacing=None`` uses one cell (resolution-dependent; old checkpoints).
  ``lift_stencil=1`` is a pointwise MLP.
* **Attention** (:class:`~sciattn.multipole.MultipoleAttention`, its physical default): ``rel_pos_bias=R``, a
  learned bias over the query–key displacement in units of the level's window (a physical length),
  ``gate`` (``SiLU(W_g x)`` of the query point), ``qk_norm`` (LayerNorm of queries and keys); the coarse levels
  are the layer's grids of fixed physical size (``coarse_cells`` cells per window).
* **FFN.** ``ffn="glu"`` is ``W_2 (W_1 h ⊙ GELU(W_1' h))`` with the hidden width scaled by 2/3 (about the same
  parameters as ``"mlp"``), which multiplies channels and so combines local and aggregated features.
* **Head.** ``head="spectral"`` maps the latent field through ``head_layers`` blocks ``GELU(K h + W h)`` with
  ``K`` a truncated Fourier integral operator (``head_modes`` modes per axis, neuraloperator's
  :class:`SpectralConv`) and ``W`` pointwise, then a pointwise MLP. The Fourier coefficients are computed on a
  fixed grid of ``head_grid`` nodes per axis whatever the input grid: the latent field is sampled there
  (``resample_field``: exact restriction when the input grid is a multiple of ``head_grid``, multilinear
  interpolation otherwise, e.g. a 32² input read on the 64 nodes of the default head grid: on a band-limited
  latent field that costs 0.7% (max, relative) against the 64² output, where a nested grid is exact; see
  ``tests/operators/test_mano_extended.py``), the series is then evaluated on the input grid (``fourier_resample``). The coefficients are thus the same quadrature at every
  resolution at least as fine as ``head_grid`` (so the head adds no drift under refinement, even where the latent
  field is rough); ``head_grid=None`` uses the input grid (its DFT aliases differently on every grid).
  ``head="pointwise"`` is an MLP ``W_2 GELU(W_1 h)``.

The defaults are the benchmarked settings of ``examples/configs/darcy64_mano.toml`` (about 194k parameters);
``python -m benchmarks run mano_fidelity`` measures what each setting changes against ``mano``.

Shapes: ``x`` ``(B, C_in, *spatial)`` -> ``(B, C_out, *spatial)``; optional quadrature ``weights``
``(*spatial)`` or ``(B, *spatial)`` for the key points of every level.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

from sciattn._checks import check_choice, check_per_axis_ints, check_positive_int
from sciattn.domain import fourier_resample, resample_field
from sciattn.multipole.spec import DEFAULTS

from .multipole_operator import (
    MultipoleOperatorBase,
    _Block,
    _ChannelNorm,
    _PointwiseMLP,
    check_common,
    layer_kwargs,
)
from .registry import register_operator

__all__ = ["MANOExtended", "EXTENDED_KEYS"]

HEADS = ("pointwise", "spectral")
FFNS = ("mlp", "glu")
# The constructor keys only the extended architecture has (a stored "mano" config holding one of them was
# written before the split: MANO.renamed_to has it rebuilt as mano_extended).
EXTENDED_KEYS = ("lift_stencil", "lift_spacing", "rel_pos_bias", "gate", "qk_norm", "ffn", "head", "head_width",
                 "head_modes", "head_layers", "head_grid")


class _PointwiseGLU(nn.Module):
    """``W_2 (W_1 h ⊙ GELU(W_1' h))`` at every point of ``(B, C, *spatial)``."""

    def __init__(self, c_in: int, hidden: int, c_out: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(c_in, 2 * hidden), nn.Linear(hidden, c_out)

    def forward(self, h):
        value, gate = self.fc1(h.movedim(1, -1)).chunk(2, dim=-1)
        return self.fc2(value * F.gelu(gate)).movedim(-1, 1)



def _spacing_unit(spacing: float) -> tuple[int, int] | None:
    """``(p, q)`` with ``spacing = p / q`` (smallest ``q <= 4096``), or ``None``: on sizes ``n = K·q`` the
    stencil's shift ``spacing·n = K·p`` cells is a whole number, a symbolic integer under torch.export."""
    q = next((q for q in range(1, 4097) if abs(round(spacing * q) - spacing * q) <= 1e-9 * q), None)
    return None if q is None else (round(spacing * q), q)


def _shift_whole(x: torch.Tensor, axis: int, sign: int, cells) -> torch.Tensor:
    """:func:`_shift` by ``sign * cells`` whole cells, ``cells`` a symbolic size with ``0 < cells < n``
    (torch.export; no branch on its value): the same concatenation as the eager whole shift."""
    n, after = x.shape[axis], x.dim() - 1 - axis  # F.pad lists the last axis first
    if sign > 0:  # F.pad, not a concatenated block of zeros: a (., cells, .) tensor would guard cells != 1
        return F.pad(x.narrow(axis, cells, n - cells), [0, 0] * after + [0, cells])
    return F.pad(x.narrow(axis, 0, n - cells), [0, 0] * after + [cells, 0])


def _shift(x: torch.Tensor, axis: int, cells: float) -> torch.Tensor:
    """``x`` sampled at ``i + cells`` along ``axis`` (linear interpolation, zero outside)."""
    n = x.shape[axis]
    low = math.floor(cells)
    frac = cells - low

    def whole(k: int) -> torch.Tensor:
        if k == 0:
            return x
        if abs(k) >= n:
            return torch.zeros_like(x)
        pad = torch.zeros_like(x.narrow(axis, 0, abs(k)))
        if k > 0:
            return torch.cat([x.narrow(axis, k, n - k), pad], dim=axis)
        return torch.cat([pad, x.narrow(axis, 0, n + k)], dim=axis)

    return whole(low) if frac < 1e-9 else (1 - frac) * whole(low) + frac * whole(low + 1)


class _StencilLift(nn.Module):
    """``W_2 GELU(Σ_o W_o u(x + o·δ))`` on ``(B, C, *spatial)``, ``δ`` a fraction of the domain per axis."""

    def __init__(self, c_in: int, width: int, kernel: int, spacing: float | None, spatial_dims: int):
        super().__init__()
        self.kernel, self.spacing, self.spatial_dims = kernel, spacing, spatial_dims
        self.fc1 = nn.Linear(c_in * kernel**spatial_dims, width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, u):
        r = (self.kernel - 1) // 2
        symbolic = self.spacing is not None and self.kernel > 1 and not all(isinstance(n, int) for n in u.shape[2:])
        if symbolic:  # torch.export on multiples of q (MANO.export_size_multiple): whole shifts (n // q)·p
            p, q = _spacing_unit(self.spacing)  # type: ignore[misc]
            steps = [(n // q) * p for n in u.shape[2:]]
        else:
            steps = [1.0 if self.spacing is None else self.spacing * n for n in u.shape[2:]]
        taps = []
        for offset in itertools.product(range(-r, r + 1), repeat=self.spatial_dims):
            t = u
            for a, (o, step) in enumerate(zip(offset, steps)):
                if symbolic:
                    t = t if o == 0 else _shift_whole(t, 2 + a, o, abs(o) * step)
                else:
                    t = _shift(t, 2 + a, o * step)
            taps.append(t)
        h = torch.cat(taps, dim=1).movedim(1, -1)
        return self.fc2(F.gelu(self.fc1(h))).movedim(-1, 1)


class _SpectralHead(nn.Module):
    """``L × GELU(SpectralConv(h) + W h)`` then a pointwise MLP, on ``(B, C, *spatial)``; with ``grid``
    the spectral path reads ``h`` sampled on that fixed node grid and is evaluated on the input grid."""

    def __init__(self, c_in: int, width: int, c_out: int, n_modes: int, n_layers: int, spatial_dims: int,
                 grid: tuple[int, ...] | None = None):
        super().__init__()
        self.grid = grid
        self.lift = nn.Linear(c_in, width)
        from neuralop.layers.spectral_convolution import SpectralConv  # slow to import: only when used

        self.spectral = nn.ModuleList(SpectralConv(width, width, n_modes=(n_modes,) * spatial_dims)
                                      for _ in range(n_layers))
        self.skips = nn.ModuleList(nn.Linear(width, width) for _ in range(n_layers))
        self.out = _PointwiseMLP(width, 2 * width, c_out)

    def forward(self, h):
        h = self.lift(h.movedim(1, -1)).movedim(-1, 1)
        shape = tuple(h.shape[2:])
        symbolic = not all(isinstance(n, int) for n in shape)  # torch.export: no comparison with the grid in Python
        for spec, skip in zip(self.spectral, self.skips):
            if self.grid is None or (not symbolic and self.grid == shape):
                k = spec(h)
            else:  # the series is evaluated by zero-padding its spectrum (SpectralConv's own output_shape
                # pads the unshifted spectrum at the end, which misplaces negative frequencies: wrong off the
                # shared nodes in neuraloperator 2.0.0)
                k = fourier_resample(spec(resample_field(h, self.grid)), shape)
            h = F.gelu(k + skip(h.movedim(1, -1)).movedim(-1, 1))
        return self.out(h)




@register_operator("mano_extended")
class MANOExtended(MultipoleOperatorBase):
    """Extended multipole attention neural operator (module docstring); defaults: ``darcy64_mano.toml``.

    Args:
        in_channels, out_channels, spatial_dims, width, n_layers, n_heads, mlp_ratio, window_fraction,
        coarse_cells, local_window, window, pool_factor, pool, unpool, max_levels, pyramid, window_taper: as
            :class:`~.mano.MANO`.
        lift_stencil: odd stencil width of the lift per axis (``1``: pointwise MLP).
        lift_spacing: stencil spacing as a fraction of the domain (a length; ``None``: one cell, which
            depends on the resolution).
        rel_pos_bias: ``R``, nodes per half-window of the learned relative-position bias table, over
            displacements in window units (``0``: none); see the layer.
        gate: gate each attention output by ``SiLU(W_g x)`` of its query point.
        qk_norm: layer-normalise queries and keys over the head dimension.
        ffn: ``"mlp"`` or ``"glu"`` feed-forward networks.
        head: ``"pointwise"`` (MLP) or ``"spectral"`` output head.
        head_width, head_modes, head_layers: channels, Fourier modes per axis and spectral blocks of the
            spectral head (unused with ``head="pointwise"``).
        head_grid: nodes per axis (int or ``d`` ints) of the fixed grid on which the spectral head computes
            its Fourier coefficients, independent of the input grid (``None``: the input grid). Spectral head only.
    """

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        width: int = 56,
        n_layers: int = 4,
        n_heads: int = 4,
        mlp_ratio: int = 3,
        window_fraction: float | list[float] | None = DEFAULTS["window_fraction"],
        coarse_cells: int | list[int] | None = DEFAULTS["coarse_cells"],
        local_window: int | list[int] | None = DEFAULTS["local_window"],
        window: int | list[int] | None = None,
        pool_factor: int = 2,
        pool: str = "avg",
        unpool: str = "nearest",
        max_levels: int | None = None,
        pyramid: str | None = None,
        window_taper: str | None = None,
        lift_stencil: int = 3,
        lift_spacing: float | None = 0.015625,
        rel_pos_bias: int = 8,
        gate: bool = True,
        qk_norm: bool = True,
        ffn: str = "glu",
        head: str = "spectral",
        head_width: int = 16,
        head_modes: int = 8,
        head_layers: int = 2,
        head_grid: int | list[int] | None = 64,
    ) -> None:
        super().__init__()
        check_common(in_channels, out_channels, spatial_dims, width, n_layers, mlp_ratio)
        for name, value in [("head_width", head_width), ("head_modes", head_modes), ("head_layers", head_layers),
                            ("lift_stencil", lift_stencil)]:
            check_positive_int(name, value)
        if lift_stencil % 2 == 0:
            raise ValueError(f"lift_stencil: expected an odd int (a centred stencil), got {lift_stencil}")
        if lift_spacing is not None and not (isinstance(lift_spacing, (int, float)) and 0 < lift_spacing <= 1):
            raise ValueError(f"lift_spacing: expected None or a float in (0, 1], got {lift_spacing!r}")
        check_choice("ffn", ffn, FFNS)
        check_choice("head", head, HEADS)
        if head_grid is not None:
            if head != "spectral":
                raise ValueError(f"head_grid: expected None with head={head!r} (it sets the spectral head's grid), "
                                 f"got {head_grid!r}")
            head_grid = check_per_axis_ints("head_grid", head_grid, spatial_dims)
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        attn = layer_kwargs(spatial_dims=spatial_dims, window=window, window_fraction=window_fraction, coarse_cells=coarse_cells,
                            local_window=local_window, pool_factor=pool_factor, pool=pool, unpool=unpool,
                            max_levels=max_levels, pyramid=pyramid, window_taper=window_taper,
                            rel_pos_bias=rel_pos_bias, gate=gate,
                            qk_norm=qk_norm)
        if lift_stencil == 1:
            self.lift = _PointwiseMLP(in_channels + spatial_dims, width, width)
        else:
            self.lift = _StencilLift(in_channels + spatial_dims, width, lift_stencil, lift_spacing, spatial_dims)

        def make_ffn():
            if ffn == "glu":
                return _PointwiseGLU(width, max(1, round(mlp_ratio * width * 2 / 3)), width)
            return _PointwiseMLP(width, mlp_ratio * width, width)

        self.blocks = nn.ModuleList(_Block(width, n_heads, spatial_dims, make_ffn(), attn) for _ in range(n_layers))
        self.norm = _ChannelNorm(width)
        if head == "spectral":
            self.proj = _SpectralHead(width, head_width, out_channels, head_modes, head_layers, spatial_dims,
                                      head_grid)
        else:
            self.proj = _PointwiseMLP(width, mlp_ratio * width, out_channels)

    def _extra_export_unit(self) -> tuple[tuple[int, ...], str | None]:
        """``q`` of ``lift_spacing = p/q`` (whole stencil shifts ``K·p`` on sizes ``K·q``) and ``head_grid`` (exact
        restriction onto it) enlarge the export unit; a spacing that is no such fraction fixes the grid."""
        d = self.spatial_dims
        unit = (1,) * d
        if isinstance(self.lift, _StencilLift) and self.lift.spacing is not None and self.lift.kernel > 1:
            pq = _spacing_unit(self.lift.spacing)
            if pq is None:
                return unit, (f"lift_spacing={self.lift.spacing}: not p/q for any q <= 4096, so the stencil's shift "
                              f"lift_spacing * n is never a whole number of cells")
            unit = (pq[1],) * d
        if isinstance(self.proj, _SpectralHead) and self.proj.grid is not None:
            unit = tuple(a * g // math.gcd(a, g) for a, g in zip(unit, self.proj.grid))
        return unit, None
