"""Scaling and convergence of one multipole attention layer, beside Galerkin and dense softmax attention.

For 2-D grids of ``sizes`` (side n, N = n² cells; 64² to 1024² by default), one layer with 64 channels and
4 heads, batch 1, on ``device``: forward and forward+backward time (median of ``reps`` repeats after a warm-up;
one timed call when a call takes over 5 s) and peak memory. On the CPU each case runs in fresh subprocesses
(``python -m benchmarks.multipole_scaling --worker``; one for the forward passes under ``no_grad``, one for
forward+backward, with ``isolate``) and memory is the resident-set high-water mark of the subprocess above its
start; on CUDA one process serves every case and memory is the CUDA allocator's peak above the start. Methods:

* ``multipole``: :class:`~sciattn.multipole.MultipoleAttention` at its default (physical pyramid, tapered
  windows);
* ``multipole_cells8``: ``window=8`` cells (the input pyramid, resolution-dependent);
* ``multipole_fraction``: ``pyramid="input", window_fraction=1/8`` (level 0 windows of ``n/8`` cells);
* ``galerkin``: :class:`~sciattn.GalerkinAttention`; ``dense_sdpa``: global SDPA over all cells, only up to
  the side ``dense_max`` (its N² scores).

A case of a comparison method whose forward+backward time, extrapolated from the two previous sizes, exceeds
``max_seconds`` is not run (a row with ``status`` saying so); the default layer runs at every size.
Convergence (same run): one layer per multipole configuration, fixed seed, on a smooth 64-channel field sampled
at cell centres of each of ``convergence_sides`` and of ``convergence_reference``; the reference output is
averaged onto the coarse cells and ``e_n = ||y_n - R_n y_ref|| / ||R_n y_ref||`` is the row's
``convergence_error``. The notes fit exponents of time and memory against N (least squares in log-log over the
sizes each method ran at), check the claim (time and memory exponents ≤ 1.15 for the default layer) and give
dense SDPA's time over each multipole configuration's.

    python -m benchmarks run multipole_scaling [--quick]
    python -m benchmarks run multipole_scaling --set methods='["multipole"]' --set merge=true  # rerun one, keep the rest
    python -m benchmarks run multipole_scaling --set device=cuda --set dense_max=512             # on a GPU
    python -m benchmarks run multipole_scaling --set device=cuda --set from_log='"gpu_run.log"'  # rows from a log

Every measured row is printed as one JSON line (after a ``{"log_meta": ...}`` header line naming the device),
so a run stopped by a time limit can still be recorded: ``from_log`` (a path) makes the rows from such a log
(:func:`rows_from_log`) instead of measuring; their ``measured_in`` names the log and the device it names.
``merge`` copies the rows of the methods not in ``methods`` from the latest full run on the same device in
``benchmarks/results/multipole_scaling.jsonl`` (whatever ``--out`` is; ``measured_in`` names that run).

On the CPU, glibc serves every allocation above 32 MiB with a fresh ``mmap`` whose pages fault in on first
touch; from 512² on, each ``(B, H, N, D)`` tensor of the layer crosses that line and the largest grids then time
the allocator as much as the attention. ``malloc_env`` (default: ``MALLOC_MMAP_THRESHOLD_=4294967296
MALLOC_TRIM_THRESHOLD_=8589934592``) is the environment of every CPU worker alike; the notes state it.

Rows (one per method and grid) are appended to ``benchmarks/results/multipole_scaling.jsonl``; the docs' tables
are generated from the latest run of each device.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ._timing import MALLOC_VARIABLES, malloc_note
from .harness import RESULTS, latest_run, module_benchmarks, read_rows, results_path

ROOT = Path(__file__).resolve().parents[1]

METHODS = ("multipole", "multipole_sdpa", "multipole_flex", "multipole_cells8", "multipole_fraction", "galerkin",
           "spectral_conv", "dense_sdpa")
MULTIPOLE = {"multipole": {}, "multipole_sdpa": {}, "multipole_flex": {"backend": "flex"}, "multipole_cells8": {"window": 8},
             "multipole_fraction": {"pyramid": "input", "window_fraction": 0.125}}
LABELS = {"multipole": "multipole, default (physical pyramid, tapered windows)",
          "multipole_sdpa": "multipole, default, SDPA path (fused CPU kernels off)",
          "multipole_flex": "multipole, default, flex attention (compiled on CUDA)",
          "multipole_cells8": "multipole, window=8 cells",
          "multipole_fraction": "multipole, pyramid='input', window_fraction=1/8", "galerkin": "Galerkin",
          "spectral_conv": "neuraloperator SpectralConv, 16 modes", "dense_sdpa": "dense SDPA"}
# the grid kernels issue's targets for the default layer, judged in the notes
TARGET_RATIO_GALERKIN, TARGET_RATIO_SPECTRAL, TARGET_MEMORY_RATIO, TARGET_FLOP_SHARE = 1.5, 4.0, 2.0, 0.25
CLAIM_MAX_EXPONENT = 1.15
CHANNELS, HEADS = 64, 4


def convergence(method: str, sides=(64, 128), reference: int = 256) -> dict[int, float]:
    """``{n: e_n}`` of one layer of the multipole configuration ``method`` (module docstring), float32."""
    import torch

    from sciattn.multipole import MultipoleAttention

    torch.manual_seed(0)
    c = CHANNELS
    layer = MultipoleAttention(c, HEADS, 2, **MULTIPOLE[method]).eval()
    gen = torch.Generator().manual_seed(1)
    kx, ky = torch.randint(-3, 4, (c,), generator=gen), torch.randint(-3, 4, (c,), generator=gen)
    phase = 2 * math.pi * torch.rand(c, generator=gen)

    def field(n):
        t = (torch.arange(n) + 0.5) / n
        x, y = torch.meshgrid(t, t, indexing="ij")
        return torch.sin(2 * math.pi * (kx[:, None, None] * x + ky[:, None, None] * y) + phase[:, None, None])[None]

    with torch.no_grad():
        ref = layer(field(reference))
        out = {}
        for n in sides:
            r = reference // n
            coarse = ref.reshape(1, c, n, r, n, r).mean((3, 5))
            out[n] = float((layer(field(n)) - coarse).norm() / coarse.norm())
    return out


def measure_case(method: str, n: int, device: str, reps: int, phase: str = "both") -> dict:
    """One layer on an n × n grid: median forward and forward+backward seconds and peak memory (MB, absolute).

    On CPU the peak is the resident set's high-water mark of this process (run each case in a fresh
    subprocess); on CUDA it is ``torch.cuda.max_memory_allocated``, with ``base_mb`` the allocation at the
    start, and times are synchronised."""
    import resource

    import torch

    cuda = device.startswith("cuda")
    torch.manual_seed(0)
    c, h = CHANNELS, HEADS
    x = torch.randn(1, c, n, n, device=device, requires_grad=True)
    if method in MULTIPOLE:
        from sciattn.multipole import MultipoleAttention

        if method == "multipole_sdpa":
            os.environ["SCIATTN_CPU_KERNELS"] = "0"  # the worker's process only: the previous (SDPA) path
        layer = MultipoleAttention(c, h, 2, **MULTIPOLE[method]).to(device)
        run = lambda: layer(x)  # noqa: E731
    elif method == "spectral_conv":
        from neuralop.layers.spectral_convolution import SpectralConv

        layer = SpectralConv(c, c, (16, 16)).to(device)
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
        sync()
        t0 = time.perf_counter()
        fn()  # warm-up; a slow call is itself the measurement
        sync()
        first = time.perf_counter() - t0
        if first > 5.0:
            return first
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

    def peak_now():
        sync()
        return (torch.cuda.max_memory_allocated() / 2**20 if cuda
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)

    out = {"base_mb": base}
    if phase in ("both", "forward"):
        with torch.no_grad():
            out["forward_s"] = timed(run)
        out["peak_forward_mb"] = peak_now()
        if method in ("multipole", "multipole_sdpa"):
            out["useful_gflop"] = useful_gflop(layer, n)
        out["matmul_gflops"] = matmul_rate(device)
    if phase in ("both", "backward"):
        def fwd_bwd():
            run().float().square().mean().backward()

        out["forward_backward_s"] = timed(fwd_bwd)
        out["peak_forward_backward_mb"] = peak_now()
    os.environ.pop("SCIATTN_CPU_KERNELS", None) if method == "multipole_sdpa" else None
    return out


def useful_gflop(layer, n: int) -> float:
    """Useful floating-point work of one forward of the default layer on an ``n × n`` grid, in GFLOP: the four
    ``C × C`` projections at every cell (queries, local keys and values, output), the key and value projections of
    the pooled levels, and per query and head ``4 D`` per admissible key (scores and value sums) over every level's
    box (``c + 1`` cells per axis with tapered windows, the window on the global level) and the local window."""
    from sciattn.multipole.geometry import axis_geometry

    c, h, d = layer.dim, layer.n_heads, layer.head_dim
    keys = 0
    for m, win in layer.levels:  # interior queries: the box of every axis
        keys += math.prod(axis_geometry(n, ma, ca, layer.window_taper == "linear").length for ma, ca in zip(m, win))
    if layer.local_window is not None:
        keys += math.prod(min(w, n) for w in layer.local_window)
    pooled = sum(math.prod(m) for m, _ in layer.levels)
    flops = 2 * c * c * (4 * n * n + 2 * pooled) + n * n * h * keys * 4 * d
    return flops / 1e9


def matmul_rate(device: str) -> float:
    """fp32 GFLOP/s of a 2048³ matrix product on ``device`` (best of three), in the measuring process."""
    import torch

    a, b = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
    best = math.inf
    for _ in range(4):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * 2048 ** 3 / best / 1e9


def worker(spec: dict[str, Any]) -> dict:
    """One subprocess task: ``{"task": "case", "method", "n", "device", "reps", "phase", "threads"}`` or
    ``{"task": "convergence", "method", "sides", "reference", "threads"}``."""
    import torch

    torch.set_num_threads(int(spec["threads"]))
    if spec["task"] == "convergence":
        return {str(k): v for k, v in convergence(spec["method"], spec["sides"], spec["reference"]).items()}
    return measure_case(spec["method"], int(spec["n"]), spec["device"], int(spec["reps"]), spec["phase"])


def _subprocess(spec: dict, malloc_env: dict[str, str]) -> tuple[dict | None, str | None]:
    """``(result, None)`` of :func:`worker` in a fresh ``python -m benchmarks.multipole_scaling --worker``, or
    ``(None, why)`` when it fails."""
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_VARIABLES}
    env.update({str(k): str(v) for k, v in malloc_env.items()})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.multipole_scaling", "--worker", json.dumps(spec)],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"exit {proc.returncode}: {tail[0][:160]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


SCHEMA = {
    "method": "str", "side": "int", "N": "int", "forward_s": "float?", "forward_backward_s": "float?",
    "base_mb": "float?", "peak_forward_mb": "float?", "peak_forward_backward_mb": "float?",
    "convergence_error": "float?", "useful_gflop": "float?", "matmul_gflops": "float?", "status": "str?",
    "measured_in": "str?",
}
PARAMS: dict[str, Any] = {
    "device": "cpu", "sizes": [64, 128, 256, 512, 1024],
    "methods": [m for m in METHODS if m != "multipole_flex"],  # flex: the GPU path (CPU: eager, unfused)
    "dense_max": 128, "reps": 3,
    "threads": 1, "max_seconds": 60.0, "isolate": True, "convergence_sides": [64, 128], "convergence_reference": 256,
    "malloc_env": {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "8589934592"},
    "merge": False, "from_log": None,
}
QUICK = {"sizes": [16, 32], "methods": ["multipole", "multipole_sdpa", "galerkin", "spectral_conv", "dense_sdpa"],
         "dense_max": 32, "reps": 1, "convergence_sides": [16, 32], "convergence_reference": 64}


def _row(method: str, n: int, **values: Any) -> dict:
    row = {k: None for k in SCHEMA}
    row.update(method=method, side=n, N=n * n, **values)
    return row


def _check(p: dict) -> None:
    """A ValueError naming the first bad parameter."""
    if p["device"] not in ("cpu", "cuda"):
        raise ValueError(f"device: expected 'cpu' or 'cuda', got {p['device']!r}")
    if not isinstance(p["sizes"], list) or not p["sizes"] or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 4 and n % 4 == 0 for n in p["sizes"]):
        raise ValueError(f"sizes: expected a non-empty list of grid sides (multiples of 4), got {p['sizes']!r}")
    if not isinstance(p["methods"], list) or not p["methods"] or not set(p["methods"]) <= set(METHODS):
        raise ValueError(f"methods: expected a non-empty list of {list(METHODS)}, got {p['methods']!r}")
    for key in ("dense_max", "reps", "threads", "convergence_reference"):
        if not isinstance(p[key], int) or isinstance(p[key], bool) or p[key] < 1:
            raise ValueError(f"{key}: expected a positive integer, got {p[key]!r}")
    if not isinstance(p["max_seconds"], (int, float)) or isinstance(p["max_seconds"], bool) or p["max_seconds"] <= 0:
        raise ValueError(f"max_seconds: expected a positive number, got {p['max_seconds']!r}")
    ref, sides = p["convergence_reference"], p["convergence_sides"]
    if not isinstance(sides, list) or not all(isinstance(n, int) and 0 < n < ref and ref % n == 0 for n in sides):
        raise ValueError(f"convergence_sides: expected a list of sides that divide convergence_reference ({ref}), "
                         f"got {sides!r}")
    if not isinstance(p["malloc_env"], dict) or not set(p["malloc_env"]) <= set(MALLOC_VARIABLES):
        raise ValueError(f"malloc_env: expected a dict with keys among {list(MALLOC_VARIABLES)}, "
                         f"got {p['malloc_env']!r}")
    for key in ("isolate", "merge"):
        if not isinstance(p[key], bool):
            raise ValueError(f"{key}: expected true or false, got {p[key]!r}")
    if p["from_log"] is not None and not Path(p["from_log"]).is_file():
        raise ValueError(f"from_log: expected the path of a run's log, got {p['from_log']!r} (no such file)")


def rows_from_log(path: Path | str) -> list[dict]:
    """The rows a run printed to its log (one JSON line per measured case, ``{"method": ...}``; convergence lines
    ``{"convergence": METHOD, SIDE: e, ...}``), as rows of :data:`SCHEMA`; ``measured_in`` names the log and the
    device of its ``{"log_meta": ...}`` line when it has one. Logs of the earlier script (``peak_rss_mb``,
    ``base_rss_mb``) are read too."""
    path = Path(path)
    rows: dict[tuple[str, int], dict] = {}
    where = f"log {path.name}"
    for line in path.read_text().splitlines():
        if line.startswith('{"log_meta"'):
            m = json.loads(line)["log_meta"]
            where = f"log {path.name} ({', '.join(str(m[k]) for k in ('device_name', 'torch', 'date') if m.get(k))})"
        elif line.startswith('{"method"'):
            r = json.loads(line)
            if "peak_rss_mb" in r:  # the earlier script's field names
                r["peak_forward_backward_mb"], r["base_mb"] = r.pop("peak_rss_mb"), r.pop("base_rss_mb", None)
            rows[(r["method"], r["side"])] = _row(r["method"], r["side"], **{k: r.get(k) for k in SCHEMA
                                                                             if k not in ("method", "side", "N")})
        elif line.startswith('{"convergence"'):
            c = json.loads(line)
            for side, e in c.items():
                if side != "convergence":
                    key = (c["convergence"], int(side))
                    rows.setdefault(key, _row(*key, status="not timed (convergence only)"))["convergence_error"] = e
    if not rows:
        raise ValueError(f"from_log: expected lines starting with {{\"method\" in {path}, found none")
    out = sorted(rows.values(), key=lambda r: (METHODS.index(r["method"]) if r["method"] in METHODS else 99, r["side"]))
    for r in out:
        r["measured_in"] = r["measured_in"] or where
    return out


def _merge(p: dict, rows: list[dict], results: Path | str = RESULTS) -> list[dict]:
    """``rows`` with the rows of the methods not in ``p["methods"]`` copied from the latest full run on the same
    device (``measured_in`` names it), in :data:`METHODS` order."""
    path = results_path("multipole_scaling", results)
    if not path.is_file():
        return rows
    same = [r for r in read_rows(path) if r["params"].get("device") == p["device"]]
    prev = latest_run(same, full=True) if same else []
    kept = []
    for rec in prev:
        if rec["row"]["method"] not in p["methods"]:
            kept.append({**rec["row"], "measured_in": rec["row"]["measured_in"]
                         or f"run {rec['run_id']} of {rec['date']} (`{rec['command']}`)"})
    return sorted(kept + rows, key=lambda r: (METHODS.index(r["method"]), r["side"]))


def run(params: dict) -> list[dict]:
    """Time, memory and convergence rows of every method and size (module docstring)."""
    _check(params)
    p = params
    if p["from_log"] is not None:
        rows = rows_from_log(p["from_log"])
        return _merge(p, rows) if p["merge"] else rows
    import torch

    cuda = p["device"] == "cuda"
    if cuda and not torch.cuda.is_available():
        raise ValueError("device: expected 'cuda' with a CUDA device available, got 'cuda' on a machine without CUDA")
    import datetime
    import platform

    name = torch.cuda.get_device_name() if cuda else platform.processor() or platform.machine()
    print(json.dumps({"log_meta": {"device_name": name, "torch": torch.__version__,
                                   "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}}),
          flush=True)
    isolate = p["isolate"] and not cuda  # CUDA memory is measured by the allocator: one process serves every case
    rows: list[dict] = []
    for method in p["methods"]:
        done = []
        for n in p["sizes"]:
            if method == "dense_sdpa" and n > p["dense_max"]:
                continue
            if len(done) >= 2 and method != "multipole":  # the default runs at every size
                (n1, t1), (n2, t2) = done[-2:]
                guess = t2 * (n / n2) ** (2 * max(1.0, math.log(t2 / t1) / math.log(n2 / n1) / 2))
                if guess > p["max_seconds"]:
                    rows.append(_row(method, n, status=f"not run: about {guess:.0f} s forward+backward expected "
                                                       f"(max_seconds {p['max_seconds']:g})"))
                    print(json.dumps(rows[-1]), flush=True)
                    continue
            if not isolate:
                if not cuda:
                    torch.set_num_threads(p["threads"])
                result, failed = measure_case(method, n, p["device"], p["reps"]), []
            else:
                result, failed = {}, []
                for phase in ("forward", "backward"):  # separate processes: each peak is its own
                    spec = {"task": "case", "method": method, "n": n, "device": p["device"], "reps": p["reps"],
                            "phase": phase, "threads": p["threads"]}
                    got, why = _subprocess(spec, p["malloc_env"])
                    if got is None:  # e.g. killed for memory: recorded, the other phase still counts
                        failed.append(f"{phase} failed ({why})")
                        continue
                    result["base_mb"] = min(result.get("base_mb", math.inf), got.pop("base_mb"))
                    result.update(got)
            rows.append(_row(method, n, **result, status="; ".join(failed) or None))
            if rows[-1]["forward_backward_s"] is not None:
                done.append((n, rows[-1]["forward_backward_s"]))
            print(json.dumps(rows[-1]), flush=True)
    for method in (m for m in p["methods"] if m in MULTIPOLE and p["convergence_sides"]):
        spec = {"task": "convergence", "method": method, "sides": p["convergence_sides"],
                "reference": p["convergence_reference"], "threads": p["threads"]}
        if cuda:
            conv, why = {str(k): v for k, v in convergence(method, spec["sides"], spec["reference"]).items()}, None
        else:
            conv, why = _subprocess(spec, p["malloc_env"])
        print(json.dumps({"convergence": method, **(conv or {})}), flush=True)
        for side in p["convergence_sides"]:
            row = next((r for r in rows if r["method"] == method and r["side"] == side), None)
            if row is None:
                rows.append(row := _row(method, side, status="not timed (convergence only)"))
            if conv is None:
                row["status"] = "; ".join(filter(None, [row["status"], f"convergence failed ({why})"]))
            else:
                row["convergence_error"] = conv[str(side)]
    rows.sort(key=lambda r: (METHODS.index(r["method"]), r["side"]))
    return _merge(p, rows) if p["merge"] else rows


# ----------------------------------------------------------------------------------------------
# Tables


def fit_exponent(ns, values) -> float | None:
    """Least-squares slope of log(value) against log(N); None with fewer than two points."""
    if len(ns) < 2:
        return None
    xs, ys = [math.log(n) for n in ns], [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((a - mx) ** 2 for a in xs)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / den if den else None


def memory_above_start(row: dict, key: str = "peak_forward_backward_mb") -> float | None:
    """The peak ``key`` above the case's start, at least 1 MB (None when not measured)."""
    if row[key] is None:
        return None
    return max(row[key] - (row["base_mb"] or 0.0), 1.0)


def fits(rows: list[dict]) -> dict[str, dict]:
    """Per method with ≥ 2 timed sizes: exponents of forward and forward+backward time and memory against N."""
    out = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        rs = [r for r in rows if r["method"] == method and r["forward_s"] is not None]
        rb = [r for r in rs if r["forward_backward_s"] is not None]
        rm = [r for r in rs if r["peak_forward_mb"] is not None]
        rmb = [r for r in rb if r["peak_forward_backward_mb"] is not None]
        if len(rs) < 2:
            continue
        out[method] = {
            "time_forward": fit_exponent([r["N"] for r in rs], [r["forward_s"] for r in rs]),
            "time_forward_backward": fit_exponent([r["N"] for r in rb], [r["forward_backward_s"] for r in rb]),
            "memory_forward": fit_exponent([r["N"] for r in rm], [memory_above_start(r, "peak_forward_mb")
                                                                  for r in rm]),
            "memory_forward_backward": fit_exponent([r["N"] for r in rmb], [memory_above_start(r) for r in rmb]),
            "sides": [r["side"] for r in rs],
        }
    return out


def _fmt(x, spec=".2f", scale=1.0) -> str:
    return "–" if x is None else format(scale * x, spec)


def table(records: list[dict]) -> str:
    """One line per method and grid: times (ms), peak memory above the start (MB), the convergence error."""
    rows = [r["row"] for r in records]
    extra = any(r["status"] for r in rows), any(r["measured_in"] for r in rows)
    lines = ["| method | grid | forward (ms) | forward+backward (ms) | peak memory, forward (MB) | "
             "peak memory, forward+backward (MB) | e_n (vs the reference grid) |"
             + (" status |" if extra[0] else "") + (" measured in |" if extra[1] else ""),
             "|---|---|---|---|---|---|---|" + "---|" * sum(extra)]
    for r in rows:
        lines.append(f"| {LABELS.get(r['method'], r['method'])} | {r['side']}² | {_fmt(r['forward_s'], '.1f', 1e3)} | "
                     f"{_fmt(r['forward_backward_s'], '.1f', 1e3)} | "
                     f"{_fmt(memory_above_start(r, 'peak_forward_mb'), '.0f')} | {_fmt(memory_above_start(r), '.0f')} | "
                     f"{_fmt(r['convergence_error'], '.2%')} |" + (f" {r['status'] or ''} |" if extra[0] else "")
                     + (f" {r['measured_in'] or ''} |" if extra[1] else ""))
    return "\n".join(lines)


def notes(records: list[dict]) -> str:
    """How memory was measured, the fitted exponents, the claim's verdict and dense SDPA's time ratios."""
    p = records[0]["params"]
    rows = [r["row"] for r in records]
    cuda = p["device"] == "cuda"
    head = (f"One layer, {CHANNELS} channels, {HEADS} heads, batch 1, on {p['device']}. Memory: "
            + ("CUDA allocator peak above the start." if cuda else
               ("resident-set high-water mark of a fresh subprocess per case, above its start. " if p.get("isolate", True)
                else "resident-set high-water mark of the process, above the case's start (coarse). ")
               + malloc_note(p["malloc_env"] or {})))
    if any(r["convergence_error"] is not None for r in rows):
        head += (f" e_n: relative difference of one layer (same weights, smooth field) at n² to its "
                 f"{p.get('convergence_reference', 256)}² output averaged onto the n² cells.")
    lines = [head]
    fitted = fits(rows)
    if fitted:
        lines += ["", "Exponents: least-squares slope of log(time or memory above the start) against log(N) over the "
                  "sizes each method ran at.", "",
                  "| method | sizes | time exponent, forward | time exponent, forward+backward | "
                  "memory exponent, forward | memory exponent, forward+backward |", "|---|---|---|---|---|---|"]
        lines += [f"| {LABELS.get(m, m)} | {', '.join(f'{s}²' for s in f['sides'])} | {_fmt(f['time_forward'])} | "
                  f"{_fmt(f['time_forward_backward'])} | {_fmt(f['memory_forward'])} | "
                  f"{_fmt(f['memory_forward_backward'])} |" for m, f in fitted.items()]
    if "multipole" in fitted:
        f = fitted["multipole"]
        got = [v for k, v in f.items() if k != "sides" and v is not None]
        ok = bool(got) and max(got) <= CLAIM_MAX_EXPONENT
        lines += ["", f"Claim (time and memory exponents ≤ {CLAIM_MAX_EXPONENT} for the default layer): "
                  + ("met" if ok else "not met") + f" (largest {max(got):.2f})." if got else "no exponent."]
    dense = {r["side"]: r["forward_backward_s"] for r in rows if r["method"] == "dense_sdpa" and r["forward_backward_s"]}
    for m in (m for m in MULTIPOLE if any(r["method"] == m for r in rows)):
        mine = {r["side"]: r["forward_backward_s"] for r in rows if r["method"] == m and r["forward_backward_s"]}
        ratios = [(s, dense[s] / mine[s]) for s in sorted(dense) if s in mine]
        if ratios:
            lines += ["", f"Dense SDPA time / {LABELS[m]} time, forward+backward: "
                      + ", ".join(f"{s}²: {x:.1f}×" for s, x in ratios)]
    lines += target_lines(rows)
    return "\n".join(lines)


def target_lines(rows: list[dict]) -> list[str]:
    """The grid kernels issue's targets for the default layer, judged from the rows (same run, same machine)."""
    at = {(r["method"], r["side"]): r for r in rows}
    out = []

    def ratio(a, b, key):
        ra, rb = at.get((a, side)), at.get((b, side))
        return None if ra is None or rb is None or not ra[key] or not rb[key] else ra[key] / rb[key]

    for side in sorted({r["side"] for r in rows if r["method"] == "multipole"}):
        parts = []
        for other, label, target in (("galerkin", "Galerkin", TARGET_RATIO_GALERKIN),
                                     ("spectral_conv", "SpectralConv", TARGET_RATIO_SPECTRAL)):
            fw, fb = ratio("multipole", other, "forward_s"), ratio("multipole", other, "forward_backward_s")
            if fw is not None and fb is not None:
                ok = "met" if max(fw, fb) <= target else "not met"
                parts.append(f"/ {label} {fw:.2f}× forward, {fb:.2f}× forward+backward (≤ {target:g}×: {ok})")
        d, g = at.get(("multipole", side)), at.get(("galerkin", side))
        if d and g and d["peak_forward_backward_mb"] and g["peak_forward_backward_mb"]:
            mem = memory_above_start(d) / memory_above_start(g)
            parts.append(f"peak memory forward+backward / Galerkin {mem:.2f}× (≤ {TARGET_MEMORY_RATIO:g}×: "
                         + ("met" if mem <= TARGET_MEMORY_RATIO else "not met") + ")")
        if d and d.get("useful_gflop") and d["forward_s"] and d.get("matmul_gflops"):
            share = d["useful_gflop"] / d["forward_s"] / d["matmul_gflops"]
            parts.append(f"useful FLOPs {d['useful_gflop']:.2f} GFLOP at {d['useful_gflop'] / d['forward_s']:.1f} "
                         f"GFLOP/s = {share:.0%} of the same process's matmul rate ({d['matmul_gflops']:.0f} GFLOP/s; "
                         f"≥ {TARGET_FLOP_SHARE:.0%}: " + ("met" if share >= TARGET_FLOP_SHARE else "not met") + ")")
        sp, sb = ratio("multipole_sdpa", "multipole", "forward_s"), ratio("multipole_sdpa", "multipole",
                                                                          "forward_backward_s")
        if sp is not None and sb is not None:
            parts.append(f"fused kernels {sp:.2f}× faster than the SDPA path forward, {sb:.2f}× forward+backward")
        if parts:
            out.append(f"Default layer at {side}²: " + "; ".join(parts) + ".")
    return ([""] + out) if out else []


BENCHMARKS = module_benchmarks(globals(), plot=("N", "forward_backward_s", "method"), log_axes=(True, True),
    description="One attention layer (64 channels, 4 heads, batch 1) against grid size: multipole "
                "configurations, Galerkin and dense SDPA, time, peak memory and convergence;",
    claim="time and memory exponents ≤ 1.15 for the default multipole layer (docs/fidelity.md, "
          "docs/benchmarks/kernels.md)",
)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="One case or convergence measurement of multipole_scaling, run in its "
                                             "own subprocess by run() (the benchmark itself: python -m benchmarks run "
                                             "multipole_scaling)")
    ap.add_argument("--worker", required=True, help="the JSON spec of one task (see worker())")
    print(json.dumps(worker(json.loads(ap.parse_args().worker))), flush=True)
