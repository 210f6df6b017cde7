"""Transforms: what is applied to a dataset after it is read or generated.

:mod:`.normalizers` (per-channel normalisers fitted on the training split, with :mod:`.unit_gaussian`),
:mod:`.splits` (train/test division of single-split files), :mod:`.point_sets` (sampling point sets, their
quadrature weights, grid-to-point interpolation). Nothing is imported here.
"""

__all__: list[str] = []
