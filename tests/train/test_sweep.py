"""`sciattn evaluate RUN --resolutions ... --data NAME_OR_PATH`: the resolution-invariance report of a
tiny trained Darcy run, checked against an independent evaluation of the same samples."""

from __future__ import annotations

import json

import pytest
import torch

from sciattn.pde_data import load
from sciattn.pde_data.generate import generate_to_netcdf
from sciattn.pde_data.neuralop_pt import write_neuralop_pt
from sciattn.train.checkpoint import load_model
from sciattn.train.cli import main
from sciattn.train.config import load_config
from sciattn.train.data import load_at_resolutions
from sciattn.train.run import train_run
from sciattn.train.trainer import evaluate_dataset

CONFIG = {
    "model": {"name": "galerkin_transformer", "d_model": 16, "n_layers": 1, "n_heads": 2, "n_modes": 4,
              "regressor_width": 8},
    "data": {"format": "darcy_solver", "train_resolution": 8, "test_resolutions": [8], "n_train": 16, "n_test": 4},
    "train": {"epochs": 1, "batch_size": 4, "lr": 5e-3, "seed": 3, "tensorboard": False},
}


@pytest.fixture(scope="module")
def darcy_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    cfg = load_config({**CONFIG, "data": {**CONFIG["data"], "cache_dir": str(root / "cache")}})
    train_run(cfg, root / "run", progress=False, log=lambda m: None)
    return root


def test_sweep_report_matches_an_independent_evaluation(darcy_run, capsys):
    root = darcy_run
    assert main(["evaluate", str(root / "run"), "--data", "darcy", "--resolutions", "16", "4", "8", "--root",
                 str(root / "data"), "--n-samples", "3", "--no-progress"]) == 0
    report = json.loads((root / "run" / "eval" / "darcy.json").read_text())
    rows = {r["resolution"]: r for r in report["rows"]}
    assert list(rows) == [4, 8, 16] and report["train_resolution"] == 8 and report["seed"] == 1
    assert [rows[r]["regime"] for r in (4, 8, 16)] == ["zero-shot coarser", "training", "zero-shot finer"]
    assert rows[8]["ratio_to_training"] == 1.0
    assert rows[16]["ratio_to_training"] == pytest.approx(rows[16]["rel_l2"] / rows[8]["rel_l2"])
    assert all(r["ms_per_sample"] > 0 and r["n_samples"] == 3 for r in rows.values())
    assert report["rollout"] is None  # Darcy is not a time series

    # oracle: the registry's own generated split (one solve at 16, seed 1) evaluated directly
    model, xn, yn, _ = load_model(root / "run")
    ds = load("darcy", split="test", resolution=16, root=root / "data", n_train=0, n_test=3, seed=1,
              fine_resolution=16, progress=False)
    direct = evaluate_dataset(model, ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=2)
    assert rows[16]["rel_l2"] == pytest.approx(direct["rel_l2"], rel=1e-6)
    assert rows[16]["rel_h1"] == pytest.approx(direct["rel_h1"], rel=1e-6)

    md = (root / "run" / "eval" / "darcy.md").read_text()
    assert "| 16 | zero-shot finer | " in md and "| relative L2 | relative H1 |" in md
    assert (root / "run" / "eval" / "darcy_resolution.png").stat().st_size > 5000
    assert f"| 4 | zero-shot coarser | yes | {rows[4]['rel_l2']:.4f} |" in capsys.readouterr().out
    assert all(r["in_distribution"] for r in rows.values()) and report["distribution"]["shift"] == {}


def test_same_samples_at_every_resolution(tmp_path):
    sets = load_at_resolutions("darcy", [4, 8], root=tmp_path, n_samples=2, seed=0)
    torch.testing.assert_close(sets[8].x[:, :, ::2, ::2], sets[4].x)  # restriction of one fine solve
    torch.testing.assert_close(sets[8].y[:, :, ::2, ::2], sets[4].y)
    path = tmp_path / "f_16.pt"
    write_neuralop_pt(path, sets[8].x[:, 0].repeat_interleave(2, -1).repeat_interleave(2, -2),
                      sets[8].y[:, 0].repeat_interleave(2, -1).repeat_interleave(2, -2))
    from_file = load_at_resolutions(path, [8, 16], split=None)  # one file, no train/test division: all of it
    torch.testing.assert_close(from_file[8].x, sets[8].x)  # strided back to the original nodes
    with pytest.raises(ValueError, match=r"resolution: .*f_16.pt' stores 16 points per axis"):
        load_at_resolutions(path, [12], split=None)
    nc = generate_to_netcdf("darcy", 2, 8, tmp_path, progress=False)  # NetCDF: loaded as stored, then strided
    stored = load_at_resolutions(nc, [4, 8], split=None)
    torch.testing.assert_close(stored[4].y, stored[8].y[:, :, ::2, ::2])
    with pytest.raises(ValueError, match=r"resolutions: .*darcy_8.nc' holds 8x8 points and cannot be restricted to "
                                         r"16 per axis"):
        load_at_resolutions(nc, [16], split=None)


def test_sweep_cli_errors(darcy_run, capsys):
    root = darcy_run
    assert main(["evaluate", str(root / "run"), "--data", "darcy", "burgers", "--resolutions", "8"]) == 2
    assert "--data: expected one benchmark name or path with --resolutions" in capsys.readouterr().err
    assert main(["evaluate", str(root / "run"), "--data", "burgers", "--resolutions", "16", "--root",
                 str(root / "data"), "--n-samples", "2", "--no-progress"]) == 2
    assert "data: the run was trained on 2-D fields (8x8), got 1-D fields (16) from 'burgers'" in \
        capsys.readouterr().err


def test_sweep_without_data_uses_the_recorded_generator(darcy_run, capsys):
    root = darcy_run
    assert main(["evaluate", str(root / "run"), "--resolutions", "8", "16", "--root", str(root / "data"),
                 "--n-samples", "3", "--no-progress"]) == 0
    report = json.loads((root / "run" / "eval" / "darcy.json").read_text())
    assert report["data_built"]["kind"] == "generated" and report["data_built"]["generator"] == "darcy"
    assert report["seed"] == 1  # the run's data seed (0) + 1: not the training samples
    # the same samples as naming the generator explicitly (oracle: the registry split, as above)
    model, xn, yn, _ = load_model(root / "run")
    ds = load("darcy", split="test", resolution=16, root=root / "data", n_train=0, n_test=3, seed=1,
              fine_resolution=16, progress=False)
    direct = evaluate_dataset(model, ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=2)
    assert report["rows"][1]["rel_l2"] == pytest.approx(direct["rel_l2"], rel=1e-6)
    assert "Verdict:" in capsys.readouterr().out


def test_out_of_distribution_data_is_refused_then_labelled(darcy_run, tmp_path, capsys):
    root = darcy_run
    sets = load_at_resolutions("darcy", [8], root=tmp_path, n_samples=4, seed=2)
    path = tmp_path / "shifted_test_8.pt"
    write_neuralop_pt(path, sets[8].x[:, 0] / 12.0, sets[8].y[:, 0] * 100.0)  # another scaling of the same law
    args = ["evaluate", str(root / "run"), "--data", str(path), "--resolutions", "8", "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "data: the evaluation data 'shifted_test_8' lies outside the training data's statistics" in err
    assert "--allow-distribution-shift" in err and "x[0]: std" in err
    with pytest.warns(UserWarning, match="OUT OF DISTRIBUTION"):
        assert main(args + ["--allow-distribution-shift"]) == 0
    report = json.loads((root / "run" / "eval" / "shifted_test_8.json").read_text())
    assert report["verdict"].startswith("out of distribution") and report["rows"][0]["in_distribution"] is False
    assert "y[0]: std" in " ".join(report["distribution"]["shift"]["8"])
    md = (root / "run" / "eval" / "shifted_test_8.md").read_text()
    assert "## Out of distribution" in md and "| 8 | training | **NO** |" in md and "invariant:" not in md


def test_verdict_never_calls_garbage_invariant():
    from sciattn.train.sweep import sweep_verdict

    def rows(*errs):
        return [{"resolution": r, "rel_l2": e} for r, e in zip((16, 32, 64), errs)]

    assert sweep_verdict(rows(0.1, 0.12, 0.149), 16, {}).startswith("invariant")
    assert sweep_verdict(rows(0.1, 0.12, 0.16), 16, {}).startswith("not invariant: relative L2 1.60x")
    assert sweep_verdict(rows(80.0, 80.0, 80.0), 16, {}).startswith("not meaningful")  # flat, but garbage
    assert sweep_verdict(rows(1.0, 1.0, 1.0), 16, {}).startswith("not meaningful")
    assert sweep_verdict(rows(0.1, float("nan"), 0.1), 16, {}).startswith("not invariant: non-finite")
    assert sweep_verdict(rows(0.1, 0.1, 0.1), 16, {"32": ["x[0]: mean"]}).startswith("out of distribution")
    assert sweep_verdict(rows(0.1, 0.1, 0.1), 8, {}).startswith("no verdict")
    assert sweep_verdict(rows(0.1, 0.12, 0.16), 16, {}, tolerance=2.0).startswith("invariant")
    assert "fits poorly" not in sweep_verdict(rows(0.1, 0.1, 0.1), 16, {})
    poor = sweep_verdict(rows(0.97, 0.97, 0.97), 16, {})  # flat, but the model barely fits the data
    assert poor.startswith("invariant") and "fits poorly (relative L2 0.97 >= 0.5" in poor


def test_run_source_of_old_configs(tmp_path):
    from sciattn.train.sweep_data import run_source

    solver = {"run_config": json.dumps({"data": {"format": "darcy_solver", "seed": 7, "train_resolution": 32}})}
    assert run_source(solver, tmp_path) == {"kind": "generated", "name": "darcy", "params": {}, "seed": 7,
                                            "resolution": 32}
    files = {"run_config": json.dumps({"data": {"format": "neuralop_pt", "train": "a_train_16.pt",
                                                "test": "a_test_16.pt"}})}
    src = run_source(files, tmp_path)
    assert src["kind"] == "file" and src["path"] == "a_train_16.pt" and src["test_path"] == "a_test_16.pt"
    with pytest.raises(ValueError, match="records no data source"):
        run_source({"run_config": json.dumps({"data": {"format": "other"}})}, tmp_path)


def test_unmatched_file_is_restricted_and_refuses_finer(tmp_path):
    from sciattn.train.sweep_data import sweep_sets

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 16, 16, generator=g), torch.randn(3, 16, 16, generator=g)  # not a 0/1 mask
    write_neuralop_pt(tmp_path / "f_test_16.pt", x, y)
    src = {"kind": "file", "path": str(tmp_path / "f_test_16.pt"), "reader": "neuralop_pt"}
    sets, built = sweep_sets(src, [4, 8, 16], tmp_path)
    assert built["kind"] == "restricted file"
    torch.testing.assert_close(sets[4].x[:, 0], x[:, ::4, ::4])
    torch.testing.assert_close(sets[16].y[:, 0], y)
    with pytest.raises(ValueError, match="no generator matches it, so it can only be restricted to divisors of 16, "
                                         "got 32"):
        sweep_sets(src, [16, 32], tmp_path)


def test_data_generate_like_a_neuralop_file_writes_matched_files(shared_data, tmp_path, capsys):
    from sciattn.train.data_stats import compare_statistics, dataset_statistics

    real = shared_data / "darcy_train_16.pt"
    assert main(["data", "generate", "darcy_neuralop", "--like", str(real), "--n", "24", "--resolution", "16", "32",
                 "--resolutions", "64", "--out", str(tmp_path), "--no-progress"]) == 0
    paths = [tmp_path / f"darcy_neuralop_{r}.nc" for r in (16, 32, 64)]
    assert capsys.readouterr().out.split() == [w for p in paths for w in ("wrote", str(p))]
    sets = {r: load(p, split=None) for r, p in zip((16, 32, 64), paths)}
    fine = torch.stack([s["y"] for s in sets[64]])
    torch.testing.assert_close(torch.stack([s["y"] for s in sets[16]]), fine[:, :, ::4, ::4])  # same samples
    from sciattn.pde_data.neuralop_pt import load_neuralop_pt

    ref = dataset_statistics(load_neuralop_pt(real))
    for r in (16, 64):
        assert compare_statistics(ref, dataset_statistics(sets[r])) == []
    assert main(["data", "generate", "darcy", "--like", str(real), "--n", "2", "--resolution", "8",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "name: --like" in err and "matches the generator 'darcy_neuralop', got 'darcy'" in err


def test_point_sets_hold_the_same_pde_samples_at_every_point_count(tmp_path):
    """darcy_irregular at N = 16 and 64: the same two solves (seed 1), each evaluated at its own N points."""
    import numpy as np

    from sciattn.pde_data.darcy import load_or_generate_darcy
    from sciattn.pde_data.irregular import darcy_on_points

    sets = load_at_resolutions("darcy_irregular", [64, 16], root=tmp_path, n_samples=2, seed=1, fine_resolution=8,
                               layout="jittered")
    assert list(sets) == [16, 64] and all(len(ds) == 2 for ds in sets.values())
    coeff, u = load_or_generate_darcy(tmp_path / "generated", 2, [8], fine_resolution=8, seed=1, progress=False)[8]
    for n, ds in sets.items():
        for i in range(2):
            s = ds[i]
            assert s["x"].shape == (n, 1) and s["pos"].shape == (n, 2)
            a, p = darcy_on_points(coeff[i], u[i], s["pos"].double().numpy())
            np.testing.assert_allclose(s["x"][:, 0].numpy(), a, rtol=1e-6)
            np.testing.assert_allclose(s["y"][:, 0].numpy(), p, rtol=1e-5, atol=1e-9)
    assert not torch.equal(sets[16][0]["pos"], sets[64][0]["pos"][:16])  # the points are drawn per N
    with pytest.raises(ValueError, match="resolutions: expected a positive int"):
        load_at_resolutions("darcy_irregular", [0], root=tmp_path, n_samples=2)


def test_shallow_water_sets_are_one_band_limited_state_on_every_grid(tmp_path):
    from sciattn.pde_data.shallow_water_data import load_or_generate_shallow_water
    from sciattn.train.data import _sphere_transfer

    kw = {"n_traj": 1, "traj_len": 1}
    sets = load_at_resolutions("shallow_water", [8, 16, 32], root=tmp_path, n_samples=2, seed=1, solve_resolution=16,
                               **kw)
    direct = load_or_generate_shallow_water(tmp_path / "generated", 2, nlat=16, nlon=32, seed=1, **kw)
    torch.testing.assert_close(sets[16].x, torch.from_numpy(direct["x"]))  # the training generator's own grid
    assert sets[32].x.shape == (2, 3, 32, 64) and sets[8].y.shape == (2, 3, 8, 16)
    assert sets[8].meta["domain"] == {"kind": "sphere", "grid": "equiangular", "nlat": 8, "nlon": 16}
    # 32 -> 16 returns the 16-grid values: the 32-grid field is the same band-limited (l < 6) state
    back = _sphere_transfer(sets[32].y, "equiangular", 6, 16)
    for c in range(3):
        assert (back[:, c] - sets[16].y[:, c]).abs().max() <= 1e-5 * sets[16].y[:, c].abs().max()
    # a solve on the 32-grid with the same truncation gives nearly the same state (quadrature of the nonlinear terms)
    fine = load_or_generate_shallow_water(tmp_path / "generated", 2, nlat=32, nlon=64, seed=1, lmax=6, **kw)
    rel = (torch.from_numpy(fine["x"]) - sets[32].x).norm() / sets[32].x.norm()
    assert 0 < rel < 1e-3
    with pytest.raises(ValueError, match=r"resolutions: the shallow-water samples are band-limited to degrees l < 6 "
                                         r"\(solved at nlat = 16\); expected nlat >= 6, got 4"):
        load_at_resolutions("shallow_water", [4, 16], root=tmp_path, n_samples=2, seed=1, solve_resolution=16, **kw)


def test_coupled_navier_stokes_sweep_sets_come_from_the_training_generator(tmp_path):
    from sciattn.train.data import build_datasets

    sets = load_at_resolutions("coupled_navier_stokes", [8, 16], root=tmp_path, n_samples=2, seed=0, system="ns")
    assert sets[16].x.shape == (2, 3, 16, 16) and sets[16].meta["variables"]["x"] == ["u", "v", "w"]
    torch.testing.assert_close(sets[16].y[:, :, ::2, ::2], sets[8].y)  # one solve at 16, restricted
    cfg = load_config({"model": {"name": "codano", "variables": ["u", "v", "w"]},
                       "data": {"train": "coupled_navier_stokes", "resolution": 8, "test_resolutions": [8, 16],
                                "n_train": 1, "n_test": 1, "seed": 0, "options": {"system": "ns"},
                                "cache_dir": str(tmp_path / "generated")}})
    train, tests = build_datasets(cfg.data)
    torch.testing.assert_close(train.x, sets[8].x[:1])  # the same samples by the same function
    torch.testing.assert_close(tests["test_16"].y, sets[16].y[1:])
