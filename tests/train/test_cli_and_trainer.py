"""End to end through the CLI on tiny Darcy files: train, resume, evaluate, demo."""

from __future__ import annotations

import json

import pytest
import torch

from sciattn.train.cli import main


@pytest.fixture(scope="module")
def tiny_files(tiny_darcy):
    return tiny_darcy("darcy", resolutions=(8, 16), n_train=64, n_test=8, epochs=4, n_layers=2)


def test_train_writes_checkpoint_metrics_and_plots_and_the_loss_falls(tiny_files, tmp_path):
    root, cfg = tiny_files
    assert main(["train", str(cfg), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    hist = metrics["history"]
    assert len(hist) == 4 and hist[-1]["train_loss"] < 0.7 * hist[0]["train_loss"]
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    assert (tmp_path / "run" / "sample_test_8x8.png").stat().st_size > 1000
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert json.loads(state["run_config"])["train"]["epochs"] == 4


def test_resume_after_interruption_reaches_the_same_weights(tiny_files, tmp_path):
    root, cfg = tiny_files
    main(["train", str(cfg), "--out", str(tmp_path / "full"), "--no-progress"])
    from sciattn.train.config import load_config
    from sciattn.train.run import train_run

    class Killed(Exception):
        pass

    def log_and_die(msg):
        if msg.startswith("epoch=2 "):
            raise Killed

    with pytest.raises(Killed):
        train_run(load_config(cfg), tmp_path / "killed", progress=False, log=log_and_die)
    assert torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)["epoch"] == 1
    assert main(["train", str(cfg), "--out", str(tmp_path / "killed"), "--resume", "--no-progress"]) == 0
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_evaluate_zero_shot_at_a_higher_resolution(tiny_files, tmp_path, capsys):
    root, cfg = tiny_files
    main(["train", str(cfg), "--out", str(tmp_path / "run"), "--no-progress"])
    out_json = tmp_path / "eval.json"
    assert main(["evaluate", str(tmp_path / "run"), "--data", str(root / "darcy_test_8.pt"),
                 str(root / "darcy_test_16.pt"), "--json", str(out_json)]) == 0
    results = json.loads(out_json.read_text())
    assert [r["resolution"] for r in results] == [[8, 8], [16, 16]]
    assert all(0 < r["rel_l2"] < 1 for r in results)
    assert "| darcy_test_16.pt | 16x16 |" in capsys.readouterr().out


def test_cli_errors_name_the_problem(tiny_files, tmp_path, capsys):
    root, cfg = tiny_files
    assert main(["train", str(cfg), "--out", str(tmp_path / "r"), "--set", "train.lr_max=1"]) == 2
    assert "unknown key(s) ['lr_max']" in capsys.readouterr().err
    assert main(["train", str(cfg), "--out", str(tmp_path / "r"), "--unset", "train.lr_max"]) == 2
    assert "--unset train.lr_max: expected a key the config sets" in capsys.readouterr().err
    assert main(["train", str(cfg), "--out", str(tmp_path / "r"), "--set", "model.n_layers=null"]) == 2
    assert "use --unset model.n_layers" in capsys.readouterr().err
    main(["train", str(cfg), "--out", str(tmp_path / "r"), "--no-progress", "--set", "train.epochs=1",
          "--unset", "model.n_layers"])
    from sciattn.train.checkpoint import load_checkpoint

    assert "n_layers" not in json.loads(load_checkpoint(tmp_path / "r")["run_config"])["model"]
    assert main(["evaluate", str(tmp_path / "r"), "--data", str(tmp_path / "missing.pt")]) == 2
    assert "missing.pt" in capsys.readouterr().err
    corrupt = tmp_path / "darcy_test_8.pt"
    corrupt.write_bytes(b"\x00garbage")
    assert main(["evaluate", str(tmp_path / "r"), "--data", str(corrupt)]) == 2
    assert str(corrupt) in capsys.readouterr().err


def test_demo_with_a_tiny_budget(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--no-progress", "--set", f"data.cache_dir={json.dumps(str(tmp_path))}",
                 "--set", "data.n_train=16", "--set", "data.n_test=4", "--set", "data.resolution=8",
                 "--set", "data.test_resolutions=[8, 16]", "--set", "train.epochs=1", "--set", "model.d_model=16",
                 "--set", "model.n_modes=4", "--set", "model.latent_resolution=8"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["rel_l2_by_resolution"]) == {"8", "16"}
    assert (out / "error_vs_resolution.png").is_file()
    assert "| resolution | relative L2 |" in capsys.readouterr().out
