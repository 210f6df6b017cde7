"""The built-in generators' samples at several resolutions: one solve, restricted, the same samples at each.

:func:`generate_pairs` is what training (:func:`sciattn.train.datasets.data.build_datasets`), the resolution sweep
(:func:`sciattn.train.datasets.data.load_at_resolutions`) and ``sciattn data generate`` draw from a built-in grid
solver; :func:`sample_at_resolutions` wraps it (and the point-set generators) as ``{r: dataset}``.

Restriction. The solve runs once on a grid ``S`` that every requested resolution ``r`` divides (``S =
lcm(r)`` unless ``fine_resolution`` is given, doubled where the spectral solver needs an even grid) and the
coarser grids are the slices ``u_r[j] = u_S[j · S / r]``. Shallow water (one grid per spectral solve) is solved
at ``nlat = solve_resolution`` and transferred spectrally (:func:`sphere_transfer`).

Shapes: darcy ``x (n, 1, r, r)``, ``y (n, 1, r, r)``; burgers ``(n, 1, r)`` each; navier_stokes ``x (n, t_in,
r, r)``, ``y (n, T - t_in, r, r)`` (time steps as channels); coupled_navier_stokes ``(n, V, r, r)`` each;
shallow_water ``(n, 3, r, 2r)`` each.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch

from sciattn._checks import check_positive_int

from .grid_dataset import GridPairDataset

__all__ = ["frame_names", "generate_pairs", "pair_meta", "record_variables", "sample_at_resolutions",
           "sphere_transfer"]


def frame_names(variables: list[str], n_frames: int, first: int = 0) -> list[str]:
    """Channel names of ``n_frames`` time-major frames of ``variables``: the variables themselves for one frame
    (a state in, a state out: ``["w"]``), else ``name[k]`` for frames ``k = first, first + 1, ...`` counted from
    the first input frame (``w[0] … w[4]`` in, ``w[5]`` next)."""
    if n_frames == 1 and first == 0:
        return list(variables)
    return [f"{n}[{k}]" for k in range(first, first + n_frames) for n in variables]


def sphere_transfer(f: torch.Tensor, grid: str, lmax: int, nlat: int) -> torch.Tensor:
    """Fields ``(n, C, s, 2s)`` band-limited to degrees ``l < lmax`` (shallow-water states) synthesised on the
    ``nlat x 2 nlat`` grid of the same kind: analysis on the solve grid (exact for ``lmax`` up to
    :func:`~sciattn.pde_data.sht.exact_lmax`), synthesis on the target grid, so every grid holds the same
    band-limited field at its own nodes."""
    from .solvers.sht import SphericalHarmonicTransform

    s = f.shape[-2]
    if nlat == s:
        return f
    if lmax > nlat:
        raise ValueError(f"resolutions: the shallow-water samples are band-limited to degrees l < {lmax} (solved at "
                         f"nlat = {s}); expected nlat >= {lmax}, got {nlat}")
    src = SphericalHarmonicTransform(s, 2 * s, grid, lmax=lmax, mmax=lmax)
    dst = SphericalHarmonicTransform(nlat, 2 * nlat, grid, lmax=lmax, mmax=lmax)
    return dst.inverse(src.forward(f.double())).float()


def record_variables(name: str) -> dict[str, list[str]]:
    """The channel names the catalogue's record ``name`` holds, as a fresh ``{"x": [...], "y": [...]}``."""
    from .catalogue import get

    return {k: list(v) for k, v in get(name).variables.items()}


def _grid_pairs(data: dict) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    return {k: (torch.from_numpy(a)[:, None], torch.from_numpy(u)[:, None]) for k, (a, u) in data.items()}


def generate_pairs(name: str, n: int, res: list[int], *, options: dict[str, Any], seed: int, cache: Path,
                   progress: bool, solve_resolution: int | None = None, error: type[Exception] = ValueError,
                   known: tuple[str, ...] = ()):
    """``({r: (x, y)}, meta)``: ``n`` samples of generator ``name`` at every resolution of ``res`` (sorted), the
    same samples at each: one solve on a grid every resolution divides (``fine_resolution`` in ``options``, or
    finer) restricted by slicing; shallow water (a single-grid spectral solver) is solved on the
    ``solve_resolution`` grid (default the coarsest of ``res``) and spectrally transferred to the others
    (:func:`sphere_transfer`: its states are band-limited to the solve grid's truncation).

    ``error``: the exception type of a bad option (the trainer passes its ``ConfigError``); ``known``: the
    generator names an unknown ``name`` is told about."""
    opts = dict(options)
    meta: dict[str, Any] = {"source": f"sciattn.pde_data.{name}", "name": name, "seed": seed, "params": dict(options)}
    given_fine = opts.pop("fine_resolution", None)
    fine = given_fine or math.lcm(*res)
    if name in ("navier_stokes", "coupled_navier_stokes") and fine % 2:
        fine *= 2
    kw = {"seed": seed, "progress": progress}
    pairs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    if name != "shallow_water":
        meta["fine_resolution"] = given_fine if name == "darcy_neuralop" else fine
    if name == "darcy":
        from .solvers.darcy import load_or_generate_darcy

        pairs = _grid_pairs(load_or_generate_darcy(cache, n, res, fine_resolution=fine, **kw, **opts))
        meta["variables"] = record_variables("darcy")
    elif name == "darcy_neuralop":
        from .solvers.darcy_neuralop import generate_darcy_neuralop

        pairs = _grid_pairs(generate_darcy_neuralop(n, res, fine_resolution=given_fine, **kw, **opts))
        meta["variables"] = record_variables("darcy_neuralop")
    elif name == "burgers":
        from .solvers.burgers import load_or_generate_burgers

        pairs = _grid_pairs(load_or_generate_burgers(cache, n, res, fine_resolution=fine, **kw, **opts))
        meta["variables"] = record_variables("burgers")
        meta["dt"] = float(opts.get("t_final", 1.0))
    elif name == "navier_stokes":
        from .solvers.navier_stokes import NS_DEFAULTS, load_or_generate_navier_stokes

        t_in = opts.pop("t_in", 10)
        data = load_or_generate_navier_stokes(cache, n, res, fine_resolution=fine, **kw, **opts)
        for k, (_, u) in data.items():
            steps = u.shape[-1]
            if isinstance(t_in, bool) or not isinstance(t_in, int) or not 0 < t_in < steps:
                raise error(f"data.options.t_in: expected an integer in 1..{steps - 1} (of the {steps} "
                            f"recorded steps), got {t_in!r}")
            field = torch.from_numpy(u).permute(0, 3, 1, 2)
            pairs[k] = (field[:, :t_in].contiguous(), field[:, t_in:].contiguous())
        p = {**NS_DEFAULTS, **opts}
        meta.update(t_in=t_in, time_series=True, dt=float(p["t_final"]) / int(p["record_steps"]),
                    frame_variables=["w"], variables={"x": frame_names(["w"], t_in),
                                                      "y": frame_names(["w"], int(p["record_steps"]) - t_in, t_in)})
    elif name == "shallow_water":
        from .solvers.shallow_water.data import load_or_generate_shallow_water

        base = int(solve_resolution or res[0])
        grid = opts.get("grid", "equiangular")
        data = load_or_generate_shallow_water(cache, n, nlat=base, nlon=2 * base, seed=seed, **opts)
        x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
        lmax = int(opts.get("lmax") or min(math.ceil(base / 3), (2 * base + 1) // 2))  # the solver's default
        pairs = {k: (sphere_transfer(x, grid, lmax, k), sphere_transfer(y, grid, lmax, k)) for k in res}
        names = ["geopotential", "vorticity", "divergence"]
        meta.update(variables={"x": names, "y": names}, grid=grid, solve_resolution=base, lmax=lmax,
                    dt=float(opts.get("dt", 600.0)) * int(opts.get("n_steps_between", 6)))
    elif name == "coupled_navier_stokes":
        from .solvers.coupled_navier_stokes import load_or_generate_coupled_navier_stokes

        system = opts.pop("system", "ns")
        out = load_or_generate_coupled_navier_stokes(cache, n, res, system=system, fine_resolution=fine, **kw, **opts)
        pairs = {k: (torch.from_numpy(a), torch.from_numpy(b)) for k, (a, b) in out.pairs.items()}
        meta.update(variables={"x": list(out.variables), "y": list(out.variables)}, system=system,
                    dt=float(out.times[1] - out.times[0]))
    else:
        raise ValueError(f"name: expected a generator, one of {sorted(known)}, got {name!r}")
    return pairs, meta


def pair_meta(meta: dict[str, Any], r: int) -> dict[str, Any]:
    """``meta`` of the samples at resolution ``r`` (the sphere's ``domain`` where the generator is shallow water)."""
    out = {**meta, "resolution": r}
    if meta.get("name") == "shallow_water":
        grid = meta.get("grid", "equiangular")
        out["domain"] = {"kind": "sphere", "grid": grid, "nlat": r, "nlon": 2 * r}
    return out


def sample_at_resolutions(name: str, res: list[int], *, root: str | os.PathLike | None, n_samples: int, seed: int,
                          progress: bool, points: bool, t_in: int | None = None, solve_resolution: int | None = None,
                          error: type[Exception] = ValueError, known: tuple[str, ...] = (),
                          **params: Any) -> dict[int, Any]:
    """``{r: dataset}`` of ``n_samples`` fresh samples of built-in generator ``name`` (seed ``seed``), the same
    at every ``r`` of ``res`` (sorted): grid generators through :func:`generate_pairs` (cached under
    ``root/generated``), point-set generators (``points=True``: ``r`` points per sample) through their
    registered loader). ``error`` and ``known``: as :func:`generate_pairs`."""
    from .registry import default_root, load

    check_positive_int("n_samples", n_samples)
    if points:
        kw = {"root": root} if root is not None else {}
        if t_in is not None:
            params = {**params, "t_in": t_in}
        return {r: load(name, split="test", resolution=r, seed=seed, n_train=0, n_test=n_samples, progress=progress,
                        **kw, **params) for r in res}
    cache = Path(root).expanduser() if root is not None else default_root()
    opts = dict(params)
    if t_in is not None:
        opts["t_in"] = t_in
    pairs, meta = generate_pairs(name, n_samples, res, options=opts, seed=seed, cache=cache / "generated",
                                 progress=progress, solve_resolution=solve_resolution, error=error,
                                 known=known)
    meta = {**meta, "split": "generated"}
    return {r: GridPairDataset(x, y, pair_meta(meta, r)) for r, (x, y) in pairs.items()}
