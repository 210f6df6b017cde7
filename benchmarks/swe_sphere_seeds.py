"""The spherical-versus-planar neighbourhood comparison of ``swe_sphere.py`` over several seeds.

Each seed runs ``benchmarks/swe_sphere.py --variants neighborhood --no-sfno --seed S`` in its own
process (seed S draws the data and the initial weights; everything else is that script's
defaults) and writes under ``--work/seed_S``. This script then collects, per seed, the one-step
area-weighted relative L2 of the spherical and the planar neighbourhood transformers, the gain
``1 − spherical/planar``, and the rollout verdicts, and reports the mean and the spread of the
gain, so the 15% target is judged on more than one draw.

    python benchmarks/swe_sphere_seeds.py [--seeds 0 1 2] [--work /tmp/swe_seeds] [--name NAME] [swe_sphere options]

Options it does not know (e.g. ``--epochs 16``) go to every ``swe_sphere.py`` run. Writes
benchmarks/results/NAME.{json,md} (default ``swe_sphere_seeds``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--work", type=Path, default=Path("/tmp/swe_seeds"))
    ap.add_argument("--reuse", action="store_true", help="keep a seed's existing swe_sphere.json instead of rerunning")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--name", default="swe_sphere_seeds", help="stem of the results files")
    args, extra = ap.parse_known_args()
    t0 = time.perf_counter()
    rows = []
    for seed in args.seeds:
        out = args.work / f"seed_{seed}"
        if not (args.reuse and (out / "swe_sphere.json").is_file()):
            cmd = [sys.executable, str(ROOT / "benchmarks" / "swe_sphere.py"), "--variants", "neighborhood", "--no-sfno",
                   "--seed", str(seed), "--results", str(out), *extra]
            print(" ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        s = json.loads((out / "swe_sphere.json").read_text())
        sph, pla, t = s["results"]["spherical-nbhd"], s["results"]["planar-nbhd"], s["targets"]
        rows.append({"seed": seed, "spherical_one_step": sph["one_step"]["rel_l2"],
                     "planar_one_step": pla["one_step"]["rel_l2"], "gain": t["one_step_gain_vs_planar"],
                     "spherical_step10": sph["rollout"]["rel_l2_per_step"][-1],
                     "planar_step10": pla["rollout"]["rel_l2_per_step"][-1],
                     "spherical_no_blow_up": t.get("rollout_no_blow_up"),
                     "spherical_amplitude_step10": sph["rollout"]["amplitude_ratio_per_step"][-1],
                     "parameters": sph["parameters"], "equal_parameters": t["equal_parameters"],
                     "run_seconds": s.get("total_seconds"),
                     "spherical_per_var": sph["one_step"].get("rel_l2_per_var"),
                     "planar_per_var": pla["one_step"].get("rel_l2_per_var"),
                     "command": s["command"]})
        print(json.dumps(rows[-1]), flush=True)
    gains = [r["gain"] for r in rows]
    summary = {"benchmark": "swe_sphere_seeds", "date": datetime.date.today().isoformat(), "rows": rows,
               "gain_mean": statistics.mean(gains), "gain_std": statistics.stdev(gains) if len(gains) > 1 else None,
               "gain_min": min(gains), "target_met_by_mean": statistics.mean(gains) >= 0.15,
               "target_met_by_every_seed": min(gains) >= 0.15,
               "command": "python benchmarks/swe_sphere_seeds.py " + " ".join(sys.argv[1:]),
               "seconds": time.perf_counter() - t0}
    run_seconds = [r["run_seconds"] for r in rows if r.get("run_seconds") is not None]
    summary["run_seconds_total"] = sum(run_seconds) if len(run_seconds) == len(rows) else None
    spent = summary["run_seconds_total"] if summary["run_seconds_total"] is not None else summary["seconds"]
    lines = [f"Spherical vs planar neighbourhood transformer on shallow water, {len(rows)} seed"
             f"{'s' if len(rows) > 1 else ''}, {summary['date']}. "
             f"Command: `{summary['command']}` (each seed: `{rows[0]['command']}` with its own seed; "
             f"{spent / 60:.0f} min in all).", "",
             "| seed | parameters | spherical one-step L2 | planar one-step L2 | gain | spherical / planar L2 at step 10 "
             "| spherical: no blow-up (amplitude at step 10) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['parameters']:,} | {r['spherical_one_step']:.4f} | {r['planar_one_step']:.4f} | "
                     f"{100 * r['gain']:.1f}% | {r['spherical_step10']:.3f} / {r['planar_step10']:.3f} | "
                     f"{'yes' if r['spherical_no_blow_up'] else 'no'} ({r['spherical_amplitude_step10']:.2f}) |")
    per_var = [r for r in rows if r.get("spherical_per_var") and r.get("planar_per_var")]
    if per_var:
        names = list(per_var[0]["spherical_per_var"])
        lines += ["", "One-step rel. L2 per variable, spherical / planar:", "",
                  "| seed | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        lines += [f"| {r['seed']} | " + " | ".join(f"{r['spherical_per_var'][v]:.4f} / {r['planar_per_var'][v]:.4f}"
                                                  for v in names) + " |" for r in per_var]
    std = f" ± {100 * summary['gain_std']:.1f}" if summary["gain_std"] is not None else ""
    lines += ["", f"Gain, mean{' ± standard deviation' if std else ''} over seeds: {100 * summary['gain_mean']:.1f}%{std} "
              f"(smallest {100 * summary['gain_min']:.1f}%). Target (≥ 15%): "
              f"{'met' if summary['target_met_by_mean'] else 'not met'} by the mean, "
              f"{'met' if summary['target_met_by_every_seed'] else 'not met'} by every seed."]
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{args.name}.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.results / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
