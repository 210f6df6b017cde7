"""Robustness of the user-facing entry points (issue 23): the data readers (``sciattn.pde_data.load``),
the config loader, the CLI (``main([...])`` returns 2 with one stderr line), ``sciattn.train.Surrogate``
and the exported program (``export_run`` + ``torch.export.load(...).module()``).

One tiny Darcy run, trained once for the module (``run`` fixture), serves the CLI, Surrogate and
export cases; a case's ``call`` takes the fixture's namespace ``ctx``."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sciattn.pde_data import load
from sciattn.train import Surrogate, export_run, load_program
from sciattn.train.cli import main
from sciattn.train.config import ConfigError, load_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cases import Case, parametrize, run_case  # noqa: E402

MODEL = '[model]\nname = "galerkin_transformer"\nd_model = 16\n'
DATA = '[data]\ntrain = "darcy"\n'


@pytest.fixture(scope="module")
def ctx(tiny_darcy, tmp_path_factory):
    root, cfg = tiny_darcy("robustness")
    run = root / "run"
    assert main(["train", str(cfg), "--out", str(run), "--no-progress"]) == 0
    pt2 = root / "tiny.pt2"
    export_run(run, pt2)
    tmp = tmp_path_factory.mktemp("robustness_inputs")
    surrogate = Surrogate.from_run(run)
    program = torch.export.load(str(pt2)).module()
    loaded = load_program(pt2)
    return SimpleNamespace(root=root, cfg=cfg, run=run, pt2=pt2, tmp=tmp, surrogate=surrogate, program=program,
                           loaded=loaded)


def _toml(ctx, text: str, name: str = "c.toml") -> Path:
    p = ctx.tmp / name
    p.write_text(text)
    return p


def reader(id, call, exc, words) -> Case:
    return Case("readers", f"load-{id}", call, exc, words)


def config(id, call, exc, words) -> Case:
    return Case("config", f"config-{id}", call, exc, words)


def cli(id, argv, words) -> Case:
    """``argv(ctx)`` -> the command line; expects status 2 and the words on one stderr line."""
    return Case("cli", f"cli-{id}", lambda ctx: main(argv(ctx)), None, words)


def surrogate(id, call, exc, words) -> Case:
    return Case("surrogate", f"surrogate-{id}", call, exc, words)


def exported(id, call, exc, words) -> Case:
    return Case("export", f"export-{id}", call, exc, words)


CASES: list[Case] = [
    # readers
    reader("missing-file", lambda ctx: load(str(ctx.tmp / "nope.pt")), (FileNotFoundError, ValueError),
           ("name_or_path", "nope.pt")),
    reader("unknown-name", lambda ctx: load("no_such_benchmark_9"), ValueError, ("no_such_benchmark_9",)),
    reader("directory", lambda ctx: load(str(ctx.tmp)), (FileNotFoundError, ValueError, IsADirectoryError),
           ("path: expected a NetCDF file or a Zarr store, got the directory",)),
    reader("bad-split", lambda ctx: load(str(ctx.root / "darcy_train_8.pt"), split="validation"), ValueError,
           ("split", "'validation'")),
    reader("resolution-zero", lambda ctx: load(str(ctx.root / "darcy_train_8.pt"), resolution=0), ValueError,
           ("resolution:", "stores 8 points per axis; expected one of [1, 2, 4, 8], got 0")),
    reader("resolution-not-divisor", lambda ctx: load(str(ctx.root / "darcy_train_8.pt"), resolution=3), ValueError,
           ("resolution:", "expected one of [1, 2, 4, 8], got 3")),
    # config
    config("missing-file", lambda ctx: load_config(ctx.tmp / "missing.toml"), (FileNotFoundError, ConfigError),
           ("missing.toml",)),
    config("bad-toml", lambda ctx: load_config(_toml(ctx, "[model\nname=1")), ConfigError, ("c.toml",)),
    config("unknown-section", lambda ctx: load_config(_toml(ctx, MODEL + DATA + "[trian]\nepochs = 1\n")),
           ConfigError, ("trian",)),
    config("unknown-train-key", lambda ctx: load_config(_toml(ctx, MODEL + DATA + "[train]\nepoch = 1\n")),
           ConfigError, ("epoch",)),
    config("epochs-zero", lambda ctx: load_config(_toml(ctx, MODEL + DATA + "[train]\nepochs = 0\n")),
           ConfigError, ("epochs", "0")),
    config("lr-string", lambda ctx: load_config(_toml(ctx, MODEL + DATA + '[train]\nlr = "fast"\n')),
           ConfigError, ("lr", "'fast'")),
    config("batch-size-bool", lambda ctx: load_config(_toml(ctx, MODEL + DATA + "[train]\nbatch_size = true\n")),
           ConfigError, ("batch_size", "bool")),
    config("unknown-model", lambda ctx: load_config(_toml(ctx, '[model]\nname = "fno9"\n' + DATA)), ConfigError,
           ("name", "'fno9'")),
    config("unknown-model-key", lambda ctx: load_config(_toml(ctx, MODEL + "d_modle = 3\n" + DATA)), ConfigError,
           ("d_modle",)),
    config("set-without-equals", lambda ctx: load_config(_toml(ctx, MODEL + DATA), ["train.epochs"]), ConfigError,
           ("--set", "train.epochs")),
    config("set-unknown-section", lambda ctx: load_config(_toml(ctx, MODEL + DATA), ["trian.epochs=2"]),
           ConfigError, ("--set", "trian")),
    # CLI
    cli("train-missing-config", lambda ctx: ["train", str(ctx.tmp / "missing.toml"), "--no-progress"],
        ("sciattn train: error:", "missing.toml")),
    cli("train-existing-out-without-force",
        lambda ctx: ["train", str(ctx.cfg), "--out", str(ctx.run), "--no-progress"],
        ("sciattn train: error:", str(Path("run")), "--force")),
    cli("train-resume-without-checkpoint",
        lambda ctx: ["train", str(ctx.cfg), "--resume", str(ctx.tmp / "empty_run"), "--no-progress"],
        ("sciattn train: error:", "--resume", "empty_run")),
    cli("train-resume-and-force", lambda ctx: ["train", str(ctx.cfg), "--resume", "--force", "--no-progress"],
        ("sciattn train: error:", "--resume, --force: expected one of them")),
    cli("train-resume-and-other-out",
        lambda ctx: ["train", str(ctx.cfg), "--resume", str(ctx.run), "--out", str(ctx.tmp / "other")],
        ("sciattn train: error:", "--resume, --out: expected one run directory")),
    cli("train-bad-set", lambda ctx: ["train", str(ctx.cfg), "--set", "train.epochs=zero", "--out",
                                      str(ctx.tmp / "r2"), "--no-progress"],
        ("sciattn train: error:", "epochs")),
    cli("evaluate-missing-run", lambda ctx: ["evaluate", str(ctx.tmp / "no_run"), "--data", str(ctx.cfg)],
        ("sciattn evaluate: error:", "no_run")),
    cli("evaluate-no-data", lambda ctx: ["evaluate", str(ctx.run)],
        ("sciattn evaluate: error:", "--data: expected one or more data files")),
    cli("evaluate-missing-data", lambda ctx: ["evaluate", str(ctx.run), "--data", str(ctx.tmp / "nope.pt")],
        ("sciattn evaluate: error:", "nope.pt")),
    cli("export-bad-shape", lambda ctx: ["export", str(ctx.run), "--out", str(ctx.tmp / "a.pt2"), "--shape", "8by8"],
        ("sciattn export: error:", "--shape: expected sizes joined by 'x'", "'8by8'")),
    cli("export-missing-run", lambda ctx: ["export", str(ctx.tmp / "no_run"), "--out", str(ctx.tmp / "a.pt2")],
        ("sciattn export: error:", "no_run")),
    cli("export-bad-dtype", lambda ctx: ["export", str(ctx.run), "--out", str(ctx.tmp / "a.pt2"), "--dtype", "float7"],
        ("sciattn export: error:", "float7")),
    cli("export-shape-wrong-rank", lambda ctx: ["export", str(ctx.run), "--out", str(ctx.tmp / "a.pt2"),
                                                "--shape", "8x8x8x8"],
        ("sciattn export: error:", "example_shape: expected C_in = 1 input channels, got 8")),
    # Surrogate
    surrogate("model-not-module", lambda ctx: Surrogate("galerkin"), TypeError,
              ("model: expected a torch.nn.Module, got str",)),
    surrogate("input-names-wrong-count", lambda ctx: Surrogate(ctx.surrogate.model, input_names=["a", "b"],
                                                              spatial_dims=2), ValueError,
              ("input_names: expected 1 names (one per channel), got 2",)),
    surrogate("input-names-not-str", lambda ctx: Surrogate(ctx.surrogate.model, input_names=[3], spatial_dims=2),
              TypeError, ("input_names: expected a sequence of str",)),
    surrogate("output-names-duplicate", lambda ctx: Surrogate(ctx.surrogate.model, output_names=["u", "u"],
                                                              spatial_dims=2), ValueError,
              ("output_names",)),
    surrogate("dt-negative", lambda ctx: Surrogate(ctx.surrogate.model, dt=-0.1, spatial_dims=2), ValueError,
              ("dt: expected a positive finite real number, got -0.1",)),
    surrogate("dt-zero", lambda ctx: Surrogate(ctx.surrogate.model, dt=0.0, spatial_dims=2), ValueError,
              ("dt: expected a positive finite real number",)),
    surrogate("dt-string", lambda ctx: Surrogate(ctx.surrogate.model, dt="1ms", spatial_dims=2), TypeError,
              ("dt: expected a positive real number, got str '1ms'",)),
    surrogate("dt-inf", lambda ctx: Surrogate(ctx.surrogate.model, dt=float("inf"), spatial_dims=2), ValueError,
              ("dt: expected a positive finite real number, got inf",)),
    surrogate("channel-dim-not-str", lambda ctx: Surrogate(ctx.surrogate.model, channel_dim=1, spatial_dims=2),
              TypeError, ("channel_dim: expected a str, got int",)),
    surrogate("domain-not-mapping", lambda ctx: Surrogate(ctx.surrogate.model, domain=[0, 1], spatial_dims=2),
              TypeError, ("domain: expected a mapping",)),
    surrogate("from-run-missing", lambda ctx: Surrogate.from_run(ctx.tmp / "no_run"), (FileNotFoundError, ValueError),
              ("no_run",)),
    surrogate("predict-rank-1", lambda ctx: ctx.surrogate.predict(np.zeros(8)), ValueError,
              ("x: expected 3 dims (C, S0, S1) or 4 dims (B, C, S0, S1), got shape (8,)",)),
    surrogate("predict-rank-5", lambda ctx: ctx.surrogate.predict(torch.zeros(1, 1, 1, 8, 8)), ValueError,
              ("x: expected 3 dims (C, S0, S1) or 4 dims", "got shape (1, 1, 1, 8, 8)")),
    surrogate("predict-channels", lambda ctx: ctx.surrogate.predict(torch.zeros(2, 3, 8, 8)), ValueError,
              ("x: expected 1 input channel(s)", "got 3")),
    surrogate("predict-list", lambda ctx: ctx.surrogate.predict([[0.0] * 8] * 8), TypeError,
              ("x: expected a numpy.ndarray, torch.Tensor, xarray.DataArray or xarray.Dataset, got list",)),
    surrogate("predict-empty-batch", lambda ctx: ctx.surrogate.predict(torch.zeros(0, 1, 8, 8)), ValueError,
              ("x: expected non-empty batch, channel and spatial axes",)),
    surrogate("predict-string-array", lambda ctx: ctx.surrogate.predict(np.array([[["a"] * 8] * 8])), TypeError,
              ("x: expected a real or bool array", "dtype <U1")),
    surrogate("step-dt-negative", lambda ctx: ctx.surrogate.step(torch.zeros(1, 1, 8, 8), dt=-1.0), ValueError,
              ("dt: expected a positive finite real number, got -1.0",)),
    surrogate("rollout-rank", lambda ctx: ctx.surrogate.rollout(torch.zeros(8), 2), ValueError,
              ("state: expected 3 dims",)),
    surrogate("rollout-n-steps-zero", lambda ctx: ctx.surrogate.rollout(torch.zeros(1, 1, 8, 8), 0), ValueError,
              ("n_steps",)),
    surrogate("rollout-n-steps-bool", lambda ctx: ctx.surrogate.rollout(torch.zeros(1, 1, 8, 8), True), TypeError,
              ("n_steps", "bool")),
    # the exported program
    exported("missing-run", lambda ctx: export_run(ctx.tmp / "no_run", ctx.tmp / "x.pt2"),
             (FileNotFoundError, ValueError), ("no_run",)),
    exported("unknown-format", lambda ctx: export_run(ctx.run, ctx.tmp / "x.pt2", format="tflite"), ValueError,
             ("format", "'tflite'")),
    exported("example-shape-rank", lambda ctx: export_run(ctx.run, ctx.tmp / "x.pt2", example_shape=[1, 1, 1, 8, 8]),
             ValueError, ("example_shape",)),
    # torch.export's own guard (the plain program's input check), not our wording; load_program's checks below
    exported("program-channels", lambda ctx: ctx.program(torch.zeros(2, 3, 8, 8)), AssertionError,
             ("Guard failed: x.size()[1] == 1",)),
    exported("loaded-rank", lambda ctx: ctx.loaded(torch.zeros(1, 8, 8, dtype=torch.bool)), ValueError,
             ("x: expected a 4-d tensor (B, C_in, S_1, S_2)", "got 3-d shape (1, 8, 8)")),
    exported("loaded-channels", lambda ctx: ctx.loaded(torch.zeros(2, 3, 8, 8, dtype=torch.bool)), ValueError,
             ("x: expected C_in = 1 input channels along axis 1, got 3",)),
    exported("loaded-dtype", lambda ctx: ctx.loaded(torch.zeros(2, 1, 8, 8)), TypeError,
             ("x: expected dtype bool", "got float32")),
    exported("loaded-no-spec", lambda ctx: load_program(ctx.tmp / "none.pt2"), FileNotFoundError,
             ("path: expected a .pt2 file", "none.pt2")),
]


@parametrize(CASES)
def test_user_facing_bad_input(case: Case, ctx):
    run_case(case, ctx)
