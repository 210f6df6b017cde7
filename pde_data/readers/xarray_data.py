"""Any ``xarray.Dataset`` (NetCDF, Zarr, or in memory) as a dataset of sample dicts.

A user's data is usually an ``xarray.Dataset`` whose variables share a sample dimension and
some spatial dimensions, e.g.::

    <xarray.Dataset>
    Dimensions:      (sample: 1000, x: 64, y: 64, time: 10)
    Data variables:
        permeability (sample, x, y)
        pressure     (sample, x, y)
        vorticity    (sample, time, x, y)

:class:`XarrayDataset` picks the ``inputs`` and ``outputs`` variables and stacks them as channels:
a variable with only ``(sample, *spatial)`` dims gives one channel, one with extra dims (``time``,
``component``, ...) gives one channel per entry, in the variable's own order. Items are
``{"x": (C_in, *spatial), "y": (C_out, *spatial)}`` float32. Data is read per item, so a NetCDF
or Zarr store is never loaded whole.

Files written by ``sciattn data generate`` carry the attributes ``sciattn_inputs`` and
``sciattn_outputs`` (comma-separated variable names), so :func:`load_xarray` needs no arguments
for them. Optional attributes of such files:

- ``sciattn_channels_x`` / ``sciattn_channels_y``: the channel names (``meta["variables"]``);
- ``domain = "sphere"`` with ``grid``, ``nlat``, ``nlon``: ``meta["domain"]`` is
  ``{"kind": "sphere", "grid", "nlat", "nlon"}`` (the shallow-water generator's metadata);
- ``sciattn_layout = "points"``: point samples ``{"x": (N, C_in), "y": (N, C_out), "pos": (N, d),
  "weights": (N,)}`` from the ``pos`` ``(sample, point, coord)`` and ``weights`` ``(sample, point)``
  variables (the spatial dim is ``point``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..grid_dataset import GridPairDataset

__all__ = ["XarrayDataset", "load_xarray", "write_xarray"]


def _open(source):
    import xarray as xr

    if isinstance(source, xr.Dataset):
        return source, None
    p = Path(source)
    if not p.exists():
        raise FileNotFoundError(f"path: expected an existing NetCDF file or Zarr store, got {str(p)!r}")
    is_zarr = p.suffix == ".zarr" or (p.is_dir() and ((p / ".zgroup").exists() or (p / "zarr.json").exists()))
    if p.is_dir() and not is_zarr:
        raise ValueError(f"path: expected a NetCDF file or a Zarr store, got the directory {str(p)!r} (no .zgroup "
                         "or zarr.json in it)")
    try:
        if is_zarr:
            return xr.open_zarr(p), p
        return xr.open_dataset(p), p
    except Exception as err:  # xarray raises many types for unreadable files; its advice spans several lines
        cause = " ".join(str(err).split()) or type(err).__name__
        if len(cause) > 200 and ". " in cause:
            cause = cause.split(". ", 1)[0]
        raise ValueError(f"path: could not open {str(p)!r} with xarray: {cause}") from None


class XarrayDataset(Dataset):
    """Sample dicts from the variables of an ``xarray.Dataset``.

    Args:
        source: an ``xarray.Dataset`` or the path of a NetCDF file / Zarr store.
        inputs, outputs: variable names stacked into ``x`` and ``y`` (default: the dataset's
            ``sciattn_inputs`` / ``sciattn_outputs`` attributes).
        sample_dim: the dimension that indexes samples.
        spatial_dims: the spatial dimensions, in order (default: the dims of the first input
            variable that are neither ``sample_dim`` nor extra channel dims, i.e. the dims shared
            by every selected variable).
        samples: an optional slice or index list of the samples to keep (e.g. a split).

    ``meta`` holds the source, the variables and their channel names, and the coordinates of the
    spatial dims.
    """

    def __init__(
        self,
        source,
        *,
        inputs: Sequence[str] | None = None,
        outputs: Sequence[str] | None = None,
        sample_dim: str = "sample",
        spatial_dims: Sequence[str] | None = None,
        samples: slice | Sequence[int] | None = None,
    ) -> None:
        ds, path = _open(source)
        where = f" in {str(path)!r}" if path else ""
        inputs = list(inputs) if inputs is not None else _attr_list(ds, "sciattn_inputs", "inputs", where)
        outputs = list(outputs) if outputs is not None else _attr_list(ds, "sciattn_outputs", "outputs", where)
        missing = [v for v in inputs + outputs if v not in ds.data_vars]
        if missing:
            raise ValueError(f"inputs/outputs: variables {missing} not found{where}; present: {sorted(ds.data_vars)}")
        for v in inputs + outputs:
            if sample_dim not in ds[v].dims:
                raise ValueError(f"sample_dim: variable {v!r}{where} has dims {ds[v].dims}, without {sample_dim!r}")
        if spatial_dims is None:
            shared = set.intersection(*(set(ds[v].dims) for v in inputs + outputs)) - {sample_dim}
            spatial_dims = [d for d in ds[inputs[0]].dims if d in shared]
        spatial_dims = list(spatial_dims)
        if not spatial_dims:
            raise ValueError(f"spatial_dims: found no spatial dimension shared by {inputs + outputs}{where}")
        n = ds.sizes[sample_dim]
        index = np.arange(n)[samples] if samples is not None else np.arange(n)
        if index.size == 0:
            raise ValueError(f"samples: expected at least one sample of {n}{where}, got an empty selection")
        self.ds, self.sample_dim, self.spatial_dims = ds, sample_dim, spatial_dims
        self.inputs, self.outputs, self.index = inputs, outputs, index
        self.points = ds.attrs.get("sciattn_layout") == "points"
        if self.points:
            for v in ("pos", "weights"):
                if v not in ds.data_vars:
                    raise ValueError(f"pos/weights: a point file (sciattn_layout = 'points'){where} needs the "
                                     f"variables 'pos' and 'weights'; present: {sorted(ds.data_vars)}")
        variables = {"x": _channel_names(ds, inputs, sample_dim, spatial_dims),
                     "y": _channel_names(ds, outputs, sample_dim, spatial_dims)}
        for k in ("x", "y"):
            named = [s.strip() for s in str(ds.attrs.get(f"sciattn_channels_{k}", "")).split(",") if s.strip()]
            if len(named) == len(variables[k]):
                variables[k] = named
        self.meta = {
            "source": str(path) if path else "xarray.Dataset",
            "format": "xarray",
            "variables": variables,
            "coords": {d: ds[d].values.tolist() for d in spatial_dims if d in ds.coords},
            "attrs": dict(ds.attrs),
        }
        if ds.attrs.get("domain") == "sphere":
            self.meta["domain"] = {"kind": "sphere", "grid": str(ds.attrs.get("grid", "equiangular")),
                                   "nlat": int(ds.attrs["nlat"]), "nlon": int(ds.attrs["nlon"])}
        if self.points:
            self.meta["layout"] = "points"

    def __len__(self) -> int:
        return int(self.index.size)

    def _stack(self, names: list[str], i: int) -> torch.Tensor:
        parts = []
        for v in names:
            arr = self.ds[v].isel({self.sample_dim: int(self.index[i])})
            extra = [d for d in arr.dims if d not in self.spatial_dims]
            arr = arr.transpose(*extra, *self.spatial_dims).values.astype(np.float32)
            parts.append(arr.reshape(-1, *arr.shape[len(extra):]))
        return torch.from_numpy(np.concatenate(parts, axis=0))

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"index: expected an int in [0, {len(self)}), got {i}")
        i %= len(self)
        if self.points:  # channels last, with the sample's points and quadrature weights
            j = {self.sample_dim: int(self.index[i])}
            return {"x": self._stack(self.inputs, i).T.contiguous(), "y": self._stack(self.outputs, i).T.contiguous(),
                    "pos": torch.from_numpy(self.ds["pos"].isel(j).values.astype(np.float32)),
                    "weights": torch.from_numpy(self.ds["weights"].isel(j).values.astype(np.float32))}
        return {"x": self._stack(self.inputs, i), "y": self._stack(self.outputs, i)}

    def to_grid_dataset(self) -> GridPairDataset:
        """Load the selected samples into memory as a :class:`GridPairDataset` (grid files only)."""
        if self.points:
            raise ValueError("to_grid_dataset: this file holds point samples (sciattn_layout = 'points'), not a grid")
        items = [self[i] for i in range(len(self))]
        return GridPairDataset(torch.stack([s["x"] for s in items]), torch.stack([s["y"] for s in items]),
                               dict(self.meta))


def _attr_list(ds, attr: str, arg: str, where: str) -> list[str]:
    value = ds.attrs.get(attr)
    if not value:
        raise ValueError(f"{arg}: expected variable names (or a {attr!r} attribute{where}), got none")
    return [s.strip() for s in str(value).split(",") if s.strip()]


def _channel_names(ds, names, sample_dim, spatial_dims) -> list[str]:
    out = []
    for v in names:
        extra = [d for d in ds[v].dims if d not in (sample_dim, *spatial_dims)]
        if not extra:
            out.append(v)
            continue
        sizes = [ds.sizes[d] for d in extra]
        for flat in np.ndindex(*sizes):
            out.append(v + "[" + ",".join(f"{d}={k}" for d, k in zip(extra, flat)) + "]")
    return out


def load_xarray(source, **kwargs) -> XarrayDataset:
    """Shorthand for :class:`XarrayDataset`."""
    return XarrayDataset(source, **kwargs)


def write_xarray(
    path: str | os.PathLike,
    variables: dict[str, tuple[Sequence[str], np.ndarray]],
    *,
    inputs: Sequence[str],
    outputs: Sequence[str],
    coords: dict[str, np.ndarray] | None = None,
    attrs: dict[str, object] | None = None,
) -> Path:
    """Write a NetCDF file that :func:`load_xarray` reads back without arguments (atomically).

    ``variables`` maps a name to ``(dims, array)``; ``attrs`` must hold plain numbers or strings.
    """
    import xarray as xr

    from sciattn._io import atomic_path

    ds = xr.Dataset({k: (tuple(dims), np.asarray(a)) for k, (dims, a) in variables.items()}, coords=coords or {})
    ds.attrs.update({k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in (attrs or {}).items()})
    ds.attrs["sciattn_inputs"] = ",".join(inputs)
    ds.attrs["sciattn_outputs"] = ",".join(outputs)
    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf")
    return Path(path)
