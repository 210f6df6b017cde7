"""benchmarks/mano_fidelity.py: the window weights of its dense reference (hard windows as the layer's, soft-edged
ones continuous in the query position), the MANO code's level damping, and one operator row."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def bench(import_benchmark):
    return import_benchmark("mano_fidelity")


def test_hard_windows_are_the_layers_clamped_windows(bench):
    w = bench._window_weights(256, 64, 8, soft=False)
    assert torch.equal(w.sum(1), torch.full((256,), 8.0, dtype=w.dtype))  # 8 key cells for every query
    assert w[0, :8].all() and w[-1, -8:].all()  # clamped at both ends
    q = 4 * 30 + 1  # a query in key cell 30: the window starts at 30 - 4
    assert torch.equal(w[q].nonzero().flatten(), torch.arange(26, 34))


def test_soft_windows_keep_the_measure_and_vary_continuously(bench):
    n = 512
    w = bench._window_weights(n, 64, 8, soft=True)
    torch.testing.assert_close(w.sum(1), torch.full((n,), 8.0, dtype=w.dtype))  # total key weight c everywhere
    step = (w[1:] - w[:-1]).abs().amax(1)
    assert step.max() <= 64 / n + 1e-12  # a neighbouring query moves every weight by at most θ's step (m / n)
    hard_step = (bench._window_weights(n, 64, 8, soft=False).diff(dim=0)).abs().amax(1)
    assert hard_step.max() == 1.0  # hard windows switch a key cell on or off at each key-cell edge


def test_damping_is_the_codes_v_cycle_weights(bench):
    from sciattn.operators import create_operator

    model = create_operator("mano", in_channels=1, out_channels=1, width=8, n_layers=1, n_heads=2)
    bench._damped(model)
    gamma = model.blocks[0].attn.level_weight[:, 0]
    torch.testing.assert_close(gamma, torch.tensor([1, 1 / 3, 1 / 6, 1 / 6]))


def test_operator_row_measures_convergence_at_shared_nodes(bench):
    row = bench.operator_row("mano", dict(width=8, n_layers=1, n_heads=2), None, None, sizes=(32, 64, 128))
    assert set(row["convergence"]) == {"32", "64"} and row["convergence"]["64"] < row["convergence"]["32"]
    assert row["y64"].shape == (64, 64) and row["parameters"] > 0
