"""Surrogate: NumPy / torch / xarray in and out, time stepping and rollouts of a tiny trained run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import xarray as xr
from torch import nn

from sciattn.train.checkpoint import load_model, save_checkpoint
from sciattn.train.cli import main
from sciattn.train.surrogate import NonFiniteStateError, Surrogate


@pytest.fixture(scope="module")
def run(tiny_darcy):
    root, cfg = tiny_darcy("surrogate")
    assert main(["train", str(cfg), "--out", str(root / "run"), "--no-progress"]) == 0
    return root / "run"


@pytest.fixture(scope="module")
def sur(run):
    return Surrogate.from_run(run)


def direct(run, x: np.ndarray) -> np.ndarray:
    """The reference: decode(model(encode(x))) with the run's own objects, batched float32."""
    model, xn, yn, _ = load_model(run)
    with torch.no_grad():
        return yn.decode(model(xn.encode(torch.as_tensor(x, dtype=torch.float32)))).numpy()


def field(shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).uniform(0.0, 1.0, size=shape).astype(dtype)


def test_numpy_round_trip_batched_and_unbatched_matches_the_direct_pipeline(run, sur):
    x = field((3, 1, 8, 8))
    ref = direct(run, x)
    y = sur.predict(x)
    assert y.shape == (3, 1, 8, 8) and y.dtype == np.float64
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-6)
    y1 = sur.predict(x[1].astype(np.float32))
    assert y1.shape == (1, 8, 8) and y1.dtype == np.float32
    np.testing.assert_allclose(y1, ref[1], rtol=0, atol=1e-6)
    yb = sur.predict(x[0] > 0.5)  # a binary coefficient field, as in the training data
    assert yb.dtype == np.float32
    np.testing.assert_allclose(yb, direct(run, (x[:1] > 0.5).astype(np.float32))[0], atol=1e-6)


def test_torch_in_torch_out_other_resolution_and_no_grad(run, sur):
    x = torch.rand(2, 1, 16, 16, dtype=torch.float64)
    with torch.no_grad():
        y = sur(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float64 and y.shape == (2, 1, 16, 16)
    np.testing.assert_allclose(y.numpy(), direct(run, x.numpy()), atol=1e-6)
    assert not sur.model.training
    assert not sur(x[0]).requires_grad


def test_dataarray_keeps_nonuniform_coords_dims_order_attrs_and_names_the_output(run):
    recorded = Surrogate.from_run(run)  # the names the run recorded for its data (or in_0 / out_0)
    sur = Surrogate.from_run(run, output_names=["pressure"], output_units="kPa", spatial_dim_names=("y", "x"))
    x = field((2, 8, 8))
    ycoord = np.cumsum(np.linspace(0.1, 1.0, 8))  # non-uniform
    xcoord = np.sort(np.random.default_rng(1).uniform(0, 3, 8))
    da = xr.DataArray(
        x[:, None].transpose(3, 1, 0, 2),  # dims (x, channel, sample, y): any order
        dims=("x", "channel", "sample", "y"),
        coords={"x": xcoord, "y": ycoord, "sample": [10, 20], "channel": recorded.input_names,
                "area": (("x", "y"), np.ones((8, 8))), "run": "r1"},
        attrs={"units": "m^2", "source": "test"}, name="perm",
    )
    out = sur.predict(da)
    assert out.dims == da.dims
    assert list(out["channel"].values) == ["pressure"]
    for c in ("x", "y", "sample", "area", "run"):
        xr.testing.assert_identical(out[c].drop_vars("channel", errors="ignore"), da[c])
    assert out.attrs == {"units": "kPa", "source": "test"} and out.name == "pressure"
    ref = direct(run, x[:, None])
    np.testing.assert_allclose(out.transpose("sample", "channel", "y", "x").values, ref, atol=1e-6)
    # Without a channel dim: one channel in, one out, no channel dim back; input units are dropped.
    single = xr.DataArray(x[0], dims=("y", "x"), coords={"y": ycoord, "x": xcoord}, attrs={"units": "m^2"})
    out1 = recorded.predict(single)
    assert out1.dims == ("y", "x") and out1.name == recorded.output_names[0] and "units" not in out1.attrs
    np.testing.assert_array_equal(out1["y"].values, ycoord)
    np.testing.assert_allclose(out1.values, ref[0, 0], atol=1e-6)


def test_run_metadata_names_channels_and_sets_dt(run, tmp_path):
    model, xn, yn, state = load_model(run)
    meta = {"variables": {"x": ["coefficient"], "y": ["pressure"]}, "dt": 0.25}
    save_checkpoint(tmp_path / "checkpoint.pt", model=model, x_normalizer=xn, y_normalizer=yn,
                    run_config=json.loads(state["run_config"]), metrics={"meta": meta})
    sur = Surrogate.from_run(tmp_path)
    assert sur.input_names == ["coefficient"] and sur.output_names == ["pressure"] and sur.dt == 0.25
    da = xr.DataArray(field((1, 8, 8)), dims=("channel", "y", "x"), coords={"channel": ["coefficient"]})
    assert list(sur.predict(da)["channel"].values) == ["pressure"]
    with pytest.raises(ValueError, match=r"x: channel labels \['perm'\].*\['coefficient'\]"):
        sur.predict(da.assign_coords(channel=["perm"]))
    ds = xr.Dataset({"coefficient": (("y", "x"), field((8, 8)))}, coords={"x": np.arange(8.0)}, attrs={"case": 1})
    out = sur.predict(ds)
    assert list(out.data_vars) == ["pressure"] and out.attrs == {"case": 1}
    np.testing.assert_allclose(out["pressure"].values, direct(run, ds["coefficient"].values[None, None])[0, 0],
                               atol=1e-6)
    # dt: the operator's own step is fine, another is refused naming both.
    sur.step(da, dt=0.25)
    with pytest.raises(ValueError, match=r"dt: expected the operator's time step 0\.25, got 0\.5"):
        sur.step(da, dt=0.5)
    traj = sur.rollout(da.assign_coords(time=1.0), 2)
    assert traj.dims == ("time", "channel", "y", "x")
    np.testing.assert_allclose(traj["time"].values, [1.0, 1.25, 1.5])
    np.testing.assert_array_equal(traj["step"].values, [0, 1, 2])


def test_step_and_rollout(sur):
    x = field((1, 8, 8))
    np.testing.assert_array_equal(sur.step(x), sur.predict(x))  # C_in == C_out: a step is a prediction
    sur.step(x, dt=123.0)  # no time step known: dt is only checked to be a positive number
    traj = sur.rollout(x, 3)
    assert traj.shape == (4, 1, 8, 8) and traj.dtype == x.dtype
    np.testing.assert_array_equal(traj[0], x)
    s = x
    for k in range(1, 4):
        s = sur.step(s)
        np.testing.assert_allclose(traj[k], s, rtol=0, atol=1e-6)
    batched = sur.rollout(field((2, 1, 8, 8)), 2)
    assert batched.shape == (3, 2, 1, 8, 8)
    da = xr.DataArray(x[0], dims=("y", "x"), coords={"y": np.arange(8.0) ** 2}, attrs={"units": "m"}, name="u")
    dtraj = sur.rollout(da, 2)
    assert dtraj.dims == ("step", "y", "x") and dtraj.attrs == {"units": "m"} and dtraj.name == "u"
    np.testing.assert_allclose(dtraj.values, traj[:3, 0], atol=1e-6)
    assert sur.step(da).attrs == {"units": "m"}


class _Blowup(nn.Module):
    in_channels = out_channels = 1
    spatial_dims = 2

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(1e20))

    def forward(self, x):
        return x * self.scale


class _Window(nn.Module):
    """Two stacked past states in, the next state out."""

    in_channels, out_channels, spatial_dims = 2, 1, 2

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([-1.0, 2.0]))

    def forward(self, x):
        return (x * self.w[None, :, None, None]).sum(1, keepdim=True)


def test_rollout_stops_at_the_first_nonfinite_state():
    sur = Surrogate(_Blowup())
    with pytest.raises(NonFiniteStateError, match="non-finite at step 2 of 5") as info:
        sur.rollout(np.ones((1, 4, 4), np.float32), 5)
    assert info.value.step == 2 and info.value.trajectory.shape == (2, 1, 4, 4)


def test_step_with_a_window_of_past_states():
    sur = Surrogate(_Window())
    x = np.stack([np.zeros((3, 3)), np.ones((3, 3))])  # states at t-1, t
    traj = sur.rollout(x, 3)
    np.testing.assert_allclose(traj[:, 1, 0, 0], [1, 2, 3, 4])  # 2 u_t - u_{t-1}: a linear ramp


def test_errors_name_the_argument(sur):
    with pytest.raises(ValueError, match=r"x: expected 3 dims \(C, S0, S1\) or 4 dims .* got shape \(8, 8, 1, 1, 1\)"):
        sur.predict(np.zeros((8, 8, 1, 1, 1)))
    with pytest.raises(ValueError, match=r"x: expected 1 input channel\(s\)( \[.*\])?, got 2"):
        sur.predict(np.zeros((2, 8, 8)))
    bad = field((1, 8, 8))
    bad[0, 1, 2] = np.nan
    with pytest.raises(ValueError, match="x: expected finite values, got 1 NaN"):
        sur.predict(bad)
    with pytest.raises(ValueError, match="state: expected finite values"):
        sur.rollout(bad, 2)
    with pytest.raises(TypeError, match="x: expected a numpy.ndarray, torch.Tensor, xarray.DataArray or xarray.Dataset, got list"):
        sur.predict([[0.0]])
    with pytest.raises(TypeError, match="x: expected a real or bool array, got dtype complex128"):
        sur.predict(np.zeros((1, 8, 8), complex))
    with pytest.raises(ValueError, match=r"x: expected 2 spatial dims and at most one batch dim"):
        sur.predict(xr.DataArray(np.zeros((2, 2, 8, 8)), dims=("a", "b", "y", "x")))
    with pytest.raises(ValueError, match=rf"x: Dataset lacks input variable\(s\) \[{sur.input_names[0]!r}\]"):
        sur.predict(xr.Dataset({"a": (("y", "x"), np.zeros((8, 8)))}))
    with pytest.raises(ValueError, match="n_steps: expected a positive int, got 0"):
        sur.rollout(field((1, 8, 8)), 0)
    with pytest.raises(ValueError, match="dt: expected a positive finite real number, got -1.0"):
        sur.step(field((1, 8, 8)), dt=-1.0)
    with pytest.raises(TypeError, match="model: expected a torch.nn.Module, got str"):
        Surrogate("model")


class _AxisProbe(nn.Module):
    """Output = input + 10 * (index along the first spatial axis): shows which dim the operator saw as axis 0."""

    in_channels = out_channels = 1
    spatial_dims = 2

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return x * self.w + 10 * torch.arange(x.shape[2], dtype=x.dtype)[:, None]


def test_the_recorded_domain_gives_coordinates_and_spatial_dims():
    grid = {"kind": "grid", "shape": [4, 6], "bounds": [[0.0, 2.0], [-1.0, 1.0]], "dims": ["lat", "lon"]}
    sur = Surrogate(_AxisProbe(), domain=grid)
    np.testing.assert_allclose(sur.domain_coords((4, 3))[0], [0.0, 0.5, 1.0, 1.5])
    np.testing.assert_allclose(sur.domain_coords((4, 3))[1], [-1.0, -1 / 3, 1 / 3])
    # Stored as (lon, lat): the recorded dims put lat on the operator's first axis; coordinates are added.
    da = xr.DataArray(np.zeros((6, 4)), dims=("lon", "lat"), coords={"lon": np.arange(6.0) * 7})
    out = sur.predict(da)
    assert out.dims == ("lon", "lat")
    np.testing.assert_allclose(out.values, np.broadcast_to(10 * np.arange(4.0), (6, 4)))
    np.testing.assert_allclose(out["lat"].values, [0.0, 0.5, 1.0, 1.5])  # from the domain
    np.testing.assert_array_equal(out["lon"].values, np.arange(6.0) * 7)  # the input's own, kept
    # Without the recorded dims the last two dims are spatial in the input's order (lon first).
    plain = Surrogate(_AxisProbe(), domain={k: v for k, v in grid.items() if k != "dims"}).predict(da)
    np.testing.assert_allclose(plain.values, np.broadcast_to(10 * np.arange(6.0)[:, None], (6, 4)))
    sphere = Surrogate(_AxisProbe(), domain={"kind": "sphere", "grid": "equiangular", "nlat": 5, "nlon": 8})
    lat, lon = sphere.domain_coords((5, 8))
    np.testing.assert_allclose(lat, [90, 45, 0, -45, -90], atol=1e-9)
    np.testing.assert_allclose(lon, 45.0 * np.arange(8))
    with pytest.raises(TypeError, match="domain: expected a mapping"):
        Surrogate(_AxisProbe(), domain=[1, 2])


def test_dataarray_dims_it_would_have_to_guess_are_refused(run):
    """('x', 'y', 'sample') used to take x as the batch and return a wrongly labelled result: now the batch dim is
    taken only when it comes first under a batch name, or spatial_dim_names says which dims are spatial."""
    sur = Surrogate.from_run(run)
    x = field((3, 8, 8))  # (sample, x, y)
    da = xr.DataArray(x.transpose(1, 2, 0), dims=("x", "y", "sample"))
    with pytest.raises(ValueError, match=r"x: cannot tell the batch dim from the 2 spatial dims among dims "
                                         r"\('x', 'y', 'sample'\) .* pass spatial_dim_names="):
        sur.predict(da)
    named = Surrogate.from_run(run, spatial_dim_names=["x", "y"]).predict(da)
    assert named.dims == ("x", "y", "sample")
    np.testing.assert_allclose(named.transpose("sample", "x", "y").values, sur.predict(x[:, None])[:, 0], atol=1e-6)
    first = sur.predict(xr.DataArray(x, dims=("sample", "x", "y")))  # a batch name first: no guess needed
    np.testing.assert_allclose(first.values, named.transpose("sample", "x", "y").values, atol=1e-6)
