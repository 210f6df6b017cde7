"""The benchmark harness: benchmarks registered as data, results appended as rows, tables generated from rows.

A benchmark is a :class:`Benchmark`: a name, a ``run(params) -> list[dict]`` function, its default
parameters and the overrides of its ``--quick`` budget, and a result schema (the fields of each row
and their types). :func:`run_benchmark` runs one and appends its rows to ``RESULTS/NAME.jsonl``, one
JSON object per line, each carrying the run's metadata::

    {"benchmark": NAME, "run_id": ..., "date": ISO-8601 UTC, "hardware": {"cpu", "cores", "gpu"},
     "versions": {"python", "torch", "sciattn_commit", "sciattn_dirty"}, "command": ..., "params": {...},
     "quick": bool, "row": {field: value, ...}}

Appends are atomic (the file is rewritten through :func:`sciattn._io.atomic_write_bytes` under an
exclusive lock), so a killed run never leaves half a row, and two runs never lose each other's rows.
:func:`markdown_table` renders the rows of one run (the latest by default) as Markdown; the docs'
result blocks are filled from it (``benchmarks/readme_tables.py``).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import math
import os
import platform
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SUFFIX = ".jsonl"
META_FIELDS = ("benchmark", "run_id", "date", "hardware", "versions", "command", "params", "quick", "row")

__all__ = [
    "Benchmark", "SchemaError", "module_benchmarks", "register", "get", "names", "REGISTRY", "validate_row", "metadata",
    "append_rows", "read_rows", "committed_rows", "latest_run", "select", "parse_where", "int_param", "divisor_sizes_param", "markdown_table", "run_benchmark", "results_path", "plot_rows",
]


class SchemaError(ValueError):
    """A row does not match its benchmark's result schema (the message names the field)."""


_TYPES: dict[str, tuple[type, ...]] = {
    "float": (int, float), "int": (int,), "str": (str,), "bool": (bool,), "list": (list,), "dict": (dict,),
}


@dataclass
class Benchmark:
    """One registered benchmark.

    Attributes:
        name: the results file stem (``benchmarks/results/NAME.jsonl``) and the CLI name.
        run: ``run(params) -> rows``; ``params`` is :attr:`params` updated by the quick budget and the
            caller's overrides; each row is a dict of the schema's fields.
        schema: row field -> type name (``"float"``, ``"int"``, ``"str"``, ``"bool"``, ``"list"``,
            ``"dict"``; a trailing ``"?"`` allows ``None``), in table column order.
        params: default parameters (JSON values).
        quick: the parameters overridden by ``--quick`` (a budget that runs in seconds to minutes).
        description: one line for ``python -m benchmarks list`` and the table caption.
        claim: what the docs claim from these rows (``None``: none).
        plot: ``(x, y, series)`` row fields for :func:`plot_rows` (``series`` may be ``None``), or ``None``.
        log_axes: ``(log x, log y)`` of the plot.
        columns: the table's columns (default: every schema field).
        labels: column headers for some fields (default: the field name).
        table: ``table(records) -> str``, the Markdown table body built from the rows (a pivot, say), or
            ``None`` for one table line per row.
        packages: distributions whose versions the rows also record (e.g. ``("neuraloperator",)``).
        notes: ``notes(records) -> str``, Markdown written under the table (run-level values of the rows,
            a verdict), or ``None``.
        added_fields: schema fields added after rows were written, each with the value that an older row
            without it stands for (:func:`validate_row` accepts such a row; tables show that value).
    """

    name: str
    run: Callable[[dict[str, Any]], list[dict[str, Any]]]
    schema: dict[str, str]
    params: dict[str, Any] = field(default_factory=dict)
    quick: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    claim: str | None = None
    plot: tuple[str, str, str | None] | None = None
    log_axes: tuple[bool, bool] = (False, False)
    columns: tuple[str, ...] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    table: Callable[[list[dict[str, Any]]], str] | None = None
    packages: tuple[str, ...] = ()
    notes: Callable[[list[dict[str, Any]]], str] | None = None
    added_fields: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"name: expected letters, digits and underscores, got {self.name!r}")
        for f, t in self.schema.items():
            if t.rstrip("?") not in _TYPES:
                raise ValueError(f"schema[{f!r}]: expected one of {sorted(_TYPES)} (optionally with '?'), got {t!r}")
        unknown = sorted(set(self.quick) - set(self.params))
        if unknown:
            raise ValueError(f"quick: expected keys of params {sorted(self.params)}, got unknown {unknown}")
        for f in self.added_fields:
            if f not in self.schema:
                raise ValueError(f"added_fields: expected fields of the schema {list(self.schema)}, got {f!r}")
        for c in self.columns or ():
            if c not in self.schema:
                raise ValueError(f"columns: expected fields of the schema {list(self.schema)}, got {c!r}")
        if self.plot is not None:
            for f in self.plot:
                if f is not None and f not in self.schema:
                    raise ValueError(f"plot: expected fields of the schema {list(self.schema)}, got {f!r}")

    def resolve(self, quick: bool = False, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The parameters of one run: defaults, then the quick budget, then ``overrides``."""
        params = {**self.params, **(self.quick if quick else {})}
        for k, v in (overrides or {}).items():
            if k not in self.params:
                raise ValueError(f"--set {k}: expected one of the parameters {sorted(self.params)}, got {k!r}")
            params[k] = v
        return params


# The module-level names a benchmark module defines by convention, per field of Benchmark.
_MODULE_FIELDS = {"run": "run", "schema": "SCHEMA", "params": "PARAMS", "quick": "QUICK", "table": "table", "notes": "notes"}


def module_benchmarks(namespace: dict[str, Any], **fields: Any) -> tuple[Benchmark]:
    """``BENCHMARKS`` of a module that holds one benchmark laid out by the convention: named after the module,
    with the module's ``run``, ``SCHEMA``, ``PARAMS``, ``QUICK``, ``table`` and ``notes`` (those it defines);
    ``fields`` give the rest (``description``, ``claim``, ``packages``, ``plot``, ...). Call it with ``globals()``."""
    found = {f: namespace[name] for f, name in _MODULE_FIELDS.items() if name in namespace}
    return (Benchmark(name=namespace["__name__"].rsplit(".", 1)[-1], **{**found, **fields}),)


REGISTRY: dict[str, Benchmark] = {}


def register(benchmark: Benchmark) -> Benchmark:
    """Add ``benchmark`` to :data:`REGISTRY` (a second one of the same name is an error)."""
    if benchmark.name in REGISTRY and REGISTRY[benchmark.name] is not benchmark:
        raise ValueError(f"name: benchmark {benchmark.name!r} is already registered")
    REGISTRY[benchmark.name] = benchmark
    return benchmark


def _load_all() -> None:
    from . import registry  # noqa: F401  (registers the repository's benchmarks)


def get(name: str) -> Benchmark:
    """The registered benchmark ``name``."""
    _load_all()
    if name not in REGISTRY:
        raise KeyError(f"benchmark: expected one of {sorted(REGISTRY)}, got {name!r}")
    return REGISTRY[name]


def names() -> list[str]:
    """Every registered benchmark's name, sorted."""
    _load_all()
    return sorted(REGISTRY)


def validate_row(benchmark: Benchmark, row: object, index: int = 0) -> dict[str, Any]:
    """``row`` if it holds exactly the schema's fields with their types (a field of
    :attr:`Benchmark.added_fields` may be absent: a row written before it existed); a :class:`SchemaError`
    naming the field otherwise."""
    where = f"{benchmark.name} row {index}"
    if not isinstance(row, dict):
        raise SchemaError(f"{where}: expected a dict of {list(benchmark.schema)}, got {type(row).__name__}")
    missing = [f for f in benchmark.schema if f not in row and f not in benchmark.added_fields]
    if missing:
        raise SchemaError(f"{where}: field {missing[0]!r} is missing (schema: {list(benchmark.schema)})")
    extra = [f for f in row if f not in benchmark.schema]
    if extra:
        raise SchemaError(f"{where}: field {extra[0]!r} is not in the schema {list(benchmark.schema)}")
    for f, t in benchmark.schema.items():
        if f not in row:  # an added field, absent from an older row
            continue
        v = row[f]
        if v is None and t.endswith("?"):
            continue
        ok = isinstance(v, _TYPES[t.rstrip("?")]) and not (isinstance(v, bool) and t.rstrip("?") in ("float", "int"))
        if not ok:
            raise SchemaError(f"{where}: field {f!r} expected {t}, got {type(v).__name__} {v!r}")
        if isinstance(v, float) and not math.isfinite(v):
            raise SchemaError(f"{where}: field {f!r} expected a finite number, got {v!r}")
    return row


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def metadata(command: str, params: dict[str, Any], packages: tuple[str, ...] = ()) -> dict[str, Any]:
    """The metadata every row of one run carries: date, hardware, versions (Python, torch, the sciattn commit
    and ``packages``), command, parameters."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "hardware": {"cpu": _cpu_model(), "cores": os.cpu_count(), "gpu": gpu,
                     "torch_threads": torch.get_num_threads()},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "sciattn_commit": _git("rev-parse", "--short=12", "HEAD"),
                     "sciattn_dirty": None if status is None else bool(status),
                     **{p: _version(p) for p in packages}},
        "command": command,
        "params": params,
    }


def results_path(name: str, results: Path | str = RESULTS) -> Path:
    return Path(results) / f"{name}{SUFFIX}"


def committed_rows(name: str, results: Path | str = RESULTS) -> tuple[Benchmark, list[dict[str, Any]]]:
    """Benchmark ``name`` and every record of its results file, each row validated against the schema
    (:class:`SchemaError` naming the benchmark, the row and the field otherwise)."""
    bench = get(name)
    records = read_rows(results_path(name, results))
    for i, r in enumerate(records):
        validate_row(bench, r["row"], i)
    return bench, records


def latest_committed_run(name: str, where: dict[str, Any] | None = None,
                         results: Path | str = RESULTS) -> tuple[Benchmark, list[dict[str, Any]]]:
    """Benchmark ``name`` and the records of the latest full run in its results file (:func:`latest_run` with
    ``full`` and ``where``), each row validated against the schema (:class:`SchemaError` naming the benchmark, the
    row and the field otherwise)."""
    bench = get(name)
    records = latest_run(read_rows(results_path(name, results)), full=True, where=where)
    for i, r in enumerate(records):
        validate_row(bench, r["row"], i)
    return bench, records


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the folder holding ``path`` (no lock file is left behind)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def append_rows(path: Path | str, records: list[dict[str, Any]]) -> Path:
    """Append ``records`` (one JSON object each) to the JSON-lines file ``path`` atomically."""
    from sciattn._io import atomic_write_bytes

    path = Path(path)
    lines = "".join(json.dumps(r, sort_keys=False) + "\n" for r in records)
    with _locked(path):
        old = path.read_bytes() if path.is_file() else b""
        if old and not old.endswith(b"\n"):
            raise ValueError(f"{path}: expected a JSON-lines file ending in a newline, got a truncated last line")
        atomic_write_bytes(old + lines.encode(), path)
    return path


def read_rows(path: Path | str) -> list[dict[str, Any]]:
    """Every record of the JSON-lines file ``path`` (each a dict with :data:`META_FIELDS`)."""
    path = Path(path)
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i}: expected one JSON object per line ({e.msg})") from None
        missing = [f for f in META_FIELDS if f not in rec]
        if missing:
            raise SchemaError(f"{path}:{i}: field {missing[0]!r} is missing (a row carries {list(META_FIELDS)})")
        out.append(rec)
    return out


def int_param(params: dict[str, Any], key: str, minimum: int = 1) -> int:
    """``params[key]`` if it is an integer (not a bool) of at least ``minimum``; otherwise a ValueError naming
    the parameter, what was expected and what was given."""
    v = params[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        what = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        raise ValueError(f"{key}: expected {what}, got {v!r}")
    return v


def divisor_sizes_param(params: dict[str, Any], key: str = "sizes", reference_key: str = "reference") -> list[int]:
    """``params[key]``: a non-empty list of grid sizes below ``params[reference_key]`` that divide it (coarse grids
    whose cells are unions of reference cells); otherwise a ValueError naming the parameter."""
    sizes, ref = params[key], params[reference_key]
    if (not isinstance(sizes, list) or not sizes
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 or ref % n for n in sizes)
            or any(n >= ref for n in sizes)):
        raise ValueError(f"{key}: expected a non-empty list of grid sizes below {reference_key}={ref} that divide it, "
                         f"got {sizes!r}")
    return sizes


def parse_where(pairs: list[str] | tuple[str, ...], what: str = "--where") -> dict[str, Any]:
    """``["key=value", ...]`` as a dict; each value is read as JSON, else kept as a string
    (``operator=gnot`` and ``operator="gnot"`` are the same); a ``row.`` prefix selects on a row field."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{what}: expected KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def select(records: list[dict[str, Any]], where: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The records whose parameters match ``where`` (``{param: value}``; a key ``row.FIELD`` matches a row
    field instead). A parameter no record has is an error naming it."""
    if not where:
        return records
    known = {k for r in records for k in r["params"]} | {f"row.{k}" for r in records for k in r["row"]}
    for key in where:
        if records and key not in known:
            raise ValueError(f"where: expected a parameter of these runs {sorted(k for k in known if '.' not in k)} "
                             f"or row.FIELD, got {key!r}")

    def match(r: dict[str, Any]) -> bool:
        for key, value in where.items():
            got = r["row"].get(key[4:]) if key.startswith("row.") else r["params"].get(key)
            if got != value:
                return False
        return True

    return [r for r in records if match(r)]


def latest_run(records: list[dict[str, Any]], run_id: str | None = None, full: bool = False,
               where: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The records of run ``run_id`` (default: the last run appended; with ``full``, the last one not made
    with the ``--quick`` budget, if any), in their order. ``where`` (see :func:`select`) first keeps the
    runs whose parameters match and, with ``row.`` keys, that hold a matching row; then the rows of the chosen
    run that match (so a later run of other operators, merged into the same file, does not hide one's rows)."""
    if where:
        params_where = {k: v for k, v in where.items() if not k.startswith("row.")}
        row_where = {k: v for k, v in where.items() if k.startswith("row.")}
        select(records, where if records else None)  # names an unknown key
        pool = select(records, params_where)
        if not pool:
            raise ValueError(f"where: no run has the parameters {params_where}")
        if row_where:
            runs = {r["run_id"] for r in select(pool, row_where)}
            if not runs:
                raise ValueError(f"where: no row of the runs with the parameters {params_where} matches {row_where}")
            pool = [r for r in pool if r["run_id"] in runs]
        return select(latest_run(pool, run_id, full), row_where)
    if not records:
        return []
    if run_id is None:
        pool = [r for r in records if not r.get("quick")] if full else []
        run_id = (pool or records)[-1]["run_id"]
    chosen = [r for r in records if r["run_id"] == run_id]
    if not chosen:
        raise ValueError(f"run_id: expected one of {sorted({r['run_id'] for r in records})}, got {run_id!r}")
    return chosen


def format_value(v: Any) -> str:
    """A table cell: floats with 4 decimals (``{:.3e}`` below 1e-3, no decimals from 1000 on), ``None`` as
    a dash, booleans as yes/no, lists joined by ' / '."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.4f}" if v == 0 or abs(v) >= 1e-3 else f"{v:.3e}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, list):
        return " / ".join(format_value(x) for x in v)
    return str(v).replace("|", "\\|")


def markdown_table(benchmark: Benchmark, records: list[dict[str, Any]]) -> str:
    """Markdown of one run's rows: a caption with its date, hardware, versions and command, then one
    table line per row (columns: :attr:`Benchmark.columns` or the schema)."""
    if not records:
        raise ValueError(f"{benchmark.name}: no rows to tabulate")
    first = records[0]
    for i, r in enumerate(records):
        validate_row(benchmark, r["row"], i)
    hw, ver = first["hardware"], first["versions"]
    threads = f"{hw['torch_threads']} torch threads" if hw.get("torch_threads") else None
    commit = ver.get("sciattn_commit") or "commit not recorded"
    if ver.get("sciattn_dirty"):
        commit += " (uncommitted changes)"
    others = "".join(f", {p} {ver[p]}" for p in benchmark.packages if ver.get(p))
    if hw.get("cpu"):  # the host, then what ran on it
        details = [f"{hw['cores']} cores" if hw.get("cores") else "cores not recorded",
                   f"GPU {hw['gpu']}" if hw.get("gpu") else "no GPU" if hw.get("cores") else None, threads]
        machine = f"{hw['cpu']} ({', '.join(d for d in details if d)})"
    elif hw.get("gpu"):
        machine = f"GPU {hw['gpu']} (host CPU not recorded{', ' + threads if threads else ''})"
    else:
        machine = f"machine not recorded{' (' + threads + ')' if threads else ''}"
    caption = (f"{benchmark.description} {first['date']}, {machine}, "
               f"{'Python ' + ver['python'] + ', ' if ver.get('python') else ''}torch {ver['torch']}{others}, "
               f"sciattn {commit}"
               f"{', quick budget' if first.get('quick') else ''}. Command: `{first['command']}`.")
    cols = list(benchmark.columns or benchmark.schema)
    header = [benchmark.labels.get(c, c) for c in cols]
    lines = [caption.strip(), ""]
    if benchmark.table is not None:
        lines.append(benchmark.table(records).rstrip("\n"))
    else:
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(format_value(r["row"].get(c, benchmark.added_fields.get(c))) for c in cols) + " |"
                  for r in records]
    if benchmark.notes is not None:
        lines += ["", benchmark.notes(records).rstrip("\n")]
    if first.get("note"):
        lines += ["", first["note"]]
    return "\n".join(lines) + "\n"


def run_benchmark(name: str, *, quick: bool = False, results: Path | str = RESULTS,
                  overrides: dict[str, Any] | None = None, command: str | None = None) -> list[dict[str, Any]]:
    """Run benchmark ``name``, validate its rows against the schema and append them (with the run's
    metadata) to ``results/NAME.jsonl``; returns the appended records."""
    bench = get(name)
    params = bench.resolve(quick, overrides)
    if command is None:
        command = "python -m benchmarks " + " ".join(sys.argv[1:])
    meta = metadata(command, params, bench.packages)
    rows = bench.run(dict(params))
    import torch

    # the threads the measurement ran with: a benchmark that sets its own count (most time on one) records that one
    meta["hardware"]["torch_threads"] = torch.get_num_threads()
    if not isinstance(rows, list) or not rows:
        raise SchemaError(f"{name}: run() expected to return a non-empty list of rows, got {rows!r:.80}")
    for i, row in enumerate(rows):
        validate_row(bench, row, i)
    run_id = uuid.uuid4().hex[:12]
    records = [{"benchmark": name, "run_id": run_id, **meta, "quick": quick, "row": row} for row in rows]
    append_rows(results_path(name, results), records)
    return records


def plot_rows(benchmark: Benchmark, records: list[dict[str, Any]], path: Path | str) -> Path:
    """A PNG of ``y`` against ``x`` (one line per ``series`` value) of one run's rows."""
    if benchmark.plot is None:
        raise ValueError(f"{benchmark.name}: no plot is declared for this benchmark")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, y, series = benchmark.plot
    groups: dict[Any, list[tuple[Any, Any]]] = {}
    for r in records:
        groups.setdefault(r["row"][series] if series else y, []).append((r["row"][x], r["row"][y]))
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for label, pts in groups.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, label=str(label))
    if benchmark.log_axes[0]:
        ax.set_xscale("log")
    if benchmark.log_axes[1]:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(benchmark.name)
    ax.legend(fontsize=8)
    from sciattn.train.analysis.plots import save_figure

    return save_figure(fig, plt, path)
