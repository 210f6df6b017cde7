"""The convergence benchmark: rows per operator and dimension from the same protocol as the registry contract
(``tests/operators/test_discretisation_convergence.py``), and a verdict computed from the errors."""

from __future__ import annotations

from benchmarks import convergence, harness


def test_small_run_rows_carry_the_errors_ratio_and_verdict(tmp_path):
    records = harness.run_benchmark("convergence", quick=True, results=tmp_path,
                                    overrides={"operators": ["galerkin_transformer", "fno"]}, command="pytest")
    rows = {r["row"]["operator"]: r["row"] for r in records}
    assert set(rows) == {"galerkin_transformer", "fno"}
    for r in rows.values():
        assert r["dims"] == 1 and r["sizes"] == [32, 64] and r["reference"] == 128
        assert r["ratio"] == r["e64"] / r["e32"]
        meets = r["e64"] <= convergence.FIRST_ORDER * r["e32"] and r["e64"] <= convergence.TOLERANCE
        assert (r["verdict"] == "meets") == meets
        assert r["e8"] is None and r["e128"] is None
    # the same numbers as the contract's measurement
    errs = convergence.relative_errors("fno", 1, [32, 64], 128)
    assert errs[64] == rows["fno"]["e64"]
    md = harness.markdown_table(harness.get("convergence"), records)
    assert f"{sum(r['verdict'] == 'meets' for r in rows.values())} of 2 cases meet it" in md


def test_committed_rows_validate_and_render():
    bench, records = harness.committed_rows("convergence")
    records = harness.latest_run(records, full=True)
    assert "cases meet it" in harness.markdown_table(bench, records)
