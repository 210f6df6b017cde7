"""The ``sciattn`` command line: ``train``, ``evaluate``, ``demo`` and ``backends``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["main"]


def _cmd_train(args) -> int:
    from .config import load_config
    from .run import train_run

    cfg = load_config(args.config, args.set)
    out = Path(args.out) if args.out else Path("runs") / Path(args.config).stem
    metrics = train_run(cfg, out, resume=args.resume, progress=not args.no_progress)
    print(json.dumps({"run_dir": str(out), "test": metrics["test"]}, indent=2))
    return 0


def _cmd_evaluate(args) -> int:
    from .checkpoint import atomic_write_bytes
    from .run import evaluate_run

    results = [evaluate_run(args.run_dir, d, fmt=args.format, plot=None) for d in args.data]
    print("| data | resolution | relative L2 | relative H1 | ms/sample |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {Path(r['data']).name} | {'x'.join(map(str, r['resolution']))} | {r['rel_l2']:.4f} | "
              f"{r['rel_h1']:.4f} | {1e3 * r['seconds_per_sample']:.2f} |")
    if args.json:
        atomic_write_bytes((json.dumps(results, indent=2) + "\n").encode(), args.json)
    return 0


def _cmd_demo(args) -> int:
    from .demo import run_demo

    run_demo(args.out, args.set, progress=not args.no_progress)
    return 0


def _cmd_backends(args) -> int:
    import sciattn

    print(json.dumps(sciattn.capability_report()))
    sciattn.available_backends()
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sciattn", description="Attention-based neural operators for PDE surrogates.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train an operator from a TOML config")
    t.add_argument("config", help="TOML file with [model], [data] and [train] sections")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value (TOML literal); repeatable")
    t.add_argument("--out", help="run directory (default runs/<config name>)")
    t.add_argument("--resume", action="store_true", help="continue from RUN_DIR/checkpoint.pt if present")
    t.add_argument("--no-progress", action="store_true", help="hide progress bars")
    t.set_defaults(func=_cmd_train)

    e = sub.add_parser("evaluate", help="evaluate a trained run on data files, each at its own resolution")
    e.add_argument("run_dir")
    e.add_argument("--data", nargs="+", required=True, help="data file(s)")
    e.add_argument("--format", default=None, help="data format (default: from the file name)")
    e.add_argument("--json", help="write the results to this JSON file")
    e.set_defaults(func=_cmd_evaluate)

    d = sub.add_parser("demo", help="Darcy flow: train at 32x32 on the CPU, evaluate zero-shot at 32, 64, 128")
    d.add_argument("--out", default="sciattn-demo", help="output directory (default ./sciattn-demo)")
    d.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    d.add_argument("--no-progress", action="store_true")
    d.set_defaults(func=_cmd_demo)

    b = sub.add_parser("backends", help="print the attention backends and whether each runs here")
    b.set_defaults(func=_cmd_backends)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"sciattn {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
