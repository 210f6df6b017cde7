"""`sciattn evaluate RUN --resolutions ...` on a tiny run of every shipped example config, through the CLI only.

Each config in examples/configs/ is trained for one epoch on 4 samples (sizes cut down so the whole file stays
well under a minute on one core), then swept on its own recorded data source: every row of the report must be
finite and inside the run's recorded training statistics. A sphere run's resolution is nlat (grid nlat x 2 nlat):
the spherical transformer trained at 16 x 32 is swept zero-shot to 8 x 16 and 32 x 64 with its training weights,
and a grid it cannot run on (2 nlat neither a multiple nor a divisor of its internal nlon) is refused in one line.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from sciattn.train.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"
SHARED = Path(os.environ.get("SCIATTN_TEST_SHARED_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")

# config: (overrides of the tiny training run, swept resolutions, expected training resolution, report label)
CASES = {
    "darcy32_demo": (["data.resolution=16", "data.test_resolutions=[16]", "model.latent_resolution=16",
                      "model.d_model=16", "model.n_layers=1"], [8, 16, 32], 16, "darcy"),
    # the physical settings (lift spacing, bias, coarse cells, head grid) stay as shipped at 16²
    "darcy64_mano": (["data.resolution=16", "data.test_resolutions=[16]", "model.width=16", "model.n_layers=1"],
                     [16, 32], 16, "darcy"),
    "darcy_points_erwin": (["data.resolution=64", "data.options.fine_resolution=16"], [32, 64, 128], 64,
                           "darcy_irregular"),
    "navier_stokes32_rollout": (["data.resolution=16", "data.options.t_final=2.0", "data.options.record_steps=8",
                                 "data.options.dt=1e-2", "model.n_layers=1"], [16, 32], 16, "navier_stokes"),
    "shallow_water_spherical": ([], [8, 16, 32], 16, "shallow_water"),
    "coupled_ns_codano": (["data.resolution=16", "model.n_layers=1"], [8, 16, 32], 16, "coupled_navier_stokes"),
    "darcy16_galerkin": ([f'data.train="{SHARED / "darcy_train_16.pt"}"', f'data.test="{SHARED / "darcy_test_16.pt"}"',
                          "model.n_layers=1"], [16, 32], 16, "darcy_neuralop"),
    # no generator is matched to neuraloperator's Burgers trajectories: the test file restricted to divisors of 16
    "burgers16_stepper": ([f'data.train="{SHARED / "burgers_train_16.pt"}"',
                           f'data.test="{SHARED / "burgers_test_16.pt"}"', "model.n_layers=1"], [8, 16], 16,
                          "burgers_train_16"),
}
RESTRICTED = {"burgers16_stepper"}  # swept on the run's own test file, restricted (no matched generator)


def test_every_shipped_config_has_a_case():
    assert sorted(p.stem for p in CONFIGS.glob("*.toml")) == sorted(CASES)


def _train(name: str, out: Path, root: Path, overrides: list[str]) -> None:
    args = ["train", str(CONFIGS / f"{name}.toml"), "--out", str(out), "--no-progress", "--set", "data.n_train=4",
            "--set", "data.n_test=2", "--set", "train.epochs=1", "--set", "train.batch_size=2",
            "--set", f'data.root="{root}"']
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_sweep_of_a_tiny_run(name, tmp_path, capsys):
    overrides, resolutions, train_res, label = CASES[name]
    if name in ("darcy16_galerkin", "burgers16_stepper") and not (SHARED / "darcy_train_16.pt").is_file():
        pytest.skip(f"needs the neuraloperator files in {SHARED} (with them: tests/e2e/test_resolution_sweep.py)")
    run, root = tmp_path / "run", tmp_path / "data"
    _train(name, run, root, overrides)
    capsys.readouterr()
    assert main(["evaluate", str(run), "--resolutions", *map(str, resolutions), "--n-samples", "4",
                 "--root", str(root), "--no-progress"]) == 0
    report = json.loads((run / "eval" / f"{label}.json").read_text())
    rows = {r["resolution"]: r for r in report["rows"]}
    assert list(rows) == resolutions and report["train_resolution"] == train_res
    if name in RESTRICTED:
        assert report["data_built"]["kind"] == "restricted file" and "test" in report["data_built"]["path"]
    else:
        assert report["data_built"]["kind"] == "generated" and report["data_built"]["seed"] == 1  # not training samples
    assert all((name in RESTRICTED or r["n_samples"] == 4) and math.isfinite(r["rel_l2"]) and r["rel_l2"] > 0
               for r in rows.values())
    assert all(r["in_distribution"] is True for r in rows.values()), report["distribution"]["shift"]
    assert rows[train_res]["regime"] == "training"
    points = name == "darcy_points_erwin"
    assert report["layout"] == ("points" if points else "grid")
    assert all((r["rel_h1"] is None) == points for r in rows.values())  # H1 is not defined on point sets
    md = (run / "eval" / f"{label}.md").read_text()
    if name == "shallow_water_spherical":
        assert report["sphere"] is True and f"trained at nlat = {train_res} (a sphere run's resolution is nlat" in md
    else:
        assert f"trained at {train_res} points per {'sample' if points else 'axis'}" in md
    assert "**Verdict:" in capsys.readouterr().out
    if points:  # point counts: coarser and finer than the 64 training points
        assert [rows[r]["regime"] for r in (32, 128)] == ["zero-shot coarser", "zero-shot finer"]
        assert "the same PDE samples at every point count" in md
    if name == "shallow_water_spherical":
        assert report["data_built"]["solve_resolution"] == 16 and report["data_built"]["lmax"] == 6
        assert [rows[r]["regime"] for r in (8, 32)] == ["zero-shot coarser", "zero-shot finer"]
        # the same band-limited samples on every grid, the same weights: errors close to the training grid's
        assert all(0.5 < rows[r]["ratio_to_training"] < 2 for r in (8, 32)), rows
        # each row is the trained model on that grid: recomputed with its standalone on_grid copy
        from sciattn.train.checkpoint import load_checkpoint, load_model
        from sciattn.train.losses import relative_l2
        from sciattn.train.sweep_data import run_source, sweep_sets

        model, xn, yn, _ = load_model(run)
        sets, _ = sweep_sets(run_source(load_checkpoint(run), run), [8, 32], run, n_samples=4, seed=1, root=root)
        for r in (8, 32):
            with torch.no_grad():
                pred = yn.decode(model.on_grid(r, 2 * r)(xn.encode(sets[r].x.float())))
            want = float(relative_l2(pred, sets[r].y.float()[:, :pred.shape[1]], 2))
            assert rows[r]["rel_l2"] == pytest.approx(want, rel=1e-4), (r, rows[r]["rel_l2"], want)
        assert main(["evaluate", str(run), "--resolutions", "16", "12", "--root", str(root), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert ("resolutions: operator 'spherical_transformer' (trained at 16x32, internal grid 8x16) cannot run at "
                "nlat = 12 (grid 12x24): expected nlat with 2·nlat a multiple or a divisor of 16, got 12" in err), err
    if label in ("darcy", "navier_stokes"):  # `data generate --like RUN`: the run's generator and parameters
        assert main(["data", "generate", label, "--like", str(run), "--n", "1", "--resolution", "8",
                     "--out", str(tmp_path / "gen"), "--no-progress"]) == 0
        assert (tmp_path / "gen" / f"{label}_8.nc").stat().st_size > 0
