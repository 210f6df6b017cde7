"""ShapeNet-Car (Umetani & Bickel 2018): Transolver's preprocessed folders and neuraloperator's ``mini_car.pt``.

Transolver / Neural-Solver-Library layout (formats.md §6), :func:`load_shapenet_car`
    ``root/param{k}/<sample>/`` with ``x.npy`` (N, 7) = [pos xyz, sdf, normal xyz], ``y.npy`` (N, 4) =
    [velocity xyz, pressure], ``pos.npy`` (N, 3), ``surf.npy`` (N,) 0/1 (volume points first, then surface
    points) and optionally ``edge_index.npy`` (2, E). Split: "Test/val = fold ``param0`` (``fold_id=0``),
    train = the other 8 folds"; ``fold_id`` picks another test fold. Folds are taken in numeric order, samples
    in sorted name order. A sample is ``{"x", "y", "pos", "weights", "surf"}`` (``surf`` bool); the layout has
    no cell volumes or areas, so ``weights`` are uniform, 1/N. Files are memory-mapped and read per item.
    Normalisation in the reference: "per-column mean/std over all points of all training samples (x and y),
    ``(v - mean)/(std + 1e-8)``"; the samples here are unnormalised.

neuraloperator ``mini_car.pt`` (formats.md §2.5), :func:`load_mini_car`
    A list of dicts of float32 tensors: ``vertices`` (N, 3) in [0, 1], ``vertex_normals`` (N, 3),
    ``centroids`` (T, 3), ``triangle_areas`` (T,), ``press`` (1, N), ... There is no triangle index. Sample:
    ``x`` = [vertices, vertex_normals] (N, 6), ``y`` = ``press.T`` (N, 1), ``pos`` = vertices, ``weights`` =
    per-vertex area, one third of the areas of the triangles around each vertex, with the triangles recovered
    from the centroids (:func:`vertex_areas_from_centroids`). The weights sum to ``triangle_areas.sum()``.
    The file's ``triangle_areas`` are not the areas of the triangles of the normalised ``vertices`` (their
    ratio varies per triangle, an anisotropic normalisation of the vertices is the likely cause), so the
    weights are in the units of ``triangle_areas``; normalise them per sample where a probability is needed.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from sciattn._checks import check_choice, check_file

from ..transforms.splits import describe_split, split_indices
from .geofno import PointSetDataset

__all__ = ["ShapeNetCarDataset", "load_mini_car", "load_shapenet_car", "vertex_areas_from_centroids"]

SPLITS = ("train", "test")
SAMPLE_FILES = ("x.npy", "y.npy", "pos.npy", "surf.npy")
SPLIT_CONVENTION = "Transolver ShapeNet-Car: test/val = fold param0 (fold_id=0), train = the other folds"
_FOLD_RE = re.compile(r"^param(\d+)$")
_MINI_CAR_KEYS = ("vertices", "vertex_normals", "centroids", "triangle_areas", "press")


# ------------------------------------------------------------------------------------ Transolver layout


def _npy(p: Path) -> np.ndarray:
    check_file("path", p)
    try:
        return np.load(p, mmap_mode="r", allow_pickle=False)
    except Exception as e:
        raise ValueError(f"path: could not read {str(p)!r} as a .npy array ({type(e).__name__}: {e})") from e


class ShapeNetCarDataset(Dataset):
    """Samples of the preprocessed folders ``dirs``, read per item.

    ``{"x": (N, 7), "y": (N, 4), "pos": (N, 3), "weights": (N,) = 1/N, "surf": (N,) bool}`` plus
    ``"edge_index"`` (2, E) int64 when ``with_edges``.
    """

    def __init__(self, dirs: list[Path], meta: dict[str, Any], with_edges: bool = False):
        self.dirs, self.meta, self.with_edges = dirs, meta, with_edges

    def __len__(self) -> int:
        return len(self.dirs)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        d = self.dirs[i]
        arr = {f[:-4]: _npy(d / f) for f in SAMPLE_FILES}
        n = arr["x"].shape[0] if arr["x"].ndim == 2 else -1
        for key, layout in (("x", (n, 7)), ("y", (n, 4)), ("pos", (n, 3)), ("surf", (n,))):
            a = arr[key]
            if n < 1 or a.ndim != len(layout) or a.shape[0] != n:
                raise ValueError(
                    f"path: {str(d / (key + '.npy'))!r}: expected shape (N, ...) with N = {n} points like x.npy "
                    f"(x (N, 7), y (N, 4), pos (N, 3), surf (N,)), got {tuple(a.shape)}"
                )
        out = {k: torch.from_numpy(np.array(arr[k], dtype=np.float32)) for k in ("x", "y", "pos")}
        out["weights"] = torch.full((n,), 1.0 / n)
        out["surf"] = torch.from_numpy(np.array(arr["surf"]) != 0)
        if self.with_edges:
            e = _npy(d / "edge_index.npy")
            if e.ndim != 2 or e.shape[0] != 2:
                raise ValueError(f"path: {str(d / 'edge_index.npy')!r}: expected shape (2, E), got {e.shape}")
            out["edge_index"] = torch.from_numpy(np.array(e, dtype=np.int64))
        return out

    def __repr__(self) -> str:
        return f"ShapeNetCarDataset(n={len(self)}, meta={self.meta})"


def load_shapenet_car(
    root: str | os.PathLike, split: str = "train", *, fold_id: int = 0, with_edges: bool = False
) -> ShapeNetCarDataset:
    """Transolver's preprocessed ShapeNet-Car: ``root/param{k}/<sample>/{x,y,pos,surf}.npy``.

    test = the samples of fold ``param{fold_id}``, train = those of every other ``param*`` fold present.
    Raises ``FileNotFoundError`` naming the path for a missing root, test fold or per-sample file, and
    ``ValueError`` naming the path for arrays of the wrong shape or mismatched point counts (on access).
    """
    check_choice("split", split, SPLITS)
    r = Path(root)
    if not r.is_dir():
        raise FileNotFoundError(
            f"root: expected a directory with param* folds, got {str(r)!r} (not a directory)"
        )
    folds = sorted((int(m[1]), p) for p in r.iterdir() if p.is_dir() and (m := _FOLD_RE.match(p.name)))
    if fold_id not in {k for k, _ in folds}:
        raise FileNotFoundError(
            f"fold_id: expected the test fold {str(r / f'param{fold_id}')!r}, got folds {[p.name for _, p in folds]}"
        )
    chosen = [p for k, p in folds if (k == fold_id) == (split == "test")]
    dirs = [s for f in chosen for s in sorted(f.iterdir()) if s.is_dir()]
    for d in dirs:
        for f in SAMPLE_FILES + (("edge_index.npy",) if with_edges else ()):
            check_file("path", d / f)
    meta = {
        "name": "shapenet_car",
        "source": str(r),
        "split": split,
        "fold_id": fold_id,
        "folds": [p.name for p in chosen],
        "samples": [str(d.relative_to(r)) for d in dirs],
        "weights": "uniform 1/N (no cell measure in the layout)",
        "split_convention": SPLIT_CONVENTION,
    }
    return ShapeNetCarDataset(dirs, meta, with_edges)


# ------------------------------------------------------------------------------------ mini_car.pt


def vertex_areas_from_centroids(
    vertices: torch.Tensor,
    centroids: torch.Tensor,
    areas: torch.Tensor,
    *,
    ks: tuple[int, ...] = (8, 16, 32),
    rtol: float = 1e-5,
) -> tuple[torch.Tensor, int]:
    """Per-vertex areas (V,) float64 of a triangle mesh known only by ``centroids`` (T, 3) and ``areas`` (T,).

    Triangle t is recovered as the triple of distinct vertices, among the k vertices nearest its centroid,
    whose mean is closest to the centroid (ties: the triple of nearer vertices); it is accepted when that
    distance is <= ``rtol`` x the diagonal of the vertices' bounding box, trying each k of ``ks`` in turn for
    triangles not yet found. Each vertex gets one third of the areas of its triangles (the barycentric vertex
    area). A triangle left unmatched gives a third of its area to each of the 3 vertices nearest its centroid.
    Every triangle's area is handed out in full, so the result sums to ``areas.sum()``.
    Returns ``(weights, n_unmatched)``.
    """
    v, c, a = vertices.double(), centroids.double(), areas.double()
    n_v = v.shape[0]
    tol = rtol * float((v.max(0).values - v.min(0).values).norm())
    tri = torch.full((c.shape[0], 3), -1, dtype=torch.long)
    todo = torch.arange(c.shape[0])
    for k in ks:
        k = min(k, n_v)
        if todo.numel() == 0 or k < 3:
            break
        combos = torch.tensor(list(itertools.combinations(range(k), 3)))
        chunk = max(1, (1 << 18) // len(combos))
        for s in range(0, todo.numel(), chunk):
            ids = todo[s : s + chunk]
            nn = torch.cdist(c[ids], v).topk(k, largest=False).indices  # sorted nearest first
            cand = nn[:, combos]  # (t, C, 3)
            err = (v[cand].mean(2) - c[ids, None]).norm(dim=-1)
            best = err.argmin(1)  # first minimum: combinations are in order of nearness
            ok = err.gather(1, best[:, None])[:, 0] <= tol
            tri[ids[ok]] = cand[ok, best[ok]]
        todo = todo[tri[todo, 0] < 0]
    if todo.numel():
        tri[todo] = torch.cdist(c[todo], v).topk(min(3, n_v), largest=False).indices
    w = torch.zeros(n_v, dtype=torch.float64)
    w.index_add_(0, tri.reshape(-1), (a / 3).repeat_interleave(3))
    return w, int(todo.numel())


def _mini_car_sample(p: Path, i: int, d: object) -> tuple[dict[str, torch.Tensor], int]:
    where = f"path: {str(p)!r} sample {i}"
    if not isinstance(d, Mapping) or any(k not in d for k in _MINI_CAR_KEYS):
        keys = sorted(d) if isinstance(d, Mapping) else type(d).__name__
        raise ValueError(f"{where}: expected a dict with keys {list(_MINI_CAR_KEYS)}, got {keys}")
    t = {k: d[k] for k in _MINI_CAR_KEYS}
    for k, x in t.items():
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{where} key {k!r}: expected a tensor, got {type(x).__name__}")
    n, n_t = t["vertices"].shape[0], t["centroids"].shape[0]
    want = {
        "vertices": (n, 3),
        "vertex_normals": (n, 3),
        "press": (1, n),
        "centroids": (n_t, 3),
        "triangle_areas": (n_t,),
    }
    for k, shape in want.items():
        if tuple(t[k].shape) != shape or n < 3 or n_t < 1:
            raise ValueError(
                f"{where} key {k!r}: expected shape {shape} (N = {n} vertices, T = {n_t} triangles), "
                f"got {tuple(t[k].shape)}"
            )
    if not bool(torch.isfinite(t["triangle_areas"]).all()) or bool((t["triangle_areas"] < 0).any()):
        raise ValueError(f"{where} key 'triangle_areas': expected finite non-negative areas")
    w, unmatched = vertex_areas_from_centroids(t["vertices"], t["centroids"], t["triangle_areas"])
    pos = t["vertices"].float()
    sample = {
        "x": torch.cat([pos, t["vertex_normals"].float()], dim=1),
        "y": t["press"].float().T.contiguous(),
        "pos": pos.clone(),
        "weights": w.float(),
    }
    return sample, unmatched


def load_mini_car(
    path: str | os.PathLike, split: str | None = None, *, split_rule: str | None = None
) -> PointSetDataset:
    """neuraloperator's ``mini_car.pt`` as point samples ``{"x": (N, 6), "y": (N, 1), "pos": (N, 3), "weights": (N,)}``.

    The file is one undivided list of cars (a single-split file, :mod:`sciattn.pde_data.splits`):
    ``split=None`` takes every car; ``split="train"``/``"test"`` need ``split_rule`` (``"last:K"``:
    test = the last K cars, train = the ones before) and are refused without it, since both would
    otherwise be the same cars. ``meta["indices"]`` lists the cars taken (positions in the file).

    Loaded with ``torch.load(weights_only=True)``. ``meta["unmatched_triangles"]`` counts, per sample, the
    triangles whose vertices could not be recovered from the centroid (their area went to the 3 nearest
    vertices). Raises ``FileNotFoundError``/``ValueError`` naming the path (and the sample and key).
    """
    p = check_file("path", path)
    try:
        data = torch.load(p, weights_only=True, map_location="cpu")
    except Exception as e:
        raise ValueError(
            f"path: could not read {str(p)!r} as a torch .pt file: {type(e).__name__}: {e}"
        ) from e
    if isinstance(data, Mapping):
        data = [data]
    if not isinstance(data, (list, tuple)) or not data:
        raise ValueError(
            f"path: expected {str(p)!r} to hold a non-empty list of dicts, got {type(data).__name__}"
        )
    idx = list(split_indices(len(data), split, split_rule, what=f"{str(p)!r}", unit="car"))
    samples, unmatched = zip(*(_mini_car_sample(p, i, data[i]) for i in idx))
    total = [float(data[i]["triangle_areas"].double().sum()) for i in idx]
    meta = {
        "name": "mini_car",
        "source": str(p),
        "format": "neuralop_mini_car",
        "split": split,
        "split_rule": split_rule,
        "split_convention": describe_split(split_rule, "car"),
        "indices": idx,
        "n_file": len(data),
        "variables": {
            "x": ["vertices", "vertex_normals"],
            "y": "press.T",
            "pos": "vertices",
            "weights": "1/3 of triangle_areas of the triangles recovered from centroids",
        },
        "unmatched_triangles": list(unmatched),
        "total_area": total,
    }
    return PointSetDataset(samples, meta)
