"""Shallow-water equations on the rotating sphere: a spectral solver and a one-step / rollout dataset.

PDE (vorticity–divergence–geopotential form of the rotating shallow-water equations, as in spectral models
and torch-harmonics' ``ShallowWaterSolver``), on a sphere of radius ``a`` rotating at ``Ω``::

    ∂ζ/∂t = −∇·((ζ + f) u)
    ∂δ/∂t =  k̂·∇×((ζ + f) u) − ∇²(φ + |u|²/2)
    ∂φ/∂t = −∇·(φ u)

with geopotential ``φ = g h`` (``h`` the fluid depth), relative vorticity ``ζ``, divergence ``δ``, Coriolis
parameter ``f = 2Ω cos θ`` (``θ`` colatitude) and velocity ``u = ∇χ + k̂ × ∇ψ``, ``∇²ψ = ζ``, ``∇²χ = δ``.
Constants default to torch-harmonics': ``a = 6.37122e6 m``, ``Ω = 7.292e-5 s⁻¹``, ``g = 9.80616 m s⁻²``,
mean depth ``havg = 1e4 m``, height amplitude ``hamp = 120 m``.

Discretisation
    State held as spectral coefficients (3, lmax, mmax) of (φ, ζ, δ) (:class:`~.sht.SphericalHarmonicTransform`,
    triangular truncation ``l < lmax``, default ``lmax = mmax = ceil(nlat / 3)`` as torch-harmonics'
    ``PdeDataset``, which leaves the quadratic products alias-free on both grids). Products are formed on the
    grid; ``∇·`` and ``k̂·∇×`` are analysed by integration by parts and ``∇²`` is ``−l(l+1)/a²``, so no grid
    derivative is taken. Time stepping: classical RK4 (self-starting, so a trajectory does not depend on
    how it is chunked into calls), then hyperdiffusion on ζ and δ by the exact factor
    ``exp(−(dt/τ) (l(l+1)/(L(L+1)))^p)``, ``L = lmax − 1``; torch-harmonics' choice is ``τ = 7200 s``,
    ``p = 4`` (the default; ``hyperdiffusion_time=None`` turns it off). With ``c = √(g havg) ≈ 313 m/s`` the
    fastest gravity wave has frequency ``c √(L(L+1)) / a``; at 32×64 (``L = 10``) and the default
    ``dt = 600 s`` that is ``ω dt ≈ 0.31``, an order of magnitude inside RK4's imaginary-axis bound ``2√2``.

Conservation
    The ``l = 0`` coefficient of a spectral divergence is identically zero, so ``φ_00`` (the mass) never
    changes and the grid mass ``∫ φ dA`` is conserved to round-off. Energy
    ``E = (1/g) ∫ (½ φ |u|² + ½ φ²) dA`` is conserved by the PDE but only approximately by the truncated,
    time-discrete scheme (see the tests for the measured drift).

Random initial condition (:meth:`ShallowWaterSolver.random_initial_condition`, comparable to torch-harmonics'
``random_initial_condition(mach)``)
    1. For each field draw ``ξ_lm = (N(0,1) + i N(0,1)) / √2`` for ``1 <= l < lmax``, ``0 < m <= l``, and a real
       ``N(0,1)`` for ``m = 0``, from ``rng.standard_normal((3, lmax, mmax, 2))`` (entries with ``m > l`` or
       ``l = 0`` are drawn and discarded); multiply by the decaying spectrum ``(l + 1)^(−decay)``
       (torch-harmonics draws a white spectrum, ``decay = 0``).
    2. Geopotential: ``φ = g havg + g hamp h̃ / max|h̃|`` with ``h̃`` the synthesised first field, so
       ``max |h − havg| = hamp`` on the grid.
    3. ``ζ, δ`` = the other two fields times one factor ``s`` chosen so that the grid maximum of the speed
       ``|u|`` equals ``mach · √(g havg)`` (63 m/s for ``mach = 0.2``). torch-harmonics instead multiplies
       white coefficients (``l < 80``, variance ``4π / (80 · 81)``) by ``mach √(g havg) / a``; evaluated with
       this module's transform at 128×256, ``lmax = 43``, ``mach = 0.2``, that recipe gives grid-maximum
       speeds of 8–9 m/s (rms ≈ 3 m/s), so ``mach ≈ 0.03`` here matches its flow strength.

Dataset (:func:`generate_shallow_water`): sample ``i`` draws its initial state with
``numpy.random.default_rng([seed, 0, i])`` and trajectory ``j`` with ``default_rng([seed, 1, j])``;
``x`` is the state after ``spinup`` intervals of ``Δt = dt · n_steps_between`` (default 0: the random
state itself, as torch-harmonics' ``PdeDataset``), ``y`` the state ``Δt`` later. The random states are
unbalanced, so the first hours are dominated by gravity-wave adjustment (the spread of ``φ`` grows several-fold
in the first ``Δt``); ``spinup > 0`` draws pairs from adjusted states instead.

Shapes:
    grid states ``(..., 3, nlat, nlon)`` with channels (φ, ζ, δ) in m² s⁻², s⁻¹, s⁻¹;
    spectral states ``(..., 3, lmax, mmax)`` complex.
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

from sciattn._checks import check_choice, check_positive_int, check_rank
from sciattn._io import atomic_path

from ._hdf5 import attrs_match
from .burgers import _small_fft_threads
from .darcy import _check_real, _check_seed
from .sht import SHT_GRIDS, SphericalHarmonicTransform

__all__ = [
    "SWE_DEFAULTS",
    "ShallowWaterSolver",
    "area_weighted_stats",
    "generate_shallow_water",
    "load_or_generate_shallow_water",
]

#: Physical constants and dataset parameters (torch-harmonics' constants; ``Δt = dt · n_steps_between = 1 h``).
SWE_DEFAULTS: dict[str, float] = {
    "radius": 6.37122e6,
    "omega": 7.292e-5,
    "gravity": 9.80616,
    "havg": 1.0e4,
    "hamp": 120.0,
    "mach": 0.2,
    "decay": 1.0,
    "hyperdiffusion_time": 7200.0,
    "hyperdiffusion_order": 4.0,
}

_CACHE_FORMAT = 1
_NON_NEGATIVE = ("omega", "hamp", "decay", "hyperdiffusion_time")  # 0 allowed (no rotation, flat h, white, off)


class ShallowWaterSolver:
    """Spectral RK4 solver of the rotating shallow-water equations (see the module docstring).

    Args:
        nlat, nlon, grid: the output grid (``grid`` in :data:`~.sht.SHT_GRIDS`).
        dt: time step in seconds.
        lmax, mmax: truncation (default ``ceil(nlat / 3)`` for both, capped by the grid).
        radius, omega, gravity, havg, hamp: physical constants (defaults in :data:`SWE_DEFAULTS`).
        hyperdiffusion_time, hyperdiffusion_order: ``τ`` (s; ``None`` or 0 = off) and ``p`` of the damping factor.

    Shapes:
        :meth:`step` ``(..., 3, lmax, mmax) -> same``; :meth:`integrate` ``(..., 3, nlat, nlon) -> same``.
    """

    def __init__(
        self,
        nlat: int,
        nlon: int,
        grid: str = "equiangular",
        *,
        dt: float = 600.0,
        lmax: int | None = None,
        mmax: int | None = None,
        radius: float = SWE_DEFAULTS["radius"],
        omega: float = SWE_DEFAULTS["omega"],
        gravity: float = SWE_DEFAULTS["gravity"],
        havg: float = SWE_DEFAULTS["havg"],
        hamp: float = SWE_DEFAULTS["hamp"],
        hyperdiffusion_time: float | None = SWE_DEFAULTS["hyperdiffusion_time"],
        hyperdiffusion_order: float = SWE_DEFAULTS["hyperdiffusion_order"],
        device: torch.device | str | None = None,
    ):
        check_positive_int("nlat", nlat), check_positive_int("nlon", nlon), check_choice("grid", grid, SHT_GRIDS)
        lmax = min(math.ceil(nlat / 3), (nlon + 1) // 2) if lmax is None else lmax
        self.sht = SphericalHarmonicTransform(nlat, nlon, grid, lmax=lmax, mmax=mmax or lmax, radius=radius,
                                              device=device)
        self.lmax, self.mmax = self.sht.lmax, self.sht.mmax
        self.dt = _check_real("dt", dt)
        self.radius, self.omega = _check_real("radius", radius), _check_real("omega", omega, positive=False)
        self.gravity, self.havg = _check_real("gravity", gravity), _check_real("havg", havg)
        self.hamp = _check_real("hamp", hamp, positive=False)
        self.coriolis = (2.0 * self.omega * torch.cos(self.sht.colatitudes))[:, None]  # (nlat, 1)
        ll1 = self.sht.l_times_l1
        if not hyperdiffusion_time:  # None or 0: off
            self.hyperdiffusion = torch.ones_like(ll1)
        else:
            tau = _check_real("hyperdiffusion_time", hyperdiffusion_time)
            p = _check_real("hyperdiffusion_order", hyperdiffusion_order)
            self.hyperdiffusion = torch.exp(-(self.dt / tau) * (ll1 / ll1.max().clamp_min(1.0)) ** p)

    @property
    def wave_speed(self) -> float:
        """Gravity-wave speed ``√(g havg)`` in m/s."""
        return math.sqrt(self.gravity * self.havg)

    # ------------------------------------------------------------------ grid <-> spectral
    def _check_state(self, state: torch.Tensor) -> torch.Tensor:
        check_rank("state", state, range(3, 10), "(..., 3, nlat, nlon)")
        if state.shape[-3] != 3:
            raise ValueError(f"state: expected 3 channels (phi, vorticity, divergence), got shape {tuple(state.shape)}")
        return state

    def to_spectral(self, state: torch.Tensor) -> torch.Tensor:
        """Grid state ``(..., 3, nlat, nlon)`` -> coefficients ``(..., 3, lmax, mmax)``."""
        return self.sht.forward(self._check_state(state))

    def to_grid(self, spec: torch.Tensor) -> torch.Tensor:
        """Coefficients ``(..., 3, lmax, mmax)`` -> grid state ``(..., 3, nlat, nlon)``."""
        return self.sht.inverse(spec)

    # ------------------------------------------------------------------ dynamics
    def tendency(self, spec: torch.Tensor) -> torch.Tensor:
        """``∂/∂t`` of the coefficients ``(..., 3, lmax, mmax)`` of (φ, ζ, δ)."""
        sht = self.sht
        grid = sht.inverse(spec[..., :2, :, :])
        phi, vort = grid[..., 0, :, :], grid[..., 1, :, :]
        u, v = sht.velocity(spec[..., 1, :, :], spec[..., 2, :, :])
        absvort = vort + self.coriolis
        div, curl = sht.div_curl(torch.stack([absvort * u, phi * u], -3), torch.stack([absvort * v, phi * v], -3))
        bernoulli = sht.forward(phi + 0.5 * (u * u + v * v))
        d_vort = -div[..., 0, :, :]
        d_div = curl[..., 0, :, :] - sht.laplacian(bernoulli)
        d_phi = -div[..., 1, :, :]
        return torch.stack([d_phi, d_vort, d_div], dim=-3)

    def step(self, spec: torch.Tensor, n_steps: int = 1) -> torch.Tensor:
        """``n_steps`` RK4 steps of size ``dt``, each followed by hyperdiffusion of ζ and δ."""
        n_steps = int(n_steps)
        if n_steps < 0:
            raise ValueError(f"n_steps: expected a non-negative int, got {n_steps}")
        dt, damp = self.dt, self.hyperdiffusion
        for _ in range(n_steps):
            k1 = self.tendency(spec)
            k2 = self.tendency(spec + 0.5 * dt * k1)
            k3 = self.tendency(spec + 0.5 * dt * k2)
            k4 = self.tendency(spec + dt * k3)
            spec = spec + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
            spec = torch.cat([spec[..., :1, :, :], damp * spec[..., 1:, :, :]], dim=-3)
        return spec

    def integrate(self, state: torch.Tensor, n_steps: int) -> torch.Tensor:
        """Advance a grid state ``(..., 3, nlat, nlon)`` by ``n_steps`` steps (projected onto ``l < lmax`` first)."""
        return self.to_grid(self.step(self.to_spectral(state), n_steps)).to(state.dtype)

    # ------------------------------------------------------------------ diagnostics
    def total_mass(self, state: torch.Tensor) -> torch.Tensor:
        """``∫ h dA = (1/g) ∫ φ dA`` (mass / density, m³) of grid states ``(..., 3, nlat, nlon) -> (...)``."""
        return self.sht.integrate(self._check_state(state)[..., 0, :, :]) / self.gravity

    def total_energy(self, state: torch.Tensor, *, available: bool = True) -> torch.Tensor:
        """``(1/g) ∫ (½ φ |u|² + ½ φ²) dA``; with ``available`` the constant ``½ φ̄²`` part (fixed by the
        conserved mass, ``φ̄`` the area mean) is removed, leaving ``(1/g) ∫ (½ φ |u|² + ½ (φ − φ̄)²) dA``."""
        state = self._check_state(state).to(self.sht.dtype)
        u, v = self.sht.velocity(self.sht.forward(state[..., 1, :, :]), self.sht.forward(state[..., 2, :, :]))
        phi = state[..., 0, :, :]
        if available:
            area = 4.0 * math.pi * self.radius**2
            phi = phi - (self.sht.integrate(phi) / area)[..., None, None]
        kinetic = 0.5 * state[..., 0, :, :] * (u * u + v * v)
        return self.sht.integrate(kinetic + 0.5 * phi * phi) / self.gravity

    # ------------------------------------------------------------------ initial conditions
    def random_initial_condition(
        self, rng: np.random.Generator, *, mach: float = SWE_DEFAULTS["mach"], decay: float = SWE_DEFAULTS["decay"]
    ) -> torch.Tensor:
        """Random state ``(3, lmax, mmax)`` by the recipe in the module docstring (deterministic given ``rng``)."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
        mach, decay = _check_real("mach", mach), _check_real("decay", decay, positive=False)
        lmax, mmax, sht = self.lmax, self.mmax, self.sht
        xi = rng.standard_normal((3, lmax, mmax, 2))
        c = (xi[..., 0] + 1j * xi[..., 1]) / math.sqrt(2.0)
        c[..., 0] = xi[..., 0, 0]
        ell = np.arange(lmax)[:, None]
        keep = (np.arange(mmax)[None, :] <= ell) & (ell >= 1)
        c = torch.as_tensor(c * keep * (ell + 1.0) ** (-decay), dtype=sht.cdtype, device=sht.device)
        h = sht.inverse(c[0])
        phi = c[0] * (self.gravity * self.hamp / h.abs().max())
        phi[0, 0] = self.gravity * self.havg * math.sqrt(4.0 * math.pi)
        u, v = sht.velocity(c[1], c[2])
        scale = mach * self.wave_speed / torch.sqrt(u * u + v * v).max()
        return torch.stack([phi, scale * c[1], scale * c[2]])

    def williamson2(self, u0: float | None = None, gh0: float = 2.94e4) -> torch.Tensor:
        """Williamson et al. (1992) test case 2 with ``α = 0``: a steady zonal solid-body rotation,
        ``u = u0 sin θ``, ``v = 0``, ``φ = g h0 − (a Ω u0 + u0²/2) cos² θ``, ``ζ = 2 u0 cos θ / a``, ``δ = 0``;
        ``u0 = 2π a / 12 days`` by default. Returns the grid state ``(3, nlat, nlon)``."""
        u0 = 2.0 * math.pi * self.radius / (12 * 86400.0) if u0 is None else float(u0)
        cos = torch.cos(self.sht.colatitudes)[:, None].expand(self.sht.nlat, self.sht.nlon)
        phi = gh0 - (self.radius * self.omega * u0 + 0.5 * u0**2) * cos**2
        return torch.stack([phi, 2.0 * u0 * cos / self.radius, torch.zeros_like(cos)])


# ---------------------------------------------------------------------------------------- dataset


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
    meta = {"generator": "sciattn.pde_data.shallow_water", "format": _CACHE_FORMAT, "n_samples": n_samples, **p}
    cache = Path(cache_dir)
    if cache.exists() and not cache.is_dir():
        raise ValueError(f"cache_dir: expected a directory, got {str(cache)!r} (an existing file)")
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
    path = cache / f"shallow_water_{digest}.h5"
    if path.is_file():
        with h5py.File(path, "r") as fh:
            if attrs_match(fh.attrs, meta):
                return {key: fh[key][()] for key in fh.keys()}
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
