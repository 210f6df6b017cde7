"""benchmarks/multipole_scaling.py: an in-process CPU run through the harness times each method and size and
measures convergence under refinement; one case in a worker subprocess; rows rebuilt from a run's log (current
and earlier field names) and merged with an earlier run; exponents and speedups computed from the rows; the
committed rows (CPU and the H200 run) validate and render with the claim's verdict; bad parameters are refused
by name."""

from __future__ import annotations

import json

import pytest

from benchmarks import harness
from benchmarks import multipole_scaling as ms


def test_in_process_run_times_each_case_and_converges(tmp_path):
    over = {"methods": ["multipole", "dense_sdpa"], "sizes": [8, 16], "isolate": False,
            "convergence_sides": [8, 16], "convergence_reference": 32}
    records = harness.run_benchmark("multipole_scaling", quick=True, results=tmp_path, overrides=over,
                                    command="pytest")
    rows = [r["row"] for r in records]
    assert [(r["method"], r["side"], r["N"]) for r in rows] == [
        ("multipole", 8, 64), ("multipole", 16, 256), ("dense_sdpa", 8, 64), ("dense_sdpa", 16, 256)]
    for r in rows:
        assert r["forward_s"] > 0 and r["forward_backward_s"] > 0 and r["status"] is None
        assert r["peak_forward_backward_mb"] >= r["base_mb"] > 0
    e = {r["side"]: r["convergence_error"] for r in rows if r["method"] == "multipole"}
    assert 0 < e[16] < e[8] < 1  # the layer's output converges as the grid is refined
    assert all(r["convergence_error"] is None for r in rows if r["method"] == "dense_sdpa")
    table = harness.markdown_table(harness.get("multipole_scaling"), records)
    assert f"| dense SDPA | 16² | {rows[3]['forward_s'] * 1e3:.1f} |" in table
    assert "Dense SDPA time / multipole, default" in table and "Claim (time and memory exponents" in table


@pytest.mark.slow
def test_one_case_in_a_worker_subprocess():
    got, why = ms._subprocess({"task": "case", "method": "galerkin", "n": 16, "device": "cpu", "reps": 1,
                               "phase": "backward", "threads": 1}, {"MALLOC_MMAP_THRESHOLD_": "4294967296"})
    assert why is None, why
    assert got["forward_backward_s"] > 0 and got["peak_forward_backward_mb"] >= got["base_mb"] > 0
    assert "forward_s" not in got


def test_exponents_and_speedups_come_from_the_rows():
    rows = [ms._row("multipole", n, forward_s=1e-6 * n * n, forward_backward_s=2e-6 * n * n, base_mb=100.0,
                    peak_forward_mb=100.0 + 1e-3 * n * n, peak_forward_backward_mb=100.0 + 1e-2 * n ** 2.2)
            for n in (64, 128, 256)]
    rows += [ms._row("dense_sdpa", n, forward_s=1e-9 * n ** 4, forward_backward_s=4e-9 * n ** 4, base_mb=100.0,
                     peak_forward_mb=None, peak_forward_backward_mb=None) for n in (64, 128)]
    f = ms.fits(rows)
    assert f["multipole"]["time_forward"] == pytest.approx(1.0)
    assert f["multipole"]["memory_forward_backward"] == pytest.approx(1.1)
    assert f["dense_sdpa"]["time_forward_backward"] == pytest.approx(2.0)
    assert f["dense_sdpa"]["memory_forward"] is None
    records = [{"params": {**ms.PARAMS}, "row": r} for r in rows]
    notes = ms.notes(records)
    assert "met (largest 1.10)" in notes
    ratio = 4e-9 * 128 ** 4 / (2e-6 * 128 ** 2)
    assert f"64²: {4e-9 * 64 ** 4 / (2e-6 * 64 ** 2):.1f}×, 128²: {ratio:.1f}×" in notes


def _log(path):
    lines = [json.dumps({"log_meta": {"device_name": "NVIDIA H200", "torch": "2.11.0+cu130", "date": "2026-11-30"}}),
             "# some progress line",
             json.dumps(ms._row("multipole", 64, forward_s=0.004, forward_backward_s=0.011, base_mb=1.0,
                                peak_forward_backward_mb=87.0)),
             json.dumps({"method": "galerkin", "side": 64, "N": 4096, "forward_s": 0.0014, "forward_backward_s": 0.0039,
                         "peak_rss_mb": 76.0, "base_rss_mb": 65.0}),  # the earlier script's field names
             json.dumps({"convergence": "multipole", "64": 0.02, "128": 0.005})]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rows_from_a_log_through_the_harness(tmp_path):
    log = _log(tmp_path / "gpu.log")
    rows = ms.rows_from_log(log)
    assert [(r["method"], r["side"]) for r in rows] == [("multipole", 64), ("multipole", 128), ("galerkin", 64)]
    assert rows[0]["convergence_error"] == 0.02 and rows[1]["status"] == "not timed (convergence only)"
    assert rows[2]["peak_forward_backward_mb"] == 76.0 and rows[2]["base_mb"] == 65.0
    assert all(r["measured_in"] == "log gpu.log (NVIDIA H200, 2.11.0+cu130, 2026-11-30)" for r in rows)
    records = harness.run_benchmark("multipole_scaling", results=tmp_path, overrides={"from_log": str(log)})
    assert [r["row"] for r in records] == rows
    assert ms.memory_above_start(rows[2]) == pytest.approx(11.0)


def test_merge_keeps_the_other_methods_of_the_latest_full_run(tmp_path):
    harness.run_benchmark("multipole_scaling", results=tmp_path, overrides={"from_log": str(_log(tmp_path / "a.log"))})
    new = [ms._row("multipole", 32, forward_s=0.1, forward_backward_s=0.2)]
    merged = ms._merge({**ms.PARAMS, "methods": ["multipole"]}, new, results=tmp_path)
    assert [(r["method"], r["side"]) for r in merged] == [("multipole", 32), ("galerkin", 64)]
    assert merged[0]["measured_in"] is None and merged[1]["measured_in"].startswith("log a.log")
    assert ms._merge({**ms.PARAMS, "device": "cuda"}, new, results=tmp_path) == new  # no cuda run there


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_committed_rows_validate_and_render(device):
    bench, records = harness.committed_rows("multipole_scaling")
    chosen = harness.latest_run(records, full=True, where={"device": device})
    text = harness.markdown_table(bench, chosen)
    for r in (r["row"] for r in chosen if r["row"]["forward_s"] is not None):
        assert f"| {ms.LABELS[r['method']]} | {r['side']}² | {r['forward_s'] * 1e3:.1f} |" in text
    assert "time exponent, forward+backward" in text
    if any(r["row"]["method"] == "multipole" for r in chosen):
        assert "Claim (time and memory exponents ≤ 1.15 for the default layer)" in text


@pytest.mark.parametrize(("over", "name"), [({"device": "tpu"}, "device"), ({"methods": ["nope"]}, "methods"),
                                            ({"sizes": [10]}, "sizes"), ({"reps": 0}, "reps"),
                                            ({"convergence_sides": [48]}, "convergence_sides"),
                                            ({"malloc_env": {"PATH": "x"}}, "malloc_env"),
                                            ({"from_log": "/nonexistent.log"}, "from_log")])
def test_bad_parameters_are_refused_by_name(tmp_path, over, name):
    with pytest.raises(ValueError, match=rf"^{name}: expected"):
        harness.run_benchmark("multipole_scaling", results=tmp_path, overrides=over)
    assert not (tmp_path / "multipole_scaling.jsonl").exists()
