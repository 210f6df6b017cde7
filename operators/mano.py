"""MANO: Multipole Attention Neural Operator (Colagrande et al., 2025, arXiv 2507.02748).

Architecture, for an input ``a`` on a grid with coordinates ``x``::

    h_0 = Lift([a, x])                                   pointwise, or a physical stencil
    h_l = h_{l-1} + MultipoleAttention(Norm(h_{l-1}))    multiscale windowed attention
    h_l = h_l + FFN(Norm(h_l))                           pointwise MLP (or gated GLU)
    u   = Head(Norm(h_L))                                pointwise MLP, or spectral head

Every block sees the whole domain: :class:`~sciattn.multipole.MultipoleAttention` derives its
levels from the input size at run time and pads with masks, so the same weights run at any grid
size (48², 100², 256², non-powers of two included). With ``window_fraction`` the windows are a
fixed fraction of the domain, so a model trained at 64² sees the same physical neighbourhoods at
256². Norm is a LayerNorm over channels at each point.

Lift. ``lift_stencil=1`` is the MANO code's pointwise lift. ``lift_stencil=k`` (odd) lifts
``W_2 GELU(Σ_o W_o [a, x](x_i + o·δ))`` over the ``k^d`` offsets ``o ∈ {-(k-1)/2..(k-1)/2}^d``: a
``k^d`` convolution whose stencil spacing ``δ = lift_spacing`` is a fixed fraction of the domain,
not a cell, so the lift sees the same physical neighbourhood at every resolution (``δ·n`` cells;
samples between nodes by linear interpolation, exact when ``δ·n`` is an integer; zero outside
the domain, as a zero-padded convolution). ``lift_spacing=None`` uses one cell (a plain
convolution, whose reach shrinks as the grid is refined).

Head. ``head="pointwise"`` is the MANO code's projection, a per-point MLP: whatever grid-scale
structure the latent field carries (window edges of the finest level, steps of nearest
upsampling, jumps of a discontinuous input carried by the residual stream) reaches the output.
``head="spectral"`` maps the latent field through ``head_layers`` blocks
``GELU(K h + W h)`` with ``K`` a truncated Fourier integral operator (``head_modes`` modes per
axis, neuraloperator's :class:`SpectralConv`) and ``W`` pointwise, then a pointwise MLP: the
output is smooth at the scale of the windows and the head is resolution-agnostic (a Fourier
series has the same modes on every grid). The multipole blocks stay the operator's mixing
layers; the head only filters and projects their output. The Fourier coefficients are a quadrature
(the DFT) of the latent field, which is rough where the input is (a discontinuous coefficient): on
the training grid they carry aliasing that a finer grid does not reproduce, so the head's output
drifts under refinement. ``head_grid=m`` computes them on a fixed grid instead, the latent field
sampled at the ``m`` nodes per axis of the training grid (``resample_field``: exact restriction on
nested grids), and evaluates the series on the input grid: the same quadrature at every resolution,
identical to the default on the grid ``m`` itself.

FFN. ``ffn="mlp"`` is ``W_2 GELU(W_1 h)``; ``ffn="glu"`` is ``W_2 (W_1 h ⊙ GELU(W_1' h))`` with
the hidden width scaled by 2/3 (about the same parameters), which multiplies channels and so
combines local and aggregated (far-field) features multiplicatively.

Shapes: ``x`` ``(B, C_in, *spatial)`` -> ``(B, C_out, *spatial)``; optional quadrature ``weights``
``(*spatial)`` or ``(B, *spatial)`` for the key points of every level.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from neuralop.layers.spectral_convolution import SpectralConv
from torch import nn

from sciattn._checks import (
    check_choice,
    check_dim,
    check_finite,
    check_input_dtype,
    check_per_axis_ints,
    check_positive_int,
    check_rank,
)
from sciattn.domain import Grid, fourier_resample, resample_field
from sciattn.multipole import MultipoleAttention

from .registry import register_operator

__all__ = ["MANO"]

HEADS = ("pointwise", "spectral")
FFNS = ("mlp", "glu")


class _ChannelNorm(nn.Module):
    """LayerNorm over the channel axis of ``(B, C, *spatial)``."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, h):
        return self.norm(h.movedim(1, -1)).movedim(-1, 1)


class _PointwiseMLP(nn.Module):
    """``W_2 GELU(W_1 h)`` at every point of ``(B, C, *spatial)`` (channels-last linear layers)."""

    def __init__(self, c_in: int, hidden: int, c_out: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(c_in, hidden), nn.Linear(hidden, c_out)

    def forward(self, h):
        return self.fc2(F.gelu(self.fc1(h.movedim(1, -1)))).movedim(-1, 1)


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


class _Block(nn.Module):
    def __init__(self, width, n_heads, spatial_dims, mlp_ratio, ffn, attn_kwargs):
        super().__init__()
        self.norm1, self.norm2 = _ChannelNorm(width), _ChannelNorm(width)
        self.attn = MultipoleAttention(width, n_heads, spatial_dims, **attn_kwargs)
        if ffn == "glu":
            self.ffn = _PointwiseGLU(width, max(1, round(mlp_ratio * width * 2 / 3)), width)
        else:
            self.ffn = _PointwiseMLP(width, mlp_ratio * width, width)

    def forward(self, h, weights, validate):
        h = h + self.attn(self.norm1(h), weights=weights, validate=validate)
        return h + self.ffn(self.norm2(h))


@register_operator("mano")
class MANO(nn.Module):
    """Multipole attention neural operator.

    Args:
        in_channels, out_channels: channels of the input and output fields.
        spatial_dims: 1, 2 or 3.
        width: channels of the latent field.
        n_layers: multipole blocks.
        n_heads: attention heads.
        mlp_ratio: hidden width of the feed-forward networks, as a multiple of ``width``.
        window: window size in cells (per axis, or one int); used when ``window_fraction`` is None.
        window_fraction: window size as a fraction of the domain per axis (physical windows).
        pool_factor: coarsening factor per axis between levels.
        pool: ``"avg"`` or ``"conv"``; unpool: ``"nearest"``, ``"linear"`` or ``"transposed"``.
        max_levels: cap on the number of levels (``None``: until one window covers the grid).
        coarse_cells: cells per window on the coarse levels, which then keep a fixed physical
            resolution (see :class:`~sciattn.multipole.MultipoleAttention`); with
            ``window_fraction`` only. Set it to the window in cells at the training resolution.
        lift_stencil: odd stencil width of the lift per axis (``1``: pointwise).
        lift_spacing: stencil spacing as a fraction of the domain (``None``: one cell); set it to
            ``1 / n`` for training resolution ``n``.
        rel_pos_bias: table nodes per half-window of the relative-position bias of every attention
            (``0``: none); set it to the window in cells at the training resolution.
        gate: gate each attention output by ``SiLU(W_g x)`` of its query point.
        qk_norm: layer-normalise queries and keys over the head dimension.
        ffn: ``"mlp"`` or ``"glu"`` feed-forward networks.
        head: ``"pointwise"`` (MLP) or ``"spectral"`` output head (see the module docstring).
        head_width, head_modes, head_layers: channels, Fourier modes per axis and spectral blocks of
            the spectral head (unused with ``head="pointwise"``).
        head_grid: nodes per axis (int or ``d`` ints) of the fixed grid on which the spectral head
            computes its Fourier coefficients (see the module docstring); set it to the training
            resolution. ``None``: the input grid. Spectral head only.
    """

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        width: int = 64,
        n_layers: int = 4,
        n_heads: int = 4,
        mlp_ratio: int = 2,
        window: int | list[int] | None = 8,
        window_fraction: float | list[float] | None = None,
        pool_factor: int = 2,
        pool: str = "avg",
        unpool: str = "nearest",
        max_levels: int | None = None,
        coarse_cells: int | list[int] | None = None,
        lift_stencil: int = 1,
        lift_spacing: float | None = None,
        rel_pos_bias: int = 0,
        gate: bool = False,
        qk_norm: bool = False,
        ffn: str = "mlp",
        head: str = "pointwise",
        head_width: int = 16,
        head_modes: int = 8,
        head_layers: int = 2,
        head_grid: int | list[int] | None = None,
    ) -> None:
        super().__init__()
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("width", width),
                            ("n_layers", n_layers), ("mlp_ratio", mlp_ratio), ("head_width", head_width),
                            ("head_modes", head_modes), ("head_layers", head_layers)]:
            check_positive_int(name, value)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        check_positive_int("lift_stencil", lift_stencil)
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
        attn_kwargs = dict(window=None if window_fraction is not None else window, window_fraction=window_fraction,
                           pool_factor=pool_factor, pool=pool, unpool=unpool, max_levels=max_levels,
                           coarse_cells=coarse_cells,
                           rel_pos_bias=rel_pos_bias, gate=gate, qk_norm=qk_norm)
        if lift_stencil == 1:
            self.lift = _PointwiseMLP(in_channels + spatial_dims, width, width)
        else:
            self.lift = _StencilLift(in_channels + spatial_dims, width, lift_stencil, lift_spacing, spatial_dims)
        self.blocks = nn.ModuleList(_Block(width, n_heads, spatial_dims, mlp_ratio, ffn, attn_kwargs)
                                    for _ in range(n_layers))
        self.norm = _ChannelNorm(width)
        if head == "spectral":
            self.proj = _SpectralHead(width, head_width, out_channels, head_modes, head_layers, spatial_dims,
                                      head_grid)
        else:
            self.proj = _PointwiseMLP(width, mlp_ratio * width, out_channels)

    @property
    def export_size_multiple(self) -> tuple[int, ...] | None:
        """Per-axis multiple ``M`` of the spatial sizes a traced program (``sciattn export``) takes, or ``None``
        (a fixed grid; :attr:`export_fixed_reason` says why).

        Every multiple of ``M`` (``n = K·M``, ``K >= 1``, no upper bound) has the same pyramid, scaled by ``K``
        (:meth:`~sciattn.multipole.MultipoleAttention.export_unit`: same level count, exact pooling by
        ``pool_factor``, windows tiling every level), so the traced graph computes every level size and window
        as symbolic multiples of ``K`` and holds for all of them. E.g. ``window_fraction=0.25``,
        ``pool_factor=2``: ``M = 4``, sizes 8, 12, 16, ... (:attr:`export_size_range`). Windows in cells have none.
        """
        return self._export_multiple()[0]

    @property
    def export_size_range(self) -> list[tuple[int, int | None]] | None:
        """Per-axis ``(min, max)`` of the traced sizes, ``max`` None (unbounded): ``K >= 2`` multiples, since at
        ``K = 1`` some window or level axis is one cell long, a size torch.export specialises; with ``coarse_cells``
        the smallest multiple whose pyramid has the fixed coarse levels (64 for the shipped darcy64_mano config:
        ``export_size_multiple`` 64 from ``lift_spacing = 1/64`` and ``head_grid = 64``, coarse levels 32, 16, 8)."""
        lo = self._export_multiple()[2]
        return None if lo is None else [(k, None) for k in lo]

    @property
    def export_fixed_reason(self) -> str | None:
        """Why :attr:`export_size_multiple` is ``None`` (``None`` when it is not)."""
        return self._export_multiple()[1]

    def _export_multiple(self) -> tuple[tuple[int, ...] | None, str | None, tuple[int, ...] | None]:
        """``(unit, reason, min sizes)``: the lcm of the blocks' pyramid units, ``q`` of ``lift_spacing = p/q``
        (whole stencil shifts ``K·p``) and ``head_grid`` (exact restriction onto it); the minimum is the blocks'
        (:meth:`~sciattn.multipole.MultipoleAttention.export_min_size`) rounded up to a multiple of the unit."""
        d = self.spatial_dims
        unit, lo = (1,) * d, (1,) * d
        if isinstance(self.lift, _StencilLift) and self.lift.spacing is not None and self.lift.kernel > 1:
            pq = _spacing_unit(self.lift.spacing)
            if pq is None:
                return None, (f"lift_spacing={self.lift.spacing}: not p/q for any q <= 4096, so the stencil's shift "
                              f"lift_spacing * n is never a whole number of cells"), None
            unit = (pq[1],) * d
        if isinstance(self.proj, _SpectralHead) and self.proj.grid is not None:
            unit = tuple(a * g // math.gcd(a, g) for a, g in zip(unit, self.proj.grid))
        for block in self.blocks:
            m = block.attn.export_unit()
            if m is None:
                return None, block.attn.export_unit_why_not(), None
            unit = tuple(a * b // math.gcd(a, b) for a, b in zip(unit, m))
            lo = tuple(max(a, b) for a, b in zip(lo, block.attn.export_min_size()))
        return unit, None, tuple(-(-a // u) * u for a, u in zip(lo, unit))

    def forward(
        self, x: torch.Tensor, weights: torch.Tensor | None = None, *, y: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``y`` is accepted and ignored, so neuraloperator's ``Trainer`` (which calls
        ``model(**sample)``) trains this model unchanged."""
        del y
        d = self.spatial_dims
        check_rank("x", x, 2 + d, f"(B, C_in={self.in_channels}, {d} spatial axes)")
        check_dim("x", x, 1, self.in_channels, "input channels")
        check_input_dtype("x", x, self, "operator")
        check_finite("x", x)
        coords = Grid.from_field(x, d).coordinate_channels(x.shape[0], x.dtype, x.device)
        h = self.lift(torch.cat([x, coords], dim=1))
        for i, block in enumerate(self.blocks):  # the first block checks the weights' values for all
            h = block(h, weights, validate=i == 0)
        return self.proj(self.norm(h))
