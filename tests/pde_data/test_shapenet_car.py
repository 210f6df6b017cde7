"""ShapeNet-Car: Transolver's preprocessed folders (tiny param0..param2 tree) and neuraloperator's mini_car.pt.

Fixture values encode where they come from: ``x[p, c] = 10000 fold + 1000 sample + 10 p + c``, ``y = -x[:, :4]``,
so every check also tells which fold/sample/point/column was read.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sciattn.pde_data.shapenet_car import load_mini_car, load_shapenet_car, vertex_areas_from_centroids

MINI_CAR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mini_car.pt"
FOLDS = {0: ["car_b", "car_a"], 1: ["car_c"], 2: ["car_e", "car_d"]}  # created out of order on purpose


def write_sample(d: Path, fold: int, sample: int, n: int) -> None:
    d.mkdir(parents=True)
    pp, cc = np.meshgrid(np.arange(n), np.arange(7), indexing="ij")
    x = (10000 * fold + 1000 * sample + 10 * pp + cc).astype(np.float32)
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", -x[:, :4])
    np.save(d / "pos.npy", x[:, :3])
    np.save(d / "surf.npy", (np.arange(n) >= n - 2).astype(np.int64))  # volume points first, then surface
    np.save(d / "edge_index.npy", np.stack([np.arange(n - 1), np.arange(1, n)]))


@pytest.fixture
def car_root(tmp_path):
    for fold, names in FOLDS.items():
        for name in names:
            write_sample(tmp_path / f"param{fold}" / name, fold, ord(name[-1]) - ord("a"), 4 + fold)
    (tmp_path / "notes").mkdir()  # not a fold
    return tmp_path


def code(s):
    return int(s["x"][0, 0]) // 1000  # 10 fold + sample


def test_shapenet_car_fold0_is_test(car_root):
    test = load_shapenet_car(car_root, "test")
    train = load_shapenet_car(car_root, "train")
    assert [code(s) for s in test] == [0, 1]  # param0, sorted: car_a, car_b
    assert [code(s) for s in train] == [12, 23, 24]  # param1 then param2 (car_d, car_e)
    assert train.meta["folds"] == ["param1", "param2"] and test.meta["samples"] == [
        "param0/car_a",
        "param0/car_b",
    ]
    s = train[-1]
    assert set(s) == {"x", "y", "pos", "weights", "surf"}
    assert s["x"].shape == (6, 7) and s["y"].shape == (6, 4) and s["pos"].shape == (6, 3)
    assert s["x"][5, 6] == 24056 and s["y"][5, 3] == -24053 and s["pos"][2, 1] == 24021
    assert s["surf"].dtype == torch.bool and s["surf"].tolist() == [False] * 4 + [True] * 2
    torch.testing.assert_close(s["weights"], torch.full((6,), 1 / 6))
    assert all(s[k].dtype == torch.float32 for k in ("x", "y", "pos", "weights"))


def test_shapenet_car_other_fold_and_edges(car_root):
    test = load_shapenet_car(car_root, "test", fold_id=2, with_edges=True)
    assert [code(s) for s in test] == [23, 24]
    e = test[0]["edge_index"]
    assert e.dtype == torch.int64 and e.tolist() == [[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]
    assert [code(s) for s in load_shapenet_car(car_root, "train", fold_id=2)] == [0, 1, 12]


def test_shapenet_car_errors(car_root, tmp_path):
    with pytest.raises(FileNotFoundError, match="root"):
        load_shapenet_car(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"param5"):
        load_shapenet_car(car_root, "test", fold_id=5)
    with pytest.raises(ValueError, match="split"):
        load_shapenet_car(car_root, "val")
    (car_root / "param1" / "car_c" / "edge_index.npy").unlink()
    load_shapenet_car(car_root)  # edges are optional
    with pytest.raises(FileNotFoundError, match=r"param1/car_c/edge_index\.npy"):
        load_shapenet_car(car_root, with_edges=True)
    np.save(car_root / "param0" / "car_a" / "y.npy", np.zeros((3, 4), np.float32))  # 3 points vs 4
    ds = load_shapenet_car(car_root, "test")
    with pytest.raises(ValueError, match=r"car_a/y\.npy.*N = 4.*got \(3, 4\)"):
        ds[0]
    (car_root / "param0" / "car_b" / "surf.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"car_b/surf\.npy"):
        load_shapenet_car(car_root, "test")


# ------------------------------------------------------------------------------------ mini_car.pt


def bumpy_mesh(seed=0, nx=5, ny=4):
    """A jittered, non-planar triangulated grid: vertices, triangles and the exact barycentric vertex areas."""
    rng = np.random.default_rng(seed)
    ii, jj = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    xy = np.stack([ii, jj], -1).reshape(-1, 2) + rng.uniform(-0.2, 0.2, (nx * ny, 2))
    v = torch.tensor(np.c_[xy, 0.3 * np.sin(xy[:, 0]) * np.cos(xy[:, 1])])
    tris = []
    for i, j in itertools.product(range(nx - 1), range(ny - 1)):
        a, b, c, d = i * ny + j, (i + 1) * ny + j, (i + 1) * ny + j + 1, i * ny + j + 1
        tris += [(a, b, c), (a, c, d)]
    tri = torch.tensor(tris)[torch.from_numpy(rng.permutation(len(tris)))]
    p = v[tri]
    areas = 0.5 * torch.linalg.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]).norm(dim=1)
    exact = torch.zeros(len(v), dtype=torch.float64).index_add_(
        0, tri.reshape(-1), (areas / 3).repeat_interleave(3)
    )
    return v, tri, p.mean(1), areas, exact


def mini_car_dict(seed):
    v, _, centroids, areas, _ = bumpy_mesh(seed)
    n = len(v)
    return {
        "vertices": v.float(),
        "vertex_normals": torch.arange(3 * n, dtype=torch.float32).reshape(n, 3),
        "centroids": centroids.float(),
        "triangle_areas": areas.float(),
        "press": torch.arange(n, dtype=torch.float32)[None] + 100 * seed,
        "distance": torch.zeros(2, 2, 2, 1),
    }


def test_vertex_areas_recover_barycentric_areas():
    v, _, centroids, areas, exact = bumpy_mesh()
    w, unmatched = vertex_areas_from_centroids(v, centroids, areas, ks=(3, 8))
    assert unmatched == 0
    torch.testing.assert_close(w, exact)
    centroids[0] += 0.3  # no triple of vertices has this mean: its area goes to the 3 nearest vertices
    w, unmatched = vertex_areas_from_centroids(v, centroids, areas)
    assert (
        unmatched == 1 and (w >= 0).all() and math.isclose(float(w.sum()), float(areas.sum()), rel_tol=1e-12)
    )


def test_load_mini_car_fixture(tmp_path):
    path = tmp_path / "mini_car.pt"
    data = [mini_car_dict(0), mini_car_dict(1)]
    torch.save(data, path)
    ds = load_mini_car(path)
    assert len(ds) == 2 and ds.meta["unmatched_triangles"] == [0, 0]
    for d, s in zip(data, ds):
        assert s["x"].shape == (20, 6) and s["y"].shape == (20, 1) and s["weights"].shape == (20,)
        torch.testing.assert_close(s["x"], torch.cat([d["vertices"], d["vertex_normals"]], 1))
        torch.testing.assert_close(s["y"], d["press"].T)
        torch.testing.assert_close(s["pos"], d["vertices"])
    torch.testing.assert_close(ds[1]["weights"], bumpy_mesh(1)[4].float())


def test_load_mini_car_errors(tmp_path):
    path = tmp_path / "mini_car.pt"
    with pytest.raises(FileNotFoundError, match="mini_car.pt"):
        load_mini_car(path)
    bad = mini_car_dict(0)
    bad["press"] = bad["press"][:, :-1]
    torch.save([mini_car_dict(1), bad], path)
    with pytest.raises(ValueError, match=r"mini_car\.pt' sample 1 key 'press': expected shape \(1, 20\)"):
        load_mini_car(path)
    del bad["centroids"]
    torch.save([bad], path)
    with pytest.raises(ValueError, match="sample 0: expected a dict with keys"):
        load_mini_car(path)
    path.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="could not read"):
        load_mini_car(path)


@pytest.mark.skipif(not MINI_CAR.is_file(), reason=f"real mini_car.pt not found at {MINI_CAR}")
def test_real_mini_car():
    raw = torch.load(MINI_CAR, weights_only=True)
    ds = load_mini_car(MINI_CAR)
    assert len(ds) == len(raw) == 3
    for d, s in zip(raw, ds):
        n = d["vertices"].shape[0]
        assert s["x"].shape == (n, 6) and s["y"].shape == (n, 1) and s["pos"].shape == (n, 3)
        assert all(v.dtype == torch.float32 for v in s.values())
        assert torch.equal(s["y"], d["press"].T) and torch.equal(s["pos"], d["vertices"])
        assert (s["weights"] > 0).all()  # every vertex belongs to a recovered triangle
        # weights are accumulated in float64 and rounded once to float32 (relative error <= 2**-24 each),
        # so their float64 sum matches the float64 total triangle area to well within 1e-6
        total = float(d["triangle_areas"].double().sum())
        assert math.isclose(float(s["weights"].double().sum()), total, rel_tol=1e-6)
    assert ds.meta["unmatched_triangles"] == [0, 0, 0]
