"""Tests of the spherical shallow-water solver sciattn.pde_data.shallow_water (the dataset and its cache are
tested in test_shallow_water_data.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sciattn.pde_data import shallow_water as swe

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see tests/conftest.py


def _random_state(solver: swe.ShallowWaterSolver, seed: int = 0) -> torch.Tensor:
    return solver.random_initial_condition(np.random.default_rng(seed))


@pytest.mark.parametrize("grid", ["equiangular", "legendre-gauss"])
def test_mass_is_conserved_to_round_off_over_100_steps(grid):
    s = swe.ShallowWaterSolver(16, 32, grid, dt=600.0)  # hyperdiffusion on (it leaves l = 0 alone)
    spec0 = _random_state(s)
    spec = s.step(spec0, 100)
    assert torch.isfinite(spec).all()
    assert spec[0, 0, 0] == spec0[0, 0, 0]  # the l = 0 tendency of phi is exactly zero
    m0, m1 = s.total_mass(s.to_grid(spec0)), s.total_mass(s.to_grid(spec))
    assert float(m0) == pytest.approx(4 * math.pi * s.radius**2 * s.havg, rel=1e-14)
    assert abs(float((m1 - m0) / m0)) < 1e-14
    # the dynamics did move mass around: the geopotential changed by far more than round-off
    assert float((s.to_grid(spec)[0] - s.to_grid(spec0)[0]).abs().max()) > 100.0


@pytest.mark.parametrize("grid", ["equiangular", "legendre-gauss"])
def test_williamson_case_2_stays_steady(grid):
    state = swe.ShallowWaterSolver(16, 32, grid).williamson2()
    scale = state.abs().amax((-2, -1))
    scale[2] = 1.0  # divergence is zero: compare absolutely against 1e-15 s^-1 below
    inviscid = swe.ShallowWaterSolver(16, 32, grid, dt=900.0, hyperdiffusion_time=None)
    assert float(inviscid.tendency(inviscid.to_spectral(state))[..., :2, :, :].abs().max()) < 1e-20
    out = inviscid.integrate(state, 24)  # 6 h
    err = (out - state).abs().amax((-2, -1)) / scale
    assert float(err[:2].max()) < 1e-12 and float(err[2]) < 1e-15
    # with the default hyperdiffusion (tau = 2 h on the highest degree L = 5) the l = 1 vorticity is damped
    # by 24 (dt/tau) (2 / (L (L+1)))^4 = 5.9e-5 (measured 4.7e-5: the height field partly re-adjusts)
    damped = swe.ShallowWaterSolver(16, 32, grid, dt=900.0)
    err = ((damped.integrate(state, 24) - state).abs().amax((-2, -1)) / scale)[1]
    predicted = 24 * (900.0 / 7200.0) * (2.0 / 30.0) ** 4
    assert 0.5 * predicted < float(err) <= 1.01 * predicted


def test_energy_is_nearly_conserved_without_hyperdiffusion():
    # Available energy E' = (1/g) ∫ (phi |u|^2 / 2 + (phi - mean)^2 / 2) dA over 8 h at 32x64 (L = 10).
    # Measured drift: -5.4e-5 (dt = 600 s), -4.5e-5 (dt = 300 s): it is the truncation of the products,
    # not the time stepping, and it halves from L = 5 to L = 10. The default hyperdiffusion removes ~3e-2.
    drift = {}
    for dt, n, tau in [(600.0, 48, None), (300.0, 96, None), (600.0, 48, 7200.0)]:
        s = swe.ShallowWaterSolver(32, 64, "legendre-gauss", dt=dt, hyperdiffusion_time=tau)
        spec = _random_state(s, seed=1)
        e0 = s.total_energy(s.to_grid(spec))
        drift[dt, tau] = float((s.total_energy(s.to_grid(s.step(spec, n))) - e0) / e0)
    assert abs(drift[600.0, None]) < 2e-4
    assert abs(drift[600.0, None] - drift[300.0, None]) < 0.3 * abs(drift[600.0, None])
    assert drift[600.0, 7200.0] < -1e-2


def test_linear_gravity_wave_has_the_analytic_frequency():
    # No rotation, fluid at rest, a tiny Y_3^0 height bump: phi_30(t) = phi_30(0) cos(c sqrt(l(l+1)) t / a)
    s = swe.ShallowWaterSolver(16, 32, "legendre-gauss", dt=600.0, omega=0.0, hyperdiffusion_time=None)
    c = torch.zeros(3, s.lmax, s.mmax, dtype=torch.complex128)
    c[0, 0, 0] = s.gravity * s.havg * math.sqrt(4 * math.pi)
    c[0, 3, 0] = 1e-3 * s.gravity
    out = s.step(c, 40)
    omega = s.wave_speed * math.sqrt(12.0) / s.radius
    assert float(out[0, 3, 0].real / c[0, 3, 0].real) == pytest.approx(math.cos(omega * 40 * 600.0), abs=2e-5)


def test_random_initial_condition_recipe_and_determinism():
    s = swe.ShallowWaterSolver(16, 32, "equiangular")
    a, b, other = _random_state(s, 7), _random_state(s, 7), _random_state(s, 8)
    assert torch.equal(a, b) and not torch.equal(a, other)
    grid = s.to_grid(a)
    u, v = s.sht.velocity(a[1], a[2])
    assert float(torch.sqrt(u * u + v * v).max()) == pytest.approx(0.2 * math.sqrt(s.gravity * s.havg), rel=1e-12)
    h = grid[0] / s.gravity
    assert float((h - s.havg).abs().max()) == pytest.approx(s.hamp, rel=1e-12)
    ell = torch.arange(s.lmax)[:, None]
    assert torch.all(a[..., torch.arange(s.mmax)[None, :] > ell] == 0)  # triangular truncation
    assert torch.all(a[1:, 0, 0] == 0) and a[0, 0, 0].real == pytest.approx(s.gravity * s.havg * math.sqrt(4 * math.pi))
    assert torch.all(a[..., 0].imag == 0)
    # decaying spectrum: the mean power per degree falls with l (amplitude (l+1)^-1 times a unit normal)
    power = (a[1:].abs() ** 2).sum(-1).mean(0)[1:] / (2 * torch.arange(1, s.lmax) + 1)
    assert float(power[:2].mean()) > 3 * float(power[-2:].mean())


def test_bad_solver_arguments_name_themselves():
    with pytest.raises(ValueError, match="grid: expected one of"):
        swe.ShallowWaterSolver(8, 16, "healpix")
    s = swe.ShallowWaterSolver(8, 16)
    with pytest.raises(ValueError, match="state: expected 3 channels"):
        s.integrate(torch.zeros(2, 8, 16, dtype=torch.float64), 1)
    with pytest.raises(TypeError, match="rng: expected a numpy.random.Generator"):
        s.random_initial_condition(3)
