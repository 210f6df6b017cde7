"""Solvers: real numerical methods that generate data, deterministic by seed, one PDE per file.

:mod:`.darcy`, :mod:`.burgers`, :mod:`.navier_stokes`, :mod:`.coupled_navier_stokes`, :mod:`.shallow_water`
(a package: the solver and its dataset, with :mod:`.sht`, the spherical harmonic transform it steps with);
:mod:`.darcy_neuralop` and :mod:`.burgers_neuralop` (generators matched to neuraloperator's bundled files);
:mod:`.irregular` (the Darcy and Navier-Stokes samples on random point sets). The catalogue's records
(:mod:`sciattn.pde_data.generators`) name them; nothing is imported here.
"""

__all__: list[str] = []
