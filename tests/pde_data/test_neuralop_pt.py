from pathlib import Path

import pytest
import torch

from sciattn.pde_data.neuralop_pt import (
    load_neuralop_pt,
    load_neuralop_split,
    neuralop_pt_path,
    parse_neuralop_name,
    write_neuralop_pt,
)

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def write_fixture(root: Path, name="darcy", split="train", res=8, n=6, spatial=(8, 8), seed=0):
    """Write a file in neuraloperator's exact on-disk schema: channel-squeezed, bool x, float32 y."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, *spatial, generator=g) > 0.5
    y = torch.randn(n, *spatial, generator=g, dtype=torch.float32)
    path = root / f"{name}_{split}_{res}.pt"
    torch.save({"x": x, "y": y}, path)
    return path, x, y


# ---------------------------------------------------------------- reading


@pytest.mark.parametrize("spatial", [(8,), (8, 8)])
def test_round_trip_values(tmp_path, spatial):
    path, x, y = write_fixture(tmp_path, spatial=spatial)
    ds = load_neuralop_pt(path)
    assert ds.x.shape == (6, 1, *spatial) and ds.y.shape == (6, 1, *spatial)
    assert ds.x.dtype == torch.float32 and ds.y.dtype == torch.float32
    assert torch.equal(ds.x, x[:, None].float())
    assert torch.equal(ds.y, y[:, None])
    assert ds.resolution == spatial
    for i in (0, -1):  # first and last sample
        assert torch.equal(ds[i]["x"][0], x[i].float())
        assert torch.equal(ds[i]["y"][0], y[i])


def test_bool_x_becomes_zero_one(tmp_path):
    path, x, _ = write_fixture(tmp_path)
    ds = load_neuralop_pt(path)
    assert set(ds.x.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(ds.x[:, 0] == 1.0, x)


def test_n_samples_takes_first(tmp_path):
    path, x, y = write_fixture(tmp_path, n=6)
    ds = load_neuralop_pt(path, n_samples=3)
    assert len(ds) == 3
    assert torch.equal(ds.y[:, 0], y[:3])
    assert torch.equal(ds.x[-1, 0], x[2].float())
    with pytest.raises(ValueError, match="n_samples: expected at most 6"):
        load_neuralop_pt(path, n_samples=7)


def test_meta_from_file_name(tmp_path):
    path, _, _ = write_fixture(tmp_path, name="my_pde", split="test", res=8)
    ds = load_neuralop_pt(path)
    assert ds.meta["source"] == str(path)
    assert (ds.meta["name"], ds.meta["split"], ds.meta["resolution"]) == ("my_pde", "test", 8)
    assert ds.meta["stored_dtypes"] == {"x": "torch.bool", "y": "torch.float32"}


def test_extra_keys_ignored_and_explicit_channels(tmp_path):
    x = torch.randn(3, 2, 5)
    y = torch.randn(3, 4, 5, dtype=torch.float64)
    path = tmp_path / "a_train_5.pt"
    torch.save({"x": x, "y": y, "visc": torch.tensor([[0.01]])}, path)
    ds = load_neuralop_pt(path, channel_squeezed=False)
    assert ds.in_channels == 2 and ds.out_channels == 4 and ds.resolution == (5,)
    assert torch.equal(ds.x, x) and torch.equal(ds.y, y.float())


def test_per_key_channel_flag(tmp_path):
    x = torch.randn(3, 5)
    y = torch.randn(3, 4, 5)
    path = tmp_path / "b_train_5.pt"
    torch.save({"x": x, "y": y}, path)
    ds = load_neuralop_pt(path, channel_squeezed=(True, False))
    assert ds.x.shape == (3, 1, 5) and ds.y.shape == (3, 4, 5)
    assert torch.equal(ds.x[:, 0], x) and torch.equal(ds.y, y)


def test_split_helpers(tmp_path):
    path, _, y = write_fixture(tmp_path, name="darcy", split="test", res=8)
    assert neuralop_pt_path(tmp_path, "darcy", "test", 8) == path
    assert torch.equal(load_neuralop_split(tmp_path, "darcy", "test", 8, n_samples=2).y[:, 0], y[:2])
    with pytest.raises(ValueError, match="split: expected one of"):
        neuralop_pt_path(tmp_path, "darcy", "val", 8)
    with pytest.raises(ValueError, match="resolution"):
        neuralop_pt_path(tmp_path, "darcy", "train", 0)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("darcy_train_16.pt", ("darcy", "train", 16)),
        ("/a/b/navier_stokes_test_128.pt", ("navier_stokes", "test", 128)),
        ("darcy_val_16.pt", None),
        ("darcy_train_16.h5", None),
        ("darcy_train.pt", None),
    ],
)
def test_parse_name(name, expected):
    assert parse_neuralop_name(name) == expected


# ---------------------------------------------------------------- writing


@pytest.mark.parametrize("spatial", [(9,), (4, 5)])
def test_writer_schema_and_round_trip(tmp_path, spatial):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(3, *spatial, generator=g) > 0.5
    y = torch.randn(3, *spatial, generator=g)
    path = write_neuralop_pt(tmp_path / "sub" / f"gen_train_{spatial[-1]}.pt", x, y)
    raw = torch.load(path, weights_only=True, map_location="cpu")
    assert set(raw) == {"x", "y"}
    assert raw["x"].dtype == torch.bool and raw["y"].dtype == torch.float32
    assert torch.equal(raw["x"], x) and torch.equal(raw["y"], y)
    ds = load_neuralop_pt(path)
    assert torch.equal(ds.x, x[:, None].float()) and torch.equal(ds.y, y[:, None])
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind


def test_writer_replaces_and_saves_slices_compactly(tmp_path):
    path = tmp_path / "gen_test_4.pt"
    write_neuralop_pt(path, torch.zeros(2, 4), torch.zeros(2, 4))
    big = torch.randn(100, 2, 4)
    write_neuralop_pt(path, big[:3, 0], big[:3, 1], extra={"visc": torch.tensor([[0.5]])})
    raw = torch.load(path, weights_only=True)
    assert torch.equal(raw["y"], big[:3, 1]) and raw["visc"].item() == 0.5
    assert raw["x"].untyped_storage().nbytes() == 3 * 4 * 4  # not the whole 100-sample storage


def test_writer_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="same number of samples"):
        write_neuralop_pt(tmp_path / "a_train_4.pt", torch.zeros(2, 4), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="NaN"):
        write_neuralop_pt(tmp_path / "a_train_4.pt", torch.zeros(2, 4), torch.full((2, 4), float("nan")))
    with pytest.raises(TypeError, match="y: expected a floating tensor"):
        write_neuralop_pt(tmp_path / "a_train_4.pt", torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.bool))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- errors


def test_missing_file_names_path(tmp_path):
    path = tmp_path / "nope_train_16.pt"
    with pytest.raises(FileNotFoundError) as info:
        load_neuralop_pt(path)
    assert str(path) in str(info.value)


def test_corrupt_file_names_path(tmp_path):
    path = tmp_path / "bad_train_16.pt"
    path.write_bytes(b"\x00\x01garbage, not a torch file" * 10)
    with pytest.raises(ValueError, match="could not read .* as a torch .pt file") as info:
        load_neuralop_pt(path)
    assert str(path) in str(info.value)


def test_not_a_dict(tmp_path):
    path = tmp_path / "list_train_4.pt"
    torch.save([torch.zeros(2, 4)], path)
    with pytest.raises(ValueError, match="hold a dict") as info:
        load_neuralop_pt(path)
    assert str(path) in str(info.value)


def test_missing_key_names_key_and_keys_found(tmp_path):
    path = tmp_path / "nokey_train_4.pt"
    torch.save({"x": torch.zeros(2, 4), "u": torch.zeros(2, 4)}, path)
    with pytest.raises(ValueError) as info:
        load_neuralop_pt(path)
    msg = str(info.value)
    assert str(path) in msg and "'y'" in msg and "['u', 'x']" in msg


def test_sample_count_mismatch(tmp_path):
    path = tmp_path / "n_train_4.pt"
    torch.save({"x": torch.zeros(5, 4, dtype=torch.bool), "y": torch.zeros(4, 4)}, path)
    with pytest.raises(ValueError, match="same number of samples") as info:
        load_neuralop_pt(path)
    assert str(path) in str(info.value) and "(5, 4)" in str(info.value)


def test_non_finite_y(tmp_path):
    path = tmp_path / "nan_train_4.pt"
    y = torch.zeros(3, 4)
    y[2, 1] = float("inf")
    torch.save({"x": torch.zeros(3, 4, dtype=torch.bool), "y": y}, path)
    with pytest.raises(ValueError, match="1 Inf") as info:
        load_neuralop_pt(path)
    assert str(path) in str(info.value)
    assert len(load_neuralop_pt(path, n_samples=2)) == 2  # the bad sample is not loaded


def test_spatial_mismatch_suggests_channel_flag(tmp_path):
    path = tmp_path / "burg_train_4.pt"
    torch.save({"x": torch.zeros(3, 4), "y": torch.zeros(3, 5, 4)}, path)
    with pytest.raises(ValueError, match="channel_squeezed") as info:
        load_neuralop_pt(path)
    assert str(path) in str(info.value)


# ---------------------------------------------------------------- real data


def _shared(name):
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"real benchmark file {path} is absent (shared data folder not mounted)")
    return path


@pytest.mark.parametrize("split, n", [("train", 1000), ("test", 50)])
def test_real_darcy(split, n):
    path = _shared(f"darcy_{split}_16.pt")
    raw = torch.load(path, weights_only=True, map_location="cpu")
    ds = load_neuralop_split(path.parent, "darcy", split, 16)
    assert ds.x.shape == (n, 1, 16, 16) and ds.y.shape == (n, 1, 16, 16)
    assert ds.x.dtype == torch.float32 and ds.y.dtype == torch.float32
    assert set(ds.x.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(ds.x, raw["x"][:, None].float())
    assert torch.equal(ds.y, raw["y"][:, None])
    assert ds.meta["split"] == split and ds.meta["resolution"] == 16


def test_real_burgers_time_as_channels():
    path = _shared("burgers_train_16.pt")
    raw = torch.load(path, weights_only=True, map_location="cpu")
    ds = load_neuralop_pt(path, channel_squeezed=(True, False))
    assert ds.x.shape == (800, 1, 16) and ds.y.shape == (800, 17, 16)
    assert torch.equal(ds.y, raw["y"].float())
    assert torch.equal(ds.y[:, :1], ds.x)  # y[:, 0] is the initial condition
