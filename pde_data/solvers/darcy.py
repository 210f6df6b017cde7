"""Darcy-flow data generator (the FNO benchmark recipe), deterministic by seed.

PDE
    ``-div(a(x) grad u(x)) = f(x)`` on the unit square ``(0, 1)^2``, ``u = 0`` on the boundary,
    ``f = 1`` by default.

Coefficient
    ``a`` is a thresholded Gaussian random field: ``U ~ N(0, C)`` with covariance
    ``C = (-Laplacian + tau^2 I)^(-alpha)`` (zero-Neumann Laplacian), sampled through the
    orthonormal DCT, then ``a = high`` where ``U >= 0`` and ``a = low`` where ``U < 0``.
    Defaults: ``alpha = 2``, ``tau = 3``, ``high = 12``, ``low = 3`` (:data:`DARCY_DEFAULTS`).

Discretisation
    Node grid of spacing ``h = 1/S`` with nodes ``x_i = i/S``, ``i = 0..S`` (both boundaries
    included), so nodal arrays have shape ``(S+1, S+1)``; axis 0 is ``x``, axis 1 is ``y``.
    Five-point finite differences with arithmetic face averages of ``a``: the flux between
    nodes ``i`` and ``i+1`` uses ``(a_i + a_{i+1}) / 2``. The ``(S-1)^2`` interior unknowns are
    solved with a sparse direct LU factorisation (SuperLU). The scheme is second-order
    accurate for smooth ``a``.

Storage convention
    A field "at resolution ``r``" is an ``(r, r)`` array of the nodes ``x_i``, ``i = 0..r-1``
    of the grid with spacing ``1/r``: the left/bottom boundary row and column (zero for ``u``)
    are kept and the right/top boundary is dropped, as in neuraloperator's Darcy ``.pt``
    files. Restriction from the finest stored resolution ``S`` is then exact slicing,
    ``fine[..., ::S // r, ::S // r]``, so every resolution holds the very same sample.

Regime of the defaults (against the papers' protocols; presets in :mod:`sciattn.pde_data.presets`)
    :data:`DARCY_DEFAULTS` are FNO's coefficient law (``piececonst_r421``: 12 / 3 from a GRF with
    ``alpha = 2``, ``tau = 3``, ``f = 1``), but without ``fine_resolution`` the solve grid is the finest
    requested resolution, where FNO solved on 421 x 421 nodes and subsampled by 5 to 85: preset ``fno_darcy``
    (solve at ``S = 420``, stored at 84, i.e. FNO's 85 nodes without the last Dirichlet row and column;
    1000 / 200 samples). neuraloperator's bundled ``darcy_*_16.pt`` are another regime (contrast 20, not 4):
    :mod:`.darcy_neuralop`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping

import numpy as np
import scipy.fft
import scipy.sparse
import scipy.sparse.linalg

from sciattn._checks import check_positive_int

from .._hdf5 import cached_pairs

__all__ = [
    "DARCY_DEFAULTS",
    "sample_coefficient",
    "solve_darcy",
    "darcy_residual",
    "restrict",
    "generate_darcy",
    "load_or_generate_darcy",
]

#: Default parameters of the coefficient field (FNO recipe with ``low = 3``).
DARCY_DEFAULTS: dict[str, float] = {"alpha": 2.0, "tau": 3.0, "high": 12.0, "low": 3.0}

_CACHE_FORMAT = 1


# --------------------------------------------------------------------------- validation


def _check_real(name: str, value: object, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name}: expected a finite number, got {v}")
    if positive and v <= 0:
        raise ValueError(f"{name}: expected a positive number, got {v}")
    return v


def _check_seed(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"seed: expected a non-negative int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"seed: expected a non-negative int, got {value}")
    return int(value)


def _check_params(alpha: object, tau: object, high: object, low: object) -> dict[str, float]:
    return {
        "alpha": _check_real("alpha", alpha),
        "tau": _check_real("tau", tau),
        "high": _check_real("high", high),
        "low": _check_real("low", low),
    }


def _check_nodal(name: str, value: object, shape: tuple[int, int] | None = None) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray, got {type(value).__name__}")
    if value.ndim != 2 or value.shape[0] != value.shape[1]:
        raise ValueError(f"{name}: expected a square 2-D nodal array (S+1, S+1), got shape {value.shape}")
    if value.shape[0] < 3:
        raise ValueError(f"{name}: expected at least 3 nodes per side (S >= 2), got shape {value.shape}")
    if shape is not None and value.shape != shape:
        raise ValueError(f"{name}: expected shape {shape} (same as coeff), got shape {value.shape}")
    if not np.issubdtype(value.dtype, np.number) or np.iscomplexobj(value):
        raise TypeError(f"{name}: expected a real numeric array, got dtype {value.dtype}")
    arr = np.asarray(value, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(
            f"{name}: expected finite values, got {int((~np.isfinite(arr)).sum())} NaN/Inf entries"
        )
    return arr


def _check_coeff(coeff: object) -> np.ndarray:
    a = _check_nodal("coeff", coeff)
    if np.any(a <= 0):
        raise ValueError(f"coeff: expected strictly positive values, got minimum {a.min()}")
    return a


def _forcing_interior(forcing: object, shape: tuple[int, int]) -> np.ndarray:
    n = shape[0] - 2
    if isinstance(forcing, np.ndarray):
        return _check_nodal("forcing", forcing, shape)[1:-1, 1:-1]
    f = _check_real("forcing", forcing, positive=False)
    return np.full((n, n), f)


def _check_resolutions(resolutions: object) -> list[int]:
    if isinstance(resolutions, (int, np.integer)) and not isinstance(resolutions, bool):
        resolutions = [resolutions]
    if isinstance(resolutions, (str, bytes)) or not isinstance(resolutions, Iterable):
        raise TypeError(
            f"resolutions: expected a sequence of positive ints, got {type(resolutions).__name__} {resolutions!r}"
        )
    out: list[int] = []
    for r in resolutions:
        if isinstance(r, np.integer):
            r = int(r)
        check_positive_int("resolutions", r)
        if r not in out:
            out.append(r)
    if not out:
        raise ValueError("resolutions: expected at least one resolution, got an empty sequence")
    return out


def _check_fine(fine_resolution: object, resolutions: list[int]) -> int:
    if fine_resolution is None:
        fine = max(resolutions)
    else:
        if isinstance(fine_resolution, np.integer):
            fine_resolution = int(fine_resolution)
        fine = check_positive_int("fine_resolution", fine_resolution)
    if fine < 2:
        raise ValueError(f"fine_resolution: expected an int >= 2 (at least one interior node), got {fine}")
    bad = [r for r in resolutions if fine % r != 0]
    if bad:
        raise ValueError(
            f"resolutions: expected every resolution to divide fine_resolution={fine}, got {bad} that do not"
        )
    return fine


# --------------------------------------------------------------------------- coefficient


def sample_coefficient(
    n_samples: int,
    n_nodes: int,
    *,
    rng: np.random.Generator,
    alpha: float = 2.0,
    tau: float = 3.0,
    high: float = 12.0,
    low: float = 3.0,
) -> np.ndarray:
    """Draw thresholded Gaussian-random-field coefficients.

    The field ``U`` has covariance ``(-Laplacian + tau^2 I)^(-alpha)`` with zero-Neumann
    boundary conditions and is sampled in the cosine basis: with ``s = n_nodes``,
    ``coef[k1, k2] = tau^(alpha-1) (pi^2 (k1^2 + k2^2) + tau^2)^(-alpha/2)``,
    ``L = s * coef * xi`` with ``xi ~ N(0, 1)`` of shape ``(s, s)``, ``L[0, 0] = 0`` (zero mean),
    ``U = idctn(L, type=2, norm="ortho")``. The coefficient is ``high`` where ``U >= 0`` and
    ``low`` where ``U < 0``.

    Args:
        n_samples: number of fields to draw (drawn one after another from ``rng``).
        n_nodes: nodes per side, ``S + 1`` for a grid of spacing ``1/S`` incl. both boundaries.
        rng: the ``numpy.random.Generator`` to draw ``xi`` from.
        alpha, tau: covariance exponent and inverse length scale (positive).
        high, low: coefficient values on the two phases (positive).

    Returns:
        ``(n_samples, n_nodes, n_nodes)`` float64 array.
    """
    n_samples = check_positive_int("n_samples", n_samples)
    n_nodes = check_positive_int("n_nodes", n_nodes)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    p = _check_params(alpha, tau, high, low)
    s = n_nodes
    k = np.arange(s, dtype=np.float64)
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    coef = p["tau"] ** (p["alpha"] - 1.0) * (np.pi**2 * k2 + p["tau"] ** 2) ** (-p["alpha"] / 2.0)
    out = np.empty((n_samples, s, s), dtype=np.float64)
    for i in range(n_samples):
        xi = rng.standard_normal((s, s))
        spec = s * coef * xi
        spec[0, 0] = 0.0
        field = scipy.fft.idctn(spec, type=2, norm="ortho")
        out[i] = np.where(field >= 0, p["high"], p["low"])
    return out


# --------------------------------------------------------------------------- solver


def _face_coefficients(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arithmetic face averages: ``ax[i, j]`` between nodes (i, j), (i+1, j); ``ay`` likewise along y."""
    ax = 0.5 * (a[1:, :] + a[:-1, :])  # (S, S+1)
    ay = 0.5 * (a[:, 1:] + a[:, :-1])  # (S+1, S)
    return ax, ay


def _assemble(a: np.ndarray) -> scipy.sparse.csc_matrix:
    """Five-point matrix on the ``(S-1)^2`` interior unknowns, row-major (x slow, y fast)."""
    S = a.shape[0] - 1
    n = S - 1
    inv_h2 = float(S) ** 2
    ax, ay = _face_coefficients(a)
    east = ax[1:S, 1:S]
    west = ax[0 : S - 1, 1:S]
    north = ay[1:S, 1:S]
    south = ay[1:S, 0 : S - 1]
    idx = np.arange(n * n).reshape(n, n)
    cx = -inv_h2 * east[:-1, :].ravel()  # coupling (i, j) <-> (i+1, j)
    cy = -inv_h2 * north[:, :-1].ravel()  # coupling (i, j) <-> (i, j+1)
    rows = np.concatenate(
        [idx.ravel(), idx[:-1, :].ravel(), idx[1:, :].ravel(), idx[:, :-1].ravel(), idx[:, 1:].ravel()]
    )
    cols = np.concatenate(
        [idx.ravel(), idx[1:, :].ravel(), idx[:-1, :].ravel(), idx[:, 1:].ravel(), idx[:, :-1].ravel()]
    )
    vals = np.concatenate([inv_h2 * (east + west + north + south).ravel(), cx, cx, cy, cy])
    return scipy.sparse.csc_matrix((vals, (rows, cols)), shape=(n * n, n * n))


def darcy_system(coeff: np.ndarray, forcing: float | np.ndarray = 1.0) -> tuple[scipy.sparse.csr_matrix, np.ndarray]:
    """The linear system ``A u = f`` that :func:`solve_darcy` solves, for use with iterative solvers.

    ``A`` is the symmetric positive definite five-point matrix on the ``(S-1)^2`` interior nodes
    (row-major: ``x`` slow, ``y`` fast; the unknown of node ``(i, j)`` is ``u[i, j]`` for
    ``i, j = 1..S-1``), ``f`` the matching right-hand side.
    """
    a = _check_coeff(coeff)
    return _assemble(a).tocsr(), _forcing_interior(forcing, a.shape).ravel()


def solve_darcy(coeff: np.ndarray, forcing: float | np.ndarray = 1.0) -> np.ndarray:
    """Solve ``-div(a grad u) = f`` on ``(0, 1)^2`` with ``u = 0`` on the boundary.

    Five-point finite differences on the node grid ``x_i = i/S``, ``i = 0..S``, with arithmetic
    face averages of ``a``; the interior system is solved with a sparse direct LU (SuperLU).

    Args:
        coeff: ``(S+1, S+1)`` nodal values of ``a`` incl. the boundary nodes, strictly positive.
        forcing: a float (constant ``f``) or an ``(S+1, S+1)`` nodal array of ``f`` (only its
            interior values are used).

    Returns:
        ``(S+1, S+1)`` float64 array of ``u`` at all nodes, exactly zero on the boundary.
    """
    a = _check_coeff(coeff)
    rhs = _forcing_interior(forcing, a.shape)
    S = a.shape[0] - 1
    A = _assemble(a)
    lu = scipy.sparse.linalg.splu(
        A, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True}
    )
    u = np.zeros((S + 1, S + 1), dtype=np.float64)
    u[1:-1, 1:-1] = lu.solve(rhs.ravel()).reshape(S - 1, S - 1)
    return u


def darcy_residual(coeff: np.ndarray, u: np.ndarray, forcing: float | np.ndarray = 1.0) -> np.ndarray:
    """Discrete residual ``-div_h(a grad_h u) - f`` of the five-point scheme at interior nodes.

    Applies the same stencil as :func:`solve_darcy` directly (no matrix), using the given
    boundary values of ``u``.

    Args:
        coeff: ``(S+1, S+1)`` nodal coefficient.
        u: ``(S+1, S+1)`` nodal solution.
        forcing: float or ``(S+1, S+1)`` nodal array.

    Returns:
        ``(S-1, S-1)`` float64 array at the interior nodes ``i, j = 1..S-1``.
    """
    a = _check_coeff(coeff)
    uu = _check_nodal("u", u, a.shape)
    f = _forcing_interior(forcing, a.shape)
    S = a.shape[0] - 1
    ax, ay = _face_coefficients(a)
    gx = (uu[1:, :] - uu[:-1, :]) * ax  # flux-like differences on x faces, (S, S+1)
    gy = (uu[:, 1:] - uu[:, :-1]) * ay  # (S+1, S)
    div = (gx[1:, 1:-1] - gx[:-1, 1:-1]) + (gy[1:-1, 1:] - gy[1:-1, :-1])
    return -div * float(S) ** 2 - f


# --------------------------------------------------------------------------- restriction


def restrict(field: np.ndarray, resolution: int) -> np.ndarray:
    """Restrict a stored field ``(..., S, S)`` to ``(..., r, r)`` by exact slicing.

    Stored fields hold the nodes ``x_i = i/S``, ``i = 0..S-1``; the coarse grid's nodes
    ``j/r`` are the fine nodes ``i = j * (S // r)``. Requires ``S % r == 0``.
    """
    if not isinstance(field, np.ndarray):
        raise TypeError(f"field: expected a numpy.ndarray, got {type(field).__name__}")
    if field.ndim < 2 or field.shape[-1] != field.shape[-2]:
        raise ValueError(
            f"field: expected an array (..., S, S) with square trailing axes, got shape {field.shape}"
        )
    if isinstance(resolution, np.integer):
        resolution = int(resolution)
    r = check_positive_int("resolution", resolution)
    S = field.shape[-1]
    if S % r != 0:
        raise ValueError(
            f"resolution: expected a divisor of the stored grid size S={S} (S % resolution == 0), got {r}"
        )
    step = S // r
    return field[..., ::step, ::step]


# --------------------------------------------------------------------------- generation


def generate_darcy(
    n_samples: int,
    resolutions: Iterable[int],
    *,
    fine_resolution: int | None = None,
    seed: int = 0,
    alpha: float = 2.0,
    tau: float = 3.0,
    high: float = 12.0,
    low: float = 3.0,
    progress: bool = False,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Generate Darcy-flow pairs ``(a, u)`` at several resolutions (``f = 1``).

    Each sample is drawn on the ``(S+1, S+1)`` nodes of the finest grid ``S = fine_resolution``
    with ``numpy.random.default_rng([seed, i])`` (so sample ``i`` does not depend on
    ``n_samples``), solved once by :func:`solve_darcy` and restricted to each resolution by
    slicing (see the module docstring for the storage convention).

    Args:
        n_samples: number of samples.
        resolutions: resolutions ``r`` to return; each must divide ``fine_resolution``.
        fine_resolution: grid size ``S`` of the solve; defaults to ``max(resolutions)``.
        seed: non-negative int.
        alpha, tau, high, low: coefficient parameters (see :func:`sample_coefficient`).
        progress: show a tqdm progress bar.

    Returns:
        ``{r: (coeff, u)}`` with ``coeff`` and ``u`` float32 arrays of shape ``(n_samples, r, r)``.
    """
    n_samples = check_positive_int("n_samples", n_samples)
    res = _check_resolutions(resolutions)
    S = _check_fine(fine_resolution, res)
    seed = _check_seed(seed)
    p = _check_params(alpha, tau, high, low)

    coeff_fine = np.empty((n_samples, S, S), dtype=np.float32)
    u_fine = np.empty((n_samples, S, S), dtype=np.float32)
    it: Iterable[int] = range(n_samples)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, total=n_samples, desc=f"Darcy S={S}", unit="sample")
    for i in it:
        rng = np.random.default_rng([seed, i])
        a = sample_coefficient(1, S + 1, rng=rng, **p)[0]
        u = solve_darcy(a, 1.0)
        coeff_fine[i] = a[:S, :S]
        u_fine[i] = u[:S, :S]

    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in res:
        if r == S:
            out[r] = (coeff_fine, u_fine)
        else:
            out[r] = (
                np.ascontiguousarray(restrict(coeff_fine, r)),
                np.ascontiguousarray(restrict(u_fine, r)),
            )
    return out


# --------------------------------------------------------------------------- cache


def _cache_params(
    n_samples: int, resolutions: list[int], fine: int, seed: int, p: Mapping[str, float]
) -> dict:
    return {
        "generator": "sciattn.pde_data.darcy",
        "format": _CACHE_FORMAT,
        "n_samples": n_samples,
        "resolutions": sorted(resolutions),
        "fine_resolution": fine,
        "seed": seed,
        "forcing": 1.0,
        **{k: float(p[k]) for k in sorted(p)},
    }


def load_or_generate_darcy(
    cache_dir: str | os.PathLike,
    n_samples: int,
    resolutions: Iterable[int],
    *,
    fine_resolution: int | None = None,
    seed: int = 0,
    progress: bool = False,
    **params: float,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Return :func:`generate_darcy`'s output, cached as one HDF5 file in ``cache_dir``.

    The file ``darcy_<hash>.h5`` is named by a hash of all parameters (``n_samples``, the
    resolutions, ``fine_resolution``, ``seed`` and ``params``, i.e. any of ``alpha``, ``tau``,
    ``high``, ``low`` with :data:`DARCY_DEFAULTS` for the rest). It holds datasets
    ``coeff_{r}`` and ``u_{r}`` of shape ``(n_samples, r, r)`` float32 and every parameter as
    a root attribute. It is written atomically (temporary file in ``cache_dir``, then
    ``os.replace``). When it exists and its attributes equal the request, it is read back
    instead of solving; a file whose attributes differ is regenerated (with a warning).

    Returns:
        ``{r: (coeff, u)}`` as :func:`generate_darcy`.
    """
    unknown = sorted(set(params) - set(DARCY_DEFAULTS))
    if unknown:
        raise TypeError(f"params: expected keywords among {sorted(DARCY_DEFAULTS)}, got unknown {unknown}")
    n_samples = check_positive_int("n_samples", n_samples)
    res = _check_resolutions(resolutions)
    fine = _check_fine(fine_resolution, res)
    seed = _check_seed(seed)
    p = _check_params(**{**DARCY_DEFAULTS, **params})
    meta = _cache_params(n_samples, res, fine, seed, p)
    return cached_pairs(
        cache_dir, "darcy", meta, res,
        lambda: generate_darcy(n_samples, res, fine_resolution=fine, seed=seed, progress=progress, **p),
        input_key="coeff",
    )
