"""Classes of bad input (issue 23): config sections of the wrong type, empty / truncated / wrongly
laid out data files, checkpoints whose weights do not fit their config.

Table-driven: each case builds the bad input under ``tmp_path``, calls one public entry point
(``sciattn.pde_data.load``, ``sciattn.train.config.load_config``,
``sciattn.train.checkpoint.load_model`` or the CLI ``sciattn.train.cli.main``) and declares the
exception type and the words its one-line message must contain (``{path}`` is the bad file). A CLI
case expects exit status 2 and the words on stderr.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from sciattn.pde_data import load
from sciattn.train.checkpoint import load_model, save_checkpoint
from sciattn.train.cli import main
from sciattn.train.config import ConfigError, load_config

MODEL = '[model]\nname = "galerkin_transformer"\nd_model = 16\n'
DATA = '[data]\ntrain = "darcy"\n'


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Path], Path | dict]  # tmp_path -> the bad input
    call: Callable[[Path | dict], object]  # the public entry point
    exc: type[BaseException] | None  # None: a CLI case (status 2, message on stderr)
    words: tuple[str, ...]


def _toml(text: str) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        p = tmp / "c.toml"
        p.write_text(text)
        return p

    return build


def _bytes(name: str, data: bytes) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        p = tmp / name
        p.write_bytes(data)
        return p

    return build


def _truncated(name: str, write: Callable[[Path], None]) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        full = tmp / f"full_{name}"
        write(full)
        data = full.read_bytes()
        p = tmp / name
        p.write_bytes(data[: len(data) // 2])
        return p

    return build


def _truncated_cache(prefix: str, generate: Callable[[Path], object]) -> Callable[[Path], Path]:
    """A cache dir whose ``<prefix>_<hash>.h5`` (written by ``generate``) is cut in half."""
    def build(tmp: Path) -> Path:
        generate(tmp)
        (f,) = tmp.glob(f"{prefix}_*.h5")
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
        return tmp

    return build


def _irregular(cache: Path):
    from sciattn.pde_data.irregular import generate_darcy_irregular

    return generate_darcy_irregular(1, 8, fine_resolution=16, cache_dir=cache)


def _shallow_water(cache: Path):
    from sciattn.pde_data.shallow_water_data import load_or_generate_shallow_water

    return load_or_generate_shallow_water(cache, n_samples=1, nlat=8, nlon=16, n_traj=1, traj_len=2, batch_size=1)


def _pt(obj: object) -> Callable[[Path], None]:
    return lambda p: torch.save(obj, p)


def _h5(p: Path) -> None:
    with h5py.File(p, "w") as f:
        f["tensor"] = np.zeros((64, 64, 8))


def _v73(p: Path, *, matlab: bool = True, arrays: dict | None = None) -> None:
    """A MATLAB 7.3 file: 512-byte user block with MATLAB's header text, then HDF5. With ``matlab``
    the datasets are written as MATLAB does (axes reversed, ``MATLAB_class``); without, in C order
    as h5py writes them, with no ``MATLAB_class``."""
    arrays = arrays or {"coeff": np.zeros((4, 9, 9)), "sol": np.zeros((4, 9, 9))}
    with h5py.File(p, "w", userblock_size=512) as f:
        for k, v in arrays.items():
            d = f.create_dataset(k, data=v.transpose() if matlab else v)
            if matlab:
                d.attrs["MATLAB_class"] = np.bytes_("double")
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."
    with open(p, "r+b") as fh:
        fh.write(header.ljust(128, b" "))


def _v73_file(name: str, **kw) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        p = tmp / name
        _v73(p, **kw)
        return p

    return build


def _model(d_model: int = 16):
    from sciattn.operators import create_operator

    return create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=d_model, n_layers=1,
                           n_heads=2, regressor_width=8, n_modes=4)


def _checkpoint(tmp: Path, config_d_model: int = 16) -> Path:
    """A checkpoint of weights from d_model=16 whose operator_config says ``config_d_model``."""
    from sciattn.pde_data.normalizers import UnitGaussianNormalizer

    model = _model(16)
    model.config = dict(_model(config_d_model).config)
    xn = UnitGaussianNormalizer().fit(torch.randn(4, 1, 8, 8))
    return save_checkpoint(tmp / "ck.pt", model=model, x_normalizer=xn, y_normalizer=xn)


def _mismatched_checkpoint(tmp: Path) -> Path:
    return _checkpoint(tmp, 32)


def _checkpoint_with_extra_weight(tmp: Path) -> Path:
    p = _checkpoint(tmp)
    state = torch.load(p, weights_only=True)
    state["model"]["bogus.weight"] = torch.zeros(2)
    torch.save(state, p)
    return p


def _truncated_checkpoint(tmp: Path) -> Path:
    p = _mismatched_checkpoint(tmp)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return p


def _cli_train(path: Path) -> list[str]:
    return ["train", str(path), "--out", str(path.parent / "run"), "--no-progress"]


CASES: list[Case] = [
    # 1. config sections of the wrong type (file, dict, --set override, CLI)
    Case("config-model-int", _toml("model = 5\n" + DATA), load_config, ConfigError,
         ("[model]: expected a table (TOML section), got 5 (int)",)),
    Case("config-data-str", _toml('data = "x"\n' + MODEL), load_config, ConfigError,
         ("[data]: expected a table (TOML section), got 'x' (str)",)),
    Case("config-train-list", _toml("train = [1, 2]\n" + MODEL + DATA), load_config, ConfigError,
         ("[train]: expected a table (TOML section), got [1, 2] (list)",)),
    Case("config-dict-model-str", lambda tmp: {"model": "fno"}, load_config, ConfigError,
         ("[model]: expected a table (TOML section), got 'fno' (str)",)),
    Case("config-set-into-str-section", _toml('data = "x"\n' + MODEL),
         lambda p: load_config(p, ["data.train=darcy"]), ConfigError,
         ("--set data.train", "[data]: expected a table (TOML section), got 'x' (str)")),
    Case("cli-config-model-int", _toml("model = 5\n" + DATA), lambda p: main(_cli_train(p)), None,
         ("sciattn train: error:", "[model]: expected a table (TOML section), got 5 (int)")),
    # 2. data files: empty, truncated, wrong content
    Case("pt-empty", _bytes("a.pt", b""), load, ValueError, ("name_or_path", "{path}", "is empty (0 bytes)")),
    Case("pt-truncated", _truncated("a.pt", _pt({"x": torch.zeros(8, 16), "y": torch.zeros(8, 16)})), load,
         ValueError, ("name_or_path", "{path}", "truncated or corrupt", "torch")),
    Case("pt-y-list", lambda tmp: (_pt({"x": torch.zeros(4, 8), "y": [1.0, 2.0]})(tmp / "a.pt"), tmp / "a.pt")[1],
         load, ValueError, ("y: expected a tensor in '{path}', got list",)),
    Case("h5-empty", _bytes("a.h5", b""), load, ValueError, ("name_or_path", "{path}", "is empty (0 bytes)")),
    Case("h5-truncated", _truncated("a.h5", _h5), load, ValueError,
         ("name_or_path", "{path}", "truncated or corrupt", "HDF5: truncated file")),
    Case("pt-unknown-reader-keyword", lambda tmp: (_pt({"x": torch.zeros(4, 8), "y": torch.zeros(4, 8)})(tmp / "a.pt"),
                                                   tmp / "a.pt")[1],
         lambda p: load(p, format="netcdf9"), TypeError,
         ("format: not a keyword of load_neuralop_pt, the reader detected for '{path}'", "it accepts [")),
    Case("irregular-cache-truncated", _truncated_cache("darcy_irregular", _irregular), _irregular, ValueError,
         ("path: '{path}/darcy_irregular_", "truncated or corrupt", "HDF5: truncated file")),
    Case("shallow-water-cache-truncated", _truncated_cache("shallow_water", _shallow_water), _shallow_water,
         ValueError, ("path: '{path}/shallow_water_", "truncated or corrupt", "HDF5: truncated file")),
    Case("mat-empty", _bytes("a.mat", b""), load, ValueError, ("name_or_path", "{path}", "is empty (0 bytes)")),
    Case("mat-v73-truncated", _truncated("a.mat", _v73), load, ValueError,
         ("{path}", "truncated or corrupt", "MATLAB v7.3")),
    Case("mat-v73-ambiguous-layout", _v73_file("a.mat", arrays={"coeff": np.zeros((9, 9, 9)), "sol": np.zeros((9, 9, 9))}),
         load, ValueError, ("mat_layout:", "{path}", "'coeff'", "(9, 9, 9)", "mat_layout='matlab'", "mat_layout='c'")),
    Case("mat-v73-c-order", _v73_file("a.mat", matlab=False), load, ValueError,
         ("{path}", "'coeff'", "no MATLAB_class", "axes swapped", "expected a variable written by MATLAB")),
    Case("cli-evaluate-empty-data", lambda tmp: (_bytes("a.pt", b"")(tmp), _checkpoint(tmp))[0],
         lambda p: main(["evaluate", str(p.parent / "ck.pt"), "--data", str(p)]), None,
         ("sciattn evaluate: error:", "{path}", "is empty (0 bytes)")),
    # 3. checkpoints
    Case("checkpoint-shape-mismatch", _mismatched_checkpoint, load_model, ValueError,
         ("checkpoint", "{path}", "does not match its config", "weight '", "shape (", "expects (")),
    Case("checkpoint-unexpected-weight", _checkpoint_with_extra_weight, load_model, ValueError,
         ("checkpoint", "{path}", "does not match its config", "bogus.weight")),
    Case("checkpoint-truncated", _truncated_checkpoint, load_model, ValueError,
         ("checkpoint", "{path}", "truncated or corrupt")),
    Case("checkpoint-empty", lambda tmp: _bytes("ck.pt", b"")(tmp), load_model, ValueError,
         ("checkpoint", "{path}", "is empty (0 bytes)")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_clear_line(case: Case, tmp_path, capsys):
    bad = case.build(tmp_path)
    path = str(bad) if isinstance(bad, Path) else ""
    if case.exc is None:
        assert case.call(bad) == 2
        message = capsys.readouterr().err.strip()
        assert "\n" not in message and "Traceback" not in message
    else:
        with pytest.raises(case.exc) as info:
            case.call(bad)
        assert type(info.value) is case.exc or issubclass(type(info.value), case.exc)
        message = str(info.value)
        assert "\n" not in message
    for words in case.words:
        assert words.replace("{path}", path) in message, (case.id, words, message)


def test_counts():
    kinds = {"config": 0, "file": 0, "checkpoint": 0}
    for c in CASES:
        kind = "config" if "config" in c.id else "checkpoint" if c.id.startswith("checkpoint") else "file"
        kinds[kind] += 1
    print(f"\nbad-input cases: {len(CASES)} ({', '.join(f'{k} {v}' for k, v in kinds.items())})")
    assert len(CASES) == sum(kinds.values()) and all(kinds.values())
