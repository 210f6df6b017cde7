"""The user's resolution sweep on real data, through the CLI only: train on neuraloperator's
``darcy_train_16.pt`` with ``examples/configs/darcy16_galerkin.toml``, then
``sciattn evaluate RUN --resolutions 16 32 64``, which draws every resolution from the generator
matched to that file (:mod:`sciattn.pde_data.darcy_neuralop`, solved at 128 and restricted, the same
samples at each resolution) and checks them against the run's recorded training statistics.

Usage::

    python benchmarks/darcy16_sweep.py [--data ../shared/data] [--out benchmarks/runs/darcy16_sweep] [--n-samples 64]

Writes one row per resolution (date, hardware, versions, command) to
``benchmarks/results/darcy16_sweep.json`` and the table ``darcy16_sweep.md`` that
``benchmarks/readme_tables.py`` copies into README.md. An existing run directory is refused
(pass ``--resume`` to continue its training, or another ``--out``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import torch

from sciattn.train.checkpoint import atomic_write_bytes
from sciattn.train.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "configs" / "darcy16_galerkin.toml"
RESULTS = ROOT / "benchmarks" / "results"
RESOLUTIONS = (16, 32, 64)


def _markdown(result: dict) -> str:
    rows = result["rows"]
    lines = [f"Command: `{result['command']}`; {result['date']}, {result['hardware']}, torch {result['torch']}, "
             f"{result['threads']} torch threads; train {result['train_seconds']:.0f} s, sweep "
             f"{result['sweep_seconds']:.0f} s.", "",
             f"Trained on `darcy_train_16.pt` ({result['n_train']} samples); relative L2 on its own test file "
             f"`darcy_test_16.pt`: {result['real_test_rel_l2']:.4f}. Sweep data: `{result['generator']}`, "
             f"{result['n_samples']} samples, seed {result['seed']}.", "",
             "| resolution | regime | in distribution | relative L2 | relative H1 | L2 / L2 at 16 |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "—" if r["ratio_to_training"] is None else f"{r['ratio_to_training']:.2f}"
        lines.append(f"| {r['resolution']} | {r['regime']} | {'yes' if r['in_distribution'] else 'NO'} | "
                     f"{r['rel_l2']:.4f} | {r['rel_h1']:.4f} | {ratio} |")
    lines += ["", f"Verdict: {result['verdict']}"]
    return "\n".join(lines) + "\n"


def run(data: Path, out: Path, n_samples: int, resume: bool) -> dict:
    if out.exists() and not resume:
        raise SystemExit(f"--out: {str(out)!r} exists; pass --resume to continue it or choose another directory")
    started = time.perf_counter()
    args = ["train", str(CONFIG), "--out", str(out), "--no-progress",
            "--set", f'data.train="{data / "darcy_train_16.pt"}"', "--set", f'data.test="{data / "darcy_test_16.pt"}"']
    if resume:
        args.append("--resume")
    if cli(args) != 0:
        raise SystemExit("sciattn train failed")
    train_seconds = time.perf_counter() - started
    started = time.perf_counter()
    if cli(["evaluate", str(out), "--resolutions", *map(str, RESOLUTIONS), "--n-samples", str(n_samples),
            "--no-progress"]) != 0:
        raise SystemExit("sciattn evaluate failed")
    sweep_seconds = time.perf_counter() - started
    report = json.loads((out / "eval" / "darcy_neuralop.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    return {
        "date": datetime.date.today().isoformat(), "hardware": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
        "command": "python benchmarks/darcy16_sweep.py " + " ".join(sys.argv[1:]),
        "train_seconds": train_seconds, "sweep_seconds": sweep_seconds, "n_train": _n_train(metrics, data),
        "real_test_rel_l2": metrics["test"]["test_16x16"]["rel_l2"], "generator": report["data_built"]["generator"],
        "seed": report["data_built"]["seed"], "n_samples": n_samples, "verdict": report["verdict"],
        "rows": [{k: row[k] for k in ("resolution", "regime", "in_distribution", "rel_l2", "rel_h1",
                                      "ratio_to_training")} for row in report["rows"]],
    }


def _n_train(metrics: dict, data: Path) -> int:
    from sciattn.train.data import load_data_file

    n = (metrics.get("data_source") or {}).get("n_train")
    return int(n) if n else len(load_data_file(data / "darcy_train_16.pt"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "runs" / "darcy16_sweep")
    p.add_argument("--n-samples", type=int, default=64)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if not (args.data / "darcy_train_16.pt").is_file():
        raise SystemExit(f"--data: expected a folder holding darcy_train_16.pt, got {str(args.data)!r}")
    result = run(args.data, args.out, args.n_samples, args.resume)
    args.results.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes((json.dumps(result, indent=2) + "\n").encode(), args.results / "darcy16_sweep.json")
    atomic_write_bytes(_markdown(result).encode(), args.results / "darcy16_sweep.md")
    print(_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
