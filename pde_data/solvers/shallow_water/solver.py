"""Shallow-water equations on the rotating sphere: the spectral solver.

This file holds the physics: :data:`SWE_DEFAULTS` (constants) and :class:`ShallowWaterSolver` (RK4 time
stepping, random initial conditions, Williamson case 2, mass / energy diagnostics). The dataset built from it
(:func:`generate_shallow_water`, :func:`load_or_generate_shallow_water`, :func:`area_weighted_stats`) lives in
:mod:`.data`, which imports this file (never the reverse); the package :mod:`sciattn.pde_data.solvers.shallow_water`
(old path ``sciattn.pde_data.shallow_water``) exports both.

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

Random initial condition (:meth:`ShallowWaterSolver.random_initial_condition`, comparable to torch-harmonics' ``random_initial_condition(mach)``)
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

Regime of the defaults (against Bonev et al.'s protocol; presets in :mod:`sciattn.pde_data.presets`)
    The defaults (``mach = 0.2`` in this module's scaling, ``decay = 1``, with the dataset's 32×64 equiangular
    grid, ``dt = 600 s`` × 6) give grid-maximum speeds of ``mach · √(g havg) ≈ 63 m/s`` from a red spectrum:
    a faster, larger-scale flow than torch-harmonics' (8–9 m/s from a white spectrum, above). Bonev et al.'s
    setting, Legendre–Gauss 128×256, solver step 150 s, one-hour pairs, white spectrum and the speed-matched
    ``mach = 0.03``, is preset ``bonev_shallow_water``.

Shapes:
    grid states ``(..., 3, nlat, nlon)`` with channels (φ, ζ, δ) in m² s⁻², s⁻¹, s⁻¹;
    spectral states ``(..., 3, lmax, mmax)`` complex.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sciattn._checks import check_choice, check_positive_int, check_rank

from ..darcy import _check_real
from ..sht import SHT_GRIDS, SphericalHarmonicTransform

__all__ = ["SWE_DEFAULTS", "ShallowWaterSolver"]

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
