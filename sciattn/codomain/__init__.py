"""Codomain attention: softmax attention between physical variables whose tokens are functions (CoDA-NO)."""

from .functional import codomain_attention, codomain_logits
from .module import CodomainAttention, QuadratureInstanceNorm
from .positional import FourierField, VariableEncoding

__all__ = [
    "codomain_attention",
    "codomain_logits",
    "CodomainAttention",
    "QuadratureInstanceNorm",
    "FourierField",
    "VariableEncoding",
]
