"""Tests of the coupled Navier–Stokes / buoyant scalar generator sciattn.pde_data.coupled_navier_stokes."""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest
import torch

from sciattn.pde_data import coupled_navier_stokes as cns
from sciattn.pde_data import navier_stokes as ns

# tiny runs: spin-up 10 steps of dt 2e-3, then a 5-step map
FAST = {"t_start": 0.02, "delta_t": 0.01, "dt": 2e-3}


def _xy(s: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(s) / s
    return np.meshgrid(x, x, indexing="ij")


def _grf(n: int, s: int, seed: int) -> np.ndarray:
    return ns.sample_vorticity(n, s, rng=np.random.default_rng(seed))


def test_single_mode_decays_viscously_with_or_without_a_scalar():
    # a field of one |k| is a steady Euler solution: w(t) = w0 exp(-nu |2 pi k|^2 t)
    s, nu, dt = 32, 1e-2, 1e-3
    X, Y = _xy(s)
    w0 = np.sin(2 * np.pi * (X + 2 * Y)) + 0.5 * np.cos(2 * np.pi * (2 * X - Y))  # |k|^2 = 5
    lam = 4 * math.pi**2 * 5
    w, th, t = cns.solve_coupled_navier_stokes(w0, nu=nu, t_final=0.1, dt=dt, record_steps=4)
    assert th is None and w.shape == (s, s, 4)
    np.testing.assert_allclose(t, [0.025, 0.05, 0.075, 0.1], rtol=1e-12)
    for k in range(4):
        decay = math.exp(-nu * lam * t[k])
        np.testing.assert_allclose(w[..., k], w0 * decay, rtol=0, atol=1e-7)
        assert abs((w[..., k] ** 2).mean() / ((w0**2).mean() * decay**2) - 1) < 1e-6  # enstrophy
    # a zero scalar stays zero and, even with buoyancy, leaves the vorticity unchanged
    w2, th2, _ = cns.solve_coupled_navier_stokes(
        w0, np.zeros_like(w0), nu=nu, kappa=1e-3, beta=3.0, t_final=0.1, dt=dt, record_steps=4
    )
    assert np.array_equal(th2, np.zeros_like(th2))
    np.testing.assert_array_equal(w2, w)


def _coupled_mode_error(dt: float) -> tuple[float, float]:
    """Max error of w and theta against the exact linear solution of one coupled Fourier mode."""
    s, nu, kappa, beta, A, B, T = 16, 1e-2, 4e-3, 2.0, 0.7, 1.3, 0.1
    X, Y = _xy(s)
    phase = 2 * np.pi * (X + 2 * Y)  # k = (1, 2): u . grad of any function of k . x vanishes
    lam = 4 * math.pi**2 * 5
    w, th, _ = cns.solve_coupled_navier_stokes(
        A * np.sin(phase), B * np.cos(phase), nu=nu, kappa=kappa, beta=beta, t_final=T, dt=dt
    )
    g = (math.exp(-kappa * lam * T) - math.exp(-nu * lam * T)) / ((nu - kappa) * lam)
    # w_t = nu Lap w + beta theta_x, theta_x = -2 pi B sin(phase) e^{-kappa lam t}
    w_exact = (A * math.exp(-nu * lam * T) - beta * 2 * math.pi * B * g) * np.sin(phase)
    th_exact = B * math.exp(-kappa * lam * T) * np.cos(phase)
    return float(np.abs(w[..., 0] - w_exact).max()), float(np.abs(th[..., 0] - th_exact).max())


def test_coupled_mode_matches_linear_solution_at_first_order():
    err_w, err_th = _coupled_mode_error(1e-3)
    err_w2, err_th2 = _coupled_mode_error(5e-4)
    assert err_th < 1e-7 and err_th2 < 1e-7  # the scalar decays exactly as CN allows
    assert 1e-5 < err_w < 2e-3, err_w  # the buoyancy term is explicit: first order in dt
    assert 1.8 < err_w / err_w2 < 2.2, (err_w, err_w2)


def test_warm_fluid_rises():
    # from rest with theta0 = cos(2 pi x): v(t) = beta theta0 (1 - e^{-nu lam t}) / (nu lam) > 0 where warm
    s, nu, beta, T = 16, 1e-3, 0.5, 0.05
    X, _ = _xy(s)
    th0 = np.cos(2 * np.pi * X)
    w, th, _ = cns.solve_coupled_navier_stokes(
        np.zeros((s, s)), th0, nu=nu, kappa=0.0, beta=beta, t_final=T, dt=1e-4
    )
    grid = ns.spectral_grid(s)
    u, v = ns.velocity(torch.fft.rfft2(torch.from_numpy(w[..., 0])), grid)
    lam = 4 * math.pi**2
    np.testing.assert_allclose(th[..., 0], th0, atol=1e-12)
    np.testing.assert_allclose(u.numpy(), 0.0, atol=1e-14)
    v_exact = beta * th0 * (1 - math.exp(-nu * lam * T)) / (nu * lam)
    np.testing.assert_allclose(v.numpy(), v_exact, rtol=0, atol=1e-6)


@pytest.mark.parametrize("beta", [0.0, 1.5])
def test_scalar_and_vorticity_means_are_conserved(beta):
    s = 32
    w0 = _grf(2, s, 3) + np.array([0.3, -0.2])[:, None, None]
    th0 = _grf(2, s, 4) + np.array([0.7, -1.1])[:, None, None]
    w, th, _ = cns.solve_coupled_navier_stokes(
        w0, th0, nu=1e-3, kappa=1e-3, beta=beta, t_final=0.1, dt=2e-3, forcing=ns.fno_forcing(s), record_steps=5
    )
    assert np.abs(th[..., -1] - th0).max() > 1e-2  # it was stirred
    np.testing.assert_allclose(th.mean(axis=(1, 2)), [[0.7] * 5, [-1.1] * 5], rtol=0, atol=1e-13)
    np.testing.assert_allclose(w.mean(axis=(1, 2)), [[0.3] * 5, [-0.2] * 5], rtol=0, atol=1e-13)


def test_beta_zero_vorticity_equals_navier_stokes_solver():
    s = 32
    w0, th0, f = _grf(2, s, 5), _grf(2, s, 6), ns.fno_forcing(s)
    kw = {"nu": 1e-3, "t_final": 0.06, "dt": 2e-3, "forcing": f, "record_steps": 3}
    ref, _ = ns.solve_navier_stokes(w0, **kw)
    w, th, _ = cns.solve_coupled_navier_stokes(w0, th0, kappa=1e-3, beta=0.0, **kw)
    np.testing.assert_array_equal(w, ref)
    assert np.abs(th[..., -1] - th0).max() > 1e-3  # the passive scalar moved
    np.testing.assert_array_equal(cns.solve_coupled_navier_stokes(w0, **kw)[0], ref)
    # a passive scalar started from w0 with kappa = nu and source = forcing obeys w's equation
    _, th_w, _ = cns.solve_coupled_navier_stokes(w0, w0, kappa=1e-3, beta=0.0, source=f, **kw)
    np.testing.assert_array_equal(th_w, ref)


def test_buoyancy_changes_the_flow():
    s, dt, nu = 32, 2e-3, 1e-3
    w0, th0 = _grf(2, s, 7), _grf(2, s, 8)
    kw = {"nu": nu, "kappa": 1e-3, "dt": dt}
    # one step: the difference is exactly dt beta theta0_x, Crank–Nicolson filtered
    w1, _, _ = cns.solve_coupled_navier_stokes(w0, th0, beta=2.0, t_final=dt, **kw)
    w1_0, _, _ = cns.solve_coupled_navier_stokes(w0, th0, beta=0.0, t_final=dt, **kw)
    grid = ns.spectral_grid(s)
    th_x_h = 1j * grid.kx * torch.fft.rfft2(torch.from_numpy(th0))
    expected = torch.fft.irfft2(dt * 2.0 * th_x_h / (1 + 0.5 * dt * nu * grid.lap), s=(s, s)).numpy()
    assert np.abs(expected).max() > 1e-3
    np.testing.assert_allclose(w1[..., 0] - w1_0[..., 0], expected, rtol=0, atol=1e-13)
    # over a short run buoyancy changes vorticity and, through the velocity, the scalar
    w, th, _ = cns.solve_coupled_navier_stokes(w0, th0, beta=2.0, t_final=0.2, **kw)
    w_0, th_0, _ = cns.solve_coupled_navier_stokes(w0, th0, beta=0.0, t_final=0.2, **kw)
    assert np.linalg.norm(w - w_0) > 0.5 * np.linalg.norm(w_0)
    assert np.linalg.norm(th - th_0) > 1e-3 * np.linalg.norm(th_0)


def test_generator_matches_solvers():
    n, S, seed = 3, 32, 11
    out = cns.generate_coupled_navier_stokes(
        n, [S], system="boussinesq", seed=seed, beta=0.5, source_amplitude=0.3, **FAST
    )
    assert out.variables == ("u", "v", "w", "theta") and out.times == pytest.approx((0.02, 0.03))
    x, y = out.pairs[S]
    assert x.shape == y.shape == (n, 4, S, S) and x.dtype == y.dtype == np.float32
    w0, th0 = [], []
    for i in range(n):
        rng = np.random.default_rng([seed, 1, i])
        w0.append(ns.sample_vorticity(1, S, rng=rng)[0])
        th0.append(ns.sample_vorticity(1, S, rng=rng)[0])
    w, th, t = cns.solve_coupled_navier_stokes(
        np.stack(w0), np.stack(th0), nu=1e-3, kappa=1e-3, beta=0.5, t_final=0.03, dt=2e-3,
        forcing=ns.fno_forcing(S), source=0.3 * np.sin(2 * np.pi * _xy(S)[0]), record_steps=3,
    )
    np.testing.assert_allclose(t, [0.01, 0.02, 0.03])
    grid = ns.spectral_grid(S)
    for arr, k in ((x, 1), (y, 2)):
        u, v = ns.velocity(torch.fft.rfft2(torch.from_numpy(w[..., k])), grid)
        ref = np.stack([u.numpy(), v.numpy(), w[..., k], th[..., k]], axis=1)
        np.testing.assert_allclose(arr, ref, rtol=1e-6, atol=1e-6)
    assert np.abs(y - x).max() > 1e-3
    # the "ns" set is plain (here unforced) Navier–Stokes from its own random stream
    x_ns, y_ns = cns.generate_coupled_navier_stokes(n, [S], system="ns", seed=seed, forcing="none", **FAST).pairs[S]
    w0_ns = np.stack([ns.sample_vorticity(1, S, rng=np.random.default_rng([seed, 0, i]))[0] for i in range(n)])
    ref_ns, _ = ns.solve_navier_stokes(w0_ns, nu=1e-3, t_final=0.03, dt=2e-3, record_steps=3)
    assert x_ns.shape == (n, 3, S, S)
    np.testing.assert_allclose(x_ns[:, 2], ref_ns[..., 1], rtol=0, atol=1e-6)
    np.testing.assert_allclose(y_ns[:, 2], ref_ns[..., 2], rtol=0, atol=1e-6)
    assert not np.allclose(x_ns[:, 2], x[:, 2], atol=1e-2)


def test_buoyancy_changes_generated_pairs():
    a = cns.generate_coupled_navier_stokes(2, [16], system="boussinesq", seed=1, beta=0.0, **FAST).pairs[16]
    b = cns.generate_coupled_navier_stokes(2, [16], system="boussinesq", seed=1, beta=2.0, **FAST).pairs[16]
    for i in (0, 1):  # x and y: vorticity changed by buoyancy
        assert np.linalg.norm(b[i][:, 2] - a[i][:, 2]) > 0.1 * np.linalg.norm(a[i][:, 2])


def test_restriction_and_fine_solve():
    out = cns.generate_coupled_navier_stokes(2, [8, 16, 32], system="boussinesq", seed=5, **FAST).pairs
    for r in (8, 16):
        for i in (0, 1):
            assert out[r][i].shape == (2, 4, r, r)
            np.testing.assert_array_equal(out[r][i], out[32][i][..., :: 32 // r, :: 32 // r])
    via_fine = cns.generate_coupled_navier_stokes(2, [16], system="boussinesq", fine_resolution=32, seed=5, **FAST)
    np.testing.assert_array_equal(via_fine.pairs[16][1], out[16][1])
    coarse = cns.generate_coupled_navier_stokes(2, [16], system="boussinesq", seed=5, **FAST)
    assert not np.array_equal(coarse.pairs[16][0], out[16][0])


def test_determinism_by_seed_and_independence_of_batching():
    a = cns.generate_coupled_navier_stokes(3, [16], system="boussinesq", seed=7, **FAST).pairs[16]
    b = cns.generate_coupled_navier_stokes(3, [16], system="boussinesq", seed=7, **FAST).pairs[16]
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = cns.generate_coupled_navier_stokes(3, [16], system="boussinesq", seed=8, **FAST).pairs[16]
    assert not np.allclose(a[0], c[0], atol=1e-2)
    d = cns.generate_coupled_navier_stokes(5, [16], system="boussinesq", seed=7, batch_size=2, **FAST).pairs[16]
    np.testing.assert_allclose(d[0][:3], a[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(d[1][:3], a[1], rtol=0, atol=1e-6)
    assert not np.allclose(a[0][0], a[0][1], atol=1e-2)


def test_cache_roundtrip_and_regeneration(tmp_path, monkeypatch):
    kw = {"system": "boussinesq", "seed": 4, **FAST}
    first = cns.load_or_generate_coupled_navier_stokes(tmp_path, 2, [8, 16], **kw)
    assert first.variables == ("u", "v", "w", "theta")
    (path,) = tmp_path.iterdir()
    assert path.name.startswith("coupled_navier_stokes_") and path.suffix == ".h5"
    with h5py.File(path, "r") as fh:
        assert {"x_8", "u_8", "x_16", "u_16", "t"} <= set(fh)
        assert fh["u_16"].shape == (2, 4, 16, 16)
        np.testing.assert_allclose(fh["t"][()], [0.02, 0.03])
        assert fh.attrs["system"] == "boussinesq" and fh.attrs["variables"] == "u,v,w,theta"
        assert fh.attrs["beta"] == 0.2 and fh.attrs["seed"] == 4 and fh.attrs["forcing"] == "fno"

    def boom(*args, **kwargs):
        raise AssertionError("generation must not run on a cache hit")

    monkeypatch.setattr(cns, "generate_coupled_navier_stokes", boom)
    second = cns.load_or_generate_coupled_navier_stokes(tmp_path, 2, [8, 16], **kw)
    assert second.variables == first.variables and second.times == first.times
    for r in (8, 16):
        np.testing.assert_array_equal(second.pairs[r][0], first.pairs[r][0])
        np.testing.assert_array_equal(second.pairs[r][1], first.pairs[r][1])
    monkeypatch.undo()
    third = cns.load_or_generate_coupled_navier_stokes(tmp_path, 2, [8, 16], **{**kw, "beta": 1.0})
    assert not np.array_equal(third.pairs[16][1], first.pairs[16][1])
    plain = cns.load_or_generate_coupled_navier_stokes(tmp_path, 2, [8], seed=4, **FAST)
    assert plain.variables == ("u", "v", "w") and plain.pairs[8][0].shape == (2, 3, 8, 8)
    files = sorted(tmp_path.iterdir())
    assert len(files) == 3 and not any(p.name.endswith(".tmp") for p in files)


G = cns.generate_coupled_navier_stokes
S = cns.solve_coupled_navier_stokes


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda: G(2, [16], system="mhd"), ValueError, "system"),
        (lambda: G(2, [16], system="ns", beta=1.0), TypeError, "beta"),
        (lambda: G(2, [16], system="boussinesq", kappa=-1.0), ValueError, "kappa"),
        (lambda: G(2, [16], system="boussinesq", beta="big"), TypeError, "beta"),
        (lambda: G(2, [16], forcing="kolmogorov"), ValueError, "forcing"),
        (lambda: G(2, [16], dt=2e-3, delta_t=3e-3), ValueError, "delta_t"),
        (lambda: G(2, [16], t_start=-1.0), ValueError, "t_start"),
        (lambda: G(2, [16, 24]), ValueError, "resolutions"),
        (lambda: G(2, [16], seed=-1), ValueError, "seed"),
        (lambda: S(np.zeros((8, 8)), nu=1e-3, t_final=0.1, dt=0.01, beta=1.0), ValueError, "beta"),
        (lambda: S(np.zeros((8, 8)), nu=1e-3, t_final=0.1, dt=0.01, source=np.zeros((8, 8))), ValueError, "source"),
        (lambda: S(np.zeros((8, 8)), np.zeros((4, 4)), nu=1e-3, t_final=0.1, dt=0.01), ValueError, "theta0"),
        (lambda: S(np.zeros((8, 8)), np.zeros((8, 8)), nu=1e-3, t_final=0.1, dt=0.01, kappa=-1), ValueError, "kappa"),
        (lambda: S(np.zeros((8, 6)), nu=1e-3, t_final=0.1, dt=0.01), ValueError, "w0"),
        (lambda: cns.load_or_generate_coupled_navier_stokes("unused", 1, [8], gamma=1.0), TypeError, "gamma"),
    ],
)
def test_errors_name_the_argument(call, exc, name):
    with pytest.raises(exc, match=name) as info:
        call()
    assert "expected" in str(info.value) and "got" in str(info.value)
