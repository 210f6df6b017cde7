"""benchmarks/mano_fidelity.py: the window weights of its dense reference (hard windows as the layer's, soft-edged
ones continuous in the query position), the MANO code's level damping, one operator row, a small harness run, the
committed rows and the parameter checks."""

from __future__ import annotations

import pytest
import torch

from benchmarks import harness
from benchmarks import mano_fidelity as bench


def test_hard_windows_are_the_layers_clamped_windows():
    w = bench._window_weights(256, 64, 8, soft=False)
    assert torch.equal(w.sum(1), torch.full((256,), 8.0, dtype=w.dtype))  # 8 key cells for every query
    assert w[0, :8].all() and w[-1, -8:].all()  # clamped at both ends
    q = 4 * 30 + 1  # a query in key cell 30: the window starts at 30 - 4
    assert torch.equal(w[q].nonzero().flatten(), torch.arange(26, 34))


def test_soft_windows_keep_the_measure_and_vary_continuously():
    n = 512
    w = bench._window_weights(n, 64, 8, soft=True)
    torch.testing.assert_close(w.sum(1), torch.full((n,), 8.0, dtype=w.dtype))  # total key weight c everywhere
    step = (w[1:] - w[:-1]).abs().amax(1)
    assert step.max() <= 64 / n + 1e-12  # a neighbouring query moves every weight by at most θ's step (m / n)
    hard_step = (bench._window_weights(n, 64, 8, soft=False).diff(dim=0)).abs().amax(1)
    assert hard_step.max() == 1.0  # hard windows switch a key cell on or off at each key-cell edge


def test_damping_is_the_codes_v_cycle_weights():
    from sciattn.operators import create_operator

    model = create_operator("mano", in_channels=1, out_channels=1, width=8, n_layers=1, n_heads=2)
    bench._damped(model)
    gamma = model.blocks[0].attn.level_weight[:, 0]
    torch.testing.assert_close(gamma, torch.tensor([1, 1 / 3, 1 / 6, 1 / 6]))


def test_operator_row_measures_convergence_at_shared_nodes():
    row = bench.operator_row("mano", dict(width=8, n_layers=1, n_heads=2), None, None, sizes=(32, 64, 128),
                             time_grid=32)
    assert set(row["convergence"]) == {"32", "64"} and row["convergence"]["64"] < row["convergence"]["32"]
    assert row["y0"].shape == (32, 32) and row["parameters"] > 0 and row["forward_ms"] > 0


def test_small_run_tapered_windows_remove_the_edge_jumps(tmp_path):
    tapered, hard = "default (physical pyramid, tapered windows)", "hard windows, finest level only"
    records = harness.run_benchmark("mano_fidelity", quick=True, results=tmp_path,
                                    overrides={"layers": [tapered, hard], "operators": []})
    rows = {r["row"]["variant"]: r["row"] for r in records}
    assert set(rows) == {tapered, hard, *bench.PROTOTYPES}
    assert all(r["n"] == 256 and r["operator"] is None for r in rows.values())
    assert rows[tapered]["ratio"] < 2 < rows[hard]["ratio"]  # the target: edge jump <= 2x the inside one
    assert rows[hard]["shift_change"] < 1e-12  # one level with hard windows: exactly shift-equivariant
    assert rows[tapered]["edge_jump"] == pytest.approx(rows[tapered]["ratio"] * rows[tapered]["inside_jump"])
    assert "| layer |" in harness.markdown_table(harness.get("mano_fidelity"), records)


def test_committed_rows_validate_and_render():
    b, records = harness.committed_rows("mano_fidelity")
    text = harness.markdown_table(b, harness.latest_run(records, full=True))
    assert "| variant | parameters |" in text and "| layer |" in text


@pytest.mark.parametrize("key, value", [("operators", ["no such variant"]), ("layer_sizes", [100]),
                                        ("operator_sizes", [64, 48]), ("layers", "all")])
def test_bad_parameters_are_refused_naming_them(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        harness.run_benchmark("mano_fidelity", quick=True, results=tmp_path, overrides={key: value})
