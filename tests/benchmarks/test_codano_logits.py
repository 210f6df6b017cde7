"""The codano_logits benchmark: our quadrature-weighted codomain logits keep their variance under grid
refinement, neuraloperator's CODALayer's grow with the number of points; the verdict is computed from the rows."""

from __future__ import annotations

import pytest

from benchmarks import codano_logits, harness

pytest.importorskip("neuralop")


def test_small_run_ours_keeps_the_logit_variance_the_anchors_grow_with_n(tmp_path):
    records = harness.run_benchmark("codano_logits", quick=True, results=tmp_path, overrides={"sizes": [16, 32]},
                                    command="pytest")
    rows = [r["row"] for r in records]
    at = {(r["fields"], r["method"], r["grid"]): r for r in rows}
    for fields in ("periodic", "nonperiodic"):
        ours = at[fields, "ours", 32]["var_ratio_to_coarsest"]
        anchor = at[fields, "anchor", 32]["var_ratio_to_coarsest"]
        assert abs(ours - 1) < 0.05, (fields, ours)  # the quadrature normalises by the measure, not by N
        assert 3.0 < anchor < 4.5, (fields, anchor)  # a plain sum over N = 4x more points
        assert at[fields, "ours", 16]["var_ratio_to_coarsest"] == 1.0
        assert at[fields, "anchor", 32]["points"] == 4 * at[fields, "anchor", 16]["points"]
    verdict = codano_logits.verdict(rows)
    assert verdict and all(verdict.values()), verdict
    md = harness.markdown_table(harness.get("codano_logits"), records)
    assert "Verdict: periodic, ours within 10% of its coarsest-grid variance: yes" in md and "quick budget" in md


def test_verdict_follows_the_rows():
    rows = [{"fields": f, "method": m, "grid": g, "points": g * g, "logit_var": 1.0, "logit_abs_mean": 1.0,
             "var_ratio_to_coarsest": r}
            for f in ("periodic", "nonperiodic") for g in (32, 256)
            for m, r in (("ours", 1.0 if g == 32 else 1.2), ("ours_pointwise", 1.0), ("anchor", 1.0 if g == 32 else 64.0),
                         ("anchor_default", 1.0))]
    v = codano_logits.verdict(rows)
    assert v["periodic, ours within 10% of its coarsest-grid variance"] is False  # 20% change
    assert v["periodic, anchor grows with N"] is True
    assert v["periodic, anchor_default grows with N"] is False  # flat


def test_committed_rows_validate_and_render():
    path = harness.results_path("codano_logits")
    records = harness.latest_run(harness.read_rows(path), full=True)
    bench = harness.get("codano_logits")
    for i, r in enumerate(records):
        harness.validate_row(bench, r["row"], i)
    assert "| periodic | ours |" in harness.markdown_table(bench, records)
