"""The benchmark scripts' offline paths: results rebuilt from a log or a JSON, and the GPU scripts'
CPU test mode, so that a change to them is caught without a GPU or a long run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_multipole_scaling_rebuilds_results_from_a_log_with_exponents_and_speedups(tmp_path):
    rows = []
    for method, scale, power in (("multipole", 1e-3, 1.0), ("dense_sdpa", 1e-4, 2.0)):
        for side in (64, 128, 256):
            n = side * side
            t = scale * (n / 4096) ** power
            rows.append({"method": method, "side": side, "N": n, "forward_s": t / 3, "forward_backward_s": t,
                         "peak_rss_mb": 10 + n / 4096 * (1 if power == 1 else 2), "base_rss_mb": 10})
    log = tmp_path / "run.log"
    log.write_text("noise line\n" + "\n".join(json.dumps(r) for r in rows) + "\n")
    res = _run("benchmarks/multipole_scaling.py", "--device", "cuda", "--from-log", str(log),
               "--log-meta", "2026-01-01", "Test GPU", "0.0", "--results", str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads((tmp_path / "multipole_scaling_cuda.json").read_text())
    fits = summary["fitted_exponents"]
    assert fits["multipole"]["time_forward_backward"] == pytest.approx(1.0, abs=1e-9)
    assert fits["dense_sdpa"]["time_forward_backward"] == pytest.approx(2.0, abs=1e-9)
    # dense / multipole at 256²: (1e-4 · 16²) / (1e-3 · 16) = 1.6
    assert summary["dense_over_multipole_forward_backward"]["256"] == pytest.approx(1.6)
    md = (tmp_path / "multipole_scaling_cuda.md").read_text()
    assert "Test GPU" in md and "Rebuilt with `--from-log`" in md and "256²: 1.6×" in md


def test_swe_report_judges_blow_up_by_amplitude_and_keeps_the_skill_bound(tmp_path):
    # a copy of a real report (tests do not read the committed results, which move with the benchmarks)
    src = json.loads((Path(__file__).parent / "data" / "swe_sphere_report.json").read_text())
    sph = src["results"]["spherical-nbhd"]["rollout"]
    sph["amplitude_ratio_per_step"] = [1.0] * (len(sph["amplitude_ratio_per_step"]) - 1) + [2.5]  # a blow-up
    path = tmp_path / "swe_sphere.json"
    path.write_text(json.dumps(src))
    res = _run("benchmarks/swe_sphere.py", "--report-from", str(path))
    assert res.returncode == 0, res.stderr[-2000:]
    targets = json.loads(path.read_text())["targets"]
    assert targets["rollout_no_blow_up"] is False
    assert targets["rollout_within_skill_bound"] == sph["stable"]
    assert "no blow-up" in path.with_suffix(".md").read_text()


def test_balltree_gpu_script_runs_in_its_cpu_test_mode(tmp_path):
    res = _run("benchmarks/balltree_gpu.py", "--device", "cpu", "--sizes", "256", "512", "--dense-max", "256",
               "--reps", "1", "--results", str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    s = json.loads((tmp_path / "balltree_gpu.json").read_text())
    assert [r["n"] for r in s["tree"]] == [256, 512]
    methods = {(r["method"], r["n"]) for r in s["attention"] if "error" not in r}
    assert ("dense SDPA", 256) in methods and ("dense SDPA", 512) not in methods
    assert all(r["forward_ms"] > 0 for r in s["attention"] if "error" not in r)
