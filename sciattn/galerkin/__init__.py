"""Galerkin / Fourier attention: softmax-free linear attention as a quadrature (Cao, 2021)."""

from .functional import galerkin_attention
from .module import GalerkinAttention

__all__ = ["galerkin_attention", "GalerkinAttention"]
