"""Time series from neuraloperator's ``.pt`` trajectories (``t_in``, ``t_out``, ``time_stride``, ``dt`` from the
Burgers files' documented span), the grid nodes the readers record (against neuraloperator's grid and FNO's Darcy
node grid), and the ``.mat`` layout that cannot be told from a file (refused, ``mat_layout`` sets it)."""

from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from sciattn.pde_data import load
from sciattn.pde_data.fno_mat import load_fno_darcy
from sciattn.pde_data.neuralop_pt import load_neuralop_pt, write_neuralop_pt
from sciattn.train.run_metadata import collect_data_meta

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_fno_mat import write_v73  # noqa: E402


def neuralop_regular_grid(n: int, a: float = 0.0, b: float = 1.0) -> np.ndarray:
    """neuraloperator's ``regular_grid_nd`` on one axis: ``torch.linspace(a, b, n + 1)[:-1]`` (its GridEmbedding
    of the .pt datasets), transcribed."""
    return torch.linspace(a, b, n + 1)[:-1].double().numpy()


def _burgers_file(folder: Path, name: str = "burgers_train_16.pt", n: int = 5, t: int = 17) -> tuple[Path, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    traj = torch.randn(n, t, 16, generator=g, dtype=torch.float64)
    path = write_neuralop_pt(folder / name, traj[:, 0].clone(), traj, extra={"visc": torch.tensor([[0.01]])})
    return path, traj


def test_t_in_takes_the_frames_of_each_trajectory_and_the_documented_span(tmp_path):
    path, traj = _burgers_file(tmp_path)
    ds = load(path, t_in=1)
    assert ds.x.shape == (5, 1, 16) and ds.y.shape == (5, 16, 16)
    torch.testing.assert_close(ds.x[:, 0], traj[:, 0].float())
    torch.testing.assert_close(ds.y, traj[:, 1:].float())
    m = ds.meta
    assert m["time_series"] and m["t_in"] == 1 and m["t_out"] == 16 and m["variables"] == ["u"]
    assert m["dt"] == pytest.approx(0.06) and m["times"][-1] == pytest.approx(0.96)  # t in [0, 0.96], 17 frames
    ds = load(path, t_in=2, t_out=3, time_stride=2)  # frames 0, 2 -> 4, 6, 8
    torch.testing.assert_close(ds.x, traj[:, [0, 2]].float())
    torch.testing.assert_close(ds.y, traj[:, [4, 6, 8]].float())
    assert ds.meta["dt"] == pytest.approx(0.12) and ds.meta["time_steps"] == {"x": [0, 2], "y": [4, 8]}


def test_time_series_errors_name_the_option(tmp_path):
    path, traj = _burgers_file(tmp_path)
    with pytest.raises(ValueError, match=r"t_in, t_out: .* holds 17 frames, 9 at time_stride=2; expected t_in \+ "
                                         r"t_out <= 9 with t_out >= 1, got t_in=3, t_out=7"):
        load(path, t_in=3, t_out=7, time_stride=2)
    with pytest.raises(ValueError, match="time_stride: applies to a time series; set t_in"):
        load(path, time_stride=2)
    other = write_neuralop_pt(tmp_path / "traj.pt", traj[:, 1].clone(), traj)
    with pytest.raises(ValueError, match=r"t_in: expected y\[:, 0\] == x"):
        load_neuralop_pt(other, t_in=1)
    # a file whose time step is not documented: no dt unless the dt argument gives it
    plain = write_neuralop_pt(tmp_path / "series.pt", traj[:, 0].clone(), traj)
    assert "dt" not in load_neuralop_pt(plain, t_in=1).meta
    assert load_neuralop_pt(plain, t_in=1, time_stride=4, dt=0.5).meta["dt"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="dt: expected a positive finite number"):
        load_neuralop_pt(plain, t_in=1, dt=-1.0)


def test_recorded_nodes_match_neuraloperators_grid_and_fnos_walls(tmp_path):
    from sciattn.train.surrogate import Surrogate

    path, _ = _burgers_file(tmp_path)
    ds = load(path)
    meta = collect_data_meta(ds)
    assert meta["domain"]["endpoint"] is False and meta["domain"]["bounds"] == [[0.0, 1.0]]
    model = torch.nn.Identity()
    for n in (16, 32):
        coords = Surrogate(model, spatial_dims=1, domain=meta["domain"]).domain_coords([n])[0]
        np.testing.assert_allclose(coords, neuralop_regular_grid(n), atol=1e-7)
    # FNO's Darcy .mat: a node grid holding both Dirichlet walls, x_i = i / (r - 1)
    s = 9
    write_v73(tmp_path / "darcy.mat", {"coeff": np.ones((4, s, s)), "sol": np.zeros((4, s, s))})
    darcy = load_fno_darcy(tmp_path / "darcy.mat", resolution=5)
    dmeta = collect_data_meta(darcy)
    assert dmeta["domain"]["endpoint"] is True and dmeta["domain"]["periodic"] == [False, False]
    coords = Surrogate(model, spatial_dims=2, domain=dmeta["domain"]).domain_coords([5, 5])
    for c in coords:
        np.testing.assert_allclose(c, np.linspace(0, 1, 5))


def test_the_real_darcy_files_have_the_wall_at_0_as_a_node_and_not_the_one_at_1(shared_data):
    """The evidence for ``endpoint: False`` on neuraloperator's files: the Dirichlet solution is ~0 on the first
    row and column only (the last ones are interior-like), as on the nodes i / n."""
    y = torch.load(shared_data / "darcy_train_16.pt", weights_only=True)["y"].double()
    interior = float(y[:, 1:-1, 1:-1].abs().mean())
    assert float(y[:, 0].abs().mean()) < 0.01 * interior and float(y[:, :, 0].abs().mean()) < 0.01 * interior
    assert float(y[:, -1].abs().mean()) > 0.2 * interior and float(y[:, :, -1].abs().mean()) > 0.2 * interior


def test_the_real_burgers_file_is_a_time_series_with_dt_006(shared_data):
    ds = load(shared_data / "burgers_train_16.pt", t_in=1)
    assert ds.x.shape == (800, 1, 16) and ds.y.shape == (800, 16, 16)
    assert ds.meta["dt"] == pytest.approx(0.06) and ds.meta["variables"] == ["u"]
    raw = torch.load(shared_data / "burgers_train_16.pt", weights_only=True)
    torch.testing.assert_close(ds.y[:, -1], raw["y"][:, 16].float())


def _c_order_v73(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """A v7.3 file whose datasets carry MATLAB_class but are stored in C order (not reversed)."""
    with h5py.File(path, "w", userblock_size=512) as f:
        for name, arr in arrays.items():
            f.create_dataset(name, data=arr).attrs["MATLAB_class"] = np.bytes_("double")
    with open(path, "r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, HDF5 schema 1.00 .".ljust(128, b" "))
    return path


def test_a_layout_the_file_cannot_tell_is_refused_and_mat_layout_sets_it(tmp_path):
    n = s = 9  # N = s: the stored shape (9, 9, 9) reads the same in both axis orders
    coeff = np.arange(n * s * s, dtype=np.float64).reshape(n, s, s)
    path = _c_order_v73(tmp_path / "darcy.mat", {"coeff": coeff, "sol": coeff + 1})
    with pytest.raises(ValueError, match=r"mat_layout: .* variable 'coeff' has the HDF5 shape \(9, 9, 9\), which "
                                         r"reads the same .* pass mat_layout='matlab' .* or mat_layout='c'"):
        load(path)
    ds = load_fno_darcy(path, mat_layout="c", n_samples=n)
    np.testing.assert_array_equal(ds.x[:, 0].numpy(), coeff.astype(np.float32))
    swapped = load_fno_darcy(path, mat_layout="matlab", n_samples=n)  # told the other order: read reversed
    np.testing.assert_array_equal(swapped.x[:, 0].numpy(), coeff.transpose().astype(np.float32))
    # a MATLAB-written file whose shape tells the order reads as before
    ok = write_v73(tmp_path / "ok.mat", {"coeff": coeff[:4], "sol": coeff[:4]})
    np.testing.assert_array_equal(load(ok).x[:, 0].numpy(), coeff[:4].astype(np.float32))


def test_every_time_dependent_reader_gives_dt_for_its_stride(tmp_path):
    """FNO's Navier-Stokes .mat (dt from its t variable), PDEBench (its t-coordinate) and The Well (its time
    grid): ``dt`` is the time between the frames taken, so a time stride multiplies it."""
    from test_pdebench import write_single
    from test_the_well import write_well

    from sciattn.pde_data.fno_mat import load_fno_navier_stokes
    from sciattn.pde_data.pdebench import PDEBenchWindowDataset
    from sciattn.pde_data.the_well import TheWellDataset

    u = np.random.default_rng(0).standard_normal((6, 4, 4, 7))
    p = write_v73(tmp_path / "ns.mat", {"a": u[..., 0], "u": u, "t": 0.5 * np.arange(1, 8.0)})
    ds = load_fno_navier_stokes(p, t_in=2, t_out=2, time_stride=2, n_train=4, n_test=2)
    np.testing.assert_array_equal(ds.x.numpy(), u[:4][..., [0, 2]].transpose(0, 3, 1, 2).astype(np.float32))
    np.testing.assert_array_equal(ds.y.numpy(), u[:4][..., [4, 6]].transpose(0, 3, 1, 2).astype(np.float32))
    assert ds.meta["dt"] == pytest.approx(1.0) and ds.meta["time_stride"] == 2
    with pytest.raises(ValueError, match=r"t_in, t_out: expected t_in \+ t_out <= T = 4 .* taken every 2"):
        load_fno_navier_stokes(p, t_in=3, t_out=2, time_stride=2, n_train=4, n_test=2)
    single = PDEBenchWindowDataset(write_single(tmp_path / "adv.hdf5"), t_in=1, t_out=1, time_stride=2)
    assert single.meta["dt"] == pytest.approx(0.8)  # t-coordinate linspace(0, 2, 6), every second frame
    well = TheWellDataset(write_well(tmp_path / "well.hdf5"), n_steps_input=1, n_steps_output=1, time_stride=2)
    t = np.asarray(well.meta["coordinates"]["time"], dtype=np.float64).reshape(-1)
    assert well.meta["dt"] == pytest.approx(2 * (t[1] - t[0]))
