"""Attention on the sphere (Bonev et al., 2025): global and geodesic-disc quadrature attention between
latitude–longitude grids, with the grids' area weights on the keys."""

from .functional import spherical_attention, spherical_neighborhood_attention
from .module import SphereResample, SphericalAttention, SphericalNeighborhoodAttention
from .neighborhoods import default_theta_cutoff, sphere_disc_csr

__all__ = [
    "SphereResample",
    "SphericalAttention",
    "SphericalNeighborhoodAttention",
    "default_theta_cutoff",
    "sphere_disc_csr",
    "spherical_attention",
    "spherical_neighborhood_attention",
]
