"""Galerkin / Fourier attention: softmax-free linear attention as a quadrature (Cao, 2021)."""

from .functional import KVNorm, galerkin_attention, head_layer_norm
from .module import GalerkinAttention

__all__ = ["GalerkinAttention", "KVNorm", "galerkin_attention", "head_layer_norm"]
