"""``sciattn data generate``: run a built-in solver and write a NetCDF file that ``load`` reads back.

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

__all__ = ["GENERATORS", "generate_to_netcdf"]


def _darcy(n: int, resolution: int, seed: int, progress: bool, **params) -> tuple[dict, list[str], list[str], dict]:
    from .darcy import DARCY_DEFAULTS, generate_darcy

    coeff, u = generate_darcy(n, [resolution], seed=seed, progress=progress, **params)[resolution]
    dims = ("sample", "x", "y")
    return ({"coefficient": (dims, coeff), "pressure": (dims, u)}, ["coefficient"], ["pressure"],
            {"pde": "darcy", **DARCY_DEFAULTS, **params})


def _burgers(n: int, resolution: int, seed: int, progress: bool, **params) -> tuple[dict, list[str], list[str], dict]:
    from .burgers import BURGERS_DEFAULTS, generate_burgers

    a, u = generate_burgers(n, [resolution], seed=seed, progress=progress, **params)[resolution]
    dims = ("sample", "x")
    return ({"initial": (dims, a), "solution": (dims, u)}, ["initial"], ["solution"],
            {"pde": "burgers", **BURGERS_DEFAULTS, **params})


def _navier_stokes(n: int, resolution: int, seed: int, progress: bool, **params) -> tuple[dict, list[str], list[str], dict]:
    from .navier_stokes import NS_DEFAULTS, generate_navier_stokes

    w0, u = generate_navier_stokes(n, [resolution], seed=seed, progress=progress, **params)[resolution]
    return ({"vorticity0": (("sample", "x", "y"), w0), "vorticity": (("sample", "x", "y", "time"), u)},
            ["vorticity0"], ["vorticity"], {"pde": "navier_stokes", **NS_DEFAULTS, **params})


GENERATORS: dict[str, Callable[..., tuple[dict, list[str], list[str], dict]]] = {
    "darcy": _darcy, "burgers": _burgers, "navier_stokes": _navier_stokes,
}


def generate_to_netcdf(name: str, n: int, resolution: int, out: str | os.PathLike, *, seed: int = 0,
                       progress: bool = True, **params) -> Path:
    """Generate ``n`` samples of ``name`` at ``resolution`` and write ``out/<name>_<resolution>.nc``.

    ``params`` override the solver's defaults (e.g. ``nu``, ``t_final``, ``dt`` for Navier-Stokes).
    """
    if name not in GENERATORS:
        raise ValueError(f"name: expected a generator, one of {sorted(GENERATORS)}, got {name!r}")
    check_positive_int("n", n)
    check_positive_int("resolution", resolution)
    variables, inputs, outputs, attrs = GENERATORS[name](n, resolution, seed, progress, **params)
    node = np.arange(resolution) / resolution
    path = Path(out) / f"{name}_{resolution}.nc"
    spatial = {d for dims, _ in variables.values() for d in dims} & {"x", "y"}
    return write_xarray(path, variables, inputs=inputs, outputs=outputs, coords={d: node for d in sorted(spatial)},
                        attrs={**attrs, "seed": seed, "n_samples": n, "resolution": resolution})
