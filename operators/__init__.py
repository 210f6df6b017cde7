"""Complete neural operators built from sciattn layers, and their registry."""

from .codano import CoDANO
from .galerkin_transformer import GalerkinTransformer
from .mano import MANO
from .registry import create_operator, list_operators, register_operator

__all__ = ["CoDANO", "GalerkinTransformer", "MANO", "create_operator", "list_operators", "register_operator"]
