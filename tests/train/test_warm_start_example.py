"""The warm-start coupling example: CG from the exact solution needs no iteration, and the example
runs end to end, the warm and cold solves agreeing to the solver tolerance."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sciattn.pde_data.darcy import DARCY_DEFAULTS, darcy_system, sample_coefficient, solve_darcy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "warm_start_darcy.py"


def test_darcy_system_matches_the_direct_solver_and_cg_counts_iterations():
    pcg = runpy.run_path(str(EXAMPLE))["pcg_iterations"]
    a = sample_coefficient(1, 17, rng=np.random.default_rng(0), **DARCY_DEFAULTS)[0]
    A, f = darcy_system(a)
    exact = solve_darcy(a)[1:-1, 1:-1].ravel()
    np.testing.assert_allclose(A @ exact, f, rtol=1e-10, atol=1e-10)
    cold, _, x = pcg(A, f, np.zeros_like(f), 1e-10)
    assert cold > 5 and np.allclose(x, exact, rtol=1e-7, atol=1e-12)
    warm, _, _ = pcg(A, f, exact, 1e-10)
    assert warm == 0
    half, _, _ = pcg(A, f, exact + 1e-3 * np.random.default_rng(1).standard_normal(f.shape), 1e-10)
    assert half > 0  # a perturbed start needs iterations again (noise is not cheaper than zero for CG)


@pytest.mark.slow  # about 30 s; the example's solver and CG are checked above in the default run
def test_example_runs_end_to_end(tmp_path):
    out = tmp_path / "report.json"
    subprocess.run([sys.executable, str(EXAMPLE), "--epochs", "1", "--n-train", "16", "--n-test", "2",
                    "--out", str(out)], check=True, capture_output=True, timeout=300)
    report = json.loads(out.read_text())
    assert report["max_solution_difference"] < 1e-6
    assert len(report["samples"]) == 2 and report["mean_cold_iterations"] > 50
