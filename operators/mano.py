"""MANO: Multipole Attention Neural Operator (Colagrande et al., 2025, arXiv 2507.02748).

Architecture, for an input ``a`` on a grid with coordinates ``x``::

    h_0 = Lift([a, x])                                   pointwise, C_in + d -> width
    h_l = h_{l-1} + MultipoleAttention(Norm(h_{l-1}))    multiscale windowed attention
    h_l = h_l + FFN(Norm(h_l))                           pointwise MLP
    u   = Proj(h_L)                                      pointwise MLP, width -> C_out

Every block sees the whole domain: :class:`~sciattn.multipole.MultipoleAttention` derives its
levels from the input size at run time and pads with masks, so the same weights run at any grid
size (48², 100², 256², non-powers of two included). With ``window_fraction`` the windows are a
fixed fraction of the domain, so a model trained at 64² sees the same physical neighbourhoods at
256². Norm is a LayerNorm over channels at each point.

Shapes: ``x`` ``(B, C_in, *spatial)`` -> ``(B, C_out, *spatial)``; optional quadrature ``weights``
``(*spatial)`` or ``(B, *spatial)`` for the key points of every level.
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn._checks import check_dim, check_finite, check_positive_int, check_rank
from sciattn.domain import Grid
from sciattn.multipole import MultipoleAttention

from .registry import register_operator

__all__ = ["MANO"]


class _ChannelNorm(nn.Module):
    """LayerNorm over the channel axis of ``(B, C, *spatial)``."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, h):
        return self.norm(h.movedim(1, -1)).movedim(-1, 1)


def _pointwise_mlp(c_in: int, hidden: int, c_out: int, spatial_dims: int) -> nn.Sequential:
    conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[spatial_dims]
    return nn.Sequential(conv(c_in, hidden, 1), nn.GELU(), conv(hidden, c_out, 1))


class _Block(nn.Module):
    def __init__(self, width, n_heads, spatial_dims, mlp_ratio, attn_kwargs):
        super().__init__()
        self.norm1, self.norm2 = _ChannelNorm(width), _ChannelNorm(width)
        self.attn = MultipoleAttention(width, n_heads, spatial_dims, **attn_kwargs)
        self.ffn = _pointwise_mlp(width, mlp_ratio * width, width, spatial_dims)

    def forward(self, h, weights):
        h = h + self.attn(self.norm1(h), weights=weights)
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
    ) -> None:
        super().__init__()
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("width", width),
                            ("n_layers", n_layers), ("mlp_ratio", mlp_ratio)]:
            check_positive_int(name, value)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        attn_kwargs = dict(window=None if window_fraction is not None else window, window_fraction=window_fraction,
                           pool_factor=pool_factor, pool=pool, unpool=unpool, max_levels=max_levels)
        self.lift = _pointwise_mlp(in_channels + spatial_dims, width, width, spatial_dims)
        self.blocks = nn.ModuleList(_Block(width, n_heads, spatial_dims, mlp_ratio, attn_kwargs)
                                    for _ in range(n_layers))
        self.norm = _ChannelNorm(width)
        self.proj = _pointwise_mlp(width, mlp_ratio * width, out_channels, spatial_dims)

    def forward(
        self, x: torch.Tensor, weights: torch.Tensor | None = None, *, y: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``y`` is accepted and ignored, so neuraloperator's ``Trainer`` (which calls
        ``model(**sample)``) trains this model unchanged."""
        del y
        d = self.spatial_dims
        check_rank("x", x, 2 + d, f"(B, C_in={self.in_channels}, {d} spatial axes)")
        check_dim("x", x, 1, self.in_channels, "input channels")
        check_finite("x", x)
        coords = Grid.from_field(x, d).coordinate_channels(x.shape[0], x.dtype, x.device)
        h = self.lift(torch.cat([x, coords], dim=1))
        for block in self.blocks:
            h = block(h, weights)
        return self.proj(self.norm(h))
