"""A trained operator as a drop-in component of a simulation pipeline.

:class:`Surrogate` wraps ``normaliser-encode -> operator -> normaliser-decode`` behind array
types a pipeline already uses, and keeps the bookkeeping (batch axis, dtype, coordinates,
channel names, units) out of the caller's code::

    sur = Surrogate.from_run("runs/darcy")
    u = sur.predict(a)                 # NumPy (C, H, W) or (B, C, H, W) -> same layout, same dtype
    u = sur.predict(a_da)              # xarray.DataArray -> DataArray on the same coordinates
    traj = sur.rollout(state, 10)      # 11 states: the initial one and 10 applications of step()
    p = sur.predict_points(f, pos)     # a point-set run: (N, C) features at (N, d) positions -> (N, C_out)

Accepted inputs (``x`` for :meth:`Surrogate.predict`, ``state`` for :meth:`Surrogate.step`):

* ``numpy.ndarray`` / ``torch.Tensor`` of shape ``(C, *spatial)`` (one sample) or
  ``(B, C, *spatial)`` (a batch). The result has the same batch convention and, for floating
  input, the same dtype; integer or bool input (e.g. a binary coefficient field) gives float32.
  Computation is in the operator's own dtype (float32 for trained runs).
* ``xarray.DataArray`` whose dims are the channel dim (name ``channel_dim``, default
  ``"channel"``; a DataArray without it is one channel), the spatial dims (``spatial_dim_names``
  in that order, the ``dims`` the run's domain recorded, or, without either, the remaining dims in the
  DataArray's order) and at most one more dim, the batch dim. Without ``spatial_dim_names`` (or recorded
  dims) a batch dim is taken only when it comes first under a batch name (:data:`BATCH_DIM_NAMES`:
  ``sample``, ``batch``, ...); other layouts, e.g. ``('x', 'y', 'sample')``, are refused with an error
  naming ``spatial_dim_names`` rather than guessed. Coordinate
  values are carried, not used: the operator sees the values on its own grid layout, as in
  training. The result keeps the dims order, every
  coordinate that does not live on the channel dim (non-uniform spatial coordinates included),
  ``name`` and ``attrs``, except ``units``: the input's units describe the input quantity, so
  ``units`` is set to ``output_units`` when given and dropped otherwise. The channel
  coordinate holds the output channel names. When the input has no channel dim and the
  operator has one output channel, the result has no channel dim either and is named after
  the output channel. If the input's channel coordinate holds strings and the run's input
  names are known, channels are selected by name (any order); labels that do not match
  are an error.
* ``xarray.Dataset`` holding one data variable per input channel (named by ``input_names``),
  all with the same dims ``(batch?, *spatial)``; the result is a Dataset with one variable per
  output channel, the same coordinates and the Dataset's ``attrs``.

Channel names, the time step and the domain come from the run's data metadata
(``state["data_meta"]``, written by the :class:`~sciattn.train.Trainer` whether it was started by
``sciattn train`` or from Python; see :mod:`.run_metadata`), so :meth:`Surrogate.from_run` needs no
arguments the run already knows:

* ``variables`` name the channels of DataArrays and the variables of Datasets (in and out);
* ``dt`` is the time step of :meth:`Surrogate.step` and the spacing of the ``time`` coordinate of
  :meth:`Surrogate.rollout`;
* the ``domain`` gives xarray outputs their spatial coordinates where the input has none (a grid:
  the nodes the reader recorded, ``a + (b - a) i / (n - 1)`` with both walls or ``a + (b - a) i / n``, at the
  input's size; a sphere:
  ``lat``/``lon`` in degrees of its recorded grid), and, when it records the spatial dim names,
  which dims of a DataArray are spatial.

Older checkpoints without ``data_meta`` fall back to a ``"meta"`` dict in the checkpoint's metrics
or run config, or in ``metrics.json``; the built-in Darcy generator's runs are known to map
``coefficient`` to ``pressure``. Otherwise channels are ``in_0, in_1, ...`` and ``out_0, out_1,
...`` and the time step is unknown. Every one of these can be given to :meth:`Surrogate.from_run`
or the constructor instead.

Errors name the argument (``x``, ``state``, ``dt``, ``n_steps``): wrong rank, wrong channel
count, non-finite values and unsupported types are reported before the operator runs.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import xarray as xr
from torch import nn

from sciattn._checks import check_finite, check_positive_int
from sciattn.pde_data.normalizers import IdentityNormalizer

from ..datasets.run_metadata import read_data_meta
from ..training.checkpoint import load_model

__all__ = ["Surrogate", "NonFiniteStateError", "run_metadata", "BATCH_DIM_NAMES"]

#: Names a DataArray's first dim may have to be taken as the batch dim without ``spatial_dim_names``.
BATCH_DIM_NAMES = ("batch", "sample", "samples", "member", "ensemble", "realization", "case", "trajectory")

#: The run's recorded data metadata (:func:`~.run_metadata.read_data_meta`); kept under its old name.
run_metadata = read_data_meta


class NonFiniteStateError(ValueError):
    """A rollout produced NaN or Inf. ``step`` is the first bad step (1-based) and
    ``trajectory`` holds the finite states before it, stacked as :meth:`Surrogate.rollout` would."""

    def __init__(self, message: str, step: int, trajectory: Any):
        super().__init__(message)
        self.step = step
        self.trajectory = trajectory


def _names(arg: str, names: Sequence[str] | None, n: int | None) -> list[str] | None:
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(s, str) for s in names):
        raise TypeError(f"{arg}: expected a sequence of str, got {names!r}")
    names = list(names)
    if n is not None and len(names) != n:
        raise ValueError(f"{arg}: expected {n} names (one per channel), got {len(names)}: {names}")
    if len(set(names)) != len(names):
        raise ValueError(f"{arg}: expected distinct names, got {names}")
    return names


def _check_chunk_points(model: nn.Module, chunk_points: object) -> int | None:
    """``chunk_points`` checked (a positive int or None) against the operator's capability."""
    from sciattn.operators.point_parts import chunked_points

    with chunked_points(model, chunk_points):  # raises, naming chunk_points, for a bad value or operator
        pass
    return chunk_points  # type: ignore[return-value]


def _check_dt(arg: str, dt: object) -> float:
    if isinstance(dt, bool) or not isinstance(dt, (int, float, np.integer, np.floating)):
        raise TypeError(f"{arg}: expected a positive real number, got {type(dt).__name__} {dt!r}")
    dt = float(dt)
    if not math.isfinite(dt) or dt <= 0:
        raise ValueError(f"{arg}: expected a positive finite real number, got {dt}")
    return dt


@dataclass
class _Frame:
    """An input taken apart: a ``(B, C, *spatial)`` tensor plus what is needed to rebuild its kind."""

    kind: str  # "numpy" | "torch" | "dataarray" | "dataset"
    tensor: torch.Tensor
    batched: bool
    dtype: Any = None
    device: Any = None
    template: Any = None
    batch_dim: str | None = None
    spatial: list[str] = field(default_factory=list)
    channel_labels: list[Any] | None = None  # the input's own channel labels (None: no coordinate)
    original: torch.Tensor | None = None  # the input's values before the cast to the compute dtype


class Surrogate:
    """A trained grid operator with NumPy / xarray in- and output.

    Args:
        model: the operator, ``forward((B, C_in, *spatial)) -> (B, C_out, *spatial)``; put in eval mode.
        x_normalizer, y_normalizer: objects with ``encode``/``decode`` (``None``: identity).
        input_names, output_names: channel names (default: the run's, else ``in_k`` / ``out_k``).
        output_units: units of the outputs: one str for all, or a mapping from output name to
            units (used for Dataset variables and single-channel DataArrays).
        dt: the time step the operator advances a state by, when it is a time stepper; checked
            by :meth:`step` and used for the ``time`` coordinate of :meth:`rollout`.
        channel_dim: name of the channel dim of DataArrays.
        spatial_dims: number of spatial axes (default: ``model.spatial_dims``).
        spatial_dim_names: the xarray dims that are the operator's spatial axes, in the operator's
            axis order (default: the last ``spatial_dims`` non-channel dims, in the input's order).
            Needed when the batch dim does not come first or the spatial dims are stored in
            another order than the operator was trained on. Without it, a ``domain`` that records
            its ``dims`` supplies them for inputs that have all of those dims.
        domain: the run's domain (``data_meta["domain"]``, see :mod:`.run_metadata`): spatial
            coordinates of xarray outputs whose input has none, and default spatial dim names.
        chunk_points: evaluate the operator in chunks of this many query points (grid nodes) when
            its activations for a whole input do not fit (``None``: all at once). The sums over
            all points are formed first, so the result is the same up to the order of additions;
            only operators with ``supports_chunked_points`` (Transolver, LinearNO, GNOT, ONO) take it.

    Predictions run under ``torch.no_grad()`` on the model's device; inputs are moved there and
    outputs back to the CPU (NumPy, xarray) or the input's device (torch).
    """

    def __init__(
        self,
        model: nn.Module,
        x_normalizer: Any = None,
        y_normalizer: Any = None,
        *,
        input_names: Sequence[str] | None = None,
        output_names: Sequence[str] | None = None,
        output_units: str | Mapping[str, str] | None = None,
        dt: float | None = None,
        channel_dim: str = "channel",
        spatial_dims: int | None = None,
        spatial_dim_names: Sequence[str] | None = None,
        domain: Mapping[str, Any] | None = None,
        chunk_points: int | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        self.chunk_points = _check_chunk_points(model, chunk_points)
        for arg, norm in (("x_normalizer", x_normalizer), ("y_normalizer", y_normalizer)):
            if norm is not None and not (callable(getattr(norm, "encode", None)) and callable(getattr(norm, "decode", None))):
                raise TypeError(f"{arg}: expected a normaliser with encode/decode, got {type(norm).__name__}")
        if not isinstance(channel_dim, str):
            raise TypeError(f"channel_dim: expected a str, got {type(channel_dim).__name__}")
        self.model = model.eval()
        self.x_normalizer = x_normalizer if x_normalizer is not None else IdentityNormalizer()
        self.y_normalizer = y_normalizer if y_normalizer is not None else IdentityNormalizer()
        if isinstance(self.x_normalizer, nn.Module):
            self.x_normalizer.eval()
        if isinstance(self.y_normalizer, nn.Module):
            self.y_normalizer.eval()
        d = spatial_dims if spatial_dims is not None else getattr(model, "spatial_dims", None)
        if d is None:
            raise ValueError("spatial_dims: the model has no spatial_dims attribute; pass spatial_dims=")
        self.spatial_dims = check_positive_int("spatial_dims", d)
        self.in_channels: int | None = getattr(model, "in_channels", None)
        self.out_channels: int | None = getattr(model, "out_channels", None)
        self._input_names = _names("input_names", input_names, self.in_channels)
        self._output_names = _names("output_names", output_names, self.out_channels)
        if output_units is not None and not isinstance(output_units, (str, Mapping)):
            raise TypeError(f"output_units: expected a str or a mapping name -> str, got {type(output_units).__name__}")
        self.output_units = output_units
        self.dt = None if dt is None else _check_dt("dt", dt)
        self.channel_dim = channel_dim
        if spatial_dim_names is not None:
            if isinstance(spatial_dim_names, str) or len(spatial_dim_names) != self.spatial_dims:
                raise ValueError(
                    f"spatial_dim_names: expected {self.spatial_dims} dim names, got {spatial_dim_names!r}"
                )
            spatial_dim_names = [str(n) for n in spatial_dim_names]
        self.spatial_dim_names = spatial_dim_names
        if domain is not None and not isinstance(domain, Mapping):
            raise TypeError(f"domain: expected a mapping (a run's data_meta['domain']) or None, got {type(domain).__name__}")
        self.domain: dict[str, Any] | None = dict(domain) if domain is not None else None
        self.run_meta: dict[str, Any] = {}  # what the run recorded (see run_metadata); set by from_run
        params = [p for p in model.parameters() if p.is_floating_point()]
        self.device = params[0].device if params else torch.device("cpu")
        self.compute_dtype = params[0].dtype if params else torch.float32

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_run(cls, run_dir: str | os.PathLike, device: str | torch.device = "cpu", **kwargs: Any) -> Surrogate:
        """Load a run directory (or checkpoint file) written by ``sciattn train``.

        ``kwargs`` are constructor arguments; they override what the run recorded (channel
        names, ``dt``, ``domain``; see :func:`~.run_metadata.read_data_meta`).
        """
        model, xn, yn, state = load_model(run_dir, device=device)
        meta = read_data_meta(state, run_dir)
        variables = meta.get("variables") if isinstance(meta.get("variables"), dict) else {}
        config = json.loads(state.get("operator_config") or "{}")
        n_in = getattr(model, "in_channels", config.get("in_channels"))
        n_out = getattr(model, "out_channels", config.get("out_channels"))
        frames = meta.get("frame_variables")
        if isinstance(frames, list) and frames and isinstance(n_in, int) and isinstance(n_out, int):
            from ..datasets.data import (
                stepper_names,  # a time stepper: outputs named after the frames' variables
            )

            named = stepper_names([str(f) for f in frames], n_in, n_out)
            variables = {**variables, **{k: v for k, v in (named or {}).items()
                                         if len(variables.get(k) or []) != (n_in if k == "x" else n_out)}}
        for key, arg, n in (("x", "input_names", n_in), ("y", "output_names", n_out)):
            names = variables.get(key)
            if arg not in kwargs and isinstance(names, list) and (n is None or len(names) == n):
                kwargs[arg] = [str(s) for s in names]
        if "dt" not in kwargs and isinstance(meta.get("dt"), (int, float)) and not isinstance(meta.get("dt"), bool):
            kwargs["dt"] = meta["dt"]
        if "domain" not in kwargs and isinstance(meta.get("domain"), dict):
            kwargs["domain"] = meta["domain"]
        if "spatial_dims" not in kwargs and getattr(model, "spatial_dims", None) is None:
            kwargs["spatial_dims"] = config.get("spatial_dims", 2)
        sur = cls(model, xn, yn, **kwargs)
        sur.run_meta = meta
        return sur

    # -- names -------------------------------------------------------------------------------
    @property
    def input_names(self) -> list[str] | None:
        """The run's input channel names, or ``in_k`` names when unknown (``None`` if even the count is)."""
        if self._input_names is not None:
            return list(self._input_names)
        return None if self.in_channels is None else [f"in_{i}" for i in range(self.in_channels)]

    @property
    def output_names(self) -> list[str] | None:
        if self._output_names is not None:
            return list(self._output_names)
        return None if self.out_channels is None else [f"out_{i}" for i in range(self.out_channels)]

    def _out_labels(self, c: int) -> list[str]:
        names = self.output_names
        return names if names is not None and len(names) == c else [f"out_{i}" for i in range(c)]

    def _units_for(self, name: str, n_channels: int) -> str | None:
        u = self.output_units
        if u is None or isinstance(u, str):
            return u
        if n_channels == 1 or len({u.get(k) for k in self._out_labels(n_channels)}) == 1:
            return u.get(name)
        return None

    # -- unpacking ---------------------------------------------------------------------------
    def _rank_error(self, name: str, shape: tuple[int, ...], what: str) -> ValueError:
        d = self.spatial_dims
        sp = ", ".join(f"S{i}" for i in range(d))
        return ValueError(
            f"{name}: expected {d + 1} dims (C, {sp}) or {d + 2} dims (B, C, {sp}){what}, got shape {shape}"
        )

    def _unpack(self, x: Any, name: str) -> _Frame:
        if isinstance(x, xr.Dataset):
            frame = self._unpack_dataset(x, name)
        elif isinstance(x, xr.DataArray):
            frame = self._unpack_dataarray(x, name)
        elif isinstance(x, (np.ndarray, torch.Tensor)):
            is_np = isinstance(x, np.ndarray)
            if is_np and x.dtype.kind not in "biuf":
                raise TypeError(f"{name}: expected a real or bool array, got dtype {x.dtype}")
            if not is_np and (x.is_complex() or x.dtype in (torch.uint16, torch.uint32, torch.uint64)):
                raise TypeError(f"{name}: expected a real or bool tensor, got dtype {x.dtype}")
            shape = tuple(x.shape)
            if len(shape) not in (self.spatial_dims + 1, self.spatial_dims + 2):
                hint = ""
                if self.run_meta.get("layout") == "points" or getattr(self.model, "input_kind", None) == "points":
                    hint = " (this operator was trained on point sets: predict_points(x, pos, weights))"
                raise self._rank_error(name, shape, hint)
            t = torch.from_numpy(np.ascontiguousarray(x)) if is_np else x.detach()
            batched = len(shape) == self.spatial_dims + 2
            frame = _Frame("numpy" if is_np else "torch", t if batched else t.unsqueeze(0), batched,
                           dtype=x.dtype, device=None if is_np else x.device)
        else:
            raise TypeError(
                f"{name}: expected a numpy.ndarray, torch.Tensor, xarray.DataArray or xarray.Dataset, "
                f"got {type(x).__name__}"
            )
        t = frame.tensor
        if t.shape[1] == 0 or any(s == 0 for s in t.shape[2:]) or t.shape[0] == 0:
            raise ValueError(f"{name}: expected non-empty batch, channel and spatial axes, got shape {tuple(t.shape)}")
        if self.in_channels is not None and t.shape[1] != self.in_channels:
            raise ValueError(
                f"{name}: expected {self.in_channels} input channel(s){self._names_hint()}, got {t.shape[1]} "
                f"({self._layout(frame)})"
            )
        frame.original = t if t.is_floating_point() else t.to(self.compute_dtype)
        frame.tensor = t.to(device=self.device, dtype=self.compute_dtype)
        check_finite(name, frame.tensor)
        return frame

    def _names_hint(self) -> str:
        return f" {self._input_names}" if self._input_names is not None else ""

    @staticmethod
    def _layout(frame: _Frame) -> str:
        if frame.kind in ("numpy", "torch"):
            return f"{'batched' if frame.batched else 'unbatched'} shape {tuple(frame.tensor.shape[int(not frame.batched):])}"
        return f"dims {tuple(frame.template.dims) if frame.kind == 'dataarray' else frame.spatial}"

    def _split_dims(self, name: str, dims: Sequence[str], shape: tuple[int, ...]) -> tuple[str | None, list[str]]:
        d = self.spatial_dims
        if len(dims) not in (d, d + 1):
            raise ValueError(
                f"{name}: expected {d} spatial dims and at most one batch dim besides {self.channel_dim!r}, "
                f"got dims {tuple(dims)} (shape {shape})"
            )
        wanted = self.spatial_dim_names
        recorded = (self.domain or {}).get("dims")
        if wanted is None and isinstance(recorded, list) and len(recorded) == d and all(n in dims for n in recorded):
            wanted = [str(n) for n in recorded]
        if wanted is None:
            if len(dims) == d:  # no batch dim: the DataArray's dims in their order, as a NumPy array's axes
                return None, list(dims)
            if dims[0] in BATCH_DIM_NAMES:
                return dims[0], list(dims[1:])
            raise ValueError(
                f"{name}: cannot tell the batch dim from the {d} spatial dims among dims {tuple(dims)} (shape "
                f"{shape}); pass spatial_dim_names= (Surrogate(..., spatial_dim_names=[...]) or "
                f"Surrogate.from_run(run, spatial_dim_names=[...])) with the {d} spatial dims in the operator's "
                f"axis order (the order of the training grid's axes, e.g. {list(dims[-d:])}), or put the batch dim "
                f"first under one of the names {list(BATCH_DIM_NAMES)}")
        missing = [n for n in wanted if n not in dims]
        if missing:
            raise ValueError(f"{name}: expected the spatial dims {wanted}, got dims {tuple(dims)} "
                             f"without {missing}")
        rest = [n for n in dims if n not in wanted]
        return (rest[0] if rest else None), list(wanted)

    def _unpack_dataarray(self, da: xr.DataArray, name: str) -> _Frame:
        ch = self.channel_dim
        if da.dtype.kind not in "biuf":
            raise TypeError(f"{name}: expected real or bool values, got dtype {da.dtype}")
        rest = [str(d) for d in da.dims if d != ch]
        batch_dim, spatial = self._split_dims(name, rest, tuple(da.shape))
        labels = None
        if ch in da.dims:
            if ch in da.coords:
                labels = list(da[ch].values.tolist())
                wanted = self._input_names
                if wanted is not None and all(isinstance(s, str) for s in labels):
                    if sorted(labels) != sorted(wanted):
                        raise ValueError(
                            f"{name}: channel labels {labels} along {ch!r} do not match the input channels {wanted}"
                        )
                    if labels != wanted:
                        da = da.sel({ch: wanted})
                        labels = list(wanted)
            order = ([batch_dim] if batch_dim else []) + [ch] + spatial
            arr = da.transpose(*order).values
            if batch_dim is None:
                arr = arr[None]
        else:
            order = ([batch_dim] if batch_dim else []) + spatial
            arr = da.transpose(*order).values
            arr = arr[:, None] if batch_dim else arr[None, None]
        t = torch.from_numpy(np.ascontiguousarray(arr))
        return _Frame("dataarray", t, batch_dim is not None, dtype=da.dtype, template=da, batch_dim=batch_dim,
                      spatial=spatial, channel_labels=labels)

    def _unpack_dataset(self, ds: xr.Dataset, name: str) -> _Frame:
        names = self.input_names
        if names is None:
            raise ValueError(f"{name}: a Dataset needs input variable names; pass input_names= to the Surrogate")
        missing = [v for v in names if v not in ds.data_vars]
        if missing:
            raise ValueError(f"{name}: Dataset lacks input variable(s) {missing}; has {sorted(map(str, ds.data_vars))}")
        dims = tuple(str(d) for d in ds[names[0]].dims)
        for v in names:
            if tuple(str(d) for d in ds[v].dims) != dims:
                raise ValueError(f"{name}: expected every input variable on dims {dims}, got {v!r} on {ds[v].dims}")
            if ds[v].dtype.kind not in "biuf":
                raise TypeError(f"{name}: expected real or bool values, got dtype {ds[v].dtype} in variable {v!r}")
        batch_dim, spatial = self._split_dims(name, dims, tuple(ds[names[0]].shape))
        arr = np.stack([ds[v].values for v in names], axis=1 if batch_dim else 0)
        t = torch.from_numpy(np.ascontiguousarray(arr if batch_dim else arr[None]))
        dtype = np.result_type(*[ds[v].dtype for v in names])
        return _Frame("dataset", t, batch_dim is not None, dtype=dtype, template=ds, batch_dim=batch_dim,
                      spatial=spatial, channel_labels=list(names))

    # -- packing -----------------------------------------------------------------------------
    @staticmethod
    def _np_out(frame: _Frame, y: torch.Tensor) -> np.ndarray:
        arr = y.detach().cpu().numpy()
        dtype = np.dtype(frame.dtype)
        return arr.astype(dtype, copy=False) if dtype.kind == "f" else arr

    def _pack(self, frame: _Frame, y: torch.Tensor, *, as_state: bool) -> Any:
        """Rebuild ``y`` (B, C, *spatial) as ``frame``'s kind. ``as_state``: the result is a new
        state of the input (same channel labels and attrs); otherwise a prediction (output names)."""
        if frame.kind == "torch":
            out = y.to(device=frame.device, dtype=frame.dtype if frame.dtype.is_floating_point else y.dtype)
            return out if frame.batched else out[0]
        if frame.kind == "numpy":
            arr = self._np_out(frame, y)
            return arr if frame.batched else arr[0]
        arr = self._np_out(frame, y)
        if not frame.batched:
            arr = arr[0]
        c = y.shape[1]
        labels = (frame.channel_labels if as_state else self._out_labels(c))
        lead = [frame.batch_dim] if frame.batch_dim else []
        if frame.kind == "dataset":
            return self._pack_dataset(frame, arr, labels, lead, as_state)
        return self._pack_dataarray(frame, arr, labels, lead, as_state)

    def _pack_dataarray(self, frame: _Frame, arr: np.ndarray, labels, lead, as_state: bool) -> xr.DataArray:
        da: xr.DataArray = frame.template
        ch = self.channel_dim
        c = arr.shape[len(lead)]
        dims = lead + [ch] + frame.spatial
        in_dims = [str(d) for d in da.dims]
        if ch in in_dims:
            out_dims = in_dims
        elif c == 1:
            arr = arr.squeeze(len(lead))
            dims = lead + frame.spatial
            out_dims = in_dims
        else:
            first = in_dims.index(frame.spatial[0])
            out_dims = in_dims[:first] + [ch] + in_dims[first:]
        coords = {k: v.variable for k, v in da.coords.items() if ch not in v.dims}
        coords.update(self._missing_coords(frame, arr.shape[-len(frame.spatial):], coords))
        if ch in dims and labels is not None:
            coords[ch] = list(labels)
        attrs = dict(da.attrs)
        name = da.name
        if not as_state:
            attrs.pop("units", None)
            out_labels = self._out_labels(c)
            units = self._units_for(out_labels[0], c)
            if units is not None:
                attrs["units"] = units
            name = out_labels[0] if c == 1 else da.name
        out = xr.DataArray(arr, dims=dims, coords=coords, attrs=attrs, name=name)
        return out.transpose(*out_dims)

    def _pack_dataset(self, frame: _Frame, arr: np.ndarray, labels, lead, as_state: bool) -> xr.Dataset:
        ds: xr.Dataset = frame.template
        axis = len(lead)
        dims = lead + frame.spatial
        variables = {}
        for i, label in enumerate(labels):
            if as_state:
                attrs = dict(ds[label].attrs) if label in ds.data_vars else {}
            else:
                units = self._units_for(label, len(labels))
                attrs = {} if units is None else {"units": units}
            variables[label] = xr.Variable(dims, np.take(arr, i, axis=axis), attrs=attrs)
        coords = {k: v.variable for k, v in ds.coords.items() if set(v.dims) <= set(dims)}
        coords.update(self._missing_coords(frame, arr.shape[-len(frame.spatial):], coords))
        return xr.Dataset(variables, coords=coords, attrs=dict(ds.attrs))

    def domain_coords(self, shape: Sequence[int]) -> list[np.ndarray] | None:
        """Coordinates of the recorded domain at spatial ``shape``, one array per spatial axis (operator
        order), or ``None`` when the run recorded no grid or sphere domain.

        A grid: the nodes the reader recorded on each axis's bounds ``[a, b]``: ``a + (b - a) i / (n - 1)`` where
        the file's grid holds both walls (``domain["endpoint"]``, e.g. FNO's Darcy ``.mat`` files), else the
        uniform nodes ``a + (b - a) i / n`` (the layout of :class:`sciattn.domain.Grid`; neuraloperator's
        ``GridEmbedding``, ``linspace(a, b, n + 1)[:-1]``, for its ``.pt`` files; periodic grids). A sphere: latitudes ``90 - colatitude`` in degrees of
        the recorded grid (north first) and longitudes ``360 j / nlon`` degrees.
        """
        dom = self.domain or {}
        shape = [int(n) for n in shape]
        if dom.get("kind") == "grid":
            bounds = dom.get("bounds")
            if not isinstance(bounds, list) or len(bounds) != len(shape):
                return None
            if dom.get("endpoint") is True:  # the reader recorded nodes on both walls
                return [float(a) + (float(b) - float(a)) * np.arange(n) / max(n - 1, 1) for (a, b), n in zip(bounds, shape)]
            return [float(a) + (float(b) - float(a)) * np.arange(n) / n for (a, b), n in zip(bounds, shape)]
        if dom.get("kind") == "sphere" and len(shape) == 2 and dom.get("grid"):
            from sciattn.quadrature import sphere_quadrature

            colat, _ = sphere_quadrature(shape[0], dom["grid"])
            return [90.0 - np.degrees(colat.numpy()), 360.0 * np.arange(shape[1]) / shape[1]]
        return None

    def _missing_coords(self, frame: _Frame, shape: Sequence[int], present: Mapping[str, Any]) -> dict[str, Any]:
        """Domain coordinates for the spatial dims of ``frame`` that have none (see :meth:`domain_coords`)."""
        if all(d in present for d in frame.spatial):
            return {}
        values = self.domain_coords(shape)
        if values is None:
            return {}
        return {d: (d, v) for d, v in zip(frame.spatial, values) if d not in present}

    # -- evaluation --------------------------------------------------------------------------
    def _forward(self, t: torch.Tensor, chunk_points: int | None = None) -> torch.Tensor:
        from sciattn.operators.point_parts import chunked_points

        chunk = self.chunk_points if chunk_points is None else chunk_points
        with torch.no_grad(), chunked_points(self.model, chunk):
            return self.y_normalizer.decode(self.model(self.x_normalizer.encode(t)))

    def predict(self, x: Any, *, chunk_points: int | None = None) -> Any:
        """Apply the operator to ``x`` (see the module docstring for the accepted kinds); the result
        is of the same kind and batch convention. ``chunk_points``: this call in chunks of that many
        query points (default: the constructor's ``chunk_points``)."""
        chunk_points = _check_chunk_points(self.model, chunk_points)
        frame = self._unpack(x, "x")
        return self._pack(frame, self._forward(frame.tensor, chunk_points), as_state=False)

    __call__ = predict

    def predict_points(self, x: Any, pos: Any, weights: Any = None, *, chunk_points: int | None = None) -> Any:
        """Apply a point-set operator: features ``x`` ``(N, C)`` or ``(B, N, C)`` at positions ``pos`` ``(N, d)`` or
        ``(B, N, d)`` with quadrature ``weights`` ``(N,)`` / ``(B, N)`` (default ``1/N``); returns ``(N, C_out)`` or
        ``(B, N, C_out)`` of the input's kind (:mod:`.point_prediction`)."""
        from .point_prediction import predict_points

        return predict_points(self, x, pos, weights, chunk_points=_check_chunk_points(self.model, chunk_points))

    def _stepper_check(self, c_in: int, c_out: int) -> None:
        if c_out != c_in and (c_out == 0 or c_in % c_out != 0):
            raise ValueError(
                f"state: the operator maps {c_in} channels to {c_out}; a time stepper needs as many output "
                f"channels as input channels, or an input of k stacked states (a multiple of the output)"
            )

    def _advance(self, t: torch.Tensor) -> torch.Tensor:
        y = self._forward(t)
        self._stepper_check(t.shape[1], y.shape[1])
        if y.shape[1] == t.shape[1]:
            return y
        return torch.cat([t[:, y.shape[1]:], y], dim=1)  # a window of past states: drop the oldest

    def _check_step_dt(self, dt: object) -> None:
        if dt is None:
            return
        dt = _check_dt("dt", dt)
        if self.dt is not None and not math.isclose(dt, self.dt, rel_tol=1e-9, abs_tol=0.0):
            raise ValueError(
                f"dt: expected the operator's time step {self.dt!r}, got {dt!r}; the operator advances a state "
                f"by a fixed step and cannot take another"
            )

    def step(self, state: Any, dt: float | None = None) -> Any:
        """One application of the operator as a time stepper: ``state`` in, next state out (same kind).

        The operator must map ``C`` channels to ``C`` (the state), or ``k·C`` to ``C``: then the
        state is a window of ``k`` past states and the next window drops the oldest and appends
        the prediction. The result keeps the state's channel labels, attrs and units.

        ``dt``: the step the caller expects. When the time step is known (``dt`` recorded by the run
        or given to the constructor) a different ``dt`` raises ``ValueError`` naming both; when it is
        unknown, ``dt`` is only checked to be a positive number and otherwise ignored — the operator
        always advances by the step it was trained on.
        """
        self._check_step_dt(dt)
        frame = self._unpack(state, "state")
        return self._pack(frame, self._advance(frame.tensor), as_state=True)

    def rollout(self, state: Any, n_steps: int, dt: float | None = None) -> Any:
        """Apply :meth:`step` ``n_steps`` times; returns the ``n_steps + 1`` states, initial state first.

        NumPy / torch: stacked along a new leading axis (index ``k`` is ``k`` applications).
        xarray: concatenated along a new leading dim ``time`` (coordinate ``t0 + k·dt``, with ``t0``
        a scalar ``time`` coordinate of ``state`` or 0) when the time step is known, else ``step``
        (coordinate ``0..n_steps``); a ``step`` coordinate is there in both cases.

        Raises :class:`NonFiniteStateError` (a ``ValueError``) at the first step whose state holds
        NaN or Inf, naming the step; its ``trajectory`` holds the finite states before it.
        """
        check_positive_int("n_steps", n_steps)
        self._check_step_dt(dt)
        frame = self._unpack(state, "state")
        states = [frame.original]  # the initial state exactly as given
        t = frame.tensor
        for k in range(1, n_steps + 1):
            t = self._advance(t)
            bad = ~torch.isfinite(t)
            if bool(bad.any()):
                n_nan = int(torch.isnan(t).sum())
                traj = self._stack(frame, states)
                raise NonFiniteStateError(
                    f"rollout: the state became non-finite at step {k} of {n_steps} ({n_nan} NaN and "
                    f"{int(bad.sum()) - n_nan} Inf entries); states 0..{k - 1} were finite",
                    step=k, trajectory=traj,
                )
            states.append(t)
        return self._stack(frame, states)

    def _stack(self, frame: _Frame, states: list[torch.Tensor]) -> Any:
        packed = [self._pack(frame, s, as_state=True) for s in states]
        if frame.kind == "numpy":
            return np.stack(packed)
        if frame.kind == "torch":
            return torch.stack(packed)
        steps = np.arange(len(packed))
        template = frame.template
        if self.dt is not None:
            t0 = 0.0
            if "time" in template.coords and template["time"].ndim == 0:
                t0 = float(template["time"].values)
            packed = [p.drop_vars("time", errors="ignore") for p in packed]
            out = xr.concat(packed, dim="time", coords="minimal", compat="override", join="override")
            return out.assign_coords(time=t0 + steps * self.dt, step=("time", steps))
        out = xr.concat(packed, dim="step", coords="minimal", compat="override", join="override")
        return out.assign_coords(step=steps)

    def __repr__(self) -> str:
        return (f"Surrogate({type(self.model).__name__}, in={self.input_names}, out={self.output_names}, "
                f"spatial_dims={self.spatial_dims}, dt={self.dt})")
