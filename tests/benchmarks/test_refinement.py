"""benchmarks/refinement.py: at small sizes the quadrature converges to the continuum value and the published uniform
average keeps its bias; the trapezoid weights integrate exactly what they should; the committed rows validate and
render; bad parameters are refused by name."""

from __future__ import annotations

import pytest

from benchmarks import harness
from benchmarks import refinement as rf

SMALL = {"sizes": [8, 16, 32, 64], "reference": 128}


def test_small_run_quadrature_converges_uniform_average_keeps_a_bias(tmp_path):
    """Sizes 8, 16, 32 (finest 64; continuum on 128²): with the quadrature the difference to the continuum value
    shrinks with every refinement and ends below 1e-4 (relative); the published uniform average stays at least 30×
    further away at every size, a bias that does not shrink."""
    records = harness.run_benchmark("refinement", quick=True, results=tmp_path, overrides=SMALL, command="pytest")
    rows = [r["row"] for r in records]
    assert [(r["n"], r["rule"]) for r in rows] == [(n, rule) for n in SMALL["sizes"] for rule in rf.RULES]
    assert all(r["points"] == (r["n"] + 1) ** 2 and r["operator"] == "transolver" for r in rows)
    q = [r["vs_continuum"] for r in rows if r["rule"] == "quadrature"]
    u = [r["vs_continuum"] for r in rows if r["rule"] == "uniform"]
    assert all(a > 1.5 * b for a, b in zip(q, q[1:])), q
    assert q[-1] < 1e-4, q
    assert all(ui > 30 * qi for ui, qi in zip(u, q)), (u, q)
    assert min(u) > 0.5 * max(u), u
    finest = [r for r in rows if r["n"] == SMALL["sizes"][-1]]
    assert all(r["vs_finest"] == 0.0 for r in finest)
    table = harness.markdown_table(harness.get("refinement"), harness.read_rows(tmp_path / "refinement.jsonl"))
    assert f"| 8 | 81 | {rows[0]['vs_finest']:.2e} | {rows[0]['vs_continuum']:.2e} |" in table
    assert "81 shared nodes" in table and "128² uniform midpoint grid" in table


def test_graded_nodes_trapezoid_weights_and_shared_nodes():
    """The weights sum to the unit square's area and integrate x·y exactly up to the trapezoid rule's O(h²) error;
    the shared indices pick the coarse nodes out of the fine set."""
    import torch

    pos, w = rf.graded_nodes(8, 3.0)
    assert float(w.sum()) == pytest.approx(1.0, abs=1e-14)
    fine_pos, _ = rf.graded_nodes(32, 3.0)
    assert torch.equal(fine_pos[rf.shared_index(32, 8)], pos)
    e8 = abs(float((w * pos[:, 0] ** 2).sum()) - 1 / 3)
    _, w32 = rf.graded_nodes(32, 3.0)
    e32 = abs(float((w32 * fine_pos[:, 0] ** 2).sum()) - 1 / 3)
    assert e32 < e8 / 10, (e8, e32)


def test_committed_rows_validate_and_render():
    bench, records = harness.committed_rows("refinement")
    for op in ("transolver", "linear_no", "ono", "gnot", "oformer"):
        run = harness.latest_run(records, where={"operator": op, "init": "published"})
        assert {r["row"]["operator"] for r in run} == {op}
        table = harness.markdown_table(bench, run)
        assert "| 128 | 16641 | — |" in table and f"`{op}` at its defaults" in table
    wide = harness.latest_run(records, where={"init": "wide"})
    assert {r["row"]["init"] for r in wide} == {"wide"}


@pytest.mark.parametrize("key, value, words", [
    ("init", "narrow", "init: expected one of"),
    ("grading", 0, "grading: expected a positive number"),
    ("sizes", [16, 24], "sizes: expected"),
    ("sizes", [32, 16], "sizes: expected"),
    ("reference", 0, "reference: expected a positive integer"),
    ("operator", "nope", "operator: expected one of"),
])
def test_bad_parameters_are_refused_by_name(tmp_path, key, value, words):
    with pytest.raises(ValueError, match=words):
        harness.run_benchmark("refinement", quick=True, results=tmp_path, overrides={key: value})
    assert not (tmp_path / "refinement.jsonl").exists()
