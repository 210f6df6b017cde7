"""Autoregressive rollout error and the stability verdict: analytic cases, then the report of a tiny
Navier-Stokes run through `sciattn evaluate --resolutions`."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from sciattn.operators import create_operator
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.normalizers import IdentityNormalizer, fit_normalizers
from sciattn.train.checkpoint import load_model
from sciattn.train.cli import main
from sciattn.train.data import load_at_resolutions
from sciattn.train.losses import relative_l2
from sciattn.train.rollout import rollout_errors, stability_verdict
from sciattn.train.trainer import Trainer


class Amplify(nn.Module):
    """Predicts the next ``c_out`` steps as ``b^j`` times the last input step (j = 1..c_out)."""

    def __init__(self, b: float, c_in: int, c_out: int):
        super().__init__()
        self.b, self.in_channels, self.out_channels = b, c_in, c_out

    def forward(self, x):
        return torch.cat([self.b ** (j + 1) * x[:, -1:] for j in range(self.out_channels)], dim=1)


def _geometric(a: float, c_in: int, k: int, n: int = 3):
    """Trajectories u_t = a^t u_0 (t = 1..c_in inputs, then k targets)."""
    u0 = torch.randn(n, 1, 6, 6, dtype=torch.float64)
    frames = torch.cat([a ** t * u0 for t in range(1, c_in + k + 1)], dim=1)
    return GridPairDataset(frames[:, :c_in], frames[:, c_in:])


@pytest.mark.parametrize("c_in,c_out", [(1, 1), (2, 1), (2, 2)])
def test_rollout_error_of_a_wrong_growth_rate_is_analytic(c_in, c_out):
    a, b, k = 0.9, 1.05, 5
    ds = _geometric(a, c_in, k)
    ds.x, ds.y = ds.x.double(), ds.y.double()
    out = rollout_errors(Amplify(b, c_in, c_out), ds, x_normalizer=IdentityNormalizer(),
                         y_normalizer=IdentityNormalizer(), spatial_dims=2, batch_size=2)
    expected = [abs((b / a) ** t - 1) for t in range(1, k + 1)]  # ‖(b^t − a^t) u‖ / ‖a^t u‖
    assert out["frame_errors"] == pytest.approx(expected, rel=1e-6)
    assert out["applications"] == math.ceil(k / c_out) and out["steps_per_application"] == c_out


def test_stability_rule_on_known_error_curves():
    assert stability_verdict([0.1] * 10)["verdict"] == "stable"
    linear = stability_verdict([0.01 * k for k in range(1, 41)])  # linear growth over a long horizon
    assert linear["verdict"] == "stable" and linear["growth_per_frame"] == pytest.approx(1.035, abs=0.005)
    exp = [0.01 * 1.3 ** k for k in range(1, 11)]
    v = stability_verdict(exp)
    assert v["verdict"] == "growing" and v["growth_per_frame"] == pytest.approx(1.3, rel=1e-9)
    frames = math.log(1 / exp[-1]) / math.log(1.3)
    assert f"about {frames:.0f} frame(s) after frame 10" in v["reason"]
    assert stability_verdict(exp, max_growth=1.5)["verdict"] == "stable"
    v = stability_verdict([0.1, 0.5, 1.2, 0.3])
    assert v["verdict"] == "unstable" and v["reason"] == "error 1.2 exceeds 1.0 at frame 3"
    assert stability_verdict([0.1, float("nan")])["reason"] == "non-finite error at frame 2"
    assert stability_verdict([0.0, 0.0, 0.0])["verdict"] == "stable"  # an exact model


NS = {"t_final": 1.0, "dt": 2e-3, "record_steps": 5}


def test_navier_stokes_run_rollout_report(tmp_path):
    data = load_at_resolutions("navier_stokes", [8], root=tmp_path / "cache", n_samples=8, seed=0, t_in=2, **NS)[8]
    train = GridPairDataset(data.x, data.y[:, :1])  # two steps in, the next one out
    torch.manual_seed(0)
    model = create_operator("galerkin_transformer", in_channels=2, out_channels=1, d_model=16, n_layers=1,
                            n_heads=2, n_modes=4, regressor_width=8)
    xn, yn = fit_normalizers(train)
    Trainer(model=model, train_data=train, test_data={}, x_normalizer=xn, y_normalizer=yn, spatial_dims=2,
            epochs=5, batch_size=4, lr=1e-2, run_dir=tmp_path / "run", progress=False, log=lambda m: None).fit()

    args = ["evaluate", str(tmp_path / "run"), "--data", "navier_stokes", "--resolutions", "8", "16", "--root",
            str(tmp_path / "cache"), "--n-samples", "3", "--no-progress", "--threshold", "0.9"]
    assert main(args + [f"--param={k}={v}" for k, v in NS.items()]) == 0
    report = json.loads((tmp_path / "run" / "eval" / "navier_stokes.json").read_text())
    assert report["one_step"] and report["train_resolution"] == 8
    rows = {r["resolution"]: r for r in report["rows"]}
    assert rows[8]["regime"] == "training" and rows[16]["regime"] == "zero-shot finer"
    assert rows[8]["rel_l2"] < 0.9  # it learnt something
    for res in ("8", "16"):
        roll = report["rollout"][res]
        assert roll["applications"] == 3 and len(roll["frame_errors"]) == 3
        # one application of the operator is the first rollout frame
        assert rows[int(res)]["rel_l2"] == pytest.approx(roll["frame_errors"][0], rel=1e-6)
        again = stability_verdict(roll["frame_errors"], threshold=0.9)
        assert (roll["verdict"], roll["reason"]) == (again["verdict"], again["reason"])

    # oracle: a sample-by-sample rollout written out by hand, on the same fresh samples (seed = 0 + 1)
    model, xn, yn, _ = load_model(tmp_path / "run")
    ds = load_at_resolutions("navier_stokes", [16], root=tmp_path / "cache", n_samples=3, seed=1, t_in=2, **NS)[16]
    errs = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for i in range(3):
            w = ds.x[i:i + 1]
            for t in range(3):
                p = yn.decode(model(xn.encode(w)))
                errs[t] += float(relative_l2(p, ds.y[i:i + 1, t:t + 1], 2)) / 3
                w = torch.cat([w[:, 1:], p], dim=1)
    assert report["rollout"]["16"]["frame_errors"] == pytest.approx(errs.tolist(), rel=1e-5)
    md = (tmp_path / "run" / "eval" / "navier_stokes.md").read_text()
    assert "## Autoregressive rollout" in md and "Rule (threshold 0.9, max growth 1.1)" in md
    assert (tmp_path / "run" / "eval" / "navier_stokes_rollout.png").stat().st_size > 5000
