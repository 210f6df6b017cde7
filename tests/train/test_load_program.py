"""load_program: an exported program with sciattn's one-line input checks in front (issue 23), and the
in-graph finiteness message of the plain program."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from sciattn.train import load_program
from sciattn.train.cli import main
from sciattn.train.export import export_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _file_errors import check_missing_and_corrupt  # noqa: E402


@pytest.fixture(scope="module")
def programs(tiny_darcy, tmp_path_factory):
    root, cfg = tiny_darcy("load_program")
    run = root / "run"
    assert main(["train", str(cfg), "--out", str(run), "--no-progress"]) == 0
    out = tmp_path_factory.mktemp("programs")
    info = export_run(run, out / "f32.pt2", input_dtype="float32")
    return out, info


def test_spec_is_recorded_and_a_valid_input_matches_the_plain_program(programs):
    out, info = programs
    prog = load_program(out / "f32.pt2")
    assert prog.spec["input_dtype"] == "float32" and prog.spec["in_channels"] == 1
    assert prog.spec["dynamic_dims"] == info["dynamic_dims"]
    plain = torch.export.load(str(out / "f32.pt2")).module()
    for shape in [(2, 1, 8, 8), (3, 1, 12, 10)]:
        x = torch.rand(*shape, generator=torch.Generator().manual_seed(1))
        assert torch.equal(prog(x), plain(x))


@pytest.mark.parametrize("make, exc, words", [
    (lambda: torch.zeros(1, 8, 8), ValueError, ("x: expected a 4-d tensor (B, C_in, S_1, S_2)", "got 3-d", "(1, 8, 8)")),
    (lambda: torch.zeros(2, 3, 8, 8), ValueError, ("x: expected C_in = 1 input channels along axis 1, got 3",)),
    (lambda: torch.zeros(2, 1, 8, 8, dtype=torch.float64), TypeError,
     ("x: expected dtype float32", "input_dtype=", "got float64")),
    (lambda: torch.zeros(2, 1, 8, 8).numpy(), TypeError, ("x: expected a torch.Tensor, got ndarray",)),
])
def test_bad_inputs_get_one_line_messages(programs, make, exc, words):
    prog = load_program(programs[0] / "f32.pt2")
    with pytest.raises(exc) as info:
        prog(make())
    msg = str(info.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_nan_loader_names_the_index_and_the_plain_program_names_the_argument(programs):
    out, _ = programs
    x = torch.rand(1, 1, 8, 8)
    x[0, 0, 2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"x: expected finite values, got 1 NaN and 0 Inf .*index \(0, 0, 2, 3\)"):
        load_program(out / "f32.pt2")(x)
    plain = torch.export.load(str(out / "f32.pt2")).module()
    with pytest.raises(RuntimeError, match="x: expected finite values at real points"):
        plain(x)


def test_files_without_spec_or_missing(programs, tmp_path):
    out, _ = programs
    check_missing_and_corrupt(load_program, tmp_path / "nope.pt2", "path: expected a .pt2 file", tmp_path / "bad.pt2",
                              b"not a program", "path: expected a torch.export program")


def test_latent_model_refuses_a_non_multiple_size(tiny_darcy, tmp_path):
    root, cfg = tiny_darcy("load_program_latent")
    run = root / "run"
    argv = ["train", str(cfg), "--out", str(run), "--no-progress", "--set", "model.latent_resolution=4"]
    assert main(argv) == 0
    export_run(run, tmp_path / "latent.pt2", input_dtype="float32")
    prog = load_program(tmp_path / "latent.pt2")
    assert prog.spec["size_multiples"] == {"2": 4, "3": 4}
    with pytest.raises(ValueError, match=r"x: expected a multiple of 4 along axis 3 .*got 10"):
        prog(torch.zeros(1, 1, 8, 10))
    assert prog(torch.zeros(1, 1, 12, 8)).shape == (1, 1, 12, 8)
