"""The pyramid comparison's model builder: both pyramids share every weight and differ only in
``coarse_cells``; ``--param`` overrides parse as JSON."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def bench(import_benchmark):
    return import_benchmark("mano_pyramid_zero_shot")


def test_parse_params_reads_json_values_and_rejects_missing_equals(bench):
    assert bench.parse_params(["rel_pos_bias=4", "unpool=linear", "window_fraction=[0.25, 0.125]"]) == {
        "rel_pos_bias": 4, "unpool": "linear", "window_fraction": [0.25, 0.125]}
    with pytest.raises(ValueError, match="--param: expected KEY=VALUE, got 'rel_pos_bias'"):
        bench.parse_params(["rel_pos_bias"])


def test_pyramids_share_weights_and_agree_at_the_training_resolution(bench):
    torch.manual_seed(0)
    cells = bench.build("cells", {"rel_pos_bias": 4}).eval()
    physical = bench.build("physical", {"rel_pos_bias": 4}).eval()
    head = bench.build("physical + head grid", {"rel_pos_bias": 4}).eval()
    physical.load_state_dict(cells.state_dict())  # strict: the same parameters
    head.load_state_dict(cells.state_dict())
    attn = [b.attn for b in physical.blocks]
    assert all(a.coarse_cells == (8, 8) and a.rel_pos_bias == 4 for a in attn)
    assert all(b.attn.coarse_cells is None for b in cells.blocks)
    assert physical.proj.grid is None and head.proj.grid == (64, 64)
    x = torch.randn(1, 1, 64, 64)
    with torch.no_grad():
        assert torch.equal(cells(x), physical(x)) and torch.equal(cells(x), head(x))
        fine = torch.randn(1, 1, 128, 128)  # above it the coarse levels and the head differ
        assert (cells(fine) - physical(fine)).abs().max() > 1e-4
        assert (physical(fine) - head(fine)).abs().max() > 1e-4
    with pytest.raises(ValueError, match="variant: expected one of"):
        bench.build("spectral")


def test_stage_drift_is_zero_for_the_exact_lift_and_measures_the_rest(bench):
    from types import SimpleNamespace

    torch.manual_seed(1)
    model = bench.build("cells").eval()
    x64 = torch.randn(2, 1, 64, 64)
    x128 = torch.randn(2, 1, 128, 128)
    x128[..., ::2, ::2] = x64  # the same values at the shared nodes, anything in between
    tests = {"test_64": SimpleNamespace(x=x64), "test_128": SimpleNamespace(x=x128)}
    identity = SimpleNamespace(encode=lambda t: t)
    drift = bench.stage_drift(model, tests, identity, [64, 128], n=2)
    assert list(drift) == ["lift", "block 1", "block 2", "block 3", "block 4", "head"]
    assert drift["lift"]["128"] < 1e-6  # a physical stencil reads only the shared nodes
    assert drift["head"]["128"] > 1e-3
    assert not model.lift._forward_hooks  # the probes are removed
