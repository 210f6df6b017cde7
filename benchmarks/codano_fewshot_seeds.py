"""The few-shot benchmark of ``codano_fewshot.py`` over several seeds, from its result files.

Each seed S is one full run, ``python benchmarks/codano_fewshot.py --threads 1 --seed S`` (new initial
fields for every pair, new initial weights, new fine-tuning draws), which writes
``codano_fewshot.json`` (S = 0) or ``codano_fewshot_seed<S>.json`` (``--augment shift`` runs:
``codano_fewshot_shift_augment[_seed<S>].json``, collected with the same flag). This script reads those files,
refuses to mix runs whose protocol differs (sizes, steps, augmentation, β, learning rates), and
reports per seed and as mean ± standard deviation the test relative L2 of the three models at
every n, CoDANO's gain over the FNO at the target size, and whether the issue's target (at least
30 % below the FNO and below neuraloperator's CODANO) holds for the mean and for every seed; once
for the models' own predictions and, where every run recorded it, once for their half-turn averages.

    python benchmarks/codano_fewshot_seeds.py [--seeds 0 1 2] [--augment symmetry] [--results benchmarks/results]

Writes ``codano_fewshot_seeds.{json,md}`` (``codano_fewshot_<mode>_augment_seeds`` for another
``--augment``) beside the inputs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

from codano_fewshot import AUGMENTATIONS, METRICS, MODELS, augment_mode, augment_suffix, result_stem, versus

ROOT = Path(__file__).resolve().parents[1]
PROTOCOL_KEYS = ("config", "ours", "lr", "residual", "beta", "theta_like", "augment")


def result_file(results: Path, seed: int, augment: str = "symmetry") -> Path:
    return results / f"{result_stem(augment=augment, seed=seed)}.json"


def _protocol(run: dict, key: str):
    return augment_mode(run.get(key)) if key == "augment" else run.get(key)


def collect(runs: list[dict], metric: str = "test") -> dict:
    """Per-seed rows and the mean / spread of ``metric`` (a key of ``codano_fewshot.METRICS``);
    ``runs`` are ``codano_fewshot.json`` summaries. With the default metric, the half-turn averaged
    errors are collected too (``"half_turn_averaged"``) when every run recorded them."""
    first = runs[0]
    for run in runs[1:]:
        differ = [k for k in PROTOCOL_KEYS if _protocol(run, k) != _protocol(first, k)]
        if differ:
            raise ValueError(f"runs: expected one protocol for every seed, seed {run['seed']} differs from seed "
                             f"{first['seed']} in {differ}")
    ns = [str(n) for n in first["config"]["n_values"]]
    target = str(first["target_n"])
    rows = []
    for run in runs:
        res = run["results"]
        errors = {m: {n: res[m]["finetune"][n][metric]["all"] for n in ns} for m in MODELS}
        gain = 1 - errors[MODELS[0]][target] / errors[MODELS[2]][target]
        rows.append({"seed": run["seed"], "errors": errors, "gain": gain,
                     "below_anchor": errors[MODELS[0]][target] < errors[MODELS[1]][target],
                     "parameters": {m: res[m]["parameters"] for m in MODELS}, "command": run["command"],
                     "seconds": run["total_seconds"]})
    mean = {m: {n: statistics.mean(r["errors"][m][n] for r in rows) for n in ns} for m in MODELS}
    spread = {m: {n: statistics.stdev(r["errors"][m][n] for r in rows) if len(rows) > 1 else None for n in ns}
              for m in MODELS}
    gains = [r["gain"] for r in rows]
    mean_gain = 1 - mean[MODELS[0]][target] / mean[MODELS[2]][target]
    summary = {"metric": metric, "n_values": ns, "target_n": target, "rows": rows, "mean": mean, "std": spread,
               "gains": gains, "gain_of_mean_errors": mean_gain, "gain_min": min(gains),
               "target_met_by_mean": mean_gain >= 0.3 and mean[MODELS[0]][target] < mean[MODELS[1]][target],
               "target_met_by_every_seed": min(gains) >= 0.3 and all(r["below_anchor"] for r in rows)}
    averaged = next(m for m in METRICS if m != "test")
    if metric == "test" and all(averaged in run["results"][m]["finetune"][n] for run in runs for m in MODELS
                                for n in ns):
        summary["half_turn_averaged"] = collect(runs, averaged)
    return summary


def markdown(summary: dict) -> str:
    rows = summary["rows"]
    lines = [
        f"CoDANO few-shot benchmark over {len(rows)} seeds ({', '.join(str(r['seed']) for r in rows)}), collected "
        f"{summary['date']} by `{summary['command']}` from the result files of `{rows[0]['command']}` and its "
        f"`--seed S` reruns ({sum(r['seconds'] for r in rows) / 60:.0f} min of runs in all).", "",
        "Test relative L2 (mean over samples and variables) of each model's own prediction, per seed and mean ± "
        "standard deviation over seeds:", "",
    ] + _metric_lines(summary)
    if "half_turn_averaged" in summary:
        lines += ["", "The same runs with every model's prediction averaged with its half-turned counterpart, "
                  "½ (P(x) + T P(T x)) (T the half-turn, an exact symmetry of the system; no retraining):", ""]
        lines += _metric_lines(summary["half_turn_averaged"])
    return "\n".join(lines) + "\n"


def _metric_lines(summary: dict) -> list[str]:
    """The per-seed table, the gains and the target verdict of one metric's :func:`collect`."""
    ns, target, rows = summary["n_values"], summary["target_n"], summary["rows"]
    fmt_std = lambda s: "" if s is None else f" ± {s:.4f}"  # noqa: E731
    lines = ["| model | seed | " + " | ".join(f"n={n}" for n in ns) + " |", "|---|---|" + "---|" * len(ns)]
    for m in MODELS:
        for r in rows:
            lines.append(f"| {m} | {r['seed']} | " + " | ".join(f"{r['errors'][m][n]:.4f}" for n in ns) + " |")
        lines.append(f"| {m} | **mean** | "
                     + " | ".join(f"**{summary['mean'][m][n]:.4f}**{fmt_std(summary['std'][m][n])}" for n in ns)
                     + " |")
    lines += ["", f"CoDANO against the FNO at n = {target}, per seed: "
              + ", ".join(f"seed {r['seed']} {versus(r['gain'])}" for r in rows)
              + f"; of the mean errors {100 * summary['gain_of_mean_errors']:.1f}% lower"
              + (f" (per-seed gains {100 * statistics.mean(summary['gains']):.1f}% ± "
                 f"{100 * statistics.stdev(summary['gains']):.1f}%)." if len(rows) > 1 else "."),
              "", f"Target (n = {target}: at least 30% below the FNO and below neuralop CODANO): by the mean errors "
              + ("MET" if summary["target_met_by_mean"] else "NOT MET") + "; in every seed "
              + ("MET" if summary["target_met_by_every_seed"] else "NOT MET") + "."]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--augment", choices=AUGMENTATIONS, default="symmetry",
                    help="which runs to collect: those of codano_fewshot.py --augment (file names differ)")
    args = ap.parse_args()
    files = [result_file(args.results, s, args.augment) for s in args.seeds]
    missing = [s for s, f in zip(args.seeds, files) if not f.is_file()]
    if missing:
        flag = "" if args.augment == "symmetry" else f" --augment {args.augment}"
        ap.error("--seeds: no result file for seed(s) " + ", ".join(map(str, missing)) + "; run "
                 + "; ".join(f"python benchmarks/codano_fewshot.py --threads 1{flag} --seed {s}" for s in missing))
    runs = [json.loads(f.read_text()) for f in files]
    summary = collect(runs)
    summary.update(benchmark="codano_fewshot_seeds", date=datetime.date.today().isoformat(),
                   command="python benchmarks/codano_fewshot_seeds.py " + " ".join(sys.argv[1:]))
    text = markdown(summary)
    print(text)
    stem = f"codano_fewshot{augment_suffix(args.augment)}_seeds"
    (args.results / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.results / f"{stem}.md").write_text(text)


if __name__ == "__main__":
    main()
