"""run_metadata: what a run records about its data, and reading it back from new and old checkpoints."""

from __future__ import annotations

import json

import pytest
import torch

from sciattn.operators import create_operator
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.normalizers import fit_normalizers
from sciattn.train import Trainer, collect_data_meta, read_data_meta
from sciattn.train.checkpoint import load_checkpoint, save_checkpoint
from sciattn.train.data_stats import dataset_statistics


def _grid(meta=None, n=6, c_in=2, c_out=1, shape=(8, 8), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c_in, *shape, generator=g) * 4 - 1
    y = torch.randn(n, c_out, *shape, generator=g) * 0.5 + 3
    return GridPairDataset(x, y, meta)


def test_grid_metadata_from_the_dataset_meta():
    meta = {"source": "/data/ns.nc", "name": "navier_stokes", "variables": {"x": ["u", "v"], "y": ["w"]},
            "dt": 0.25, "time_series": True, "t_in": 2, "split": "train",
            "stored_dtypes": {"x": "torch.bool", "y": "torch.float32"}}
    ds = _grid(meta)
    out = collect_data_meta(ds)
    assert json.loads(json.dumps(out)) == out  # plain JSON
    assert out["variables"] == {"x": ["u", "v"], "y": ["w"]} and out["dt"] == 0.25
    assert out["domain"] == {"kind": "grid", "shape": [8, 8], "bounds": [[0.0, 1.0], [0.0, 1.0]],
                             "periodic": [True, True]}  # the built-in Navier-Stokes lives on the torus
    assert out["source"] == {"source": "/data/ns.nc", "name": "navier_stokes"}
    assert out["train_resolution"] == [8, 8] and out["time_series"] is True and out["t_in"] == 2
    assert out["input_dtype"] == "bool"  # what the file held before the float32 cast (export's default)
    # Statistics are the data-stats module's, and they are the data's values (not placeholders).
    assert out["statistics"] == dataset_statistics(ds)
    assert out["statistics"]["x"]["min"][0] == pytest.approx(float(ds.x[:, 0].min()))
    assert out["statistics"]["y"]["mean"][0] == pytest.approx(float(ds.y.double().mean()), rel=1e-9)


def test_dt_from_times_or_a_time_coordinate_and_bounds_from_coordinates():
    nodes = [0.5 + 0.25 * i for i in range(8)]  # uniform nodes a + (b - a) i / n on [0.5, 2.5]
    meta = {"coords": {"x": nodes, "y": nodes, "time": [1.0, 1.5, 2.0]}, "variables": {"x": ["a"], "y": ["b"]}}
    out = collect_data_meta(_grid(meta, c_in=1))
    assert out["dt"] == pytest.approx(0.5)
    assert out["domain"]["dims"] == ["x", "y"] and out["domain"]["bounds"] == [[0.5, 2.5], [0.5, 2.5]]
    assert out["domain"]["periodic"] is None  # nobody said
    assert collect_data_meta(_grid({"times": [0.0, 0.1, 0.3]}))["domain"]["kind"] == "grid"
    assert "dt" not in collect_data_meta(_grid({"times": [0.0, 0.1, 0.3]}))  # not uniform: no dt
    # names that do not match the channel counts are not recorded (e.g. neuraloperator's {"x": "x"})
    assert "variables" not in collect_data_meta(_grid({"variables": {"x": "x", "y": "y"}}))


def test_sphere_point_cloud_and_extra():
    sphere = collect_data_meta(_grid({"grid": "legendre-gauss"}, shape=(6, 12)))
    assert sphere["domain"] == {"kind": "sphere", "grid": "legendre-gauss", "nlat": 6, "nlon": 12}

    class Points(torch.utils.data.Dataset):
        meta = {"domain": "unit square", "variables": {"x": ["a"], "y": ["p", "q"]}}

        def __len__(self):
            return 3

        def __getitem__(self, i):
            return {"x": torch.full((10, 1), float(i)), "y": torch.zeros(10, 2), "pos": torch.rand(10, 2)}

    pts = collect_data_meta(Points(), source="mine", extra={"dt": 2.0, "domain": {"periodic": False}})
    assert pts["domain"] == {"kind": "point_cloud", "dim": 2, "n_points": 10, "name": "unit square",
                             "periodic": False}
    assert pts["variables"] == {"x": ["a"], "y": ["p", "q"]} and pts["source"] == "mine" and pts["dt"] == 2.0
    assert pts["train_resolution"] == [10] and pts["statistics"]["layout"] == "points"
    assert pts["statistics"]["x"]["max"] == [2.0]


def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="extra: expected a mapping"):
        collect_data_meta(_grid(), extra=[("dt", 1)])
    with pytest.raises(TypeError, match="data_meta: expected plain JSON"):
        collect_data_meta(_grid(), extra={"dt": object()})
    with pytest.raises(ValueError, match="data_meta: expected 'dt' to be a positive finite number, got -1"):
        collect_data_meta(_grid(), extra={"dt": -1})
    with pytest.raises(ValueError, match="train_data: expected at least one sample"):
        collect_data_meta(GridPairDataset(torch.zeros(0, 1, 4, 4), torch.zeros(0, 1, 4, 4)))
    with pytest.raises(ValueError, match="data_meta: expected a JSON object"):
        read_data_meta({"data_meta": "{not json", "run_config": "{}", "metrics": "{}"})


def _model(c_in=2, c_out=1):
    return create_operator("galerkin_transformer", in_channels=c_in, out_channels=c_out, d_model=8, n_layers=1,
                           n_heads=2, regressor_width=8, n_modes=2)


def test_trainer_stores_the_metadata_in_the_checkpoint_and_merges_data_meta(tmp_path):
    meta = {"name": "darcy", "variables": {"x": ["k", "f"], "y": ["p"]}, "source": "generated"}
    ds = _grid(meta)
    xn, yn = fit_normalizers(ds)
    tr = Trainer(model=_model(), train_data=ds, test_data={}, x_normalizer=xn, y_normalizer=yn, spatial_dims=2,
                 epochs=1, batch_size=3, run_dir=tmp_path, progress=False, log=lambda m: None,
                 data_meta={"source": {"kind": "file", "path": "/x.pt"}, "dt": 0.1, "domain": {"periodic": [True, False]}})
    tr.fit()
    state = load_checkpoint(tmp_path)  # weights_only=True
    assert isinstance(state["data_meta"], str)
    got = read_data_meta(state, tmp_path)
    assert got["variables"] == {"x": ["k", "f"], "y": ["p"]} and got["dt"] == 0.1
    assert got["source"] == {"kind": "file", "path": "/x.pt"}  # the given source wins over the dataset's
    assert got["domain"]["periodic"] == [True, False] and got["domain"]["bounds"] == [[0.0, 1.0], [0.0, 1.0]]
    assert got["statistics"] == dataset_statistics(ds) and got["train_resolution"] == [8, 8]
    # The normalisers are stored too: the checkpoint has everything a later step needs.
    assert state["x_normalizer"]["kind"] == "unit_gaussian"
    torch.testing.assert_close(state["x_normalizer"]["mean"], xn.mean.cpu())


def test_old_checkpoints_fall_back_to_what_they_recorded(tmp_path):
    model = _model(1, 1)
    ds = _grid(c_in=1)
    xn, yn = fit_normalizers(ds)
    save_checkpoint(tmp_path / "checkpoint.pt", model=model, x_normalizer=xn, y_normalizer=yn,
                    metrics={"meta": {"variables": {"x": ["a"], "y": ["b"]}, "dt": 0.5}, "train_resolution": [8, 8]})
    state = load_checkpoint(tmp_path)
    del state["data_meta"]  # as written before data_meta existed
    assert read_data_meta(state, tmp_path) == {"variables": {"x": ["a"], "y": ["b"]}, "dt": 0.5,
                                               "train_resolution": [8, 8]}
    # darcy_solver runs are known to map coefficient to pressure
    old = {"run_config": json.dumps({"data": {"format": "darcy_solver", "train_resolution": 16}}), "metrics": "{}"}
    assert read_data_meta(old) == {"variables": {"x": ["coefficient"], "y": ["pressure"]}, "train_resolution": [16, 16]}
    with pytest.raises(TypeError, match="data_meta: expected plain JSON data"):
        save_checkpoint(tmp_path / "c2.pt", model=model, x_normalizer=xn, y_normalizer=yn, data_meta={"a": {1, 2}})
