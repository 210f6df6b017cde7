"""Irregular-mesh versions of the built-in Darcy and Navier–Stokes data: random point sets with area weights.

The same samples as the grid generators (:mod:`.darcy`, :mod:`.navier_stokes`, same seeds, solved
once on the fine grid), evaluated at random points, so surrogates can be compared on one PDE on
grids and on clouds. A sample is ``{"x": (N, C_in), "y": (N, C_out), "pos": (N, 2), "weights": (N,)}``
whose weights discretise the domain integral, ``∫_{[0,1]^2} f(x) dx ≈ Σ_i w_i f(x_i)`` (``Σ_i w_i = 1``).
The point sets, their quadrature weights and the grid-to-point interpolants are those of
:mod:`.point_sets` (re-exported here); this module holds what is specific to the datasets.

Points and weights per sample
    Sample ``i`` draws its points (:func:`.point_sets.sample_points`: the unit square with its corners
    first for Darcy, the unit torus ``[0, 1)^2`` for Navier–Stokes) from ``default_rng([seed, i, 1])``
    (the solver uses ``[seed, i]``); ``fixed_points`` gives every sample the points of sample 0.
    Weights: :func:`.point_sets.quadrature_weights` (``"delaunay"`` or clipped ``"voronoi"`` cells).

Interpolation from the solve grid
    Darcy: the stored ``(S, S)`` arrays hold the nodes ``i/S, i < S`` (:mod:`.darcy`); ``u`` is
    completed by its zero Dirichlet values at ``x = 1`` and ``y = 1`` and evaluated **bilinearly**
    on the ``(S+1)^2`` nodes (error ``<= h^2/8 (|u_xx| + |u_yy|)`` where ``u`` is smooth, ``h = 1/S``;
    measured on samples, weighted relative L2 against the interpolant of a 2x finer solve grid of the
    same field: 0.4 % at ``S = 32``, 0.1 % at ``S = 64``, second order despite the coefficient jumps).
    The two-phase coefficient takes the value of the **nearest node** (``"nearest"``, the default,
    so it stays in ``{low, high}``; nodes at ``x = 1`` or ``y = 1`` are not stored and take their
    neighbour's value) or is bilinear (``"bilinear"``).
    Navier–Stokes: periodic nodes ``i/S``; **trigonometric interpolation** (``"fourier"``, the
    default; exact for the band-limited field of the spectral solver, the Nyquist mode taken as a
    cosine so the interpolant is real) or periodic bilinear (``"bilinear"``). Snapshot 0 is ``w0``,
    snapshot ``k >= 1`` the ``k``-th recorded step; ``inputs -> outputs`` lists snapshots.

Cache
    With ``cache_dir`` the point samples are stored in ``<name>_irregular_<hash>.h5`` (the hash of the
    generation parameters, which are also the file's attributes) and reused when they match.

Shapes:
    pos ``(N, 2)``; weights ``(N,)``; fields ``(..., S, S)`` -> values ``(..., N)``; a dataset of
    ``n`` samples stores ``x (n, N, C_in)``, ``y (n, N, C_out)``, ``pos``/``weights`` per sample.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np
import torch

from sciattn._checks import check_choice, check_positive_int, unreadable_file
from sciattn._io import atomic_path

from .._hdf5 import attrs_match, open_hdf5
from ..readers.geofno import PointSetDataset
from ..transforms.point_sets import (
    DOMAINS,
    LAYOUTS,
    WEIGHTS,
    bilinear_interpolate,
    fourier_interpolate,
    quadrature_weights,
    sample_points,
)

__all__ = [
    "DOMAINS", "LAYOUTS", "WEIGHTS",
    "sample_points", "quadrature_weights", "bilinear_interpolate", "fourier_interpolate",  # from .point_sets
    "darcy_on_points", "point_samples", "generate_darcy_irregular", "generate_navier_stokes_irregular",
]

_FORMAT = 1


# ------------------------------------------------------------------------------------ Darcy grid -> points


def darcy_on_points(coeff: np.ndarray, u: np.ndarray, pos: np.ndarray, *,
                    coeff_interpolation: str = "nearest") -> tuple[np.ndarray, np.ndarray]:
    """Coefficient and pressure ``(..., N)`` at ``pos`` from stored Darcy arrays ``(..., S, S)`` (nodes ``i/S``)."""
    check_choice("coeff_interpolation", coeff_interpolation, ("nearest", "bilinear"))
    c = np.asarray(coeff, dtype=np.float64)
    pad = [(0, 0)] * (c.ndim - 2) + [(0, 1), (0, 1)]
    u_full = np.pad(np.asarray(u, dtype=np.float64), pad)  # u = 0 at x = 1 and y = 1
    c_full = np.pad(c, pad, mode="edge")  # the nodes at x = 1, y = 1 are not stored
    if coeff_interpolation == "nearest":
        s = c.shape[-1]
        i, j = (np.clip(np.rint(pos[:, a] * s).astype(np.int64), 0, s) for a in (0, 1))
        a = c_full[..., i, j]
    else:
        a = bilinear_interpolate(c_full, pos)
    return a, bilinear_interpolate(u_full, pos)


# ------------------------------------------------------------------------------------ datasets


def point_samples(fields_in, fields_out, n_points: int, *, domain: str, seed: int = 0, layout: str = "uniform",
                  jitter: float = 1.0, weights: str = "delaunay", fixed_points: bool = False,
                  interpolate=None, include_coords: bool = False) -> dict[str, np.ndarray]:
    """Evaluate per-sample grid fields on point sets: ``interpolate(fields (C, S, S), pos) -> (C, N)``.

    ``fields_in`` ``(n, C_in, S, S)``, ``fields_out`` ``(n, C_out, S, S)`` -> float32 arrays ``x (n, N, C_in[+2])``,
    ``y (n, N, C_out)``, ``pos (n, N, 2)``, ``weights (n, N)``.
    """
    n = len(fields_in)
    pts = weights_ = None
    xs, ys, ps, ws = [], [], [], []
    for i in range(n):
        if pts is None or not fixed_points:
            pts = sample_points(n_points, rng=np.random.default_rng([seed, 0 if fixed_points else i, 1]),
                                domain=domain, layout=layout, jitter=jitter)
            weights_ = quadrature_weights(pts, method=weights, domain=domain)
        a, u = interpolate(fields_in[i], fields_out[i], pts)
        x = np.concatenate([a.T, pts], axis=1) if include_coords else a.T
        xs.append(x)
        ys.append(u.T)
        ps.append(pts)
        ws.append(weights_)
    out = {k: np.stack(v).astype(np.float32) for k, v in (("x", xs), ("y", ys), ("pos", ps), ("weights", ws))}
    if domain == "torus":  # a coordinate within float32 rounding of 1 is the periodic image 0
        out["pos"][out["pos"] >= 1.0] = 0.0
    return out


def _dataset(arrays: dict[str, np.ndarray], meta: dict) -> PointSetDataset:
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    samples = [{k: t[k][i] for k in ("x", "y", "pos", "weights")} for i in range(len(t["x"]))]
    return PointSetDataset(samples, meta)


def _cached(cache_dir, prefix: str, meta: dict, make) -> dict[str, np.ndarray]:
    """Arrays from ``cache_dir/<prefix>_<hash>.h5`` when its attributes equal ``meta``, else ``make()``
    written atomically (no cache when ``cache_dir`` is None)."""
    if cache_dir is None:
        return make()
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"cache_dir: expected a path (str or os.PathLike) or None, got {type(cache_dir).__name__}")
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(cache_dir) / f"{prefix}_{digest}.h5"
    if path.is_file():
        with open_hdf5(path) as fh:  # a truncated cache file: one line with the path and the cause
            if attrs_match(fh.attrs, meta):
                try:
                    return {k: fh[k][()] for k in ("x", "y", "pos", "weights")}
                except OSError as err:
                    raise unreadable_file("path", path, "an HDF5 file", "HDF5", err) from None
    arrays = make()
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as fh:
        for key, value in meta.items():
            fh.attrs[key] = np.asarray(value, dtype=np.int64) if isinstance(value, list) else value
        for key, value in arrays.items():
            fh.create_dataset(key, data=value)
    return arrays


def _point_meta(name, n_samples, n_points, fine, seed, layout, jitter, weights, fixed_points, include_coords, interp):
    check_positive_int("n_samples", n_samples)
    check_positive_int("n_points", n_points)
    check_choice("layout", layout, LAYOUTS)
    check_choice("weights", weights, WEIGHTS)
    return {"generator": f"sciattn.pde_data.irregular.{name}", "format": _FORMAT, "n_samples": n_samples,
            "n_points": n_points, "fine_resolution": fine, "seed": seed, "layout": layout, "jitter": float(jitter),
            "weights": weights, "fixed_points": int(bool(fixed_points)), "include_coords": int(bool(include_coords)),
            "interpolation": interp}


def generate_darcy_irregular(n_samples: int, n_points: int, *, fine_resolution: int = 128, seed: int = 0,
                             layout: str = "uniform", jitter: float = 1.0, weights: str = "delaunay",
                             fixed_points: bool = False, coeff_interpolation: str = "nearest",
                             include_coords: bool = False, cache_dir: str | os.PathLike | None = None,
                             progress: bool = False, **params: float) -> PointSetDataset:
    """Darcy samples of :func:`.darcy.generate_darcy` (solved at ``fine_resolution``) on point sets.

    ``x`` = [coefficient] (+ ``[x, y]`` with ``include_coords``), ``y`` = [pressure]. With ``cache_dir``
    the grid solve is cached by :func:`.darcy.load_or_generate_darcy` and the point samples in
    ``darcy_irregular_<hash>.h5``. ``params``: coefficient parameters (``alpha``, ``tau``, ``high``, ``low``).
    """
    from .darcy import generate_darcy, load_or_generate_darcy

    check_choice("coeff_interpolation", coeff_interpolation, ("nearest", "bilinear"))
    meta = {**_point_meta("darcy", n_samples, n_points, fine_resolution, seed, layout, jitter, weights,
                          fixed_points, include_coords, f"{coeff_interpolation}/bilinear"),
            **{k: float(v) for k, v in sorted(params.items())}}

    def make():
        kw = dict(fine_resolution=fine_resolution, seed=seed, progress=progress, **params)
        grid = (load_or_generate_darcy(cache_dir, n_samples, [fine_resolution], **kw) if cache_dir is not None
                else generate_darcy(n_samples, [fine_resolution], **kw))
        coeff, u = grid[fine_resolution]
        return point_samples(coeff[:, None], u[:, None], n_points, domain="square", seed=seed, layout=layout,
                             jitter=jitter, weights=weights, fixed_points=fixed_points, include_coords=include_coords,
                             interpolate=lambda a, v, p: darcy_on_points(a, v, p, coeff_interpolation=coeff_interpolation))

    arrays = _cached(cache_dir, "darcy_irregular", meta, make)
    return _dataset(arrays, {**meta, "name": "darcy_irregular", "domain": "unit square",
                             "variables": {"x": ["coefficient"] + (["x", "y"] if include_coords else []),
                                           "y": ["pressure"]}})


def generate_navier_stokes_irregular(n_samples: int, n_points: int, *, fine_resolution: int = 64, seed: int = 0,
                                     inputs: Sequence[int] = (0,), outputs: Sequence[int] = (1,),
                                     layout: str = "uniform", jitter: float = 1.0, weights: str = "delaunay",
                                     fixed_points: bool = False, interpolation: str = "fourier",
                                     include_coords: bool = False, cache_dir: str | os.PathLike | None = None,
                                     progress: bool = False, **params: float) -> PointSetDataset:
    """Navier–Stokes vorticity of :func:`.navier_stokes.generate_navier_stokes` on point sets of the torus.

    Snapshot 0 is ``w0`` and ``k`` the ``k``-th recorded step (``record_steps`` of them, at
    ``t = k t_final / record_steps``); ``x`` holds the ``inputs`` snapshots, ``y`` the ``outputs``.
    ``params``: any of ``nu``, ``t_final``, ``dt``, ``record_steps``, ``alpha``, ``tau`` (defaults
    :data:`.navier_stokes.NS_DEFAULTS`).
    """
    from .navier_stokes import NS_DEFAULTS, generate_navier_stokes, load_or_generate_navier_stokes

    check_choice("interpolation", interpolation, ("fourier", "bilinear"))
    unknown = sorted(set(params) - set(NS_DEFAULTS))
    if unknown:
        raise TypeError(f"params: expected keywords among {sorted(NS_DEFAULTS)}, got unknown {unknown}")
    p = {**NS_DEFAULTS, **params}
    n_snap = int(p["record_steps"]) + 1
    ins, outs = [int(k) for k in inputs], [int(k) for k in outputs]
    for name, ks in (("inputs", ins), ("outputs", outs)):
        if not ks or any(not 0 <= k < n_snap for k in ks):
            raise ValueError(f"{name}: expected snapshot indices in 0..{n_snap - 1} (0 = w0), got {ks}")
    meta = {**_point_meta("navier_stokes", n_samples, n_points, fine_resolution, seed, layout, jitter, weights,
                          fixed_points, include_coords, interpolation),
            "inputs": ins, "outputs": outs, **{k: float(v) for k, v in sorted(p.items())}}

    def interp(a, v, pts):
        f = fourier_interpolate if interpolation == "fourier" else (
            lambda g, q: bilinear_interpolate(g, q, periodic=True))
        return f(a, pts), f(v, pts)

    def make():
        kw = dict(fine_resolution=fine_resolution, seed=seed, progress=progress, **params)
        grid = (load_or_generate_navier_stokes(cache_dir, n_samples, [fine_resolution], **kw) if cache_dir is not None
                else generate_navier_stokes(n_samples, [fine_resolution], **kw))
        w0, u = grid[fine_resolution]
        snaps = np.concatenate([w0[:, None], np.moveaxis(u, -1, 1)], axis=1)  # (n, T + 1, S, S)
        return point_samples(snaps[:, ins], snaps[:, outs], n_points, domain="torus", seed=seed, layout=layout,
                             jitter=jitter, weights=weights, fixed_points=fixed_points, include_coords=include_coords,
                             interpolate=interp)

    arrays = _cached(cache_dir, "navier_stokes_irregular", meta, make)
    names = lambda ks: [f"w(t={k * p['t_final'] / p['record_steps']:g})" for k in ks]  # noqa: E731
    return _dataset(arrays, {**meta, "name": "navier_stokes_irregular", "domain": "unit torus",
                             "variables": {"x": names(ins) + (["x", "y"] if include_coords else []),
                                           "y": names(outs)}})
