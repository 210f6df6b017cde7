"""``load`` by name and by path, the registry table, and ``sciattn data`` commands."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import scipy.io
import torch

from sciattn.pde_data import BENCHMARKS, list_benchmarks, load
from sciattn.pde_data.neuralop_pt import write_neuralop_pt
from sciattn.train.cli import main


def test_every_benchmark_documents_source_split_and_shapes():
    assert {"darcy", "darcy_pt", "fno_darcy", "fno_burgers", "fno_navier_stokes_1e-5"} <= set(BENCHMARKS)
    for b in list_benchmarks():
        assert b.source and b.files and b.split and b.shapes


def test_data_list_prints_every_benchmark(capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for b in list_benchmarks():
        assert f"| {b.name} |" in out


def test_pt_by_path_and_resolution_is_a_slice(tmp_path):
    x = torch.rand(6, 16, 16) > 0.5
    y = torch.arange(6 * 256, dtype=torch.float32).reshape(6, 16, 16)
    path = write_neuralop_pt(tmp_path / "darcy_test_16.pt", x, y)
    ds = load(path, resolution=8)
    assert torch.equal(ds.y[:, 0], y[:, ::2, ::2])
    with pytest.raises(ValueError, match=r"resolution: .* expected one of \[1, 2, 4, 8, 16\], got 5"):
        load(path, resolution=5)


def test_named_neuralop_darcy_reads_the_split_files(tmp_path):
    for split, n in (("train", 5), ("test", 3)):
        write_neuralop_pt(tmp_path / f"darcy_{split}_16.pt", torch.zeros(n, 16, 16, dtype=torch.bool),
                          torch.full((n, 16, 16), float(n)))
    assert len(load("darcy_pt", split="train", root=tmp_path)) == 5
    test = load("darcy_pt", split="test", root=tmp_path)
    assert len(test) == 3 and float(test[0]["y"][0, 0, 0]) == 3.0


def test_mat_files_dispatch_on_their_keys(tmp_path):
    n, s = 4, 9
    coeff = np.arange(n * s * s, dtype=np.float64).reshape(n, s, s)
    scipy.io.savemat(tmp_path / "piececonst_r421_N1024_smooth2.mat", {"coeff": coeff, "sol": -coeff})
    ds = load(tmp_path / "piececonst_r421_N1024_smooth2.mat", split="test", resolution=5)
    assert ds.x.shape == (4, 1, 5, 5)
    np.testing.assert_array_equal(ds.y[:, 0].numpy(), -coeff[:, ::2, ::2])
    scipy.io.savemat(tmp_path / "other.mat", {"q": coeff})
    with pytest.raises(ValueError, match="match no FNO benchmark"):
        load(tmp_path / "other.mat")


def test_hdf5_dispatches_to_pdebench(tmp_path):
    path = tmp_path / "1D_Advection.hdf5"
    with h5py.File(path, "w") as fh:
        fh["tensor"] = np.arange(10 * 4 * 8, dtype=np.float32).reshape(10, 4, 8)
        fh["x-coordinate"] = np.linspace(0, 1, 8)
        fh["t-coordinate"] = np.linspace(0, 1, 5)
    test = load(path, split="test", t_in=1, t_out=1)
    assert torch.equal(test[0]["x"][0], torch.arange(8, dtype=torch.float32))  # test = first 10%: sample 0


def test_generated_darcy_by_name_is_cached_and_split(tmp_path):
    train = load("darcy", split="train", resolution=16, root=tmp_path, n_train=4, n_test=2, progress=False)
    test = load("darcy", split="test", resolution=16, root=tmp_path, n_train=4, n_test=2, progress=False)
    assert len(train) == 4 and len(test) == 2
    assert not torch.equal(train[0]["y"], test[0]["y"])
    assert len(list((tmp_path / "generated").glob("*.h5"))) == 1


def test_generate_command_writes_what_load_reads(tmp_path, capsys):
    assert main(["data", "generate", "darcy", "--n", "3", "--resolution", "16", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    ds = load(tmp_path / "darcy_16.nc")
    assert len(ds) == 3 and ds[0]["x"].shape == (1, 16, 16)
    assert set(np.unique(ds[2]["x"].numpy())) <= {3.0, 12.0}
    assert ds.meta["attrs"]["pde"] == "darcy"


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match=r"expected a registered benchmark, one of \["):
        load("darcy_flow")
    with pytest.raises(ValueError, match="split: expected one of"):
        load("darcy", split="valid")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"12345678")
    with pytest.raises(ValueError, match="could not tell the format of .*junk.bin"):
        load(junk)
    with pytest.raises(FileNotFoundError, match="piececonst_r421_N1024_smooth1.mat"):
        load("fno_darcy", root=tmp_path)


def test_generated_burgers_and_navier_stokes_round_trip(tmp_path):
    assert main(["data", "generate", "burgers", "--n", "2", "--resolution", "64", "--out", str(tmp_path),
                 "--param", "dt=1e-3", "--no-progress"]) == 0
    ds = load(tmp_path / "burgers_64.nc")
    assert ds[1]["x"].shape == (1, 64) and ds.meta["attrs"]["dt"] == 1e-3
    ns = load("navier_stokes", split="test", resolution=16, root=tmp_path, n_train=2, n_test=1, t_in=2,
              t_final=0.4, dt=0.01, record_steps=4, progress=False)
    assert len(ns) == 1 and ns[0]["x"].shape == (2, 16, 16) and ns[0]["y"].shape == (2, 16, 16)
    assert ns.meta["variables"]["y"] == ["w(t=3)", "w(t=4)"]


def test_named_nsforcing_files(tmp_path):
    write_neuralop_pt(tmp_path / "nsforcing_test_8.pt", torch.randn(2, 8, 8), torch.randn(2, 8, 8))
    ds = load("navier_stokes_pt", split="test", resolution=8, root=tmp_path)
    assert ds.x.shape == (2, 1, 8, 8)


def test_fetch_command_reports_unknown_names_and_manual_sources(tmp_path, capsys):
    assert main(["data", "fetch", "no_such_set", "--root", str(tmp_path)]) == 2
    assert "no_such_set" in capsys.readouterr().err
    assert main(["data", "fetch", "fno_burgers", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "burgers_data_R10.mat" in err and str(tmp_path) in err


def test_wrong_dtype_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "bad_test_4.pt"
    torch.save({"x": torch.zeros(2, 4, 4), "y": torch.zeros(2, 4, 4, dtype=torch.complex64)}, path)
    with pytest.raises(ValueError, match=r"bad_test_4.pt' key 'y': expected a real or bool tensor, got dtype"):
        load(path)


def test_generated_shallow_water_splits_are_disjoint_solver_pairs(tmp_path):
    from sciattn.pde_data.shallow_water import load_or_generate_shallow_water

    kw = dict(n_train=4, n_test=2, n_traj=1, traj_len=1)
    train = load("shallow_water", split="train", resolution=8, root=tmp_path, **kw)
    test = load("shallow_water", split="test", resolution=8, root=tmp_path, **kw)
    raw = load_or_generate_shallow_water(tmp_path / "generated", 6, nlat=8, nlon=16, n_traj=1, traj_len=1)
    assert len(train) == 4 and len(test) == 1 + 1 and train[0]["x"].shape == (3, 8, 16)
    assert torch.equal(test[1]["y"], torch.as_tensor(raw["y"][5]))
    assert not torch.equal(train[0]["x"], test[0]["x"])
