"""benchmarks/balltree_operator_scaling.py: a tiny run through the harness gives consistent rows (every variant up to
its largest size, on every cloud kind); the clouds are what they claim; the exponents and the verdict are computed
from the rows; the committed rows validate and render; bad parameters are refused by name."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import balltree_operator_scaling as bos
from benchmarks import harness


@pytest.mark.slow  # 15 s; the worker path is in test_a_row_measured_in_its_own_process
def test_tiny_run_through_the_harness(tmp_path):
    over = {"sizes": [256, 1024], "clouds": ["uniform", "shell_cluster"], "reps": 1,
            "variants": {"erwin": None, "bsa_transformer": None, "erwin physical": 256}}
    records = harness.run_benchmark("balltree_operator_scaling", quick=True, results=tmp_path, overrides=over,
                                    command="pytest balltree_operator_scaling")
    assert harness.read_rows(tmp_path / "balltree_operator_scaling.jsonl") == records
    rows = [r["row"] for r in records]
    got = sorted((r["variant"], r["cloud"], r["n"]) for r in rows)
    want = sorted([(v, c, n) for v in ("erwin", "bsa_transformer") for c in ("uniform", "shell_cluster")
                   for n in (256, 1024)] + [("erwin physical", c, 256) for c in ("uniform", "shell_cluster")])
    assert got == want
    modes = {r["variant"]: r["mode"] for r in rows}
    assert modes == {"erwin": "multiscale", "bsa_transformer": "points, window 4096", "erwin physical": "physical"}
    for r in rows:
        assert 0 < r["forward_s"] and 0 < r["forward_backward_s"] and r["threads"] == 1
        assert 0 < r["forward_cpu_s"] < r["forward_backward_cpu_s"] and r["status"] == "ok"
        for key in ("peak_mb_forward", "peak_mb_forward_backward"):
            assert r[key] is None or (math.isfinite(r[key]) and r[key] >= 0)
    exps = bos.exponents(rows)
    assert exps["erwin physical", "uniform"]["forward_cpu_s"] is None  # one size: no fit
    assert all(isinstance(p, float) for p in exps["erwin", "uniform"].values() if p is not None)
    table = harness.markdown_table(harness.get("balltree_operator_scaling"), records)
    p = exps["bsa_transformer", "shell_cluster"]["forward_backward_cpu_s"]
    assert "| bsa_transformer | shell_cluster | 256–1024 |" in table and f"{p:.2f}" in table
    assert "- erwin (default): " in table and "- bsa_transformer (default): " in table and "quick budget" in table


def test_a_row_measured_in_its_own_process(tmp_path):
    over = {"sizes": [256], "clouds": ["mixture"], "reps": 1, "variants": {"bsa_transformer": None},
            "isolate": True, "resume": False, "tries": 1}
    records = harness.run_benchmark("balltree_operator_scaling", quick=True, results=tmp_path, overrides=over)
    (row,) = [r["row"] for r in records]
    assert (row["variant"], row["cloud"], row["n"], row["threads"]) == ("bsa_transformer", "mixture", 256, 1)
    assert 0 < row["forward_cpu_s"] < row["forward_backward_cpu_s"]
    assert bos.worker({"variant": "bsa_transformer", "cloud": "mixture", "n": 256, "reps": 1,
                       "threads": 1})["mode"] == row["mode"]


def test_a_case_that_keeps_failing_is_recorded_and_larger_sizes_are_skipped(tmp_path, monkeypatch):
    calls = []

    def fake(spec, tries, wait):  # the worker killed for memory from N = 512 on
        calls.append(spec["n"])
        return bos.worker(spec) if spec["n"] < 512 else bos._failed(spec, "failed 4 times: exit -9 (killed)")

    monkeypatch.setattr(bos, "_isolated", fake)
    over = {"sizes": [256, 512, 1024], "clouds": ["uniform"], "reps": 1, "variants": {"bsa_transformer": None},
            "isolate": True, "resume": False}
    records = harness.run_benchmark("balltree_operator_scaling", quick=True, results=tmp_path, overrides=over)
    rows = [r["row"] for r in records]
    assert calls == [256, 512]  # 1024 is not tried after 512 failed
    assert [r["status"] for r in rows] == ["ok", "failed 4 times: exit -9 (killed)", "skipped: N = 512 failed"]
    assert rows[1]["forward_cpu_s"] is None and rows[2]["peak_mb_forward"] is None
    assert bos.exponents(rows)["bsa_transformer", "uniform"]["forward_cpu_s"] is None  # one measured size
    table = harness.markdown_table(harness.get("balltree_operator_scaling"), records)
    assert "| — | — | — | — | — | — | skipped: N = 512 failed |" in table
    assert "| bsa_transformer | uniform | 256 | — |" in table  # the exponents of one measured size


def test_a_worker_over_its_memory_limit_fails_at_once():
    spec = {"variant": "erwin physical", "cloud": "shell_cluster", "n": 2048, "reps": 1, "threads": 1,
            "memory_gb": 1.5}  # it needs about 12 GB
    row = bos._isolated(spec, tries=3, wait=1000.0)  # no retry: a wait would hang the test
    assert row["status"] == "out of memory: more than 1.5 GB" and row["forward_cpu_s"] is None


def test_clouds_are_what_they_claim():
    u = bos.make_cloud("uniform", 4000)
    assert u.shape == (4000, 3) and u.dtype == torch.float32 and 0 <= float(u.min()) and float(u.max()) <= 1
    assert torch.equal(u, bos.make_cloud("uniform", 4000)) and not torch.equal(u, bos.make_cloud("uniform", 4000, 1))
    s = bos.make_cloud("shell_cluster", 4000)
    r = (s[:3000] - 0.5).norm(dim=1)  # three quarters on the shell, then the cluster
    assert float(r.min()) >= 0.4 - 1e-6 and float(r.max()) <= 0.41 + 1e-6
    assert float((s[3000:] - torch.tensor([0.9, 0.5, 0.5])).norm(dim=1).max()) < 0.15
    m = bos.make_cloud("mixture", 4000)
    assert 0 <= float(m.min()) and float(m.max()) <= 1
    # strongly non-uniform: the densest 1% of a 16^3 grid's cells hold far more than 1% of the points
    for cloud in (s, m):
        cells = torch.bincount((cloud.clamp(0, 0.999) * 16).long() @ torch.tensor([256, 16, 1]), minlength=4096)
        assert float(cells.sort(descending=True).values[:41].sum()) / 4000 > 0.3
    with pytest.raises(ValueError, match="clouds"):
        bos.make_cloud("grid", 10)


def _rows(p_time: float, p_mem: float) -> list[dict]:
    out = []
    for variant in bos.DEFAULTS:
        for cloud in bos.CLOUDS:
            for n in (2048, 8192, 32768):
                out.append({"variant": variant, "cloud": cloud, "n": n, "status": "ok",
                            "forward_cpu_s": 1e-5 * n**p_time, "forward_backward_cpu_s": 3e-5 * n**p_time, "peak_mb_forward": 1e-3 * n**p_mem,
                            "peak_mb_forward_backward": 2e-3 * n**p_mem})
    return out


def test_exponents_and_verdict_from_rows():
    exps = bos.exponents(_rows(1.0, 1.1))
    assert exps["erwin", "mixture"]["forward_cpu_s"] == pytest.approx(1.0)
    assert exps["bsa_transformer", "uniform"]["peak_mb_forward_backward"] == pytest.approx(1.1)
    assert bos.verdict(_rows(1.0, 1.1)) == {"erwin": True, "bsa_transformer": True}
    assert bos.verdict(_rows(1.3, 1.0)) == {"erwin": False, "bsa_transformer": False}
    assert bos.verdict([r for r in _rows(1.0, 1.0) if r["variant"] == "erwin"])["bsa_transformer"] is None
    upper = bos.exponents(_rows(1.0, 1.0), largest=2)
    assert upper["erwin", "uniform"]["forward_cpu_s"] == pytest.approx(1.0)


def test_committed_rows_validate_and_render():
    bench, records = harness.latest_committed_run("balltree_operator_scaling")
    assert records and not records[0]["quick"]
    rows = [r["row"] for r in records]
    assert {r["n"] for r in rows if r["variant"] in bos.DEFAULTS} == {2**k for k in range(11, 18)}
    assert {r["cloud"] for r in rows} == set(bos.CLOUDS)
    table = harness.markdown_table(bench, records)
    for r in rows:
        assert f"| {r['variant']} | {r['mode']} | {r['cloud']} | {r['n']} | {bos._s(r['forward_cpu_s'])} |" in table
        assert (r["status"] == "ok") == (r["forward_cpu_s"] is not None)
    for (variant, cloud), per in bos.exponents(rows).items():
        cells = " | ".join("—" if p is None else f"{p:.2f}" for p in per.values())
        assert f"| {variant} | {cloud} |" in table and cells in table
    assert all(v is not None for v in bos.verdict(rows).values())  # both defaults measured at every size
    assert all(r["status"] == "ok" for r in rows if r["variant"] in bos.DEFAULTS)


@pytest.mark.parametrize(("key", "value"), [("sizes", "big"), ("sizes", [1]), ("clouds", ["sphere"]),
                                            ("variants", {"erwin fast": None}), ("variants", {"erwin": 1}),
                                            ("reps", 0), ("isolate", "yes"), ("tries", 0), ("retry_wait_s", -1),
                                            ("worker_memory_gb", "big")])
def test_bad_parameter_is_refused_by_name(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        harness.run_benchmark("balltree_operator_scaling", quick=True, results=tmp_path, overrides={key: value})
    assert not (tmp_path / "balltree_operator_scaling.jsonl").exists()
