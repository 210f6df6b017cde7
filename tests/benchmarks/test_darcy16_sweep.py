"""The darcy16_sweep benchmark: train on neuraloperator's Darcy 16 file through the CLI and sweep 16 / 32 / 64
(skips without ``../shared/data``); rows carry the run-level values; the verdict is the CLI's."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import darcy16_sweep, harness

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.mark.skipif(not (DATA / "darcy_train_16.pt").is_file(), reason="../shared/data is absent")
def test_quick_run_trains_sweeps_and_reports_the_ratio_to_the_training_resolution(tmp_path):
    records = harness.run_benchmark("darcy16_sweep", quick=True, results=tmp_path / "results",
                                    overrides={"data": str(DATA), "out": str(tmp_path / "run"), "n_samples": 4},
                                    command="pytest")
    rows = [r["row"] for r in records]
    assert [r["resolution"] for r in rows] == list(darcy16_sweep.RESOLUTIONS)
    base = rows[0]["rel_l2"]
    for r in rows:
        assert r["ratio_to_training"] == pytest.approx(r["rel_l2"] / base)
        assert r["n_train"] == 64 and r["n_samples"] == 4 and 0 < r["real_test_rel_l2"] < 2
    assert rows[0]["regime"] == "training"


def test_an_existing_run_folder_is_not_overwritten(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(SystemExit, match="--out: .* exists; pass --resume"):
        darcy16_sweep.sweep(DATA, tmp_path / "run", 4, resume=False)


def test_rows_of_copies_the_run_values_into_each_resolution():
    result = {"rows": [{"resolution": 16, "rel_l2": 0.1}, {"resolution": 32, "rel_l2": 0.11}],
              **{k: i for i, k in enumerate(darcy16_sweep.RUN_FIELDS)}}
    rows = darcy16_sweep.rows_of(result)
    assert [r["resolution"] for r in rows] == [16, 32]
    assert all(r[k] == i for r in rows for i, k in enumerate(darcy16_sweep.RUN_FIELDS))


def test_committed_rows_validate_and_render():
    bench, records = harness.committed_rows("darcy16_sweep")
    records = harness.latest_run(records, full=True)
    assert "Verdict:" in harness.markdown_table(bench, records)
