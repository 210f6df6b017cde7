"""Tests of the 2-D Navier–Stokes vorticity generator sciattn.pde_data.navier_stokes."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from sciattn.pde_data import navier_stokes as ns

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _helpers as th  # noqa: E402

# tiny runs: 20 steps of dt 1e-3, 4 snapshots
FAST = {"t_final": 0.02, "dt": 1e-3, "record_steps": 4}


def _xy(s: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(s) / s
    return np.meshgrid(x, x, indexing="ij")


def _energy_enstrophy(w: torch.Tensor, grid: ns.SpectralGrid) -> tuple[float, float]:
    u, v = ns.velocity(torch.fft.rfft2(w), grid)
    return float(0.5 * (u**2 + v**2).mean()), float(0.5 * (w**2).mean())


def test_defaults_are_fno_values():
    d = ns.NS_DEFAULTS
    assert d["nu"] == 1e-3 and d["dt"] == 1e-4 and d["alpha"] == 2.5 and d["tau"] == 7.0
    X, Y = _xy(16)
    f = ns.fno_forcing(16)
    np.testing.assert_allclose(
        f, 0.1 * (np.sin(2 * np.pi * (X + Y)) + np.cos(2 * np.pi * (X + Y))), atol=1e-15
    )


def test_nonlinear_term_matches_analytic_jacobian():
    # w = sin(2 pi x) + cos(4 pi y): u = psi_y = -sin(4 pi y)/(4 pi), v = -psi_x = -cos(2 pi x)/(2 pi),
    # u w_x + v w_y = 1.5 cos(2 pi x) sin(4 pi y)
    s = 32
    X, Y = _xy(s)
    grid = ns.spectral_grid(s)
    w_h = torch.fft.rfft2(torch.from_numpy(np.sin(2 * np.pi * X) + np.cos(4 * np.pi * Y)))
    u, v = ns.velocity(w_h, grid)
    np.testing.assert_allclose(u.numpy(), -np.sin(4 * np.pi * Y) / (4 * np.pi), atol=1e-14)
    np.testing.assert_allclose(v.numpy(), -np.cos(2 * np.pi * X) / (2 * np.pi), atol=1e-14)
    adv = torch.fft.irfft2(ns.advection_hat(w_h, u, v, grid), s=(s, s))
    np.testing.assert_allclose(adv.numpy(), 1.5 * np.cos(2 * np.pi * X) * np.sin(4 * np.pi * Y), atol=1e-13)


def test_dealias_mask_is_two_thirds_rule():
    grid = ns.spectral_grid(32)
    kx = torch.fft.fftfreq(32, 1 / 32, dtype=torch.float64).abs()[:, None]
    ky = torch.arange(17, dtype=torch.float64)[None, :]
    expected = ((kx <= 10) & (ky <= 10)).to(torch.float64)  # (2/3) * 16 = 10.67
    assert torch.equal(grid.dealias, expected)
    assert grid.lap[0, 0] == 0.0 and grid.lap_poisson[0, 0] == 1.0
    assert grid.lap[16, 0] == grid.lap[0, 16] == 4 * math.pi**2 * 256  # Nyquist kept in the Laplacian
    assert grid.kx[16, 0] == grid.ky[0, 16] == 0.0  # ... but has no first derivative
    assert grid.kx[17, 0] == -2 * math.pi * 15 and grid.ky[0, 15] == 2 * math.pi * 15


def _full_spectrum_reference(w0, f, nu, dt, steps):
    """Independent full-complex-FFT implementation of the formats.md 8.3 update (lap[0, 0] = 1)."""
    s = w0.shape[-1]
    k = torch.fft.fftfreq(s, 1 / s, dtype=torch.float64)
    kx, ky = k[:, None].expand(s, s), k[None, :].expand(s, s)
    lap = 4 * math.pi**2 * (kx**2 + ky**2)
    lap[0, 0] = 1.0
    keep = ((kx.abs() <= 2 / 3 * (s // 2)) & (ky.abs() <= 2 / 3 * (s // 2))).to(torch.float64)
    w_h, f_h = torch.fft.fft2(w0), torch.fft.fft2(f)
    for _ in range(steps):
        psi_h = w_h / lap
        u = torch.fft.ifft2(2j * math.pi * ky * psi_h).real
        v = torch.fft.ifft2(-2j * math.pi * kx * psi_h).real
        w_x = torch.fft.ifft2(2j * math.pi * kx * w_h).real
        w_y = torch.fft.ifft2(2j * math.pi * ky * w_h).real
        F_h = torch.fft.fft2(u * w_x + v * w_y) * keep
        w_h = (-dt * F_h + dt * f_h + (1 - 0.5 * dt * nu * lap) * w_h) / (1 + 0.5 * dt * nu * lap)
    return torch.fft.ifft2(w_h).real


def test_matches_full_spectrum_reference_scheme():
    s = 32
    w0 = torch.from_numpy(ns.sample_vorticity(2, s, rng=np.random.default_rng(2)))
    f = torch.from_numpy(ns.fno_forcing(s))
    ref = _full_spectrum_reference(w0, f, 1e-3, 1e-3, 50)
    sol, _ = ns.solve_navier_stokes(w0, nu=1e-3, t_final=0.05, dt=1e-3, forcing=f, record_steps=1)
    assert (ref - w0).abs().max() > 1e-3
    assert (sol[..., 0] - ref).abs().max() < 1e-13


def test_single_wavenumber_decays_viscously():
    # modes of one |k| are a steady Euler solution: only viscosity acts, w(t) = w0 exp(-nu |2 pi k|^2 t)
    s, nu, dt, steps = 32, 1e-2, 1e-3, 100
    X, Y = _xy(s)
    w0 = np.cos(2 * np.pi * (X + 2 * Y)) + 0.5 * np.sin(2 * np.pi * (2 * X - Y))  # |k|^2 = 5 for both
    lam = 4 * math.pi**2 * 5
    sol, t = ns.solve_navier_stokes(torch.from_numpy(w0), nu=nu, t_final=steps * dt, dt=dt, record_steps=4)
    assert sol.shape == (s, s, 4)
    np.testing.assert_allclose(t.numpy(), [0.025, 0.05, 0.075, 0.1], rtol=1e-12)
    grid = ns.spectral_grid(s)
    e0, z0 = _energy_enstrophy(torch.from_numpy(w0), grid)
    for k in range(4):
        decay = math.exp(-2 * nu * lam * float(t[k]))
        e, z = _energy_enstrophy(sol[..., k], grid)
        assert abs(e / (e0 * decay) - 1) < 1e-6 and abs(z / (z0 * decay) - 1) < 1e-6, (k, e / e0, decay)
        np.testing.assert_allclose(sol[..., k].numpy(), w0 * math.sqrt(decay), atol=1e-7)


def test_mean_vorticity_is_conserved_with_forcing_and_nonlinearity():
    s = 32
    w0 = ns.sample_vorticity(2, s, rng=np.random.default_rng(3)) + np.array([0.3, -0.2])[:, None, None]
    sol, _ = ns.solve_navier_stokes(
        w0, nu=1e-3, t_final=0.05, dt=1e-3, forcing=ns.fno_forcing(s), record_steps=5
    )
    assert isinstance(sol, np.ndarray) and sol.shape == (2, s, s, 5)
    assert np.abs(sol[..., -1] - w0).max() > 1e-3  # it evolved
    np.testing.assert_allclose(sol.mean(axis=(1, 2)), np.array([[0.3] * 5, [-0.2] * 5]), rtol=0, atol=1e-13)


def test_forced_grf_run_stays_bounded():
    s = 32
    w0 = ns.sample_vorticity(2, s, rng=np.random.default_rng(0))
    assert 0.05 < w0.std() < 1.0 and np.abs(w0).max() < 3.0
    sol, _ = ns.solve_navier_stokes(
        w0, nu=1e-3, t_final=0.3, dt=1e-3, forcing=ns.fno_forcing(s), record_steps=3
    )
    assert np.all(np.isfinite(sol))
    assert np.abs(sol).max() < 3.0
    z0 = (w0**2).mean()
    assert 0.5 * z0 < (sol[..., -1] ** 2).mean() < 2.0 * z0


def test_grf_matches_fno_spectrum():
    s = 32
    w = ns.sample_vorticity(200, s, rng=np.random.default_rng(1))
    assert w.shape == (200, s, s) and w.dtype == np.float64
    np.testing.assert_allclose(w.mean(axis=(1, 2)), 0.0, atol=1e-14)
    k = np.fft.fftfreq(s, 1.0 / s)
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    sqrt_eig = s**2 * math.sqrt(2) * 7**1.5 * (4 * np.pi**2 * k2 + 49.0) ** -1.25
    sqrt_eig[0, 0] = 0.0
    var = np.sum(sqrt_eig**2) / s**4  # variance of Re(ifft2(sqrt_eig (xi_r + i xi_i)))
    assert abs(w.var() / var - 1) < 0.1, (w.var(), var)


def test_layout_restriction_and_fine_solve():
    out = ns.generate_navier_stokes(2, [8, 16, 32], seed=5, **FAST)
    a32, u32 = out[32]
    assert a32.shape == (2, 32, 32) and u32.shape == (2, 32, 32, 4)  # FNO (N, X, Y, T), time last
    assert a32.dtype == u32.dtype == np.float32
    for r in (8, 16):
        a, u = out[r]
        assert a.shape == (2, r, r) and u.shape == (2, r, r, 4)
        np.testing.assert_array_equal(a, a32[:, :: 32 // r, :: 32 // r])
        np.testing.assert_array_equal(u, u32[:, :: 32 // r, :: 32 // r])
    via_fine = ns.generate_navier_stokes(2, [16], fine_resolution=32, seed=5, **FAST)
    np.testing.assert_array_equal(via_fine[16][1], out[16][1])
    coarse = ns.generate_navier_stokes(2, [16], seed=5, **FAST)
    assert not np.array_equal(coarse[16][0], out[16][0])


def test_determinism_and_independence_of_n_samples():
    a = ns.generate_navier_stokes(3, [16], seed=7, **FAST)[16]
    b = ns.generate_navier_stokes(3, [16], seed=7, **FAST)[16]
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = ns.generate_navier_stokes(3, [16], seed=8, **FAST)[16]
    assert not np.array_equal(a[0], c[0])
    d = ns.generate_navier_stokes(5, [16], seed=7, batch_size=2, **FAST)[16]
    np.testing.assert_array_equal(d[0][:3], a[0])
    np.testing.assert_allclose(d[1][:3], a[1], rtol=0, atol=1e-6)
    assert not np.array_equal(a[0][0], a[0][1])


def test_cache_roundtrip(tmp_path, monkeypatch):
    first = ns.load_or_generate_navier_stokes(tmp_path, 2, [8, 16], seed=4, **FAST)
    (path,) = tmp_path.iterdir()
    assert path.name.startswith("navier_stokes_") and path.suffix == ".h5"
    with h5py.File(path, "r") as fh:
        assert {"a_8", "u_8", "a_16", "u_16", "t"} <= set(fh)
        assert fh["u_16"].shape == (2, 16, 16, 4)
        np.testing.assert_allclose(fh["t"][()], [0.005, 0.01, 0.015, 0.02])
        assert fh.attrs["seed"] == 4 and fh.attrs["record_steps"] == 4 and fh.attrs["nu"] == 1e-3
    th.assert_cache_reused(
        monkeypatch, tmp_path, ns, "solve_navier_stokes",
        lambda: ns.load_or_generate_navier_stokes(tmp_path, 2, [8, 16], seed=4, **FAST),
        lambda: ns.load_or_generate_navier_stokes(tmp_path, 2, [8, 16], seed=4, **{**FAST, "record_steps": 2}),
        first, (8, 16),
    )


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda: ns.generate_navier_stokes(2, [16, 24]), ValueError, "resolutions"),
        (lambda: ns.generate_navier_stokes(2, [15]), ValueError, "fine_resolution"),
        (
            lambda: ns.generate_navier_stokes(2, [16], t_final=0.01, dt=1e-3, record_steps=3),
            ValueError,
            "record_steps",
        ),
        (lambda: ns.generate_navier_stokes(2, [16], seed=-1), ValueError, "seed"),
        (lambda: ns.solve_navier_stokes(np.zeros((8, 6)), nu=1e-3, t_final=0.1, dt=0.01), ValueError, "w0"),
        (
            lambda: ns.solve_navier_stokes(
                np.zeros((8, 8)), nu=1e-3, t_final=0.1, dt=0.01, forcing=np.zeros((4, 4))
            ),
            ValueError,
            "forcing",
        ),
        (lambda: ns.sample_vorticity(1, 16, rng=0), TypeError, "rng"),
        (lambda: ns.load_or_generate_navier_stokes("unused", 1, [8], beta=1.0), TypeError, "beta"),
    ],
)
def test_errors_name_the_argument(call, exc, name):
    with pytest.raises(exc, match=name) as info:
        call()
    assert "expected" in str(info.value) and "got" in str(info.value)
