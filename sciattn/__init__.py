"""sciattn: attention-based neural operators for PDE surrogates.

Every attention layer here is a quadrature of an integral operator,

    u(x) = ∫_Ω κ(q(x), k(y)) v(y) dμ(y)  ≈  Σ_j w_j κ(q_i, k_j) v_j ,

with the quadrature weights ``w_j`` supplied by the discretisation (:mod:`sciattn.domain`).
Importing this package never imports an optional dependency, and it imports every attention family,
so each registers its backends (:mod:`sciattn._backend_registry`) whatever is imported first.
"""

from ._capabilities import capability_report
from ._dispatch import BackendError, available_backends
from .balltree import BallAttention, BallSparseAttention, ball_attention, build_ball_tree
from .codomain import CodomainAttention, codomain_attention
from .domain import Grid, PointCloud, SphereGrid
from .galerkin import GalerkinAttention, galerkin_attention
from .multipole import MultipoleAttention, window_attention
from .multipole.fastmax import fastmax_attention
from .neighborhood import neighborhood_attention
from .spherical import SphericalAttention, SphericalNeighborhoodAttention
from .weighted_softmax import weighted_softmax_attention

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "BallAttention",
    "BallSparseAttention",
    "CodomainAttention",
    "GalerkinAttention",
    "MultipoleAttention",
    "Grid",
    "PointCloud",
    "SphereGrid",
    "SphericalAttention",
    "SphericalNeighborhoodAttention",
    "available_backends",
    "ball_attention",
    "build_ball_tree",
    "capability_report",
    "codomain_attention",
    "fastmax_attention",
    "galerkin_attention",
    "neighborhood_attention",
    "window_attention",
    "weighted_softmax_attention",
    "__version__",
]
