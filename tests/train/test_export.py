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
            try:
                outputs[key] = torch.export.load(path).module()(x)
            except Exception as err:
                outputs[key] = "error: " + str(err)
    assert "sciattn" not in sys.modules, sorted(m for m in sys.modules if "sciattn" in m)
    torch.save(outputs, sys.argv[2])
""")


def run_without_sciattn(job: dict, tmp_path) -> dict:
    torch.save(job, tmp_path / "job.pt")
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(tmp_path / "job.pt"), str(tmp_path / "out.pt")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(tmp_path / "out.pt", weights_only=True)


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


def test_torch_export_runs_without_sciattn_at_any_resolution_and_takes_the_files_dtype(run, tmp_path):
    import tensorly

    einsum_before = tensorly.backend.current_backend().einsum
    info = export_run(run, tmp_path / "darcy.pt2")
    assert info["format"] == "torch-export" and info["path"] == str(tmp_path / "darcy.pt2")
    # the data file stores x as bool: that is what the program takes by default (cast to float32 inside)
    assert info["input_dtype"] == "bool" and info["kind"] == "grid"
    assert info["dynamic_dims"] == [0, 2, 3] and info["fixed_resolution"] is None
    assert info["input_shape"][1] == 1 and info["output_shape"][1] == 1
    assert info["max_abs_diff_at_example"] <= 1e-5 and "dynamic" in info["note"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["darcy.pt2"]  # no temporary file left
    # The patches that make the operator traceable are undone.
    assert sciattn._checks.check_finite.__module__ == "sciattn._checks"
    assert tensorly.backend.current_backend().einsum is einsum_before
    f32 = export_run(run, tmp_path / "darcy_f32.pt2", input_dtype="float32")
    assert f32["input_dtype"] == "float32"
    fixed = export_run(run, tmp_path / "darcy16.pt2", example_shape=(16, 16), dynamic_spatial=False,
                       input_dtype="float32")
    assert fixed["fixed_resolution"] == [16, 16] and fixed["input_shape"] == [2, 1, 16, 16]
    assert "dynamic_spatial=False" in fixed["note"] and 0 in fixed["dynamic_dims"]

    rng = np.random.default_rng(0)
    xb = {r: rng.uniform(size=(b, 1, r, r)) > 0.5 for b, r in ((2, 8), (3, 12), (1, 32))}
    x16 = rng.uniform(size=(1, 1, 16, 16)).astype(np.float32)
    nan = x16.copy()
    nan[0, 0, 3, 4] = np.nan
    job = {f"bool{r}": (str(tmp_path / "darcy.pt2"), torch.from_numpy(x)) for r, x in xb.items()}
    job.update({"f32": (str(tmp_path / "darcy_f32.pt2"), torch.from_numpy(x16)),
                "fixed": (str(tmp_path / "darcy16.pt2"), torch.from_numpy(x16)),
                "fixed_other": (str(tmp_path / "darcy16.pt2"), torch.from_numpy(x16[..., :8, :8].copy())),
                "nan": (str(tmp_path / "darcy_f32.pt2"), torch.from_numpy(nan)),
                "wrong_dtype": (str(tmp_path / "darcy.pt2"), torch.from_numpy(x16))})
    out = run_without_sciattn(job, tmp_path)
    sur = Surrogate.from_run(run)
    for r, x in xb.items():  # three resolutions and batch sizes, from one program
        assert out[f"bool{r}"].shape == (x.shape[0], 1, r, r)
        np.testing.assert_allclose(out[f"bool{r}"].numpy(), sur.predict(x), rtol=0, atol=1e-5)
    np.testing.assert_allclose(out["f32"].numpy(), sur.predict(x16), rtol=0, atol=1e-5)
    np.testing.assert_allclose(out["fixed"].numpy(), sur.predict(x16), rtol=0, atol=1e-5)
    assert out["fixed_other"].startswith("error:")  # the static program holds one resolution only
    assert "x: expected finite values" in out["nan"]
    assert "dtype" in out["wrong_dtype"].lower()  # a program takes the dtype it was exported for


def test_export_errors(run, tmp_path):
    with pytest.raises(ValueError, match="format: expected one of"):
        export_run(run, tmp_path / "a.pt2", format="tflite")
    with pytest.raises(ValueError, match="example_shape: expected C_in = 1 input channels, got 3"):
        export_run(run, tmp_path / "a.pt2", example_shape=(3, 8, 8))
    with pytest.raises(ValueError, match=r"example_shape: expected 2 spatial sizes"):
        export_run(run, tmp_path / "a.pt2", example_shape=(8,))
    with pytest.raises(ValueError, match=r"input_dtype: expected one of \[.*'bool'.*\], got 'complex64'"):
        export_run(run, tmp_path / "a.pt2", input_dtype="complex64")
    with pytest.raises(ValueError, match="max_points: expected a positive int or None, got 0"):
        export_run(run, tmp_path / "a.pt2", max_points=0)
    bare = tmp_path / "bare"
    bare.mkdir()
    # no metrics.json, no data_meta, and metrics without the training resolution (trainer checkpoints record it)
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    metrics = {k: v for k, v in json.loads(state["metrics"]).items() if k != "train_resolution"}
    old = {k: v for k, v in state.items() if k != "data_meta"}
    torch.save({**old, "metrics": json.dumps(metrics)}, bare / "checkpoint.pt")
    with pytest.raises(ValueError, match="example_shape: the run records no training resolution"):
        export_run(bare, tmp_path / "a.pt2")
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        export_run(tmp_path / "missing", tmp_path / "a.pt2")
    assert not (tmp_path / "a.pt2").exists()


def _no_onnx(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name in ("onnx", "onnxscript") else real(name, *a, **k))


def test_onnx_missing_names_what_to_install(run, tmp_path, monkeypatch, capsys):
    _no_onnx(monkeypatch)
    with pytest.raises(ImportError, match=r"format='onnx': requires the 'onnx' and 'onnxscript' package\(s\).*"
                                          r"sciattn\[onnx\]"):
        export_run(run, tmp_path / "a.onnx", format="onnx")
    assert main(["export", str(run), "--format", "onnx", "--out", str(tmp_path / "a.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install \"sciattn[onnx]\"" in err and "onnxscript" in err
    assert not (tmp_path / "a.onnx").exists()
    import sciattn  # noqa: F401 - importing the package never needs onnx
    import sciattn.train.export  # noqa: F401


@pytest.mark.skipif(not HAS_ONNX, reason="needs the onnx and onnxscript packages")
def test_onnx_export(run, tiny_darcy, tmp_path):
    with pytest.raises(ValueError, match="format='onnx': torch.onnx cannot convert complex-valued parameters"):
        export_run(run, tmp_path / "spectral.onnx", format="onnx")
    pw = train(tiny_darcy, "pointwise", 'model.regressor="pointwise"')
    info = export_run(pw, tmp_path / "pw.onnx", format="onnx", dynamic_spatial=False, input_dtype="float32")
    assert info["format"] == "onnx" and 0 in info["dynamic_dims"]
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(tmp_path / "pw.onnx"))
    sur = Surrogate.from_run(pw)
    for b in (2, 3):
        x = np.random.default_rng(b).uniform(size=(b, 1, 8, 8)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], sur.predict(x), rtol=0, atol=1e-5)
    assert json.loads(json.dumps(info)) == info


def test_export_command_writes_the_program(run, tmp_path, capsys):
    out = tmp_path / "cli.pt2"
    assert main(["export", str(run), "--out", str(out), "--dtype", "float32", "--shape", "12x10"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert out.is_file() and info["format"] == "torch-export" and info["input_dtype"] == "float32"
    assert info["input_shape"][2:] == [12, 10] and info["fixed_resolution"] is None
    x = torch.rand(2, 1, 20, 14)
    with torch.no_grad():
        np.testing.assert_allclose(torch.export.load(out).module()(x).numpy(), Surrogate.from_run(run).predict(x.numpy()),
                                   rtol=0, atol=1e-5)
    assert main(["export", str(run), "--out", str(out), "--shape", "12by10"]) == 2
    assert "--shape: expected sizes joined by 'x'" in capsys.readouterr().err
