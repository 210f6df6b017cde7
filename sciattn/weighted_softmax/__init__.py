"""Quadrature-weighted softmax attention: the shared kernel of spherical, ball and codomain attention."""

from .functional import weighted_softmax_attention

__all__ = ["weighted_softmax_attention"]
