"""The registered benchmarks: real files (read from ``root``, never downloaded here) and the
built-in generators (solved and cached under ``root`` on first use).

Each loader takes ``(root, split, resolution, **kwargs)``; see :func:`sciattn.pde_data.load`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .grid_dataset import GridPairDataset
from .registry import Benchmark, register_benchmark

__all__: list[str] = []


def _neuralop_darcy(root: Path, split: str, resolution: int | None, n_samples: int | None = None):
    from .neuralop_pt import load_neuralop_split

    return load_neuralop_split(root, "darcy", split, resolution or 16, n_samples=n_samples)


def _fno_darcy(root: Path, split: str, resolution: int | None, n_samples: int | None = None):
    from .fno_mat import load_fno_darcy

    name = "piececonst_r421_N1024_smooth1.mat" if split == "train" else "piececonst_r421_N1024_smooth2.mat"
    n = n_samples or (1000 if split == "train" else 100)
    return load_fno_darcy(root / name, resolution=resolution, n_samples=n, split=split)


def _fno_burgers(root: Path, split: str, resolution: int | None, **kwargs):
    from .fno_mat import load_fno_burgers

    return load_fno_burgers(root / "burgers_data_R10.mat", split=split, resolution=resolution, **kwargs)


def _fno_navier_stokes(file: str, t_out: int):
    def loader(root: Path, split: str, resolution: int | None, **kwargs):
        from .fno_mat import load_fno_navier_stokes

        kwargs.setdefault("t_out", t_out)
        return load_fno_navier_stokes(root / file, split=split, resolution=resolution, **kwargs)

    return loader


def _generated_darcy(root: Path, split: str, resolution: int | None, n_train: int = 1000, n_test: int = 100,
                     seed: int = 0, fine_resolution: int | None = None, progress: bool = True):
    from .darcy import load_or_generate_darcy

    res = resolution or 64
    data = load_or_generate_darcy(root / "generated", n_train + n_test, [res], fine_resolution=fine_resolution,
                                  seed=seed, progress=progress)
    coeff, u = data[res]
    sl = slice(0, n_train) if split == "train" else slice(n_train, n_train + n_test)
    meta = {"source": "sciattn.pde_data.darcy", "name": "darcy", "split": split, "resolution": res,
            "variables": {"x": ["coefficient"], "y": ["pressure"]}, "seed": seed}
    return GridPairDataset(torch.from_numpy(coeff[sl])[:, None], torch.from_numpy(u[sl])[:, None], meta)


register_benchmark(Benchmark(
    name="darcy_pt",
    source="neuraloperator example data (Zenodo record 12784353)",
    files="darcy_{train,test}_{res}.pt",
    split="separate train and test files",
    shapes="x (1, r, r) from bool, y (1, r, r)",
    loader=_neuralop_darcy,
    resolutions="16 (default), 32, 64, 128, 421",
))
register_benchmark(Benchmark(
    name="fno_darcy",
    source="Li et al. 2020 (FNO), piececonst_r421 .mat files",
    files="piececonst_r421_N1024_smooth1.mat (train), piececonst_r421_N1024_smooth2.mat (test)",
    split="train: first 1000 of smooth1; test: first 100 of smooth2",
    shapes="x (1, r, r) coefficient, y (1, r, r) pressure",
    loader=_fno_darcy,
    resolutions="s = (421-1)/k + 1: 421, 211, 141, 106, 85, ...",
))
register_benchmark(Benchmark(
    name="fno_burgers",
    source="Li et al. 2020 (FNO), burgers_data_R10.mat",
    files="burgers_data_R10.mat",
    split="train: first 1000; test: last 100",
    shapes="x (1, r) initial condition, y (1, r) solution at t = 1",
    loader=_fno_burgers,
    resolutions="divisors of 8192 (FNO: 1024)",
))
for _nu, _file, _t_out in [("1e-3", "ns_V1e-3_N5000_T50.mat", 40), ("1e-4", "ns_V1e-4_N10000_T30.mat", 20),
                           ("1e-5", "NavierStokes_V1e-5_N1200_T20.mat", 10)]:
    register_benchmark(Benchmark(
        name=f"fno_navier_stokes_{_nu}",
        source=f"Li et al. 2020 (FNO), {_file}",
        files=_file,
        split="train: first 1000; test: last 200",
        shapes=f"x (10, r, r) first 10 steps, y ({_t_out}, r, r) next steps",
        loader=_fno_navier_stokes(_file, _t_out),
        resolutions="divisors of 64",
    ))
register_benchmark(Benchmark(
    name="darcy",
    source="built-in solver (sciattn.pde_data.darcy), FNO recipe",
    files="generated/darcy_<hash>.h5 (solved on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (1, r, r) coefficient in {3, 12}, y (1, r, r) pressure",
    loader=_generated_darcy,
    resolutions="any divisor of fine_resolution (default r)",
))
