"""Reader for the FNO benchmark ``.mat`` files (Li et al., 2020): Burgers, Darcy, Navier-Stokes.

File formats
    The version is read from the file header, never from the extension (:func:`mat_version`):

    * ``"v5"``: the header starts with the text ``MATLAB 5.0 MAT-file`` (MATLAB v5/v7 files,
      ``burgers_data_R10.mat``, ``piececonst_r421_N1024_smooth{1,2}.mat``,
      ``NavierStokes_V1e-5_N1200_T20.mat``). Read with ``scipy.io.loadmat`` loading only the
      requested variable (scipy cannot read part of a variable).
    * ``"v7.3"``: a 512-byte user block whose text starts with ``MATLAB 7.3 MAT-file``, followed by
      an HDF5 file (HDF5 signature at byte 512), e.g. ``ns_V1e-3_N5000_T50.mat``. Every variable is
      an HDF5 dataset stored with ALL axes reversed (MATLAB is column-major): a MATLAB array of
      size ``(N, X, Y, T)`` is the dataset ``(T, Y, X, N)``. Read with ``h5py``, lazily: only the
      requested sample range, strides and windows are read (an HDF5 hyperslab), then all axes are
      reversed back.

    Both give the same array in the MATLAB/C-order layout ``(N, ...)``, cast to float32
    (:func:`read_mat_array`). MATLAB vectors are 2-D (``t`` of 50 steps is ``(1, 50)``).

Datasets (all :class:`~sciattn.pde_data.grid_dataset.GridPairDataset`, channels first)
    =============================== ================== =============================== ===========================
    builder                         keys in the file   dataset                         split convention
    =============================== ================== =============================== ===========================
    :func:`load_fno_darcy`          ``coeff``, ``sol`` x (n, 1, r, r), y (n, 1, r, r)  head of smooth1 / smooth2
                                    (N, s, s)
    :func:`load_fno_burgers`        ``a``, ``u``       x (n, 1, r), y (n, 1, r)        train head, test TAIL
                                    (N, 8192)
    :func:`load_fno_navier_stokes`  ``u``              x (n, t_in, r, r),              train head, test TAIL
                                    (N, X, Y, T)       y (n, t_out, r, r)
    =============================== ================== =============================== ===========================

    Subsampling follows FNO: periodic grids (Burgers, Navier-Stokes; endpoint excluded) use
    ``arr[..., ::n // r]`` with ``r`` dividing ``n``; the Darcy node grid (both boundaries
    included, ``s = 421``) uses stride ``(s - 1) / (r - 1)``, giving ``(s - 1) / stride + 1`` nodes.
    ``meta`` records the source path, name, split, resolution, stride, variables, the sample
    indices taken and the split convention.

Layout. ``mat_layout`` (every loader): a v7.3 file's axis order, ``"matlab"`` (reversed) or ``"c"``; by default
read from the file (``MATLAB_class`` on every variable MATLAB writes), and a stored shape that reads the same
either way (``N`` equal to a spatial size or to ``T``) is refused with an error naming the axes and this option.

Errors name the argument or the path: ``FileNotFoundError`` for a missing file, ``ValueError`` for
a file that is not a MAT-file, is truncated or corrupt, lacks a key (the keys present are listed)
or holds an array of the wrong rank, and for an argument outside what the file provides.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import scipy.io
import torch

from sciattn._checks import (
    check_choice,
    check_data_file,
    check_file,
    check_finite,
    check_positive_int,
    unreadable_file,
)

from ..grid_dataset import GridPairDataset

__all__ = [
    "BURGERS_SPLIT_CONVENTION",
    "DARCY_SPLIT_CONVENTION",
    "NAVIER_STOKES_SPLIT_CONVENTION",
    "SPLITS",
    "load_fno_burgers",
    "load_fno_darcy",
    "load_fno_navier_stokes",
    "MAT_LAYOUTS",
    "mat_variables",
    "mat_version",
    "read_mat_array",
]

SPLITS = ("train", "test")

DARCY_SPLIT_CONVENTION = (
    "FNO Darcy: train = first n samples of piececonst_r421_N1024_smooth1.mat (FNO: 1000), "
    "test = first n samples of piececonst_r421_N1024_smooth2.mat (FNO: 100; Transolver/NSL: 200)"
)
BURGERS_SPLIT_CONVENTION = (
    "FNO Burgers (fourier_1d.py): train = first n_train samples (1000), "
    "test = last n_test samples (100, [-ntest:]) of burgers_data_R10.mat"
)
NAVIER_STOKES_SPLIT_CONVENTION = (
    "FNO Navier-Stokes (fourier_2d_time.py / fourier_3d.py): train = first n_train samples (1000), "
    "test = last n_test samples (200); input u[..., :t_in], target u[..., t_in:t_in + t_out]"
)

_V5_TEXT = b"MATLAB 5.0 MAT-file"
_V73_TEXT = b"MATLAB 7.3 MAT-file"
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_USERBLOCK = 512
_NON_NUMERIC_CLASSES = {"char", "cell", "struct", "function_handle"}


# ------------------------------------------------------------------------------------ file level


def mat_version(path: str | os.PathLike) -> str:
    """``"v5"`` or ``"v7.3"``, read from the header of the file at ``path`` (the extension is ignored).

    v5: the first bytes are ``MATLAB 5.0 MAT-file`` (MATLAB v5 and v7). v7.3: the first bytes are
    ``MATLAB 7.3 MAT-file`` and the HDF5 signature follows at byte 512. Raises
    ``FileNotFoundError`` naming the path if it is not a file, ``ValueError`` naming the path if
    it is neither (random bytes, another format, or a v7.3 header cut before its HDF5 part).
    """
    p = check_data_file("path", path)
    with open(p, "rb") as fh:
        head = fh.read(128)
        fh.seek(_USERBLOCK)
        signature = fh.read(len(_HDF5_SIGNATURE))
    if head.startswith(_V5_TEXT):
        return "v5"
    if head.startswith(_V73_TEXT):
        if signature != _HDF5_SIGNATURE:
            raise ValueError(
                f"path: {str(p)!r} has a MATLAB 7.3 header but no HDF5 signature at byte {_USERBLOCK} "
                "(the file is truncated or corrupt)"
            )
        return "v7.3"
    raise ValueError(
        f"path: {str(p)!r} is not a MATLAB MAT-file: expected a header starting with {_V5_TEXT.decode()!r} "
        f"(v5) or {_V73_TEXT.decode()!r} plus an HDF5 signature at byte {_USERBLOCK} (v7.3), "
        f"got first bytes {head[:24]!r}"
    )


def _corrupt(p: Path, version: str, e: BaseException) -> ValueError:
    return unreadable_file("path", p, f"a MATLAB {version} MAT-file", "HDF5" if version == "v7.3" else "scipy", e)


def _open_h5(p: Path) -> h5py.File:
    try:
        return h5py.File(p, "r")
    except Exception as e:  # h5py raises OSError for truncated/corrupt files
        raise _corrupt(p, "v7.3", e) from e


def _matlab_class(obj: h5py.HLObject) -> str | None:
    cls = obj.attrs.get("MATLAB_class")
    if cls is None:
        return None
    return cls.decode() if isinstance(cls, bytes) else str(cls)


def _v73_is_array(obj: object) -> bool:
    if not isinstance(obj, h5py.Dataset):
        return False
    if obj.attrs.get("MATLAB_empty", 0):
        return False
    return _matlab_class(obj) not in _NON_NUMERIC_CLASSES


def _check_matlab_layout(p: Path, name: str, obj: object) -> None:
    """A v7.3 dataset must carry MATLAB's ``MATLAB_class`` attribute: MATLAB writes it on every
    variable, and only then are the axes known to be stored reversed (column-major). A dataset
    without it was written by another tool (h5py writes C order), whose axes reversing would swap."""
    if isinstance(obj, h5py.Dataset) and _matlab_class(obj) is None:
        raise ValueError(
            f"key: {str(p)!r} has a MATLAB 7.3 header but variable {name!r} (HDF5 shape {tuple(obj.shape)}) has no "
            "MATLAB_class attribute; expected a variable written by MATLAB (save -v7.3), whose axes are stored "
            "reversed. An array written in C order (e.g. by h5py) would be read with its axes swapped: save it "
            "from MATLAB or hdf5storage, or as a plain HDF5 file without the MATLAB header"
        )


MAT_LAYOUTS = ("matlab", "c")


def _v73_order(p: Path, name: str, obj: object, mat_layout: str | None, *, reading: bool) -> bool:
    """Whether the v7.3 dataset ``obj`` is stored with its axes reversed (MATLAB's column-major order).

    ``mat_layout="matlab"`` / ``"c"`` says so; ``None`` reads it from the file: a variable written by MATLAB
    carries ``MATLAB_class`` (without it the file is refused, :func:`_check_matlab_layout`), and is stored
    reversed. When reading (``reading``), a stored shape that reads the same in both orders (a palindrome such as
    ``(9, 9, 9)``: ``N = s`` for Darcy, ``N = T`` for Navier-Stokes) cannot tell the sample axis from the last
    one, and is refused unless ``mat_layout`` sets the order."""
    if mat_layout is not None:
        check_choice("mat_layout", mat_layout, MAT_LAYOUTS)
        return mat_layout == "matlab"
    _check_matlab_layout(p, name, obj)
    shape = tuple(int(n) for n in getattr(obj, "shape", ()))
    if reading and sum(n > 1 for n in shape) >= 2 and shape == shape[::-1]:
        raise ValueError(
            f"mat_layout: {str(p)!r} variable {name!r} has the HDF5 shape {shape}, which reads the same with its axes "
            f"reversed (MATLAB's column-major order) or not (C order), so the file cannot tell whether axis 0 or "
            f"axis {len(shape) - 1} holds the samples; pass mat_layout='matlab' (saved by MATLAB's save -v7.3 or "
            f"hdf5storage: axes reversed) or mat_layout='c' (written in C order, e.g. by h5py)"
        )
    return True


def mat_variables(path: str | os.PathLike, mat_layout: str | None = None) -> dict[str, tuple[int, ...] | None]:
    """Variables of a MAT-file: name -> shape in the C-order (MATLAB) layout, without reading data.

    v5: ``scipy.io.whosmat``. v7.3: the top-level HDF5 objects except MATLAB's internal ``#refs#``
    and ``#subsystem#``; the dataset shape is reversed; ``None`` marks an entry that is not a
    numeric array (struct, cell, char, empty). Raises like :func:`mat_version`.
    """
    p = check_file("path", path)
    if mat_version(p) == "v5":
        try:
            return {
                name: tuple(int(s) for s in shape) for name, shape, _ in scipy.io.whosmat(p, appendmat=False)
            }
        except Exception as e:  # scipy raises several types for damaged files
            raise _corrupt(p, "v5", e) from e
    out: dict[str, tuple[int, ...] | None] = {}
    with _open_h5(p) as f:
        try:
            for name in f.keys():
                if name.startswith("#"):
                    continue
                obj = f.get(name)
                if not _v73_is_array(obj):
                    out[name] = None
                    continue
                rev = _v73_order(p, name, obj, mat_layout, reading=False)
                out[name] = tuple(int(s) for s in (reversed(obj.shape) if rev else obj.shape))
        except ValueError:
            raise
        except Exception as e:
            raise _corrupt(p, "v7.3", e) from e
    return out


def _missing_key(p: Path, key: str, present: Sequence[str]) -> ValueError:
    return ValueError(f"key: {str(p)!r} has no variable {key!r} (keys present: {sorted(present)})")


def _norm_slice(name: str, s: object, n: int) -> slice:
    if not isinstance(s, slice):
        raise TypeError(f"{name}: expected a slice, got {type(s).__name__} {s!r}")
    if s.step is not None and s.step <= 0:
        raise ValueError(f"{name}: expected a slice with a positive step, got {s!r}")
    start, stop, step = s.indices(n)
    if len(range(start, stop, step)) == 0:
        raise ValueError(f"{name}: expected a slice selecting at least one of {n} entries, got {s!r}")
    return slice(start, stop, step)


def _selection(
    p: Path, key: str, shape: tuple[int, ...], samples: object, index: object
) -> tuple[slice, ...]:
    if len(shape) == 0 or 0 in shape:
        raise ValueError(
            f"path: {str(p)!r} key {key!r}: expected a non-empty array (N, ...), got shape {shape}"
        )
    if not isinstance(index, tuple):
        raise TypeError(f"index: expected a tuple of slices for the axes after N, got {type(index).__name__}")
    if len(index) > len(shape) - 1:
        raise ValueError(
            f"index: expected at most {len(shape) - 1} slices (axes after N of {key!r}, shape {shape}), "
            f"got {len(index)}"
        )
    sel = [_norm_slice("samples", samples, shape[0])]
    for i, n in enumerate(shape[1:]):
        sel.append(_norm_slice(f"index[{i}]", index[i], n) if i < len(index) else slice(0, n, 1))
    return tuple(sel)


def read_mat_array(
    path: str | os.PathLike,
    key: str,
    *,
    samples: slice = slice(None),
    index: tuple[slice, ...] = (),
    mat_layout: str | None = None,
) -> np.ndarray:
    """Variable ``key`` of a MAT-file as a float32 C-contiguous array in the C-order layout ``(N, ...)``.

    ``samples`` selects along the first axis and ``index`` (optional, one slice per following axis)
    along the next ones; slices need a positive step. The result is
    ``full[samples, *index]``, identical for v5 and v7.3 files. For v7.3 only that hyperslab is read
    (the dataset, stored axis-reversed, is sliced in reversed order, then transposed); for v5 scipy
    loads the one variable and the selection is cast. ``mat_layout`` (v7.3 only): ``"matlab"`` (axes stored
    reversed, as MATLAB writes them), ``"c"`` (C order, as h5py writes), or ``None``: read from the file
    (``MATLAB_class`` present: reversed), refusing a stored shape that reads the same both ways
    (:func:`_v73_order`).

    Raises ``ValueError`` naming the path and the key when the key is missing (listing the keys
    present) or does not hold a numeric array, ``ValueError`` naming the path when the file is not
    a MAT-file or is truncated/corrupt, and ``ValueError``/``TypeError`` naming ``samples`` or
    ``index`` for a bad selection.
    """
    p = check_file("path", path)
    if not isinstance(key, str) or not key:
        raise TypeError(f"key: expected a non-empty str, got {type(key).__name__} {key!r}")
    if mat_version(p) == "v7.3":
        with _open_h5(p) as f:
            if key.startswith("#") or key not in f:
                raise _missing_key(p, key, [k for k in f.keys() if not k.startswith("#")])
            obj = f[key]
            if mat_layout is None:
                _check_matlab_layout(p, key, obj)
            if not _v73_is_array(obj) or obj.dtype.kind not in "biuf":
                raise ValueError(
                    f"key: {str(p)!r} variable {key!r} is not a numeric array "
                    f"(MATLAB class {_matlab_class(obj)!r}, HDF5 {type(obj).__name__})"
                )
            rev = _v73_order(p, key, obj, mat_layout, reading=True)
            shape = tuple(int(s) for s in (reversed(obj.shape) if rev else obj.shape))
            sel = _selection(p, key, shape, samples, index)
            try:
                data = obj[tuple(reversed(sel)) if rev else sel]
            except Exception as e:  # damaged chunks/raw data surface here as OSError
                raise _corrupt(p, "v7.3", e) from e
        return np.ascontiguousarray(data.transpose() if rev else data, dtype=np.float32)

    try:
        loaded = scipy.io.loadmat(p, variable_names=[key], appendmat=False)
    except Exception as e:
        raise _corrupt(p, "v5", e) from e
    if key.startswith("__") or key not in loaded:
        raise _missing_key(p, key, list(mat_variables(p)))
    arr = loaded[key]
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biuf":
        kind = arr.dtype if isinstance(arr, np.ndarray) else type(arr).__name__
        raise ValueError(f"key: {str(p)!r} variable {key!r} is not a numeric array (got {kind})")
    sel = _selection(p, key, tuple(arr.shape), samples, index)
    return np.ascontiguousarray(arr[sel], dtype=np.float32)


# ------------------------------------------------------------------------------------ helpers


def _shape_of(p: Path, variables: dict, key: str, layout: str) -> tuple[int, ...]:
    if key not in variables:
        raise _missing_key(p, key, list(variables))
    shape = variables[key]
    rank = layout.count(",") + 1
    if shape is None or len(shape) != rank or 0 in shape:
        raise ValueError(
            f"path: {str(p)!r} key {key!r}: expected a non-empty {rank}-D array {layout}, got "
            f"{'a non-numeric entry' if shape is None else f'shape {shape}'}"
        )
    return shape


def _node_resolutions(s: int) -> list[int]:
    """Resolutions r of a node grid of s points (both ends kept): (s - 1) % (r - 1) == 0."""
    return sorted((s - 1) // d + 1 for d in range(1, s) if (s - 1) % d == 0)


def _periodic_resolutions(n: int) -> list[int]:
    """Resolutions r >= 2 of a periodic grid of n points (endpoint excluded): n % r == 0."""
    return [r for r in range(2, n + 1) if n % r == 0]


def _stride(
    resolution: int | None, full: int, allowed: list[int], node_grid: bool, what: str
) -> tuple[int, int]:
    """``(resolution, stride)``; the file's own resolution when ``resolution`` is None."""
    if resolution is None:
        return full, 1
    check_positive_int("resolution", resolution)
    if resolution not in allowed:
        rule = "(s - 1) / (r - 1) an integer" if node_grid else "r dividing n"
        raise ValueError(
            f"resolution: expected one of {allowed} ({what} of {full} points, {rule}), got {resolution}"
        )
    return resolution, ((full - 1) // (resolution - 1) if node_grid else full // resolution)


def _split_slice(split: str, n_train: int, n_test: int, n_file: int, p: Path) -> slice:
    """Head ``[0, n_train)`` for train, tail ``[N - n_test, N)`` for test; the two must not overlap."""
    check_choice("split", split, SPLITS)
    check_positive_int("n_train", n_train)
    check_positive_int("n_test", n_test)
    if n_train + n_test > n_file:
        raise ValueError(
            f"n_train, n_test: expected n_train + n_test <= {n_file} (samples in {str(p)!r}) so the head "
            f"train split and the tail test split do not overlap, got {n_train} + {n_test} = {n_train + n_test}"
        )
    return slice(0, n_train) if split == "train" else slice(n_file - n_test, n_file)


def _to_tensor(p: Path, key: str, arr: np.ndarray) -> torch.Tensor:
    return check_finite(f"path {str(p)!r} key {key!r}", torch.from_numpy(arr))


def _meta(p: Path, **kw: Any) -> dict[str, Any]:
    return {"source": str(p), "format": "fno_mat", "mat_version": mat_version(p), "name": p.stem, **kw}


# ------------------------------------------------------------------------------------ datasets


def load_fno_darcy(
    path: str | os.PathLike,
    *,
    resolution: int | None = None,
    n_samples: int | None = None,
    split: str = "train",
    mat_layout: str | None = None,
) -> GridPairDataset:
    """FNO Darcy flow: coefficient ``coeff`` -> solution ``sol``.

    File: ``coeff`` and ``sol`` of shape ``(N, s, s)`` (real files: ``(1024, 421, 421)`` float64;
    ``coeff`` in {3, 12}, ``sol`` zero on the boundary) on the node grid of ``[0, 1]^2`` including
    both boundaries (h = 1/(s - 1)). Other variables (``Kcoeff*``) are ignored.

    Split convention (FNO ``fourier_2d.py``): train = the first n samples of
    ``piececonst_r421_N1024_smooth1.mat``, test = the first n samples of
    ``piececonst_r421_N1024_smooth2.mat``. Both splits read the HEAD of the file; the caller passes
    the right file, ``split`` is only recorded in ``meta``.

    ``resolution`` r: stride = (s - 1) / (r - 1) must be an integer and the result is
    ``arr[:, ::stride, ::stride]`` with (s - 1) / stride + 1 = r nodes (s = 421: r = 421, 211, 141,
    106, 85, ..., e.g. r = 85 is stride 5). None keeps s. ``n_samples``: the first n (None: all).

    Returns ``x`` (n, 1, r, r) = coeff and ``y`` (n, 1, r, r) = sol, float32. Only the needed
    samples and nodes are read from v7.3 files.
    """
    p = check_file("path", path)
    check_choice("split", split, SPLITS)
    if n_samples is not None:
        check_positive_int("n_samples", n_samples)
    variables = mat_variables(p, mat_layout)
    shape = _shape_of(p, variables, "coeff", "(N, s, s)")
    if _shape_of(p, variables, "sol", "(N, s, s)") != shape or shape[1] != shape[2]:
        raise ValueError(
            f"path: {str(p)!r}: expected 'coeff' and 'sol' of the same square shape (N, s, s), "
            f"got coeff {shape} and sol {variables['sol']}"
        )
    n_file, s = shape[0], shape[1]
    n = n_file if n_samples is None else n_samples
    if n > n_file:
        raise ValueError(f"n_samples: expected at most {n_file} (samples in {str(p)!r}), got {n}")
    r, stride = _stride(resolution, s, _node_resolutions(s), True, "a node grid")
    sel = {"samples": slice(0, n), "index": (slice(None, None, stride),) * 2}
    x = _to_tensor(p, "coeff", read_mat_array(p, "coeff", **sel, mat_layout=mat_layout))
    y = _to_tensor(p, "sol", read_mat_array(p, "sol", **sel, mat_layout=mat_layout))
    meta = _meta(
        p,
        split=split,
        resolution=r,
        file_resolution=s,
        stride=stride,
        variables={"x": "coeff", "y": "sol"},
        samples=(0, n),
        n_samples_in_file=n_file,
        split_convention=DARCY_SPLIT_CONVENTION,
        bounds=[[0.0, 1.0], [0.0, 1.0]], periodic=False,
        nodes={"endpoint": True, "rule": "x_i = i / (r - 1) on [0, 1]: both Dirichlet walls are nodes"},
    )
    return GridPairDataset(x[:, None], y[:, None], meta)


def load_fno_burgers(
    path: str | os.PathLike,
    *,
    split: str = "train",
    resolution: int | None = None,
    n_train: int = 1000,
    n_test: int = 100,
    mat_layout: str | None = None,
) -> GridPairDataset:
    """FNO Burgers (``burgers_data_R10.mat``): initial condition ``a`` -> solution ``u`` at t = 1.

    File: ``a`` and ``u`` of shape ``(N, n)`` (real file: ``(2048, 8192)``), a periodic grid of
    n points on [0, 1) (endpoint excluded).

    Split convention (FNO ``fourier_1d.py``): train = the first ``n_train`` samples (1000),
    test = the LAST ``n_test`` samples (100, ``[-ntest:]``); ``n_train + n_test <= N`` is required
    so that they do not overlap. ``resolution`` r must divide n; the result is ``arr[:, ::n // r]``
    (FNO: stride 8 -> 1024). None keeps n.

    Returns ``x`` (n_split, 1, r) = a and ``y`` (n_split, 1, r) = u, float32, unnormalised.
    """
    p = check_file("path", path)
    variables = mat_variables(p, mat_layout)
    shape = _shape_of(p, variables, "a", "(N, n)")
    if _shape_of(p, variables, "u", "(N, n)") != shape:
        raise ValueError(
            f"path: {str(p)!r}: expected 'a' and 'u' of the same shape (N, n), got a {shape} and u {variables['u']}"
        )
    n_file, n_grid = shape
    samples = _split_slice(split, n_train, n_test, n_file, p)
    r, stride = _stride(resolution, n_grid, _periodic_resolutions(n_grid), False, "a periodic grid")
    sel = {"samples": samples, "index": (slice(None, None, stride),)}
    x = _to_tensor(p, "a", read_mat_array(p, "a", **sel, mat_layout=mat_layout))
    y = _to_tensor(p, "u", read_mat_array(p, "u", **sel, mat_layout=mat_layout))
    meta = _meta(
        p,
        split=split,
        resolution=r,
        file_resolution=n_grid,
        stride=stride,
        variables={"x": "a", "y": "u"},
        samples=(samples.start, samples.stop),
        n_samples_in_file=n_file,
        split_convention=BURGERS_SPLIT_CONVENTION,
        bounds=[[0.0, 1.0]], periodic=True, nodes={"endpoint": False, "rule": "x_i = i / r on the periodic [0, 1)"},
    )
    return GridPairDataset(x[:, None], y[:, None], meta)


def load_fno_navier_stokes(
    path: str | os.PathLike,
    *,
    split: str = "train",
    t_in: int = 10,
    t_out: int | None = None,
    time_stride: int = 1,
    n_train: int = 1000,
    n_test: int = 200,
    resolution: int | None = None,
    mat_layout: str | None = None,
) -> GridPairDataset:
    """FNO Navier-Stokes vorticity: the first ``t_in`` steps -> the next ``t_out`` steps.

    File: ``u`` of shape ``(N, X, Y, T)``, time LAST (``u[..., k]`` is the vorticity at t = k + 1;
    ``a``, the t = 0 field, and ``t`` are not used). Real files: ``ns_V1e-3_N5000_T50.mat`` (v7.3,
    (5000, 64, 64, 50)), ``ns_V1e-4_N10000_T30.mat`` (v7.3), ``NavierStokes_V1e-5_N1200_T20.mat``
    (v5, (1200, 64, 64, 20)). The grid is periodic; X is the first coordinate.

    Time steps become channels: ``x`` (n_split, t_in, r, r) = ``u[..., :t_in]`` and
    ``y`` (n_split, t_out, r, r) = ``u[..., t_in:t_in + t_out]``, float32. ``t_out=None`` takes
    all remaining steps, T - t_in, which is FNO's choice for the three files (40, 20, 10).

    ``time_stride`` s takes the frames ``u[..., 0], u[..., s], ...`` (``t_in``/``t_out`` count taken frames);
    ``meta["dt"]`` is the spacing of the file's ``t`` (when it holds one) times ``s``.

    Split convention (FNO ``fourier_2d_time.py``/``fourier_3d.py``): train = the first ``n_train``
    samples (1000), test = the LAST ``n_test`` samples (200); ``n_train + n_test <= N`` is
    required. ``resolution`` r must divide X (= Y): ``arr[:, ::X // r, ::X // r]``. None keeps X.
    Only the needed samples, nodes and time steps are read from v7.3 files.
    """
    p = check_file("path", path)
    check_positive_int("t_in", t_in)
    check_positive_int("time_stride", time_stride)
    if t_out is not None:
        check_positive_int("t_out", t_out)
    variables = mat_variables(p, mat_layout)
    n_file, nx, ny, n_t_file = _shape_of(p, variables, "u", "(N, X, Y, T)")
    n_t = len(range(0, n_t_file, time_stride))  # frames taken: u[..., 0], u[..., s], ...
    if nx != ny:
        raise ValueError(
            f"path: {str(p)!r} key 'u': expected a square grid (N, X, X, T), got {variables['u']}"
        )
    t_out_eff = n_t - t_in if t_out is None else t_out
    if t_out_eff < 1 or t_in + t_out_eff > n_t:
        raise ValueError(
            f"t_in, t_out: expected t_in + t_out <= T = {n_t} (time steps in {str(p)!r}"
            f"{f' taken every {time_stride}' if time_stride > 1 else ''}) with t_out >= 1, got t_in={t_in}, "
            f"t_out={t_out}"
        )
    samples = _split_slice(split, n_train, n_test, n_file, p)
    r, stride = _stride(resolution, nx, _periodic_resolutions(nx), False, "a periodic grid")
    every = slice(None, None, stride)
    u = read_mat_array(p, "u", samples=samples,
                       index=(every, every, slice(0, (t_in + t_out_eff - 1) * time_stride + 1, time_stride)),
                       mat_layout=mat_layout)
    dt = None
    if variables.get("t") is not None:  # the file's times t (1, T): dt between the taken frames
        from .._hdf5 import uniform_step

        step = uniform_step(read_mat_array(p, "t", mat_layout=mat_layout))
        dt = None if step is None else step * time_stride
    u = _to_tensor(p, "u", u).permute(0, 3, 1, 2)  # (n, T', r, r)
    meta = _meta(
        p,
        split=split,
        resolution=r,
        file_resolution=nx,
        stride=stride,
        variables={"x": "u", "y": "u"},
        t_in=t_in,
        t_out=t_out_eff,
        time_stride=time_stride,
        time_steps={"x": (0, t_in), "y": (t_in, t_in + t_out_eff)},
        samples=(samples.start, samples.stop),
        n_samples_in_file=n_file,
        split_convention=NAVIER_STOKES_SPLIT_CONVENTION,
        bounds=[[0.0, 1.0], [0.0, 1.0]], periodic=True,
        nodes={"endpoint": False, "rule": "x_i = i / r on the periodic torus [0, 1)^2"},
    )
    if dt is not None:
        meta["dt"] = dt
    return GridPairDataset(u[:, :t_in].contiguous(), u[:, t_in:].contiguous(), meta)
