"""Run configs: TOML loading, overrides, and errors that name the key."""

from __future__ import annotations

import pytest

from sciattn.train.config import ConfigError, load_config, parse_overrides

BASE = """
[model]
name = "galerkin_transformer"
d_model = 32

[data]
format = "neuralop_pt"
train = "a.pt"
test = "b.pt"

[train]
epochs = 3
"""


def _write(tmp_path, text=BASE):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_load_and_override(tmp_path):
    cfg = load_config(_write(tmp_path), ["train.lr=1e-2", "model.n_layers=2", "data.test=other.pt",
                                         "data.test_resolutions=[16, 32]"])
    assert cfg.train.lr == 0.01 and cfg.train.epochs == 3
    assert cfg.model_params == {"d_model": 32, "n_layers": 2}
    assert cfg.data.test == "other.pt" and cfg.data.test_resolutions == [16, 32]


def test_values_are_literals_never_evaluated(tmp_path):
    cfg = load_config(_write(tmp_path), ["data.train=__import__('os').getcwd()"])
    assert cfg.data.train == "__import__('os').getcwd()"
    assert parse_overrides(["train.grad_clip=0.5"]) == [("train", "grad_clip", 0.5)]


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["train.learning_rate=1"], r"\[train\]: unknown key\(s\) \['learning_rate'\]"),
        (["data.trian=x.pt"], r"\[data\]: unknown key\(s\) \['trian'\]"),
        (["model.d_modle=8"], r"\[model\]: unknown key\(s\) \['d_modle'\] for operator 'galerkin_transformer'"),
        (["optim.lr=1"], "--set optim.lr: unknown section 'optim'"),
        (["trainlr=1"], "--set: expected section.key=value"),
        (["model.name=fno9"], "model.name: name: expected a registered operator"),
    ],
)
def test_unknown_keys_are_errors_naming_the_key(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_write(tmp_path), overrides)


def test_unknown_section_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown section\(s\) \['optimizer'\]"):
        load_config(_write(tmp_path, BASE + "\n[optimizer]\nlr = 1\n"))
    with pytest.raises(FileNotFoundError, match="nope.toml"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config(_write(tmp_path, "[model\n"))


def test_unset_drops_a_key_so_it_takes_its_default(tmp_path):
    text = BASE + "grad_clip = 0.5\n"
    default = load_config(_write(tmp_path, BASE))
    cfg = load_config(_write(tmp_path, text), unset=["train.grad_clip", "model.d_model"])
    assert cfg.train.grad_clip == default.train.grad_clip != 0.5
    assert "d_model" not in cfg.model_params
    # --unset runs before --set, so a key can be replaced wholesale
    assert load_config(_write(tmp_path, text), ["model.d_model=8"], unset=["model.d_model"]).model_params == {"d_model": 8}


@pytest.mark.parametrize("unset, match", [
    (["train.grad_clip"], r"--unset train.grad_clip: expected a key the config sets"),
    (["optim.lr"], "--unset optim.lr: unknown section 'optim'"),
    (["epochs"], "--unset: expected section.key, got 'epochs'"),
])
def test_unset_errors_name_the_key(tmp_path, unset, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_write(tmp_path), unset=unset)


@pytest.mark.parametrize("word", ["null", "None"])
def test_null_words_point_to_unset(tmp_path, word):
    with pytest.raises(ConfigError, match=rf"--set model.d_model={word}: TOML has no null value; .*--unset model.d_model"):
        load_config(_write(tmp_path), [f"model.d_model={word}"])
    assert load_config(_write(tmp_path), ["data.test=none"]).data.test == "none"  # a lowercase word is a string
