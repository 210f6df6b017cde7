"""sciattn: attention-based neural operators for PDE surrogates.

Every attention layer here is a quadrature of an integral operator,

    u(x) = ∫_Ω κ(q(x), k(y)) v(y) dμ(y)  ≈  Σ_j w_j κ(q_i, k_j) v_j ,

with the quadrature weights ``w_j`` supplied by the discretisation (:mod:`sciattn.domain`).
Importing this package never imports an optional dependency.
"""

from ._capabilities import capability_report
from ._dispatch import BackendError, available_backends
from .domain import Grid, PointCloud
from .galerkin import GalerkinAttention, galerkin_attention

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "GalerkinAttention",
    "Grid",
    "PointCloud",
    "available_backends",
    "capability_report",
    "galerkin_attention",
    "__version__",
]
