"""An export written before the operator-contract refactor (issue 36) still loads and answers as it did.

The files in ``data/`` were made by ``data/make_legacy_exports.py`` with the code of commit d00c217: a tiny
Galerkin Transformer trained one epoch on generated Darcy data, exported as a ``.pt2`` program, and the
program's output on a fixed input.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from sciattn.train import load_program

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def legacy():
    return load_program(DATA / "legacy_galerkin_transformer.pt2"), torch.load(
        DATA / "legacy_galerkin_transformer_io.pt", weights_only=True)


def test_legacy_export_reproduces_its_recorded_output(legacy):
    program, io = legacy
    assert program.spec["operator"] == "galerkin_transformer" and program.spec["kind"] == "grid"
    y = program(io["x"])
    torch.testing.assert_close(y, io["y"], rtol=1e-5, atol=1e-6)
    assert y.abs().max() > 0  # a program that answers zeros would not pass the comparison above by accident


def test_legacy_export_keeps_its_dynamic_sizes_and_input_checks(legacy):
    program, io = legacy
    x = torch.rand(3, 1, 12, 10, generator=torch.Generator().manual_seed(2))
    assert program(x).shape == (3, 1, 12, 10)
    with pytest.raises(ValueError, match="expected C_in = 1 input channels"):
        program(torch.zeros(2, 3, 8, 8))


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_a_program_without_the_pt2_suffix_loads_quietly(legacy, tmp_path):
    copy = tmp_path / "program"
    copy.write_bytes((DATA / "legacy_galerkin_transformer.pt2").read_bytes())
    records, logger = _Records(), logging.getLogger("torch.export")  # torch's loggers do not reach caplog
    logger.addHandler(records)
    try:
        program = load_program(copy)
    finally:
        logger.removeHandler(records)
    assert not [m for m in records.messages if "pt2" in m], records.messages  # torch warns about the file name
    io = legacy[1]
    torch.testing.assert_close(program(io["x"]), io["y"], rtol=1e-5, atol=1e-6)


def test_a_loaded_programs_weights_are_frozen_but_input_gradients_flow(legacy):
    program, io = legacy
    y = program(io["x"])
    assert not y.requires_grad and y.numpy().shape == (2, 1, 8, 8)  # no .detach() needed for NumPy
    x = io["x"].clone().requires_grad_()
    program(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert not any(p.requires_grad for p in program.module.parameters())
