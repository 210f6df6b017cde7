"""Geo-FNO benchmarks (Li et al. 2022) as used by Transolver / Neural-Solver-Library.

* :func:`load_airfoil` / :func:`load_pipe`: ``{NACA_Cylinder,Pipe}_{X,Y}.npy`` (N, s1, s2) and ``_Q.npy``
  (N, C, s1, s2) (real: 221 x 51 C-grid, C = 5; 129 x 129). Sample ``x`` = ``pos`` = (X, Y) (2, s1, s2),
  ``y`` = ``Q[:, 4]`` (Mach) / ``Q[:, 0]`` (x-velocity) (1, s1, s2), ``weights`` (s1, s2).
* :func:`load_elasticity`: ``Random_UnitCell_XY_10.npy`` (P, 2, N), ``Random_UnitCell_sigma_10.npy`` (P, N),
  cases LAST (real P = 972). Sample ``x`` = ``pos`` (P, 2), ``y`` = sigma (P, 1), ``weights`` = 1/P (uniform:
  the files give no mesh).
* :func:`load_plasticity`: ``plas_N987_T20.mat``: ``input`` (N, s1), ``output`` (N, s1, s2, T, C) (real
  (987, 101, 31, 20, 4)). Sample ``x`` = die profile repeated along s2 (1, s1, s2), ``y`` (T * C, s1, s2) with
  channel ``t * C + c`` (time-major, as in ``pdebench``).

Split conventions (formats.md §3, "split (reference)"): Airfoil "train ``[:1000]``, test ``[1000:1200]`` (NOT the
tail)"; Pipe "``N=1200``: train ``[:1000]``, test ``input[:1200][-200:]``", i.e. also ``[1000:1200]``; both are
implemented as train ``[:n_train]``, test ``[n_train:n_train + n_test]``. Elasticity "train ``[:1000]``, test
``[-200:]`` (cases 1800-1999)"; Plasticity "train ``[:900]``, test ``[-80:]``": head / TAIL.

Mesh ``weights`` (Airfoil, Pipe) are node areas summing to the mesh's area (:func:`structured_node_areas`).
Samples are float32, unnormalised (reference, formats.md §3: Transolver ``UnitTransformer``, "per-channel
statistics over samples x points", std + 1e-8, fitted on train). ``.npy`` files are memory-mapped
(``mmap_mode="r"``) on first access in each process and read per sample; a v5 ``.mat`` cannot be read in part,
so Plasticity loads its split once. Sizes come from the files (nothing like 221 x 51 is hard-coded).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from sciattn._checks import check_choice, check_file, check_positive_int

from .fno_mat import mat_variables, read_mat_array

__all__ = [
    "CurvilinearMeshDataset",
    "PlasticityDataset",
    "PointCloudDataset",
    "PointSetDataset",
    "load_airfoil",
    "load_elasticity",
    "load_pipe",
    "load_plasticity",
    "structured_node_areas",
]

SPLITS = ("train", "test")
AIRFOIL_FILES = ("NACA_Cylinder_X.npy", "NACA_Cylinder_Y.npy", "NACA_Cylinder_Q.npy")
PIPE_FILES = ("Pipe_X.npy", "Pipe_Y.npy", "Pipe_Q.npy")
ELASTICITY_FILES = ("Random_UnitCell_XY_10.npy", "Random_UnitCell_sigma_10.npy")
PLASTICITY_FILES = ("plas_N987_T20.mat", "buri_plas_N987_time.mat")
NORMALIZATION = (
    "unnormalised; reference: Transolver UnitTransformer, per-channel mean/std over samples x points "
    "(std + 1e-8), fitted on the training split"
)


# ------------------------------------------------------------------------------------ helpers


def structured_node_areas(x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Node areas (s1, s2), float64, of the structured quad mesh with node coordinates ``x``, ``y`` (s1, s2).

    Cell (i, j) has corners (i, j), (i+1, j), (i+1, j+1), (i, j+1); its area is the absolute shoelace sum
    ``|(x0 - x2)(y1 - y3) - (x1 - x3)(y0 - y2)| / 2`` (half the cross product of the diagonals), and a
    quarter of it goes to each corner. The weights therefore sum to the total cell area (the mesh's area for a
    non-overlapping mesh); a node on a mesh cut (the airfoil C-grid wake) gets the cells of its own side.
    """
    x, y = (torch.from_numpy(np.array(a, dtype=np.float64)) for a in (x, y))
    if x.dim() != 2 or x.shape != y.shape or min(x.shape) < 2:
        raise ValueError(
            f"x, y: expected two coordinate arrays of the same shape (s1, s2) with s1, s2 >= 2, "
            f"got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    x0, x1, x2, x3 = x[:-1, :-1], x[1:, :-1], x[1:, 1:], x[:-1, 1:]
    y0, y1, y2, y3 = y[:-1, :-1], y[1:, :-1], y[1:, 1:], y[:-1, 1:]
    cell = 0.5 * ((x0 - x2) * (y1 - y3) - (x1 - x3) * (y0 - y2)).abs()
    w = torch.zeros_like(x)
    for di in (0, 1):
        for dj in (0, 1):
            w[di : di + cell.shape[0], dj : dj + cell.shape[1]] += 0.25 * cell
    return w


def _find(root: str | os.PathLike, names: Sequence[str], subdirs: Sequence[str] = ()) -> Path:
    """First existing ``root/[sub/]name``; FileNotFoundError naming the path(s) looked for."""
    r = Path(root)
    if r.is_file() and r.name in names:
        return r
    tried = [r / sub / n for sub in ("", *subdirs) for n in names]
    for p in tried:
        if p.is_file():
            return p
    raise FileNotFoundError(
        f"root: expected the file {str(tried[0])!r}, got none of {[str(p) for p in tried]}"
    )


def _open_npy(p: Path) -> np.ndarray:
    check_file("path", p)
    try:
        return np.load(p, mmap_mode="r", allow_pickle=False)
    except Exception as e:  # not an .npy file, truncated header, pickled object array
        raise ValueError(f"path: could not read {str(p)!r} as a .npy array ({type(e).__name__}: {e})") from e


def _require(p: Path, arr: np.ndarray, layout: str, ok: bool) -> None:
    if not ok:
        raise ValueError(f"path: {str(p)!r}: expected an array {layout}, got shape {tuple(arr.shape)}")


def _split(split: str, n_train: int, n_test: int, n_file: int, tail: bool, what: Path) -> range:
    check_choice("split", split, SPLITS)
    check_positive_int("n_train", n_train)
    check_positive_int("n_test", n_test)
    if n_train + n_test > n_file:
        raise ValueError(
            f"n_train, n_test: expected n_train + n_test <= {n_file} (samples in {str(what)!r}), "
            f"got {n_train} + {n_test} = {n_train + n_test}"
        )
    if split == "train":
        return range(0, n_train)
    return range(n_file - n_test, n_file) if tail else range(n_train, n_train + n_test)


def _meta(name: str, source: Any, split: str, idx: range, n_file: int, convention: str, **kw: Any) -> dict:
    return {
        "name": name,
        "source": source,
        "split": split,
        "samples": (idx.start, idx.stop),
        "n_samples_in_file": n_file,
        **kw,
        "split_convention": convention,
        "normalization": NORMALIZATION,
    }


def _f32(a: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(a, dtype=np.float32))


class _LazyNpy(Dataset):
    """Holds ``.npy`` paths; memory-maps them on first access in each process (not pickled)."""

    def __init__(self, paths: dict[str, Path], indices: range, meta: dict[str, Any]):
        self.paths, self.indices, self.meta = dict(paths), indices, meta
        self._arrays: dict[str, np.ndarray] | None = None

    def _arr(self, key: str) -> np.ndarray:
        if self._arrays is None:
            self._arrays = {k: _open_npy(p) for k, p in self.paths.items()}
        return self._arrays[key]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arrays": None}

    def __len__(self) -> int:
        return len(self.indices)

    def _file_index(self, i: int) -> int:
        return self.indices[i]  # range indexing raises IndexError and handles negative i

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={len(self)}, meta={self.meta})"


# ------------------------------------------------------------------------------------ datasets


class CurvilinearMeshDataset(_LazyNpy):
    """Samples ``{"x": (2, s1, s2), "y": (C_out, s1, s2), "pos": (2, s1, s2), "weights": (s1, s2)}``.

    ``pos`` = ``x`` = the node coordinates (X, Y) (Transolver uses them both as positions and as features),
    ``y`` = ``Q[j, channels]``, ``weights`` = :func:`structured_node_areas` of the sample's own mesh.
    """

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        j = self._file_index(i)
        xs, ys = (np.array(self._arr(k)[j], dtype=np.float64) for k in "XY")
        pos = _f32(np.stack([xs, ys]))
        y = _f32(self._arr("Q")[j][list(self.meta["channels"])])
        return {"x": pos, "y": y, "pos": pos.clone(), "weights": structured_node_areas(xs, ys).float()}


class PointCloudDataset(_LazyNpy):
    """Elasticity: ``{"x": (P, d), "y": (P, 1), "pos": (P, d), "weights": (P,)}`` with uniform weights 1/P.

    The files hold no mesh, only the P points of each case, so every point gets the same weight.
    """

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        j = self._file_index(i)
        pos = _f32(self._arr("XY")[:, :, j])
        y = _f32(self._arr("sigma")[:, j])[:, None]
        n = pos.shape[0]
        return {"x": pos, "y": y, "pos": pos.clone(), "weights": torch.full((n,), 1.0 / n)}


class PointSetDataset(Dataset):
    """In-memory point samples (a list of dicts such as ``{"x": (N, C_in), "y": ..., "pos": ..., "weights": ...}``)."""

    def __init__(self, samples: Sequence[dict[str, torch.Tensor]], meta: dict[str, Any] | None = None):
        self.samples, self.meta = list(samples), dict(meta or {})

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return dict(self.samples[i])

    def __repr__(self) -> str:
        return f"PointSetDataset(n={len(self)}, meta={self.meta})"


class PlasticityDataset(Dataset):
    """``{"x": (1, s1, s2), "y": (T * C, s1, s2)}``: the die profile ``input[j]`` repeated along s2, and
    ``output[j]`` (s1, s2, T, C) as channels ``t * C + c`` (time-major, as in ``pdebench``)."""

    def __init__(self, inp: torch.Tensor, out: torch.Tensor, meta: dict[str, Any]):
        self.inp, self.out, self.meta = inp, out, meta

    def __len__(self) -> int:
        return self.inp.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        i = range(len(self))[i]
        s1, s2, t, c = self.out.shape[1:]
        return {
            "x": self.inp[i][None, :, None].expand(1, s1, s2).clone(),
            "y": self.out[i].permute(2, 3, 0, 1).reshape(t * c, s1, s2).contiguous(),
        }

    def __repr__(self) -> str:
        return f"PlasticityDataset(n={len(self)}, meta={self.meta})"


# ------------------------------------------------------------------------------------ loaders


_MESHES = {  # name: (files, optional sub-folder of root, split convention)
    "airfoil": (AIRFOIL_FILES, "naca", "Geo-FNO airfoil: train [:1000], test [1000:1200] (NOT the tail)"),
    "pipe": (
        PIPE_FILES,
        "pipe",
        "Geo-FNO pipe: N=1200, train [:1000], test input[:1200][-200:] = [1000:1200]",
    ),
}


def _load_mesh(name, root, split, n_train, n_test, channels) -> CurvilinearMeshDataset:
    names, subdir, convention = _MESHES[name]
    px, py, pq = (_find(root, (n,), (subdir,)) for n in names)
    X, Y, Q = _open_npy(px), _open_npy(py), _open_npy(pq)
    _require(px, X, "(N, s1, s2)", X.ndim == 3)
    _require(py, Y, f"(N, s1, s2) = {X.shape} like {px.name}", Y.shape == X.shape)
    _require(
        pq,
        Q,
        f"(N, C, s1, s2) with N, s1, s2 = {X.shape} like {px.name}",
        Q.ndim == 4 and Q.shape[0] == X.shape[0] and Q.shape[2:] == X.shape[1:],
    )
    chans = (channels,) if isinstance(channels, int) else tuple(channels)
    if not chans or any(
        isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < Q.shape[1] for c in chans
    ):
        raise ValueError(
            f"channels: expected indices in [0, {Q.shape[1]}) (channels of {str(pq)!r}), got {channels!r}"
        )
    idx = _split(split, n_train, n_test, X.shape[0], False, px)
    src = {"X": str(px), "Y": str(py), "Q": str(pq)}
    meta = _meta(name, src, split, idx, X.shape[0], convention, resolution=X.shape[1:], channels=chans)
    return CurvilinearMeshDataset({"X": px, "Y": py, "Q": pq}, idx, meta)


def load_airfoil(
    root: str | os.PathLike,
    split: str = "train",
    *,
    n_train: int = 1000,
    n_test: int = 200,
    channels: int | Sequence[int] = 4,
) -> CurvilinearMeshDataset:
    """Airfoil (Euler, C-grid): ``root`` holds ``NACA_Cylinder_{X,Y,Q}.npy`` (or ``root/naca/``).

    X, Y (N, s1, s2), Q (N, 5, s1, s2); target ``Q[:, 4]`` (Mach, Geo-FNO's index; override with
    ``channels``). Split: train ``[:n_train]``, test ``[n_train:n_train + n_test]`` (not the tail).
    """
    return _load_mesh("airfoil", root, split, n_train, n_test, channels)


def load_pipe(
    root: str | os.PathLike,
    split: str = "train",
    *,
    n_train: int = 1000,
    n_test: int = 200,
    channels: int | Sequence[int] = 0,
) -> CurvilinearMeshDataset:
    """Pipe (Navier-Stokes): ``root`` holds ``Pipe_{X,Y,Q}.npy`` (or ``root/pipe/``); target ``Q[:, 0]``.

    Split as the reference (N=1200 used): train ``[:n_train]``, test ``[n_train:n_train + n_test]``.
    """
    return _load_mesh("pipe", root, split, n_train, n_test, channels)


def load_elasticity(
    root: str | os.PathLike, split: str = "train", *, n_train: int = 1000, n_test: int = 200
) -> PointCloudDataset:
    """Elasticity: ``root`` (or ``root/Meshes/``) holds ``Random_UnitCell_{XY,sigma}_10.npy``, XY (P, d, N)
    and sigma (P, N), cases LAST. Split: train ``[:n_train]``, test the LAST ``n_test`` cases."""
    pxy, ps = (_find(root, (n,), ("Meshes", "elasticity/Meshes")) for n in ELASTICITY_FILES)
    XY, S = _open_npy(pxy), _open_npy(ps)
    _require(pxy, XY, "(P, d, N) (points, coordinates, cases)", XY.ndim == 3 and XY.shape[1] >= 1)
    _require(
        ps, S, f"(P, N) = {(XY.shape[0], XY.shape[2])} like {pxy.name}", S.shape == (XY.shape[0], XY.shape[2])
    )
    idx = _split(split, n_train, n_test, XY.shape[2], True, pxy)
    src, convention = {"XY": str(pxy), "sigma": str(ps)}, "Geo-FNO elasticity: train [:1000], test [-200:]"
    meta = _meta(
        "elasticity", src, split, idx, XY.shape[2], convention, n_points=XY.shape[0], weights="uniform 1/P"
    )
    return PointCloudDataset({"XY": pxy, "sigma": ps}, idx, meta)


def load_plasticity(
    root: str | os.PathLike, split: str = "train", *, n_train: int = 900, n_test: int = 80
) -> PlasticityDataset:
    """Plasticity: ``root`` is ``plas_N987_T20.mat`` (or ``buri_plas_N987_time.mat``) or the folder holding it.

    ``input`` (N, s1), ``output`` (N, s1, s2, T, C); split train ``[:n_train]``, test the LAST ``n_test``.
    Read with :func:`~sciattn.pde_data.fno_mat.read_mat_array` (v5 loads the variable once; v7.3 reads the
    split's samples only).
    """
    p = _find(root, PLASTICITY_FILES)
    var = mat_variables(p)
    for key, rank in (("input", 2), ("output", 5)):
        if key not in var:
            raise ValueError(f"path: {str(p)!r} has no variable {key!r} (keys present: {sorted(var)})")
        if var[key] is None or len(var[key]) != rank:
            raise ValueError(f"path: {str(p)!r} key {key!r}: expected a {rank}-D array, got {var[key]}")
    n_in, s1 = var["input"]
    if var["output"][:2] != (n_in, s1):
        raise ValueError(
            f"path: {str(p)!r}: expected 'output' (N, s1, s2, T, C) with N, s1 = {(n_in, s1)} like 'input', "
            f"got {var['output']}"
        )
    idx = _split(split, n_train, n_test, n_in, True, p)
    sel = slice(idx.start, idx.stop)
    inp = torch.from_numpy(read_mat_array(p, "input", samples=sel))
    out = torch.from_numpy(read_mat_array(p, "output", samples=sel))
    convention, shape = "Geo-FNO plasticity: train [:900], test [-80:]", var["output"]
    meta = _meta(
        "plasticity", str(p), split, idx, n_in, convention, resolution=shape[1:3], time_steps=shape[3]
    )
    meta["channel_order"] = "y channel t * C + c (time-major)"
    return PlasticityDataset(inp, out, meta)
