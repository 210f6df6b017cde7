"""Sparse neighbourhood attention over a CSR index: spherical discs, ball-tree selections."""

from .csr import csr_from_pairs, csr_within_distance
from .functional import neighborhood_attention

__all__ = ["csr_from_pairs", "csr_within_distance", "neighborhood_attention"]
