"""benchmarks/kernels.py: a small CPU run through the harness gives doubling sizes, backward costing more than
forward, limits from rates measured in the run and a stop reason on each series' last row; backends that cannot
run here are rows without N; the bytes/FLOPs models and the limits follow the stated formulas; the fitted
exponents are least-squares slopes; the committed rows (CPU and the H200 run) validate and render per op; bad
parameters are refused by name."""

from __future__ import annotations

import math
import types

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
            assert r["copy_gbs"] > 0 and r["clone_gbs"] > 0 and r["matmul_gflops"] > 0
            x = kernels.OPS["galerkin"].make(r["N"], types.SimpleNamespace(batch=1, heads=4, head_dim=32),
                                             torch.device("cpu"), torch.float32)
            work = (kernels._softmax_work if backend == "dense_sdpa" else kernels._galerkin_work)(x)
            assert (r["limit_forward_s"], r["limit_forward_backward_s"]) == work.limits(r["copy_gbs"],
                                                                                          r["matmul_gflops"])
    not_run = [r for r in rows if r["N"] is None]
    assert any(r["backend"] == "triton" and "CUDA only" in r["stopped"] for r in not_run)
    table = harness.markdown_table(harness.get("kernels"), records)
    assert "| reference | 2^8 |" in table and f"{measured[0]['forward_s'] * 1e3:.2f}" in table
    r = measured[0]
    assert (f"| {r['forward_s'] * 1e3:.2f} | {r['limit_forward_s'] * 1e3:.2f} | "
            f"{100 * r['limit_forward_s'] / r['forward_s']:.0f}% |") in table
    assert "copy bandwidth" in table and "GFLOP/s" in table


def test_neighborhood_rows_keep_the_measured_gather_bandwidth(tmp_path):
    over = {"ops": ["neighborhood"], "backends": ["sparse", "dense_sdpa"], "min_n": 256, "max_n": 512,
            "series_budget": 30.0}
    records = harness.run_benchmark("kernels", quick=True, results=tmp_path, overrides=over, command="pytest")
    measured = [r["row"] for r in records if r["row"]["N"] is not None and r["row"]["backend"] == "sparse"]
    assert [r["N"] for r in measured] == [256, 512] and all(r["gather_gbs"] > 0 for r in measured)
    assert all(r["row"]["gather_gbs"] is None for r in records if r["row"]["backend"] == "dense_sdpa")
    notes = kernels.notes(records)
    r = measured[-1]
    ms = 1e3 * 2 * (49 * 512 * 1 * 4 * 64 * 4) / (r["gather_gbs"] * 1e9)
    assert f"would take {ms:,.0f} ms at N = 2^9 (nnz = 25,088)" in notes


def test_every_row_of_a_run_uses_its_highest_measured_rates():
    work = kernels.Work(1e9, 1e10, 3e9, 3e10)
    slow = {"copy_gbs": 5.0, "clone_gbs": 1.0, "matmul_gflops": 50.0}
    fast = {"copy_gbs": 20.0, "clone_gbs": 3.0, "matmul_gflops": 100.0}
    rows = [dict(slow), dict(fast)]
    kernels.best_rates([(rows[0], work), (rows[1], work)])
    for r in rows:
        assert {k: r[k] for k in fast} == fast
        assert (r["limit_forward_s"], r["limit_forward_backward_s"]) == pytest.approx((0.1, 0.3))  # FLOPs-bound


def test_series_stop_before_a_size_predicted_over_the_memory_or_time_budget():
    cfg = types.SimpleNamespace(max_mem_gb=4.0, series_budget=100.0)

    def row(n, s, mb):
        return kernels._row("weighted_softmax", "sdpa", {"N": n, "forward_s": s / 4, "forward_backward_s": s,
                                                         "peak_forward_mb": mb / 2, "peak_forward_backward_mb": mb})

    quadratic = [row(4096, 1.0, 300.0), row(8192, 4.0, 1200.0)]  # next: 4 × 1200 MB = 4.8 GB > 4 GB
    assert kernels.stop_reason(quadratic, 5.0, 4.0, cfg, 8192) == \
        "predicted memory 4800 MB > 4.0 GB at N=16384 (after N=8192)"
    linear = [row(4096, 1.0, 300.0), row(8192, 2.0, 600.0)]
    assert kernels.stop_reason(linear, 3.0, 2.0, cfg, 8192) is None
    assert kernels.stop_reason(linear, 97.0, 2.0, cfg, 8192) == "time budget 100 s (spent 97 s) after N=8192"
    assert kernels.stop_reason([row(4096, 1.0, 5000.0)], 1.0, 1.0, cfg, 4096) == "memory 5000 MB > 4.0 GB at N=4096"


def test_work_models_and_limits_follow_the_docstring():
    cfg = types.SimpleNamespace(batch=2, heads=3, head_dim=4)
    n, t = 64, 2 * 3 * 64 * 4 * 4  # t: bytes of one (B, H, N, D) fp32 tensor
    x = kernels.OPS["galerkin"].make(n, cfg, torch.device("cpu"), torch.float32)
    w = kernels._galerkin_work(x)
    assert w.forward_bytes == 4 * t + 2 * n * 4 and w.forward_backward_bytes == 11 * t + 2 * (2 * n * 4)
    assert w.forward_flops == 2 * 2 * 3 * (n + n) * 4 * 4 and w.forward_backward_flops == 3 * w.forward_flops
    s = kernels._softmax_work(kernels.OPS["weighted_softmax"].make(n, cfg, torch.device("cpu"), torch.float32))
    assert s.forward_flops == 2 * 2 * 3 * n * n * (4 + 4) and s.forward_backward_flops == 3 * s.forward_flops
    x = kernels.OPS["neighborhood"].make(n, cfg, torch.device("cpu"), torch.float32)
    nb = kernels._neighborhood_work(x)
    assert x["col_indices"].numel() == 49 * n and nb.forward_flops == 2 * 2 * 3 * 49 * n * 8
    assert nb.forward_bytes == 4 * t + 2 * n * 4 + 8 * (49 * n + n + 1)
    # a limit is the larger of the two times: 1e9 B at 10 GB/s = 0.1 s against 1e9 FLOP at 100 GFLOP/s = 0.01 s
    lim = kernels.Work(1e9, 1e9, 2e9, 4e10)
    assert lim.limits(10.0, 100.0) == pytest.approx((0.1, 0.4))


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
    bench, records = harness.committed_rows("kernels")
    ops = {r["row"]["op"] for r in records if r["params"]["device"] == device}
    assert device == "cuda" or ops >= set(kernels.OPS)  # every op on the CPU; the H200 run predates galerkin_plain
    for op in (op for op in kernels.OPS if op in ops):
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
