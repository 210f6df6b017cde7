"""MANO: Multipole Attention Neural Operator, as published (Colagrande et al., 2025, arXiv 2507.02748).

Architecture, for an input ``a`` on a grid with coordinates ``x`` (the MANO code's Darcy model,
``/work/shared/reference/multipole_codomain.md`` §1.2)::

    h_0 = P [a, x]                                        pointwise linear lift
    h_l = h_{l-1} + MultipoleAttention(Norm(h_{l-1}))     multiscale windowed softmax attention
    h_l = h_l + FFN(Norm(h_l))                            pointwise MLP, W_2 GELU(W_1 h)
    u   = Q_2 tanh(Q_1 Norm(h_L))                         pointwise projection

Norm is a LayerNorm over channels at each point. The attention layer is
:class:`~sciattn.multipole.MultipoleAttention` at its default: every block approximates the
integral ``∫ softmax_y(q(x)·k(y)) v(y) dy`` over the whole domain by a near field at full
resolution plus far fields on coarser key grids of fixed physical size (see its docstring), so the
operator is discretisation-convergent and costs O(N) per layer. ``window=w`` (cells) selects the
MANO code's cell-counted windows instead: then the number of levels grows with the grid and the
operator depends on the resolution (kept as an explicit option).

The extended architecture benchmarked in ``examples/configs/darcy64_mano.toml`` (stencil lift,
relative-position bias, gate, QK-norm, GLU, spectral head) is :class:`~sciattn.operators.mano_extended.MANOExtended`,
registered as ``mano_extended``; it shares this file's building blocks.

Differences from the published method that remain, with their effect measured at initialisation on a smooth
input (``python -m benchmarks run mano_fidelity``, table in ``docs/fidelity.md`` section "Multipole (MANO)"; e_n is
the max difference from the 256² output at the nodes shared with n², relative to its max; the default gives
e_64 = 2.5%, e_128 = 1.0%):

* levels: key grids of fixed physical size chosen at run time, queries at full resolution against clamped
  tapered windows sliding with the query, instead of ``log_s(image_size)`` levels in cells fixed at construction with
  pooled queries and upsampling. The MANO code's cell-counted, non-overlapping windows (``window=8``) give
  e_64 = 20.6%, e_128 = 8.3%. The layer's earlier input pyramid (``pyramid="input"``) gives 2.1% and 0.7%, at a
  per-query cost that grows with the grid. Either one changes the 64² output by 15.4% (relative L2).
  The code's overlapping stride-1 Unfold/Fold windows are not implemented;
* block artefacts: the layer's windows are tapered (``window_taper="linear"``: the two edge key cells weighted by
  the query's position between key-cell centres), so on a smooth 1-D input one layer jumps as much across
  key-cell edges as inside (0.089 / 0.089, ratio 1.0 at 256 and 512 cells) and a shift by the stride changes it by
  0.6%; hard windows (``window_taper="none"``) jump 7x (13x at 512 cells) and change by 4.0%. With ``window=8``
  cells it jumps 2.09 against 0.008 (250x) and changes by 29% under a shift by one window
  (``tests/sciattn/test_multipole_artefacts.py``);
* learned per-head level weights initialised to 1, instead of the code's fixed ``1/(j+1)`` damping (which
  changes the 64² output by 31.5%; e_n 3.9% / 1.8%);
* a 3-cell local near-field term (without it: output change 8.9%, e_n 1.8% / 0.6%);
* quadrature-weighted keys (identical to unweighted keys on grids that are multiples of 64);
* the lift reads the grid coordinates ``x`` besides ``a`` (the sources we could read do not say whether the
  official Darcy script concatenates them; without them: output change 18.7%, e_n 2.4% / 1.1%);
* no dropout (the MANO demo uses ``att_dropout = emb_dropout = 0.1``; no effect in eval mode, the training
  effect is not measured);
* defaults ``width=64, n_layers=4, n_heads=4, mlp_ratio=2`` (the paper's hyperparameters were not available
  to us; the MANO demo uses ``dim=128, depth=8, heads=4, mlp_dim=128``).

Shapes: ``x`` ``(B, C_in, *spatial)`` -> ``(B, C_out, *spatial)``; optional quadrature ``weights``
``(*spatial)`` or ``(B, *spatial)`` for the key points of every level.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sciattn._checks import check_dim, check_finite, check_input_dtype, check_positive_int, check_rank
from sciattn.domain import Grid
from sciattn.multipole import MultipoleAttention, MultipoleSpec
from sciattn.multipole.spec import DEFAULTS

from .registry import register_operator

__all__ = ["MANO"]


class _ChannelNorm(nn.Module):
    """LayerNorm over the channel axis of ``(B, C, *spatial)``."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, h):
        return self.norm(h.movedim(1, -1)).movedim(-1, 1)


class _PointwiseLinear(nn.Module):
    """``W h + b`` at every point of ``(B, C, *spatial)``."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.fc = nn.Linear(c_in, c_out)

    def forward(self, h):
        return self.fc(h.movedim(1, -1)).movedim(-1, 1)


class _PointwiseMLP(nn.Module):
    """``W_2 act(W_1 h)`` at every point of ``(B, C, *spatial)`` (channels-last linear layers); ``act`` GELU, or
    tanh for the MANO code's projection head."""

    def __init__(self, c_in: int, hidden: int, c_out: int, activation: str = "gelu"):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(c_in, hidden), nn.Linear(hidden, c_out)
        self.activation = torch.tanh if activation == "tanh" else F.gelu

    def forward(self, h):
        return self.fc2(self.activation(self.fc1(h.movedim(1, -1)))).movedim(-1, 1)


class _Block(nn.Module):
    """``h + Attn(Norm h)``, then ``h + FFN(Norm h)``; ``ffn`` a pointwise module ``(B, C, *n) -> (B, C, *n)``."""

    def __init__(self, width: int, n_heads: int, spatial_dims: int, ffn: nn.Module, attn_kwargs: dict):
        super().__init__()
        self.norm1, self.norm2 = _ChannelNorm(width), _ChannelNorm(width)
        self.attn = MultipoleAttention(width, n_heads, spatial_dims, **attn_kwargs)
        self.ffn = ffn

    def forward(self, h, weights, validate):
        h = h + self.attn(self.norm1(h), weights=weights, validate=validate)
        return h + self.ffn(self.norm2(h))


def layer_kwargs(*, spatial_dims, window, window_fraction, coarse_cells, local_window, pool_factor, pool, unpool,
                 max_levels, pyramid=None, window_taper=None, **extra) -> dict:
    """The :class:`~sciattn.multipole.MultipoleAttention` arguments of one MANO block: the block's
    :class:`~sciattn.multipole.MultipoleSpec`, resolved once by :meth:`~sciattn.multipole.MultipoleSpec.for_operator`
    (``window`` in cells selects the input pyramid; ``None`` sizes are the layer's defaults), and ``extra`` (bias,
    gate, QK-norm)."""
    spec = MultipoleSpec.for_operator(spatial_dims, window=window, window_fraction=window_fraction,
                                      coarse_cells=coarse_cells, local_window=local_window, pool_factor=pool_factor,
                                      pool=pool, unpool=unpool, max_levels=max_levels, pyramid=pyramid,
                                      window_taper=window_taper)
    return dict(spec=spec, **extra)


class MultipoleOperatorBase(nn.Module):
    """Forward pass and export sizes shared by :class:`MANO` and the extended variant: subclasses set
    ``lift``, ``blocks``, ``norm``, ``proj``, ``in_channels``, ``out_channels`` and ``spatial_dims``."""

    def _extra_export_unit(self) -> tuple[tuple[int, ...], str | None]:
        """Per-axis size unit the lift and head add to the blocks' pyramid unit (and why none, if none)."""
        return (1,) * self.spatial_dims, None

    @property
    def export_size_multiple(self) -> tuple[int, ...] | None:
        """Per-axis multiple ``M`` of the spatial sizes a traced program (``sciattn export``) takes, or ``None``
        (a fixed grid; :attr:`export_fixed_reason` says why): the lcm of the blocks' pyramid units
        (:meth:`~sciattn.multipole.MultipoleAttention.export_unit`) and what the lift and head need."""
        return self._export_multiple()[0]

    @property
    def export_size_range(self) -> list[tuple[int, int | None]] | None:
        """Per-axis ``(min, max)`` of the traced sizes, ``max`` None (unbounded): the blocks' minimum
        (:meth:`~sciattn.multipole.MultipoleAttention.export_min_size`) rounded up to a multiple of the unit."""
        lo = self._export_multiple()[2]
        return None if lo is None else [(k, None) for k in lo]

    @property
    def export_fixed_reason(self) -> str | None:
        """Why :attr:`export_size_multiple` is ``None`` (``None`` when it is not)."""
        return self._export_multiple()[1]

    def _export_multiple(self) -> tuple[tuple[int, ...] | None, str | None, tuple[int, ...] | None]:
        d = self.spatial_dims
        unit, why = self._extra_export_unit()
        if why is not None:
            return None, why, None
        lo = (1,) * d
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


def check_common(in_channels, out_channels, spatial_dims, width, n_layers, mlp_ratio) -> None:
    for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("width", width),
                        ("n_layers", n_layers), ("mlp_ratio", mlp_ratio)]:
        check_positive_int(name, value)
    if spatial_dims not in (1, 2, 3):
        raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")


@register_operator("mano")
class MANO(MultipoleOperatorBase):
    """Multipole attention neural operator, the published architecture (module docstring).

    Args:
        in_channels, out_channels: channels of the input and output fields.
        spatial_dims: 1, 2 or 3.
        width: channels of the latent field.
        n_layers: multipole blocks.
        n_heads: attention heads.
        mlp_ratio: hidden width of the feed-forward networks, as a multiple of ``width``.
        window_fraction, coarse_cells, local_window: the layer's physical sizes (window as a fraction of
            the domain, cells per window on every key level, local near-field window in input cells, ``0``:
            none); the defaults are the layer's (:data:`sciattn.multipole.spec.DEFAULTS`: 1/8, 8, 3), stored
            with the operator's config as values.
        window: window size in cells (int or one per axis), the MANO code's resolution-dependent
            windows (the layer's input pyramid); when given, ``window_fraction``, ``coarse_cells``,
            ``local_window`` and ``pyramid`` are not used.
        pool_factor: coarsening factor per axis between levels.
        pool: ``"avg"`` or ``"conv"``; unpool: ``"nearest"``, ``"linear"`` or ``"transposed"``
            (see the layer for which mode takes which).
        max_levels: cap on the number of levels (``None``: until one window covers the domain).
        pyramid: the layer's mode, ``None`` (physical pyramid, or the input pyramid when ``window`` is given),
            ``"physical"`` or ``"input"`` (the earlier levels pooled from the input grid; a checkpoint stored
            before this key existed loads with ``"input"``, see ``train/checkpoint.py``); with ``"input"`` and
            ``window_fraction`` the layer's earlier fraction modes (``local_window`` is not used).
        window_taper: the physical pyramid's windows, ``None`` (the layer's default, ``"linear"``: tapered,
            continuous in the query position) or ``"none"`` (hard windows; a checkpoint stored before this key
            existed loads with ``"none"``, see ``train/checkpoint.py``). Not used by the input pyramid.
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
    ) -> None:
        super().__init__()
        check_common(in_channels, out_channels, spatial_dims, width, n_layers, mlp_ratio)
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        attn = layer_kwargs(spatial_dims=spatial_dims, window=window, window_fraction=window_fraction, coarse_cells=coarse_cells,
                            local_window=local_window, pool_factor=pool_factor, pool=pool, unpool=unpool,
                            max_levels=max_levels, pyramid=pyramid, window_taper=window_taper)
        self.lift = _PointwiseLinear(in_channels + spatial_dims, width)
        self.blocks = nn.ModuleList(
            _Block(width, n_heads, spatial_dims, _PointwiseMLP(width, mlp_ratio * width, width), attn)
            for _ in range(n_layers))
        self.norm = _ChannelNorm(width)
        self.proj = _PointwiseMLP(width, width, out_channels, activation="tanh")
