"""The demo benchmark: ``sciattn demo``'s metrics.json as rows (one per test resolution), a run folder is never
overwritten, and the quick budget trains through the same path (slow: it generates Darcy data when not cached)."""

from __future__ import annotations

import pytest

from benchmarks import demo, harness

METRICS = {"train_resolution": [32, 32], "parameters": 1234, "epochs_done": 2, "data_seconds": 1.5,
           "wall_seconds": 60.0, "data_source": {"n_train": 100},
           "test": {"test_64": {"rel_l2": 0.06, "rel_h1": 0.2}, "test_32": {"rel_l2": 0.05, "rel_h1": 0.1},
                    "test_128": {"rel_l2": 0.07, "rel_h1": 0.3}}}


def test_rows_of_orders_the_resolutions_and_divides_by_the_training_error():
    rows = demo.rows_of(METRICS)
    assert [r["resolution"] for r in rows] == [32, 64, 128]
    assert [r["ratio_to_training"] for r in rows] == pytest.approx([1.0, 1.2, 1.4])
    assert all(r["parameters"] == 1234 and r["n_train"] == 100 and r["train_resolution"] == 32 for r in rows)
    for i, r in enumerate(rows):
        harness.validate_row(harness.get("demo"), r, i)


def test_an_existing_folder_and_bad_overrides_are_refused(tmp_path):
    with pytest.raises(FileExistsError, match="out: .* exists; choose another folder"):
        demo.run({"out": str(tmp_path), "overrides": []})
    with pytest.raises(ValueError, match="overrides: expected a list of 'SECTION.KEY=VALUE' strings, got"):
        demo.run({"out": str(tmp_path / "new"), "overrides": ["epochs"]})


@pytest.mark.slow
def test_quick_budget_trains_and_evaluates_at_three_resolutions(tmp_path):
    records = harness.run_benchmark("demo", quick=True, results=tmp_path,
                                    overrides={"out": str(tmp_path / "run")}, command="pytest")
    rows = [r["row"] for r in records]
    assert [r["resolution"] for r in rows] == [32, 64, 128]
    assert rows[0]["ratio_to_training"] == 1.0 and rows[0]["epochs"] == 1 and rows[0]["n_train"] == 64
    assert all(0 < r["rel_l2"] < 2 for r in rows)
    assert (tmp_path / "run" / "metrics.json").is_file()


def test_committed_rows_validate_and_render():
    bench, records = harness.committed_rows("demo")
    records = harness.latest_run(records, full=True)
    assert "| 32 |" in harness.markdown_table(bench, records)
