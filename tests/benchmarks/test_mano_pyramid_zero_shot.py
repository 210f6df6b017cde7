"""The pyramid comparison's model builder: both pyramids share every weight and differ only in
``coarse_cells``; ``--param`` overrides parse as JSON."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("mano_pyramid_zero_shot")
    finally:
        sys.path.remove(str(BENCH))


def test_parse_params_reads_json_values_and_rejects_missing_equals(bench):
    assert bench.parse_params(["rel_pos_bias=4", "unpool=linear", "window_fraction=[0.25, 0.125]"]) == {
        "rel_pos_bias": 4, "unpool": "linear", "window_fraction": [0.25, 0.125]}
    with pytest.raises(ValueError, match="--param: expected KEY=VALUE, got 'rel_pos_bias'"):
        bench.parse_params(["rel_pos_bias"])


def test_pyramids_share_weights_and_agree_at_the_training_resolution(bench):
    torch.manual_seed(0)
    cells = bench.build("cells", {"rel_pos_bias": 4}).eval()
    physical = bench.build("physical", {"rel_pos_bias": 4}).eval()
    physical.load_state_dict(cells.state_dict())  # strict: the same parameters
    attn = [b.attn for b in physical.blocks]
    assert all(a.coarse_cells == (8, 8) and a.rel_pos_bias == 4 for a in attn)
    assert all(b.attn.coarse_cells is None for b in cells.blocks)
    x = torch.randn(1, 1, 64, 64)
    with torch.no_grad():
        assert torch.equal(cells(x), physical(x))
        fine = torch.randn(1, 1, 128, 128)  # above it the coarse levels differ
        assert (cells(fine) - physical(fine)).abs().max() > 1e-4
