"""benchmarks/gpu_targets.py and benchmarks/gpu_check.sh: the committed H200 rows validate and render with the
targets' verdicts computed from the rows; a verdict flips when a row's numbers do (a machine without CUDA is
refused by naming ``device``: test_harness.py); bad parameters are refused by name; every benchmark gpu_check.sh runs is registered
and takes the parameters it sets."""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from benchmarks import gpu_targets as gt
from benchmarks import harness

ROOT = Path(__file__).resolve().parents[2]


def _committed():
    return harness.latest_committed_run("gpu_targets")


def test_committed_rows_validate_and_render_with_verdicts_from_the_rows():
    bench, records = _committed()
    md = harness.markdown_table(bench, records)
    verdicts = gt.verdicts(records)
    assert set(verdicts) <= set(gt.TARGETS) and verdicts
    for section, (met, _) in verdicts.items():
        assert f"{gt.TARGETS[section]}: {'met' if met else 'not met'}" in md
    # the Galerkin verdict is the 2x forward+backward speed-up over the reference
    tri = [r["row"] for r in records if r["row"]["section"] == "galerkin" and r["row"]["case"] == "triton"]
    if tri:
        fb = [r for r in tri if r["pass"] == "forward_backward"]
        assert verdicts["galerkin"][0] == (fb[0]["speedup_vs_reference"] >= gt.SPEEDUP_TARGET)
        for r in tri:
            assert f"{r['ms']:.3f}" in md


def test_verdicts_follow_the_numbers():
    _, records = _committed()
    recs = copy.deepcopy(records)
    for r in recs:
        row = r["row"]
        if row["section"] == "galerkin" and row["case"] == "triton":
            row["speedup_vs_reference"] = 1.9  # faster, but short of the 2x target
            if row["pass"] == "forward":
                row["info"]["fraction_of_measured_copy"] = 0.61
        if row["case"] == "triton_weights" and row["over_flash"] is not None:
            row["over_flash"] = 1.25  # slower than flash, within the 1.3x target
        if row["section"] == "sphere_neighborhood" and row["case"] == "layer":
            row["ms"] = row["published_ms"] / 2
    v = gt.verdicts(recs)
    assert v["galerkin"][0] is False and "1.90× faster" in v["galerkin"][1]
    assert v["galerkin_bandwidth"][0] is True and "61% of the measured copy" in v["galerkin_bandwidth"][1]
    assert v["weighted_softmax"][0] is True
    assert v["sphere_neighborhood"][0] is True and "θ" not in v["sphere_neighborhood"][1]
    for r in recs:  # only θ = 0.03 counts: slower rows at θ = 0.017 do not change the verdict
        if r["row"]["section"] == "sphere_neighborhood" and r["row"]["case"] == "layer" \
                and r["row"]["info"]["theta"] != gt.SPHERE_THETA:
            r["row"]["ms"] = r["row"]["published_ms"] * 2
    assert gt.verdicts(recs)["sphere_neighborhood"][0] is True


def test_rows_from_sections_keeps_failures_and_skips():
    s = {"meta": {"device_name": "Test GPU", "sms": 8},
         "ceilings": {"error": "RuntimeError: boom"},
         "weighted_softmax": {"check": {"weights": {"N": 64, "out": 1e-3, "grad_q": float("nan")}},
                              "rows": [{"N": 256, "pass": "forward", "flash_sdpa_no_bias": 2.0, "triton_weights": 3.0,
                                        "triton_weights_distance": None,
                                        "triton_weights_distance_skipped": "predicted 20.0 s per call",
                                        "triton_weights_over_flash": 1.5,
                                        "triton_weights_distance_over_flash": None}]}}
    rows = gt.rows_from(s)
    bench = harness.get("gpu_targets")
    for i, r in enumerate(rows):
        harness.validate_row(bench, r, i)
    assert rows[0]["section"] == "device" and rows[0]["info"] == {"sms": 8}
    assert [r["error"] for r in rows if r["section"] == "ceilings"] == ["RuntimeError: boom"]
    skipped = [r for r in rows if r["skipped"]]
    assert len(skipped) == 1 and skipped[0]["case"] == "triton_weights_distance" and skipped[0]["ms"] is None
    recs = [{"row": r} for r in rows]
    assert gt.verdicts(recs)["weighted_softmax"][0] is False  # 1.5× flash's time
    check = [r for r in rows if r["case"] == "check weights"][0]
    assert check["rel_err"] == {"out": 1e-3, "grad_q": None} and check["error"] == "non-finite grad_q"
    table = gt.table(recs)
    assert "- ceilings: `RuntimeError: boom`" in table and "- weighted_softmax check weights: `non-finite grad_q`" in table


@pytest.mark.parametrize(("key", "value"), [("sections", ["nope"]), ("n", 0), ("device", "tpu"),
                                            ("sphere_shape", [180]), ("max_call_s", -1)])
def test_bad_parameters_are_refused_by_name(tmp_path, key, value):
    with pytest.raises(ValueError, match=rf"^{key}: expected"):
        harness.run_benchmark("gpu_targets", quick=True, results=tmp_path, overrides={key: value})


def _gpu_check_runs() -> list[list[str]]:
    """The argument lists after ``-m benchmarks run`` in gpu_check.sh's commands (not its comments; continuation
    lines joined)."""
    text = (ROOT / "benchmarks" / "gpu_check.sh").read_text().replace("\\\n", " ")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return [shlex.split(m.group(1)) for ln in lines for m in re.finditer(r"-m benchmarks run (.*)", ln)]


def test_gpu_check_script_parses_and_runs_registered_benchmarks_with_their_parameters():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_check.sh")], check=True)
    runs = _gpu_check_runs()
    names = [args[0] for args in runs]
    assert {"gpu_targets", "gpu_tuning", "balltree_gpu", "kernels", "multipole_scaling"} <= set(names)
    registered = harness.names()
    for args in runs:
        assert args[0] in registered, args[0]
        bench = harness.get(args[0])
        sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
        overrides = harness.parse_where(sets, what="--set")
        bench.resolve(False, overrides)  # every --set key is a parameter of the benchmark
        if args[0] in ("balltree_gpu", "kernels", "multipole_scaling"):
            assert overrides["device"] == "cuda"
        assert "--out" in args  # rows go to $RES, never to the committed results
