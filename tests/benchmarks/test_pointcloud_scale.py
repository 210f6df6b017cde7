"""benchmarks/pointcloud_scale.py with a tiny budget: one case measured in process (whole and chunked), one in a
worker subprocess, a harness run whose subprocesses are replaced by a stand-in (a forward over the memory limit is
retried chunked, a case expected to exceed max_seconds is skipped, the 2^20 verdict), the merge with an earlier
run's rows, and bad parameters refused by name."""

from __future__ import annotations

import pytest

from benchmarks import harness
from benchmarks import pointcloud_scale as ps


@pytest.mark.parametrize("phase", ["forward", "forward_backward"])
def test_one_case_in_process(phase):
    got = ps.measure("transolver", 64, phase, reps=1)
    assert got["seconds"] > 0 and got["peak_mb"] >= got["base_mb"] > 0
    assert got["parameters"] == sum(p.numel() for p in ps.build("transolver").parameters())


def test_chunked_forward_in_process_and_a_worker_subprocess():
    assert ps.measure("linear_no", 64, "forward", reps=1, chunk_points=16)["seconds"] > 0
    got, why = ps.run_case({"operator": "gnot", "n": 32, "phase": "forward", "reps": 1, "threads": 1,
                            "chunk_points": None}, {}, 8192.0)
    assert why is None, why
    assert got["seconds"] > 0 and got["peak_mb"] >= got["base_mb"] > 0
    got, why = ps.run_case({"operator": "gnot", "n": 32, "phase": "forward", "reps": 1, "threads": 1,
                            "chunk_points": None}, {}, 1.0)  # any process is above 1 MB resident: killed
    assert got is None and why.startswith("memory: killed at"), why


def _stand_in(calls):
    """A run_case that makes time ∝ N² for 'ono', says an unchunked 'transolver' forward at N = 4096 and an 'ono'
    forward+backward at 2048 ran out of memory, and otherwise returns linear time and memory."""

    def run_case(spec, malloc_env, limit):
        calls.append(dict(spec))
        n = spec["n"]
        if spec["operator"] == "transolver" and n == 4096 and spec["phase"] == "forward" and not spec["chunk_points"]:
            return None, f"memory: killed at 17000 MB resident (memory_limit_mb {limit:g})"
        if spec["operator"] == "ono" and n == 2048 and spec["phase"] == "forward_backward":
            return None, f"memory: killed at 17000 MB resident (memory_limit_mb {limit:g})"
        if spec["operator"] == "linear_no" and n == 2048:  # even chunked
            return None, f"memory: killed at 17000 MB resident (memory_limit_mb {limit:g})"
        seconds = 1e-6 * n * n if spec["operator"] == "ono" else 1e-4 * n
        return {"seconds": seconds, "peak_mb": 200 + n / 100, "base_mb": 200.0, "parameters": 7}, None

    return run_case


def test_harness_run_retries_chunked_skips_slow_cases_and_gives_the_verdict(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ps, "run_case", _stand_in(calls))
    over = {"operators": ["transolver", "linear_no", "ono"], "sizes": [1024, 2048, 4096], "backward_max": 4096,
            "max_seconds": 10.0, "chunk_points": 512}
    records = harness.run_benchmark("pointcloud_scale", results=tmp_path, overrides=over, command="pytest")
    rows = {(r["row"]["operator"], r["row"]["N"]): r["row"] for r in records}
    big = rows[("transolver", 4096)]
    assert big["chunk_points"] == 512 and big["forward_s"] == pytest.approx(0.4096)
    assert "whole forward memory: killed" in big["status"] and big["forward_backward_s"] == pytest.approx(0.4096)
    assert rows[("transolver", 2048)]["forward_backward_s"] == pytest.approx(0.2048)
    # ono: 1 s at 1024, 4.2 s at 2048, so about 16.8 s expected at 4096 > max_seconds: not run
    assert rows[("ono", 4096)]["forward_s"] is None and "forward not run: about 17 s" in rows[("ono", 4096)]["status"]
    assert not any(c["operator"] == "ono" and c["n"] == 4096 for c in calls)
    # linear_no: forward out of memory at 2048, whole and chunked, so not run at 4096
    assert "chunked forward failed (memory" in rows[("linear_no", 2048)]["status"]
    assert rows[("linear_no", 4096)]["status"].startswith("forward not run: it exceeded memory_limit_mb at 2^11")
    assert not any(c["operator"] == "linear_no" and c["n"] == 4096 for c in calls)
    # ono: forward+backward out of memory at 2048, so not run at 4096
    assert "forward+backward failed (memory" in rows[("ono", 2048)]["status"]
    assert "forward+backward not run: it exceeded memory_limit_mb at 2^11" in rows[("ono", 4096)]["status"]
    verdict = ps.verdicts([r["row"] for r in records], n=4096, limit_mb=500.0)
    assert verdict["transolver"] == "met: 0.24 GB, 0.4 s, chunked (512 points per chunk)"
    assert verdict["ono"].startswith("not met (forward not run")
    table = harness.markdown_table(harness.get("pointcloud_scale"), records)
    assert "| transolver | 2^12 | 0.41 | 0.24 | 0.41 | 0.24 | chunked, 512 points per chunk; whole forward memory" in table
    assert "| ono | 2^10 | 1.05 | 0.21 | 1.05 | 0.21 |  |" in table
    assert "| transolver | 7 | 1.00 | 1.00 | not run at 2^20 |" in table  # exponents from the unchunked rows

    # a later run of one operator keeps the other's rows (merge; from the results folder, here tmp_path)
    monkeypatch.setattr(ps, "run_case", _stand_in([]))
    monkeypatch.setattr(ps, "RESULTS", tmp_path)
    merged = harness.run_benchmark("pointcloud_scale", results=tmp_path, overrides={**over, "operators": ["ono"],
                                                                                    "merge": True}, command="pytest")
    kept = [r["row"] for r in merged if r["row"]["operator"] == "transolver"]
    assert len(kept) == 3 and all(r["measured_in"].startswith("run ") for r in kept)


@pytest.mark.parametrize("key, value, message", [
    ("operators", ["fno"], "operators: expected a non-empty list of"),
    ("sizes", [8], "sizes: expected a non-empty list of point counts >= 16"),
    ("chunk_points", 0, "chunk_points: expected a positive integer"),
    ("memory_limit_mb", -1, "memory_limit_mb: expected a positive number"),
    ("device", "tpu", "device: expected 'cpu' or 'cuda', got 'tpu'"),
])
def test_bad_parameters_are_refused_by_name(tmp_path, key, value, message):
    with pytest.raises(ValueError, match=message):
        harness.run_benchmark("pointcloud_scale", quick=True, results=tmp_path, overrides={key: value})


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_is_refused_by_name_without_a_gpu(tmp_path):
    with pytest.raises(ValueError, match=r"device: expected a machine with CUDA for 'cuda'"):
        harness.run_benchmark("pointcloud_scale", quick=True, results=tmp_path, overrides={"device": "cuda"})


def test_an_out_of_gpu_memory_worker_counts_as_over_the_memory_limit(tmp_path, monkeypatch):
    """A worker that dies of torch.OutOfMemoryError is a memory failure (so the forward is retried chunked), and GPU
    peaks, when rows have them, get their own table columns."""

    class Done:
        returncode = 1

        def poll(self):
            return 1

        def communicate(self):
            return "", "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB"

    monkeypatch.setattr(ps.subprocess, "Popen", lambda *a, **k: Done())
    got, why = ps.run_case({"operator": "gnot", "n": 32, "phase": "forward", "reps": 1, "threads": 1,
                            "chunk_points": None, "device": "cuda"}, {}, 8192.0)
    assert got is None and why.startswith("memory: out of GPU memory"), why
    row = {**{k: None for k in ps.SCHEMA}, "operator": "gnot", "N": 1024, "forward_s": 0.5, "peak_forward_mb": 900.0,
           "peak_forward_gpu_mb": 2048.0, "device": "cuda"}
    table = ps.table([{"row": row}])
    assert "| peak GPU, forward (GB) |" in table and "| gnot | 2^10 | 0.50 | 0.88 | – | – | 2.00 | – |" in table
