"""The startup benchmark: real subprocess timings against plain ``import torch``, and the neuraloperator probe."""

from __future__ import annotations

import pytest

from benchmarks import harness


def test_small_run_times_each_case_against_import_torch_and_probes_neuralop(tmp_path):
    cases = ["python -c pass", "import torch", "import sciattn.train"]
    records = harness.run_benchmark("startup", quick=True, results=tmp_path,
                                    overrides={"cases": cases, "repeats": 1}, command="pytest")
    rows = {r["row"]["case"]: r["row"] for r in records}
    assert list(rows) == cases
    base = rows["import torch"]["median_s"]
    for r in rows.values():
        assert r["min_s"] <= r["median_s"] and r["repeats"] == 1
        assert r["minus_torch_s"] == pytest.approx(r["median_s"] - base)
    assert rows["python -c pass"]["median_s"] < base  # the interpreter alone is cheaper than torch
    assert rows["import sciattn.train"]["imports_neuralop"] is False  # the light start the docs claim
    assert rows["import torch"]["minus_torch_s"] == 0


def test_an_unknown_case_fails_the_run_and_appends_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="'sciattn nosuchcommand' failed"):
        harness.run_benchmark("startup", quick=True, results=tmp_path,
                              overrides={"cases": ["sciattn nosuchcommand"], "repeats": 1}, command="pytest")
    assert not harness.results_path("startup", tmp_path).exists()
