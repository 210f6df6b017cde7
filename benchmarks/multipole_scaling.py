"""Scaling of one multipole attention layer against dense softmax attention and Galerkin attention.

For 2-D grids from 64² to 1024² (CPU by default), one layer with 64 channels and 4 heads, batch 1:
forward and forward+backward time (median of repeats) and peak memory (resident set size of a fresh
subprocess per case, so cases do not share allocations). Dense attention (ViT-style global SDPA over
all cells) runs only while its N² scores fit (`--dense-max`). Fitted exponents of time and memory
against N come from a least-squares line in log-log over the sizes each method ran at.

    python benchmarks/multipole_scaling.py [--sizes 64 128 256 512 1024] [--device cpu]

Writes benchmarks/results/multipole_scaling.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASE = r"""
import json, resource, sys, time, torch
method, n, device, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.manual_seed(0)
C, H = 64, 4
x = torch.randn(1, C, n, n, device=device, requires_grad=True)
if method == "multipole":
    from sciattn.multipole import MultipoleAttention
    layer = MultipoleAttention(C, H, 2, window=8).to(device)
    run = lambda: layer(x)
elif method == "galerkin":
    from sciattn import GalerkinAttention
    layer = GalerkinAttention(C, H).to(device)
    run = lambda: layer(x.flatten(2).transpose(1, 2))
else:
    qkv = torch.nn.Linear(C, 3 * C).to(device)
    def run():
        t = qkv(x.flatten(2).transpose(1, 2)).view(1, n * n, 3, H, C // H).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(t[0], t[1], t[2])
def timed(fn):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); out.append(time.perf_counter() - t0)
    return sorted(out)[len(out) // 2]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with torch.no_grad():
    run()
    fwd = timed(run)
def fwd_bwd():
    run().float().square().mean().backward()
fwd_bwd()
both = timed(fwd_bwd)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"forward_s": fwd, "forward_backward_s": both, "peak_rss_mb": peak / 1024, "base_rss_mb": base / 1024}))
"""


def fit_exponent(ns, values):
    xs, ys = [math.log(n) for n in ns], [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dense-max", type=int, default=128, help="largest side for dense attention")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    rows = []
    for method in ("multipole", "galerkin", "dense_sdpa"):
        for n in args.sizes:
            if method == "dense_sdpa" and n > args.dense_max:
                continue
            out = subprocess.run([sys.executable, "-c", CASE, method, str(n), args.device, str(args.reps)],
                                 capture_output=True, text=True, check=True)
            row = {"method": method, "side": n, "N": n * n, **json.loads(out.stdout.strip().splitlines()[-1])}
            rows.append(row)
            print(json.dumps(row), flush=True)
    fits = {}
    for method in ("multipole", "galerkin", "dense_sdpa"):
        rs = [r for r in rows if r["method"] == method]
        if len(rs) >= 2:
            ns = [r["N"] for r in rs]
            fits[method] = {
                "time_forward_backward": fit_exponent(ns, [r["forward_backward_s"] for r in rs]),
                "memory": fit_exponent(ns, [max(r["peak_rss_mb"] - r["base_rss_mb"], 1.0) for r in rs]),
            }
    import torch

    summary = {"benchmark": "multipole_scaling", "date": datetime.date.today().isoformat(), "device": args.device,
               "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads", "torch": torch.__version__,
               "layer": "64 channels, 4 heads, batch 1, multipole window 8 cells", "rows": rows,
               "fitted_exponents": fits}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "multipole_scaling.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [f"One attention layer, 64 channels, 4 heads, batch 1, {args.device}, {summary['date']}, "
             f"{summary['machine']}, torch {summary['torch']}. Command: `python benchmarks/multipole_scaling.py`.",
             "", "| method | grid | forward (ms) | forward+backward (ms) | peak memory above start (MB) |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['side']}² | {1e3 * r['forward_s']:.1f} | {1e3 * r['forward_backward_s']:.1f} | "
                     f"{r['peak_rss_mb'] - r['base_rss_mb']:.0f} |")
    lines += ["", "| method | fitted exponent of time | fitted exponent of memory |", "|---|---|---|"]
    lines += [f"| {m} | {f['time_forward_backward']:.2f} | {f['memory']:.2f} |" for m, f in fits.items()]
    (args.results / "multipole_scaling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
