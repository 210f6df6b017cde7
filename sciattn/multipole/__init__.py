"""Multipole attention: windowed softmax attention on a grid pyramid, combined coarse to fine (MANO)."""

from .functional import window_attention
from .module import MultipoleAttention
from .spec import MultipoleSpec

__all__ = ["window_attention", "MultipoleAttention", "MultipoleSpec"]
