"""Multipole attention: windowed softmax attention on a grid pyramid, combined coarse to fine (MANO); Fastmax, the
factorable attention whose polynomial kernel's sums over points are moments (FAST); and two-level overlapping
Schwarz attention (:mod:`sciattn.multipole.schwarz`)."""

from .fastmax import fastmax_attention
from .fastmax_reference import fastmax_dense
from .functional import window_attention
from .module import MultipoleAttention
from .schwarz import schwarz_attention
from .spec import MultipoleSpec

__all__ = ["window_attention", "MultipoleAttention", "MultipoleSpec", "fastmax_attention", "fastmax_dense",
           "schwarz_attention"]
