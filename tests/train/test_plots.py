"""Figures of a run: the sample panels share one colour scale for truth and prediction; the loss curve."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from sciattn.train.plots import loss_curve_figure, plot_loss_curve, plot_sample, sample_figure


def _fields():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(1, 12, 10, generator=g)
    y = 3.0 + 2.0 * torch.rand(1, 12, 10, generator=g)   # truth in [3, 5]
    pred = torch.rand(1, 12, 10, generator=g) - 1.0      # prediction in [-1, 0]: disjoint ranges
    return x, y, pred


def test_truth_and_prediction_share_one_colour_scale():
    x, y, pred = _fields()
    fig = sample_figure(x, y, pred)
    axes = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    clim = {name: axes[name].images[0].get_clim() for name in ("input", "truth", "prediction", "|error|")}
    both = torch.cat([y.flatten(), pred.flatten()])
    assert clim["truth"] == clim["prediction"] == pytest.approx((float(both.min()), float(both.max())))
    assert clim["input"] == pytest.approx((float(x.min()), float(x.max())))  # the input keeps its own scale
    err = (pred - y).abs()
    assert clim["|error|"] == pytest.approx((float(err.min()), float(err.max())))


def test_one_dimensional_truth_and_prediction_share_one_range():
    y = torch.linspace(0, 1, 16)[None]
    fig = sample_figure(y, y, 10 * y)
    axes = {ax.get_title(): ax for ax in fig.axes}
    assert axes["truth"].get_ylim() == axes["prediction"].get_ylim()
    lo, hi = axes["truth"].get_ylim()
    assert lo < 0 < 10 < hi


def test_plot_sample_writes_a_png(tmp_path):
    path = plot_sample(*_fields(), tmp_path / "s" / "sample.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_loss_curve_draws_the_history(tmp_path):
    history = [{"epoch": e, "step": 2 * e, "train_loss": 1.0 / e, "seconds": 0.1, "test_16_rel_l2": 0.5 / e}
               for e in (1, 2, 3)]
    fig = loss_curve_figure(history)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["train loss"].get_ydata()) == [1.0, 0.5, pytest.approx(1 / 3)]
    assert list(lines["test 16 rel. L2"].get_xdata()) == [1, 2, 3]
    assert ax.get_yscale() == "log"
    path = plot_loss_curve(history, tmp_path / "loss_curve.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_loss_curve_refuses_rows_without_the_loss():
    with pytest.raises(ValueError, match="history: expected at least one epoch row"):
        loss_curve_figure([])
    with pytest.raises(ValueError, match="row 1 has \\['epoch'\\]"):
        loss_curve_figure([{"epoch": 1, "train_loss": 1.0}, {"epoch": 2}])


def test_save_figure_replaces_the_image_atomically(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from sciattn.train.analysis.plots import save_figure

    path = tmp_path / "curve.png"
    path.write_bytes(b"old image")
    fig = plt.figure()

    def broken(target, *args, **kwargs):  # writes part of the image, then fails
        with open(target, "wb") as fh:
            fh.write(b"\x89PNG partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(fig, "savefig", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        save_figure(fig, plt, path)
    assert path.read_bytes() == b"old image"  # a failed write leaves the old image
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png"]  # and no temporary file
    assert not plt.fignum_exists(fig.number)  # the figure is closed either way
    fig = plt.figure()
    assert save_figure(fig, plt, path) == path and path.read_bytes()[:4] == b"\x89PNG"
