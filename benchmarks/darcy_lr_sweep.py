"""Per-model learning rate for the Darcy comparison, chosen on a validation split (never the test set).

Data: exactly Part B of ``benchmarks/darcy_mano.py`` (built-in solver, seed 0, 400 training samples
at 64², the same cache file). Of those 400 training samples the first 320 train and the last 80
validate; the 50 test samples are not read. Normalizers are fitted on the 320 only.

Protocol: for each model, built exactly as ``darcy_mano.models(64)`` builds it (from the same
initial weights for every lr: ``torch.manual_seed(seed)`` before building), train ``--epochs``
epochs with ``darcy_mano.RECIPE`` with only ``lr`` replaced by each value of ``--lrs``, and measure
the mean per-sample relative L2 error on the 80 validation samples at 64² (no zero-shot resolution
takes part in the choice). The chosen lr of a model is the argmin of its validation error (ties:
the smaller lr; a non-finite error never wins). ``darcy_mano.py --lr-from`` reads ``chosen_lr``.

    python benchmarks/darcy_lr_sweep.py [--lrs 1e-3 2e-3 4e-3 8e-3] [--epochs 10] [--models FNO MANO]
                                        [--threads 1] [--results benchmarks/results]

Writes benchmarks/results/darcy_lr_sweep.{json,md}; the JSON is rewritten after every run
(``"complete": false`` until the last one), so an interrupted sweep keeps what finished.
``--reuse`` extends the existing JSON instead: its runs with the same epochs, seed, split and recipe
are kept (not rerun), so widening one model's grid costs only the new runs, e.g.
``--models FNO --lrs 0.016 0.032 --reuse``. A chosen lr at the end of the grid a model was tried on
is flagged in the table (``edge``): its optimum may lie beyond.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import shlex
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from darcy_mano import RECIPE, generated_config, models, rel_l2, train_model  # noqa: E402

from sciattn.pde_data.grid_dataset import GridPairDataset  # noqa: E402
from sciattn.train.data import build_datasets  # noqa: E402
from sciattn.train.run import count_parameters  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL_NAMES = tuple(models(64))  # the builders are lazy: names only


def split_indices(n: int, n_val: int) -> tuple[list[int], list[int]]:
    """``(train, validation)`` indices: the first ``n - n_val`` samples and the last ``n_val``."""
    if not 0 < n_val < n:
        raise ValueError(f"n_val: expected 1..{n - 1} validation samples out of n={n}, got {n_val}")
    return list(range(n - n_val)), list(range(n - n_val, n))


def subset(ds: GridPairDataset, idx: list[int], split: str) -> GridPairDataset:
    """The samples ``idx`` of ``ds`` as a new dataset whose ``meta["split"]`` is ``split``."""
    i = torch.as_tensor(idx, dtype=torch.long)
    return GridPairDataset(ds.x[i], ds.y[i], {**ds.meta, "split": split, "indices": [idx[0], idx[-1] + 1]})


def choose_lrs(errors: dict[str, dict[float, float]]) -> dict[str, float]:
    """``{model: lr}`` minimising the validation error ``errors[model][lr]``; ties go to the smaller
    lr, non-finite errors (a diverged run) never win unless every run of the model diverged."""
    def key(item):
        lr, err = item
        return (0 if math.isfinite(err) else 1, err if math.isfinite(err) else 0.0, lr)

    return {name: min(runs.items(), key=key)[0] for name, runs in errors.items() if runs}


def reusable_runs(path: Path, summary: dict) -> tuple[list[dict], str | None]:
    """``(runs, command)`` of the sweep JSON at ``path``, which must have been made under the same
    protocol as ``summary`` (epochs, seed, split sizes, recipe); ``([], None)`` if there is no such file."""
    if not path.is_file():
        return [], None
    old = json.loads(path.read_text())
    same = all(old.get(k) == summary[k] for k in ("epochs", "seed", "n_fit", "n_val", "recipe"))
    if not same:
        raise ValueError(f"--reuse: {path} was made with another protocol (epochs/seed/split/recipe differ); "
                         "move it away or drop --reuse")
    return list(old["runs"]), old["command"]


def on_grid_edge(runs: list[dict], name: str, lr: float) -> bool:
    """Whether ``lr`` is the smallest or the largest lr ``name`` was tried with (its optimum may lie beyond)."""
    tried = [r["lr"] for r in runs if r["model"] == name]
    return len(tried) > 1 and lr in (min(tried), max(tried))


def write_results(path: Path, summary: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "darcy_lr_sweep.json").write_text(json.dumps(summary, indent=2) + "\n")
    runs, lrs = summary["runs"], summary["lrs"]
    lines = [f"Darcy learning-rate sweep, one seed ({summary['seed']}), {summary['date']}, {summary['machine']}, "
             f"torch {summary['torch']}. Command: `{summary['command']}`.", "",
             f"Built-in solver at 64², training samples 0–{summary['n_fit'] - 1} fit, "
             f"{summary['n_fit']}–{summary['n_fit'] + summary['n_val'] - 1} validate (the test samples are not read); "
             f"{summary['epochs']} epochs, recipe {json.dumps(RECIPE)} with lr replaced. Cells: validation rel. L2 "
             "at 64² (train seconds); **bold**: the chosen lr (argmin).", "",
             "| model | parameters | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | chosen lr |",
             "|---|---|" + "---|" * len(lrs) + "---|"]
    for name in summary["models"]:
        by_lr = {r["lr"]: r for r in runs if r["model"] == name}
        if not by_lr:
            continue
        chosen = summary["chosen_lr"].get(name)
        cells = []
        for lr in lrs:
            r = by_lr.get(lr)
            if r is None:
                cells.append("–")
                continue
            cell = f"{r['val_rel_l2']:.4f} ({r['train_seconds']:.0f} s)"
            cells.append(f"**{cell}**" if lr == chosen and summary["complete"] else cell)
        params = next(iter(by_lr.values()))["parameters"]
        shown = f"{chosen:g}" if summary["complete"] else "(incomplete)"
        if summary["complete"] and on_grid_edge(runs, name, chosen):
            shown += " (edge)"
        lines.append(f"| {name} | {params:,} | " + " | ".join(cells) + f" | {shown} |")
    (path / "darcy_lr_sweep.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 2e-3, 4e-3, 8e-3])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--models", nargs="+", choices=MODEL_NAMES, default=list(MODEL_NAMES))
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--n-train", type=int, default=400, help="darcy_mano's Part B training samples (split here)")
    ap.add_argument("--n-test", type=int, default=50, help="darcy_mano's test count: names the cache file only")
    ap.add_argument("--n-val", type=int, default=80, help="last training samples held out for validation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=Path("~/.cache/sciattn").expanduser())
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--reuse", action="store_true", help="keep the runs of the existing sweep JSON (same protocol)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    names = [n for n in MODEL_NAMES if n in args.models]
    lrs = sorted(set(args.lrs))

    full, _ = build_datasets(generated_config(args.n_train, args.n_test, args.cache, args.seed), progress=True)
    fit_idx, val_idx = split_indices(len(full), args.n_val)
    fit, val = subset(full, fit_idx, "train"), subset(full, val_idx, "validation")

    summary = {"benchmark": "darcy_lr_sweep", "date": datetime.date.today().isoformat(),
               "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, CPU",
               "torch": torch.__version__, "command": shlex.join(["python", "benchmarks/darcy_lr_sweep.py", *sys.argv[1:]]),
               "recipe": RECIPE, "epochs": args.epochs, "seed": args.seed, "n_fit": len(fit), "n_val": len(val),
               "lrs": lrs, "models": names, "runs": [], "chosen_lr": {}, "complete": False}
    errors: dict[str, dict[float, float]] = {n: {} for n in names}
    if args.reuse:
        old_runs, old_command = reusable_runs(args.results / "darcy_lr_sweep.json", summary)
        if old_command:
            summary["command"] = f"{old_command}, then {summary['command']}"
        for run in old_runs:
            summary["runs"].append(run)
            errors.setdefault(run["model"], {})[run["lr"]] = run["val_rel_l2"]
        summary["models"] = [n for n in MODEL_NAMES if n in errors]
        summary["lrs"] = sorted({r["lr"] for r in summary["runs"]} | set(lrs))
    for name in names:
        for lr in lrs:
            if lr in errors[name]:
                continue
            torch.manual_seed(args.seed)
            model = models(64)[name]()
            xn, yn, seconds = train_model(model, fit, args.epochs, args.seed, lr)
            err = rel_l2(model, val, xn, yn)
            errors[name][lr] = err
            run = {"model": name, "lr": lr, "parameters": count_parameters(model), "val_rel_l2": err,
                   "train_seconds": seconds}
            summary["runs"].append(run)
            summary["chosen_lr"] = choose_lrs(errors)
            print(json.dumps(run), flush=True)
            write_results(args.results, summary)
    summary["complete"] = True
    write_results(args.results, summary)
    print((args.results / "darcy_lr_sweep.md").read_text())


if __name__ == "__main__":
    main()
