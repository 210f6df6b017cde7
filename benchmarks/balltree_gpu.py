"""Ball trees and ball attention on a CUDA device: host-sync check, tree build, attention scaling.

Three measurements, in one run:

1. **No host sync.** Under ``torch.cuda.set_sync_debug_mode("error")`` (every call that would wait
   for the device raises), run :func:`sciattn.balltree.build_ball_tree` (with the rotated tree),
   a :class:`~sciattn.balltree.BallAttention` layer and a
   :class:`~sciattn.balltree.BallSparseAttention` layer forward on a padded batch of clouds of
   different sizes. Each is reported as ``no sync`` or with the error it raised.
2. **Tree build time** (batch of 4 clouds, uniform in the unit cube, d = 3, balls of 64) from
   2^12 to 2^20 points per cloud, CUDA-event medians.
3. **Attention scaling**: one :class:`BallAttention` and one :class:`BallSparseAttention` layer
   (128 channels, 8 heads, balls of 64, float32, batch 1, tree built inside the call) against dense
   ``F.scaled_dot_product_attention`` over all points on the same q, k, v (up to ``--dense-max``),
   forward and forward+backward time and peak allocated memory; fitted log-log exponents over
   N ≥ 2^14.

    python benchmarks/balltree_gpu.py [--sizes ...] [--dense-max 262144]

Writes benchmarks/results/balltree_gpu.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _timing import median_ms

from sciattn.balltree import BallAttention, BallSparseAttention, build_ball_tree

ROOT = Path(__file__).resolve().parents[1]
DEV = "cuda"  # --device cpu only tests this script (no sync check, no memory)


def cuda_ms(fn, reps):
    """Median milliseconds of ``fn()`` after one warm-up call (CUDA events; host clock on CPU)."""
    return median_ms(fn, reps, warmup=1, cuda=DEV == "cuda")


def peak_mb(fn):
    if DEV != "cuda":
        fn()
        return float("nan")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def fit(ns, vs):
    pts = [(n, v) for n, v in zip(ns, vs) if v and v > 0 and n >= 2**14]  # NaN fails v > 0
    if len(pts) < 2:
        return None
    return float(np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)[0])


def sync_check() -> dict:
    g = torch.Generator().manual_seed(0)
    sizes = [300, 4096, 17]  # one cloud smaller than a ball
    n = max(sizes)
    pos = torch.rand(3, n, 3, generator=g).to(DEV)
    mask = (torch.arange(n)[None] < torch.tensor(sizes)[:, None]).to(DEV)
    x = torch.randn(3, n, 64, generator=g).to(DEV)
    layers = {"BallAttention": BallAttention(64, 4, 3, 64).to(DEV),
              "BallSparseAttention": BallSparseAttention(64, 4, 3, 64).to(DEV)}
    cases = {"build_ball_tree (with rotated tree)": lambda: (build_ball_tree(pos, mask, 64),
                                                             build_ball_tree(pos, mask, 64, rotate=45.0))}
    for name, layer in layers.items():
        cases[f"{name} forward"] = lambda layer=layer: layer(x, pos, mask)
    out = {}
    for name, fn in cases.items():
        fn()  # first call outside the check: lazy initialisation (cuBLAS handles, ...) may sync once
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            fn()
            out[name] = "no sync"
        except RuntimeError as err:
            out[name] = f"synchronises: {str(err).splitlines()[0][:200]}"
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    return out


def tree_rows(sizes, reps):
    rows = []
    for n in sizes:
        pos = torch.rand(4, n, 3, generator=torch.Generator().manual_seed(n)).to(DEV)
        rows.append({"n": n, "batch": 4, "ms": cuda_ms(lambda pos=pos: build_ball_tree(pos, None, 64), reps)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def attention_rows(sizes, reps, dense_max, max_call_ms):
    """A method stops once its next size (sizes double) is predicted to take more than ``max_call_ms``
    per forward+backward call: the last time times the growth of its last doubling, clamped to
    [2, 4] (×4, the quadratic worst case, after a single size)."""
    rows, hist, stopped = [], {}, set()
    c, h = 128, 8
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        pos = torch.rand(1, n, 3, generator=g).to(DEV)
        x = torch.randn(1, n, c, generator=g).to(DEV).requires_grad_()
        methods = {"ball attention": BallAttention(c, h, 3, 64).to(DEV),
                   "ball sparse attention (BSA)": BallSparseAttention(c, h, 3, 64).to(DEV)}
        if n <= dense_max:
            qkv = torch.nn.Linear(c, 3 * c).to(DEV)

            def dense(x, pos, qkv=qkv):
                t = qkv(x).view(1, -1, 3, h, c // h).permute(2, 0, 3, 1, 4)
                return F.scaled_dot_product_attention(t[0], t[1], t[2]).transpose(1, 2).reshape(1, -1, c)

            methods["dense SDPA"] = dense
        for name, layer in methods.items():
            h_ = hist.get(name, [])
            growth = min(max(h_[-1] / h_[-2], 2.0), 4.0) if len(h_) >= 2 else 4.0
            if name in stopped or (h_ and h_[-1] * growth > max_call_ms):
                if name not in stopped:
                    rows.append({"method": name, "n": n, "error": f"not run: predicted > {max_call_ms:.0f} ms per call"})
                    stopped.add(name)
                continue
            def fwd(layer=layer, x=x, pos=pos):
                with torch.no_grad():
                    layer(x, pos)

            def fwd_bwd(layer=layer, x=x, pos=pos):
                layer(x, pos).square().mean().backward()

            try:
                row = {"method": name, "n": n, "forward_ms": cuda_ms(fwd, reps), "forward_backward_ms": cuda_ms(fwd_bwd, reps),
                       "peak_mb_forward": peak_mb(fwd), "peak_mb_forward_backward": peak_mb(fwd_bwd)}
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                row = {"method": name, "n": n, "error": "out of memory"}
            rows.append(row)
            print(json.dumps(row), flush=True)
            hist.setdefault(name, []).append(row.get("forward_backward_ms", math.inf))
    return rows


def _num(v) -> str:
    return "–" if v is None else f"{v:.2f}"


def write(results: Path, s: dict) -> None:
    results.mkdir(parents=True, exist_ok=True)
    (results / "balltree_gpu.json").write_text(json.dumps(s, indent=2) + "\n")
    lines = [f"{s['device']}, {s['date']}, torch {s['torch']}. Command: `{s['command']}`. CUDA-event medians; "
             "memory is the peak allocated above the start of the call.", "",
             "Host synchronisation under `torch.cuda.set_sync_debug_mode(\"error\")` (3 padded clouds of 300, 4096 "
             "and 17 points):", "", "| call | result |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in s.get("sync_check", {}).items()]
    lines += ["", "Tree build, batch of 4 clouds, balls of 64:", "", "| N per cloud | ms |", "|---|---:|"]
    lines += [f"| 2^{int(math.log2(r['n']))} | {r['ms']:.3f} |" for r in s.get("tree", [])]
    if s.get("tree_exponent") is not None:
        lines += ["", f"Fitted exponent of tree-build time over N ≥ 2^14: {s['tree_exponent']:.2f}"]
    lines += ["", "Attention layer, 128 channels, 8 heads, balls of 64, float32, batch 1 (tree built inside the call):", "",
              "| method | N | forward (ms) | fwd+bwd (ms) | peak fwd (MB) | peak fwd+bwd (MB) |", "|---|---|---:|---:|---:|---:|"]
    for r in s.get("attention", []):
        if "error" in r:
            lines.append(f"| {r['method']} | 2^{int(math.log2(r['n']))} | {r['error']} | | | |")
        else:
            lines.append(f"| {r['method']} | 2^{int(math.log2(r['n']))} | {r['forward_ms']:.2f} | {r['forward_backward_ms']:.2f} | "
                         f"{r['peak_mb_forward']:.0f} | {r['peak_mb_forward_backward']:.0f} |")
    lines += ["", "| method | exponent of fwd+bwd time | exponent of fwd+bwd memory |", "|---|---:|---:|"]
    for m, e in s.get("attention_exponents", {}).items():
        lines.append(f"| {m} | {_num(e['time'])} | {_num(e['memory'])} |")
    (results / "balltree_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2**k for k in range(12, 21)])
    ap.add_argument("--dense-max", type=int, default=2**18)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--max-call-ms", type=float, default=1500.0, help="stop a method predicted slower per call")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu only tests this script")
    args = ap.parse_args()
    global DEV
    DEV = args.device
    if DEV == "cuda" and not torch.cuda.is_available():
        raise SystemExit("balltree_gpu.py --device cuda: expected a CUDA device, found none")
    s = {"benchmark": "balltree_gpu", "date": datetime.date.today().isoformat(),
         "device": torch.cuda.get_device_name() if DEV == "cuda" else "CPU (script test only)",
         "torch": torch.__version__, "command": "python benchmarks/balltree_gpu.py " + " ".join(sys.argv[1:])}
    s["sync_check"] = sync_check() if DEV == "cuda" else {}
    write(args.results, s)
    s["tree"] = tree_rows(args.sizes, args.reps)
    s["tree_exponent"] = fit([r["n"] for r in s["tree"]], [r["ms"] for r in s["tree"]])
    write(args.results, s)
    s["attention"] = []
    s["attention"] = attention_rows(args.sizes, args.reps, args.dense_max, args.max_call_ms)
    ok = [r for r in s["attention"] if "error" not in r]
    s["attention_exponents"] = {
        m: {"time": fit([r["n"] for r in ok if r["method"] == m], [r["forward_backward_ms"] for r in ok if r["method"] == m]),
            "memory": fit([r["n"] for r in ok if r["method"] == m],
                          [r["peak_mb_forward_backward"] for r in ok if r["method"] == m])}
        for m in dict.fromkeys(r["method"] for r in ok)}
    write(args.results, s)


if __name__ == "__main__":
    main()
