"""Copy benchmark result tables into README.md and docs/**/*.md, so their numbers always come from a results file.

A page marks each table block as::

    <!-- results:NAME -->
    ...            (replaced by the table of the latest run in benchmarks/results/NAME.jsonl, generated
                    from its rows by the harness; for a result not yet on the harness, by NAME.md)
    <!-- /results:NAME -->

A block may select the run by its parameters, and the rows by their fields (values read as JSON,
else as strings; see :func:`benchmarks.harness.select`)::

    <!-- results:refinement operator=gnot init=published -->
    <!-- results:kernels device=cuda row.op=galerkin -->

    python benchmarks/readme_tables.py           # rewrite the pages in place
    python benchmarks/readme_tables.py --check   # exit 1 if a page is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w.-]+)(?P<where>(?: [\w.]+=[^\s>]+)*) -->\n)(?P<body>.*?)"
                   r"(<!-- /results:(?P=name) -->)", re.S)


def harness_table(name: str, rows: Path, where: str = "") -> str:
    """The Markdown the harness generates from the rows in ``rows`` of the latest run not made with the
    ``--quick`` budget (the latest quick one when there is no other) among those matching ``where``
    (``"key=value key=value"``)."""
    if str(ROOT) not in sys.path:  # run as a script: make the benchmarks package importable
        sys.path.append(str(ROOT))
    from benchmarks import harness

    selector = harness.parse_where(where.split(), what=f"<!-- results:{name}{where} -->")
    return harness.markdown_table(harness.get(name),
                                  harness.latest_run(harness.read_rows(rows), full=True, where=selector))


def fill(readme: str, results_dir: Path) -> str:
    """``readme`` with every marked block replaced by its results file (missing files are an error)."""

    def sub(m: re.Match) -> str:
        rows = results_dir / f"{m.group('name')}.jsonl"
        if rows.is_file():
            table = harness_table(m.group("name"), rows, m.group("where"))
            return m.group(1) + table.rstrip("\n") + "\n" + m.group(5)
        path = results_dir / f"{m.group('name')}.md"
        if not path.is_file():
            raise FileNotFoundError(f"README block {m.group('name')!r}: expected results file {path}, not found")
        return m.group(1) + path.read_text().rstrip("\n") + "\n" + m.group(5)

    return BLOCK.sub(sub, readme)


def pages() -> list[Path]:
    """The pages whose result blocks are filled: README.md and every docs/**/*.md (not under ``_``-folders such
    as ``docs/_build``)."""
    docs = ROOT / "docs"
    return [ROOT / "README.md", *sorted(p for p in docs.rglob("*.md")
                                        if not any(part.startswith("_") for part in p.relative_to(docs).parts))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check; exit 1 when a page differs")
    args = ap.parse_args(argv)
    stale, missing = [], []
    for page in pages():
        old = page.read_text()
        try:
            new = fill(old, ROOT / "benchmarks" / "results")
        except FileNotFoundError as e:  # report it and go on with the other pages
            missing.append(f"{page.relative_to(ROOT)}: {e}")
            continue
        if args.check:
            if new != old:
                stale.append(page.relative_to(ROOT))
            continue
        page.write_text(new)
        print(f"{len(BLOCK.findall(old))} result blocks copied into {page}")
    for line in missing:
        print(line, file=sys.stderr)
    if stale:
        print(f"{', '.join(map(str, stale))}: tables differ from benchmarks/results; run python benchmarks/readme_tables.py")
        return 1
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
