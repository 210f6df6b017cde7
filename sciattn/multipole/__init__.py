"""Multipole attention: windowed softmax attention on a grid pyramid, combined coarse to fine (MANO); two-level
overlapping Schwarz attention (:mod:`sciattn.multipole.schwarz`)."""

from .functional import window_attention
from .module import MultipoleAttention
from .schwarz import schwarz_attention
from .spec import MultipoleSpec

__all__ = ["window_attention", "MultipoleAttention", "MultipoleSpec", "schwarz_attention"]
