"""Ball trees and ball attention on a CUDA device: host-sync check, tree build, attention scaling.

Three measurements, in one run:

1. **No host sync** (``part`` ``sync_check``). Under ``torch.cuda.set_sync_debug_mode("error")`` (every call
   that would wait for the device raises), run :func:`sciattn.balltree.build_ball_tree` (with the rotated
   tree), a :class:`~sciattn.balltree.BallAttention` layer and a :class:`~sciattn.balltree.BallSparseAttention`
   layer forward on a padded batch of 3 clouds of 300, 4096 and 17 points. Each is reported as ``no sync``
   or with the error it raised. CUDA only.
2. **Tree build time** (``tree``; batch of 4 clouds, uniform in the unit cube, d = 3, balls of 64) at each
   of ``sizes`` points per cloud, CUDA-event medians of ``reps`` calls.
3. **Attention scaling** (``attention``): one :class:`BallAttention` and one :class:`BallSparseAttention`
   layer (128 channels, 8 heads, balls of 64, float32, batch 1, tree built inside the call) against dense
   ``F.scaled_dot_product_attention`` over all points on the same q, k, v (up to ``dense_max`` points),
   forward and forward+backward time and peak allocated memory above the start of the call. A method
   stops once its next size is predicted to take more than ``max_call_ms`` per forward+backward call.

The notes fit the log-log exponents of tree-build time and of each method's forward+backward time and memory
over N ≥ 2^14, from the rows.

    python -m benchmarks run balltree_gpu [--quick] [--set device='"cuda"'] [--set sizes='[4096, 65536]']

``device: "cpu"`` (the ``--quick`` budget: 256 and 512 points, dense up to 256, one repetition) only tests the
benchmark: host-clock times, no sync check and no memory. Rows are appended to
``benchmarks/results/balltree_gpu.jsonl``.
"""

from __future__ import annotations

import json
import math

from .harness import module_benchmarks

SCHEMA = {"part": "str", "method": "str", "n": "int?", "batch": "int?", "ms": "float?", "forward_ms": "float?",
          "forward_backward_ms": "float?", "peak_mb_forward": "float?", "peak_mb_forward_backward": "float?",
          "result": "str?"}
PARAMS = {"device": "cuda", "sizes": [2**k for k in range(12, 21)], "dense_max": 2**18, "reps": 10,
          "max_call_ms": 1500.0}
QUICK = {"device": "cpu", "sizes": [256, 512], "dense_max": 256, "reps": 1}
FIT_MIN_N = 2**14
DEV = "cuda"  # set by run() from the device parameter


def cuda_ms(fn, reps):
    """Median milliseconds of ``fn()`` after one warm-up call (CUDA events; host clock on CPU)."""
    from ._timing import median_ms

    return median_ms(fn, reps, warmup=1, cuda=DEV == "cuda")


def peak_mb(fn):
    """Peak allocated MB above the start of ``fn()`` (CUDA); ``None`` on CPU (``fn`` still runs)."""
    import torch

    if DEV != "cuda":
        fn()
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def fit(ns, vs) -> float | None:
    """Least-squares slope of log v against log n over the points with n ≥ 2^14 and v > 0 (``None``: < 2)."""
    import numpy as np

    pts = [(n, v) for n, v in zip(ns, vs) if v is not None and v > 0 and n >= FIT_MIN_N]
    if len(pts) < 2:
        return None
    return float(np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)[0])


def sync_check() -> list[dict]:
    import torch

    from sciattn.balltree import BallAttention, BallSparseAttention, build_ball_tree

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
    out = []
    for name, fn in cases.items():
        fn()  # first call outside the check: lazy initialisation (cuBLAS handles, ...) may sync once
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            fn()
            result = "no sync"
        except RuntimeError as err:
            result = f"synchronises: {str(err).splitlines()[0][:200]}"
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        out.append(_row("sync_check", name, result=result))
    return out


def tree_rows(sizes, reps) -> list[dict]:
    import torch

    from sciattn.balltree import build_ball_tree

    rows = []
    for n in sizes:
        pos = torch.rand(4, n, 3, generator=torch.Generator().manual_seed(n)).to(DEV)
        rows.append(_row("tree", "build_ball_tree", n=n, batch=4,
                         ms=cuda_ms(lambda pos=pos: build_ball_tree(pos, None, 64), reps)))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def attention_rows(sizes, reps, dense_max, max_call_ms) -> list[dict]:
    """A method stops once its next size (sizes double) is predicted to take more than ``max_call_ms``
    per forward+backward call: the last time times the growth of its last doubling, clamped to
    [2, 4] (×4, the quadratic worst case, after a single size)."""
    import torch
    import torch.nn.functional as F

    from sciattn.balltree import BallAttention, BallSparseAttention

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
                    rows.append(_row("attention", name, n=n, batch=1,
                                     result=f"not run: predicted > {max_call_ms:.0f} ms per call"))
                    stopped.add(name)
                continue

            def fwd(layer=layer, x=x, pos=pos):
                with torch.no_grad():
                    layer(x, pos)

            def fwd_bwd(layer=layer, x=x, pos=pos):
                layer(x, pos).square().mean().backward()

            try:
                row = _row("attention", name, n=n, batch=1, forward_ms=cuda_ms(fwd, reps),
                           forward_backward_ms=cuda_ms(fwd_bwd, reps), peak_mb_forward=peak_mb(fwd),
                           peak_mb_forward_backward=peak_mb(fwd_bwd))
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                row = _row("attention", name, n=n, batch=1, result="out of memory")
            rows.append(row)
            print(json.dumps(row), flush=True)
            hist.setdefault(name, []).append(row["forward_backward_ms"] or math.inf)
    return rows


def _row(part: str, method: str, **fields) -> dict:
    row = dict.fromkeys(SCHEMA)
    row.update(part=part, method=method, **fields)
    return row


def _check_params(p: dict) -> None:
    if p["device"] not in ("cuda", "cpu"):
        raise ValueError(f"device: expected 'cuda' (or 'cpu', which only tests the benchmark), got {p['device']!r}")
    sizes = p["sizes"]
    if not (isinstance(sizes, list) and sizes and all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                                                      for n in sizes) and sizes == sorted(set(sizes))):
        raise ValueError(f"sizes: expected increasing positive integers (points per cloud), got {sizes!r}")
    for key in ("dense_max", "reps"):
        if not isinstance(p[key], int) or isinstance(p[key], bool) or p[key] < (0 if key == "dense_max" else 1):
            raise ValueError(f"{key}: expected a {'non-negative' if key == 'dense_max' else 'positive'} integer, "
                             f"got {p[key]!r}")
    if not isinstance(p["max_call_ms"], (int, float)) or isinstance(p["max_call_ms"], bool) or p["max_call_ms"] <= 0:
        raise ValueError(f"max_call_ms: expected a positive number of milliseconds, got {p['max_call_ms']!r}")
    import torch

    if p["device"] == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: expected 'cuda' with a CUDA device available, got 'cuda' on a machine without CUDA")


def run(params: dict) -> list[dict]:
    global DEV
    _check_params(params)
    DEV = params["device"]
    rows = sync_check() if DEV == "cuda" else []
    rows += tree_rows(params["sizes"], params["reps"])
    rows += attention_rows(params["sizes"], params["reps"], params["dense_max"], float(params["max_call_ms"]))
    return rows


# ----------------------------------------------------------------------------------------------
# Table and notes


def _pow2(n: int) -> str:
    k = math.log2(n)
    return f"2^{int(k)}" if k == int(k) else str(n)


def _v(v, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def exponents(records: list[dict]) -> dict[str, dict[str, float | None]]:
    """Fitted exponents over N ≥ 2^14: ``{"tree": {"time"}, METHOD: {"time", "memory"}}`` (forward+backward)."""
    rows = [r["row"] for r in records]
    tree = [r for r in rows if r["part"] == "tree"]
    out: dict[str, dict[str, float | None]] = {}
    if tree:
        out["tree build"] = {"time": fit([r["n"] for r in tree], [r["ms"] for r in tree])}
    ok = [r for r in rows if r["part"] == "attention" and r["forward_backward_ms"] is not None]
    for m in dict.fromkeys(r["method"] for r in ok):
        mine = [r for r in ok if r["method"] == m]
        out[m] = {"time": fit([r["n"] for r in mine], [r["forward_backward_ms"] for r in mine]),
                  "memory": fit([r["n"] for r in mine], [r["peak_mb_forward_backward"] for r in mine])}
    return out


def table(records: list[dict]) -> str:
    rows = [r["row"] for r in records]
    out = []
    sync = [r for r in rows if r["part"] == "sync_check"]
    if sync:
        out += ["Host synchronisation under `torch.cuda.set_sync_debug_mode(\"error\")` (3 padded clouds of 300, 4096 "
                "and 17 points):", "", "| call | result |", "|---|---|"]
        out += [f"| {r['method']} | {r['result']} |" for r in sync] + [""]
    tree = [r for r in rows if r["part"] == "tree"]
    if tree:
        out += [f"Tree build, batch of {tree[0]['batch']} clouds, balls of 64:", "", "| N per cloud | ms |",
                "|---|---:|"]
        out += [f"| {_pow2(r['n'])} | {r['ms']:.3f} |" for r in tree] + [""]
    att = [r for r in rows if r["part"] == "attention"]
    if att:
        out += ["Attention layer, 128 channels, 8 heads, balls of 64, float32, batch 1 (tree built inside the call):",
                "", "| method | N | forward (ms) | fwd+bwd (ms) | peak fwd (MB) | peak fwd+bwd (MB) |",
                "|---|---|---:|---:|---:|---:|"]
        for r in att:
            if r["result"]:
                out.append(f"| {r['method']} | {_pow2(r['n'])} | {r['result']} | | | |")
            else:
                out.append(f"| {r['method']} | {_pow2(r['n'])} | {r['forward_ms']:.2f} | {r['forward_backward_ms']:.2f} "
                           f"| {_v(r['peak_mb_forward'], '.0f')} | {_v(r['peak_mb_forward_backward'], '.0f')} |")
    return "\n".join(out).rstrip("\n")


def notes(records: list[dict]) -> str:
    ex = exponents(records)
    lines = ["CUDA-event medians (host clock on CPU); memory is the peak allocated above the start of the call."]
    if ex:
        lines.append(f"Fitted log-log exponents over N ≥ 2^{int(math.log2(FIT_MIN_N))} (forward+backward; "
                     "— where fewer than two sizes):")
        lines.append("\n".join(["| what | exponent of time | exponent of memory |", "|---|---:|---:|"]
                               + [f"| {m} | {_v(e['time'], '.2f')} | {_v(e.get('memory'), '.2f')} |"
                                  for m, e in ex.items()]))
    return "\n\n".join(lines)


BENCHMARKS = module_benchmarks(globals(),
    description="Ball trees and ball attention on a CUDA device: host-sync check, tree build time, ball and "
                "ball sparse attention against dense SDPA;",
    claim="ball attention's forward+backward time and memory grow at most linearly in N on the GPU (fitted "
          "exponents), dense SDPA's time about quadratically (docs/benchmarks/gpu.md)",
)
