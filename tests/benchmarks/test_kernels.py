"""benchmarks/kernels.py: a small CPU run through the harness gives doubling sizes, backward costing more than
forward and a stop reason on each series' last row; backends that cannot run here are rows without N; the
fitted exponents are least-squares slopes; the committed rows (CPU and the H200 run) validate and render per
op; bad parameters are refused by name."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import harness, kernels


def test_small_cpu_run_through_the_harness(tmp_path):
    over = {"ops": ["galerkin"], "min_n": 256, "max_n": 1024, "series_budget": 30.0}
    records = harness.run_benchmark("kernels", quick=True, results=tmp_path, overrides=over, command="pytest")
    assert harness.read_rows(tmp_path / "kernels.jsonl")[-1]["row"] == records[-1]["row"]
    rows = [r["row"] for r in records]
    assert {r["op"] for r in rows} == {"galerkin"}
    measured = [r for r in rows if r["N"] is not None]
    for backend in ("reference", "dense_sdpa"):
        series = [r for r in measured if r["backend"] == backend]
        assert [r["N"] for r in series] == [256, 512, 1024][:len(series)] and series
        assert all(r["stopped"] is None for r in series[:-1]) and series[-1]["stopped"]
        for r in series:  # forward+backward runs a forward too
            assert r["forward_backward_s"] > r["forward_s"] > 0
            assert r["peak_forward_backward_mb"] is None or r["peak_forward_backward_mb"] >= 0
    not_run = [r for r in rows if r["N"] is None]
    assert any(r["backend"] == "triton" and "CUDA only" in r["stopped"] for r in not_run)
    table = harness.markdown_table(harness.get("kernels"), records)
    assert "| reference | 2^8 |" in table and f"{measured[0]['forward_s'] * 1e3:.2f}" in table


def test_fitted_exponents_are_least_squares_slopes():
    rows = [kernels._row("galerkin", "reference", {"N": n, "forward_s": 1e-9 * n ** 1.5, "forward_backward_s": 3e-9 * n,
                                                   "warmup_s": 0.1, "peak_forward_mb": 1.0,
                                                   "peak_forward_backward_mb": 1e-6 * n ** 2})
            for n in (2**12, 2**13, 2**14, 2**15)]
    f = kernels.fits(rows, fit_min_n=2**13)["galerkin/reference"]
    assert f["N_range"] == [2**13, 2**15] and not f["below_fit_min_n"]
    assert f["time_forward"] == pytest.approx(1.5) and f["time_forward_backward"] == pytest.approx(1.0)
    assert f["memory_forward_backward"] == pytest.approx(2.0)
    g = kernels.fits(rows, fit_min_n=2**16)["galerkin/reference"]  # too few sizes: the two largest, marked
    assert g["below_fit_min_n"] and g["N_range"] == [2**14, 2**15]
    assert kernels.fit_exponent([4], [1.0]) is None


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_committed_rows_validate_and_render_per_op(device):
    bench = harness.get("kernels")
    records = harness.read_rows(harness.results_path("kernels"))
    for i, r in enumerate(records):
        harness.validate_row(bench, r["row"], i)
    for op in kernels.OPS:
        chosen = harness.latest_run(records, full=True, where={"device": device, "row.op": op})
        table = harness.markdown_table(bench, chosen)
        for r in (r["row"] for r in chosen if r["row"]["N"] is not None):
            assert f"| {r['backend']} | 2^{int(math.log2(r['N']))} | {r['forward_s'] * 1e3:.2f} |" in table
        assert "Fitted log-log exponents" in table and kernels.OPS[op].describe in table


@pytest.mark.parametrize(("over", "name"), [({"device": "tpu"}, "device"), ({"ops": ["nope"]}, "ops"),
                                            ({"dtype": "float64"}, "dtype"), ({"min_n": 0}, "min_n"),
                                            ({"min_n": 4096, "max_n": 1024}, "min_n"),
                                            ({"series_budget": -1}, "series_budget")])
def test_bad_parameters_are_refused_by_name(tmp_path, over, name):
    with pytest.raises(ValueError, match=rf"^{name}: expected"):
        harness.run_benchmark("kernels", quick=True, results=tmp_path, overrides=over)
    assert not (tmp_path / "kernels.jsonl").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for a machine without CUDA")
def test_cuda_on_a_machine_without_it_names_the_parameter(tmp_path):
    with pytest.raises(ValueError, match="device: expected 'cuda' with a CUDA device available"):
        harness.run_benchmark("kernels", quick=True, results=tmp_path, overrides={"device": "cuda"})
