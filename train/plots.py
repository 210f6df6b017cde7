"""Matplotlib figures: sample panels and error against resolution (headless-safe)."""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["plot_sample", "plot_resolution_curve"]


def _pyplot():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "pdf", "svg", "png") and not matplotlib.is_interactive():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_sample(x: torch.Tensor, y: torch.Tensor, pred: torch.Tensor, path: str | Path, title: str = "") -> Path:
    """Input / truth / prediction / error panels of one 2-D (or 1-D) sample ``(C, *spatial)``."""
    plt = _pyplot()
    x, y, pred = (t.detach().cpu()[0] for t in (x, y, pred))
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4))
    panels = [("input", x), ("truth", y), ("prediction", pred), ("|error|", (pred - y).abs())]
    for ax, (name, field) in zip(axes, panels):
        if field.dim() == 1:
            ax.plot(field.numpy())
        else:
            im = ax.imshow(field.numpy(), origin="lower", cmap="viridis" if name != "|error|" else "magma")
            fig.colorbar(im, ax=ax, fraction=0.046)
        ax.set_title(name)
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


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
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
