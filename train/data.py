"""Build the train and test datasets that a :class:`DataConfig` describes, and load one data set
at several resolutions for a resolution sweep (:func:`load_at_resolutions`)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch

from sciattn._checks import check_choice, check_positive_int
from sciattn.pde_data import load
from sciattn.pde_data.darcy import load_or_generate_darcy
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.neuralop_pt import load_neuralop_pt
from sciattn.pde_data.registry import default_root

from .config import DataConfig

__all__ = ["build_datasets", "load_data_file", "load_at_resolutions", "DATA_FORMATS", "GENERATED", "TIME_SERIES"]

DATA_FORMATS = ("neuralop_pt", "darcy_solver")
GENERATED = ("darcy", "burgers", "navier_stokes")  # built-in solvers: any resolution, same samples at each
TIME_SERIES = ("navier_stokes",)  # inputs and outputs are consecutive time steps of one field


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


def _as_grid(ds) -> GridPairDataset:
    if isinstance(ds, GridPairDataset):
        return ds
    samples = [ds[i] for i in range(len(ds))]
    return GridPairDataset(torch.stack([s["x"] for s in samples]), torch.stack([s["y"] for s in samples]),
                           getattr(ds, "meta", {}))


def _at_resolution(ds, r: int, label: str) -> GridPairDataset:
    """``ds`` itself at ``r`` points per axis, or strided to ``r`` from a multiple of ``r``."""
    grid = _as_grid(ds)
    n = grid.resolution[0]
    if all(s == r for s in grid.resolution):
        return grid
    if n < r or n % r or any(s != n for s in grid.resolution):
        raise ValueError(f"resolutions: {label!r} holds {'x'.join(map(str, grid.resolution))} points and cannot be "
                         f"restricted to {r} per axis; expected a divisor of {n}, or a generated benchmark "
                         f"{list(GENERATED)}")
    sl = (slice(None), slice(None)) + (slice(None, None, n // r),) * len(grid.resolution)
    return GridPairDataset(grid.x[sl], grid.y[sl], {**grid.meta, "resolution": r})


def load_at_resolutions(
    name_or_path: str | os.PathLike,
    resolutions: list[int],
    *,
    split: str = "test",
    root: str | os.PathLike | None = None,
    n_samples: int = 16,
    seed: int = 0,
    t_in: int | None = None,
    progress: bool = False,
    **params: Any,
) -> dict[int, GridPairDataset]:
    """``{r: dataset}``: the same samples at every resolution ``r``.

    A generated benchmark (:data:`GENERATED`) draws ``n_samples`` fresh samples with ``seed`` on the
    grid ``S = lcm(resolutions)``, solves them once there and restricts them by slicing
    (``u_r[j] = u_S[j · S / r]``), cached under ``root/generated``; ``params`` override the
    solver's defaults and ``t_in`` (Navier–Stokes) is the number of input time steps. Anything
    else goes through :func:`sciattn.pde_data.load` with ``split`` and ``resolution=r`` (each
    benchmark's own subsampling rule; a dataset returned at a multiple of ``r`` is strided).

    Shapes:
        darcy ``x (1, r, r)``, ``y (1, r, r)``; burgers ``x (1, r)``, ``y (1, r)``;
        navier_stokes ``x (t_in, r, r)``, ``y (T - t_in, r, r)`` (time steps as channels).
    """
    if not resolutions:
        raise ValueError("resolutions: expected at least one resolution, got none")
    res = sorted({check_positive_int("resolutions", r) for r in resolutions})
    key = str(name_or_path)
    if key not in GENERATED:
        kw = {"root": root} if root is not None else {}
        return {r: _at_resolution(load(name_or_path, split=split, resolution=r, **kw, **params), r, key)
                for r in res}
    check_positive_int("n_samples", n_samples)
    cache = Path(root).expanduser() if root is not None else default_root()
    fine = math.lcm(*res)
    if key == "navier_stokes" and fine % 2:
        fine *= 2
    meta = {"name": key, "seed": seed, "fine_resolution": fine, "split": "generated"}
    kw = {"fine_resolution": fine, "seed": seed, "progress": progress, **params}
    if key == "darcy":
        from sciattn.pde_data.darcy import load_or_generate_darcy

        data = load_or_generate_darcy(cache / "generated", n_samples, res, **kw)
        return {r: GridPairDataset(torch.from_numpy(a)[:, None], torch.from_numpy(u)[:, None],
                                   {**meta, "resolution": r}) for r, (a, u) in data.items()}
    if key == "burgers":
        from sciattn.pde_data.burgers import load_or_generate_burgers

        data = load_or_generate_burgers(cache / "generated", n_samples, res, **kw)
        return {r: GridPairDataset(torch.from_numpy(a)[:, None], torch.from_numpy(u)[:, None],
                                   {**meta, "resolution": r}) for r, (a, u) in data.items()}
    from sciattn.pde_data.navier_stokes import load_or_generate_navier_stokes

    data = load_or_generate_navier_stokes(cache / "generated", n_samples, res, **kw)
    out = {}
    for r, (_, u) in data.items():
        t_steps = u.shape[-1]
        k = 10 if t_in is None else t_in
        if not 0 < k < t_steps:
            raise ValueError(f"t_in: expected 1..{t_steps - 1} of the {t_steps} recorded steps, got {k}")
        field = torch.from_numpy(u).permute(0, 3, 1, 2)  # (n, T, r, r)
        out[r] = GridPairDataset(field[:, :k], field[:, k:], {**meta, "resolution": r, "t_in": k,
                                                              "time_series": True})
    return out
