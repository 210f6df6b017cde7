"""Build the train and test datasets that a :class:`DataConfig` describes."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from sciattn._checks import check_choice
from sciattn.pde_data import load
from sciattn.pde_data.darcy import load_or_generate_darcy
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.neuralop_pt import load_neuralop_pt

from .config import DataConfig

__all__ = ["build_datasets", "load_data_file", "DATA_FORMATS"]

DATA_FORMATS = ("neuralop_pt", "darcy_solver")


def load_data_file(path: str | os.PathLike, fmt: str | None = None, split: str = "test"):
    """Load one data file of any supported format (``fmt=None``: detected from the content), or a
    registered benchmark name."""
    if fmt not in (None, "auto"):
        check_choice("format", fmt, ("auto", "neuralop_pt"))
        return load_neuralop_pt(Path(path))
    return load(path, split=split)


def build_datasets(cfg: DataConfig, progress: bool = False) -> tuple[GridPairDataset, dict[str, GridPairDataset]]:
    """``(train, {test_name: test})``; test names are ``"test_<resolution>"``."""
    check_choice("data.format", cfg.format, DATA_FORMATS)
    if cfg.format == "neuralop_pt":
        if not cfg.train or not cfg.test:
            raise ValueError("data.train / data.test: expected paths of neuraloperator .pt files, got an empty path")
        train = load_neuralop_pt(cfg.train, n_samples=cfg.n_train)
        test = load_neuralop_pt(cfg.test, n_samples=cfg.n_test)
        return train, {f"test_{'x'.join(map(str, test.resolution))}": test}
    n_train, n_test = cfg.n_train or 1000, cfg.n_test or 100
    resolutions = sorted({cfg.train_resolution, *cfg.test_resolutions})
    data = load_or_generate_darcy(
        Path(cfg.cache_dir).expanduser(), n_train + n_test, resolutions, seed=cfg.seed, progress=progress
    )

    def subset(res: int, sl: slice, split: str) -> GridPairDataset:
        coeff, u = data[res]
        meta = {"source": "sciattn.pde_data.darcy", "name": "darcy", "split": split, "resolution": res,
                "variables": {"x": ["coefficient"], "y": ["pressure"]}}
        return GridPairDataset(torch.from_numpy(coeff[sl])[:, None], torch.from_numpy(u[sl])[:, None], meta)

    train = subset(cfg.train_resolution, slice(0, n_train), "train")
    tests = {f"test_{r}": subset(r, slice(n_train, n_train + n_test), "test") for r in cfg.test_resolutions}
    return train, tests
