"""benchmarks/oformer_rope_refinement.py: at small sizes every term of the default OFormer converges and a term of the
published rotary scales does not; the scales recorded follow res; the committed rows validate and render; bad
parameters are refused by name."""

from __future__ import annotations

import pytest

from benchmarks import harness
from benchmarks import oformer_rope_refinement as orr


def test_quick_run_default_scales_converge_published_do_not(tmp_path):
    """Quick budget (8², 16² against the cell means of 32²): with the default rope_scales the output and every
    attention term shrink at least 2× per refinement; with the published res·[res, res/4, 1, 1] at least one
    attention term shrinks by less than 1.5× (its kernel is not resolved)."""
    records = harness.run_benchmark("oformer_rope_refinement", quick=True, results=tmp_path, command="pytest")
    rows = [r["row"] for r in records]
    res = records[0]["params"]["res"]
    by = {(r["label"], r["quantity"], r["n"]): r for r in rows}
    quantities = sorted({r["quantity"] for r in rows})
    assert quantities == ["attention 0", "attention 1", "attention 2", "attention 3", "output"]
    assert all(r["rope_scales"] == [16.0, 4.0, 1.0, 1.0] and r["decoder_rope_scale"] == 16.0
               for r in rows if r["label"] == "default")
    assert all(r["rope_scales"] == [res * res, res * res / 4, res, res] and r["decoder_rope_scale"] == res
               for r in rows if r["label"] == "published")
    ratio = {(lab, q): by[(lab, q, 16)]["error"] / by[(lab, q, 8)]["error"]
             for lab in ("default", "published") for q in quantities}
    assert all(ratio[("default", q)] < 0.5 for q in quantities), ratio
    assert max(ratio[("published", q)] for q in quantities if q.startswith("attention")) > 1 / 1.5, ratio
    table = harness.markdown_table(harness.get("oformer_rope_refinement"), records)
    r0 = by[("published", "attention 0", 8)]
    assert f"| [4096, 1024, 64, 64] (published) | 64 | attention 0 | {r0['error']:.2e} |" in table
    assert "32² output" in table


def test_restrict_takes_cell_means():
    import torch

    y = torch.arange(16.0).reshape(1, 1, 4, 4)
    assert torch.equal(orr.restrict(y, 2), torch.tensor([[[[2.5, 4.5], [10.5, 12.5]]]]))


def test_committed_rows_validate_and_render():
    bench, records = harness.committed_rows("oformer_rope_refinement")
    table = harness.markdown_table(bench, harness.latest_run(records, full=True))
    assert "| rope_scales | decoder scale | quantity |" in table and "(published)" in table


@pytest.mark.parametrize("key, value, words", [
    ("res", 0, "res: expected a positive integer"),
    ("seed", -1, "seed: expected a non-negative integer"),
    ("sizes", [10], "sizes: expected"),
    ("sizes", [32], "sizes: expected"),
    ("reference", "256", "reference: expected a positive integer"),
])
def test_bad_parameters_are_refused_by_name(tmp_path, key, value, words):
    with pytest.raises(ValueError, match=words):
        harness.run_benchmark("oformer_rope_refinement", quick=True, results=tmp_path, overrides={key: value})
