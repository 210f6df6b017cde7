"""Tests of the viscous Burgers generator sciattn.pde_data.burgers."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from sciattn.pde_data import burgers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _helpers as th  # noqa: E402

# short runs: t_final 0.1 with dt 1e-3 is 100 integrating-factor RK4 steps
FAST = {"t_final": 0.1, "dt": 1e-3}


def _x(n: int) -> np.ndarray:
    return np.arange(n) / n


def _cole_hopf(x: np.ndarray, t: float, nu: float) -> np.ndarray:
    """Exact periodic solution u = -2 nu phi_x / phi, phi = 1 + 0.5 exp(-4 pi^2 nu t) cos(2 pi x)."""
    e = 0.5 * math.exp(-4.0 * math.pi**2 * nu * t)
    phi = 1.0 + e * np.cos(2.0 * np.pi * x)
    phi_x = -2.0 * np.pi * e * np.sin(2.0 * np.pi * x)
    return -2.0 * nu * phi_x / phi


def test_defaults_are_the_paper_values():
    d = burgers.BURGERS_DEFAULTS
    assert d["nu"] == 0.1 and d["t_final"] == 1.0
    assert d["sigma"] ** 2 == 625.0 and d["tau"] ** 2 == 25.0 and d["alpha"] == 2.0


def test_mean_is_conserved_to_roundoff():
    rng = np.random.default_rng(0)
    u0 = burgers.sample_burgers_initial(3, 64, rng=rng) + np.array([[0.7], [-0.3], [0.0]])
    u = burgers.solve_burgers(u0, nu=0.05, t_final=0.2, dt=1e-3)
    assert np.abs(u - u0).max() > 1e-2  # the field did evolve
    np.testing.assert_allclose(u.mean(axis=1), u0.mean(axis=1), rtol=0, atol=1e-14)


@pytest.mark.parametrize("k", [1, 3])
def test_small_amplitude_mode_decays_like_heat_equation(k):
    n, nu, t, eps = 32, 0.1, 0.2, 1e-8
    x = _x(n)
    u0 = eps * np.cos(2.0 * np.pi * k * x + 0.3)
    u = burgers.solve_burgers(u0, nu=nu, t_final=t, dt=1e-2)
    exact = u0 * math.exp(-nu * (2.0 * math.pi * k) ** 2 * t)
    assert np.abs(u - exact).max() <= 1e-6 * np.abs(exact).max()


def test_nonlinear_solution_matches_cole_hopf():
    n, nu, t = 64, 0.1, 0.5
    x = _x(n)
    u0 = _cole_hopf(x, 0.0, nu)
    errs = []
    for dt in (1e-2, 5e-3):
        u = burgers.solve_burgers(u0, nu=nu, t_final=t, dt=dt)
        errs.append(np.abs(u - _cole_hopf(x, t, nu)).max())
    assert errs[1] < 1e-9, errs
    assert errs[0] / errs[1] > 8.0, errs  # fourth order in time (ratio ~16)


def test_solver_types_shapes_and_record_times():
    u0 = _cole_hopf(_x(32), 0.0, 0.1)
    out_np = burgers.solve_burgers(u0, nu=0.1, t_final=0.1, dt=1e-3)
    assert isinstance(out_np, np.ndarray) and out_np.shape == (32,) and out_np.dtype == np.float64
    out_t = burgers.solve_burgers(
        torch.tensor(np.stack([u0, -u0]), dtype=torch.float32), nu=0.1, t_final=0.1, dt=1e-3
    )
    assert isinstance(out_t, torch.Tensor) and out_t.shape == (2, 32) and out_t.dtype == torch.float64
    np.testing.assert_allclose(out_t[0].numpy(), out_np, atol=1e-6)  # float32 input
    rec = burgers.solve_burgers(u0, nu=0.1, t_final=0.2, dt=1e-3, record_times=[0.0, 0.1, 0.2])
    assert rec.shape == (32, 3)  # time last
    np.testing.assert_allclose(rec[:, 0], u0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(rec[:, 1], out_np, atol=1e-13)
    np.testing.assert_allclose(rec[:, 2], _cole_hopf(_x(32), 0.2, 0.1), atol=1e-9)


def test_initial_field_statistics():
    n = 256
    a = burgers.sample_burgers_initial(400, n, rng=np.random.default_rng(1))
    assert a.shape == (400, n) and a.dtype == np.float64
    np.testing.assert_allclose(a.mean(axis=1), 0.0, atol=1e-12)  # zero-mean mode
    k = np.arange(1, n // 2)
    var = 2.0 * np.sum(625.0 * (4.0 * np.pi**2 * k**2 + 25.0) ** -2.0)  # 2 sum(lambda_k), ~0.35
    assert abs(a.var() / var - 1.0) < 0.1, (a.var(), var)
    # the spectrum falls off like k^-4: no visible power above the first few modes
    power = np.mean(np.abs(np.fft.rfft(a, axis=1)) ** 2, axis=0)
    assert power[1] > 5.0 * power[2] > 25.0 * power[4]
    # low modes do not depend on the grid size
    b = burgers.sample_burgers_initial(1, 2 * n, rng=np.random.default_rng(1))
    np.testing.assert_allclose(np.fft.rfft(b[0])[1:20] / (2 * n), np.fft.rfft(a[0])[1:20] / n, atol=1e-12)


def test_layout_and_restriction_are_exact_slices():
    out = burgers.generate_burgers(3, [16, 32, 64], seed=5, **FAST)
    a64, u64 = out[64]
    assert a64.shape == u64.shape == (3, 64) and a64.dtype == u64.dtype == np.float32
    for r in (16, 32):
        a, u = out[r]
        assert a.shape == u.shape == (3, r)  # FNO 'a', 'u' layout (N, n)
        np.testing.assert_array_equal(a, a64[:, :: 64 // r])
        np.testing.assert_array_equal(u, u64[:, :: 64 // r])
    assert not np.allclose(u64, a64, atol=1e-3)


def test_fine_solved_once_and_resolutions_agree():
    fine = burgers.generate_burgers(2, [32, 128], seed=1, **FAST)
    via_fine = burgers.generate_burgers(2, [32], fine_resolution=128, seed=1, **FAST)
    np.testing.assert_array_equal(via_fine[32][1], fine[32][1])
    # an independent coarse solve of the same sample agrees closely after the viscous time
    coarse = burgers.generate_burgers(2, [32], seed=1, **FAST)
    u_c, u_f = coarse[32][1], fine[32][1]
    assert not np.array_equal(u_c, u_f)
    assert np.linalg.norm(u_c - u_f) / np.linalg.norm(u_f) < 1e-5  # the inputs differ by ~2%


def test_determinism_and_independence_of_n_samples():
    a = burgers.generate_burgers(3, [32], seed=7, **FAST)[32]
    b = burgers.generate_burgers(3, [32], seed=7, **FAST)[32]
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = burgers.generate_burgers(3, [32], seed=8, **FAST)[32]
    assert not np.array_equal(a[0], c[0])
    d = burgers.generate_burgers(5, [32], seed=7, **FAST)[32]
    np.testing.assert_array_equal(d[0][:3], a[0])
    np.testing.assert_allclose(d[1][:3], a[1], rtol=0, atol=1e-6)
    e = burgers.generate_burgers(5, [32], seed=7, batch_size=2, **FAST)[32]
    np.testing.assert_allclose(e[1], d[1], rtol=0, atol=1e-6)
    assert not np.array_equal(a[0][0], a[0][1])


def test_cache_roundtrip(tmp_path, monkeypatch):
    first = burgers.load_or_generate_burgers(tmp_path, 2, [16, 32], seed=4, **FAST)
    (path,) = tmp_path.iterdir()
    assert path.name.startswith("burgers_") and path.suffix == ".h5"
    with h5py.File(path, "r") as fh:
        assert {"a_16", "u_16", "a_32", "u_32"} <= set(fh)
        assert fh["u_32"].shape == (2, 32)
        assert fh.attrs["seed"] == 4 and fh.attrs["nu"] == 0.1 and fh.attrs["dt"] == 1e-3
    np.testing.assert_array_equal(first[32][1], burgers.generate_burgers(2, [16, 32], seed=4, **FAST)[32][1])
    th.assert_cache_reused(
        monkeypatch, tmp_path, burgers, "solve_burgers",
        lambda: burgers.load_or_generate_burgers(tmp_path, 2, [16, 32], seed=4, **FAST),
        lambda: burgers.load_or_generate_burgers(tmp_path, 2, [16, 32], seed=4, nu=0.05, **FAST),
        first, (16, 32),
    )


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda: burgers.generate_burgers(2, [16, 24]), ValueError, "resolutions"),
        (lambda: burgers.generate_burgers(0, [16]), ValueError, "n_samples"),
        (lambda: burgers.generate_burgers(2, [16], seed=-1), ValueError, "seed"),
        (lambda: burgers.generate_burgers(2, [16], nu=0.0), ValueError, "nu"),
        (lambda: burgers.solve_burgers(np.zeros((2, 2, 8)), nu=0.1, t_final=1.0, dt=0.1), ValueError, "u0"),
        (lambda: burgers.solve_burgers(np.zeros(8), nu=-1.0, t_final=1.0, dt=0.1), ValueError, "nu"),
        (
            lambda: burgers.solve_burgers(np.zeros(8), nu=0.1, t_final=1.0, dt=0.1, record_times=[2.0]),
            ValueError,
            "record_times",
        ),
        (lambda: burgers.solve_burgers([0.0] * 8, nu=0.1, t_final=1.0, dt=0.1), TypeError, "u0"),
        (lambda: burgers.sample_burgers_initial(1, 16, rng=0), TypeError, "rng"),
        (lambda: burgers.load_or_generate_burgers("unused", 1, [8], beta=1.0), TypeError, "beta"),
    ],
)
def test_errors_name_the_argument(call, exc, name):
    with pytest.raises(exc, match=name) as info:
        call()
    assert "expected" in str(info.value) and "got" in str(info.value)
