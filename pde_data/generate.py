"""``sciattn data generate``: run a built-in solver and write NetCDF files that ``load`` reads back.

Several resolutions come from one solve on a grid that all of them divide (or finer), restricted, so every
file holds the same samples. ``darcy_neuralop`` is the generator matched to neuraloperator's Darcy files
(:mod:`.darcy_neuralop`); ``sciattn data generate NAME --like RUN_OR_FILE`` takes the generator and its
parameters from a run's recorded data source or from a data file.

Files hold one variable per physical field with dims ``(sample, x, y)`` (plus ``time`` where the
field evolves), the node coordinates, and every solver parameter as an attribute; the
``sciattn_inputs`` / ``sciattn_outputs`` attributes name the input and output variables.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sciattn._checks import check_positive_int

from .xarray_data import write_xarray

__all__ = ["GENERATORS", "generate_at_resolutions", "generate_to_netcdf"]


Generated = tuple[dict[int, dict], list[str], list[str], dict]


def _darcy(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
    from .darcy import DARCY_DEFAULTS, generate_darcy

    data = generate_darcy(n, resolutions, seed=seed, progress=progress, **params)
    dims = ("sample", "x", "y")
    return ({r: {"coefficient": (dims, coeff), "pressure": (dims, u)} for r, (coeff, u) in data.items()},
            ["coefficient"], ["pressure"], {"pde": "darcy", **DARCY_DEFAULTS, **params})


def _darcy_neuralop(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
    from .darcy_neuralop import NEURALOP_DARCY_FIT, generate_darcy_neuralop

    data = generate_darcy_neuralop(n, resolutions, seed=seed, progress=progress, **params)
    dims = ("sample", "x", "y")
    return ({r: {"mask": (dims, m), "pressure": (dims, y)} for r, (m, y) in data.items()}, ["mask"], ["pressure"],
            {"pde": "darcy", "matched_to": "neuraloperator darcy_*_16.pt", **NEURALOP_DARCY_FIT, **params})


def _burgers(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
    from .burgers import BURGERS_DEFAULTS, generate_burgers

    data = generate_burgers(n, resolutions, seed=seed, progress=progress, **params)
    dims = ("sample", "x")
    return ({r: {"initial": (dims, a), "solution": (dims, u)} for r, (a, u) in data.items()}, ["initial"],
            ["solution"], {"pde": "burgers", **BURGERS_DEFAULTS, **params})


def _navier_stokes(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
    from .navier_stokes import NS_DEFAULTS, generate_navier_stokes

    data = generate_navier_stokes(n, resolutions, seed=seed, progress=progress, **params)
    return ({r: {"vorticity0": (("sample", "x", "y"), w0), "vorticity": (("sample", "x", "y", "time"), u)}
             for r, (w0, u) in data.items()}, ["vorticity0"], ["vorticity"],
            {"pde": "navier_stokes", **NS_DEFAULTS, **params})


GENERATORS: dict[str, Callable[..., Generated]] = {
    "darcy": _darcy, "darcy_neuralop": _darcy_neuralop, "burgers": _burgers, "navier_stokes": _navier_stokes,
}


def generate_at_resolutions(name: str, n: int, resolutions: list[int], out: str | os.PathLike, *, seed: int = 0,
                            progress: bool = True, **params) -> list[Path]:
    """Generate ``n`` samples of ``name`` once (solved on a grid that every resolution divides, or finer) and
    write them restricted to each resolution as ``out/<name>_<r>.nc``: the same samples in every file.

    ``params`` override the solver's defaults (e.g. ``nu``, ``t_final``, ``dt`` for Navier-Stokes).
    """
    if name not in GENERATORS:
        raise ValueError(f"name: expected a generator, one of {sorted(GENERATORS)}, got {name!r}")
    check_positive_int("n", n)
    if isinstance(resolutions, int) or not resolutions:
        raise ValueError(f"resolutions: expected a non-empty list of points per axis, got {resolutions!r}")
    res = sorted({check_positive_int("resolution", r) for r in resolutions})
    per_res, inputs, outputs, attrs = GENERATORS[name](n, res, seed, progress, **params)
    paths = []
    for r in res:
        variables = per_res[r]
        node = np.arange(r) / r
        spatial = {d for dims, _ in variables.values() for d in dims} & {"x", "y"}
        paths.append(write_xarray(Path(out) / f"{name}_{r}.nc", variables, inputs=inputs, outputs=outputs,
                                  coords={d: node for d in sorted(spatial)},
                                  attrs={**attrs, "seed": seed, "n_samples": n, "resolution": r,
                                         "resolutions": res}))
    return paths


def generate_to_netcdf(name: str, n: int, resolution: int, out: str | os.PathLike, *, seed: int = 0,
                       progress: bool = True, **params) -> Path:
    """Generate ``n`` samples of ``name`` at ``resolution`` and write ``out/<name>_<resolution>.nc``.

    ``params`` override the solver's defaults (e.g. ``nu``, ``t_final``, ``dt`` for Navier-Stokes).
    """
    if name not in GENERATORS:
        raise ValueError(f"name: expected a generator, one of {sorted(GENERATORS)}, got {name!r}")
    check_positive_int("resolution", resolution)
    return generate_at_resolutions(name, n, [resolution], out, seed=seed, progress=progress, **params)[0]
