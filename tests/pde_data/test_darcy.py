"""Tests of the Darcy-flow generator sciattn.pde_data.darcy."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from sciattn.pde_data import darcy


def _grid(S: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(0.0, 1.0, S + 1)
    return np.meshgrid(x, x, indexing="ij")


def _manufactured(S: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a = 1 + x + y^2, u* = sin(pi x) sin(pi y), f = -div(a grad u*) at the nodes."""
    X, Y = _grid(S)
    a = 1.0 + X + Y**2
    sx, cx = np.sin(np.pi * X), np.cos(np.pi * X)
    sy, cy = np.sin(np.pi * Y), np.cos(np.pi * Y)
    u = sx * sy
    # -div(a grad u) = -(a_x u_x + a_y u_y) - a (u_xx + u_yy)
    f = -(1.0 * np.pi * cx * sy + 2.0 * Y * np.pi * sx * cy) + a * 2.0 * np.pi**2 * u
    return a, u, f


def test_residual_of_random_coefficient_is_tiny():
    a = darcy.sample_coefficient(1, 33, rng=np.random.default_rng(3))[0]
    assert set(np.unique(a)) == {3.0, 12.0}
    u = darcy.solve_darcy(a, 1.0)
    res = darcy.darcy_residual(a, u, 1.0)
    assert res.shape == (31, 31)
    assert np.abs(res).max() < 1e-10
    # the residual operator is not trivially zero: a perturbed u has a large residual
    u2 = u.copy()
    u2[10, 10] += 1e-3
    assert np.abs(darcy.darcy_residual(a, u2, 1.0)).max() > 1.0


def test_manufactured_solution_second_order():
    errors = []
    for S in (16, 32, 64):
        a, u_star, f = _manufactured(S)
        u = darcy.solve_darcy(a, f)
        errors.append(np.abs(u - u_star).max())
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((orders > 1.8) & (orders < 2.2)), (errors, orders)


def test_restriction_is_exact_slicing():
    out = darcy.generate_darcy(3, [16, 32, 64], seed=5)
    c64, u64 = out[64]
    assert c64.shape == u64.shape == (3, 64, 64)
    assert c64.dtype == u64.dtype == np.float32
    for r in (16, 32):
        c, u = out[r]
        assert c.shape == u.shape == (3, r, r)
        step = 64 // r
        np.testing.assert_array_equal(c, c64[:, ::step, ::step])
        np.testing.assert_array_equal(u, u64[:, ::step, ::step])
        np.testing.assert_array_equal(darcy.restrict(u64, r), u)


def test_fine_resolution_solves_once_then_restricts():
    # a coarse resolution taken from a finer solve equals the fine solve's slice, not a coarse solve
    fine = darcy.generate_darcy(1, [16, 32], seed=1)
    via_fine = darcy.generate_darcy(1, [16], fine_resolution=32, seed=1)
    np.testing.assert_array_equal(via_fine[16][1], fine[16][1])
    coarse = darcy.generate_darcy(1, [16], seed=1)
    assert not np.array_equal(coarse[16][1], fine[16][1])


def test_determinism():
    a = darcy.generate_darcy(3, [16], seed=7)[16]
    b = darcy.generate_darcy(3, [16], seed=7)[16]
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = darcy.generate_darcy(3, [16], seed=8)[16]
    assert not np.array_equal(a[0], c[0])
    assert not np.array_equal(a[1], c[1])
    # sample i does not depend on n_samples
    d = darcy.generate_darcy(5, [16], seed=7)[16]
    np.testing.assert_array_equal(d[0][:3], a[0])
    np.testing.assert_array_equal(d[1][:3], a[1])
    # samples within a batch differ from each other
    assert not np.array_equal(a[0][0], a[0][1])


def test_statistics_match_fno_data():
    c, u = darcy.generate_darcy(8, [64], seed=0)[64]
    frac_high = float((c == 12.0).mean())
    assert 0.3 < frac_high < 0.7
    assert set(np.unique(c).tolist()) == {3.0, 12.0}
    u_max = u.max(axis=(1, 2))
    assert np.all(u_max > 0.005) and np.all(u_max < 0.03), u_max
    assert u.min() >= 0.0  # maximum principle for f = 1 > 0


def test_boundary_is_zero():
    c, u = darcy.generate_darcy(2, [32], seed=2)[32]
    assert np.all(u[:, 0, :] == 0.0)
    assert np.all(u[:, :, 0] == 0.0)
    assert np.all(u[:, 1:, 1:] > 0.0)
    full = darcy.solve_darcy(darcy.sample_coefficient(1, 17, rng=np.random.default_rng(0))[0])
    assert full.shape == (17, 17)
    for edge in (full[0], full[-1], full[:, 0], full[:, -1]):
        assert np.all(edge == 0.0)


def test_cache_roundtrip(tmp_path, monkeypatch):
    first = darcy.load_or_generate_darcy(tmp_path, 2, [8, 16], seed=4)
    files = sorted(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".h5"
    with h5py.File(files[0], "r") as fh:
        assert {"coeff_8", "u_8", "coeff_16", "u_16"} <= set(fh)
        assert fh.attrs["seed"] == 4 and fh.attrs["n_samples"] == 2
        assert fh.attrs["tau"] == darcy.DARCY_DEFAULTS["tau"]
    np.testing.assert_array_equal(first[16][1], darcy.generate_darcy(2, [8, 16], seed=4)[16][1])

    def boom(*args, **kwargs):
        raise AssertionError("solve_darcy must not be called on a cache hit")

    monkeypatch.setattr(darcy, "solve_darcy", boom)
    second = darcy.load_or_generate_darcy(tmp_path, 2, [8, 16], seed=4)
    for r in (8, 16):
        np.testing.assert_array_equal(second[r][0], first[r][0])
        np.testing.assert_array_equal(second[r][1], first[r][1])
        assert second[r][1].dtype == np.float32
    monkeypatch.undo()

    darcy.load_or_generate_darcy(tmp_path, 2, [8, 16], seed=4, tau=4.0)
    files = sorted(tmp_path.iterdir())
    assert len(files) == 2
    assert not any(p.name.endswith(".tmp") for p in files)


def test_cache_regenerates_on_mismatched_attrs(tmp_path):
    darcy.load_or_generate_darcy(tmp_path, 1, [8], seed=0)
    (path,) = tmp_path.iterdir()
    with h5py.File(path, "a") as fh:
        fh.attrs["seed"] = 99
        fh["u_8"][...] = -1.0
    with pytest.warns(UserWarning, match="differ"):
        out = darcy.load_or_generate_darcy(tmp_path, 1, [8], seed=0)
    assert out[8][1].min() >= 0.0


def test_a_truncated_cache_file_is_solved_again_with_a_warning(tmp_path):
    clean = darcy.load_or_generate_darcy(tmp_path, 1, [8], seed=0)
    (path,) = tmp_path.iterdir()
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a write killed half-way
    with pytest.warns(UserWarning, match=r"cannot be read \(path: .* truncated or corrupt.*\); regenerating"):
        out = darcy.load_or_generate_darcy(tmp_path, 1, [8], seed=0)
    assert all((a == b).all() for a, b in zip(out[8], clean[8]))
    assert darcy.load_or_generate_darcy(tmp_path, 1, [8], seed=0)[8][1].tolist() == clean[8][1].tolist()


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda: darcy.generate_darcy(2, [16, 24]), ValueError, "resolutions"),
        (lambda: darcy.generate_darcy(2, [16], fine_resolution=40), ValueError, "resolutions"),
        (lambda: darcy.generate_darcy(0, [16]), ValueError, "n_samples"),
        (lambda: darcy.generate_darcy(2.0, [16]), TypeError, "n_samples"),
        (lambda: darcy.generate_darcy(2, []), ValueError, "resolutions"),
        (lambda: darcy.generate_darcy(2, [16, -4]), ValueError, "resolutions"),
        (lambda: darcy.generate_darcy(2, [16], seed=-1), ValueError, "seed"),
        (lambda: darcy.generate_darcy(2, [16], tau=0.0), ValueError, "tau"),
        (lambda: darcy.generate_darcy(2, [16], low=-3.0), ValueError, "low"),
        (lambda: darcy.restrict(np.zeros((2, 12, 12)), 5), ValueError, "resolution"),
        (lambda: darcy.sample_coefficient(1, 9, rng=0), TypeError, "rng"),
        (lambda: darcy.solve_darcy(-np.ones((9, 9))), ValueError, "coeff"),
        (lambda: darcy.solve_darcy(np.ones((9, 8))), ValueError, "coeff"),
        (lambda: darcy.solve_darcy(np.ones((9, 9)), np.ones((5, 5))), ValueError, "forcing"),
        (lambda: darcy.load_or_generate_darcy("unused", 1, [8], beta=1.0), TypeError, "beta"),
    ],
)
def test_errors_name_the_argument(call, exc, name):
    with pytest.raises(exc, match=name) as info:
        call()
    assert "expected" in str(info.value) and "got" in str(info.value)


def test_restrict_message_states_expected_and_given():
    with pytest.raises(ValueError) as info:
        darcy.restrict(np.zeros((12, 12)), 5)
    msg = str(info.value)
    assert msg.startswith("resolution:") and "12" in msg and "5" in msg
