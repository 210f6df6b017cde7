"""The catalogue's named real-file datasets, one :class:`~.catalogue.Record` each: read from ``root`` (never
downloaded here; their ``downloads`` say where they are published, :mod:`.downloads`). The built-in generators'
records are in :mod:`.generators`, the file formats' in :mod:`.formats`.

Each loader takes ``(root, split, resolution, **kwargs)``; see :func:`sciattn.pde_data.load`. ``target`` is the
function a loader forwards its keywords to (the options it accepts).
"""

from __future__ import annotations

from pathlib import Path

from . import downloads as dl
from .catalogue import Record, lazy, register

__all__: list[str] = []


def _neuralop_files(name: str, default_resolution: int):
    """``{name}_{split}_{res}.pt`` files in neuraloperator's layout."""

    def loader(root: Path, split: str, resolution: int | None, n_samples: int | None = None):
        from .readers.neuralop_pt import load_neuralop_split

        return load_neuralop_split(root, name, split, resolution or default_resolution, n_samples=n_samples)

    return loader


def _fno_darcy(root: Path, split: str, resolution: int | None, n_samples: int | None = None):
    from .readers.fno_mat import load_fno_darcy

    name = "piececonst_r421_N1024_smooth1.mat" if split == "train" else "piececonst_r421_N1024_smooth2.mat"
    n = n_samples or (1000 if split == "train" else 100)
    return load_fno_darcy(root / name, resolution=resolution, n_samples=n, split=split)


def _fno_burgers(root: Path, split: str, resolution: int | None, **kwargs):
    from .readers.fno_mat import load_fno_burgers

    return load_fno_burgers(root / "burgers_data_R10.mat", split=split, resolution=resolution, **kwargs)


def _fno_navier_stokes(file: str, t_out: int):
    def loader(root: Path, split: str, resolution: int | None, **kwargs):
        from .readers.fno_mat import load_fno_navier_stokes

        kwargs.setdefault("t_out", t_out)
        return load_fno_navier_stokes(root / file, split=split, resolution=resolution, **kwargs)

    return loader


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
    target=lazy("readers.fno_mat", "load_fno_burgers"),
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
        target=lazy("readers.fno_mat", "load_fno_navier_stokes"),
        downloads={f"fno_navier_stokes_v{_nu}": dl.fno(_file)},
    ))


def _geofno(fn_name: str):
    def loader(root: Path, split: str, resolution: int | None, **kwargs):
        from .readers import geofno

        if resolution is not None:
            raise ValueError(f"resolution: the Geo-FNO sets are used at their stored resolution; got {resolution}")
        return getattr(geofno, fn_name)(root, split, **kwargs)

    return loader


def _shapenet_car(root: Path, split: str, resolution: int | None, **kwargs):
    from .readers.shapenet_car import load_shapenet_car

    return load_shapenet_car(root, split, **kwargs)


def _the_well(root: Path, split: str, resolution: int | None, dataset: str | None = None, **kwargs):
    from .readers.the_well import TheWellDataset

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
                    target=lazy("readers.geofno", _fn), downloads={_name: _published}))
register(Record(
    name="shapenet_car",
    source="Umetani & Bickel 2018, Transolver preprocessed layout",
    files="param0..param8/<sample>/{x,y,pos,surf}.npy",
    split="test: fold param0; train: the other 8 folds",
    shapes="x (N, 7), y (N, 4) velocity + pressure, pos (N, 3), surf (N,) bool",
    loader=_shapenet_car,
    resolutions="stored",
    target=lazy("readers.shapenet_car", "load_shapenet_car"),
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
    target=lazy("readers.the_well", "TheWellDataset"),
    downloads={f"the_well_{ds}_stats": dl.the_well_stats(ds)
               for ds in ("turbulent_radiative_layer_2D", "active_matter", "MHD_64")},
))


register(Record(
    name="airfrans", source="Bonnet et al. 2022 (AirfRANS)", files="Dataset/manifest.json and simulations",
    kind="download",
    downloads={"airfrans": (dl.RemoteFile(
        "Dataset.zip", dl.AIRFRANS,
        notes="archive (about 9.3 GB): extract with `unzip Dataset.zip -d <root>` → Dataset/manifest.json"),)},
))
