"""``sciattn demo`` as a benchmark: the README's first command (Darcy flow from the built-in solver, a Galerkin
Transformer trained at 32×32 on the CPU, evaluated zero-shot at 32, 64 and 128), with its errors recorded as rows.

    python -m benchmarks run demo [--quick] [--set out='"DIR"'] [--set overrides='["train.epochs=3"]']

One row per test resolution: relative L2 and H1, the ratio to the training resolution's L2, and the run's
parameters, epochs, training samples and wall time. The demo's data is cached under ``~/.cache/sciattn``
(``data_seconds`` is the time to generate or read it). An existing ``out`` folder is refused (the quick budget
replaces its own scratch folder). The thread count changes the order of floating-point sums, so the last digit
of the errors moves with ``OMP_NUM_THREADS`` (rows record torch's thread count).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .harness import ROOT, module_benchmarks

SCHEMA = {"resolution": "int", "rel_l2": "float", "rel_h1": "float", "ratio_to_training": "float",
          "parameters": "int", "epochs": "int", "n_train": "int", "train_resolution": "int",
          "data_seconds": "float", "wall_seconds": "float"}
COLUMNS = ("resolution", "rel_l2", "rel_h1", "ratio_to_training")
LABELS = {"rel_l2": "relative L2", "rel_h1": "relative H1", "ratio_to_training": "L2 ratio to the training resolution"}
PARAMS = {"out": str(ROOT / "benchmarks" / "runs" / "demo"), "overrides": []}
QUICK = {"out": str(ROOT / "benchmarks" / "runs" / "demo_quick"), "overrides": ["train.epochs=1", "data.n_train=64"]}


def rows_of(metrics: dict) -> list[dict]:
    """One row per test resolution of a demo run's ``metrics.json``."""
    train_res = int(metrics["train_resolution"][0])
    tests = sorted(((int(name.rsplit("_", 1)[-1]), m) for name, m in metrics["test"].items()), key=lambda t: t[0])
    base = dict(tests)[train_res]["rel_l2"]
    return [{"resolution": r, "rel_l2": float(m["rel_l2"]), "rel_h1": float(m["rel_h1"]),
             "ratio_to_training": float(m["rel_l2"]) / base, "parameters": int(metrics["parameters"]),
             "epochs": int(metrics["epochs_done"]), "n_train": int(metrics["data_source"]["n_train"]),
             "train_resolution": train_res, "data_seconds": float(metrics["data_seconds"]),
             "wall_seconds": float(metrics["wall_seconds"])} for r, m in tests]


def run(params: dict) -> list[dict]:
    from sciattn.train.demo import run_demo

    overrides = params["overrides"]
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        raise ValueError(f"overrides: expected a list of 'SECTION.KEY=VALUE' strings, got {overrides!r}")
    out = Path(params["out"])
    if out.exists():
        if out.name != "demo_quick" or not overrides:
            raise FileExistsError(f"out: {str(out)!r} exists; choose another folder (a run is never overwritten)")
        shutil.rmtree(out)  # the quick budget's scratch run
    metrics = run_demo(out, list(overrides), progress=False, log=lambda message: None)
    return rows_of(metrics)


def notes(records: list[dict]) -> str:
    r = records[0]["row"]
    return (f"{r['parameters']:,} parameters, trained at {r['train_resolution']}×{r['train_resolution']} on "
            f"{r['n_train']} samples for {r['epochs']} epochs; evaluated zero-shot on the finer grids. Wall time "
            f"{r['wall_seconds'] / 60:.1f} min (data {r['data_seconds']:.0f} s).")


BENCHMARKS = module_benchmarks(globals(), columns=COLUMNS, labels=LABELS,
    description="`sciattn demo`: a Galerkin Transformer trained on generated Darcy flow at 32×32, evaluated "
                "zero-shot at 32, 64 and 128;",
    claim="the demo's error stays within a few per cent of the training resolution's at 2x and 4x "
          "(README, docs/benchmarks/index.md)",
)
