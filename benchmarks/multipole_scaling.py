"""Scaling of one multipole attention layer against dense softmax attention and Galerkin attention.

For 2-D grids from 64² to 1024² (CPU by default), one layer with 64 channels and 4 heads, batch 1:
forward and forward+backward time (median of repeats) and peak memory (resident set size of a fresh
subprocess per case, so cases do not share allocations). Dense attention (ViT-style global SDPA over
all cells) runs only while its N² scores fit (`--dense-max`). Fitted exponents of time and memory
against N come from a least-squares line in log-log over the sizes each method ran at.

    python benchmarks/multipole_scaling.py [--sizes 64 128 256 512 1024] [--device cpu]

On the CPU, glibc serves every allocation above 32 MiB with a fresh ``mmap`` whose pages fault in
on first touch; from 512² on, each ``(B, H, N, D)`` tensor of the layer crosses that line and the
largest grids then time the allocator as much as the attention. The committed CPU run sets
``MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=8589934592`` for every method alike;
the header records the settings in force.

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

from _timing import malloc_note, malloc_settings

ROOT = Path(__file__).resolve().parents[1]


def measure_case(method: str, n: int, device: str, reps: int) -> dict:
    """One layer on an n × n grid: median forward and forward+backward seconds and peak memory.

    On CPU the peak is the resident set's high-water mark of this process (run each case in a fresh
    subprocess); on CUDA it is ``torch.cuda.max_memory_allocated`` above the allocation at the start,
    and times are synchronised."""
    import resource
    import time

    import torch

    cuda = device.startswith("cuda")
    torch.manual_seed(0)
    c, h = 64, 4
    x = torch.randn(1, c, n, n, device=device, requires_grad=True)
    if method == "multipole":
        from sciattn.multipole import MultipoleAttention

        layer = MultipoleAttention(c, h, 2, window=8).to(device)
        run = lambda: layer(x)  # noqa: E731
    elif method == "galerkin":
        from sciattn import GalerkinAttention

        layer = GalerkinAttention(c, h).to(device)
        run = lambda: layer(x.flatten(2).transpose(1, 2))  # noqa: E731
    else:
        qkv = torch.nn.Linear(c, 3 * c).to(device)

        def run():
            t = qkv(x.flatten(2).transpose(1, 2)).view(1, n * n, 3, h, c // h).permute(2, 0, 3, 1, 4)
            return torch.nn.functional.scaled_dot_product_attention(t[0], t[1], t[2])

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def timed(fn):
        out = []
        for _ in range(reps):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            out.append(time.perf_counter() - t0)
        return sorted(out)[len(out) // 2]

    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with torch.no_grad():
        run()
        fwd = timed(run)

    def fwd_bwd():
        run().float().square().mean().backward()

    fwd_bwd()
    both = timed(fwd_bwd)
    sync()
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"forward_s": fwd, "forward_backward_s": both, "peak_rss_mb": peak, "base_rss_mb": base}


CASE = """
import json, sys
sys.path.insert(0, {here!r})
from multipole_scaling import measure_case
print(json.dumps(measure_case(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))))
"""


def fit_exponent(ns, values):
    xs, ys = [math.log(n) for n in ns], [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dense-max", type=int, default=None, help="largest side for dense attention (128 cpu, 512 cuda)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--from-log", type=Path, default=None,
                    help="rebuild the results from the JSON rows a run printed (e.g. one stopped by a time limit)")
    ap.add_argument("--log-meta", nargs=3, metavar=("DATE", "MACHINE", "TORCH"), default=None,
                    help="with --from-log: date, device name and torch version of the logged run")
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    if args.dense_max is None:
        args.dense_max = 512 if cuda else 128
    if args.from_log is not None:
        rows = [json.loads(ln) for ln in args.from_log.read_text().splitlines() if ln.startswith('{"method"')]
        date, machine, torch_version = args.log_meta or (datetime.date.today().isoformat(), "unknown", "unknown")
        note = ("Rebuilt with `--from-log` from the rows printed by a run that stopped before its last case "
                "(cases not listed did not finish).")
        return report(rows, args, cuda, date, machine, torch_version, note)
    rows = []
    for method in ("multipole", "galerkin", "dense_sdpa"):
        for n in args.sizes:
            if method == "dense_sdpa" and n > args.dense_max:
                continue
            if cuda:  # device memory is measured by the allocator, so one process serves every case
                result = measure_case(method, n, args.device, args.reps)
            else:
                code = CASE.format(here=str(Path(__file__).resolve().parent))
                out = subprocess.run([sys.executable, "-c", code, method, str(n), args.device, str(args.reps)],
                                     capture_output=True, text=True, check=True)
                result = json.loads(out.stdout.strip().splitlines()[-1])
            row = {"method": method, "side": n, "N": n * n, **result}
            rows.append(row)
            print(json.dumps(row), flush=True)
    import torch

    machine = (torch.cuda.get_device_name() if cuda
               else f"{platform.machine()}, {torch.get_num_threads()} torch threads")
    report(rows, args, cuda, datetime.date.today().isoformat(), machine, torch.__version__, None)


def report(rows, args, cuda, date, machine, torch_version, note) -> None:
    """Fitted exponents, the dense/multipole time ratios and the JSON + Markdown results."""
    fits = {}
    for method in ("multipole", "galerkin", "dense_sdpa"):
        rs = [r for r in rows if r["method"] == method]
        if len(rs) >= 2:
            ns = [r["N"] for r in rs]
            fits[method] = {
                "time_forward_backward": fit_exponent(ns, [r["forward_backward_s"] for r in rs]),
                "memory": fit_exponent(ns, [max(r["peak_rss_mb"] - r["base_rss_mb"], 1.0) for r in rs]),
            }
    mp = {r["side"]: r for r in rows if r["method"] == "multipole"}
    speedups = {r["side"]: r["forward_backward_s"] / mp[r["side"]]["forward_backward_s"]
                for r in rows if r["method"] == "dense_sdpa" and r["side"] in mp}
    malloc = malloc_settings()
    summary = {"benchmark": "multipole_scaling", "date": date, "device": args.device, "malloc_env": malloc,
               "machine": machine, "torch": torch_version,
               "layer": "64 channels, 4 heads, batch 1, multipole window 8 cells", "rows": rows,
               "fitted_exponents": fits, "dense_over_multipole_forward_backward": speedups}
    if note:
        summary["note"] = note
    args.results.mkdir(parents=True, exist_ok=True)
    stem = "multipole_scaling_cuda" if cuda else "multipole_scaling"
    (args.results / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [f"One attention layer, 64 channels, 4 heads, batch 1, {args.device}, {summary['date']}, "
             f"{summary['machine']}, torch {summary['torch']}. Command: `python benchmarks/multipole_scaling.py"
             + (f" --device {args.device}`." if cuda else "`.") + (f" {note}" if note else "")
             + ("" if cuda else " " + malloc_note(malloc)),
             "", "| method | grid | forward (ms) | forward+backward (ms) | peak memory above start (MB"
             + (", CUDA allocator) |" if cuda else ", resident set) |"),
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['side']}² | {1e3 * r['forward_s']:.1f} | {1e3 * r['forward_backward_s']:.1f} | "
                     f"{r['peak_rss_mb'] - r['base_rss_mb']:.0f} |")
    lines += ["", "| method | fitted exponent of time | fitted exponent of memory |", "|---|---|---|"]
    lines += [f"| {m} | {f['time_forward_backward']:.2f} | {f['memory']:.2f} |" for m, f in fits.items()]
    if speedups:
        lines += ["", "Dense SDPA time / multipole time, forward+backward: "
                  + ", ".join(f"{side}²: {x:.1f}×" for side, x in sorted(speedups.items()))]
    (args.results / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
