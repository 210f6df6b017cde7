"""``sciattn train``, ``evaluate --resolutions`` (also ``--chunk-points``) and ``export`` on Transolver, LinearNO and
ONO: a tiny Darcy run through the CLI, its zero-shot sweep at two resolutions, whole and in chunks of query points,
and the exported program equal to the eager model at two grid sizes. Transolver runs in the default suite; LinearNO and ONO (same code path) are marked slow."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sciattn.train.checkpoint import load_model
from sciattn.train.cli import main

CONFIGS = {
    "transolver": "slice_num = 4",
    "linear_no": "key_ratio = 4",
    "ono": "psi_dim = 4",
    "funcattn": "basis_num = 4",
}


@pytest.mark.parametrize("name", [
    "transolver", pytest.param("linear_no", marks=pytest.mark.slow), pytest.param("ono", marks=pytest.mark.slow),
    pytest.param("funcattn", marks=pytest.mark.slow)])
def test_train_evaluate_export(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SCIATTN_DATA", str(tmp_path / "data"))
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f"""[model]
name = "{name}"
width = 16
n_layers = 2
n_heads = 2
{CONFIGS[name]}

[data]
train = "darcy"
resolution = 16
n_train = 4
n_test = 2
seed = 0

[train]
epochs = 1
batch_size = 2
lr = 1e-3
loss = "l2"
seed = 0
""")
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(run), "--no-progress"]) == 0
    assert main(["evaluate", str(run), "--resolutions", "16", "32", "--n-samples", "2", "--no-progress"]) == 0
    report = json.loads((run / "eval" / "darcy.json").read_text())
    rows = {r["resolution"]: r for r in report["rows"]}
    assert list(rows) == [16, 32] and all(math.isfinite(r["rel_l2"]) for r in rows.values())
    # in chunks of 100 query points (the sums over all 1024 nodes first): the same errors
    assert main(["evaluate", str(run), "--resolutions", "16", "32", "--n-samples", "2", "--no-progress",
                 "--chunk-points", "100"]) == 0
    chunked = {r["resolution"]: r for r in json.loads((run / "eval" / "darcy.json").read_text())["rows"]}
    for r in (16, 32):
        assert chunked[r]["rel_l2"] == pytest.approx(rows[r]["rel_l2"], rel=1e-5)
    capsys.readouterr()
    assert main(["export", str(run), "--out", str(tmp_path / "model.pt2")]) == 0
    program = torch.export.load(tmp_path / "model.pt2").module()
    model, xn, yn, _ = load_model(run)
    for r in (16, 24):
        x = torch.rand(2, 1, r, r) * 10 + 2
        with torch.no_grad():
            ref = yn.decode(model(xn.encode(x)))
        assert (program(x) - ref).abs().max() <= 1e-5 * max(1.0, float(ref.abs().max()))
