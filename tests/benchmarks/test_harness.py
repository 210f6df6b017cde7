"""The benchmark harness: registration, a quick run appending rows with their metadata, tables
generated from the rows, schema errors naming the field, atomic appends; every GPU benchmark refuses to run on CUDA
on a machine without it, naming ``device``."""

from __future__ import annotations

import json
import re
import runpy
import threading
from pathlib import Path

import pytest
import torch

from benchmarks import harness
from benchmarks.harness import Benchmark, SchemaError

ROOT = Path(__file__).resolve().parents[2]


def _toy(**kw) -> Benchmark:
    spec = dict(name="toy", run=lambda p: [{"n": n, "err": 1.0 / n, "label": f"n{n}"} for n in p["sizes"]],
                schema={"n": "int", "err": "float", "label": "str"}, params={"sizes": [2, 4, 8]},
                quick={"sizes": [2]}, description="A toy;")
    spec.update(kw)
    return Benchmark(**spec)


def _table_cells(table: str) -> list[list[str]]:
    lines = [ln for ln in table.splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]


def test_registered_benchmarks_declare_schema_params_and_quick_budget():
    names = harness.names()
    assert {"startup", "darcy16_sweep", "refinement"} <= set(names)
    for name in names:
        b = harness.get(name)
        assert b.schema and set(b.quick) <= set(b.params), name
        assert b.resolve(quick=True) == {**b.params, **b.quick}
    with pytest.raises(KeyError, match="benchmark: expected one of .*got 'nope'"):
        harness.get("nope")


def test_registration_refuses_bad_declarations():
    with pytest.raises(ValueError, match=r"schema\['err'\]: expected one of"):
        _toy(schema={"n": "int", "err": "double"})
    with pytest.raises(ValueError, match=r"quick: expected keys of params \['sizes'\], got unknown \['epochs'\]"):
        _toy(quick={"epochs": 1})
    with pytest.raises(ValueError, match="columns: expected fields of the schema"):
        _toy(columns=("n", "missing"))
    harness.register(harness.get("startup"))  # the same object again is fine
    with pytest.raises(ValueError, match="'startup' is already registered"):
        harness.register(_toy(name="startup"))
    with pytest.raises(ValueError, match="--set epochs: expected one of the parameters"):
        _toy().resolve(overrides={"epochs": 3})


def test_schema_errors_name_the_field():
    b = _toy()
    assert harness.validate_row(b, {"n": 2, "err": 0.5, "label": "a"}) == {"n": 2, "err": 0.5, "label": "a"}
    with pytest.raises(SchemaError, match="toy row 3: field 'err' is missing"):
        harness.validate_row(b, {"n": 2, "label": "a"}, 3)
    with pytest.raises(SchemaError, match="field 'err' expected float, got str '0.5'"):
        harness.validate_row(b, {"n": 2, "err": "0.5", "label": "a"})
    with pytest.raises(SchemaError, match="field 'n' expected int, got bool True"):
        harness.validate_row(b, {"n": True, "err": 0.5, "label": "a"})
    with pytest.raises(SchemaError, match="field 'extra' is not in the schema"):
        harness.validate_row(b, {"n": 2, "err": 0.5, "label": "a", "extra": 1})
    with pytest.raises(SchemaError, match="field 'err' expected a finite number, got nan"):
        harness.validate_row(b, {"n": 2, "err": float("nan"), "label": "a"})
    assert harness.validate_row(_toy(schema={"n": "int", "err": "float?", "label": "str"}),
                                {"n": 2, "err": None, "label": "a"})["err"] is None


def test_an_added_field_may_be_absent_from_older_rows_only():
    with pytest.raises(ValueError, match="added_fields: expected fields of the schema"):
        _toy(added_fields={"kind": "grid"})
    b = _toy(schema={"n": "int", "err": "float", "label": "str", "kind": "str"}, added_fields={"kind": "grid"})
    old = {"n": 2, "err": 0.5, "label": "a"}
    assert harness.validate_row(b, old) is old  # written before the field existed
    assert harness.validate_row(b, {**old, "kind": "points"})["kind"] == "points"
    with pytest.raises(SchemaError, match="field 'kind' expected str, got int 3"):
        harness.validate_row(b, {**old, "kind": 3})  # present: checked like any field
    with pytest.raises(SchemaError, match="field 'err' is missing"):
        harness.validate_row(b, {"n": 2, "label": "a"})  # only the added field may be absent
    meta = {"date": "d", "hardware": {}, "versions": {"torch": "t"}, "command": "c"}
    table = harness.markdown_table(b, [{**meta, "row": old}, {**meta, "row": {**old, "kind": "points"}}])
    assert "| 2 | 0.5000 | a | grid |" in table and "| 2 | 0.5000 | a | points |" in table


def test_a_run_whose_rows_break_the_schema_appends_nothing(tmp_path, monkeypatch):
    bad = _toy(name="toy_bad", run=lambda p: [{"n": 1, "err": 1.0, "label": "a"}, {"n": 2, "label": "b"}])
    monkeypatch.setitem(harness.REGISTRY, "toy_bad", bad)
    with pytest.raises(SchemaError, match="toy_bad row 1: field 'err' is missing"):
        harness.run_benchmark("toy_bad", results=tmp_path, command="test")
    assert not (tmp_path / "toy_bad.jsonl").exists()


def test_rows_record_the_thread_count_the_benchmark_ran_with(tmp_path, monkeypatch):
    import torch

    before = torch.get_num_threads()

    def run(p):
        torch.set_num_threads(1)  # as the timing benchmarks do
        return [{"n": 1, "err": 1.0, "label": "a"}]

    monkeypatch.setitem(harness.REGISTRY, "toy_threads", _toy(name="toy_threads", run=run))
    try:
        torch.set_num_threads(2)
        rec = harness.run_benchmark("toy_threads", results=tmp_path, command="test")[0]
    finally:
        torch.set_num_threads(before)
    assert rec["hardware"]["torch_threads"] == 1


def test_quick_run_of_a_real_benchmark_appends_rows_with_metadata(tmp_path):
    # startup's quick budget restricted to the bare interpreter: a real subprocess measurement in ~0.1 s
    over = {"cases": ["python -c pass"], "repeats": 2}
    first = harness.run_benchmark("startup", quick=True, results=tmp_path, overrides=over, command="cmd one")
    second = harness.run_benchmark("startup", quick=True, results=tmp_path, overrides=over, command="cmd two")
    stored = harness.read_rows(tmp_path / "startup.jsonl")
    assert stored == json.loads(json.dumps(first + second))  # appended, in order, nothing rewritten
    assert len(stored) == 2 and stored[0]["run_id"] != stored[1]["run_id"]
    rec = stored[0]
    assert set(harness.META_FIELDS) <= set(rec)
    assert rec["command"] == "cmd one" and rec["quick"] is True
    assert rec["params"] == {"cases": ["python -c pass"], "repeats": 2}
    assert rec["hardware"]["cores"] >= 1 and rec["hardware"]["cpu"]
    assert rec["versions"]["python"].count(".") == 2 and rec["versions"]["torch"]
    assert re.fullmatch(r"[0-9a-f]{12}", rec["versions"]["sciattn_commit"] or "")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", rec["date"])
    row = rec["row"]
    assert row["case"] == "python -c pass" and row["repeats"] == 2 and 0 < row["min_s"] <= row["median_s"] < 30
    assert row["imports_neuralop"] is False and row["minus_torch_s"] is None
    assert harness.latest_run(stored) == [stored[1]]
    assert harness.latest_run(stored, stored[0]["run_id"]) == [stored[0]]
    full = [{**stored[0], "quick": False, "run_id": "full"}, *stored]
    assert harness.latest_run(full, full=True) == [full[0]]  # the docs show the last full run


def test_table_is_generated_from_the_rows(tmp_path):
    b = _toy(labels={"err": "error"}, notes=lambda recs: f"{len(recs)} rows.")
    rows = b.run(b.params)
    meta = harness.metadata("python -m benchmarks run toy", b.params)
    recs = [{"benchmark": "toy", "run_id": "r1", **meta, "quick": False, "row": r} for r in rows]
    table = harness.markdown_table(b, recs)
    cells = _table_cells(table)
    assert cells[0] == ["n", "error", "label"]
    assert len(cells) == 1 + len(rows)
    for got, row in zip(cells[1:], rows):
        assert int(got[0]) == row["n"] and got[2] == row["label"]
        assert float(got[1]) == pytest.approx(row["err"], abs=5e-5)
    assert "Command: `python -m benchmarks run toy`" in table and meta["date"] in table
    assert table.rstrip().endswith("3 rows.")
    # a changed row changes the table
    recs[1]["row"] = {**recs[1]["row"], "err": 0.123456}
    assert "| 4 | 0.1235 | n4 |" in harness.markdown_table(b, recs)
    # the stored rows are checked against the schema again when tabulated
    recs[0]["row"] = {"n": 1, "label": "x"}
    with pytest.raises(SchemaError, match="field 'err' is missing"):
        harness.markdown_table(b, recs)


def _toy_rows(tmp_path, monkeypatch, **kw):
    """The toy benchmark registered and run into ``tmp_path`` (in process, no subprocess)."""
    monkeypatch.setitem(harness.REGISTRY, "toy", _toy(**kw))
    return harness.run_benchmark("toy", results=tmp_path, command="python -m benchmarks run toy")


def test_docs_blocks_of_harness_benchmarks_come_from_the_rows(tmp_path, monkeypatch):
    recs = _toy_rows(tmp_path, monkeypatch)
    tool = runpy.run_path(str(ROOT / "benchmarks" / "readme_tables.py"))
    page = "x\n<!-- results:toy -->\nstale\n<!-- /results:toy -->\n"
    filled = tool["fill"](page, tmp_path)
    assert "stale" not in filled
    assert harness.markdown_table(harness.get("toy"), recs).rstrip("\n") in filled
    for rec in recs:
        assert f"| {rec['row']['n']} | {harness.format_value(rec['row']['err'])} | {rec['row']['label']} |" in filled


def test_blocks_and_tables_select_a_run_by_its_parameters_and_rows_by_their_fields(tmp_path, monkeypatch, capsys):
    from benchmarks.__main__ import main

    first = _toy_rows(tmp_path, monkeypatch)
    monkeypatch.setitem(harness.REGISTRY, "toy", _toy(params={"sizes": [2, 4, 8], "tag": "a"}))
    second = harness.run_benchmark("toy", results=tmp_path, overrides={"sizes": [16], "tag": "b"}, command="x")
    records = harness.read_rows(harness.results_path("toy", tmp_path))
    assert harness.latest_run(records) == second
    assert harness.latest_run(records, where={"sizes": [2, 4, 8]}) == first
    assert harness.latest_run(records, where={"sizes": [2, 4, 8], "row.n": 4}) == [first[1]]
    with pytest.raises(ValueError, match="where: no run has the parameters {'tag': 'c'}"):
        harness.latest_run(records, where={"tag": "c"})
    with pytest.raises(ValueError, match="where: expected a parameter of these runs .*got 'size'"):
        harness.latest_run(records, where={"size": 2})
    with pytest.raises(ValueError, match="where: no row of the runs with the parameters {'tag': 'b'} matches {'row.n': 3}"):
        harness.latest_run(records, where={"tag": "b", "row.n": 3})
    # a row filter skips later runs that hold no matching row (another operator's run merged into the file)
    assert harness.latest_run(records, where={"row.n": 4}) == [first[1]]
    assert harness.parse_where(["tag=b", 'label="x"', "sizes=[2,4,8]"]) == {"tag": "b", "label": "x",
                                                                              "sizes": [2, 4, 8]}
    with pytest.raises(ValueError, match="--where: expected KEY=VALUE, got 'tag'"):
        harness.parse_where(["tag"])

    tool = runpy.run_path(str(ROOT / "benchmarks" / "readme_tables.py"))
    page = ("<!-- results:toy sizes=[2,4,8] row.n=8 -->\nold\n<!-- /results:toy -->\n"
            "<!-- results:toy -->\nold\n<!-- /results:toy -->\n")
    filled = tool["fill"](page, tmp_path)
    one, latest = filled.split("<!-- /results:toy -->")[:2]
    assert "| 8 | 0.1250 | n8 |" in one and "| 2 |" not in one and "| 16 |" not in one
    assert "| 16 | 0.0625 | n16 |" in latest and "| 8 |" not in latest
    assert main(["table", "toy", "--results", str(tmp_path), "--where", "tag=b"]) == 0
    assert "| 16 | 0.0625 | n16 |" in capsys.readouterr().out
    assert main(["table", "toy", "--results", str(tmp_path), "--where", "tag=z"]) == 2
    assert "where: no run has the parameters" in capsys.readouterr().err


def test_every_benchmark_module_declares_its_benchmarks():
    from benchmarks import registry

    assert registry.unregistered() == [], "each benchmarks/*.py module runs through the harness (BENCHMARKS)"


def test_a_benchmark_may_pivot_its_rows_and_record_package_versions(tmp_path, monkeypatch):
    def pivot(records):
        rows = [r["row"] for r in records]
        return "| n | " + " | ".join(str(r["n"]) for r in rows) + " |\n|---|" + "---|" * len(rows) + \
            "\n| err | " + " | ".join(harness.format_value(r["err"]) for r in rows) + " |"

    recs = _toy_rows(tmp_path, monkeypatch, table=pivot, packages=("numpy",))
    import numpy

    assert recs[0]["versions"]["numpy"] == numpy.__version__
    table = harness.markdown_table(harness.get("toy"), recs)
    assert f"numpy {numpy.__version__}" in table
    assert "| n | 2 | 4 | 8 |" in table and "| err | 0.5000 | 0.2500 | 0.1250 |" in table


def test_concurrent_appends_lose_no_row(tmp_path):
    path = tmp_path / "r.jsonl"

    def writer(k):
        for i in range(10):
            harness.append_rows(path, [{"w": k, "i": i}])

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((r["w"], r["i"]) for r in got) == [(k, i) for k in range(4) for i in range(10)]


def test_rows_files_are_checked_when_read(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"benchmark": "x"}\n')
    with pytest.raises(SchemaError, match="x.jsonl:1: field 'run_id' is missing"):
        harness.read_rows(path)
    path.write_text('{"benchmark": "x", "run_id"\n')
    with pytest.raises(ValueError, match="x.jsonl:1: expected one JSON object per line"):
        harness.read_rows(path)
    path.write_bytes(b'{"a": 1}')  # a truncated last line is refused, not appended to
    with pytest.raises(ValueError, match="truncated last line"):
        harness.append_rows(path, [{"b": 2}])


def test_committed_rows_match_their_schema():
    for name in harness.names():
        path = harness.results_path(name)
        if path.is_file():
            recs = harness.read_rows(path)
            for i, rec in enumerate(recs):
                harness.validate_row(harness.get(name), rec["row"], i)


def test_cli_list_table_and_plot(tmp_path, monkeypatch, capsys):
    from benchmarks.__main__ import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "darcy16_sweep" in out and "startup" in out
    _toy_rows(tmp_path, monkeypatch, plot=("n", "err", None))
    assert main(["table", "toy", "--results", str(tmp_path)]) == 0
    assert "| 4 | 0.2500 | n4 |" in capsys.readouterr().out
    assert main(["plot", "toy", "--results", str(tmp_path)]) == 0
    assert (tmp_path / "toy.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["table", "nope"]) == 2
    assert "benchmark: expected one of" in capsys.readouterr().err
    assert main(["plot", "startup", "--results", str(tmp_path)]) == 2  # no rows there


def test_int_param_names_the_parameter_and_what_it_expected():
    assert harness.int_param({"n": 3}, "n") == 3
    assert harness.int_param({"seed": 0}, "seed", 0) == 0
    for params, minimum, msg in (({"n": 0}, 1, "n: expected a positive integer, got 0"),
                                 ({"n": True}, 1, "n: expected a positive integer, got True"),
                                 ({"n": 2.0}, 0, "n: expected a non-negative integer, got 2.0"),
                                 ({"n": 3}, 4, "n: expected an integer >= 4, got 3")):
        with pytest.raises(ValueError, match=re.escape(msg)):
            harness.int_param(params, "n", minimum)


def test_module_benchmarks_reads_the_module_conventions_and_keeps_explicit_fields():
    def run(p):
        return [{"n": 1}]

    def table(records):
        return "| n |"

    namespace = {"__name__": "benchmarks.toy_module", "run": run, "SCHEMA": {"n": "int"}, "PARAMS": {"k": 1},
                 "QUICK": {"k": 0}, "table": table}
    (bench,) = harness.module_benchmarks(namespace, description="A toy;", packages=("numpy",), params={"k": 2})
    assert bench.name == "toy_module" and bench.run is run and bench.table is table and bench.notes is None
    assert bench.schema == {"n": "int"} and bench.quick == {"k": 0} and bench.params == {"k": 2}
    assert bench.description == "A toy;" and bench.packages == ("numpy",)


def test_committed_rows_validates_every_row_and_names_the_bad_one(tmp_path, monkeypatch):
    recs = _toy_rows(tmp_path, monkeypatch)
    bench, got = harness.committed_rows("toy", tmp_path)
    assert bench is harness.get("toy") and [r["row"] for r in got] == [r["row"] for r in recs]
    bad = dict(recs[-1], row={"n": 2, "label": "a"})
    with harness.results_path("toy", tmp_path).open("a") as f:
        f.write(json.dumps(bad) + "\n")
    with pytest.raises(SchemaError, match=rf"toy row {len(recs)}: field 'err' is missing"):
        harness.committed_rows("toy", tmp_path)


# The benchmarks that run on CUDA, with the run arguments that ask for it.
CUDA_RUNS = {
    "gpu_targets": dict(quick=True),
    "gpu_tuning": dict(quick=True),
    "balltree_gpu": dict(overrides={"device": "cuda"}),
    "kernels": dict(quick=True, overrides={"device": "cuda"}),
    "multipole_scaling": dict(overrides={"device": "cuda"}),
}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
@pytest.mark.parametrize("name", list(CUDA_RUNS))
def test_cuda_on_a_machine_without_it_is_refused_by_naming_device(tmp_path, name):
    with pytest.raises(ValueError, match=r"device: expected 'cuda' with a CUDA device available"):
        harness.run_benchmark(name, results=tmp_path, **CUDA_RUNS[name])
    assert not (tmp_path / f"{name}.jsonl").exists()
