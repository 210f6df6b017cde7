"""Complete neural operators built from sciattn layers, and their registry."""

from .galerkin_transformer import GalerkinTransformer
from .mano import MANO
from .registry import create_operator, list_operators, register_operator

__all__ = ["GalerkinTransformer", "MANO", "create_operator", "list_operators", "register_operator"]
