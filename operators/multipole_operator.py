"""The parts shared by the multipole operators (:class:`~.mano.MANO`, :class:`~.mano_extended.MANOExtended`): the
channels-first pointwise layers, the pre-norm block around :class:`~sciattn.multipole.MultipoleAttention`, the
layer's arguments, the constructor checks, and :class:`MultipoleOperatorBase` (forward pass, export sizes, and the
stored-config defaults of the layer's later keys).

Shapes: ``x`` ``(B, C_in, *spatial)`` -> ``(B, C_out, *spatial)``; optional quadrature ``weights`` ``(*spatial)`` or
``(B, *spatial)`` for the key points of every level.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sciattn._checks import check_dim, check_finite, check_input_dtype, check_positive_int, check_rank
from sciattn.domain import Grid
from sciattn.multipole import MultipoleAttention, MultipoleSpec

from ._layers import ChannelNorm as _ChannelNorm
from .contract import Operator

__all__ = ["MultipoleOperatorBase", "check_common", "layer_kwargs"]


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


class MultipoleOperatorBase(Operator):
    """Forward pass and export sizes shared by :class:`MANO` and the extended variant: subclasses set
    ``lift``, ``blocks``, ``norm``, ``proj``, ``in_channels``, ``out_channels`` and ``spatial_dims``.

    Stored configs (:meth:`~.contract.Operator.migrate_config`): ``pyramid="input"`` fills a config stored before the
    key existed (:class:`~sciattn.multipole.MultipoleAttention` then pooled every level from the input grid, with
    ``window`` cells or ``window_fraction`` and optional ``coarse_cells``, while the same values now select the
    physical pyramid), and ``window_taper="none"`` one stored before that key existed (with ``pyramid="physical"``
    or ``None`` since 2026-12-02 it meant the hard windows; the layer's default is now the tapered one; the input
    pyramid ignores the key)."""

    legacy_defaults = {"pyramid": "input", "window_taper": "none"}

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
