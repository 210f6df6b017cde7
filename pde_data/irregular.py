"""Irregular-mesh versions of the built-in Darcy and Navier–Stokes data: random point sets with area weights.

The same samples as the grid generators (:mod:`.darcy`, :mod:`.navier_stokes`, same seeds, solved
once on the fine grid), evaluated at random points, so surrogates can be compared on one PDE on
grids and on clouds. A sample is ``{"x": (N, C_in), "y": (N, C_out), "pos": (N, 2), "weights": (N,)}``.

Points (:func:`sample_points`)
    ``"uniform"``: i.i.d. uniform; ``"jittered"``: one point in each of ``n`` distinct cells of a
    ``k x k`` grid (``k = ceil(sqrt n)``), at ``cell centre + jitter (U - 1/2) / k``. On the unit
    square the four corners are always the first four points, so the Delaunay triangulation covers
    the square; on the unit torus points lie in ``[0, 1)^2``. Sample ``i`` draws its points from
    ``default_rng([seed, i, 1])`` (the solver uses ``[seed, i]``); ``fixed_points`` gives every sample
    the points of sample 0.

Quadrature weights (:func:`quadrature_weights`), summing to the domain area 1
    ``"delaunay"``: one third of the area of each incident triangle, ``w_i = Σ_{T∋i} |T|/3``; this
    integrates the piecewise-linear interpolant exactly, so linear functions exactly.
    ``"voronoi"``: the area of the Voronoi cell clipped to the domain,
    ``w_i = Σ_{T∋i} [ |x_i, m_ij, c_T| + |x_i, c_T, m_ik| ]`` (signed areas with the edge midpoints
    ``m`` and the circumcentre ``c_T`` of each incident Delaunay triangle). Clipping to the square uses
    the points mirrored across its sides and corners (a mirrored point is never nearer to a point of
    the square than its original), a point on a side keeps the half of its symmetric cell inside,
    a corner a quarter. On the torus both use periodic copies. Copies are taken within a margin of
    the domain that doubles until every triangle used has its circumdisk inside the padded box (so
    it is a Delaunay triangle of the infinite mirrored or periodic set).

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

Shapes:
    pos ``(N, 2)``; weights ``(N,)``; fields ``(..., S, S)`` -> values ``(..., N)``; a dataset of
    ``n`` samples stores ``x (n, N, C_in)``, ``y (n, N, C_out)``, ``pos``/``weights`` per sample.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np
import torch
from scipy.spatial import Delaunay

from sciattn._checks import check_choice, check_positive_int
from sciattn._io import atomic_path

from ._hdf5 import attrs_match
from .geofno import PointSetDataset

__all__ = [
    "sample_points", "quadrature_weights", "bilinear_interpolate", "fourier_interpolate",
    "darcy_on_points", "point_samples", "generate_darcy_irregular", "generate_navier_stokes_irregular",
]

DOMAINS, LAYOUTS, WEIGHTS = ("square", "torus"), ("uniform", "jittered"), ("delaunay", "voronoi")
_FORMAT = 1


# ------------------------------------------------------------------------------------ points


def sample_points(n: int, *, rng: np.random.Generator, domain: str = "square", layout: str = "uniform",
                  jitter: float = 1.0) -> np.ndarray:
    """``(n, 2)`` float64 points in the unit square (corners first) or the unit torus ``[0, 1)^2``."""
    check_choice("domain", domain, DOMAINS)
    check_choice("layout", layout, LAYOUTS)
    check_positive_int("n", n)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if not 0.0 <= float(jitter) <= 1.0:
        raise ValueError(f"jitter: expected a number in [0, 1], got {jitter}")
    corners = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]) if domain == "square" else np.zeros((0, 2))
    m = n - len(corners)
    least = 4 if domain == "square" else 3
    if n < least:
        raise ValueError(f"n: expected at least {least} points on the {domain}, got {n}")
    if layout == "uniform":
        pts = rng.random((m, 2))
    else:
        k = math.ceil(math.sqrt(m))
        cells = rng.choice(k * k, size=m, replace=False)
        centre = np.stack([cells // k, cells % k], axis=1) + 0.5
        pts = (centre + float(jitter) * (rng.random((m, 2)) - 0.5)) / k
        pts = np.minimum(pts, np.nextafter(1.0, 0.0))  # stay inside [0, 1)
    return np.concatenate([corners, pts])


def _check_pos(pos: object, domain: str) -> np.ndarray:
    if not isinstance(pos, np.ndarray) or pos.ndim != 2 or pos.shape[1] != 2 or pos.shape[0] < 3:
        got = f"shape {pos.shape}" if isinstance(pos, np.ndarray) else type(pos).__name__
        raise ValueError(f"pos: expected a numpy array (N, 2) with N >= 3, got {got}")
    p = np.asarray(pos, dtype=np.float64)
    hi_ok = p <= 1.0 if domain == "square" else p < 1.0
    if not (np.isfinite(p).all() and (p >= 0.0).all() and hi_ok.all()):
        box = "[0, 1]^2" if domain == "square" else "[0, 1)^2"
        raise ValueError(f"pos: expected finite points in {box} for domain={domain!r}, got range [{p.min()}, {p.max()}]")
    return p


# ------------------------------------------------------------------------------------ weights


def _augment(p: np.ndarray, domain: str, margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points, the index of their original and a symmetry count: the square's points mirrored across
    sides/corners (a point on a mirror line is not copied onto itself), or the torus' periodic copies,
    within ``margin`` of the unit box."""
    n = len(p)
    idx = np.arange(n)
    out, src = [p], [idx]
    for sx in (-1, 0, 1):
        for sy in (-1, 0, 1):
            if sx == sy == 0:
                continue
            q = p.copy()
            keep = np.ones(n, dtype=bool)
            for ax, s in ((0, sx), (1, sy)):
                if s == 0:
                    continue
                if domain == "torus":
                    q[:, ax] = p[:, ax] + s
                else:
                    q[:, ax] = -p[:, ax] if s < 0 else 2.0 - p[:, ax]
                    keep &= p[:, ax] > 0 if s < 0 else p[:, ax] < 1
                keep &= (q[:, ax] >= -margin) & (q[:, ax] <= 1 + margin)
            out.append(q[keep])
            src.append(idx[keep])
    on_side = ((p == 0) | (p == 1)).sum(1) if domain == "square" else np.zeros(n, dtype=np.int64)
    return np.concatenate(out), np.concatenate(src), on_side


def _circumcentres(a, b, c):
    ab, ac = b - a, c - a
    d = 2.0 * (ab[:, 0] * ac[:, 1] - ab[:, 1] * ac[:, 0])
    nb, nc = (ab**2).sum(1), (ac**2).sum(1)
    off = np.stack([ac[:, 1] * nb - ab[:, 1] * nc, ab[:, 0] * nc - ac[:, 0] * nb], axis=1) / d[:, None]
    return a + off, np.sqrt((off**2).sum(1)), d / 4.0  # centre, radius, signed area


def _cross(u, v):
    return u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]


def quadrature_weights(pos: np.ndarray, *, method: str = "delaunay", domain: str = "square") -> np.ndarray:
    """``(N,)`` area weights of the points ``pos (N, 2)``, summing to 1 (see the module docstring).

    ``"delaunay"`` on the square needs the four corners among the points (:func:`sample_points`
    puts them first); a triangulation that does not cover the square raises ``ValueError``.
    """
    check_choice("method", method, WEIGHTS)
    check_choice("domain", domain, DOMAINS)
    p = _check_pos(pos, domain)
    n = len(p)
    if method == "delaunay" and domain == "square":
        tri = Delaunay(p).simplices
        area = np.abs(_cross(p[tri[:, 1]] - p[tri[:, 0]], p[tri[:, 2]] - p[tri[:, 0]])) / 2.0
        if abs(area.sum() - 1.0) > 1e-9:
            raise ValueError(f"pos: the Delaunay triangles cover an area of {area.sum():.6f}, not the unit square; "
                             "include the four corners (sample_points does) or use method='voronoi'")
        w = np.bincount(tri.ravel(), np.repeat(area / 3.0, 3), minlength=n)
    else:
        w = _augmented_weights(p, method, domain)
    if abs(w.sum() - 1.0) > 1e-8 or (w <= 0).any():
        raise ValueError(f"pos: {method} weights sum to {w.sum():.10f} with {(w <= 0).sum()} non-positive entries "
                         "(duplicate or degenerate points?)")
    return w


def _augmented_weights(p: np.ndarray, method: str, domain: str) -> np.ndarray:
    """Voronoi (square or torus) or periodic Delaunay weights from the triangulation of the mirrored or
    periodic copies within a margin, doubled until every triangle used is Delaunay for the infinite set."""
    n = len(p)
    margin = min(1.0, 4.0 / math.sqrt(n))
    while True:
        pts, src, on_side = _augment(p, domain, margin)
        tri = Delaunay(pts).simplices
        a, b, c = pts[tri[:, 0]], pts[tri[:, 1]], pts[tri[:, 2]]
        if method == "delaunay":  # the periodic triangles whose centroid lies in [0, 1)^2
            g = (a + b + c) / 3.0
            use = ((g >= 0) & (g < 1)).all(1)
        else:  # the triangles at an original point
            use = (tri < n).any(1)
        tri, a, b, c = tri[use], a[use], b[use], c[use]
        with np.errstate(divide="ignore", invalid="ignore"):
            centre, radius, signed = _circumcentres(a, b, c)
        ok = bool(((centre - radius[:, None] >= -margin) & (centre + radius[:, None] <= 1 + margin)).all())
        if ok or margin >= 1.0:
            break
        margin = min(1.0, 2.0 * margin)
    if method == "delaunay":
        verts, part = tri.ravel(), np.repeat(np.abs(signed) / 3.0, 3)
    else:
        flip = signed < 0
        tri[flip] = tri[flip][:, [0, 2, 1]]  # counter-clockwise
        verts, part = [], []
        for r in range(3):
            i, j, k = tri[:, r], tri[:, (r + 1) % 3], tri[:, (r + 2) % 3]
            xi = pts[i]
            mij, mik = (xi + pts[j]) / 2.0, (xi + pts[k]) / 2.0
            part.append(0.5 * (_cross(mij - xi, centre - xi) + _cross(centre - xi, mik - xi)))
            verts.append(i)
        verts, part = np.concatenate(verts), np.concatenate(part)
        keep = verts < n
        verts, part = verts[keep], part[keep]
    return np.bincount(src[verts], part, minlength=n) / 2.0**on_side


# ------------------------------------------------------------------------------------ interpolation


def _indices(x: np.ndarray, m: int, periodic: bool):
    t = x * m if periodic else x * (m - 1)
    i0 = np.floor(t).astype(np.int64)
    if periodic:
        return i0 % m, (i0 + 1) % m, t - i0
    i0 = np.clip(i0, 0, m - 2)
    return i0, i0 + 1, t - i0


def bilinear_interpolate(field: np.ndarray, pos: np.ndarray, *, periodic: bool = False) -> np.ndarray:
    """Bilinear values ``(..., N)`` of nodal ``field (..., M, M)`` at ``pos (N, 2)`` (axis 0 is x).

    Nodes: ``i/(M-1)``, ``i = 0..M-1`` (both sides of the square), or ``i/M`` when ``periodic``.
    """
    f = np.asarray(field, dtype=np.float64)
    if f.ndim < 2 or f.shape[-1] != f.shape[-2] or f.shape[-1] < 2:
        raise ValueError(f"field: expected nodal values (..., M, M) with M >= 2, got shape {f.shape}")
    m = f.shape[-1]
    i0, i1, fx = _indices(pos[:, 0], m, periodic)
    j0, j1, fy = _indices(pos[:, 1], m, periodic)
    return ((1 - fx) * (1 - fy) * f[..., i0, j0] + fx * (1 - fy) * f[..., i1, j0]
            + (1 - fx) * fy * f[..., i0, j1] + fx * fy * f[..., i1, j1])


def fourier_interpolate(field: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Trigonometric interpolant ``(..., N)`` of periodic ``field (..., S, S)`` (nodes ``i/S``) at ``pos``.

    ``f(x) = Σ_k f̂_k e^{2πi k·x}`` over ``|k_a| <= S/2``; an even ``S``'s Nyquist mode enters as
    ``cos(π S x)``, so ``f`` is real and equals the field at the nodes. Cost ``O(N S^2)`` per field.
    """
    f = np.asarray(field, dtype=np.float64)
    if f.ndim < 2 or f.shape[-1] != f.shape[-2]:
        raise ValueError(f"field: expected a periodic field (..., S, S), got shape {f.shape}")
    s = f.shape[-1]
    coef = np.fft.fft2(f) / s**2
    k = np.fft.fftfreq(s, 1.0 / s)

    def basis(x):
        e = np.exp(2j * np.pi * x[:, None] * k[None, :])
        if s % 2 == 0:
            e[:, s // 2] = np.cos(np.pi * s * x)
        return e

    ex, ey = basis(pos[:, 0]), basis(pos[:, 1])
    return np.einsum("...nk,nk->...n", np.matmul(ex, coef), ey).real


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
        with h5py.File(path, "r") as fh:
            if attrs_match(fh.attrs, meta):
                return {k: fh[k][()] for k in ("x", "y", "pos", "weights")}
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
