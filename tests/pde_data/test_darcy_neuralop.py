"""The Darcy generator matched to neuraloperator's darcy_*_16.pt: statistics against the real file, and teeth."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sciattn.pde_data.darcy import generate_darcy
from sciattn.pde_data.darcy_neuralop import (
    NEURALOP_DARCY_FIT,
    compare_to_reference,
    energy_spectrum,
    file_facts,
    generate_darcy_neuralop,
    summary_statistics,
)

# Tolerance of the match (compare_to_reference's rule): means and stds of x and y within 10 % of the file's,
# energy-spectrum shells k = 1..6 of x and y within 25 %.
REL_TOL, SPECTRUM_TOL = 0.10, 0.25


@pytest.fixture
def reference(shared_data):
    d = torch.load(shared_data / "darcy_train_16.pt", weights_only=True)
    return d["x"].numpy().astype(np.float64), d["y"].numpy().astype(np.float64)


def test_matched_generator_statistics_match_darcy_train_16(reference):
    x, y = reference
    mask, yy = generate_darcy_neuralop(200, [16], seed=1)[16]  # fit used seed 0: fresh samples
    obs, ref = summary_statistics(mask, yy), summary_statistics(x, y)
    assert compare_to_reference(obs, ref, rel_tol=REL_TOL, spectrum_tol=SPECTRUM_TOL) == []
    assert set(np.unique(mask)) == {0.0, 1.0}
    assert abs(obs["y_mean"] - 0.386) < 0.04 and abs(obs["y_std"] - 0.340) < 0.034


def test_fno_recipe_fails_the_same_check(reference):
    x, y = reference
    ref = summary_statistics(x, y)
    coeff, u = generate_darcy(100, [16], fine_resolution=128, seed=1)[16]  # built-in solver: 3/12, f = 1
    raw = compare_to_reference(summary_statistics(coeff, u), ref)
    assert any(r.startswith("x_mean") for r in raw) and any(r.startswith("y_mean") for r in raw)
    # the FNO law (tau 3, 12/3) as a mask and rescaled to the file's mean still fails: scaling alone is not a match
    mask, yy = generate_darcy_neuralop(100, [16], seed=1, tau=3.0, low=3.0, scale=1.0)[16]
    yy = yy * (y.mean() / yy.mean())
    reasons = compare_to_reference(summary_statistics(mask, yy), ref)
    assert any(r.startswith("y_std") for r in reasons), reasons


def test_file_layout_facts(reference):
    facts = file_facts(*reference)
    assert facts["boundary_abs_mean"] < 0.01  # row/column 0 is the Dirichlet boundary
    assert abs(facts["row1_mean"] - facts["row_last_mean"]) < 0.02  # nodes i/16: symmetric about 1/2
    assert facts["corr_true_fraction_mean_y"] < -0.5  # True is the permeable (high) phase


def test_same_samples_at_every_resolution_and_fine_solve():
    data = generate_darcy_neuralop(3, [16, 32, 64], seed=4)
    m64, y64 = data[64]
    for r in (16, 32):
        np.testing.assert_array_equal(data[r][0], m64[:, :: 64 // r, :: 64 // r])
        np.testing.assert_array_equal(data[r][1], y64[:, :: 64 // r, :: 64 // r])
    # solved at 128 even when only 16 is asked for: the 16-point samples equal the 64-point ones restricted
    m16, y16 = generate_darcy_neuralop(3, [16], seed=4)[16]
    np.testing.assert_array_equal(m16, data[16][0])
    np.testing.assert_allclose(y16, data[16][1], rtol=0, atol=0)
    assert NEURALOP_DARCY_FIT["solve_resolution"] >= 64


def test_energy_spectrum_is_parseval():
    f = np.random.default_rng(0).standard_normal((5, 12, 12))
    e = energy_spectrum(f)
    assert e.shape == (7,)
    np.testing.assert_allclose(e.sum(), np.mean(f**2), rtol=1e-12)
    const = energy_spectrum(np.full((2, 8, 8), 3.0))
    np.testing.assert_allclose(const, [9.0, 0, 0, 0, 0], atol=1e-12)


def test_unknown_parameter_is_named():
    with pytest.raises(TypeError, match="nu"):
        generate_darcy_neuralop(1, [8], nu=1.0)
