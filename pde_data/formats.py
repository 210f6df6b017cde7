"""The file formats of the catalogue: how a file is recognised by its content and opened.

Each format is a :class:`~.catalogue.Record` with ``detect(probe)`` (the first format, in the order below,
that says yes takes the file) and ``open(path, probe, split, resolution, split_rule, **options)``, used by
:func:`sciattn.pde_data.load` for a path and by ``sciattn train`` for ``[data] train = PATH``. Splits follow
:mod:`.registry`'s docstring: a file with a division of its own (FNO ``.mat``, PDEBench, a neuraloperator
``{name}_{split}_{res}.pt``) follows it and refuses ``split_rule``; a single-split file takes every sample for
``split=None`` and is divided only by ``split_rule``.
"""

from __future__ import annotations

from pathlib import Path

from torch.utils.data import Dataset

from . import downloads as dl
from .catalogue import XARRAY_SUFFIXES, Probe, Record, extend, lazy, register
from .transforms.splits import SplitSubset, describe_split, split_indices

__all__: list[str] = []


def _own_division(path: Path, split_rule: str | None, convention: str) -> None:
    if split_rule is not None:
        raise ValueError(f"split_rule: {str(path)!r} has a train/test division of its own ({convention}); "
                         f"expected None, got {split_rule!r}")


def check_reader_kwargs(reader, path: Path, kwargs: dict) -> None:
    """Refuse, in one line, a keyword the reader detected for ``path`` does not take (instead of
    Python's ``reader() got an unexpected keyword argument``), listing those it accepts."""
    import inspect

    try:
        params = inspect.signature(reader).parameters.values()
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    accepted = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in kwargs:
        if key not in accepted:
            raise TypeError(f"{key}: not a keyword of {reader.__name__}, the reader detected for {str(path)!r}; "
                            f"it accepts {sorted(accepted)}")


def _open_xarray(path: Path, probe: Probe, split, resolution, split_rule, **kwargs) -> Dataset:
    from .readers.xarray_data import load_xarray

    check_reader_kwargs(load_xarray, path, kwargs)
    ds = load_xarray(path, **kwargs)
    idx = split_indices(len(ds), split, split_rule, what=repr(str(path)))
    ds.index = ds.index[list(idx)]
    ds.meta.update(split=split, split_rule=split_rule, split_convention=describe_split(split_rule))
    return ds


def _open_mat(fn: str):
    def open_mat(path: Path, probe: Probe, split, resolution, split_rule, **kwargs) -> Dataset:
        reader = lazy("readers.fno_mat", fn)()
        _own_division(path, split_rule, "the FNO benchmark's train/test convention")
        check_reader_kwargs(reader, path, kwargs)
        return reader(path, resolution=resolution, split=split or "train", **kwargs)

    return open_mat


def _open_well(path: Path, probe: Probe, split, resolution, split_rule, **kwargs) -> Dataset:
    """Divide The Well file(s) by whole trajectories (windows of one trajectory stay on one side)."""
    from .readers.the_well import TheWellDataset

    check_reader_kwargs(TheWellDataset, path, kwargs)
    ds = TheWellDataset(path, **kwargs)
    files = ds.meta["files"]
    units = [(k, t) for k, f in enumerate(files) for t in range(f["n_trajectories"])]
    idx = split_indices(len(units), split, split_rule, what=repr(str(path)), unit="trajectory")
    if split is None:
        return ds
    items = [ds._cum[k] + t * ds._windows[k] + w for k, t in (units[i] for i in idx) for w in range(ds._windows[k])]
    meta = {**ds.meta, "split": split, "split_rule": split_rule, "trajectories": [units[i] for i in idx],
            "split_convention": describe_split(split_rule, "trajectory")}
    return SplitSubset(ds, items, meta)


def _open_pdebench(path: Path, probe: Probe, split, resolution, split_rule, **kwargs) -> Dataset:
    from .readers.pdebench import PDEBenchWindowDataset

    _own_division(path, split_rule, "PDEBench's test_fraction")
    check_reader_kwargs(PDEBenchWindowDataset, path, kwargs)
    return PDEBenchWindowDataset(path, split=split or "train", **kwargs)


def _torch_dict_checked(path: Path, probe: Probe):
    import torch

    raw = probe.torch_object
    if isinstance(raw, dict):
        for key in ("x", "y"):
            if key in raw and not isinstance(raw[key], torch.Tensor):
                raise ValueError(f"{key}: expected a tensor in {str(path)!r}, got {type(raw[key]).__name__}")
    return raw


def _open_mini_car(path: Path, probe: Probe, split, resolution, split_rule, **kwargs) -> Dataset:
    from .readers.shapenet_car import load_mini_car

    check_reader_kwargs(load_mini_car, path, kwargs)
    return load_mini_car(path, split, split_rule=split_rule, **kwargs)


def _open_neuralop_pt(path: Path, probe: Probe, split, resolution, split_rule, **kwargs) -> Dataset:
    """neuraloperator ``.pt`` files: a dict with ``x``/``y`` (a ``y`` with one more axis than ``x`` carries time
    steps as channels, e.g. the mini Burgers files). A file named ``{name}_{split}_{res}.pt`` is that split:
    ``split`` must be it (or None); another ``.pt`` is a single-split file. ``split_rule`` divides either kind."""
    import torch

    from .grid_dataset import GridPairDataset
    from .readers.neuralop_pt import load_neuralop_pt, parse_neuralop_name

    raw = _torch_dict_checked(path, probe)
    if isinstance(raw, dict) and "x" in raw and "y" in raw and raw["y"].dim() == raw["x"].dim() + 1:
        kwargs.setdefault("channel_squeezed", (True, False))
    check_reader_kwargs(load_neuralop_pt, path, kwargs)
    ds = load_neuralop_pt(path, **kwargs)
    named = parse_neuralop_name(path)
    if split_rule is None and named is not None:
        if split not in (None, named[1]):
            raise ValueError(f"split: {str(path)!r} holds the {named[1]!r} split (neuraloperator names its files "
                             f"{{name}}_{{split}}_{{res}}.pt), got split={split!r}; expected {named[1]!r} or None, "
                             "the matching file, or a split_rule to divide this one")
    else:
        idx = split_indices(len(ds), split, split_rule, what=repr(str(path)))
        sel = torch.as_tensor(list(idx), dtype=torch.long)
        meta = {**ds.meta, "split": split, "split_rule": split_rule, "indices": list(idx),
                "split_convention": describe_split(split_rule)}
        ds = GridPairDataset(ds.x[sel], ds.y[sel], meta)
    return subsample_grid(ds, resolution, path)


def subsample_grid(ds, resolution: int | None, path: Path):
    """Stride a periodic-layout grid dataset to ``resolution`` (neuraloperator's ``[::rate]``)."""
    if resolution is None or ds.resolution[0] == resolution:
        return ds
    from .grid_dataset import GridPairDataset

    n = ds.resolution[0]
    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution <= 0 or n % resolution:
        allowed = [r for r in range(1, n + 1) if n % r == 0]
        raise ValueError(f"resolution: {str(path)!r} stores {n} points per axis; expected one of {allowed}, "
                         f"got {resolution}")
    sl = (slice(None), slice(None)) + (slice(None, None, n // resolution),) * len(ds.resolution)
    return GridPairDataset(ds.x[sl], ds.y[sl], {**ds.meta, "resolution": resolution})


def _is_mat(p: Probe) -> bool:
    return p.head.startswith(b"MATLAB")


def _mat_u(p: Probe, dims: int) -> bool:
    u = p.mat_keys.get("u")
    return _is_mat(p) and u is not None and len(u) == dims


def _is_xarray(p: Probe) -> bool:
    if p.path.is_dir() or p.path.suffix in XARRAY_SUFFIXES:
        return True
    if p.head.startswith(b"CDF"):
        return True
    return p.hdf5 is not None and "sciattn_inputs" in p.hdf5[0]  # NetCDF-4 written without a NetCDF suffix


_FNO = "Li et al. 2020 (FNO) .mat file"


def _pdebench_files() -> dict[str, tuple]:
    """PDEBench HDF5 files named in formats.md §4 (manual: per-file DaRUS ids are not listed there)."""
    out = {f"pdebench_advection_beta{b}": dl.pdebench(f"1D_Advection_Sols_beta{b}.hdf5")
           for b in ("0.1", "0.2", "0.4", "0.7", "1.0", "2.0", "4.0", "7.0")}
    for nu in ("0.001", "4.0"):  # formats.md names the range {0.001 ... 4.0}, only its ends
        out[f"pdebench_burgers_nu{nu}"] = dl.pdebench(f"1D_Burgers_Sols_Nu{nu}.hdf5")
    for b in ("0.01", "0.1", "1.0", "10.0", "100.0"):
        out[f"pdebench_darcy_beta{b}"] = dl.pdebench(f"2D_DarcyFlow_beta{b}_Train.hdf5")
    out["pdebench_rdb_2d"] = dl.pdebench("2D_rdb_NA_NA.h5")
    out["pdebench_diff_react_2d"] = dl.pdebench("2D_diff-react_NA_NA.h5")
    out["pdebench_diff_sorp_1d"] = dl.pdebench("1D_diff-sorp_NA_NA.h5")
    return out
for _record in [
    Record("xarray", "a NetCDF file or Zarr store (sciattn data generate writes them)", "*.nc, *.zarr",
           "single-split (split_rule divides it)", "the variables named by sciattn_inputs / sciattn_outputs",
           kind="format", detect=_is_xarray, open=_open_xarray, target=lazy("readers.xarray_data", "XarrayDataset")),
    Record("fno_darcy_mat", _FNO, "*.mat with coeff, sol", "one file per split (FNO: smooth1 / smooth2), the head",
           "x (1, r, r) coefficient, y (1, r, r) pressure", kind="format",
           detect=lambda p: _is_mat(p) and "coeff" in p.mat_keys and "sol" in p.mat_keys,
           open=_open_mat("load_fno_darcy"), target=lazy("readers.fno_mat", "load_fno_darcy"), subsamples=True),
    Record("fno_burgers_mat", _FNO, "*.mat with a, u (N, X)", "train: the first n_train; test: the last n_test",
           "x (1, r), y (1, r)", kind="format", detect=lambda p: "a" in p.mat_keys and _mat_u(p, 2),
           open=_open_mat("load_fno_burgers"), target=lazy("readers.fno_mat", "load_fno_burgers"), own_split=True,
           subsamples=True),
    Record("fno_navier_stokes_mat", _FNO, "*.mat with u (N, X, Y, T)", "train: the first n_train; test: the last n_test",
           "x (t_in, r, r), y (t_out, r, r)", kind="format", detect=lambda p: _mat_u(p, 4),
           open=_open_mat("load_fno_navier_stokes"), target=lazy("readers.fno_mat", "load_fno_navier_stokes"),
           own_split=True, subsamples=True),
    dict(name="the_well", detect=lambda p: p.hdf5 is not None and "n_spatial_dims" in p.hdf5[0]
         and "t0_fields" in p.hdf5[1], open=_open_well),
    Record("pdebench", "PDEBench HDF5 file (Takamoto et al. 2022)", "*.hdf5, *.h5", "test_fraction (first 10%)",
           "windows of t_in steps in, the next steps out", kind="format", detect=lambda p: p.hdf5 is not None,
           open=_open_pdebench, target=lazy("readers.pdebench", "PDEBenchWindowDataset"), own_split=True,
           downloads=_pdebench_files()),
    Record("mini_car", "neuraloperator's mini_car.pt (ShapeNet-Car surface)", "mini_car.pt",
           "single-split (split_rule divides it)", "x (N, 6), y (N, 1) pressure, pos (N, 3), weights (N,)",
           kind="format", detect=lambda p: p.is_torch and isinstance(p.torch_object, (list, tuple)),
           open=_open_mini_car, target=lazy("readers.shapenet_car", "load_mini_car"),
           downloads={"neuralop_mini_car": dl.neuralop("mini_car.pt")}),
    Record("neuralop_pt", "neuraloperator .pt file (a dict of x, y)", "{name}_{split}_{res}.pt",
           "the split its name names, else single-split", "x (C, *spatial), y (C, *spatial)", kind="format",
           detect=lambda p: p.is_torch, open=_open_neuralop_pt, target=lazy("readers.neuralop_pt", "load_neuralop_pt"),
           subsamples=True,
           downloads={"neuralop_burgers_16": dl.neuralop("burgers_train_16.pt", "burgers_test_16.pt")}),
]:
    extend(**_record) if isinstance(_record, dict) else register(_record)  # the_well is also a named dataset
