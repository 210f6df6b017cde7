"""benchmarks/standard_protocol.py: the quick budget trains through train_run in subprocesses and writes rows
whose fields are finite and consistent; the Markdown table is generated from the rows; equal-parameter widths;
bad parameters are refused by name; the scaling entry fits an exponent."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import harness
from benchmarks import standard_protocol as sp


def _check_rows(rows, params):
    assert rows and all(r["error"] is None for r in rows), [r["error"] for r in rows]
    zs = [z for z in params["zero_shot"] if z != params["resolution"]]
    for r in rows:
        assert harness.validate_row(harness.get("standard_protocol"), r) is r
        assert r["epochs"] == params["epochs"] and r["n_train"] == params["n_train"]
        assert r["train_resolution"] == params["resolution"]
        assert 0.0 < r["rel_l2"] < 2.0 and math.isfinite(r["rel_l2"])
        assert r["zero_shot_resolutions"] == zs and len(r["zero_shot_rel_l2"]) == len(zs)
        for v, ratio in zip(r["zero_shot_rel_l2"], r["zero_shot_ratio"]):
            assert math.isfinite(v) and v > 0
            assert ratio == pytest.approx(v / r["rel_l2"])
        assert r["seconds_per_epoch"] > 0 and math.isfinite(r["seconds_per_epoch"])
        assert math.isfinite(r["peak_rss_delta_mb"]) and r["peak_rss_delta_mb"] >= 0
        assert r["params_within_10pct"] == (abs(r["parameters"] - r["params_target"]) <= 0.1 * r["params_target"])


def _cells(table: str) -> list[list[str]]:
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in table.splitlines() if ln.startswith("| ")]


def _check_table(records):
    bench = harness.get("standard_protocol")
    table = harness.markdown_table(bench, records)
    cells = _cells(table)
    assert cells[0] == [bench.labels.get(c, c) for c in bench.columns]
    assert len(cells) == 1 + len(records)
    for got, rec in zip(cells[1:], records):
        assert got == [harness.format_value(rec["row"][c]) for c in bench.columns]
        assert float(got[bench.columns.index("rel_l2")]) == pytest.approx(rec["row"]["rel_l2"], abs=5e-5)
    assert records[0]["command"] in table and records[0]["date"] in table
    assert "Zero-shot ratio ≤ 1.5 for every operator" in table and "Parameters within ±10%" in table
    return table


QUICK_SUBSET = {"operators": ["fno", "transolver"], "n_train": 16, "n_test": 8, "epochs": 2}


def test_quick_subset_through_the_harness(tmp_path):
    over = {**QUICK_SUBSET, "out": str(tmp_path / "runs")}
    records = harness.run_benchmark("standard_protocol", quick=True, results=tmp_path, overrides=over,
                                    command="pytest quick subset")
    stored = harness.read_rows(tmp_path / "standard_protocol.jsonl")
    assert stored == json.loads(json.dumps(records))
    rows = [r["row"] for r in stored]
    p = sp.resolved_params({**sp.PARAMS, **sp.QUICK, **over})
    assert [r["operator"] for r in rows] == ["fno", "transolver"]
    _check_rows(rows, p)
    # the same data, seeds and budget for every operator: only [model] differs
    a, b = (sp.run_config(p, r["operator"], sp.model_at(r["operator"], r["width"]), 0) for r in rows)
    assert a["data"] == b["data"] and a["train"] == b["train"] and a["model"] != b["model"]
    _check_table(stored)


@pytest.mark.slow
def test_quick_budget_every_operator(tmp_path):
    over = {"out": str(tmp_path / "runs")}
    records = harness.run_benchmark("standard_protocol", quick=True, results=tmp_path, overrides=over,
                                    command="pytest quick")
    rows = [r["row"] for r in records]
    p = sp.resolved_params({**sp.PARAMS, **sp.QUICK, **over})
    assert [r["operator"] for r in rows] == p["operators"]
    assert {"fno", "transolver", "linear_no", "galerkin_transformer"} <= set(p["operators"])
    _check_rows(rows, p)
    _check_table(records)


def test_notes_state_the_verdicts_from_the_rows():
    base = {"error": None, "params_within_10pct": True, "parameters": 100, "zero_shot_resolutions": [56]}

    def rec(op, e, ratio):
        return {"row": {**base, "operator": op, "rel_l2": e, "zero_shot_ratio": [ratio]}}

    recs = [rec("transolver", 0.05, 1.1), rec("linear_no", 0.2, 1.0), rec("galerkin_transformer", 0.1, 1.6),
            rec("fno", 0.08, 0.9)]
    text = sp.notes(recs)
    assert "transolver 0.0500 against galerkin_transformer 0.1000 and fno 0.0800: below both met" in text
    assert "linear_no 0.2000 against galerkin_transformer 0.1000 and fno 0.0800: below both not met" in text
    assert "not met (galerkin_transformer 1.60× at 56)" in text and "largest 1.60×" in text


def test_equal_parameter_widths(tmp_path):
    from sciattn.train.config import load_config

    p = sp.resolved_params({"budget": "quick", "out": str(tmp_path)})
    cfg = load_config(sp.run_config(p, "fno", {}, 0))
    train, c_out = sp._channels(cfg)
    for op in ("transolver", "fno", "galerkin_transformer", "linear_no"):
        width, n = sp.match_width(op, cfg, train, c_out, 100_000)
        assert abs(n - 100_000) <= 10_000, (op, width, n)
        assert n == sp.count_for(op, cfg, train, c_out, width)
        step = sp.WIDTH_KEYS[op][1]
        # no neighbouring width on the step is closer to the target
        for w in (width - step, width + step):
            assert abs(sp.count_for(op, cfg, train, c_out, w) - 100_000) >= abs(n - 100_000)
    # operators whose arguments come from the data (codano's variables) build as the trainer builds them
    import torch

    model = sp.build_model("codano", cfg, train, c_out, 4)
    out = model(torch.randn(1, 1, 16, 16))
    assert out.shape == (1, 1, 16, 16) and torch.isfinite(out).all()


def test_default_operators_and_datasets():
    grid = sp.default_operators("darcy85")
    assert {"fno", "transolver", "linear_no", "ono", "gnot", "factformer", "oformer", "galerkin_transformer"} <= set(grid)
    assert "erwin" not in grid and "spherical_transformer" not in grid
    pts = sp.default_operators("darcy_points")
    assert {"transolver", "linear_no", "erwin"} <= set(pts) and "fno" not in pts and "factformer" not in pts
    d = sp.data_section(sp.resolved_params({"budget": "full", "dataset": "darcy85", "out": "/tmp/x"}))
    assert d["train"] == "darcy" and d["resolution"] == 84 and d["test_resolutions"] == [84, 42, 168]
    assert d["options"]["fine_resolution"] == 840 and d["options"]["high"] == 12.0 and d["options"]["low"] == 3.0
    ns = sp.data_section(sp.resolved_params({"budget": "full", "dataset": "navier_stokes64", "out": "/tmp/x"}))
    assert ns["options"]["nu"] == 1e-5 and ns["options"]["t_in"] == 10 and ns["resolution"] == 64
    g = sp.data_section(sp.resolved_params({"budget": "full", "dataset": "geofno:airfoil", "data_dir": "/d",
                                            "operators": ["fno"], "out": "/tmp/x"}))
    assert g["train"] == "geofno_airfoil" and g["root"] == "/d"


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="dataset: expected"):
        sp.resolved_params({"dataset": "darcy_999"})
    with pytest.raises(ValueError, match="budget: expected"):
        sp.resolved_params({"budget": "huge"})
    with pytest.raises(ValueError, match="data_dir"):
        sp.resolved_params({"dataset": "geofno:pipe"})


def test_scaling_entry_fits_an_exponent(tmp_path):
    over = {"operators": ["fno"], "sizes": [8, 16], "reps": 1, "params_target": 5_000, "out": str(tmp_path)}
    records = harness.run_benchmark("standard_protocol_scaling", quick=True, results=tmp_path, overrides=over,
                                    command="pytest scaling")
    (r,) = [rec["row"] for rec in records]
    assert r["error"] is None and r["sizes"] == [8, 16] and len(r["ms_per_step"]) == 2
    assert all(m > 0 for m in r["ms_per_step"])
    expected = math.log(r["ms_per_step"][1] / r["ms_per_step"][0]) / math.log(4.0)
    assert r["exponent"] == pytest.approx(expected)
    assert r["exponent_largest"] == pytest.approx(expected)  # two sizes: the fit is the last pair's slope
    assert r["meets_1_15"] == (r["exponent"] <= 1.15) and r["quadratic"] is False
    table = harness.markdown_table(harness.get("standard_protocol_scaling"), records)
    assert f"| fno | grid | {harness.format_value(r['parameters'])} | 1 | 8 / 16 |" in table
    assert r["input"] == "grid"


def test_scaling_times_point_set_operators_on_the_cell_centres(tmp_path):
    """mspt (contract input kind "points") is timed on the grid's r² cell centres through the trainer's call, at the
    width matched on the darcy_points data; the exponent is the least-squares slope of its own times."""
    import numpy as np
    import torch

    from sciattn.train.config import load_config

    sizes = [4, 8, 12]
    over = {"operators": ["mspt"], "sizes": sizes, "reps": 1, "params_target": 5_000, "out": str(tmp_path)}
    records = harness.run_benchmark("standard_protocol_scaling", quick=True, results=tmp_path, overrides=over,
                                    command="pytest scaling points")
    assert harness.read_rows(tmp_path / "standard_protocol_scaling.jsonl") == json.loads(json.dumps(records))
    (r,) = [rec["row"] for rec in records]
    assert r["error"] is None, r["error"]
    assert r["operator"] == "mspt" and r["input"] == "points" and r["sizes"] == sizes and r["batch"] == 1
    assert len(r["ms_per_step"]) == 3 and all(m > 0 and math.isfinite(m) for m in r["ms_per_step"])
    n = [s * s for s in sizes]
    assert r["exponent"] == pytest.approx(float(np.polyfit(np.log(n), np.log(r["ms_per_step"]), 1)[0]))
    assert r["exponent_largest"] == pytest.approx(math.log(r["ms_per_step"][2] / r["ms_per_step"][1])
                                                  / math.log(n[2] / n[1]))
    assert r["quadratic"] is True and r["meets_1_15"] is None  # classed quadratic (fixed patches): no verdict
    # the width is the one matched on the point-set data, and the count is that model's
    p = sp.resolved_params({"budget": "quick", "dataset": "darcy_points", "out": str(tmp_path)})
    cfg = load_config(sp.run_config(p, "fno", {}, 0))
    train, c_out = sp._channels(cfg)
    assert (r["width"], r["parameters"]) == sp.match_width("mspt", cfg, train, c_out, 5_000)
    assert r["width_key"] == "width"
    # the inputs: N = r² cell centres with uniform weights, collated as the trainer collates point sets
    b = sp._step_inputs(True, 2, 3)
    assert b["x"].shape == (2, 9, 1) and b["y"].shape == (2, 9, 1) and b["mask"].all()
    c = torch.tensor([1 / 6, 1 / 2, 5 / 6])
    assert torch.equal(b["pos"][1], torch.stack(torch.meshgrid(c, c, indexing="ij"), -1).reshape(9, 2))
    assert torch.allclose(b["weights"], torch.full((2, 9), 1 / 9)) and not torch.equal(b["x"][0], b["x"][1])
    g = sp._step_inputs(False, 2, 3)
    assert set(g) == {"x", "y"} and g["x"].shape == (2, 1, 3, 3)
    table = harness.markdown_table(harness.get("standard_protocol_scaling"), records)
    assert (f"Quadratic baselines only, judged against no target: mspt p = {r['exponent']:.2f}, "
            f"{r['exponent_largest']:.2f} between the two largest sizes.") in table
    assert f"| mspt | points | {harness.format_value(r['parameters'])} | 1 | 4 / 8 / 12 |" in table


def test_scaling_defaults_and_old_rows():
    ops = sp.scaling_operators()
    assert {"fno", "transolver", "mspt", "erwin", "bsa_transformer"} <= set(ops)
    assert "spherical_transformer" not in ops and len(ops) == len(set(ops))
    bench, records = harness.committed_rows("standard_protocol_scaling")  # rows before `input` still validate
    assert any("input" not in rec["row"] for rec in records)
    with pytest.raises(harness.SchemaError, match="field 'input' expected str"):
        harness.validate_row(bench, {**records[0]["row"], "input": None})
