"""[data] validation at load_config: every error names the key, what was expected and what was given."""

from __future__ import annotations

import re

import pytest

from sciattn.train.config import ConfigError, load_config
from sciattn.train.data import describe_source

MODEL = {"name": "galerkin_transformer", "d_model": 16}


def _load(data, train=None, overrides=()):
    return load_config({"model": MODEL, "data": data, "train": train or {}}, list(overrides))


def test_wrong_type_names_the_key_and_the_value():
    with pytest.raises(ConfigError, match=re.escape("data.n_train: expected an integer >= 1, got 'abc' (str)")):
        _load({"train": "darcy", "n_train": "abc"})


def test_old_train_resolution_string_is_an_error_not_a_silent_run():
    with pytest.raises(ConfigError, match=re.escape("data.train_resolution: expected an integer >= 1, got 'abc' (str)")):
        _load({"format": "darcy_solver", "train_resolution": "abc"})


def test_negative_size():
    with pytest.raises(ConfigError, match=re.escape("data.n_test: expected an integer >= 1, got -3 (int)")):
        _load({"train": "darcy", "n_test": -3})
    with pytest.raises(ConfigError, match=r"data.test_resolutions: expected a non-empty list of integers >= 1, got \[16, 0\]"):
        _load({"train": "darcy", "test_resolutions": [16, 0]})


def test_unknown_format_and_split_rule():
    with pytest.raises(ConfigError, match=r"data.format: expected one of \['auto', 'neuralop_pt', 'darcy_solver'\], got 'hdf6'"):
        _load({"train": "darcy", "format": "hdf6"})
    with pytest.raises(ConfigError, match=r"data.split_rule: expected one of .*got 'middle'"):
        _load({"train": "x.pt", "split_rule": "middle"})


def test_unknown_source_name_and_missing_file():
    with pytest.raises(ConfigError, match=r"data.train: expected a generator \(\[.*'darcy'.*\]\), a registered "
                                          r"benchmark \(\[.*'fno_darcy'.*\]\) or the path of a data file, got 'darcyy'"):
        _load({"train": "darcyy"})
    from sciattn.train.data import build_datasets

    cfg = _load({"train": "no_such_data.pt"})  # a path may appear later; it is checked when the data is built
    with pytest.raises(FileNotFoundError, match=r"data.train: expected an existing file, got '.*no_such_data.pt'"):
        build_datasets(cfg.data)
    with pytest.raises(ConfigError, match=r"data.train: expected a load\(\) name"):
        _load({"train": ""})


def test_unknown_option_of_a_generator_lists_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"data.options: unknown option\(s\) \['t_inn'\] for generator 'navier_stokes'; "
                                          r"expected options from \[.*'t_in'.*\]"):
        _load({"train": "navier_stokes", "options": {"t_inn": 3}})


def test_unknown_option_of_a_file_reader(tmp_path):
    from sciattn.pde_data.generate import generate_to_netcdf

    path = generate_to_netcdf("darcy", 4, 8, tmp_path, progress=False)
    cfg = _load({"train": str(path), "options": {"inputs": ["coefficient"]}})
    assert describe_source(cfg.data)["reader"] == "xarray"
    with pytest.raises(ConfigError, match=r"data.options: unknown option\(s\) \['t_in'\] for reader 'xarray'"):
        _load({"train": str(path), "options": {"t_in": 2}})


def test_reserved_option_points_to_its_own_key():
    with pytest.raises(ConfigError, match=re.escape("data.options.n_train: set by data.n_train, not as an option")):
        _load({"train": "darcy", "options": {"n_train": 3}})


def test_generator_cannot_be_a_test_source_and_resolution_aliases_must_agree():
    with pytest.raises(ConfigError, match="data.test: a generator"):
        _load({"train": "x.pt", "test": "darcy"})
    with pytest.raises(ConfigError, match="data.train_resolution: the older name of data.resolution"):
        _load({"train": "darcy", "resolution": 16, "train_resolution": 32})


def test_nested_override_of_an_option_and_train_keys():
    cfg = _load({"train": "navier_stokes", "options": {"t_in": 4}}, overrides=["data.options.t_final=2.0",
                                                                             "train.rollout_steps=3"])
    assert cfg.data.options == {"t_in": 4, "t_final": 2.0} and cfg.train.rollout_steps == 3
    with pytest.raises(ConfigError, match=re.escape("train.rollout_steps: expected an integer >= 1, got 0 (int)")):
        _load({"train": "darcy"}, {"rollout_steps": 0})


def test_rollout_on_data_that_is_not_a_time_series_is_refused(tmp_path):
    from sciattn.train.run import train_run

    cfg = _load({"train": "darcy", "resolution": 8, "n_train": 4, "n_test": 2, "cache_dir": str(tmp_path)},
                {"rollout_steps": 2, "epochs": 1, "tensorboard": False})
    with pytest.raises(ConfigError, match="train.rollout_steps: needs time-series data"):
        train_run(cfg, tmp_path / "run", progress=False, log=lambda m: None)


def test_describe_source_kinds(tmp_path):
    gen = describe_source(_load({"train": "darcy", "resolution": 32, "n_train": 10, "n_test": 2,
                                 "options": {"alpha": 2.5}, "seed": 4}).data)
    assert gen["kind"] == "generated" and gen["params"] == {"alpha": 2.5} and gen["seed"] == 4
    assert gen["resolution"] == 32 and gen["test_resolutions"] == [32]
    bench = describe_source(_load({"train": "geofno_elasticity", "root": str(tmp_path)}).data)
    assert bench["kind"] == "benchmark" and bench["root"] == str(tmp_path.resolve())
    f = describe_source(_load({"train": "rel/a.pt", "test": "rel/b.pt"}).data)
    assert f["kind"] == "file" and f["path"].endswith("/rel/a.pt") and f["path"].startswith("/")
    assert f["test"]["path"].endswith("/rel/b.pt")


def test_matched_neuralop_darcy_generator_trains_as_a_source():
    """``train = "darcy_neuralop"``: 0/1 masks, the same samples restricted at every test resolution."""
    import torch

    from sciattn.train.data import build_datasets

    cfg = _load({"train": "darcy_neuralop", "resolution": 8, "test_resolutions": [8, 16], "n_train": 3, "n_test": 2,
                 "options": {"solve_resolution": 32}})
    train, tests = build_datasets(cfg.data)
    assert len(train) == 3 and sorted(tests) == ["test_16", "test_8"]
    assert set(torch.unique(train.x).tolist()) <= {0.0, 1.0} and train.meta["variables"]["x"] == ["mask"]
    coarse, fine = tests["test_8"], tests["test_16"]
    assert torch.equal(fine.x[:, :, ::2, ::2], coarse.x) and torch.equal(fine.y[:, :, ::2, ::2], coarse.y)
    assert not torch.equal(train.x[:2], coarse.x)  # test samples follow the training ones
    assert describe_source(cfg.data)["name"] == "darcy_neuralop"
    with pytest.raises(ConfigError, match=r"data.options: .*'tau_typo'"):
        _load({"train": "darcy_neuralop", "options": {"tau_typo": 3.0}})


def test_evaluating_a_single_file_reads_all_of_it(shared_data):
    from sciattn.train.data import load_data_file

    assert len(load_data_file(shared_data / "darcy_test_16.pt")) == 50
    assert len(load_data_file(shared_data / "mini_car.pt")) == 3
