"""Chunked evaluation (chunk_points) through the pipeline: ``Surrogate.predict`` in float64 equals the unchunked
prediction to 1e-12, ``evaluate_dataset`` gives the same errors, ``sciattn evaluate --chunk-points`` reaches
the evaluation, and operators without the capability are refused by name."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sciattn.operators import create_operator
from sciattn.train.evaluation import evaluate_dataset
from sciattn.train.surrogate import Surrogate

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ddp_worker  # noqa: E402


class _Affine(torch.nn.Module):
    """A per-channel normaliser ``(B, C, ...)``: ``encode(x) = (x - 0.3) / 2``."""

    def encode(self, x):
        return (x - 0.3) / 2

    def decode(self, x):
        return 2 * x + 0.3


@pytest.mark.parametrize("name, extra", [("transolver", {"slice_num": 4}), ("ono", {"psi_dim": 4})])
def test_surrogate_predict_in_chunks_equals_the_whole_prediction_float64(name, extra):
    torch.manual_seed(0)
    model = create_operator(name, in_channels=1, out_channels=2, spatial_dims=2, width=16, n_layers=2, n_heads=2,
                            **extra).double()
    with torch.no_grad():  # wider than the published init, so that the global couplings matter
        for p in model.parameters():
            p.normal_(0, 0.5 / p.shape[-1] ** 0.5)
    sur = Surrogate(model, _Affine(), _Affine())
    x = np.random.default_rng(0).uniform(size=(3, 1, 20, 17))
    whole = sur.predict(x)
    for chunk in (1, 50, 339, 340, 10_000):  # 340 = 20 x 17 nodes
        got = sur.predict(x, chunk_points=chunk)
        assert got.shape == whole.shape
        assert np.abs(got - whole).max() <= 1e-12 * np.abs(whole).max(), chunk
    chunked = Surrogate(model, _Affine(), _Affine(), chunk_points=64)  # the constructor's default for every call
    assert np.abs(chunked.predict(x) - whole).max() <= 1e-12 * np.abs(whole).max()
    assert model.point_plan.chunk is None  # the model is left as it was
    # the prediction depends on every node through the sums: a changed far node moves the first one
    x2 = x.copy()
    x2[:, :, -1, -1] += 5.0
    assert np.abs(chunked.predict(x2)[:, :, 0, 0] - whole[:, :, 0, 0]).max() > 1e-8


def test_chunk_points_is_refused_by_name_for_other_operators_and_bad_values():
    fno = create_operator("fno", in_channels=1, out_channels=1, n_modes=[4, 4], hidden_channels=8, n_layers=1)
    with pytest.raises(ValueError, match=r"chunk_points: operator 'fno' \(FNO\) does not evaluate in chunks of points; "
                                         r"operators that do: \['funcattn', 'gnot', 'linear_no', 'ono', 'transolver'\]"):
        Surrogate(fno, spatial_dims=2, chunk_points=100)
    sur = Surrogate(fno, spatial_dims=2)
    with pytest.raises(ValueError, match="chunk_points: operator 'fno'"):
        sur.predict(np.zeros((1, 8, 8)), chunk_points=10)
    transolver = create_operator("transolver", in_channels=1, out_channels=1)
    with pytest.raises(ValueError, match=r"chunk_points: expected a positive int \(points per chunk\) or None, got 0"):
        Surrogate(transolver, chunk_points=0)


def test_evaluate_dataset_in_chunks_gives_the_same_errors():
    trainer = _ddp_worker.make_point_trainer(None)
    _, test = _ddp_worker.point_problem()
    kw = dict(x_normalizer=trainer.x_normalizer, y_normalizer=trainer.y_normalizer, spatial_dims=2, batch_size=3)
    whole = evaluate_dataset(trainer.model, test, **kw)
    chunked = evaluate_dataset(trainer.model, test, chunk_points=7, **kw)
    assert whole["n_samples"] == chunked["n_samples"] == 6
    assert chunked["rel_l2"] == pytest.approx(whole["rel_l2"], rel=1e-6, abs=0)


def test_sciattn_evaluate_passes_chunk_points(monkeypatch, tmp_path, capsys):
    from sciattn.train import cli, run

    seen = []

    def fake(run_dir, data, *, fmt=None, plot=None, chunk_points=None):
        seen.append(chunk_points)
        return {"data": str(data), "resolution": [5], "rel_l2": 0.1, "rel_h1": None, "seconds_per_sample": 0.01}

    monkeypatch.setattr(run, "evaluate_run", fake)
    assert cli.main(["evaluate", str(tmp_path), "--data", "a.pt", "--chunk-points", "4096"]) == 0
    assert cli.main(["evaluate", str(tmp_path), "--data", "a.pt"]) == 0
    assert seen == [4096, None]
