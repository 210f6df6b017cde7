"""Scaling of ball-tree construction and ball attention against dense attention, on CPU.

Three measurements, N = 2^10 .. 2^18 points by default (uniform in the unit cube, d = 3), one row per
part, method and N:

1. **Tree build** (``part="tree build"``): :func:`sciattn.balltree.build_ball_tree` (tensor ops, a batch of
   ``batch`` clouds, balls of ``ball``) against the C++/OpenMP ``balltree-erwin`` package (import
   ``balltree``) when it is installed, and against the recursive NumPy transcription
   :func:`sciattn.balltree.reference.ball_tree_numpy` (pure NumPy, no SciPy; one cloud at a time) up to
   ``numpy_max`` points. The tree computes node centres and radii on first use; a second row times the
   build with them. balltree-erwin runs in torch's OpenMP runtime with ``erwin_threads`` threads (default
   ``threads``). Field ``seconds``: best of ``reps``, per batch.
2. **Ball attention** (``part="attention"``, op ``"ball"``, automatic backend): one head group
   ``B=1, H=4, D=16`` with balls of ``ball`` points, distance bias and key weights; forward and
   forward+backward time (best of ``reps``, seconds) and peak memory (growth of the resident set in MB, read
   from ``/proc/self/status`` after ``malloc_trim`` and a reset of its high-water mark through
   ``/proc/self/clear_refs``; Linux/glibc only, ``None`` elsewhere).
3. **Dense SDPA** on the same q, k, v (``F.scaled_dot_product_attention``, no mask) up to ``dense_max``
   points, in the same run.

The exponents (time or memory ∝ N^p, a least-squares line in log-log over the sizes each method ran at)
are fitted from the rows in the table's notes (:func:`exponents`).

glibc serves every allocation above 32 MiB with a fresh ``mmap`` whose pages fault in on first touch; from
N = 2^17 each ``(B, H, N, D)`` tensor crosses that line, and element-wise work on it then costs several
times more per point. The committed run therefore sets ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` (each row records them in ``malloc``), which keeps such blocks on the reused heap
for every method alike; without them the largest sizes time the allocator, not the attention::

    MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=8589934592 \\
        python -m benchmarks run balltree_scaling [--quick] [--set sizes='[1024, 4096]'] [--set threads=1]
"""

from __future__ import annotations

import ctypes
import gc

from ._timing import best_time
from .harness import int_param, module_benchmarks

PARTS = ("tree build", "attention")
HEADS, HEAD_DIM = 4, 16


def fit_exponent(ns, values) -> float | None:
    """Slope of ``log(values)`` against ``log(ns)`` (least squares); ``None`` with fewer than two sizes."""
    import numpy as np

    if len(ns) < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(values), 1)[0])


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


def peak_memory_mb(fn) -> float | None:
    """Peak growth of the resident set while ``fn`` runs (MB), or ``None`` if the kernel cannot reset it."""
    gc.collect()
    _trim_heap()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    base = _status_kb("VmRSS:")
    fn()
    return (_status_kb("VmHWM:") - base) / 1024


def _row(part, method, n, **fields) -> dict:
    from ._timing import malloc_settings  # (imports torch)

    row = {"part": part, "method": method, "n": n, "batch": None, "ball": None, "seconds": None, "forward_s": None,
           "forward_backward_s": None, "peak_mb_forward": None, "peak_mb_forward_backward": None,
           "malloc": malloc_settings()}
    row.update(fields)
    return row


def _tree_rows(n, batch, ball, reps, numpy_max, balltree, erwin_threads):
    import torch

    from sciattn.balltree import build_ball_tree
    from sciattn.balltree.reference import ball_tree_numpy

    pos = torch.rand(batch, n, 3, generator=torch.Generator().manual_seed(n))
    build_ball_tree(pos, None, ball)
    common = {"batch": batch, "ball": ball}
    rows = [_row("tree build", "sciattn build_ball_tree (torch)", n, **common,
                 seconds=best_time(lambda: build_ball_tree(pos, None, ball), reps)),
            _row("tree build", "sciattn build_ball_tree + node centres/radii (torch)", n, **common,
                 seconds=best_time(lambda: build_ball_tree(pos, None, ball).radii, reps))]
    if balltree is not None:
        flat = pos.reshape(-1, 3).double()
        idx = torch.arange(batch).repeat_interleave(n)
        # balltree-erwin links libgomp.so.1, which resolves to torch's copy (torch is imported
        # first): its OpenMP pool is the one torch.set_num_threads sizes.
        torch_threads = torch.get_num_threads()
        torch.set_num_threads(erwin_threads)
        try:
            balltree.build_balltree(flat, idx)
            rows.append(_row("tree build", "balltree-erwin (C++/OpenMP)", n, **common,
                             seconds=best_time(lambda: balltree.build_balltree(flat, idx), reps)))
        finally:
            torch.set_num_threads(torch_threads)
    if n <= numpy_max:
        clouds = [pos[b].numpy() for b in range(batch)]
        rows.append(_row("tree build", "NumPy recursive reference", n, **common,
                         seconds=best_time(lambda: [ball_tree_numpy(c, ball) for c in clouds], 1)))
    return rows


def _attention_row(name, n, ball, reps):
    import torch
    import torch.nn.functional as F

    from sciattn.balltree import ball_attention

    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, HEADS, n, HEAD_DIM, generator=g) for _ in range(3))
    pos = torch.rand(1, n, 3, generator=g)
    w = torch.rand(1, n, generator=g) + 0.1
    sigma = torch.ones(HEADS)
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
    return _row("attention", name, n, ball=ball if name == "ball attention" else None,
                forward_s=best_time(fwd, reps), forward_backward_s=best_time(fwd_bwd, reps),
                peak_mb_forward=peak_memory_mb(fwd), peak_mb_forward_backward=peak_memory_mb(fwd_bwd))


def check(params: dict) -> dict:
    """``params`` with its values checked (a ValueError names the parameter)."""
    sizes = params["sizes"]
    if (not isinstance(sizes, list) or not sizes
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in sizes)):
        raise ValueError(f"sizes: expected a non-empty list of point counts >= 2, got {sizes!r}")
    for key in ("ball", "batch", "reps", "threads"):
        int_param(params, key)
    for key in ("dense_max", "numpy_max"):
        int_param(params, key, 0)
    if params["erwin_threads"] is not None:
        int_param(params, "erwin_threads")
    parts = params["parts"]
    if not isinstance(parts, list) or not parts or any(p not in PARTS for p in parts):
        raise ValueError(f"parts: expected a non-empty list of {list(PARTS)}, got {parts!r}")
    return params


def run(params: dict) -> list[dict]:
    import torch

    p = check(params)
    torch.set_num_threads(p["threads"])
    erwin_threads = p["threads"] if p["erwin_threads"] is None else p["erwin_threads"]
    rows = []
    if "tree build" in p["parts"]:
        try:
            import balltree
        except ImportError:
            balltree = None
        for n in p["sizes"]:
            rows += _tree_rows(n, p["batch"], p["ball"], p["reps"], p["numpy_max"], balltree, erwin_threads)
            print(f"tree build N={n}: " + ", ".join(f"{r['method']} {r['seconds']:.4f} s" for r in rows
                                                    if r["n"] == n and r["part"] == "tree build"), flush=True)
    if "attention" in p["parts"]:
        for n in p["sizes"]:
            rows.append(_attention_row("ball attention", n, p["ball"], p["reps"]))
            if n <= p["dense_max"]:
                rows.append(_attention_row("dense SDPA", n, p["ball"], p["reps"]))
            print(f"attention N={n}: " + ", ".join(f"{r['method']} {1e3 * r['forward_backward_s']:.1f} ms fwd+bwd"
                                                   for r in rows if r["n"] == n and r["part"] == "attention"),
                  flush=True)
    return rows


# ---- table and notes, from the rows ------------------------------------------------------------------------------

QUANTITIES = (("tree_build_time", "tree build", "seconds"),
              ("attention_forward_time", "attention", "forward_s"),
              ("attention_forward_backward_time", "attention", "forward_backward_s"),
              ("attention_peak_memory_forward_backward", "attention", "peak_mb_forward_backward"))


def exponents(rows: list[dict]) -> dict[str, dict[str, float | None]]:
    """``{quantity: {method: p}}``: the fitted exponent of each quantity of :data:`QUANTITIES` per method,
    over the rows where it is a positive number."""
    out: dict[str, dict[str, float | None]] = {}
    for quantity, part, key in QUANTITIES:
        sel = [r for r in rows if r["part"] == part]
        if not sel:
            continue
        out[quantity] = {}
        for method in dict.fromkeys(r["method"] for r in sel):
            pts = [(r["n"], r[key]) for r in sel if r["method"] == method and r[key] is not None and r[key] > 0]
            out[quantity][method] = fit_exponent([n for n, _ in pts], [v for _, v in pts])
    return out


def _ms(v):
    return "—" if v is None else f"{1e3 * v:.1f}"


def _mb(v):
    return "—" if v is None else f"{v:.0f}"


def table(records: list[dict]) -> str:
    rows = [r["row"] for r in records]
    params = records[0]["params"]
    lines = []
    trees = [r for r in rows if r["part"] == "tree build"]
    if trees:
        erwin = params.get("erwin_threads") or params.get("threads")
        lines += [f"Tree build (batch of {trees[0]['batch']} clouds, uniform in [0,1]^3, ball_size {trees[0]['ball']}; "
                  f"best of repeats, seconds per batch; balltree-erwin with {erwin if erwin else '—'} OpenMP "
                  f"thread(s), torch with {params.get('threads') or '—'}):", "",
                  "| method | N per cloud | seconds |", "|---|---|---|"]
        lines += [f"| {r['method']} | {r['n']} | {r['seconds']:.4f} |" for r in trees]
    attn = [r for r in rows if r["part"] == "attention"]
    if attn:
        ball = next((r["ball"] for r in attn if r["ball"] is not None), params.get("ball"))
        lines += ["" if lines else None,
                  f"Attention (B=1, H={HEADS}, D={HEAD_DIM}, float32, key weights and distance bias; dense = "
                  f"F.scaled_dot_product_attention; ball attention with balls of {ball}):", "",
                  "| method | N | forward (ms) | fwd+bwd (ms) | peak MB fwd | peak MB fwd+bwd |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['n']} | {_ms(r['forward_s'])} | {_ms(r['forward_backward_s'])} | "
                  f"{_mb(r['peak_mb_forward'])} | {_mb(r['peak_mb_forward_backward'])} |" for r in attn]
    return "\n".join(x for x in lines if x is not None) + "\n"


def notes(records: list[dict]) -> str:
    from ._timing import malloc_note

    rows = [r["row"] for r in records]
    params = records[0]["params"]
    lines = ["Fitted exponents (time or memory ∝ N^p, least squares in log-log over the rows above):", "",
             "| quantity | method | p |", "|---|---|---|"]
    for quantity, per in exponents(rows).items():
        lines += [f"| {quantity} | {m} | {'—' if p is None else format(p, '.2f')} |" for m, p in per.items()]
    settings = {tuple(sorted(r["malloc"].items())) for r in rows}
    lines += ["", " ".join(malloc_note(dict(s)) for s in sorted(settings))]
    dense = [r["n"] for r in rows if r["method"] == "dense SDPA"]
    sizes = [r["n"] for r in rows if r["part"] == "attention"]
    if dense and max(dense) < max(sizes):
        lines[-1] += f" Dense SDPA stops at N = {params.get('dense_max') or max(dense)} (parameter `dense_max`)."
    return "\n".join(lines) + "\n"


SCHEMA = {"part": "str", "method": "str", "n": "int", "batch": "int?", "ball": "int?", "seconds": "float?",
          "forward_s": "float?", "forward_backward_s": "float?", "peak_mb_forward": "float?",
          "peak_mb_forward_backward": "float?", "malloc": "dict"}
PARAMS = {"sizes": [2**k for k in range(10, 19)], "ball": 64, "batch": 4, "dense_max": 2**14, "numpy_max": 2**14,
          "reps": 3, "threads": 1, "erwin_threads": None, "parts": list(PARTS)}
QUICK = {"sizes": [1024, 2048, 4096], "dense_max": 2048, "numpy_max": 2048, "reps": 2}

BENCHMARKS = module_benchmarks(globals(),
    description="Ball-tree build and ball attention against dense SDPA over N, on CPU;",
    claim="the tree build and CPU ball attention are linear in N (fitted exponent about 1, 2^10 to 2^18), "
          "dense attention quadratic; the torch build within 2× of balltree-erwin from 4,096 points per cloud (docs/benchmarks/point_clouds.md)",
)
