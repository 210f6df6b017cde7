"""The catalogue's built-in generators, one :class:`~.catalogue.Record` each: PDE solvers whose samples are
solved on first use and cached under ``root/generated`` (every resolution restricted from one solve), and the
papers' data protocols as presets of them (:mod:`.presets`).

Each loader takes ``(root, split, resolution, **kwargs)``; see :func:`sciattn.pde_data.load`. A generator's
``defaults`` (``n_train``, ``n_test``, ``resolution``) are its loader's and the trainer's; ``options()`` are the
solver keywords it accepts; ``writer`` is its ``sciattn data generate`` layout (:mod:`.generate`);
``periodic`` and ``variables`` are the metadata a run records.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .catalogue import Record, lazy, register
from .catalogue import get as get_record
from .generated_pairs import record_variables
from .grid_dataset import GridPairDataset
from .presets import Preset, frozen

__all__: list[str] = []


def _solver_options(module: str, table: str, *extra: str):
    """``() -> set``: the keys of the solver's defaults table ``module.table`` (a table of tables: the union of
    their keys) and ``extra``."""

    def get() -> set[str]:
        t = lazy(module, table)()
        keys = set(t) if not isinstance(next(iter(t.values())), dict) else set().union(*t.values())
        return keys | set(extra)

    return get


def _defaults(n_train: int, n_test: int, resolution: int) -> dict[str, int]:
    return {"n_train": n_train, "n_test": n_test, "resolution": resolution}


def _sizes(name: str, n_train: int | None, n_test: int | None, resolution: int | None) -> tuple[int, int, int]:
    """``(n_train, n_test, resolution)`` with the record's defaults where ``None``."""
    d = get_record(name).defaults
    return (d["n_train"] if n_train is None else n_train, d["n_test"] if n_test is None else n_test,
            resolution or d["resolution"])


def _generated_split(x, y, split: str, n_train: int, n_test: int, meta: dict) -> GridPairDataset:
    """The head ``n_train`` samples for train, the next ``n_test`` for test; arrays ``(n, C, *spatial)``."""
    sl = slice(0, n_train) if split == "train" else slice(n_train, n_train + n_test)
    return GridPairDataset(torch.as_tensor(x[sl]), torch.as_tensor(y[sl]), {**meta, "split": split})


def _generated_darcy(root: Path, split: str, resolution: int | None, n_train: int | None = None,
                     n_test: int | None = None, seed: int = 0, fine_resolution: int | None = None,
                     progress: bool = True):
    from .solvers.darcy import load_or_generate_darcy

    n_train, n_test, res = _sizes("darcy", n_train, n_test, resolution)
    data = load_or_generate_darcy(root / "generated", n_train + n_test, [res], fine_resolution=fine_resolution,
                                  seed=seed, progress=progress)
    coeff, u = data[res]
    meta = {"source": "sciattn.pde_data.darcy", "name": "darcy", "resolution": res,
            "variables": record_variables("darcy"), "seed": seed}
    return _generated_split(coeff[:, None], u[:, None], split, n_train, n_test, meta)


_DARCY_PRESETS = (
    Preset(
        "fno_darcy", "darcy",
        frozen({"alpha": 2.0, "tau": 3.0, "high": 12.0, "low": 3.0, "fine_resolution": 420}),
        84,
        frozen({"n_train": 1000, "n_test": 200, "fno_grid": "421 nodes per axis, subsampled by 5 to 85",
                 "stored": "sciattn's convention keeps nodes i/84, i = 0..83: FNO's 85 without the last "
                           "(right/top Dirichlet) row and column", "forcing": 1.0}),
        "FNO's piececonst_r421 Darcy: a = 12 where a GRF N(0, (-Delta + 9 I)^-2) >= 0 else 3, f = 1, u = 0 on the "
        "boundary, solved on 421 x 421 nodes and subsampled by 5 (85 nodes; 84 stored here). These are sciattn's "
        "darcy defaults, solved at 420.",
        "Li et al. 2020 (FNO), sec. 5.2; Transolver/NSL protocol 1000 / 200 (FNO's own: 1000 / 100); "
        "/work/shared/reference/formats.md 1.3",
        frozen({"fine_resolution": 84}),
    ),
)


register(Record(
    name="darcy",
    source="built-in solver (sciattn.pde_data.darcy), FNO recipe",
    files="generated/darcy_<hash>.h5 (solved on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (1, r, r) coefficient in {3, 12}, y (1, r, r) pressure",
    loader=_generated_darcy,
    resolutions="any divisor of fine_resolution (default r)",
    kind="generator", defaults=_defaults(1000, 100, 64),
    options=_solver_options("solvers.darcy", "DARCY_DEFAULTS", "fine_resolution"), writer=lazy("generate", "write_darcy"),
    variables={"x": ["coefficient"], "y": ["pressure"]}, periodic=False,
    presets=_DARCY_PRESETS,
))


def _generated_burgers(root: Path, split: str, resolution: int | None, n_train: int | None = None,
                       n_test: int | None = None, seed: int = 0, progress: bool = True, **params):
    from .solvers.burgers import load_or_generate_burgers

    n_train, n_test, res = _sizes("burgers", n_train, n_test, resolution)
    a, u = load_or_generate_burgers(root / "generated", n_train + n_test, [res], seed=seed, progress=progress,
                                    **params)[res]
    from .solvers.burgers import BURGERS_DEFAULTS

    meta = {"source": "sciattn.pde_data.burgers", "name": "burgers", "resolution": res,
            "variables": record_variables("burgers"), "seed": seed,
            "dt": float({**BURGERS_DEFAULTS, **params}["t_final"])}  # x at t = 0 -> y at t_final
    return _generated_split(a[:, None], u[:, None], split, n_train, n_test, meta)


def _generated_navier_stokes(root: Path, split: str, resolution: int | None, n_train: int | None = None,
                             n_test: int | None = None, t_in: int = 10, seed: int = 0, progress: bool = True,
                             **params):
    from .solvers.navier_stokes import load_or_generate_navier_stokes

    n_train, n_test, res = _sizes("navier_stokes", n_train, n_test, resolution)
    _, u = load_or_generate_navier_stokes(root / "generated", n_train + n_test, [res], seed=seed, progress=progress,
                                          **params)[res]
    if not 0 < t_in < u.shape[-1]:
        raise ValueError(f"t_in: expected 1..{u.shape[-1] - 1} of the {u.shape[-1]} recorded steps, got {t_in}")
    field = torch.from_numpy(u).permute(0, 3, 1, 2)  # (n, T, r, r): time steps as channels
    from .solvers.navier_stokes import NS_DEFAULTS

    p = {**NS_DEFAULTS, **params}
    meta = {"source": "sciattn.pde_data.navier_stokes", "name": "navier_stokes", "resolution": res,
            "variables": {"x": [f"w(t={k + 1})" for k in range(t_in)],
                          "y": [f"w(t={k + 1})" for k in range(t_in, u.shape[-1])]}, "seed": seed,
            "dt": float(p["t_final"]) / int(p["record_steps"]), "time_series": True, "t_in": t_in}
    return _generated_split(field[:, :t_in], field[:, t_in:], split, n_train, n_test, meta)


_BURGERS_PRESETS = (
    Preset(
        "fno_burgers", "burgers",
        frozen({"nu": 0.1, "t_final": 1.0, "dt": 1e-4, "sigma": 25.0, "tau": 5.0, "alpha": 2.0,
                 "fine_resolution": 8192}),
        1024,
        frozen({"n_train": 1000, "n_test": 100, "split": "first 1000 / last 100 of 2048", "input": "u(., 0)",
                 "output": "u(., 1)"}),
        "FNO paper's Burgers (burgers_data_R10): nu = 0.1, u0 ~ N(0, 625 (-Delta + 25 I)^-2), u(., 1), solved at "
        "8192 and subsampled; almost linear decay (std 0.36 -> 0.005). These are sciattn's burgers defaults.",
        "Li et al. 2020 (FNO), sec. 5.1; fourier_1d.py (ntrain 1000, ntest 100, sub 2^3 -> 1024); "
        "/work/shared/reference/formats.md 1.2 (the file's own visc is unverified)",
        frozen({"fine_resolution": 256, "dt": 1e-3}),
    ),
    Preset(
        "neuralop_burgers", "burgers",
        frozen({"nu": 0.01, "t_final": 0.96, "dt": 1e-3, "sigma": 629.2, "tau": 5.0, "alpha": 4.0,
                 "fine_resolution": 256}),
        16,
        frozen({"n_train": 800, "n_test": 400, "n_times": 17, "time_series": "burgers_neuralop."
                 "generate_burgers_neuralop gives y (N, 17, r) on t in [0, 0.96]"}),
        "neuraloperator's bundled burgers_{train,test}_16.pt: nu = 0.01 (the file's visc), 17 snapshots on "
        "t in [0, 0.96] (read from the file by replaying it), and the initial law fitted to the file (alpha 4, tau 5, "
        "sigma 629); energy falls to 31% by t = 0.96.",
        "fitted: python -m sciattn.pde_data.burgers_neuralop burgers_train_16.pt (sciattn.pde_data.burgers_neuralop)",
        frozen({"fine_resolution": 64}),
    ),
)


register(Record(
    name="burgers",
    source="built-in solver (sciattn.pde_data.burgers), FNO recipe: nu = 0.1, u0 ~ N(0, 625(-Δ+25)^-2)",
    files="generated/burgers_<hash>.h5 (solved on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (1, r) initial condition, y (1, r) solution at t = 1",
    loader=_generated_burgers,
    resolutions="any divisor of fine_resolution (default r = 1024)",
    kind="generator", defaults=_defaults(1000, 100, 1024),
    options=_solver_options("solvers.burgers", "BURGERS_DEFAULTS", "fine_resolution", "batch_size"),
    writer=lazy("generate", "write_burgers"), variables={"x": ["initial"], "y": ["solution"]}, periodic=True,
    presets=_BURGERS_PRESETS,
))


_NAVIER_STOKES_PRESETS = (
    Preset(
        "fno_navier_stokes", "navier_stokes",
        frozen({"nu": 1e-5, "t_final": 20.0, "record_steps": 20, "dt": 1e-4, "alpha": 2.5, "tau": 7.0,
                 "fine_resolution": 256}),
        64,
        frozen({"n_train": 1000, "n_test": 200, "t_in": 10, "t_out": 10, "split": "first 1000 / last 200 of 1200",
                 "forcing": "0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y)))"}),
        "FNO's NavierStokes_V1e-5_N1200_T20: nu = 1e-5, w0 ~ N(0, 7^1.5 (-Delta + 49 I)^-2.5), one snapshot per "
        "time unit to T = 20, solved at 256 and stored at 64; 10 steps in -> 10 steps out.",
        "Li et al. 2020 (FNO), sec. 5.3; ns_2d.py; /work/shared/reference/formats.md 1.4 and 8.3",
        frozen({"fine_resolution": 64, "t_final": 0.2, "record_steps": 2}),
    ),
)


register(Record(
    name="navier_stokes",
    source="built-in solver (sciattn.pde_data.navier_stokes), FNO ns_2d recipe: nu = 1e-3, forcing 0.1(sin+cos)",
    files="generated/navier_stokes_<hash>.h5 (solved on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (t_in, r, r) first t_in recorded steps, y (T - t_in, r, r) the rest",
    loader=_generated_navier_stokes,
    resolutions="any divisor of fine_resolution (default r = 64)",
    kind="generator", defaults=_defaults(1000, 200, 64),
    options=_solver_options("solvers.navier_stokes", "NS_DEFAULTS", "fine_resolution", "batch_size", "t_in"),
    writer=lazy("generate", "write_navier_stokes"), periodic=True, time_series=True,
    presets=_NAVIER_STOKES_PRESETS,
))


register(Record(
    name="coupled_navier_stokes",
    source="built-in coupled Navier-Stokes systems on the torus (sciattn.pde_data.coupled_navier_stokes)",
    files="generated/coupled_navier_stokes_<hash>.h5 (solved on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (V, r, r) u, v, w (+ theta) at t, y the same one delta_t later", resolutions="any (default 64)",
    kind="generator", defaults=_defaults(1000, 100, 64),
    options=_solver_options("solvers.coupled_navier_stokes", "COUPLED_DEFAULTS", "system", "fine_resolution", "batch_size"),
    writer=lazy("generate", "write_coupled_navier_stokes"),
))


def _generated_shallow_water(root: Path, split: str, resolution: int | None, n_train: int | None = None,
                             n_test: int | None = None, grid: str = "equiangular", seed: int = 0, **params):
    from .solvers.shallow_water import load_or_generate_shallow_water

    n_train, n_test, nlat = _sizes("shallow_water", n_train, n_test, resolution)
    data = load_or_generate_shallow_water(root / "generated", n_train + n_test, nlat=nlat, nlon=2 * nlat, grid=grid,
                                          seed=seed, **params)
    meta = {"source": "sciattn.pde_data.shallow_water", "name": "shallow_water", "resolution": nlat,
            "grid": grid, "variables": {"x": ["geopotential", "vorticity", "divergence"],
                                        "y": ["geopotential", "vorticity", "divergence"]}, "seed": seed}
    return _generated_split(data["x"], data["y"], split, n_train, n_test, meta)


_SHALLOW_WATER_PRESETS = (
    Preset(
        "bonev_shallow_water", "shallow_water",
        frozen({"grid": "legendre-gauss", "dt": 150.0, "n_steps_between": 24, "mach": 0.03, "decay": 0.0,
                 "hamp": 120.0, "havg": 1.0e4, "hyperdiffusion_time": 7200.0, "hyperdiffusion_order": 4.0}),
        128,
        frozen({"nlon": 256, "n_train": 256, "n_test": 8, "step_seconds": 3600.0,
                 "note": "torch-harmonics draws a new initial condition per sample; dt = 3600 s at the paper-era "
                         "commit, 1800 s (n_steps_between 12) since ed2e6fa"}),
        "Bonev et al. 2023 (SFNO) / torch-harmonics' shallow-water example: Legendre-Gauss 128 x 256, solver step "
        "150 s, one-hour pairs, white random spectrum, flow speeds of torch-harmonics' mach = 0.2 recipe "
        "(max 8-9 m/s, i.e. mach 0.03 in sciattn's scaling), hamp 120 m.",
        "/work/shared/reference/spherical.md 5.1-5.3 (torch-harmonics 0.9.3 examples/shallow_water_equations); "
        "the speed equivalence measured in sciattn.pde_data.shallow_water's docstring",
        frozen({}),
    ),
)


register(Record(
    name="shallow_water",
    source="built-in spectral solver on the rotating sphere (sciattn.pde_data.shallow_water), random initial "
           "conditions at Mach 0.2, RK4 with hyperdiffusion",
    files="generated/shallow_water_<hash>.h5 (solved on first use)",
    split="train: first n_train one-hour pairs; test: the next n_test",
    shapes="x (3, nlat, 2 nlat) geopotential, vorticity, divergence at t; y the same at t + 1 h",
    loader=_generated_shallow_water,
    resolutions="nlat (default 32) on an nlat x 2 nlat grid (equiangular by default)",
    kind="generator", defaults=_defaults(896, 128, 32),
    options=_solver_options("solvers.shallow_water", "SWE_DEFAULTS", "grid", "dt", "n_steps_between", "lmax", "spinup",
                            "n_traj", "traj_len", "batch_size"),
    writer=lazy("generate", "write_shallow_water"), single_grid=True,
    presets=_SHALLOW_WATER_PRESETS,
))


def _generated_darcy_irregular(root: Path, split: str, resolution: int | None, n_train: int = 1000,
                               n_test: int = 100, seed: int = 0, fine_resolution: int = 128, progress: bool = True,
                               **kwargs):
    from .solvers.irregular import generate_darcy_irregular

    ds = generate_darcy_irregular(n_train + n_test, resolution or 1024, fine_resolution=fine_resolution, seed=seed,
                                  cache_dir=root / "generated", progress=progress, **kwargs)
    sl = slice(0, n_train) if split == "train" else slice(n_train, n_train + n_test)
    return type(ds)(ds.samples[sl], {**ds.meta, "split": split})


def _generated_navier_stokes_irregular(root: Path, split: str, resolution: int | None, n_train: int = 1000,
                                       n_test: int = 200, t_in: int = 10, seed: int = 0, fine_resolution: int = 64,
                                       progress: bool = True, **kwargs):
    from .solvers.irregular import generate_navier_stokes_irregular
    from .solvers.navier_stokes import NS_DEFAULTS

    steps = int(kwargs.get("record_steps", NS_DEFAULTS["record_steps"]))
    if not 0 < t_in < steps:
        raise ValueError(f"t_in: expected 1..{steps - 1} of the {steps} recorded steps, got {t_in}")
    kwargs.setdefault("inputs", range(1, t_in + 1))
    kwargs.setdefault("outputs", range(t_in + 1, steps + 1))
    ds = generate_navier_stokes_irregular(n_train + n_test, resolution or 1024, fine_resolution=fine_resolution,
                                          seed=seed, cache_dir=root / "generated", progress=progress, **kwargs)
    sl = slice(0, n_train) if split == "train" else slice(n_train, n_train + n_test)
    return type(ds)(ds.samples[sl], {**ds.meta, "split": split})


register(Record(
    name="darcy_irregular",
    source="built-in Darcy solver (FNO recipe) solved at fine_resolution (default 128), evaluated at random points "
           "(sciattn.pde_data.irregular): coefficient by nearest node, pressure bilinear",
    files="generated/darcy_<hash>.h5 and generated/darcy_irregular_<hash>.h5 (made on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (N, 1) coefficient in {3, 12}, y (N, 1) pressure, pos (N, 2), weights (N,) Delaunay areas, sum 1",
    loader=_generated_darcy_irregular,
    target=lazy("solvers.irregular", "generate_darcy_irregular"), points=True, writer=lazy("generate", "write_darcy_irregular"),
    options=lambda: get_record("darcy").options() - {"fine_resolution", "batch_size", "t_in"},
    resolutions="points per sample N (default 1024); layout='uniform'|'jittered', weights='delaunay'|'voronoi', "
                "fixed_points",
))


register(Record(
    name="navier_stokes_irregular",
    source="built-in Navier-Stokes solver on the torus (FNO ns_2d recipe) at fine_resolution (default 64), "
           "evaluated at random points by trigonometric interpolation (sciattn.pde_data.irregular)",
    files="generated/navier_stokes_<hash>.h5 and generated/navier_stokes_irregular_<hash>.h5 (made on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (N, t_in) first t_in recorded steps, y (N, T - t_in) the rest (or inputs=/outputs= snapshot "
           "indices, 0 = w0), pos (N, 2) in [0, 1)^2, weights (N,) periodic Delaunay areas, sum 1",
    loader=_generated_navier_stokes_irregular,
    target=lazy("solvers.irregular", "generate_navier_stokes_irregular"), points=True, writer=lazy("generate", "write_navier_stokes_irregular"),
    options=lambda: get_record("navier_stokes").options() - {"fine_resolution", "batch_size"},
    resolutions="points per sample N (default 1024); the same options as darcy_irregular",
))


register(Record(
    name="darcy_neuralop",
    source="built-in Darcy solver matched to neuraloperator's darcy_*_16.pt (sciattn.pde_data.darcy_neuralop)",
    files="solved in memory", split="train: first n_train samples; test: the next n_test",
    shapes="x (1, r, r) mask, y (1, r, r) pressure", resolutions="any (default 16)",
    kind="generator", defaults=_defaults(1000, 50, 16),
    options=_solver_options("solvers.darcy_neuralop", "NEURALOP_DARCY_FIT", "fine_resolution"),
    writer=lazy("generate", "write_darcy_neuralop"), variables={"x": ["mask"], "y": ["pressure"]},
    matched_to="neuraloperator's darcy_{train,test}_16.pt",
))
