"""Small layers the operators share."""

from __future__ import annotations

from torch import nn

__all__ = ["ChannelNorm"]


class ChannelNorm(nn.Module):
    """LayerNorm over the channel axis of a channels-first field ``(B, C, *spatial)``."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, h):
        return self.norm(h.movedim(1, -1)).movedim(-1, 1)
