"""The catalogue's named datasets: real files (read from ``root``, never downloaded here; ``downloads`` says where
they are published) and the built-in generators (solved and cached under ``root`` on first use), one
:class:`~.catalogue.Record` each.

Each loader takes ``(root, split, resolution, **kwargs)``; see :func:`sciattn.pde_data.load`. A generator's
``defaults`` (``n_train``, ``n_test``, ``resolution``) are its loader's and the trainer's; ``options()`` are the
solver keywords it accepts; ``writer`` is its ``sciattn data generate`` layout (:mod:`.generate`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import downloads as dl
from .catalogue import Record, lazy, register
from .catalogue import get as get_record
from .grid_dataset import GridPairDataset

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


def _neuralop_files(name: str, default_resolution: int):
    """``{name}_{split}_{res}.pt`` files in neuraloperator's layout."""

    def loader(root: Path, split: str, resolution: int | None, n_samples: int | None = None):
        from .neuralop_pt import load_neuralop_split

        return load_neuralop_split(root, name, split, resolution or default_resolution, n_samples=n_samples)

    return loader


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


def _generated_split(x, y, split: str, n_train: int, n_test: int, meta: dict) -> GridPairDataset:
    """The head ``n_train`` samples for train, the next ``n_test`` for test; arrays ``(n, C, *spatial)``."""
    sl = slice(0, n_train) if split == "train" else slice(n_train, n_train + n_test)
    return GridPairDataset(torch.as_tensor(x[sl]), torch.as_tensor(y[sl]), {**meta, "split": split})


def _generated_darcy(root: Path, split: str, resolution: int | None, n_train: int | None = None,
                     n_test: int | None = None, seed: int = 0, fine_resolution: int | None = None,
                     progress: bool = True):
    from .darcy import load_or_generate_darcy

    n_train, n_test, res = _sizes("darcy", n_train, n_test, resolution)
    data = load_or_generate_darcy(root / "generated", n_train + n_test, [res], fine_resolution=fine_resolution,
                                  seed=seed, progress=progress)
    coeff, u = data[res]
    meta = {"source": "sciattn.pde_data.darcy", "name": "darcy", "resolution": res,
            "variables": {"x": ["coefficient"], "y": ["pressure"]}, "seed": seed}
    return _generated_split(coeff[:, None], u[:, None], split, n_train, n_test, meta)


register(Record(
    name="darcy_pt",
    source="neuraloperator example data (Zenodo record 12784353)",
    files="darcy_{train,test}_{res}.pt",
    split="separate train and test files",
    shapes="x (1, r, r) from bool, y (1, r, r)",
    loader=_neuralop_files("darcy", 16),
    resolutions="16 (default), 32, 64, 128, 421",
    downloads={"neuralop_darcy_16": dl.neuralop("darcy_train_16.pt", "darcy_test_16.pt"),
               "neuralop_darcy_32": dl.neuralop("darcy_test_32.pt"),
               **dl.neuralop_archives("darcy", "darcy", (16, 32, 64, 128, 421), "darcy_pt", dl.DARCY_RECORD)},
))
register(Record(
    name="navier_stokes_pt",
    source="neuraloperator example data (Zenodo record 12825163), forced Navier-Stokes",
    files="nsforcing_{train,test}_{res}.pt",
    split="separate train and test files",
    shapes="x (1, r, r) vorticity, y (1, r, r) vorticity later",
    loader=_neuralop_files("nsforcing", 128),
    resolutions="128 (default), 1024",
    downloads=dl.neuralop_archives("nsforcing", "nsforcing", (128, 1024), "navier_stokes_pt", dl.NS_RECORD,
                                   " (older code used record 11043303)"),
))
register(Record(
    name="fno_darcy",
    source="Li et al. 2020 (FNO), piececonst_r421 .mat files",
    files="piececonst_r421_N1024_smooth1.mat (train), piececonst_r421_N1024_smooth2.mat (test)",
    split="train: first 1000 of smooth1; test: first 100 of smooth2",
    shapes="x (1, r, r) coefficient, y (1, r, r) pressure",
    loader=_fno_darcy,
    resolutions="s = (421-1)/k + 1: 421, 211, 141, 106, 85, ...",
    downloads={"fno_darcy": dl.fno("piececonst_r421_N1024_smooth1.mat", "piececonst_r421_N1024_smooth2.mat")},
))
register(Record(
    name="fno_burgers",
    source="Li et al. 2020 (FNO), burgers_data_R10.mat",
    files="burgers_data_R10.mat",
    split="train: first 1000; test: last 100",
    shapes="x (1, r) initial condition, y (1, r) solution at t = 1",
    loader=_fno_burgers,
    resolutions="divisors of 8192 (FNO: 1024)",
    target=lazy("fno_mat", "load_fno_burgers"),
    downloads={"fno_burgers": dl.fno("burgers_data_R10.mat")},
))
for _nu, _file, _t_out in [("1e-3", "ns_V1e-3_N5000_T50.mat", 40), ("1e-4", "ns_V1e-4_N10000_T30.mat", 20),
                           ("1e-5", "NavierStokes_V1e-5_N1200_T20.mat", 10)]:
    register(Record(
        name=f"fno_navier_stokes_{_nu}",
        source=f"Li et al. 2020 (FNO), {_file}",
        files=_file,
        split="train: first 1000; test: last 200",
        shapes=f"x (10, r, r) first 10 steps, y ({_t_out}, r, r) next steps",
        loader=_fno_navier_stokes(_file, _t_out),
        resolutions="divisors of 64",
        target=lazy("fno_mat", "load_fno_navier_stokes"),
        downloads={f"fno_navier_stokes_v{_nu}": dl.fno(_file)},
    ))
register(Record(
    name="darcy",
    source="built-in solver (sciattn.pde_data.darcy), FNO recipe",
    files="generated/darcy_<hash>.h5 (solved on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (1, r, r) coefficient in {3, 12}, y (1, r, r) pressure",
    loader=_generated_darcy,
    resolutions="any divisor of fine_resolution (default r)",
    kind="generator", defaults=_defaults(1000, 100, 64),
    options=_solver_options("darcy", "DARCY_DEFAULTS", "fine_resolution"), writer=lazy("generate", "write_darcy"),
    variables={"x": ["coefficient"], "y": ["pressure"]}, periodic=False,
))


def _geofno(fn_name: str):
    def loader(root: Path, split: str, resolution: int | None, **kwargs):
        from . import geofno

        if resolution is not None:
            raise ValueError(f"resolution: the Geo-FNO sets are used at their stored resolution; got {resolution}")
        return getattr(geofno, fn_name)(root, split, **kwargs)

    return loader


def _shapenet_car(root: Path, split: str, resolution: int | None, **kwargs):
    from .shapenet_car import load_shapenet_car

    return load_shapenet_car(root, split, **kwargs)


def _the_well(root: Path, split: str, resolution: int | None, dataset: str | None = None, **kwargs):
    from .the_well import TheWellDataset

    folder = root / "datasets" / dataset if dataset else root
    return TheWellDataset(folder, split=split, **kwargs)


for _name, _fn, _files, _split, _shapes, _published in [
    ("geofno_airfoil", "load_airfoil", "NACA_Cylinder_{X,Y,Q}.npy", "train [:1000], test [1000:1200]",
     "x/pos (2, 221, 51) mesh coordinates, y (1, 221, 51) Mach number, weights (221, 51) cell areas",
     dl.geofno(*(f"naca/NACA_Cylinder_{k}.npy" for k in "XYQ"))),
    ("geofno_pipe", "load_pipe", "Pipe_{X,Y,Q}.npy", "train [:1000], test [1000:1200]",
     "x/pos (2, 129, 129) mesh coordinates, y (1, 129, 129) velocity, weights (129, 129) cell areas",
     dl.geofno(*(f"pipe/Pipe_{k}.npy" for k in "XYQ"))),
    ("geofno_elasticity", "load_elasticity", "Random_UnitCell_{sigma,XY}_10.npy", "train [:1000], test [-200:]",
     "x/pos (972, 2) points, y (972, 1) stress, weights 1/972",
     dl.geofno(*(f"elasticity/Meshes/Random_UnitCell_{k}_10.npy" for k in ("XY", "sigma", "rr", "theta")))),
    ("geofno_plasticity", "load_plasticity", "plas_N987_T20.mat", "train [:900], test [-80:]",
     "x (1, 101, 31) die profile, y (80, 101, 31) 20 steps x 4 fields",
     dl.geofno("plas_N987_T20.mat", note="Geo-FNO names the same file buri_plas_N987_time.mat")),
]:
    register(Record(name=_name, source="Li et al. 2022 (Geo-FNO) data, as used by Transolver", files=_files,
                    split=_split, shapes=_shapes, loader=_geofno(_fn), resolutions="stored",
                    target=lazy("geofno", _fn), downloads={_name: _published}))
register(Record(
    name="shapenet_car",
    source="Umetani & Bickel 2018, Transolver preprocessed layout",
    files="param0..param8/<sample>/{x,y,pos,surf}.npy",
    split="test: fold param0; train: the other 8 folds",
    shapes="x (N, 7), y (N, 4) velocity + pressure, pos (N, 3), surf (N,) bool",
    loader=_shapenet_car,
    resolutions="stored",
    target=lazy("shapenet_car", "load_shapenet_car"),
    downloads={"shapenet_car": (dl.RemoteFile(
        "mlcfd_data.zip", dl.SHAPENET_CAR,
        notes="archive: extract with `unzip mlcfd_data.zip -d <root>` → mlcfd_data/training_data/param0..8"),)},
))
register(Record(
    name="the_well",
    source="Ohana et al. 2024 (The Well), HDF5 per split folder",
    files="datasets/<dataset>/data/{train,valid,test}/*.hdf5 and stats.yaml (pass dataset=...)",
    split="separate train / valid / test folders",
    shapes="x (C * n_steps_input, *spatial), y (C * n_steps_output, *spatial)",
    loader=_the_well,
    resolutions="stored, or spatial_stride",
    target=lazy("the_well", "TheWellDataset"),
    downloads={f"the_well_{ds}_stats": dl.the_well_stats(ds)
               for ds in ("turbulent_radiative_layer_2D", "active_matter", "MHD_64")},
))


def _generated_burgers(root: Path, split: str, resolution: int | None, n_train: int | None = None,
                       n_test: int | None = None, seed: int = 0, progress: bool = True, **params):
    from .burgers import load_or_generate_burgers

    n_train, n_test, res = _sizes("burgers", n_train, n_test, resolution)
    a, u = load_or_generate_burgers(root / "generated", n_train + n_test, [res], seed=seed, progress=progress,
                                    **params)[res]
    from .burgers import BURGERS_DEFAULTS

    meta = {"source": "sciattn.pde_data.burgers", "name": "burgers", "resolution": res,
            "variables": {"x": ["initial"], "y": ["solution"]}, "seed": seed,
            "dt": float({**BURGERS_DEFAULTS, **params}["t_final"])}  # x at t = 0 -> y at t_final
    return _generated_split(a[:, None], u[:, None], split, n_train, n_test, meta)


def _generated_navier_stokes(root: Path, split: str, resolution: int | None, n_train: int | None = None,
                             n_test: int | None = None, t_in: int = 10, seed: int = 0, progress: bool = True,
                             **params):
    from .navier_stokes import load_or_generate_navier_stokes

    n_train, n_test, res = _sizes("navier_stokes", n_train, n_test, resolution)
    _, u = load_or_generate_navier_stokes(root / "generated", n_train + n_test, [res], seed=seed, progress=progress,
                                          **params)[res]
    if not 0 < t_in < u.shape[-1]:
        raise ValueError(f"t_in: expected 1..{u.shape[-1] - 1} of the {u.shape[-1]} recorded steps, got {t_in}")
    field = torch.from_numpy(u).permute(0, 3, 1, 2)  # (n, T, r, r): time steps as channels
    from .navier_stokes import NS_DEFAULTS

    p = {**NS_DEFAULTS, **params}
    meta = {"source": "sciattn.pde_data.navier_stokes", "name": "navier_stokes", "resolution": res,
            "variables": {"x": [f"w(t={k + 1})" for k in range(t_in)],
                          "y": [f"w(t={k + 1})" for k in range(t_in, u.shape[-1])]}, "seed": seed,
            "dt": float(p["t_final"]) / int(p["record_steps"]), "time_series": True, "t_in": t_in}
    return _generated_split(field[:, :t_in], field[:, t_in:], split, n_train, n_test, meta)


register(Record(
    name="burgers",
    source="built-in solver (sciattn.pde_data.burgers), FNO recipe: nu = 0.1, u0 ~ N(0, 625(-Δ+25)^-2)",
    files="generated/burgers_<hash>.h5 (solved on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (1, r) initial condition, y (1, r) solution at t = 1",
    loader=_generated_burgers,
    resolutions="any divisor of fine_resolution (default r = 1024)",
    kind="generator", defaults=_defaults(1000, 100, 1024),
    options=_solver_options("burgers", "BURGERS_DEFAULTS", "fine_resolution", "batch_size"),
    writer=lazy("generate", "write_burgers"), periodic=True,
))
register(Record(
    name="navier_stokes",
    source="built-in solver (sciattn.pde_data.navier_stokes), FNO ns_2d recipe: nu = 1e-3, forcing 0.1(sin+cos)",
    files="generated/navier_stokes_<hash>.h5 (solved on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (t_in, r, r) first t_in recorded steps, y (T - t_in, r, r) the rest",
    loader=_generated_navier_stokes,
    resolutions="any divisor of fine_resolution (default r = 64)",
    kind="generator", defaults=_defaults(1000, 200, 64),
    options=_solver_options("navier_stokes", "NS_DEFAULTS", "fine_resolution", "batch_size", "t_in"),
    writer=lazy("generate", "write_navier_stokes"), periodic=True,
))


def _generated_shallow_water(root: Path, split: str, resolution: int | None, n_train: int | None = None,
                             n_test: int | None = None, grid: str = "equiangular", seed: int = 0, **params):
    from .shallow_water import load_or_generate_shallow_water

    n_train, n_test, nlat = _sizes("shallow_water", n_train, n_test, resolution)
    data = load_or_generate_shallow_water(root / "generated", n_train + n_test, nlat=nlat, nlon=2 * nlat, grid=grid,
                                          seed=seed, **params)
    meta = {"source": "sciattn.pde_data.shallow_water", "name": "shallow_water", "resolution": nlat,
            "grid": grid, "variables": {"x": ["geopotential", "vorticity", "divergence"],
                                        "y": ["geopotential", "vorticity", "divergence"]}, "seed": seed}
    return _generated_split(data["x"], data["y"], split, n_train, n_test, meta)


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
    options=_solver_options("shallow_water", "SWE_DEFAULTS", "grid", "dt", "n_steps_between", "lmax", "spinup",
                            "n_traj", "traj_len", "batch_size"),
    writer=lazy("generate", "write_shallow_water"),
))


def _generated_darcy_irregular(root: Path, split: str, resolution: int | None, n_train: int = 1000,
                               n_test: int = 100, seed: int = 0, fine_resolution: int = 128, progress: bool = True,
                               **kwargs):
    from .irregular import generate_darcy_irregular

    ds = generate_darcy_irregular(n_train + n_test, resolution or 1024, fine_resolution=fine_resolution, seed=seed,
                                  cache_dir=root / "generated", progress=progress, **kwargs)
    sl = slice(0, n_train) if split == "train" else slice(n_train, n_train + n_test)
    return type(ds)(ds.samples[sl], {**ds.meta, "split": split})


def _generated_navier_stokes_irregular(root: Path, split: str, resolution: int | None, n_train: int = 1000,
                                       n_test: int = 200, t_in: int = 10, seed: int = 0, fine_resolution: int = 64,
                                       progress: bool = True, **kwargs):
    from .irregular import generate_navier_stokes_irregular
    from .navier_stokes import NS_DEFAULTS

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
    target=lazy("irregular", "generate_darcy_irregular"), points=True, writer=lazy("generate", "write_darcy_irregular"),
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
    target=lazy("irregular", "generate_navier_stokes_irregular"), points=True, writer=lazy("generate", "write_navier_stokes_irregular"),
    options=lambda: get_record("navier_stokes").options() - {"fine_resolution", "batch_size"},
    resolutions="points per sample N (default 1024); the same options as darcy_irregular",
))

register(Record(
    name="darcy_neuralop",
    source="built-in Darcy solver matched to neuraloperator's darcy_*_16.pt (sciattn.pde_data.darcy_neuralop)",
    files="solved in memory", split="train: first n_train samples; test: the next n_test",
    shapes="x (1, r, r) mask, y (1, r, r) pressure", resolutions="any (default 16)",
    kind="generator", defaults=_defaults(1000, 50, 16),
    options=_solver_options("darcy_neuralop", "NEURALOP_DARCY_FIT", "fine_resolution"),
    writer=lazy("generate", "write_darcy_neuralop"), variables={"x": ["mask"], "y": ["pressure"]},
))
register(Record(
    name="coupled_navier_stokes",
    source="built-in coupled Navier-Stokes systems on the torus (sciattn.pde_data.coupled_navier_stokes)",
    files="generated/coupled_navier_stokes_<hash>.h5 (solved on first use)",
    split="train: first n_train samples; test: the next n_test",
    shapes="x (V, r, r) u, v, w (+ theta) at t, y the same one delta_t later", resolutions="any (default 64)",
    kind="generator", defaults=_defaults(1000, 100, 64),
    options=_solver_options("coupled_navier_stokes", "COUPLED_DEFAULTS", "system", "fine_resolution", "batch_size"),
    writer=lazy("generate", "write_coupled_navier_stokes"),
))
register(Record(
    name="airfrans", source="Bonnet et al. 2022 (AirfRANS)", files="Dataset/manifest.json and simulations",
    kind="download",
    downloads={"airfrans": (dl.RemoteFile(
        "Dataset.zip", dl.AIRFRANS,
        notes="archive (about 9.3 GB): extract with `unzip Dataset.zip -d <root>` → Dataset/manifest.json"),)},
))
