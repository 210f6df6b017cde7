"""Complete neural operators built from sciattn layers, and their registry."""

from .anie import ANIE
from .bsa import BSATransformer
from .codano import CoDANO
from .continuum_transformer import ContinuumTransformer
from .continuum_vitno import ContinuumViTNO
from .contract import ExportPolicy, Operator
from .erwin import Erwin
from .factformer import FactFormer
from .fastmax_transformer import FastmaxTransformer
from .fno import FNO
from .funcattn import FuncAttn
from .galerkin_transformer import GalerkinTransformer
from .gnot import GNOT
from .linear_no import LinearNO
from .mano import MANO
from .mano_extended import MANOExtended
from .mspt import MSPT
from .oformer import OFormer
from .ono import ONO
from .registry import create_operator, list_operators, migrate_stored, register_operator
from .schwarz import SchwarzTransformer
from .spherical_transformer import PlanarTransformer, SphericalTransformer
from .transolver import Transolver

__all__ = [
    "ANIE",
    "BSATransformer",
    "CoDANO",
    "ContinuumTransformer",
    "ContinuumViTNO",
    "Erwin",
    "ExportPolicy",
    "FactFormer",
    "FastmaxTransformer",
    "FNO",
    "FuncAttn",
    "GalerkinTransformer",
    "GNOT",
    "SchwarzTransformer",
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
