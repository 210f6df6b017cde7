"""``sciattn data generate NAME --like RUN`` for the sphere, multi-variable and point-set generators: a tiny run
trained through the CLI from the shipped config, matched files written, ``evaluate --data FILE`` on each, and
the files' values equal to the resolution sweep's sets (``sweep_sets``) at the same seed."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sciattn import pde_data
from sciattn.train.checkpoint import load_checkpoint
from sciattn.train.cli import main
from sciattn.train.sweep_data import run_source, sweep_sets

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"
TINY = ["--set", "data.n_train=4", "--set", "data.n_test=2", "--set", "train.epochs=1"]

CASES = [  # config, generator, resolutions written (nlat / points per axis / points per sample), evaluated
    ("shallow_water_spherical", "shallow_water", [16, 32], [16, 32]),  # the spherical model runs on both grids
    ("coupled_ns_codano", "coupled_navier_stokes", [16, 32], [16, 32]),
    ("darcy_points_erwin", "darcy_irregular", [256, 512], [256, 512]),
]


@pytest.mark.parametrize("config,name,resolutions,evaluated", CASES, ids=[c[1] for c in CASES])
def test_generate_like_run_then_evaluate(tmp_path, monkeypatch, capsys, config, name, resolutions, evaluated):
    monkeypatch.setenv("SCIATTN_DATA", str(tmp_path / "data"))
    run = tmp_path / "run"
    assert main(["train", str(CONFIGS / f"{config}.toml"), "--out", str(run), "--no-progress", *TINY]) == 0
    out = tmp_path / "files"
    assert main(["data", "generate", name, "--like", str(run), "--n", "2", "--resolution",
                 *map(str, resolutions), "--out", str(out), "--no-progress"]) == 0
    files = {r: out / f"{name}_{r}.nc" for r in resolutions}
    assert all(f.is_file() for f in files.values())
    capsys.readouterr()
    for r in evaluated:
        assert main(["evaluate", str(run), "--data", str(files[r])]) == 0
        row = capsys.readouterr().out.strip().splitlines()[-1].split("|")
        assert math.isfinite(float(row[3])), row

    state = load_checkpoint(run)
    sets, _ = sweep_sets(run_source(state, run), resolutions, run, n_samples=2, seed=1, root=tmp_path / "data")
    for r, f in files.items():
        ds = pde_data.load(f)
        assert len(ds) == 2
        for i in range(2):
            got, want = ds[i], sets[r][i]
            for k in want:
                if k in ("x", "y", "pos", "weights"):
                    torch.testing.assert_close(got[k], want[k].float(), rtol=0, atol=0, msg=f"{name} {r} {k}")
        if name == "shallow_water":
            assert ds.meta["domain"] == {"kind": "sphere", "grid": "equiangular", "nlat": r, "nlon": 2 * r}
            assert tuple(ds[0]["x"].shape) == (3, r, 2 * r)
            assert ds.meta["variables"]["x"] == ["geopotential", "vorticity", "divergence"]
        elif name == "darcy_irregular":
            assert ds.meta["layout"] == "points"
            assert tuple(ds[0]["pos"].shape) == (r, 2) and tuple(ds[0]["weights"].shape) == (r,)
            np.testing.assert_allclose(float(ds[0]["weights"].sum()), 1.0, rtol=1e-5)
        else:
            assert ds.meta["variables"] == {"x": ["u", "v", "w"], "y": ["u", "v", "w"]}
