"""Coupled multiphysics data: 2-D Navier–Stokes with a buoyant scalar (Boussinesq), CoDA-NO style.

PDEs on the unit torus (axis 0 = x, axis 1 = y, gravity along ``-y``)::

    w_t + u . grad w     = nu Laplacian w + f + beta theta_x     (vorticity, u = (psi_y, -psi_x),
    theta_t + u . grad theta = kappa Laplacian theta + s          -Laplacian psi = w)

``beta theta_x`` is the curl of the buoyancy force ``(0, beta theta)``: warm fluid (``theta > 0``)
rises. ``beta = 0`` makes ``theta`` a passive scalar.

Choice of the Rayleigh–Bénard-like variant
    Rayleigh–Bénard convection heats a layer from below: the temperature is a linear background
    ``-G y`` plus a perturbation. That background is not periodic, and the periodic alternative
    (keep ``-G y`` implicit and add ``+G v`` to the ``theta`` equation, "homogeneous" convection) has
    exponentially growing elevator modes. Here the whole temperature ``theta`` is periodic and
    *active* through ``beta``: warm and cold blobs rise and sink, stir the flow and are mixed by it.
    With no source the mean of ``theta`` is conserved and its variance decays; the optional source
    ``s(x, y) = source_amplitude sin(2 pi x)`` (heating at ``x = 1/4``, cooling at ``3/4``) keeps
    driving rising fluid near ``x = 1/4`` and sinking fluid near ``x = 3/4``.

Scheme
    The vorticity and the scalar are advanced together with :mod:`navier_stokes`'s operators: per
    step the velocity comes from ``w`` (:func:`~.navier_stokes.velocity`), then both fields take one
    :func:`~.navier_stokes.advect_diffuse_step` (Crank–Nicolson diffusion, forward-Euler advection
    dealiased by the 2/3 rule, explicit sources) with the same velocity; the vorticity source is
    ``f_h + beta i 2 pi k_x theta_h`` at the old time level. With ``beta = 0`` the vorticity is the
    :func:`~.navier_stokes.solve_navier_stokes` result bit for bit.

Data sets (``system``)
    * ``"ns"`` (pretraining): plain Navier–Stokes, variables ``("u", "v", "w")``.
    * ``"boussinesq"`` (few-shot): the active scalar, variables ``("u", "v", "w", "theta")``.

    Sample ``i`` draws ``w0`` and then (Boussinesq) ``theta0`` from FNO's Gaussian random field
    (:func:`~.navier_stokes.sample_vorticity`, ``alpha``, ``tau``) on the ``S = fine_resolution``
    grid with ``numpy.random.default_rng([seed, system_index, i])`` (``ns`` 0, ``boussinesq`` 1), so
    the two sets never share initial fields. It is integrated to ``t_start`` (spin-up); the pair is
    ``x`` = state at ``t_start`` and ``y`` = state at ``t_start + delta_t`` (one-step map). Forcing
    ``f`` is FNO's (:func:`~.navier_stokes.fno_forcing`) or none. Velocities are computed spectrally
    on the solve grid, and every field is restricted by slicing ``[..., ::S // r, ::S // r]``.

Shapes:
    solver: ``w0``, ``theta0`` ``(s, s)`` or ``(B, s, s)`` -> ``(..., s, s, record_steps)`` (time last).
    data: ``pairs[r] = (x, y)`` float32 ``(N, V, r, r)``, ``V = len(variables)``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import torch

from sciattn._checks import check_choice, check_positive_int

from .._hdf5 import cached_pairs
from .burgers import _as_field, _check_fine, _meta, _small_fft_threads
from .darcy import _check_real, _check_resolutions, _check_seed
from .navier_stokes import (
    SpectralGrid,
    _irfft2,
    _schedule,
    advect_diffuse_step,
    fno_forcing,
    sample_vorticity,
    spectral_grid,
    velocity,
)

__all__ = [
    "SYSTEMS",
    "COUPLED_DEFAULTS",
    "coupled_step",
    "solve_coupled_navier_stokes",
    "generate_coupled_navier_stokes",
    "load_or_generate_coupled_navier_stokes",
    "CoupledPairs",
]

#: Variables of each data set, in channel order.
SYSTEMS: dict[str, tuple[str, ...]] = {"ns": ("u", "v", "w"), "boussinesq": ("u", "v", "w", "theta")}
_SYSTEM_INDEX = {"ns": 0, "boussinesq": 1}

#: Default parameters of each system (``forcing`` is ``"fno"`` or ``"none"``).
COUPLED_DEFAULTS: dict[str, dict[str, float | str]] = {
    "ns": {"nu": 1e-3, "dt": 2e-3, "t_start": 1.0, "delta_t": 0.5, "alpha": 2.5, "tau": 7.0, "forcing": "fno"},
}
COUPLED_DEFAULTS["boussinesq"] = {**COUPLED_DEFAULTS["ns"], "kappa": 1e-3, "beta": 0.2, "source_amplitude": 0.0}


class CoupledPairs(NamedTuple):
    """``pairs[r] = (x, y)`` float32 ``(N, V, r, r)``; ``variables`` names the ``V`` channels;
    ``times = (t_start, t_start + delta_t)``."""

    pairs: dict[int, tuple[np.ndarray, np.ndarray]]
    variables: tuple[str, ...]
    times: tuple[float, float]


# --------------------------------------------------------------------------- solver


def coupled_step(
    w_h: torch.Tensor,
    theta_h: torch.Tensor | None,
    grid: SpectralGrid,
    *,
    nu: float,
    kappa: float,
    beta: float,
    dt: float,
    forcing_h: torch.Tensor | None = None,
    source_h: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Advance ``(rfft2(w), rfft2(theta))`` one step; ``theta_h = None`` is plain Navier–Stokes.

    Both fields use the velocity of ``w_h`` at the old time; the vorticity source is
    ``forcing_h + beta i k_x theta_h`` (explicit). Shapes ``(..., s, s//2 + 1)``.
    """
    u, v = velocity(w_h, grid)
    src = forcing_h
    if theta_h is not None and beta != 0.0:
        buoyancy = (beta * 1j) * grid.kx * theta_h
        src = buoyancy if src is None else src + buoyancy
    w_new = advect_diffuse_step(w_h, u, v, grid, diffusivity=nu, dt=dt, source_h=src)
    if theta_h is None:
        return w_new, None
    return w_new, advect_diffuse_step(theta_h, u, v, grid, diffusivity=kappa, dt=dt, source_h=source_h)


def _non_negative(name: str, value: object) -> float:
    v = _check_real(name, value, positive=False)
    if v < 0:
        raise ValueError(f"{name}: expected a non-negative number, got {v}")
    return v


def _field_hat(name: str, value: object, w: torch.Tensor) -> torch.Tensor:
    """``rfft2`` of a field shaped ``(s, s)`` or like ``w``."""
    f, _ = _as_field(name, value, (2, 3), "(s, s) or (B, s, s)")
    s = w.shape[-1]
    if f.shape[-2:] != w.shape[-2:] or (f.dim() == 3 and (w.dim() != 3 or f.shape[0] != w.shape[0])):
        raise ValueError(f"{name}: expected shape ({s}, {s}) or {tuple(w.shape)}, got {tuple(f.shape)}")
    return torch.fft.rfft2(f.to(w.device))


def solve_coupled_navier_stokes(
    w0: torch.Tensor | np.ndarray,
    theta0: torch.Tensor | np.ndarray | None = None,
    *,
    nu: float,
    t_final: float,
    dt: float,
    kappa: float = 0.0,
    beta: float = 0.0,
    forcing: torch.Tensor | np.ndarray | None = None,
    source: torch.Tensor | np.ndarray | None = None,
    record_steps: int = 1,
) -> tuple:
    """Integrate the vorticity / scalar system of the module docstring (batched, float64).

    Args:
        w0: ``(s, s)`` or ``(B, s, s)`` initial vorticity on ``x_i = i / s``, ``s`` even.
        theta0: initial scalar shaped like ``w0``, or ``None`` (plain Navier–Stokes).
        nu, kappa: viscosity and scalar diffusivity (``>= 0``).
        t_final, dt: ``ceil(t_final / dt)`` steps of size ``dt``.
        beta: buoyancy coefficient (any real; needs ``theta0``).
        forcing: ``None`` or an ``(s, s)`` / ``(B, s, s)`` vorticity forcing ``f``.
        source: ``None`` or a scalar source ``s`` shaped like ``forcing`` (needs ``theta0``).
        record_steps: number of equally spaced snapshots; must divide the number of steps.

    Returns:
        ``(w, theta, t)``: ``w`` ``(..., s, s, record_steps)``, ``theta`` the same or ``None``,
        ``t`` ``(record_steps,)``; numpy if ``w0`` is numpy, else float64 tensors.
    """
    w, was_numpy = _as_field("w0", w0, (2, 3), "(s, s) or (B, s, s)")
    if w.shape[-1] != w.shape[-2]:
        raise ValueError(f"w0: expected a square field (s, s) or (B, s, s), got shape {tuple(w.shape)}")
    nu, kappa = _non_negative("nu", nu), _non_negative("kappa", kappa)
    beta = _check_real("beta", beta, positive=False)
    t_final, dt = _check_real("t_final", t_final), _check_real("dt", dt)
    record_steps = check_positive_int("record_steps", record_steps)
    s = w.shape[-1]
    grid = spectral_grid(s, device=w.device)
    th_h = None
    if theta0 is not None:
        th, _ = _as_field("theta0", theta0, (2, 3), "(s, s) or (B, s, s)")
        if th.shape != w.shape:
            raise ValueError(f"theta0: expected the shape of w0 {tuple(w.shape)}, got {tuple(th.shape)}")
        th_h = torch.fft.rfft2(th.to(w.device))
    elif beta != 0.0 or source is not None:
        bad = "beta" if beta != 0.0 else "source"
        got = beta if bad == "beta" else "a field"
        raise ValueError(f"{bad}: expected {'0' if bad == 'beta' else 'None'} without a scalar (theta0=None), got {got}")
    f_h = None if forcing is None else _field_hat("forcing", forcing, w)
    s_h = None if source is None else _field_hat("source", source, w)
    steps, every = _schedule(t_final, dt, record_steps)
    w_sol = torch.empty(*w.shape, record_steps, dtype=torch.float64, device=w.device)
    th_sol = None if th_h is None else torch.empty_like(w_sol)
    w_h = torch.fft.rfft2(w)
    with _small_fft_threads(w.numel()):
        for j in range(steps):
            w_h, th_h = coupled_step(
                w_h, th_h, grid, nu=nu, kappa=kappa, beta=beta, dt=dt, forcing_h=f_h, source_h=s_h
            )
            if (j + 1) % every == 0:
                k = (j + 1) // every - 1
                w_sol[..., k] = _irfft2(w_h, s)
                if th_sol is not None:
                    th_sol[..., k] = _irfft2(th_h, s)
    t = torch.arange(1, record_steps + 1, dtype=torch.float64) * (every * dt)
    if was_numpy:
        return w_sol.numpy(), None if th_sol is None else th_sol.numpy(), t.numpy()
    return w_sol, th_sol, t


# --------------------------------------------------------------------------- generation


def _steps_of(name: str, span: float, dt: float, *, allow_zero: bool = False) -> int:
    q = span / dt
    n = round(q)
    if abs(q - n) > 1e-9 * max(1.0, q) or (n == 0 and not allow_zero):
        raise ValueError(f"{name}: expected a {'non-negative' if allow_zero else 'positive'} multiple of dt={dt}, got {span}")
    return n


def _check_system_params(system: str, params: dict) -> dict:
    """Validate ``params`` (overriding the system's defaults); unknown keys name the allowed ones."""
    check_choice("system", system, list(SYSTEMS))
    defaults = COUPLED_DEFAULTS[system]
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise TypeError(f"params: expected keywords among {sorted(defaults)} for system={system!r}, got unknown {unknown}")
    p = {**defaults, **params}
    out: dict[str, float | str] = {
        "nu": _non_negative("nu", p["nu"]),
        "dt": _check_real("dt", p["dt"]),
        "t_start": _non_negative("t_start", p["t_start"]),
        "delta_t": _check_real("delta_t", p["delta_t"]),
        "alpha": _check_real("alpha", p["alpha"]),
        "tau": _check_real("tau", p["tau"]),
        "forcing": check_choice("forcing", p["forcing"], ["fno", "none"]),
    }
    if system == "boussinesq":
        out["kappa"] = _non_negative("kappa", p["kappa"])
        out["beta"] = _check_real("beta", p["beta"], positive=False)
        out["source_amplitude"] = _check_real("source_amplitude", p["source_amplitude"], positive=False)
    _steps_of("t_start", out["t_start"], out["dt"], allow_zero=True)
    _steps_of("delta_t", out["delta_t"], out["dt"])
    return out


def _state(w_h: torch.Tensor, th_h: torch.Tensor | None, grid: SpectralGrid) -> np.ndarray:
    """``(B, V, s, s)`` float32 stack of ``u, v, w (, theta)`` on the solve grid."""
    u, v = velocity(w_h, grid)
    fields = [u, v, _irfft2(w_h, grid.s)] + ([] if th_h is None else [_irfft2(th_h, grid.s)])
    return torch.stack(fields, dim=1).numpy().astype(np.float32)


def generate_coupled_navier_stokes(
    n_samples: int,
    resolutions: Iterable[int],
    *,
    system: str = "ns",
    fine_resolution: int | None = None,
    seed: int = 0,
    batch_size: int = 32,
    progress: bool = False,
    **params: float | str,
) -> CoupledPairs:
    """One-step pairs ``(state(t_start), state(t_start + delta_t))`` of ``system`` at several resolutions.

    ``params`` override :data:`COUPLED_DEFAULTS` ``[system]``: ``nu``, ``dt``, ``t_start`` (a
    non-negative multiple of ``dt``), ``delta_t`` (a positive multiple of ``dt``), ``alpha``,
    ``tau``, ``forcing`` (``"fno"`` / ``"none"``) and, for ``"boussinesq"``, ``kappa``, ``beta``,
    ``source_amplitude``. Samples are solved once at ``S = fine_resolution`` (default the largest
    resolution, even) in batches of ``batch_size`` (a sample does not depend on its batch
    neighbours beyond float64 round-off) and restricted by slicing.

    Returns:
        :class:`CoupledPairs` with ``pairs[r] = (x, y)`` float32 ``(n_samples, V, r, r)``.
    """
    n_samples = check_positive_int("n_samples", n_samples)
    res = _check_resolutions(resolutions)
    S = _check_fine(fine_resolution, res, even=True)
    seed = _check_seed(seed)
    batch_size = check_positive_int("batch_size", batch_size)
    p = _check_system_params(system, params)
    bous = system == "boussinesq"
    n0 = _steps_of("t_start", p["t_start"], p["dt"], allow_zero=True)
    n1 = _steps_of("delta_t", p["delta_t"], p["dt"])
    grid = spectral_grid(S)
    x_grid = torch.arange(S, dtype=torch.float64) / S
    f_h = torch.fft.rfft2(torch.from_numpy(fno_forcing(S))) if p["forcing"] == "fno" else None
    s_h = None
    if bous and p["source_amplitude"] != 0.0:
        src = p["source_amplitude"] * torch.sin(2.0 * math.pi * x_grid)[:, None].expand(S, S)
        s_h = torch.fft.rfft2(src)
    kw = {"nu": p["nu"], "kappa": p.get("kappa", 0.0), "beta": p.get("beta", 0.0), "dt": p["dt"]}
    V = len(SYSTEMS[system])
    x = np.empty((n_samples, V, S, S), dtype=np.float32)
    y = np.empty_like(x)
    starts: Iterable[int] = range(0, n_samples, batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, total=-(-n_samples // batch_size), desc=f"{system} S={S}", unit="batch")
    for s0 in starts:
        idx = range(s0, min(s0 + batch_size, n_samples))
        w0, th0 = [], []
        for i in idx:
            rng = np.random.default_rng([seed, _SYSTEM_INDEX[system], i])
            w0.append(sample_vorticity(1, S, rng=rng, alpha=p["alpha"], tau=p["tau"])[0])
            if bous:
                th0.append(sample_vorticity(1, S, rng=rng, alpha=p["alpha"], tau=p["tau"])[0])
        w_h = torch.fft.rfft2(torch.from_numpy(np.stack(w0)))
        th_h = torch.fft.rfft2(torch.from_numpy(np.stack(th0))) if bous else None
        with _small_fft_threads(len(idx) * S * S):
            for j in range(n0 + n1):
                if j == n0:
                    x[s0 : s0 + len(idx)] = _state(w_h, th_h, grid)
                w_h, th_h = coupled_step(w_h, th_h, grid, forcing_h=f_h, source_h=s_h, **kw)
        y[s0 : s0 + len(idx)] = _state(w_h, th_h, grid)
    pairs = {
        r: (np.ascontiguousarray(x[..., :: S // r, :: S // r]), np.ascontiguousarray(y[..., :: S // r, :: S // r]))
        for r in res
    }
    return CoupledPairs(pairs, SYSTEMS[system], (p["t_start"], p["t_start"] + p["delta_t"]))


# --------------------------------------------------------------------------- cache


def load_or_generate_coupled_navier_stokes(
    cache_dir: str | os.PathLike,
    n_samples: int,
    resolutions: Iterable[int],
    *,
    system: str = "ns",
    fine_resolution: int | None = None,
    seed: int = 0,
    batch_size: int = 32,
    progress: bool = False,
    **params: float | str,
) -> CoupledPairs:
    """:func:`generate_coupled_navier_stokes`'s output, cached as one HDF5 file in ``cache_dir``.

    ``coupled_navier_stokes_<hash>.h5`` (hash of ``system``, ``n_samples``, the resolutions,
    ``fine_resolution``, ``seed``, every parameter and the variable names) holds ``x_{r}`` (input)
    and ``u_{r}`` (target) ``(n, V, r, r)`` float32, ``t`` ``(2,)`` and every parameter, ``system``
    and ``variables`` (comma-joined) as root attributes, written atomically. A file whose
    attributes differ from the request is regenerated with a warning.
    """
    n_samples = check_positive_int("n_samples", n_samples)
    res = _check_resolutions(resolutions)
    fine = _check_fine(fine_resolution, res, even=True)
    seed = _check_seed(seed)
    p = _check_system_params(system, params)
    variables = SYSTEMS[system]
    meta = _meta(
        "coupled_navier_stokes", n_samples, res, fine, seed, {**p, "system": system, "variables": ",".join(variables)}
    )
    times = (p["t_start"], p["t_start"] + p["delta_t"])
    kw = {"system": system, "fine_resolution": fine, "seed": seed, "batch_size": batch_size, "progress": progress}
    make = lambda: generate_coupled_navier_stokes(n_samples, res, **kw, **p).pairs  # noqa: E731
    pairs = cached_pairs(
        cache_dir, "coupled_navier_stokes", meta, res, make, input_key="x", extra={"t": np.asarray(times)}
    )
    return CoupledPairs(pairs, variables, times)
