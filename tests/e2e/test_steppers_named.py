"""The user's path for time steppers (issue 38): the shipped Burgers stepper config trains on neuraloperator's real
file and is evaluated by rollout; runs name their inputs and outputs after the variables (``u``, ``w``, CoDANO's
``u, v, w``) in the run's metadata, ``Surrogate`` (NumPy and xarray) and the export spec; a run that fails before
its first checkpoint leaves no folder; a resumed run refuses other data unless told."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from sciattn.train import Surrogate
from sciattn.train.checkpoint import load_checkpoint, load_model
from sciattn.train.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"
FAST = ["--no-progress", "--set", "train.threads=1", "--set", "data.n_test=4", "--set", "train.batch_size=4"]


def _meta(run: Path) -> dict:
    return json.loads(load_checkpoint(run)["data_meta"])


def _burgers(shared: Path, out: Path, *extra: str) -> int:
    return main(["train", str(CONFIGS / "burgers16_stepper.toml"), "--out", str(out), *FAST,
                 "--set", f'data.train="{shared / "burgers_train_16.pt"}"',
                 "--set", f'data.test="{shared / "burgers_test_16.pt"}"', "--set", "data.n_train=16",
                 "--set", "train.epochs=1", *extra])


def test_the_shipped_burgers_stepper_trains_on_the_real_file_and_rolls_out(shared_data, tmp_path, capsys):
    run = tmp_path / "burgers"
    assert _burgers(shared_data, run) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    roll = metrics["rollout"]["test_16"]
    assert len(roll["frame_errors"]) == 16 and roll["applications"] == 16 and roll["input_steps"] == 1
    assert all(math.isfinite(e) and e > 0 for e in roll["frame_errors"]) and roll["verdict"] in (
        "stable", "growing", "unstable")
    meta = _meta(run)
    assert meta["variables"] == {"x": ["u"], "y": ["u"]} and meta["frame_variables"] == ["u"]
    assert meta["dt"] == pytest.approx(0.06) and meta["time_series"] and meta["t_in"] == 1
    assert meta["domain"]["periodic"] == [True] and meta["domain"]["endpoint"] is False

    sur = Surrogate.from_run(run)
    assert sur.input_names == ["u"] and sur.output_names == ["u"] and sur.dt == pytest.approx(0.06)
    u0 = torch.load(shared_data / "burgers_test_16.pt", weights_only=True)["x"][:2].numpy()  # (2, 16) float64
    model, xn, yn, _ = load_model(run)
    with torch.no_grad():
        want = yn.decode(model(xn.encode(torch.as_tensor(u0[:, None], dtype=torch.float32)))).numpy()
    np.testing.assert_allclose(sur.predict(u0[:, None]), want, rtol=0, atol=1e-5)  # NumPy in, NumPy out
    da = xr.DataArray(u0, dims=("sample", "x"), attrs={"units": "m/s"})
    out = sur.predict(da)  # xarray: named after the variable, on the recorded nodes i / 16
    assert out.name == "u" and out.dims == ("sample", "x")
    np.testing.assert_allclose(out["x"].values, np.arange(16) / 16)
    traj = sur.rollout(da, 3)
    np.testing.assert_allclose(traj["time"].values, 0.06 * np.arange(4))

    from sciattn.train.export import export_run, load_program

    info = export_run(run, tmp_path / "burgers.pt2")
    assert info["channel_names"] == {"x": ["u"], "y": ["u"]} and info["dt"] == pytest.approx(0.06)
    assert load_program(tmp_path / "burgers.pt2").spec["channel_names"] == {"x": ["u"], "y": ["u"]}

    # resuming on other data (the test file as training data, same shapes) is refused, naming the fingerprint
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--no-progress", "--set", "train.scheduler=\"onecycle\"",
                 "--set", f'data.train="{shared_data / "burgers_test_16.pt"}"']) == 2
    err = capsys.readouterr().err
    assert "--resume: the training data differ from the data" in err and "sha256_first_samples" in err
    assert "--allow-other-data" in err


def test_navier_stokes_and_codano_runs_name_their_outputs_after_the_variables(tmp_path):
    ns, cod, root = tmp_path / "ns", tmp_path / "codano", tmp_path / "data"
    tiny = [*FAST, "--set", "data.n_train=4", "--set", "data.n_test=2", "--set", "train.epochs=1",
            "--set", "train.batch_size=2", "--set", "data.resolution=16", "--set", "model.n_layers=1",
            "--set", f'data.root="{root}"']
    assert main(["train", str(CONFIGS / "navier_stokes32_rollout.toml"), "--out", str(ns), *tiny,
                 "--set", "data.options.t_final=2.0", "--set", "data.options.record_steps=8",
                 "--set", "data.options.dt=1e-2"]) == 0
    sur = Surrogate.from_run(ns)
    assert sur.output_names == ["w"] and sur.input_names == [f"w[{k}]" for k in range(5)]
    assert _meta(ns)["variables"]["y"] == ["w"]
    ds = xr.Dataset({f"w[{k}]": (("sample", "x", "y"), np.zeros((1, 16, 16))) for k in range(5)})
    assert list(sur.predict(ds).data_vars) == ["w"]
    assert main(["train", str(CONFIGS / "coupled_ns_codano.toml"), "--out", str(cod), *tiny]) == 0
    sur = Surrogate.from_run(cod)
    assert sur.input_names == sur.output_names == ["u", "v", "w"]
    from sciattn.train.export import export_run

    assert export_run(cod, tmp_path / "codano.pt2")["channel_names"] == {"x": ["u", "v", "w"], "y": ["u", "v", "w"]}


def test_a_run_that_fails_before_its_first_checkpoint_leaves_no_folder(tiny_darcy, tmp_path, capsys):
    root, cfg = tiny_darcy("failed_run", n_train=4, n_test=2)
    out = tmp_path / "never"
    # accepted by the config, refused by the data: rollout steps need a time series
    assert main(["train", str(cfg), "--out", str(out), "--no-progress", "--set", "train.rollout_steps=2"]) == 2
    assert "train.rollout_steps: needs time-series data" in capsys.readouterr().err
    assert not out.exists()
    # a folder that existed keeps what it held (and nothing of the failed run)
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["train", str(cfg), "--out", str(out), "--no-progress", "--set", "train.rollout_steps=2"]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    # and the rerun trains there without --resume or --force
    assert main(["train", str(cfg), "--out", str(out), "--no-progress"]) == 0
    assert (out / "checkpoint.pt").is_file()


def test_resume_on_other_data_is_refused_unless_allowed(tiny_darcy, tmp_path, capsys):
    root, cfg = tiny_darcy("resume_data", n_train=4, n_test=2)
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(run), "--no-progress", "--set", 'train.scheduler="cosine"',
                 "--set", "data.n_train=2"]) == 0
    swapped = f'data.train="{root / "darcy_test_8.pt"}"'  # the test file: other samples
    args = ["train", "--resume", str(run), "--no-progress", "--set", "train.epochs=2", "--set", swapped,
            "--set", "data.n_train=2"]
    capsys.readouterr()
    assert main(args) == 2
    assert "the training data differ" in capsys.readouterr().err
    assert main([*args, "--allow-other-data"]) == 0
    # the run's own data resumes without the flag
    assert main(["train", "--resume", str(run), "--no-progress", "--set", "train.epochs=3"]) == 0
