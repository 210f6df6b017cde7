"""Shallow-water dataset on the rotating sphere: one-step pairs, rollout trajectories and their HDF5 cache.

This file holds the data side of the shallow-water solver: :mod:`.solver` holds the PDE, its discretisation and
:class:`~sciattn.pde_data.solvers.shallow_water.solver.ShallowWaterSolver`, and this file imports it (never the
reverse). :func:`generate_shallow_water` solves batches of random initial states,
:func:`load_or_generate_shallow_water` caches the result as one HDF5 file per parameter set, and
:func:`area_weighted_stats` gives the per-channel normalisation statistics with the sphere's quadrature weights.
All three are also exported by the package :mod:`sciattn.pde_data.solvers.shallow_water` (old paths
``sciattn.pde_data.shallow_water`` and ``sciattn.pde_data.shallow_water_data``).

Dataset (:func:`generate_shallow_water`): sample ``i`` draws its initial state with
``numpy.random.default_rng([seed, 0, i])`` and trajectory ``j`` with ``default_rng([seed, 1, j])``;
``x`` is the state after ``spinup`` intervals of ``Δt = dt · n_steps_between`` (default 0: the random
state itself, as torch-harmonics' ``PdeDataset``), ``y`` the state ``Δt`` later. The random states are
unbalanced, so the first hours are dominated by gravity-wave adjustment (the spread of ``φ`` grows several-fold
in the first ``Δt``); ``spinup > 0`` draws pairs from adjusted states instead.

Statistics: ``μ_c = Σ_n Σ_kj q_kj f_nckj / (N Σ q)``, ``σ_c² = Σ q (f − μ_c)² / (N Σ q)`` with ``q`` the
quadrature (area) weights, summing to ``4π``.

Shapes:
    ``x``, ``y`` ``(n_samples, 3, nlat, nlon)``; ``trajectories`` ``(n_traj, traj_len + 1, 3, nlat, nlon)``;
    channels (φ, ζ, δ) in m² s⁻², s⁻¹, s⁻¹; ``mean``, ``std`` ``(3,)``; ``weights`` ``(nlat, nlon)``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import warnings
from pathlib import Path

import h5py
import numpy as np
import torch

from sciattn._checks import check_choice, check_positive_int, check_rank, unreadable_file
from sciattn._io import atomic_path

from ..._hdf5 import attrs_match, open_hdf5
from ..burgers import _small_fft_threads
from ..darcy import _check_real, _check_seed
from ..sht import SHT_GRIDS
from .solver import SWE_DEFAULTS, ShallowWaterSolver

__all__ = ["area_weighted_stats", "generate_shallow_water", "load_or_generate_shallow_water"]

_CACHE_FORMAT = 1
_NON_NEGATIVE = ("omega", "hamp", "decay", "hyperdiffusion_time")  # 0 allowed (no rotation, flat h, white, off)


def area_weighted_stats(fields: np.ndarray | torch.Tensor, weights: np.ndarray | torch.Tensor):
    """Per-channel area-weighted mean and standard deviation of ``fields`` ``(N, C, nlat, nlon)``:
    ``μ_c = Σ_n Σ_kj q_kj f_nckj / (N Σ q)``, ``σ_c² = Σ q (f − μ_c)² / (N Σ q)``. Returns two float64 ``(C,)`` arrays."""
    f = torch.as_tensor(np.asarray(fields), dtype=torch.float64)
    q = torch.as_tensor(np.asarray(weights), dtype=torch.float64)
    check_rank("fields", f, 4, "(N, C, nlat, nlon)")
    if tuple(q.shape) != tuple(f.shape[-2:]):
        raise ValueError(f"weights: expected shape {tuple(f.shape[-2:])}, got {tuple(q.shape)}")
    total = f.shape[0] * q.sum()
    mean = (f * q).sum((0, 2, 3)) / total
    var = (((f - mean[:, None, None]) ** 2) * q).sum((0, 2, 3)) / total
    return mean.numpy(), var.sqrt().numpy()


def _params(nlat, nlon, grid, dt, n_steps_between, seed, n_traj, traj_len, spinup, lmax, params) -> dict:
    unknown = sorted(set(params) - set(SWE_DEFAULTS))
    if unknown:
        raise TypeError(f"params: expected keywords among {sorted(SWE_DEFAULTS)}, got unknown {unknown}")
    p = {k: _check_real(k, v, positive=k not in _NON_NEGATIVE) for k, v in {**SWE_DEFAULTS, **params}.items()}
    negative = [k for k in _NON_NEGATIVE if p[k] < 0]
    if negative:
        raise ValueError(f"{negative[0]}: expected a non-negative number, got {p[negative[0]]}")
    nlat, nlon = check_positive_int("nlat", nlat), check_positive_int("nlon", nlon)
    lmax = min(math.ceil(nlat / 3), (nlon + 1) // 2) if lmax is None else check_positive_int("lmax", lmax)
    return {
        **p, "nlat": nlat, "nlon": nlon, "grid": check_choice("grid", grid, SHT_GRIDS), "dt": _check_real("dt", dt),
        "n_steps_between": check_positive_int("n_steps_between", n_steps_between), "seed": _check_seed(seed),
        "n_traj": int(n_traj) if n_traj == 0 else check_positive_int("n_traj", n_traj),
        "traj_len": check_positive_int("traj_len", traj_len),
        "spinup": int(spinup) if spinup == 0 else check_positive_int("spinup", spinup), "lmax": lmax,
    }


def _solver(p: dict) -> ShallowWaterSolver:
    phys = {k: p[k] for k in ("radius", "omega", "gravity", "havg", "hamp", "hyperdiffusion_time",
                              "hyperdiffusion_order")}
    return ShallowWaterSolver(p["nlat"], p["nlon"], p["grid"], dt=p["dt"], lmax=p["lmax"], **phys)


def _initial_batch(solver: ShallowWaterSolver, p: dict, stream: int, idx: range) -> torch.Tensor:
    ics = [solver.random_initial_condition(np.random.default_rng([p["seed"], stream, i]), mach=p["mach"],
                                           decay=p["decay"]) for i in idx]
    return solver.step(torch.stack(ics), p["spinup"] * p["n_steps_between"])


def _solve_all(solver: ShallowWaterSolver, p: dict, n_samples: int, batch_size: int, shape: tuple):
    every = p["n_steps_between"]
    x = np.empty((n_samples, *shape), np.float32)
    y = np.empty_like(x)
    for s0 in range(0, n_samples, batch_size):
        idx = range(s0, min(s0 + batch_size, n_samples))
        spec = _initial_batch(solver, p, 0, idx)
        x[s0:idx.stop] = solver.to_grid(spec).numpy()
        y[s0:idx.stop] = solver.to_grid(solver.step(spec, every)).numpy()
    traj = np.empty((p["n_traj"], p["traj_len"] + 1, *shape), np.float32)
    for s0 in range(0, p["n_traj"], batch_size):
        idx = range(s0, min(s0 + batch_size, p["n_traj"]))
        spec = _initial_batch(solver, p, 1, idx)
        for k in range(p["traj_len"] + 1):
            traj[s0:idx.stop, k] = solver.to_grid(spec).numpy()
            if k < p["traj_len"]:
                spec = solver.step(spec, every)
    return x, y, traj


def generate_shallow_water(
    n_samples: int = 1024,
    nlat: int = 32,
    nlon: int = 64,
    grid: str = "equiangular",
    dt: float = 600.0,
    n_steps_between: int = 6,
    seed: int = 0,
    *,
    n_traj: int = 32,
    traj_len: int = 24,
    spinup: int = 0,
    lmax: int | None = None,
    batch_size: int = 64,
    **params: float,
) -> dict[str, np.ndarray]:
    """One-step pairs and rollout trajectories of the shallow-water equations (float64 solve, float32 storage).

    ``params`` overrides any of :data:`SWE_DEFAULTS`. ``Δt = dt · n_steps_between`` (default 1 h).

    Returns:
        dict of numpy arrays: ``x``, ``y`` ``(n_samples, 3, nlat, nlon)`` (state at ``t`` and ``t + Δt``);
        ``trajectories`` ``(n_traj, traj_len + 1, 3, nlat, nlon)`` (snapshot ``k`` at ``t = k Δt``);
        ``times`` ``(traj_len + 1,)`` s; ``mean``, ``std`` ``(3,)``: area-weighted statistics of ``x`` and
        ``y`` together (:func:`area_weighted_stats`; the unbalanced initial states shed gravity waves, so the
        spread of ``φ`` grows several-fold within ``Δt`` and statistics of ``x`` alone would misscale ``y``);
        ``weights`` ``(nlat, nlon)`` area weights summing to 4π; ``colatitudes`` ``(nlat,)``, ``longitudes``
        ``(nlon,)``.

    Default size (1024 pairs, 32 trajectories of 24 h at 32×64): 12 s wall on the 2 shared cores this was
    written on.
    """
    n_samples = check_positive_int("n_samples", n_samples)
    batch_size = check_positive_int("batch_size", batch_size)
    p = _params(nlat, nlon, grid, dt, n_steps_between, seed, n_traj, traj_len, spinup, lmax, params)
    solver, every = _solver(p), p["n_steps_between"]
    shape = (3, p["nlat"], p["nlon"])
    with _small_fft_threads(0):  # one intra-op thread: measured 2-40x faster than two on 2 shared cores
        x, y, traj = _solve_all(solver, p, n_samples, batch_size, shape)
    weights = solver.sht.sphere.quadrature_weights().numpy()
    mean, std = area_weighted_stats(np.concatenate([x, y]), weights)
    return {
        "x": x, "y": y, "trajectories": traj, "times": np.arange(p["traj_len"] + 1) * (every * p["dt"]),
        "mean": mean, "std": std, "weights": weights, "colatitudes": solver.sht.colatitudes.numpy(),
        "longitudes": solver.sht.sphere.longitudes().numpy(),
    }


def load_or_generate_shallow_water(
    cache_dir: str | os.PathLike,
    n_samples: int = 1024,
    nlat: int = 32,
    nlon: int = 64,
    grid: str = "equiangular",
    dt: float = 600.0,
    n_steps_between: int = 6,
    seed: int = 0,
    *,
    n_traj: int = 32,
    traj_len: int = 24,
    spinup: int = 0,
    lmax: int | None = None,
    batch_size: int = 64,
    **params: float,
) -> dict[str, np.ndarray]:
    """:func:`generate_shallow_water`'s output, cached as ``cache_dir/shallow_water_<hash>.h5``.

    The hash covers every parameter (defaults filled in, ``lmax`` resolved); the file holds each returned array
    as a dataset and every parameter as a root attribute, and is written atomically
    (:func:`sciattn._io.atomic_path`). A file whose attributes differ from the request is regenerated with a
    warning. ``batch_size`` does not enter the hash (batched solves agree to round-off).
    """
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"cache_dir: expected a path (str or os.PathLike), got {type(cache_dir).__name__}")
    n_samples = check_positive_int("n_samples", n_samples)
    p = _params(nlat, nlon, grid, dt, n_steps_between, seed, n_traj, traj_len, spinup, lmax, params)
    # "generator" keeps the pre-split module name: it enters the hash, so existing cache files stay valid
    meta = {"generator": "sciattn.pde_data.shallow_water", "format": _CACHE_FORMAT, "n_samples": n_samples, **p}
    cache = Path(cache_dir)
    if cache.exists() and not cache.is_dir():
        raise ValueError(f"cache_dir: expected a directory, got {str(cache)!r} (an existing file)")
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
    path = cache / f"shallow_water_{digest}.h5"
    if path.is_file():
        with open_hdf5(path) as fh:  # a truncated cache file: one line with the path and the cause
            if attrs_match(fh.attrs, meta):
                try:
                    return {key: fh[key][()] for key in fh.keys()}
                except OSError as err:
                    raise unreadable_file("path", path, "an HDF5 file", "HDF5", err) from None
        warnings.warn(f"{path}: cached parameters differ from the request; regenerating", stacklevel=2)
    kw = {k: p[k] for k in SWE_DEFAULTS}
    data = generate_shallow_water(n_samples, p["nlat"], p["nlon"], p["grid"], p["dt"], p["n_steps_between"],
                                  p["seed"], n_traj=p["n_traj"], traj_len=p["traj_len"], spinup=p["spinup"],
                                  lmax=p["lmax"], batch_size=batch_size, **kw)
    cache.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as fh:
        for key, value in meta.items():
            fh.attrs[key] = value
        for key, value in data.items():
            fh.create_dataset(key, data=value)
    return data
