"""The sphere operators across resolutions: convergence at initialisation, per-grid setup cost, and the
zero-shot resolution sweep of a trained spherical transformer, through the public API and the CLI.

1. Convergence (the protocol of ``tests/operators/test_sphere_convergence.py``): each sphere operator at its
   defaults, seed 0, float64, built once; a smooth input (low-degree spherical harmonics) on four nested grids;
   relative L2 of each coarser output against the finest at shared nodes (area-weighted on the sphere).
2. Setup: the first call of a model built at 33x64 on another grid builds that grid's geometry (neighbourhoods,
   quadrature, interpolation); the second call reuses it. Both timed (B = 1, 3 channels, default width).
3. Sweep: ``sciattn train examples/configs/shallow_water_spherical.toml`` (16 x 32), then
   ``sciattn evaluate RUN --resolutions 8 16 32 64``: the same band-limited shallow-water samples on every grid.

Usage::

    python benchmarks/sphere_resolution.py [--out benchmarks/runs/sphere_resolution] [--n-samples 32] [--skip-train]

Writes ``benchmarks/results/sphere_resolution.json`` (rows with date, hardware, versions, command) and the
table ``sphere_resolution.md`` that ``benchmarks/readme_tables.py`` copies into docs/fidelity.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "operators"))

from test_sphere_convergence import SPHERE_OPERATORS, _setup  # noqa: E402  (the test's protocol, not a copy)

from sciattn.operators import create_operator  # noqa: E402
from sciattn.train.checkpoint import atomic_write_bytes  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
CONFIG = ROOT / "examples" / "configs" / "shallow_water_spherical.toml"
SWEEP = (8, 16, 32, 64)


def convergence() -> list[dict]:
    rows = []
    for name in SPHERE_OPERATORS:
        for attention in ("neighborhood", "global"):
            build, grids, sample, shared, weights = _setup(name)
            torch.manual_seed(0)
            model = create_operator(name, in_channels=2, out_channels=1, nlat=build[0], nlon=build[1],
                                    attention=attention).double().eval()
            with torch.no_grad():
                outs = {n: model(sample(n)) for n in grids}
            ref = outs[grids[-1]]
            errors = {}
            for n in grids[:-1]:
                r, w = shared(ref, n), weights(n)
                errors[str(n)] = float((((outs[n] - r) ** 2 * w).sum() / (r ** 2 * w).sum()).sqrt())
            rows.append({"operator": name, "attention": attention, "default": attention == "neighborhood",
                         "built_at": list(build), "grids": grids, "rel_l2_vs_finest": errors})
    return rows


def setup_cost() -> list[dict]:
    torch.manual_seed(0)
    model = create_operator("spherical_transformer", in_channels=3, out_channels=3, nlat=33, nlon=64).eval()
    rows = []
    with torch.no_grad():
        model(torch.randn(1, 3, 33, 64))
        for n in (17, 65, 129, 257):
            x = torch.randn(1, 3, n, 2 * (n - 1))
            t0 = time.perf_counter()
            model(x)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            model(x)
            rows.append({"grid": [n, 2 * (n - 1)], "first_call_ms": 1e3 * first,
                         "cached_call_ms": 1e3 * (time.perf_counter() - t0)})
    return rows


def sweep(out: Path, n_samples: int) -> dict:
    from sciattn.train.cli import main as cli

    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    if cli(["train", str(CONFIG), "--out", str(out), "--no-progress", "--set", f'data.root="{out / "data"}"']) != 0:
        raise SystemExit("sciattn train failed")
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    if cli(["evaluate", str(out), "--resolutions", *map(str, SWEEP), "--n-samples", str(n_samples),
            "--root", str(out / "data"), "--no-progress"]) != 0:
        raise SystemExit("sciattn evaluate failed")
    report = json.loads((out / "eval" / "shallow_water.json").read_text())
    return {"train_seconds": train_s, "sweep_seconds": time.perf_counter() - t0, "n_samples": n_samples,
            "verdict": report["verdict"], "data_built": report["data_built"],
            "rows": [{k: row[k] for k in ("resolution", "regime", "in_distribution", "rel_l2", "rel_h1",
                                          "ratio_to_training", "ms_per_sample")} for row in report["rows"]]}


def markdown(result: dict) -> str:
    lines = [f"Command: `{result['command']}`; {result['date']}, {result['hardware']}, torch {result['torch']}, "
             f"{result['threads']} torch threads.", "",
             "At initialisation (defaults, seed 0), relative L2 against the finest grid at shared nodes:", "",
             "| operator | attention | built at | grids | error (coarse, mid, second-finest) | ratios |",
             "|---|---|---|---|---|---|"]
    for r in result["convergence"]:
        e = list(r["rel_l2_vs_finest"].values())
        ratios = ", ".join(f"{e[i + 1] / e[i]:.2f}" for i in range(len(e) - 1))
        lines.append(f"| {r['operator']} | {r['attention']}{' (default)' if r['default'] else ''} | "
                     f"{'x'.join(map(str, r['built_at']))} | {' / '.join(map(str, r['grids']))} | "
                     f"{' / '.join(f'{v:.2%}' for v in e)} | {ratios} |")
    lines += ["", "Per-grid setup of a spherical_transformer built at 33x64 (default width), B = 1:", "",
              "| grid | first call (ms, builds the geometry) | cached call (ms) |", "|---|---|---|"]
    lines += [f"| {'x'.join(map(str, r['grid']))} | {r['first_call_ms']:.0f} | {r['cached_call_ms']:.0f} |"
              for r in result["setup"]]
    if result.get("sweep"):
        s = result["sweep"]
        lines += ["", f"Zero-shot sweep of `{CONFIG.relative_to(ROOT)}` trained at nlat = 16 (16 x 32; train "
                  f"{s['train_seconds']:.0f} s), {s['n_samples']} fresh samples (seed {s['data_built']['seed']}), "
                  f"solved once at nlat = {s['data_built']['solve_resolution']} and transferred spectrally:", "",
                  "| nlat (grid nlat x 2 nlat) | regime | in distribution | relative L2 | relative H1 | "
                  "L2 / L2 at 16 |", "|---|---|---|---|---|---|"]
        for r in s["rows"]:
            ratio = "—" if r["ratio_to_training"] is None else f"{r['ratio_to_training']:.2f}"
            lines.append(f"| {r['resolution']} | {r['regime']} | {'yes' if r['in_distribution'] else 'NO'} | "
                         f"{r['rel_l2']:.4f} | {r['rel_h1']:.4f} | {ratio} |")
        lines += ["", f"Verdict: {s['verdict']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "runs" / "sphere_resolution")
    p.add_argument("--n-samples", type=int, default=32)
    p.add_argument("--skip-train", action="store_true", help="only the convergence and setup tables")
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    result = {"date": datetime.date.today().isoformat(),
              "hardware": f"{platform.machine()} {platform.processor() or ''}".strip(),
              "torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
              "command": "python benchmarks/sphere_resolution.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "convergence": convergence(), "setup": setup_cost(),
              "sweep": None if args.skip_train else sweep(args.out, args.n_samples)}
    args.results.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes((json.dumps(result, indent=2) + "\n").encode(), args.results / "sphere_resolution.json")
    atomic_write_bytes(markdown(result).encode(), args.results / "sphere_resolution.md")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
