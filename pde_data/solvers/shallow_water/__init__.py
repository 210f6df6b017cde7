"""Shallow-water equations on the rotating sphere: the solver (:mod:`.solver`) and its dataset (:mod:`.data`).

The two files import in one direction only: :mod:`.data` imports :class:`~.solver.ShallowWaterSolver` and
:data:`~.solver.SWE_DEFAULTS`; the solver knows nothing of datasets. This package exports the names of both, as the
single module ``sciattn.pde_data.shallow_water`` did (that path is an alias of this package, and
``sciattn.pde_data.shallow_water_data`` of :mod:`.data`; see :mod:`sciattn.pde_data._aliases`).
"""

from .data import area_weighted_stats, generate_shallow_water, load_or_generate_shallow_water
from .solver import SWE_DEFAULTS, ShallowWaterSolver

__all__ = [
    "SWE_DEFAULTS",
    "ShallowWaterSolver",
    "area_weighted_stats",
    "generate_shallow_water",
    "load_or_generate_shallow_water",
]
