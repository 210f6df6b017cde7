"""Complete neural operators built from sciattn layers, and their registry."""

from .bsa import BSATransformer
from .codano import CoDANO
from .erwin import Erwin
from .galerkin_transformer import GalerkinTransformer
from .mano import MANO
from .mano_extended import MANOExtended
from .registry import create_operator, list_operators, register_operator
from .spherical_transformer import PlanarTransformer, SphericalTransformer

__all__ = [
    "BSATransformer",
    "CoDANO",
    "Erwin",
    "GalerkinTransformer",
    "MANO",
    "MANOExtended",
    "PlanarTransformer",
    "SphericalTransformer",
    "create_operator",
    "list_operators",
    "register_operator",
]
