"""Speed and memory of one spherical attention layer (global and geodesic-disc neighbourhood) on the CPU.

Cases: Legendre–Gauss grids 64×128 and 128×256, 64 and 128 channels, one head, batch 1, self-attention
with q/k/v/output projections (:class:`sciattn.spherical.SphericalAttention` and
:class:`~sciattn.spherical.SphericalNeighborhoodAttention` at the default cutoff, one latitude spacing,
plus the spherical transformer's cutoff ``(7/√π)·Δθ`` on 64×128). Each case runs in a fresh
subprocess: setup time (index construction), forward and forward+backward time (median of repeats after
a warm-up) and peak memory (growth of the process's maximum resident set size over the case).

When ``torch_harmonics`` imports, the same cases run with its ``AttentionS2`` / ``NeighborhoodAttentionS2``
(CPU kernel) as extra columns (its global layer only up to ``--th-global-max``); otherwise the script
prints "torch-harmonics not available". torch-harmonics 0.9.3 pins torch 2.14 but its wheel imports
and runs under torch 2.13 when installed with ``pip install --no-deps --target DIR`` and put on
``PYTHONPATH``.

A second table times both neighbourhood layers side by side in one process at 64×128 (64 and 128
channels, default cutoff): every round calls ours and torch-harmonics' layer once each, in
alternating order, so both see the same machine state; it reports the medians over ``--rounds``
and the median and quartiles of the per-round ratio (torch-harmonics time / ours). On a shared
machine that ratio is the number to read; the per-case medians above can drift between subprocesses.

    python benchmarks/spherical_attention.py [--threads 1] [--reps 2] [--sizes 64 128] [--rounds 41]

Writes benchmarks/results/spherical_attention.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASE = r"""
import json, math, resource, sys, time, torch
impl, kind, nlat, channels, theta, reps, threads = sys.argv[1:8]
nlat, channels, reps, threads = int(nlat), int(channels), int(reps), int(threads)
theta = None if theta == "default" else float(theta)
torch.set_num_threads(threads)
torch.manual_seed(0)
shape, grid = (nlat, 2 * nlat), "legendre-gauss"
t0 = time.perf_counter()
if impl == "sciattn":
    from sciattn.spherical import SphericalAttention, SphericalNeighborhoodAttention
    if kind == "global":
        layer = SphericalAttention(channels, 1, shape, grid_in=grid)
    else:
        layer = SphericalNeighborhoodAttention(channels, 1, shape, grid_in=grid, theta_cutoff=theta)
    nnz = layer.col_indices.numel() if kind != "global" else (shape[0] * shape[1]) ** 2
else:
    import torch_harmonics as th
    if kind == "global":
        layer = th.AttentionS2(channels, 1, shape, shape, grid_in=grid, grid_out=grid)
    else:
        layer = th.NeighborhoodAttentionS2(channels, shape, shape, grid_in=grid, grid_out=grid, num_heads=1,
                                           theta_cutoff=theta)
    nnz = layer.psi_col_idx.numel() * shape[1] if kind != "global" else (shape[0] * shape[1]) ** 2
setup = time.perf_counter() - t0
x = torch.randn(1, channels, *shape, requires_grad=True)
def timed(fn, n):
    out = []
    for _ in range(n):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return sorted(out)[len(out) // 2]
def fwd():
    with torch.no_grad():
        layer(x)
def fwd_bwd():
    layer(x).square().mean().backward()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter(); fwd(); first = time.perf_counter() - t
f = timed(fwd, reps) if first < 5 else first  # a slow case is timed once, warm-up included
peak_f = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter(); fwd_bwd(); first = time.perf_counter() - t
b = timed(fwd_bwd, reps) if first < 5 else first
peak_b = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"setup_s": setup, "forward_s": f, "forward_backward_s": b, "edges": nnz,
                  "peak_forward_mb": (peak_f - base) / 1024, "peak_forward_backward_mb": (peak_b - base) / 1024}))
"""


PAIR = r"""
import json, sys, time, torch
import torch_harmonics as th
from sciattn.spherical import SphericalNeighborhoodAttention
nlat, channels, rounds, threads = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(threads)
torch.manual_seed(0)
shape, grid = (nlat, 2 * nlat), "legendre-gauss"
layers = {"sciattn": SphericalNeighborhoodAttention(channels, 1, shape, grid_in=grid),
          "torch_harmonics": th.NeighborhoodAttentionS2(channels, shape, shape, grid_in=grid, grid_out=grid,
                                                        num_heads=1)}
x = torch.randn(1, channels, *shape, requires_grad=True)
def fwd(layer):
    with torch.no_grad():
        layer(x)
def fwd_bwd(layer):
    layer(x).square().mean().backward()
out = {}
for name, step in (("forward", fwd), ("forward_backward", fwd_bwd)):
    for layer in layers.values():
        step(layer)  # warm-up
    times = {k: [] for k in layers}
    for r in range(rounds):
        for k in (list(layers) if r % 2 == 0 else list(layers)[::-1]):
            t = time.perf_counter(); step(layers[k]); times[k].append(time.perf_counter() - t)
    ratio = sorted(a / b for a, b in zip(times["torch_harmonics"], times["sciattn"]))
    med = lambda v: sorted(v)[len(v) // 2]
    out[name] = {"sciattn_s": med(times["sciattn"]), "torch_harmonics_s": med(times["torch_harmonics"]),
                 "ratio_median": med(ratio), "ratio_q1": ratio[len(ratio) // 4], "ratio_q3": ratio[(3 * len(ratio)) // 4]}
print(json.dumps(out))
"""


def run_pair(nlat, channels, rounds, threads):
    args = [sys.executable, "-c", PAIR, str(nlat), str(channels), str(rounds), str(threads)]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pair_markdown(pairs, rounds):
    lines = ["", f"Side by side in one process, neighbourhood layers at the default cutoff, {rounds} rounds of "
             "alternating calls (ratio = torch-harmonics time / ours per round; > 1: ours is faster):", "",
             "| grid | C | pass | ours (ms) | th (ms) | ratio median | ratio quartiles |", "|---|---|---|---|---|---|---|"]
    for p in pairs:
        for name in ("forward", "forward_backward"):
            r = p["result"].get(name)
            if r is None:
                lines.append(f"| {p['grid']} | {p['channels']} | {name} | error: {p['result'].get('error')} |")
                continue
            lines.append(f"| {p['grid']} | {p['channels']} | {name.replace('_', '+')} | {1e3 * r['sciattn_s']:.1f} | "
                         f"{1e3 * r['torch_harmonics_s']:.1f} | {r['ratio_median']:.2f} | "
                         f"{r['ratio_q1']:.2f} – {r['ratio_q3']:.2f} |")
    return lines


def torch_harmonics_available() -> bool:
    probe = "import torch_harmonics as th; th.AttentionS2; th.NeighborhoodAttentionS2"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def run_case(impl, kind, nlat, channels, theta, reps, threads):
    args = [sys.executable, "-c", CASE, impl, kind, str(nlat), str(channels), theta, str(reps), str(threads)]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cases(sizes):
    for nlat in sizes:
        for channels in (64, 128):
            yield "global", nlat, channels, "default"
            yield "neighborhood", nlat, channels, "default"
            if nlat == 64:  # the spherical transformer's radius on its 64×128 internal grid
                theta = 7 / math.sqrt(math.pi) * float(_lg_spacing(nlat))
                yield "neighborhood", nlat, channels, f"{theta:.6f}"


def _lg_spacing(nlat):
    from sciattn.domain import SphereGrid
    from sciattn.spherical.neighborhoods import latitude_spacing

    return latitude_spacing(SphereGrid(nlat, 2 * nlat, "legendre-gauss"))


def _fmt(row, key, scale=1000.0, digits=1):
    value = row.get(key)
    return "—" if value is None else f"{value * scale:.{digits}f}"


def markdown(meta, rows, have_th, pairs=(), rounds=0):
    lines = [
        f"One spherical attention layer (1 head, batch 1, fp32, Legendre–Gauss grid, self-attention with "
        f"projections) on {meta['device']}, {meta['date']}, {meta['machine']}, {meta['threads']} torch thread(s), "
        f"torch {meta['torch']}, load average at start {meta['load_average']}. Command: `{meta['command']}`.",
        "",
        "| layer | grid | C | θ_c (rad) | edges | setup (s) | forward (ms) | forward+backward (ms) | peak MB fwd | "
        "peak MB fwd+bwd |" + (" th forward (ms) | th forward+backward (ms) | th peak MB fwd+bwd |" if have_th else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if have_th else ""),
    ]
    for r in rows:
        o, t = r["sciattn"], r.get("torch_harmonics", {})
        if "error" in o:
            lines.append(f"| {r['kind']} | {r['grid']} | {r['channels']} | {r['theta']} | error: {o['error']} |")
            continue
        line = (f"| {r['kind']} | {r['grid']} | {r['channels']} | {r['theta']} | {o['edges']:,} | "
                f"{o['setup_s']:.2f} | {_fmt(o, 'forward_s')} | {_fmt(o, 'forward_backward_s')} | "
                f"{o['peak_forward_mb']:.0f} | {o['peak_forward_backward_mb']:.0f} |")
        if have_th:
            peak = t.get("peak_forward_backward_mb")
            line += (f" {_fmt(t, 'forward_s')} | {_fmt(t, 'forward_backward_s')} | "
                     f"{'—' if peak is None else f'{peak:.0f}'} |")
        lines.append(line)
    if have_th:
        lines += ["", "th: torch-harmonics 0.9.3 (`AttentionS2`, `NeighborhoodAttentionS2` with its CPU kernel), same "
                  "weights shape, cutoff and grid; — = not run (time budget)."]
    else:
        lines += ["", "torch-harmonics not available: no comparison columns."]
    lines += ["", "Times: median of repeats after a warm-up; a case whose first call takes over 5 s is timed once, "
              "warm-up included. Peak MB: growth of the subprocess's maximum resident set size."]
    if pairs:
        lines += pair_markdown(pairs, rounds)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 128], help="nlat of the nlat × 2·nlat grids")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1 by default: on a shared 2-core machine two OpenMP threads mostly wait)")
    ap.add_argument("--no-torch-harmonics", action="store_true", help="skip the torch-harmonics columns")
    ap.add_argument("--th-global-max", type=int, default=64,
                    help="largest nlat for torch-harmonics' global layer (time budget: it costs as much as ours)")
    ap.add_argument("--rounds", type=int, default=41, help="rounds of the side-by-side table")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    have_th = not args.no_torch_harmonics and torch_harmonics_available()
    if not have_th:
        print("torch-harmonics not available")
    import torch

    meta = {
        "date": datetime.date.today().isoformat(), "machine": platform.machine(), "device": "cpu",
        "threads": args.threads, "torch": torch.__version__, "load_average": "%.1f, %.1f, %.1f" % os.getloadavg(),
        "command": "python benchmarks/spherical_attention.py " + " ".join(sys.argv[1:]),
        "torch_harmonics": have_th,
    }
    rows = []
    for kind, nlat, channels, theta in cases(args.sizes):
        row = {"kind": kind, "grid": f"{nlat}×{2 * nlat}", "channels": channels,
               "theta": "—" if kind == "global" else (f"{_lg_spacing(nlat):.5f}" if theta == "default" else theta)}
        row["sciattn"] = run_case("sciattn", kind, nlat, channels, theta, args.reps, args.threads)
        if have_th and (kind != "global" or nlat <= args.th_global_max):
            row["torch_harmonics"] = run_case("torch_harmonics", kind, nlat, channels, theta, args.reps, args.threads)
        print(json.dumps(row), flush=True)
        rows.append(row)
    pairs = []
    if have_th:
        for channels in (64, 128):
            pairs.append({"grid": "64×128", "channels": channels,
                          "result": run_pair(64, channels, args.rounds, args.threads)})
            print(json.dumps(pairs[-1]), flush=True)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "spherical_attention.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "side_by_side": pairs, "rounds": args.rounds}, indent=2))
    text = markdown(meta, rows, have_th, pairs, args.rounds)
    (args.results / "spherical_attention.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
