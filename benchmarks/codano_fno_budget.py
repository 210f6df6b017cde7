"""Does the few-shot FNO catch up with CoDANO when it gets CoDANO's compute?

``codano_fewshot.py`` trains the FNO from scratch for the same number of steps as CoDANO's
fine-tuning, which takes the FNO about a tenth of CoDANO's fine-tuning time. This script trains the
same FNO (same data split, scaling, augmentation, learning rate and seed as ``codano_fewshot.py``) on
the same ``n`` few-shot pairs for several step budgets, up to about CoDANO's whole training time
(pretraining plus fine-tuning), and tests it on the same pairs, with and without the half-turn
average. The 400-step row repeats ``codano_fewshot``'s FNO run exactly (checked against its result
file), and CoDANO's errors and times are read from those files, so every ratio in the table compares
runs of one protocol.

    python benchmarks/codano_fno_budget.py [--seeds 0 1 2] [--steps 400 1200 4000 12000] [--n 25] [--threads 1]

Needs ``codano_fewshot``'s result files for the seeds (``codano_fewshot[_seed<S>].json``); writes
benchmarks/results/codano_fno_budget.{json,md} (``--quick``: tiny data, no reference, nothing written).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import codano_fewshot as fewshot  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OURS, FNO = fewshot.MODELS[0], fewshot.MODELS[2]
METRICS = tuple(fewshot.METRICS)


def fno_at_budget(data, ns_scale, cfg, *, seed: int, n: int, steps: int) -> dict:
    """``codano_fewshot``'s FNO run (:func:`codano_fewshot.finetune_and_test`) on the first ``n`` pool pairs
    with ``steps`` training steps; returns its steps, seconds and both test metrics."""
    train_set, test_set = fewshot.fewshot_split(data, ns_scale, n)
    info = fewshot.finetune_and_test(FNO, {"kind": "fno"}, {}, train_set, test_set, {**cfg, "finetune_steps": steps},
                                     seed=seed, n=n, residual=True, augment="symmetry", theta_like=None)
    return {"steps": steps, "seconds": info["seconds"], **{m: info[m] for m in METRICS}}


def reference(run: dict, n: int) -> dict:
    """CoDANO's and the FNO's errors and times at ``n`` from a ``codano_fewshot`` result summary."""
    res, key = run["results"], str(n)
    ours, fno = res[OURS], res[FNO]
    return {"codano": {m: ours["finetune"][key][m]["all"] for m in METRICS},
            "codano_finetune_seconds": ours["finetune"][key]["seconds"],
            "codano_pretrain_seconds": ours["pretrain"]["seconds"],
            "fno": {m: fno["finetune"][key][m]["all"] for m in METRICS},
            "fno_steps": fno["finetune"][key]["steps"]}


def check_reproduces(row: dict, ref: dict, tol: float = 1e-6) -> None:
    """The budget row with ``codano_fewshot``'s step count must repeat its FNO errors."""
    for m in METRICS:
        if abs(row[m]["all"] - ref["fno"][m]) > tol:
            raise RuntimeError(f"{m}: the {row['steps']}-step FNO gave {row[m]['all']:.6f}, codano_fewshot's result "
                               f"file has {ref['fno'][m]:.6f}: the two runs do not share a protocol")


def markdown(summary: dict) -> str:
    seeds, steps = summary["seeds"], summary["steps"]
    per = summary["per_seed"]
    lines = [
        f"FNO from scratch on n = {summary['n']} few-shot pairs at several step budgets, against CoDANO "
        f"(pretrained, 400 fine-tuning steps), seeds {', '.join(map(str, seeds))}, {summary['date']}, "
        f"{summary['machine']}, torch {summary['torch']}. Command: `{summary['command']}`. Total wall time "
        f"{summary['total_seconds'] / 60:.1f} min. CoDANO's errors and times come from `codano_fewshot`'s result "
        f"files of the same seeds; the {summary['reference_steps']}-step FNO repeats those files' FNO exactly.", "",
        "Test relative L2 (mean over samples and variables), mean over seeds; time per run on one core; CoDANO's "
        "gain over each FNO budget:", "",
        "| model | steps | seconds (mean) | plain | half-turn averaged | CoDANO lower by (plain) | "
        "CoDANO lower by (averaged) |", "|---|---|---|---|---|---|---|",
    ]
    mean = statistics.mean
    codano = {m: mean(per[str(s)]["reference"]["codano"][m] for s in seeds) for m in METRICS}
    ft = mean(per[str(s)]["reference"]["codano_finetune_seconds"] for s in seeds)
    pre = mean(per[str(s)]["reference"]["codano_pretrain_seconds"] for s in seeds)
    lines.append(f"| {OURS} | 400 (+ 1200 pretraining) | {ft:.0f} (+ {pre:.0f} pretraining) | "
                 f"{codano['test']:.4f} | {codano['test_half_turn_averaged']:.4f} | – | – |")
    for i, st in enumerate(steps):
        rows = [per[str(s)]["fno"][i] for s in seeds]
        err = {m: mean(r[m]["all"] for r in rows) for m in METRICS}
        lines.append(f"| {FNO} | {st} | {mean(r['seconds'] for r in rows):.0f} | {err['test']:.4f} | "
                     f"{err['test_half_turn_averaged']:.4f} | {fewshot.versus(1 - codano['test'] / err['test'])} | "
                     f"{fewshot.versus(1 - codano['test_half_turn_averaged'] / err['test_half_turn_averaged'])} |")
    lines += ["", "Per seed (half-turn averaged test relative L2 of the FNO; CoDANO in the last column):", "",
              "| seed | " + " | ".join(f"FNO {st} steps" for st in steps) + " | CoDANO |",
              "|---|" + "---|" * (len(steps) + 1)]
    for s in seeds:
        p = per[str(s)]
        lines.append(f"| {s} | " + " | ".join(f"{r['test_half_turn_averaged']['all']:.4f}" for r in p["fno"])
                     + f" | {p['reference']['codano']['test_half_turn_averaged']:.4f} |")
    best = min(range(len(steps)), key=lambda i: mean(per[str(s)]["fno"][i]["test_half_turn_averaged"]["all"]
                                                      for s in seeds))
    lines += ["", f"Best FNO budget (mean half-turn averaged error): {steps[best]} steps."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, nargs="+", default=[400, 1200, 4000, 12000])
    ap.add_argument("--n", type=int, default=25)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="tiny data; prints the FNO rows, writes nothing")
    ap.add_argument("--cache", type=Path, default=Path("~/.cache/sciattn").expanduser())
    ap.add_argument("--results", type=Path, default=None, help="where to write (default benchmarks/results)")
    ap.add_argument("--reference", type=Path, default=ROOT / "benchmarks" / "results",
                    help="folder of codano_fewshot's result files")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    cfg = dict(fewshot.QUICK if args.quick else fewshot.FULL)
    if not 1 <= args.n <= cfg["pool"]:
        ap.error(f"--n: expected 1..{cfg['pool']} (the fine-tuning pool), got {args.n}")
    if min(args.steps) < 1:
        ap.error(f"--steps: expected positive step counts, got {args.steps}")
    steps = sorted(set(args.steps))
    per_seed = {}
    for seed in args.seeds:
        ref = None
        if not args.quick:
            path = args.reference / f"{fewshot.result_stem(seed=seed)}.json"
            if not path.is_file():
                ap.error(f"--seeds: no codano_fewshot result for seed {seed} ({path}); run "
                         f"python benchmarks/codano_fewshot.py --threads 1 --seed {seed}")
            ref = reference(json.loads(path.read_text()), args.n)
        data = fewshot.load(argparse.Namespace(seed=seed, cache=args.cache, beta=fewshot.DEFAULT_BETA), cfg)
        ns_scale = fewshot.rms(*data["ns_train"])
        rows = []
        for st in steps:
            row = fno_at_budget(data, ns_scale, cfg, seed=seed, n=args.n, steps=st)
            print(f"seed {seed} FNO {st} steps: {row['test']['all']:.4f} / averaged "
                  f"{row['test_half_turn_averaged']['all']:.4f} ({row['seconds']:.0f}s)", flush=True)
            if ref is not None and st == ref["fno_steps"]:
                check_reproduces(row, ref)
            rows.append(row)
        per_seed[str(seed)] = {"fno": rows, "reference": ref}
    if args.quick:  # no CoDANO reference to compare with
        return
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    summary = {
        "benchmark": "codano_fno_budget", "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, CPU (2 cores, shared)",
        "torch": torch.__version__, "command": f"python benchmarks/codano_fno_budget.py{' ' + argv if argv else ''}",
        "seeds": args.seeds, "steps": steps, "n": args.n, "reference_steps": cfg["finetune_steps"],
        "per_seed": per_seed, "total_seconds": time.perf_counter() - t_start,
    }
    text = markdown(summary)
    print(text)
    out = args.results if args.results is not None else ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "codano_fno_budget.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "codano_fno_budget.md").write_text(text)


if __name__ == "__main__":
    main()
