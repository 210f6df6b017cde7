"""How the few-shot gain of pretraining depends on how far the new physics is from the old.

The few-shot system is Boussinesq, ``w_t + u . grad w = nu Laplacian w + f + beta theta_x``: at
``beta = 0`` the flow ``(u, v, w)`` follows the pretraining Navier–Stokes dynamics exactly and only the
scalar ``theta`` is new; as ``beta`` grows, buoyancy drives more of the vorticity increment and the
pretrained dynamics explain less of it. This script pretrains CoDANO and neuraloperator's CODANO once
on Navier–Stokes (exactly :mod:`codano_fewshot`'s protocol and sizes) and then, for every ``beta`` in
``--betas``, fine-tunes both on the same ``n`` Boussinesq pairs, side by side with an FNO trained from
scratch on them. It reports the test relative L2, CoDANO's gain over the FNO and the issue's verdict
(at least 30 % below the FNO and below the anchor) per ``beta``, and how large the vorticity increment
``y - x`` is against the pretraining one (the RMS ratio).

    python benchmarks/codano_coupling_sweep.py [--betas 0 0.05 0.1 0.2] [--n 25] [--seed 0] [--threads 1]

Writes benchmarks/results/codano_coupling_sweep.{json,md} (``_seed<seed>`` appended for a seed other
than 0; ``--quick`` writes nothing unless ``--results``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import codano_fewshot as fewshot  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = fewshot.MODELS


def increment_rms_ratio(pair, ns_pair, var: int = 2) -> float:
    """RMS of the one-step increment ``y - x`` of variable ``var`` (``w``) over the RMS of the pretraining one."""
    inc = lambda p: (p[1][:, var] - p[0][:, var]).square().mean().sqrt()  # noqa: E731
    return float(inc(pair) / inc(ns_pair))


def markdown(summary) -> str:
    cfg, rows = summary["config"], summary["rows"]
    n = summary["n"]
    lines = [
        f"Few-shot gain against the buoyancy coefficient β (pretrain once on Navier–Stokes (u, v, w), fine-tune on "
        f"n = {n} Boussinesq (u, v, w, theta) pairs per β), seed {summary['seed']}, {summary['date']}, "
        f"{summary['machine']}, torch {summary['torch']}, neuralop {summary['neuralop']}. Command: "
        f"`{summary['command']}`. Total wall time {summary['total_seconds'] / 60:.1f} min.", "",
        f"Protocol and sizes as `codano_fewshot.py` ({cfg['pretrain_steps']} pretraining steps, "
        f"{cfg['finetune_steps']} fine-tuning steps, data at {cfg['res']}², test on {cfg['test']} pairs per β"
        + f", {fewshot.AUGMENT_LABEL[fewshot.augment_mode(summary['augment'])]}"
        + "). Pretraining NS held-out relative L2: "
        + ", ".join(f"{k} {v:.4f}" for k, v in summary["pretrain_ns_test"].items()) + ".", "",
        "Test relative L2 (mean over samples and the 4 variables):", "",
        "| β | w increment RMS / NS | " + " | ".join(MODELS) + " | CoDANO vs FNO | target (≥ 30 % below FNO, "
        "below CODANO) |",
        "|---|---|" + "---|" * len(MODELS) + "---|---|",
    ]
    for r in rows:
        e = [r["test"][m]["all"] for m in MODELS]
        met = "MET" if all(v == "MET" for v in list(r["targets"].values())[:2]) else "NOT MET"
        lines.append(f"| {r['beta']:g} | {r['increment_rms_ratio']:.2f} | " + " | ".join(f"{x:.4f}" for x in e)
                     + f" | {fewshot.versus(1 - e[0] / e[2])} | {met} |")
    lines += ["", "Per variable (test relative L2, u / v / w / theta):", "", "| β | " + " | ".join(MODELS) + " |",
              "|---|" + "---|" * len(MODELS)]
    for r in rows:
        cells = [" / ".join(f"{r['test'][m][v]:.3f}" for v in fewshot.BOUS_VARS) for m in MODELS]
        lines.append(f"| {r['beta']:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--betas", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2],
                    help="buoyancy coefficients of the few-shot system")
    ap.add_argument("--n", type=int, default=None, help="fine-tuning pairs (default 25; --quick: 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="tiny smoke run, results not written by default")
    ap.add_argument("--augment", choices=fewshot.AUGMENTATIONS, default="symmetry", help="as in codano_fewshot.py")
    ap.add_argument("--cache", type=Path, default=Path("~/.cache/sciattn").expanduser())
    ap.add_argument("--results", type=Path, default=None, help="default benchmarks/results (full runs only)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    cfg = dict(fewshot.QUICK if args.quick else fewshot.FULL)
    n = args.n if args.n is not None else (10 if args.quick else 25)
    if not 1 <= n <= cfg["pool"]:
        ap.error(f"--n: expected a size in 1..{cfg['pool']} (the fine-tuning pool), got {n}")
    if len(set(args.betas)) != len(args.betas):
        ap.error(f"--betas: expected distinct values, got {args.betas}")
    import neuralop

    def data_for(beta):
        return fewshot.load(argparse.Namespace(seed=args.seed, cache=args.cache, beta=beta), cfg)

    first = data_for(args.betas[0])
    ns_scale = fewshot.rms(*first["ns_train"])
    ns_train, ns_test = fewshot.scaled(first["ns_train"], ns_scale), fewshot.scaled(first["ns_test"], ns_scale)
    results, pretrained = fewshot.pretrain_codomain_models(ns_train, ns_test, cfg, seed=args.seed, residual=True,
                                                           ours=fewshot.OURS)
    rows = []
    for beta in args.betas:
        data = first if beta == args.betas[0] else data_for(beta)
        print(f"== beta {beta:g}", flush=True)
        train_set, test_set = fewshot.fewshot_split(data, ns_scale, n)
        row = {"beta": beta, "increment_rms_ratio": increment_rms_ratio(data["test"], first["ns_test"]),
               "test": {}, "seconds": {}, "parameters": {}}
        per_model = {}
        for name in MODELS:
            r = per_model[name] = {**results[name], "finetune": {}}
            r.pop("zero_shot", None)
            info = fewshot.finetune_and_test(name, r, pretrained, train_set, test_set, cfg, seed=args.seed, n=n,
                                             residual=True, augment=args.augment, theta_like=None)
            r["finetune"][str(n)] = info
            row["test"][name], row["seconds"][name], row["parameters"][name] = (info["test"], info["seconds"],
                                                                                r["parameters"])
        row["targets"] = fewshot.check_targets(per_model, str(n))
        rows.append(row)
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    summary = {
        "benchmark": "codano_coupling_sweep", "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, CPU (2 cores, shared)",
        "torch": torch.__version__, "neuralop": getattr(neuralop, "__version__", "unknown"),
        "command": f"python benchmarks/codano_coupling_sweep.py{' ' + argv if argv else ''}", "seed": args.seed,
        "n": n, "augment": args.augment, "config": cfg, "ours": fewshot.OURS, "lr": fewshot.LR,
        "pretrain_ns_test": {k: results[k]["pretrain"]["ns_test"]["all"] for k in MODELS[:2]},
        "rows": rows, "total_seconds": time.perf_counter() - t_start,
    }
    text = markdown(summary)
    print(text)
    out = args.results if args.results is not None else (None if args.quick else ROOT / "benchmarks" / "results")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stem = ("codano_coupling_sweep" + fewshot.augment_suffix(args.augment)
                + (f"_seed{args.seed}" if args.seed != 0 else ""))
        (out / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
        (out / f"{stem}.md").write_text(text)


if __name__ == "__main__":
    main()
