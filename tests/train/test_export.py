"""export_run: the artefact loads and runs in a process that cannot import sciattn."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import sciattn._checks
from sciattn.train.cli import main
from sciattn.train.export import export_run
from sciattn.train.surrogate import Surrogate

HAS_ONNX = importlib.util.find_spec("onnx") is not None and importlib.util.find_spec("onnxscript") is not None

# Runs in a fresh interpreter: only torch; any import of sciattn raises.
RUNNER = textwrap.dedent("""
    import importlib.abc, sys

    class BlockSciattn(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "sciattn" or name.startswith("sciattn."):
                raise ImportError("sciattn must not be imported here: " + name)
            return None

    sys.meta_path.insert(0, BlockSciattn())
    import torch

    job = torch.load(sys.argv[1], weights_only=True)
    outputs = {}
    with torch.no_grad():
        for key, (path, x) in job.items():
            outputs[key] = torch.export.load(path).module()(x)
        try:
            x = next(iter(job.values()))[1].clone()
            x.view(-1)[0] = float("nan")
            torch.export.load(job["a"][0]).module()(x)
            outputs["nan_error"] = "none"
        except RuntimeError as err:
            outputs["nan_error"] = str(err)
    assert "sciattn" not in sys.modules, sorted(m for m in sys.modules if "sciattn" in m)
    torch.save(outputs, sys.argv[2])
""")


def train(make, name, *overrides):
    root, cfg = make(name)
    out = root / "run"
    args = ["train", str(cfg), "--out", str(out), "--no-progress"]
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def run(tiny_darcy):
    return train(tiny_darcy, "export")


def test_torch_export_runs_without_sciattn_and_matches_the_surrogate(run, tmp_path):
    import tensorly

    einsum_before = tensorly.backend.current_backend().einsum
    info = export_run(run, tmp_path / "darcy.pt2")
    assert info["format"] == "torch-export" and info["path"] == str(tmp_path / "darcy.pt2")
    assert info["input_shape"] == [2, 1, 8, 8] and info["output_shape"] == [2, 1, 8, 8]
    assert 0 in info["dynamic_dims"]  # the batch dim is dynamic
    assert info["fixed_resolution"] == [8, 8] and "fixed at (8, 8)" in info["note"]  # spatial dims are not
    assert sorted(p.name for p in tmp_path.iterdir()) == ["darcy.pt2"]  # no temporary file left
    # The patches that make the operator traceable are undone.
    assert sciattn._checks.check_finite.__module__ == "sciattn._checks"
    assert tensorly.backend.current_backend().einsum is einsum_before
    # Another resolution, from example_shape.
    info16 = export_run(run, tmp_path / "darcy16.pt2", example_shape=(16, 16), dynamic_spatial=False)
    assert info16["fixed_resolution"] == [16, 16] and info16["input_shape"] == [2, 1, 16, 16]

    rng = np.random.default_rng(0)
    x2 = (rng.uniform(size=(2, 1, 8, 8)) > 0.5).astype(np.float32)
    x3 = rng.uniform(size=(3, 1, 8, 8)).astype(np.float32)
    x16 = rng.uniform(size=(1, 1, 16, 16)).astype(np.float32)
    job = {"a": (str(tmp_path / "darcy.pt2"), torch.from_numpy(x2)),
           "b": (str(tmp_path / "darcy.pt2"), torch.from_numpy(x3)),
           "c": (str(tmp_path / "darcy16.pt2"), torch.from_numpy(x16))}
    torch.save(job, tmp_path / "job.pt")
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(tmp_path / "job.pt"), str(tmp_path / "out.pt")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = torch.load(tmp_path / "out.pt", weights_only=True)
    sur = Surrogate.from_run(run)
    np.testing.assert_allclose(out["a"].numpy(), sur.predict(x2), rtol=0, atol=1e-5)
    np.testing.assert_allclose(out["b"].numpy(), sur.predict(x3), rtol=0, atol=1e-5)  # another batch size
    np.testing.assert_allclose(out["c"].numpy(), sur.predict(x16), rtol=0, atol=1e-5)  # batch 1 works too
    assert "x: expected finite values" in out["nan_error"]


def test_export_errors(run, tmp_path):
    with pytest.raises(ValueError, match="format: expected one of"):
        export_run(run, tmp_path / "a.pt2", format="tflite")
    with pytest.raises(ValueError, match="example_shape: expected C_in = 1 input channels, got 3"):
        export_run(run, tmp_path / "a.pt2", example_shape=(3, 8, 8))
    with pytest.raises(ValueError, match=r"example_shape: expected 2 spatial sizes"):
        export_run(run, tmp_path / "a.pt2", example_shape=(8,))
    bare = tmp_path / "bare"
    bare.mkdir()
    # no metrics.json, and a checkpoint whose metrics lack the training resolution (trainer checkpoints record it)
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    metrics = {k: v for k, v in json.loads(state["metrics"]).items() if k != "train_resolution"}
    torch.save({**state, "metrics": json.dumps(metrics)}, bare / "checkpoint.pt")
    with pytest.raises(ValueError, match="example_shape: the run records no training resolution"):
        export_run(bare, tmp_path / "a.pt2")
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        export_run(tmp_path / "missing", tmp_path / "a.pt2")
    assert not (tmp_path / "a.pt2").exists()


@pytest.mark.skipif(HAS_ONNX, reason="onnx is installed")
def test_onnx_without_the_package_names_it(run, tmp_path):
    with pytest.raises(ImportError, match="format='onnx': requires the 'onnx'"):
        export_run(run, tmp_path / "a.onnx", format="onnx")


@pytest.mark.skipif(not HAS_ONNX, reason="needs the onnx and onnxscript packages")
def test_onnx_export(run, tiny_darcy, tmp_path):
    with pytest.raises(ValueError, match="format='onnx': torch.onnx cannot convert complex-valued parameters"):
        export_run(run, tmp_path / "spectral.onnx", format="onnx")
    pw = train(tiny_darcy, "pointwise", 'model.regressor="pointwise"')
    info = export_run(pw, tmp_path / "pw.onnx", format="onnx", dynamic_spatial=False)
    assert info["format"] == "onnx" and 0 in info["dynamic_dims"]
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(tmp_path / "pw.onnx"))
    sur = Surrogate.from_run(pw)
    for b in (2, 3):
        x = np.random.default_rng(b).uniform(size=(b, 1, 8, 8)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], sur.predict(x), rtol=0, atol=1e-5)
    assert json.loads(json.dumps(info)) == info


def test_export_command_writes_the_program(run, tmp_path, capsys):
    from sciattn.train.cli import main

    out = tmp_path / "cli.pt2"
    assert main(["export", str(run), "--out", str(out)]) == 0
    assert out.is_file() and '"format": "torch-export"' in capsys.readouterr().out
