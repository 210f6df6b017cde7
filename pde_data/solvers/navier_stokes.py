"""2-D incompressible Navier–Stokes (vorticity form) data generator — FNO's ``ns_2d.py`` scheme.

PDE
    ``w_t + u . grad w = nu Laplacian w + f`` on the unit torus, ``u = (psi_y, -psi_x)``,
    ``-Laplacian psi = w``. FNO's data: ``nu = 1e-3`` (also ``1e-4``, ``1e-5``), forcing
    ``f = 0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y)))`` (:func:`fno_forcing`), ``dt = 1e-4``, solved
    on 256^2 and downsampled to 64^2, one snapshot per time unit.

Initial vorticity
    FNO's ``GaussianRF(2, s, alpha=2.5, tau=7)``: ``sigma = tau^(alpha - 1) = 7^1.5``,
    ``sqrt_eig = s^2 sqrt(2) sigma (4 pi^2 |k|^2 + tau^2)^(-alpha/2)``, ``sqrt_eig[0, 0] = 0``,
    ``w0 = Re ifft2(sqrt_eig (xi_r + i xi_i))`` (:func:`sample_vorticity`).

Scheme (per step, spectral on ``x_i = i / s``, axis 0 = x, axis 1 = y)
    ``psi_h = w_h / (4 pi^2 |k|^2)`` (the ``k = 0`` divisor set to 1); ``u = psi_y``, ``v = -psi_x``
    and ``grad w`` by spectral differentiation; ``F = u w_x + v w_y`` in physical space; ``F_h``
    dealiased by the 2/3 rule (``|k_x|, |k_y| <= (2/3) (s/2)``); Crank–Nicolson on viscosity,
    explicit nonlinear term and forcing::

        w_h <- (-dt F_h + dt f_h + (1 - dt nu lap / 2) w_h) / (1 + dt nu lap / 2),  lap = 4 pi^2 |k|^2

    ``steps = ceil(t_final / dt)``, a snapshot every ``steps // record_steps`` steps. One deliberate
    difference from ``ns_2d.py``: there ``lap[0, 0] = 1`` also enters the viscous factor, which
    damps a non-zero mean vorticity by ``(1 - dt nu / 2) / (1 + dt nu / 2)`` per step; here the mean
    mode uses ``|k| = 0`` and is conserved. FNO's fields have zero mean, so nothing else changes.

Reuse
    The operators are small functions over a :class:`SpectralGrid`: :func:`velocity`,
    :func:`gradient`, :func:`advection_hat` and :func:`advect_diffuse_step`, which advances any
    scalar ``c`` (vorticity or a passive tracer) one CN/explicit step given a velocity field.

Storage convention
    FNO layout: ``w0`` ``(n, r, r)``, ``u`` ``(n, r, r, T)`` (time last, ``u[..., k]`` at
    ``t = (k + 1) t_final / T``); restriction from the solve grid is ``[:, ::S // r, ::S // r]``.

Regime of the defaults (against the papers' protocols; presets in :mod:`sciattn.pde_data.presets`)
    :data:`NS_DEFAULTS` are FNO's first setting, ``nu = 1e-3`` to ``T = 50`` (``ns_V1e-3_N5000_T50``): the
    most viscous of its three, where the forced flow is smooth. The setting most papers benchmark on (FNO's
    ``NavierStokes_V1e-5_N1200_T20``, also Transolver's and NSL's) is ``nu = 1e-5``, ``T = 20``, stored at
    64^2 from a 256^2 solve, 10 snapshots in and 10 out, 1000 / 200 samples: preset ``fno_navier_stokes``.
    Without ``fine_resolution`` the solve grid is the finest requested resolution, not FNO's 256.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from sciattn._checks import check_positive_int

from .._hdf5 import cached_pairs
from .burgers import _as_field, _check_fine, _meta, _n_steps, _small_fft_threads
from .darcy import _check_real, _check_resolutions, _check_seed

__all__ = [
    "NS_DEFAULTS",
    "SpectralGrid",
    "spectral_grid",
    "velocity",
    "gradient",
    "advection_hat",
    "advect_diffuse_step",
    "navier_stokes_step",
    "sample_vorticity",
    "fno_forcing",
    "solve_navier_stokes",
    "generate_navier_stokes",
    "load_or_generate_navier_stokes",
]

#: FNO ``ns_V1e-3_N5000_T50`` parameters (``dt`` of ``ns_2d.py``; one snapshot per time unit).
NS_DEFAULTS: dict[str, float] = {
    "nu": 1e-3,
    "t_final": 50.0,
    "dt": 1e-4,
    "record_steps": 50,
    "alpha": 2.5,
    "tau": 7.0,
}

_FORCING = "0.1*(sin(2*pi*(x+y))+cos(2*pi*(x+y)))"


# --------------------------------------------------------------------------- spectral operators


@dataclass(frozen=True)
class SpectralGrid:
    """Wavenumber arrays of an ``s x s`` periodic grid in the ``rfft2`` layout ``(s, s//2 + 1)``.

    ``kx`` ``(s, 1)`` and ``ky`` ``(1, s//2 + 1)`` are the angular wavenumbers ``2 pi k`` of first
    derivatives, 0 on the Nyquist row/column (a real field's Nyquist mode has no odd derivative; this
    reproduces ``ns_2d.py``'s full-spectrum ``ifft(...).real``); ``lap`` is ``4 pi^2 |k|^2`` (Nyquist
    included, 0 at ``k = 0``); ``lap_poisson`` the same with 1 at ``k = 0``; ``dealias`` the float
    2/3-rule mask.
    """

    s: int
    kx: torch.Tensor
    ky: torch.Tensor
    lap: torch.Tensor
    lap_poisson: torch.Tensor
    dealias: torch.Tensor


def spectral_grid(s: int, *, device: torch.device | str | None = None) -> SpectralGrid:
    """Build the float64 :class:`SpectralGrid` of an even ``s`` (FNO's wavenumber convention)."""
    s = check_positive_int("s", s)
    if s < 4 or s % 2:
        raise ValueError(f"s: expected an even grid size >= 4, got {s}")
    k_max = s // 2
    mx = torch.fft.fftfreq(s, 1.0 / s, dtype=torch.float64, device=device)  # 0..k_max-1, -k_max..-1
    my = torch.arange(k_max + 1, dtype=torch.float64, device=device)
    lap = 4.0 * math.pi**2 * (mx[:, None] ** 2 + my[None, :] ** 2)
    kx = torch.where(mx.abs() == k_max, 0.0, 2.0 * math.pi * mx)[:, None]
    ky = torch.where(my == k_max, 0.0, 2.0 * math.pi * my)[None, :]
    lap_poisson = lap.clone()
    lap_poisson[0, 0] = 1.0
    cut = (2.0 / 3.0) * k_max
    dealias = ((mx.abs()[:, None] <= cut) & (my.abs()[None, :] <= cut)).to(torch.float64)
    return SpectralGrid(s, kx, ky, lap, lap_poisson, dealias)


def _irfft2(z: torch.Tensor, s: int) -> torch.Tensor:
    return torch.fft.irfft2(z, s=(s, s))


def velocity(w_h: torch.Tensor, grid: SpectralGrid) -> tuple[torch.Tensor, torch.Tensor]:
    """Velocity ``(u, v) = (psi_y, -psi_x)`` in physical space from the vorticity's ``rfft2``."""
    psi_h = w_h / grid.lap_poisson
    return _irfft2(1j * grid.ky * psi_h, grid.s), _irfft2(-1j * grid.kx * psi_h, grid.s)


def gradient(c_h: torch.Tensor, grid: SpectralGrid) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c_x, c_y)`` in physical space from ``rfft2(c)``."""
    return _irfft2(1j * grid.kx * c_h, grid.s), _irfft2(1j * grid.ky * c_h, grid.s)


def advection_hat(c_h: torch.Tensor, u: torch.Tensor, v: torch.Tensor, grid: SpectralGrid) -> torch.Tensor:
    """Dealiased ``rfft2(u c_x + v c_y)`` (the product formed in physical space)."""
    c_x, c_y = gradient(c_h, grid)
    return torch.fft.rfft2(u * c_x + v * c_y) * grid.dealias


def advect_diffuse_step(
    c_h: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    grid: SpectralGrid,
    *,
    diffusivity: float,
    dt: float,
    source_h: torch.Tensor | None = None,
) -> torch.Tensor:
    """One step of ``c_t + u·grad c = diffusivity Laplacian c + source`` in Fourier space.

    Crank–Nicolson on diffusion, explicit (forward Euler) advection and source, as ``ns_2d.py``.
    ``c_h`` is ``rfft2(c)`` ``(..., s, s//2+1)``, ``u``/``v`` physical ``(..., s, s)``.
    """
    half = 0.5 * dt * diffusivity * grid.lap
    rhs = (1.0 - half) * c_h - dt * advection_hat(c_h, u, v, grid)
    if source_h is not None:
        rhs = rhs + dt * source_h
    return rhs / (1.0 + half)


def navier_stokes_step(
    w_h: torch.Tensor, grid: SpectralGrid, *, nu: float, dt: float, forcing_h: torch.Tensor | None = None
) -> torch.Tensor:
    """Advance the vorticity ``w_h = rfft2(w)`` one ``ns_2d.py`` step."""
    u, v = velocity(w_h, grid)
    return advect_diffuse_step(w_h, u, v, grid, diffusivity=nu, dt=dt, source_h=forcing_h)


# --------------------------------------------------------------------------- fields


def sample_vorticity(
    n: int, s: int, *, rng: np.random.Generator, alpha: float = 2.5, tau: float = 7.0
) -> np.ndarray:
    """FNO's ``GaussianRF(2, s, alpha, tau).sample(n)`` with ``numpy`` normals (see module docstring).

    Normals are drawn per sample as ``rng.standard_normal((s, s, 2))`` (real, imaginary parts).

    Returns:
        ``(n, s, s)`` float64 zero-mean fields.
    """
    n = check_positive_int("n", n)
    s = check_positive_int("s", s)
    if s < 4 or s % 2:
        raise ValueError(f"s: expected an even grid size >= 4, got {s}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    alpha, tau = _check_real("alpha", alpha), _check_real("tau", tau)
    sigma = tau ** (0.5 * (2.0 * alpha - 2.0))
    k = np.fft.fftfreq(s, 1.0 / s)
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    sqrt_eig = s**2 * math.sqrt(2.0) * sigma * (4.0 * np.pi**2 * k2 + tau**2) ** (-alpha / 2.0)
    sqrt_eig[0, 0] = 0.0
    out = np.empty((n, s, s), dtype=np.float64)
    for i in range(n):
        xi = rng.standard_normal((s, s, 2))
        out[i] = np.fft.ifft2(sqrt_eig * (xi[..., 0] + 1j * xi[..., 1])).real
    return out


def fno_forcing(s: int) -> np.ndarray:
    """``0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y)))`` on ``linspace(0, 1, s+1)[:-1]`` (ij), ``(s, s)``."""
    s = check_positive_int("s", s)
    x = np.linspace(0.0, 1.0, s + 1)[:-1]
    X, Y = np.meshgrid(x, x, indexing="ij")
    return 0.1 * (np.sin(2.0 * np.pi * (X + Y)) + np.cos(2.0 * np.pi * (X + Y)))


# --------------------------------------------------------------------------- solver


def _schedule(t_final: float, dt: float, record_steps: int) -> tuple[int, int]:
    """``(steps, every)``: ``steps = ceil(t_final / dt)``, a snapshot every ``steps // record_steps``."""
    steps = _n_steps(t_final, dt)
    if steps % record_steps:
        raise ValueError(
            f"record_steps: expected a divisor of the number of steps ceil(t_final/dt)={steps}, got {record_steps}"
        )
    return steps, steps // record_steps


def solve_navier_stokes(
    w0: torch.Tensor | np.ndarray,
    *,
    nu: float,
    t_final: float,
    dt: float,
    forcing: torch.Tensor | np.ndarray | None = None,
    record_steps: int = 1,
) -> tuple[torch.Tensor | np.ndarray, torch.Tensor | np.ndarray]:
    """Integrate the vorticity equation with ``ns_2d.py``'s scheme (batched, float64).

    Args:
        w0: ``(s, s)`` or ``(B, s, s)`` initial vorticity on ``x_i = i / s`` (axis 0 = x), ``s`` even.
        nu: viscosity (``>= 0``).
        t_final, dt: ``steps = ceil(t_final / dt)`` steps of size ``dt`` (a ratio within 1e-9 of an
            integer counts as that integer).
        forcing: ``None`` (unforced) or an ``(s, s)`` / ``(B, s, s)`` field, e.g. :func:`fno_forcing`.
        record_steps: number of snapshots; must divide ``steps``.

    Returns:
        ``(sol, t)``: ``sol`` ``(..., s, s, record_steps)`` (time last, like ``w0`` with a time axis)
        and ``t`` ``(record_steps,)``; numpy if ``w0`` is numpy, else float64 tensors.
    """
    w, was_numpy = _as_field("w0", w0, (2, 3), "(s, s) or (B, s, s)")
    if w.shape[-1] != w.shape[-2]:
        raise ValueError(f"w0: expected a square field (s, s) or (B, s, s), got shape {tuple(w.shape)}")
    nu = _check_real("nu", nu, positive=False)
    if nu < 0:
        raise ValueError(f"nu: expected a non-negative number, got {nu}")
    t_final, dt = _check_real("t_final", t_final), _check_real("dt", dt)
    record_steps = check_positive_int("record_steps", record_steps)
    s = w.shape[-1]
    grid = spectral_grid(s, device=w.device)
    f_h = None
    if forcing is not None:
        f, _ = _as_field("forcing", forcing, (2, 3), "(s, s) or (B, s, s)")
        if f.shape[-2:] != w.shape[-2:] or (f.dim() == 3 and (w.dim() != 3 or f.shape[0] != w.shape[0])):
            raise ValueError(f"forcing: expected shape ({s}, {s}) or {tuple(w.shape)}, got {tuple(f.shape)}")
        f_h = torch.fft.rfft2(f.to(w.device))
    steps, every = _schedule(t_final, dt, record_steps)
    sol = torch.empty(*w.shape, record_steps, dtype=torch.float64, device=w.device)
    with _small_fft_threads(w.numel()):
        w_h = torch.fft.rfft2(w)
        for j in range(steps):
            w_h = navier_stokes_step(w_h, grid, nu=nu, dt=dt, forcing_h=f_h)
            if (j + 1) % every == 0:
                sol[..., (j + 1) // every - 1] = _irfft2(w_h, s)
    t = torch.arange(1, record_steps + 1, dtype=torch.float64) * (every * dt)
    return (sol.numpy(), t.numpy()) if was_numpy else (sol, t)


# --------------------------------------------------------------------------- generation


def _check_params(nu: object, t_final: object, dt: object, record_steps: object, alpha: object, tau: object):
    nu_ = _check_real("nu", nu, positive=False)
    if nu_ < 0:
        raise ValueError(f"nu: expected a non-negative number, got {nu_}")
    if isinstance(record_steps, np.integer):
        record_steps = int(record_steps)
    return {
        "nu": nu_,
        "t_final": _check_real("t_final", t_final),
        "dt": _check_real("dt", dt),
        "record_steps": check_positive_int("record_steps", record_steps),
        "alpha": _check_real("alpha", alpha),
        "tau": _check_real("tau", tau),
    }


def generate_navier_stokes(
    n_samples: int,
    resolutions: Iterable[int],
    *,
    fine_resolution: int | None = None,
    seed: int = 0,
    nu: float = 1e-3,
    t_final: float = 50.0,
    record_steps: int = 50,
    dt: float = 1e-4,
    alpha: float = 2.5,
    tau: float = 7.0,
    batch_size: int = 16,
    progress: bool = False,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Generate FNO Navier–Stokes pairs ``(w0, u)`` at several resolutions (forcing :func:`fno_forcing`).

    Sample ``i`` draws ``w0`` on the ``S = fine_resolution`` grid with
    ``numpy.random.default_rng([seed, i])`` (independent of ``n_samples``); samples are solved once
    at ``S`` in batches of ``batch_size`` and restricted by slicing (batched FFTs make a solution
    independent of its batch neighbours up to float64 round-off). FNO solved at ``S = 256``.

    Returns:
        ``{r: (w0, u)}`` float32, ``w0`` ``(n_samples, r, r)``, ``u`` ``(n_samples, r, r, record_steps)``.
    """
    n_samples = check_positive_int("n_samples", n_samples)
    res = _check_resolutions(resolutions)
    S = _check_fine(fine_resolution, res, even=True)
    seed = _check_seed(seed)
    batch_size = check_positive_int("batch_size", batch_size)
    p = _check_params(nu, t_final, dt, record_steps, alpha, tau)
    _schedule(p["t_final"], p["dt"], p["record_steps"])
    w0 = np.stack(
        [
            sample_vorticity(1, S, rng=np.random.default_rng([seed, i]), alpha=p["alpha"], tau=p["tau"])[0]
            for i in range(n_samples)
        ]
    )
    forcing = fno_forcing(S)
    u = np.empty((n_samples, S, S, p["record_steps"]), dtype=np.float32)
    starts: Iterable[int] = range(0, n_samples, batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, total=-(-n_samples // batch_size), desc=f"Navier-Stokes S={S}", unit="batch")
    for s0 in starts:
        sl = slice(s0, s0 + batch_size)
        kw = {k: p[k] for k in ("nu", "t_final", "dt", "record_steps")}
        u[sl] = solve_navier_stokes(w0[sl], forcing=forcing, **kw)[0]
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in res:
        k = S // r
        out[r] = (
            np.ascontiguousarray(w0[:, ::k, ::k], dtype=np.float32),
            np.ascontiguousarray(u[:, ::k, ::k]),
        )
    return out


# --------------------------------------------------------------------------- cache


def load_or_generate_navier_stokes(
    cache_dir: str | os.PathLike,
    n_samples: int,
    resolutions: Iterable[int],
    *,
    fine_resolution: int | None = None,
    seed: int = 0,
    batch_size: int = 16,
    progress: bool = False,
    **params: float,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Return :func:`generate_navier_stokes`'s output, cached as one HDF5 file in ``cache_dir``.

    The file ``navier_stokes_<hash>.h5`` is named by a hash of ``n_samples``, the resolutions,
    ``fine_resolution``, ``seed`` and ``params`` (any of :data:`NS_DEFAULTS`, defaults for the
    rest); it holds ``a_{r}`` ``(n, r, r)``, ``u_{r}`` ``(n, r, r, T)`` float32, ``t`` ``(T,)`` and
    every parameter as a root attribute, written atomically. A file whose attributes differ from
    the request is regenerated with a warning.
    """
    unknown = sorted(set(params) - set(NS_DEFAULTS))
    if unknown:
        raise TypeError(f"params: expected keywords among {sorted(NS_DEFAULTS)}, got unknown {unknown}")
    n_samples = check_positive_int("n_samples", n_samples)
    res = _check_resolutions(resolutions)
    fine = _check_fine(fine_resolution, res, even=True)
    seed = _check_seed(seed)
    p = _check_params(**{**NS_DEFAULTS, **params})
    meta = _meta("navier_stokes", n_samples, res, fine, seed, {**p, "forcing": _FORCING})
    _, every = _schedule(p["t_final"], p["dt"], p["record_steps"])
    t = np.arange(1, p["record_steps"] + 1) * (every * p["dt"])
    kw = {"fine_resolution": fine, "seed": seed, "batch_size": batch_size, "progress": progress}
    make = lambda: generate_navier_stokes(n_samples, res, **kw, **p)  # noqa: E731
    return cached_pairs(cache_dir, "navier_stokes", meta, res, make, extra={"t": t})
