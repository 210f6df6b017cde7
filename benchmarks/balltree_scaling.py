"""Scaling of ball-tree construction and ball attention against dense attention, on CPU.

Three measurements, N = 2^10 .. 2^18 points by default (uniform in the unit cube, d = 3):

1. **Tree build**: :func:`sciattn.balltree.build_ball_tree` (tensor ops, batch of 4 clouds) against
   the C++/OpenMP ``balltree-erwin`` package (import ``balltree``) when it is installed, and against
   the recursive NumPy transcription :func:`sciattn.balltree.reference.ball_tree_numpy` (pure
   NumPy, no SciPy; one cloud at a time) up to ``--numpy-max``. The tree computes node centres
   and radii on first use; a second row times the build with them. balltree-erwin runs in
   torch's OpenMP runtime with ``--erwin-threads`` threads (default ``--threads``).
2. **Ball attention** (op ``"ball"``, automatic backend): one head group ``B=1, H=4, D=16`` with
   balls of ``--ball`` points, distance bias and key weights; forward and forward+backward time
   (best of ``--reps``) and peak memory (growth of the resident set, read from
   ``/proc/self/status`` after ``malloc_trim`` and a reset of its high-water mark through
   ``/proc/self/clear_refs``; Linux/glibc only, NaN elsewhere).
3. **Dense SDPA** on the same q, k, v (``F.scaled_dot_product_attention``, no mask) up to
   ``--dense-max`` points, in the same run.

Fitted exponents come from a least-squares line in log-log over the sizes each method ran at.

glibc serves every allocation above 32 MiB with a fresh ``mmap`` whose pages fault in on first
touch; from N = 2^17 each ``(B, H, N, D)`` tensor crosses that line, and element-wise work on
it then costs several times more per point. The committed run therefore sets
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` (recorded in the header), which keeps
such blocks on the reused heap for every method alike; without them the largest sizes time the
allocator, not the attention::

    MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=8589934592 \
        python benchmarks/balltree_scaling.py [--sizes 1024 ... 262144] [--threads 1]

Writes benchmarks/results/balltree_scaling.{json,md}.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _timing import malloc_note, malloc_settings

from sciattn.balltree import ball_attention, build_ball_tree
from sciattn.balltree.reference import ball_tree_numpy

ROOT = Path(__file__).resolve().parents[1]


def fit_exponent(ns, values):
    if len(ns) < 2:
        return float("nan")
    return float(np.polyfit(np.log(ns), np.log(values), 1)[0])


def best_time(fn, reps):
    """Fastest of ``reps`` runs: on a shared machine the minimum is the least disturbed estimate."""
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def _status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def _trim_heap():
    """Give freed heap pages back to the OS (glibc), so the resident set starts from live data only."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_memory_mb(fn):
    """Peak growth of the resident set while ``fn`` runs (MB), or NaN if the kernel cannot reset it."""
    gc.collect()
    _trim_heap()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return float("nan")
    base = _status_kb("VmRSS:")
    fn()
    return (_status_kb("VmHWM:") - base) / 1024


def _tree_rows(n, batch, ball, reps, numpy_max, balltree, erwin_threads):
    pos = torch.rand(batch, n, 3, generator=torch.Generator().manual_seed(n))
    build_ball_tree(pos, None, ball)
    rows = [{"method": "sciattn build_ball_tree (torch)", "n": n, "batch": batch,
             "seconds": best_time(lambda: build_ball_tree(pos, None, ball), reps)},
            {"method": "sciattn build_ball_tree + node centres/radii (torch)", "n": n, "batch": batch,
             "seconds": best_time(lambda: build_ball_tree(pos, None, ball).radii, reps)}]
    if balltree is not None:
        flat = pos.reshape(-1, 3).double()
        idx = torch.arange(batch).repeat_interleave(n)
        # balltree-erwin links libgomp.so.1, which resolves to torch's copy (torch is imported
        # first): its OpenMP pool is the one torch.set_num_threads sizes.
        torch_threads = torch.get_num_threads()
        torch.set_num_threads(erwin_threads)
        balltree.build_balltree(flat, idx)
        rows.append({"method": "balltree-erwin (C++/OpenMP)", "n": n, "batch": batch,
                     "seconds": best_time(lambda: balltree.build_balltree(flat, idx), reps)})
        torch.set_num_threads(torch_threads)
    if n <= numpy_max:
        clouds = [pos[b].numpy() for b in range(batch)]
        rows.append({"method": "NumPy recursive reference", "n": n, "batch": batch,
                     "seconds": best_time(lambda: [ball_tree_numpy(c, ball) for c in clouds], 1)})
    return rows


def bench_trees(sizes, reps, numpy_max, erwin_threads, batch=4, ball=64):
    try:
        import balltree
    except ImportError:
        balltree = None
    return [row for n in sizes for row in _tree_rows(n, batch, ball, reps, numpy_max, balltree, erwin_threads)]


def _attention_row(name, n, ball, reps, h=4, d=16):
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, h, n, d, generator=g) for _ in range(3))
    pos = torch.rand(1, n, 3, generator=g)
    w = torch.rand(1, n, generator=g) + 0.1
    sigma = torch.ones(h)
    if name == "ball attention":
        def op(q, k, v):
            return ball_attention(q, k, v, pos, ball, weights=w, sigma=sigma)
    else:
        op = F.scaled_dot_product_attention
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]

    def fwd():
        with torch.no_grad():
            op(q, k, v)

    def fwd_bwd():
        op(*leaves).square().mean().backward()

    fwd()
    fwd_bwd()
    return {"method": name, "n": n, "ball": ball if name == "ball attention" else None,
            "forward_s": best_time(fwd, reps), "forward_backward_s": best_time(fwd_bwd, reps),
            "peak_mb_forward": peak_memory_mb(fwd), "peak_mb_forward_backward": peak_memory_mb(fwd_bwd)}


def bench_attention(sizes, reps, dense_max, ball):
    rows = []
    for n in sizes:
        rows.append(_attention_row("ball attention", n, ball, reps))
        if n <= dense_max:
            rows.append(_attention_row("dense SDPA", n, ball, reps))
    return rows


def exponents(rows, key):
    out = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        sel = [r for r in rows if r["method"] == method and r.get(key) == r.get(key) and r.get(key, 0) > 0]
        out[method] = fit_exponent([r["n"] for r in sel], [r[key] for r in sel])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2**k for k in range(10, 19)])
    ap.add_argument("--ball", type=int, default=64)
    ap.add_argument("--dense-max", type=int, default=2**14, help="largest N for dense SDPA")
    ap.add_argument("--numpy-max", type=int, default=2**14, help="largest N for the NumPy tree reference")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--erwin-threads", type=int, default=None, help="OpenMP threads of balltree-erwin (default: --threads)")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    erwin_threads = args.threads if args.erwin_threads is None else args.erwin_threads
    start = time.perf_counter()
    trees = bench_trees(args.sizes, args.reps, args.numpy_max, erwin_threads)
    attn = bench_attention(args.sizes, args.reps, args.dense_max, args.ball)
    meta = {
        "date": datetime.date.today().isoformat(), "machine": platform.machine(), "torch": torch.__version__,
        "threads": args.threads, "erwin_threads": erwin_threads, "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "malloc_env": malloc_settings(),
        "command": "python benchmarks/balltree_scaling.py", "wall_s": round(time.perf_counter() - start, 1),
        "attention": "B=1, H=4, D=16, float32, key weights and distance bias; dense = F.scaled_dot_product_attention",
        "trees": "batch of 4 clouds, uniform in [0,1]^3, ball_size 64",
    }
    result = {
        "meta": meta, "tree_build": trees, "attention": attn,
        "exponents": {"tree_build_time": exponents(trees, "seconds"),
                      "attention_forward_time": exponents(attn, "forward_s"),
                      "attention_forward_backward_time": exponents(attn, "forward_backward_s"),
                      "attention_peak_memory_forward_backward": exponents(attn, "peak_mb_forward_backward")},
    }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "balltree_scaling.json").write_text(json.dumps(result, indent=2))
    lines = [
        f"CPU, {meta['date']}, {meta['machine']}, {meta['threads']} torch thread(s) on {meta['cpus']} shared cores "
        f"(load average {meta['load_average'][0]:.1f} at the end), torch {meta['torch']}. "
        f"Command: `{meta['command']}` ({meta['wall_s']} s). " + malloc_note(meta["malloc_env"]),
        "",
        f"Tree build ({meta['trees']}; best of repeats, seconds per batch; balltree-erwin with "
        f"{meta['erwin_threads']} OpenMP thread(s), torch with {meta['threads']}):",
        "",
        "| method | N per cloud | seconds |",
        "|---|---|---|",
    ]
    lines += [f"| {r['method']} | {r['n']} | {r['seconds']:.4f} |" for r in trees]
    lines += ["", f"Attention ({meta['attention']}; ball attention with balls of {args.ball}):", "",
              "| method | N | forward (ms) | fwd+bwd (ms) | peak MB fwd | peak MB fwd+bwd |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['n']} | {1e3 * r['forward_s']:.1f} | {1e3 * r['forward_backward_s']:.1f} | "
              f"{r['peak_mb_forward']:.0f} | {r['peak_mb_forward_backward']:.0f} |" for r in attn]
    lines += ["", "Fitted exponents (time or memory ∝ N^p, least squares in log-log):", "",
              "| quantity | method | p |", "|---|---|---|"]
    for quantity, per in result["exponents"].items():
        lines += [f"| {quantity} | {m} | {p:.2f} |" for m, p in per.items()]
    if math.isfinite(args.dense_max) and args.dense_max < max(args.sizes):
        lines += ["", f"Dense SDPA stops at N = {args.dense_max} to keep the run under 5 minutes."]
    (args.results / "balltree_scaling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
