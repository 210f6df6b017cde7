"""Matplotlib figures: sample panels, the loss curve of a run, error against resolution, the resolution
sweep and rollout error against time step (headless-safe; matplotlib is imported when a figure is drawn)."""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["sample_figure", "plot_sample", "loss_curve_figure", "plot_loss_curve", "plot_resolution_curve",
           "plot_resolution_sweep", "plot_rollout", "save_figure"]


def _pyplot():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "pdf", "svg", "png") and not matplotlib.is_interactive():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def sample_figure(x: torch.Tensor, y: torch.Tensor, pred: torch.Tensor, title: str = ""):
    """Input / truth / prediction / error panels of one 2-D (or 1-D) sample ``(C, *spatial)`` (first channel).

    Truth and prediction share one colour scale (or one y-range in 1-D), the range of both fields, so
    equal colours mean equal values; the input and the error have their own."""
    plt = _pyplot()
    x, y, pred = (t.detach().cpu()[0].float() for t in (x, y, pred))
    shared = (float(min(y.min(), pred.min())), float(max(y.max(), pred.max())))
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4))
    panels = [("input", x, None), ("truth", y, shared), ("prediction", pred, shared),
              ("|error|", (pred - y).abs(), None)]
    for ax, (name, field, limits) in zip(axes, panels):
        if field.dim() == 1:
            ax.plot(field.numpy())
            if limits is not None:
                pad = 0.05 * (limits[1] - limits[0]) or 1e-12
                ax.set_ylim(limits[0] - pad, limits[1] + pad)
        else:
            vmin, vmax = limits if limits is not None else (None, None)
            im = ax.imshow(field.numpy(), origin="lower", cmap="viridis" if name != "|error|" else "magma",
                           vmin=vmin, vmax=vmax)
            fig.colorbar(im, ax=ax, fraction=0.046)
        ax.set_title(name)
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        fig.suptitle(title)
    return fig


def plot_sample(x: torch.Tensor, y: torch.Tensor, pred: torch.Tensor, path: str | Path, title: str = "") -> Path:
    """:func:`sample_figure` saved as a PNG at ``path``."""
    return save_figure(sample_figure(x, y, pred, title), _pyplot(), path)


def loss_curve_figure(history: list[dict], title: str = "training"):
    """Training loss and every test error column (``*_rel_l2``) of ``history`` (the trainer's rows,
    one per epoch) against the epoch, log scale."""
    if not history:
        raise ValueError("history: expected at least one epoch row, got an empty list")
    missing = [i for i, r in enumerate(history) if "epoch" not in r or "train_loss" not in r]
    if missing:
        raise ValueError(f"history: expected rows with 'epoch' and 'train_loss', row {missing[0]} has {sorted(history[missing[0]])}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    epochs = [r["epoch"] for r in history]
    ax.plot(epochs, [r["train_loss"] for r in history], "o-", ms=3, label="train loss")
    columns = [k for k in history[-1] if k.endswith("_rel_l2")]
    for k in columns:
        pts = [(r["epoch"], r[k]) for r in history if isinstance(r.get(k), (int, float))]
        if pts:
            ax.plot(*zip(*pts), "s--", ms=3, label=k.removesuffix("_rel_l2").replace("_", " ") + " rel. L2")
    if all(v > 0 for line in ax.get_lines() for v in line.get_ydata()):
        ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss / relative error")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_loss_curve(history: list[dict], path: str | Path, title: str = "training") -> Path:
    """:func:`loss_curve_figure` saved as a PNG at ``path`` (every ``sciattn train`` run writes
    ``loss_curve.png``)."""
    return save_figure(loss_curve_figure(history, title), _pyplot(), path)


def plot_resolution_curve(errors: dict[int, float], path: str | Path, train_resolution: int | None = None,
                          title: str = "relative L2 against resolution") -> Path:
    """Relative error against grid resolution, marking the training resolution."""
    plt = _pyplot()
    res = sorted(errors)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.plot(res, [errors[r] for r in res], "o-")
    if train_resolution is not None:
        ax.axvline(train_resolution, color="gray", ls="--", label=f"trained at {train_resolution}")
        ax.legend()
    ax.set_xscale("log", base=2)
    ax.set_xticks(res)
    ax.set_xticklabels([str(r) for r in res])
    ax.set_xlabel("resolution (points per axis)")
    ax.set_ylabel("relative L2 error")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    return save_figure(fig, plt, path)


def save_figure(fig, plt, path: str | Path) -> Path:
    """Lay ``fig`` out tightly, write it as an image at ``path`` (100 dpi, the format of its suffix, PNG without
    one; the folders are made; atomically, so a killed run leaves the old image or the new one) and close it in
    ``plt`` (matplotlib's pyplot); returns ``path`` as a ``Path``."""
    from sciattn._io import atomic_path

    fig.tight_layout()
    path = Path(path)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=100, format=path.suffix[1:].lower() or "png")
    finally:
        plt.close(fig)
    return path


def plot_resolution_sweep(rows: list[dict], path: str | Path, train_resolution: int | None = None,
                          title: str = "resolution invariance", verdict: str | None = None) -> Path:
    """Relative L2 and H1 against resolution (rows with ``resolution``, ``rel_l2``, ``rel_h1``); the
    training resolution is a dashed line, the zero-shot regions below and above it are shaded.

    ``verdict`` (:func:`.sweep.sweep_verdict`) is written under the title: in red unless it starts with
    "invariant", and an out-of-distribution sweep is titled so, with its points hollow."""
    plt = _pyplot()
    rows = sorted(rows, key=lambda r: r["resolution"])
    res = [r["resolution"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    ax.plot(res, [r["rel_l2"] for r in rows], "o-", label="relative L2")
    ax.plot(res, [r["rel_h1"] for r in rows], "s--", label="relative H1")
    ax.set_xscale("log", base=2)
    lo, hi = min(res) / 1.25, max(res) * 1.25
    ax.set_xlim(lo, hi)
    if train_resolution is not None:
        ax.axvline(train_resolution, color="gray", ls="--", label=f"trained at {train_resolution}")
        if lo < train_resolution:
            ax.axvspan(lo, train_resolution, color="tab:blue", alpha=0.06, label="zero-shot, coarser")
        if hi > train_resolution:
            ax.axvspan(train_resolution, hi, color="tab:orange", alpha=0.08, label="zero-shot, finer")
    ax.set_xticks(res)
    ax.set_xticklabels([str(r) for r in res])
    ax.set_xlabel("resolution (points per axis)")
    ax.set_ylabel("relative error")
    ax.set_ylim(bottom=0)
    if verdict is not None:
        ood = verdict.startswith("out of distribution")
        if ood:
            title = f"{title}: OUT OF DISTRIBUTION"
            for line in ax.get_lines()[:2]:
                line.set_markerfacecolor("none")
        ok = verdict.startswith("invariant")
        ax.text(0.5, 1.01, verdict if len(verdict) <= 90 else verdict[:87] + "...", transform=ax.transAxes,
                ha="center", va="bottom", fontsize=7, color="black" if ok else "red")
        ax.set_title(title, pad=14, color="black" if ok else "red")
    else:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return save_figure(fig, plt, path)


def plot_rollout(curves: dict[int, list[float]], path: str | Path, threshold: float | None = None,
                 title: str = "autoregressive rollout") -> Path:
    """Per-frame relative L2 error of a rollout (one curve per resolution), log scale."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for r in sorted(curves):
        errors = curves[r]
        ax.plot(range(1, len(errors) + 1), [max(e, 1e-12) for e in errors], "o-", ms=3, label=f"{r} points")
    if threshold is not None:
        ax.axhline(threshold, color="red", ls=":", label=f"threshold {threshold}")
    ax.set_yscale("log")
    ax.set_xlabel("predicted time step")
    ax.set_ylabel("relative L2 error")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return save_figure(fig, plt, path)
