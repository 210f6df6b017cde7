"""Helpers for the data-parallel tests: a tiny deterministic problem, and the worker that
``torch.multiprocessing.spawn`` runs on each gloo rank (imported by name in the child processes,
so it lives in a plain module, not in the test file)."""

from __future__ import annotations

import torch

from sciattn.operators import create_operator
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.normalizers import fit_normalizers
from sciattn.train.trainer import Trainer

N_TRAIN, N_TEST, RES = 16, 6, 8


def problem():
    """Identical in every process: data from a fixed generator, a shift-and-scale target."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(N_TRAIN + N_TEST, 1, RES, RES, generator=g)
    y = 2.0 * x.roll(1, dims=-1) + 0.5 * x.roll(-1, dims=-2) + 1.0
    train = GridPairDataset(x[:N_TRAIN], y[:N_TRAIN], {"split": "train"})
    test = GridPairDataset(x[N_TRAIN:], y[N_TRAIN:], {"split": "test"})
    return train, test


def make_trainer(run_dir, **overrides) -> Trainer:
    train, test = problem()
    torch.manual_seed(0)
    model = create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=16, n_layers=1,
                            n_heads=2, n_modes=4, regressor_width=8)
    xn, yn = fit_normalizers(train)
    kw = dict(model=model, train_data=train, test_data={"test": test}, x_normalizer=xn, y_normalizer=yn,
              spatial_dims=2, epochs=2, batch_size=4, lr=5e-3, seed=7, progress=False, log=lambda m: None,
              run_dir=run_dir, loggers=None)
    kw.update(overrides)
    return Trainer(**kw)


def point_problem():
    """Ragged point clouds (30, 37 or 44 points) on [0, 1]², non-uniform weights; the target mixes the input with
    a smooth function of the position and the cloud's mean input (a global coupling)."""
    from sciattn.pde_data.geofno import PointSetDataset

    g = torch.Generator().manual_seed(3)
    samples = []
    for i in range(N_TRAIN + N_TEST):
        n = 30 + 7 * (i % 3)
        pos = torch.rand(n, 2, generator=g)
        x = torch.sin(3 * pos[:, :1] + torch.randn(1, generator=g)) + 0.1 * torch.randn(n, 1, generator=g)
        w = torch.rand(n, generator=g) + 0.5
        y = x * pos[:, 1:] + (w[:, None] * x).sum() / w.sum() + 1.0
        samples.append({"x": x, "y": y, "pos": pos, "weights": w})
    return PointSetDataset(samples[:N_TRAIN], {"split": "train"}), PointSetDataset(samples[N_TRAIN:], {"split": "test"})


def make_point_trainer(run_dir, operator: str = "transolver", **overrides) -> Trainer:
    from sciattn.train.run import fit_data_normalizers

    train, test = point_problem()
    torch.manual_seed(0)
    sizes = {"transolver": {"slice_num": 4}, "gnot": {}, "linear_no": {"key_ratio": 4}, "ono": {"psi_dim": 4}}
    if operator == "erwin":  # the default multiscale mode, small widths
        model = create_operator("erwin", in_channels=1, out_channels=1, spatial_dims=2, c_hidden=(8, 16), n_heads=2,
                                mlp_ratio=2, near_points=16)
    else:
        model = create_operator(operator, in_channels=1, out_channels=1, spatial_dims=2, width=8, n_layers=2,
                                n_heads=2, **sizes[operator])
    xn, yn = fit_data_normalizers(train, 1)
    kw = dict(model=model, train_data=train, test_data={"test": test}, x_normalizer=xn, y_normalizer=yn,
              spatial_dims=2, epochs=2, batch_size=4, lr=5e-3, seed=7, progress=False, log=lambda m: None,
              run_dir=run_dir, loggers=None)
    kw.update(overrides)
    return Trainer(**kw)


def worker(rank: int, world_size: int, store: str, run_dir: str, overrides: dict) -> None:
    """One gloo rank: join the group through a file store, train, leave (``overrides["problem"] = "points"``:
    the point problem of :func:`make_point_trainer`)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    try:
        overrides = dict(overrides)
        make = make_point_trainer if overrides.pop("problem", "grid") == "points" else make_trainer
        make(run_dir, **overrides).fit()
        dist.barrier()  # every rank is done with its collectives before any tears the group down
    finally:
        dist.destroy_process_group()
