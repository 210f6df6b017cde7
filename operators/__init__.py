"""Complete neural operators built from sciattn layers, and their registry."""

from .anie import ANIE
from .bsa import BSATransformer
from .codano import CoDANO
from .contract import ExportPolicy, Operator
from .erwin import Erwin
from .factformer import FactFormer
from .fno import FNO
from .galerkin_transformer import GalerkinTransformer
from .gnot import GNOT
from .linear_no import LinearNO
from .mano import MANO
from .mano_extended import MANOExtended
from .mspt import MSPT
from .oformer import OFormer
from .ono import ONO
from .registry import create_operator, list_operators, migrate_stored, register_operator
from .spherical_transformer import PlanarTransformer, SphericalTransformer
from .transolver import Transolver

__all__ = [
    "ANIE",
    "BSATransformer",
    "CoDANO",
    "Erwin",
    "ExportPolicy",
    "FactFormer",
    "FNO",
    "GalerkinTransformer",
    "GNOT",
    "LinearNO",
    "MANO",
    "MANOExtended",
    "MSPT",
    "OFormer",
    "ONO",
    "Operator",
    "PlanarTransformer",
    "SphericalTransformer",
    "Transolver",
    "create_operator",
    "list_operators",
    "migrate_stored",
    "register_operator",
]
