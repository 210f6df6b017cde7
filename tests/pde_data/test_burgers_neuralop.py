"""The Burgers generator against neuraloperator's real burgers_{train,test}_16.pt, and the check's teeth."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sciattn.pde_data import burgers
from sciattn.pde_data.burgers_neuralop import (
    NEURALOP_BURGERS_FIT,
    compare_to_reference,
    energy_decay,
    fit_initial_law,
    generate_burgers_neuralop,
    mode_energies,
    replay_error,
    summary_statistics,
)

# Tolerances (compare_to_reference's defaults, justified there): energy decay per snapshot within 12%, energies of
# modes 1..5 of u(0) and u(1) within 25%.
DECAY_TOL, SPECTRUM_TOL = 0.12, 0.25


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see tests/conftest.py


def _file(shared_data, split):
    d = torch.load(shared_data / f"burgers_{split}_16.pt", weights_only=True)
    return d["x"].numpy(), d["y"].numpy(), float(d["visc"].flatten()[0])


@pytest.fixture(scope="module")
def generated():
    return generate_burgers_neuralop(200, 16, seed=1)  # the fit saw no generated samples; seed 1 is arbitrary


def test_file_parameters_and_time_span(shared_data):
    x, y, nu = _file(shared_data, "train")
    assert nu == NEURALOP_BURGERS_FIT["nu"] == 0.01 and y.shape[1:] == (17, 16)
    np.testing.assert_array_equal(y[:, 0], x)
    # replaying the file's own x at nu = 0.01 pins the span: t in [0, 0.96] to 1e-4, where [0, 1] is off by 1.5%
    assert NEURALOP_BURGERS_FIT["t_final"] == 0.96
    assert replay_error(x[:40], y[:40], nu=nu, t_final=0.96) < 1e-3
    assert replay_error(x[:40], y[:40], nu=nu, t_final=1.0) > 0.01
    assert replay_error(x[:40], y[:40], nu=0.0101, t_final=0.96) > 0.002  # and the viscosity to about 1%


@pytest.mark.parametrize("split", ["train", "test"])
def test_matched_generator_reproduces_energy_decay_and_spectra(shared_data, generated, split):
    _, y, _ = _file(shared_data, split)
    x_gen, y_gen = generated
    ref, obs = summary_statistics(y), summary_statistics(y_gen)
    assert compare_to_reference(obs, ref, decay_tol=DECAY_TOL, spectrum_tol=SPECTRUM_TOL) == []
    assert ref["energy_decay"][-1] == pytest.approx(0.31, abs=0.01)  # a nonlinear regime: 69% of the energy lost
    assert obs["energy_decay"][-1] == pytest.approx(ref["energy_decay"][-1], rel=DECAY_TOL)
    np.testing.assert_array_equal(y_gen[:, 0], x_gen)


def test_old_default_regime_fails_the_same_check(shared_data):
    _, y, _ = _file(shared_data, "train")
    ref = summary_statistics(y)
    _, y_old = burgers.generate_burgers_trajectories(32, 16, fine_resolution=256, dt=1e-3, seed=1)  # nu 0.1, FNO law
    reasons = compare_to_reference(summary_statistics(y_old), ref)
    assert any(r.startswith("energy_decay") for r in reasons) and any(r.startswith("spectrum_initial") for r in reasons)
    assert energy_decay(y_old)[-1] < 0.01  # nu = 0.1: almost all energy gone, against 0.31 in the file
    # the FNO law at the file's nu and span still fails: the law, not only the viscosity, differs
    _, y_law = burgers.generate_burgers_trajectories(32, 16, fine_resolution=256, dt=1e-3, seed=1, nu=0.01,
                                                    t_final=0.96)
    assert any(r.startswith("spectrum_initial") for r in compare_to_reference(summary_statistics(y_law), ref))


def test_fit_reproduces_the_recorded_constants(shared_data):
    x, _, _ = _file(shared_data, "train")
    fit = fit_initial_law(x, taus=(4.0, 4.5, 5.0, 5.5, 6.0), alphas=np.arange(3.5, 4.51, 0.05))
    assert fit["tau"] == NEURALOP_BURGERS_FIT["tau"] and fit["alpha"] == pytest.approx(NEURALOP_BURGERS_FIT["alpha"])
    assert fit["sigma"] == pytest.approx(NEURALOP_BURGERS_FIT["sigma"], rel=1e-3)
    assert max(abs(np.log(fit["model_over_reference"]))) < 0.05


def test_fit_recovers_a_known_law_through_aliasing():
    rng = np.random.default_rng(3)
    fine = burgers.sample_burgers_initial(1200, 1024, rng=rng, sigma=100.0, tau=3.0, alpha=3.0)
    fit = fit_initial_law(fine[:, ::64], source_points=1024, taus=np.arange(1.0, 5.01, 0.5),
                          alphas=np.arange(2.0, 4.01, 0.1))
    assert fit["tau"] == 3.0 and fit["alpha"] == pytest.approx(3.0)
    assert fit["sigma"] == pytest.approx(100.0, rel=0.05)


def test_trajectories_layout_and_agreement_with_pair_generator():
    x, y = burgers.generate_burgers_trajectories(3, 16, n_times=5, fine_resolution=64, seed=2, nu=0.05, dt=1e-3)
    assert x.shape == (3, 16) and y.shape == (3, 5, 16) and x.dtype == y.dtype == np.float64
    np.testing.assert_array_equal(y[:, 0], x)
    a, u = burgers.generate_burgers(3, [16], fine_resolution=64, seed=2, nu=0.05, dt=1e-3)[16]
    np.testing.assert_allclose(x, a, atol=1e-6)  # float32 pairs, the same samples
    np.testing.assert_allclose(y[:, -1], u, atol=1e-6)
    assert np.all(np.diff((y**2).sum(-1), axis=1) < 0)  # viscous: energy decreases
    with pytest.raises(ValueError, match="n_times: expected an int >= 2"):
        burgers.generate_burgers_trajectories(1, 16, n_times=1)
    with pytest.raises(ValueError, match="resolutions: expected every resolution to divide"):
        burgers.generate_burgers_trajectories(1, 16, fine_resolution=24)
    with pytest.raises(TypeError, match="params: expected keywords among"):
        generate_burgers_neuralop(1, visc=0.1)


def test_statistics_helpers_check_values_and_shapes():
    k = np.arange(16) / 16
    u = np.stack([np.sin(2 * np.pi * k), 2 * np.cos(2 * np.pi * 3 * k)])
    e = mode_energies(u)
    np.testing.assert_allclose(e[[1, 3]], [0.125, 0.5], atol=1e-15)  # |1/2|^2 / 2 and |1|^2 / 2 over two samples
    assert np.allclose(np.delete(e, [1, 3]), 0.0, atol=1e-30)
    np.testing.assert_allclose(energy_decay(np.stack([u, u / 2], axis=1)), [1.0, 0.25])
    with pytest.raises(ValueError, match=r"y: expected an array \(N, T, X\)"):
        energy_decay(u)
