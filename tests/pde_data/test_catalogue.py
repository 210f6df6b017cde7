"""The dataset catalogue: a new file format is one record, and load, sciattn train and sciattn data list read it;
the older tables are views of the catalogue; no pde_data module imports sciattn.train."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from sciattn import pde_data
from sciattn.pde_data import catalogue
from sciattn.pde_data.catalogue import Record
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.train.cli import main

PDE_DATA = Path(__file__).resolve().parents[2] / "pde_data"
MAGIC = b"TOYGRID\n"


def load_toy(path, *, scale: float = 1.0) -> GridPairDataset:
    """The test's own format: ``TOYGRID\\n`` then JSON ``{"x": (N, r, r), "y": (N, r, r)}``."""
    data = json.loads(Path(path).read_bytes()[len(MAGIC):])
    x, y = (torch.tensor(data[k], dtype=torch.float32)[:, None] for k in ("x", "y"))
    return GridPairDataset(x, scale * y, {"source": "toy", "format": "toy_grid",
                                          "variables": {"x": ["a"], "y": ["u"]}})


def _open_toy(path, probe, split, resolution, split_rule, **options):
    from sciattn.pde_data.splits import split_indices

    ds = load_toy(path, **options)
    idx = torch.as_tensor(list(split_indices(len(ds), split, split_rule, what=repr(str(path)))), dtype=torch.long)
    return GridPairDataset(ds.x[idx], ds.y[idx], {**ds.meta, "split": split})


@pytest.fixture
def toy_format():
    record = catalogue.register(Record(
        "toy_grid", "a format defined inside a test", "*.toy", "single-split", "x (1, r, r), y (1, r, r)",
        kind="format", detect=lambda p: p.path.is_file() and p.head.startswith(MAGIC), open=_open_toy,
        target=lambda: load_toy))
    yield record
    catalogue.unregister("toy_grid")


def _write_toy(path: Path, n: int = 24, r: int = 8) -> Path:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, r, r, generator=g)
    y = x.cumsum(-1) / r  # a smooth map of x: something to learn
    path.write_bytes(MAGIC + json.dumps({"x": x.tolist(), "y": y.tolist()}).encode())
    return path


def test_load_reads_a_new_format_from_its_record(toy_format, tmp_path):
    path = _write_toy(tmp_path / "data.toy")
    ds = pde_data.load(path)
    want = load_toy(path)
    assert len(ds) == 24 and ds.meta["format"] == "toy_grid"
    torch.testing.assert_close(ds[3]["y"], want[3]["y"], rtol=0, atol=0)
    torch.testing.assert_close(pde_data.load(path, scale=2.0)[3]["y"], 2 * want[3]["y"], rtol=0, atol=0)
    train, test = (pde_data.load(path, split=s, split_rule="last:4") for s in ("train", "test"))
    assert (len(train), len(test)) == (20, 4)
    torch.testing.assert_close(test[0]["x"], want[20]["x"], rtol=0, atol=0)


def test_without_its_record_the_format_is_unknown(tmp_path):
    path = _write_toy(tmp_path / "data.toy")
    with pytest.raises(ValueError, match="could not tell the format of .*data.toy"):
        pde_data.load(path)


def test_sciattn_train_and_data_list_pick_up_the_new_format(toy_format, tmp_path, capsys):
    path = _write_toy(tmp_path / "data.toy")
    cfg = tmp_path / "toy.toml"
    model = {"name": '"galerkin_transformer"', "d_model": 16, "n_layers": 1, "n_heads": 2, "n_modes": 4,
             "regressor_width": 8}
    sections = {"model": model, "data": {"train": f'"{path}"', "n_test": 4, "options": "{scale = 2.0}"},
                "train": {"epochs": 2, "batch_size": 8, "seed": 3}}
    cfg.write_text("".join(f"[{k}]\n" + "".join(f"{key} = {v}\n" for key, v in table.items())
                           for k, table in sections.items()))
    assert main(["train", str(cfg), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    meta = json.loads(state["data_meta"])
    assert meta["source"]["reader"] == "toy_grid" and meta["source"]["options"] == {"scale": 2.0}
    assert meta["statistics"]["n_samples"] == 20 and meta["variables"] == {"x": ["a"], "y": ["u"]}
    assert abs(meta["statistics"]["y"]["max"][0] - 2 * load_toy(path).y[:20].max().item()) < 1e-5
    capsys.readouterr()
    assert main(["data", "list"]) == 0
    assert "| toy_grid | a format defined inside a test | *.toy |" in capsys.readouterr().out
    bad = cfg.read_text().replace("scale = 2.0", "scael = 2.0")
    cfg.write_text(bad)
    assert main(["train", str(cfg), "--out", str(tmp_path / "run2"), "--no-progress"]) == 2
    assert "scael" in capsys.readouterr().err


def test_old_tables_are_views_of_the_catalogue():
    from sciattn.pde_data.fetch import SOURCES
    from sciattn.pde_data.generate import GENERATORS as WRITERS
    from sciattn.train.sources import GENERATORS, READERS

    names = {r.name for r in catalogue.records()}
    assert set(pde_data.BENCHMARKS) == {r.name for r in catalogue.records(lambda r: r.loader is not None)} <= names
    assert set(READERS) == {"xarray", "fno_darcy_mat", "fno_burgers_mat", "fno_navier_stokes_mat", "the_well",
                            "pdebench", "mini_car", "neuralop_pt"}
    assert set(GENERATORS) == {"darcy", "darcy_neuralop", "burgers", "navier_stokes", "shallow_water",
                               "coupled_navier_stokes"}
    assert set(WRITERS) == set(GENERATORS) | {"darcy_irregular", "navier_stokes_irregular"}
    assert set(SOURCES) == {g for r in catalogue.records() for g in r.downloads}
    assert {g: catalogue.get(g).defaults["n_test"] for g in ("darcy", "burgers", "navier_stokes")} == {
        "darcy": 100, "burgers": 100, "navier_stokes": 200}


def test_generator_defaults_come_from_the_record(tmp_path, monkeypatch):
    import dataclasses

    darcy = catalogue.get("darcy")
    monkeypatch.setitem(catalogue._RECORDS, "darcy", dataclasses.replace(
        darcy, defaults={"n_train": 3, "n_test": 2, "resolution": 8}))
    train = pde_data.load("darcy", split="train", root=tmp_path, progress=False)
    test = pde_data.load("darcy", split="test", root=tmp_path, progress=False)
    assert (len(train), len(test), train[0]["x"].shape) == (3, 2, (1, 8, 8))


def test_no_pde_data_module_imports_sciattn_train():
    offenders = []
    for path in sorted(PDE_DATA.rglob("*.py")):  # the sub-packages too (readers/, solvers/, transforms/)
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "sciattn.train" or n.startswith("sciattn.train.") for n in names):
                offenders.append(path.name)
    assert offenders == []


def test_detection_is_one_function_for_load_and_the_trainer(tmp_path):
    from sciattn.pde_data.neuralop_pt import write_neuralop_pt
    from sciattn.train.sources import detect_reader

    write_neuralop_pt(tmp_path / "a_train_4.pt", torch.zeros(2, 4, 4), torch.zeros(2, 4, 4))
    torch.save([{"vertices": torch.zeros(3, 3)}], tmp_path / "car.pt")
    assert detect_reader(tmp_path / "a_train_4.pt") == "neuralop_pt"
    assert detect_reader(tmp_path / "car.pt") == "mini_car"
    assert detect_reader(tmp_path / "x.nc") == "xarray"
    (tmp_path / "junk.bin").write_bytes(b"junk" * 4)
    with pytest.raises(ValueError, match="path: could not tell the format"):
        detect_reader(tmp_path / "junk.bin")


def test_netcdf4_without_its_suffix_is_read_as_xarray_by_load_and_the_trainer(tmp_path):
    from sciattn.pde_data.generate import generate_to_netcdf
    from sciattn.train.sources import detect_reader

    nc = generate_to_netcdf("darcy", 3, 8, tmp_path, progress=False, fine_resolution=8)
    h5 = nc.rename(tmp_path / "darcy_8.h5")
    assert detect_reader(h5) == "xarray"
    ds = pde_data.load(h5)
    assert len(ds) == 3 and ds[0]["x"].shape == (1, 8, 8)
    torch.testing.assert_close(ds[2]["y"], pde_data.load(h5.rename(tmp_path / "darcy_8.nc"))[2]["y"], rtol=0, atol=0)
