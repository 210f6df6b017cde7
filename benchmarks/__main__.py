"""Command line of the benchmark harness: ``python -m benchmarks list|run|table|plot``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import harness


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the registered benchmarks")
    r = sub.add_parser("run", help="run one benchmark and append its rows")
    r.add_argument("name")
    r.add_argument("--quick", action="store_true", help="the benchmark's small budget")
    r.add_argument("--out", type=Path, default=harness.RESULTS, help="results folder (NAME.jsonl is appended)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="override a parameter")
    for name in ("table", "plot"):
        t = sub.add_parser(name, help=f"the {name} of one run's rows (default: the latest)")
        t.add_argument("name")
        t.add_argument("--results", type=Path, default=harness.RESULTS)
        t.add_argument("--run", default=None, help="run_id (default: the last run)")
        t.add_argument("--where", nargs="+", default=[], metavar="KEY=VALUE",
                       help="the latest run whose parameters match (row.FIELD=VALUE: only the rows that match)")
        if name == "plot":
            t.add_argument("--out", type=Path, default=None, help="PNG path (default: RESULTS/NAME.png)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "list":
            for name in harness.names():
                b = harness.get(name)
                print(f"{name:28s} {b.description.rstrip(';,')}"
                      + (f"  [claim: {b.claim}]" if b.claim else ""))
            return 0
        bench = harness.get(args.name)
        if args.cmd == "run":
            cmd = "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:])
            records = harness.run_benchmark(args.name, quick=args.quick, results=args.out,
                                            overrides=harness.parse_where(args.set, what="--set"), command=cmd)
            print(harness.markdown_table(bench, records))
            print(f"{len(records)} rows appended to {harness.results_path(args.name, args.out)}")
            return 0
        records = harness.latest_run(harness.read_rows(harness.results_path(args.name, args.results)), args.run,
                                     where=harness.parse_where(args.where))
        if args.cmd == "table":
            print(harness.markdown_table(bench, records), end="")
            return 0
        out = args.out or args.results / f"{args.name}.png"
        print(harness.plot_rows(bench, records, out))
        return 0
    except (KeyError, ValueError, FileNotFoundError) as e:
        print(f"python -m benchmarks {args.cmd}: error: {e.args[0] if isinstance(e, KeyError) else e}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
