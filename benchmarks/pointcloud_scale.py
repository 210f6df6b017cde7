"""Every point-set operator at the sizes users have: forward time and peak resident memory up to 2^20 points,
forward+backward up to 2^18 (3-D uniform clouds, default widths, batch 1, fp32, one thread).

Operators (:data:`OPERATORS`): Transolver, LinearNO, GNOT, ONO, OFormer, the point-set Galerkin Transformer
(``regressor="pointwise"``, the only non-default argument: the default spectral regressor needs a grid), Erwin and
BSA and MSPT, each from the registry at its defaults with ``in_channels = out_channels = 1`` and ``spatial_dims = 3``. Input:
``x ~ N(0, 1)`` at ``pos ~ U[0, 1]³`` (fixed seed), no weights (uniform quadrature).

Each case (operator, N, phase) runs in a fresh subprocess (``python -m benchmarks.pointcloud_scale --worker``): the
forward pass under ``torch.no_grad`` in ``eval()`` mode, or one forward+backward of ``mean(out²)``. Its time is the
first call when that takes over 5 s, else the median of ``reps`` calls after it; its memory is the resident-set
high-water mark of the subprocess (``VmHWM`` of ``/proc/self/status``, absolute: the target is on the whole
process; not ``ru_maxrss``, which Linux carries over from the parent across ``exec``), with ``base_mb`` the mark
after building the model and the input. The parent watches the subprocess's resident set and kills it
above ``memory_limit_mb`` (default 16 GiB, the target; this also keeps a shared machine alive). A forward killed
so is run again with chunked evaluation (``sciattn.operators.point_parts.chunked_points``, ``chunk_points`` points
per chunk) where the operator supports it, and the row says so. A case whose time, extrapolated from the two
previous sizes, exceeds ``max_seconds`` is not run (a row with its ``status``), nor is a phase at the sizes above
one where it exceeded the memory limit (after the chunked retry, for the forward).

glibc's allocator runs at its defaults (``malloc_env`` empty): what a user's process does. Large tensors are then
fresh ``mmap`` pages, returned on free, so the high-water mark follows the live tensors; the time includes their
first-touch page faults. (With ``MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=8589934592``, as the
kernel benchmarks set, Transolver's forward at 2^20 points took 13.8 s instead of 25.8 s but peaked at 6.4 GB
instead of 2.8 GB: the heap keeps freed blocks resident.)

``operators`` selects which run; ``merge`` copies the rows of the others from the latest full run (the ball-tree
operators are rerun on their own, last). The notes give the verdict of the target: every operator's forward at
2^20 points within 16 GB peak RSS, time recorded.

``device="cuda"`` runs each case on the GPU (model and input moved there, the time between two
``torch.cuda.synchronize`` calls) and records, beside the resident set, the peak memory the caching allocator
handed out (``torch.cuda.max_memory_allocated``, the model and input included); a case that runs out of GPU memory
counts as over the memory limit (the forward is retried chunked). ``benchmarks/gpu_check.sh`` runs it at 2^20 and
2^22 points (``STEPS=pointcloud_scale``).

    python -m benchmarks run pointcloud_scale [--quick]
    python -m benchmarks run pointcloud_scale --set operators='["erwin", "bsa_transformer"]' --set merge=true
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
from .multipole_scaling import fit_exponent

ROOT = Path(__file__).resolve().parents[1]

OPERATORS = ("transolver", "linear_no", "gnot", "ono", "funcattn", "oformer", "galerkin_transformer", "erwin",
             "bsa_transformer", "mspt")
EXTRA = {"galerkin_transformer": {"regressor": "pointwise"}}
TARGET_N, TARGET_MB = 2 ** 20, 16 * 1024
DIMS = 3


def build(operator: str):
    """The operator at its defaults, 1 input and 1 output channel, 3-D (float32)."""
    from sciattn.operators import create_operator

    return create_operator(operator, in_channels=1, out_channels=1, spatial_dims=DIMS, **EXTRA.get(operator, {}))


def peak_rss_mb() -> float:
    """This process's resident-set high-water mark in MB (``VmHWM``; ``ru_maxrss`` where ``/proc`` is absent)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(operator: str, n: int, phase: str, reps: int, chunk_points: int | None = None,
            device: str = "cpu") -> dict:
    """One case in this process (run it in a fresh one for its memory): seconds, peak resident MB and, on CUDA,
    the peak allocated GPU MB."""
    import torch

    from sciattn.operators.point_parts import chunked_points

    torch.manual_seed(0)
    model = build(operator)
    gen = torch.Generator().manual_seed(1)
    pos = torch.rand(1, n, DIMS, generator=gen)
    x = torch.randn(1, n, 1, generator=gen)
    cuda = device == "cuda"
    if cuda:
        model, pos, x = model.to(device), pos.to(device), x.to(device)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    base = peak_rss_mb()

    if phase == "forward":
        model.eval()

        def call():
            with torch.no_grad(), chunked_points(model, chunk_points):
                model(x, pos=pos)
    else:
        def call():
            model.zero_grad(set_to_none=True)
            model(x, pos=pos).square().mean().backward()

    t0 = time.perf_counter()
    call()
    sync()
    times = [time.perf_counter() - t0]
    if times[0] <= 5.0:
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            call()
            sync()
            times.append(time.perf_counter() - t0)
    return {"seconds": sorted(times)[len(times) // 2], "peak_mb": peak_rss_mb(), "base_mb": base,
            "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else None,
            "parameters": sum(p.numel() for p in model.parameters())}


def worker(spec: dict[str, Any]) -> dict:
    """``{"operator", "n", "phase", "reps", "threads", "chunk_points", "device"}`` -> :func:`measure`'s dict."""
    import torch

    torch.set_num_threads(int(spec["threads"]))
    return measure(spec["operator"], int(spec["n"]), spec["phase"], int(spec["reps"]), spec.get("chunk_points"),
                   spec.get("device", "cpu"))


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def run_case(spec: dict, malloc_env: dict[str, str], memory_limit_mb: float) -> tuple[dict | None, str | None]:
    """``(result, None)`` of :func:`worker` in a fresh subprocess, or ``(None, why)``; ``why`` starts with
    ``"memory"`` when the subprocess was killed above ``memory_limit_mb`` resident."""
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_VARIABLES}
    env.update({str(k): str(v) for k, v in malloc_env.items()})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = str(spec["threads"])
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.pointcloud_scale", "--worker", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    high = 0.0
    while proc.poll() is None:
        high = max(high, _rss_mb(proc.pid))
        if high > memory_limit_mb:
            proc.kill()
            proc.communicate()
            return None, f"memory: killed at {high:.0f} MB resident (memory_limit_mb {memory_limit_mb:g})"
        time.sleep(0.05)
    out, err = proc.communicate()
    if proc.returncode != 0:
        tail = (err or out).strip().splitlines()[-1:] or ["no output"]
        if "OutOfMemoryError" in tail[0]:
            return None, f"memory: out of GPU memory ({tail[0][:160]})"
        return None, f"exit {proc.returncode}: {tail[0][:200]}"
    return json.loads(out.strip().splitlines()[-1]), None


SCHEMA = {
    "operator": "str", "N": "int", "forward_s": "float?", "peak_forward_mb": "float?", "forward_backward_s": "float?",
    "peak_forward_backward_mb": "float?", "base_mb": "float?", "chunk_points": "int?", "parameters": "int?",
    "status": "str?", "measured_in": "str?", "device": "str?", "peak_forward_gpu_mb": "float?",
    "peak_forward_backward_gpu_mb": "float?",
}
PARAMS: dict[str, Any] = {
    "operators": list(OPERATORS), "sizes": [2 ** 12, 2 ** 14, 2 ** 16, 2 ** 18, 2 ** 20], "backward_max": 2 ** 18,
    "reps": 3, "threads": 1, "max_seconds": 2400.0, "memory_limit_mb": float(TARGET_MB), "chunk_points": 2 ** 16,
    "malloc_env": {}, "merge": False, "device": "cpu",
}
QUICK = {"sizes": [256, 1024], "backward_max": 256, "reps": 1, "max_seconds": 120.0}


def _row(operator: str, n: int, **values: Any) -> dict:
    row = {k: None for k in SCHEMA}
    row.update(operator=operator, N=n, **values)
    return row


def _check(p: dict) -> None:
    """A ValueError naming the first bad parameter."""
    if not isinstance(p["operators"], list) or not p["operators"] or not set(p["operators"]) <= set(OPERATORS):
        raise ValueError(f"operators: expected a non-empty list of {list(OPERATORS)}, got {p['operators']!r}")
    if not isinstance(p["sizes"], list) or not p["sizes"] or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 16 for n in p["sizes"]):
        raise ValueError(f"sizes: expected a non-empty list of point counts >= 16, got {p['sizes']!r}")
    for key in ("backward_max", "reps", "threads", "chunk_points"):
        if not isinstance(p[key], int) or isinstance(p[key], bool) or p[key] < 1:
            raise ValueError(f"{key}: expected a positive integer, got {p[key]!r}")
    for key in ("max_seconds", "memory_limit_mb"):
        if not isinstance(p[key], (int, float)) or isinstance(p[key], bool) or p[key] <= 0:
            raise ValueError(f"{key}: expected a positive number, got {p[key]!r}")
    if not isinstance(p["malloc_env"], dict) or not set(p["malloc_env"]) <= set(MALLOC_VARIABLES):
        raise ValueError(f"malloc_env: expected a dict with keys among {list(MALLOC_VARIABLES)}, got {p['malloc_env']!r}")
    if not isinstance(p["merge"], bool):
        raise ValueError(f"merge: expected true or false, got {p['merge']!r}")
    if p["device"] not in ("cpu", "cuda"):
        raise ValueError(f"device: expected 'cpu' or 'cuda', got {p['device']!r}")
    if p["device"] == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("device: expected a machine with CUDA for 'cuda'; torch.cuda.is_available() is False here")
    if p["merge"] and p["device"] != "cpu":
        raise ValueError(f"merge: copies CPU rows, so it needs device 'cpu', got device {p['device']!r}")


def _guess(done: list[tuple[int, float]], n: int) -> float | None:
    """Seconds at ``n`` extrapolated from the last two measured sizes (at least linear in N)."""
    if len(done) < 2:
        return None
    (n1, t1), (n2, t2) = done[-2:]
    slope = max(1.0, math.log(max(t2, 1e-9) / max(t1, 1e-9)) / math.log(n2 / n1))
    return t2 * (n / n2) ** slope


def _supports_chunks(operator: str) -> bool:
    from sciattn.operators.registry import operator_class

    return bool(getattr(operator_class(operator), "supports_chunked_points", False))


def _forward(p: dict, operator: str, n: int, spec: dict) -> tuple[dict, list[str]]:
    got, why = run_case(spec, p["malloc_env"], p["memory_limit_mb"])
    if got is not None:
        return {"forward_s": got["seconds"], "peak_forward_mb": got["peak_mb"], "base_mb": got["base_mb"],
                "peak_forward_gpu_mb": got.get("peak_gpu_mb"), "parameters": got["parameters"]}, []
    notes = [f"forward failed ({why})"]
    if why.startswith("memory") and _supports_chunks(operator):
        got, why2 = run_case({**spec, "chunk_points": p["chunk_points"]}, p["malloc_env"], p["memory_limit_mb"])
        if got is not None:
            return ({"forward_s": got["seconds"], "peak_forward_mb": got["peak_mb"], "base_mb": got["base_mb"],
                     "peak_forward_gpu_mb": got.get("peak_gpu_mb"), "parameters": got["parameters"],
                     "chunk_points": p["chunk_points"]},
                    [f"whole forward {why}; chunked evaluation, {p['chunk_points']:,} points per chunk"])
        notes.append(f"chunked forward failed ({why2})")
    return {}, notes


def run(params: dict) -> list[dict]:
    """The rows of every operator and size (module docstring); each also printed as one JSON line."""
    _check(params)
    p = params
    rows: list[dict] = []
    for operator in p["operators"]:
        done_f: list[tuple[int, float]] = []
        done_b: list[tuple[int, float]] = []
        over: dict[str, int] = {}  # phase -> the smallest N that exceeded the memory limit
        for n in sorted(p["sizes"]):
            spec = {"operator": operator, "n": n, "reps": p["reps"], "threads": p["threads"], "chunk_points": None,
                    "device": p["device"]}
            values: dict[str, Any] = {}
            status: list[str] = []
            guess = _guess(done_f, n)
            if "forward" in over:
                status.append(f"forward not run: it exceeded memory_limit_mb at {_n(over['forward'])}")
            elif guess is not None and guess > p["max_seconds"]:
                status.append(f"forward not run: about {guess:.0f} s expected (max_seconds {p['max_seconds']:g})")
            else:
                got, notes = _forward(p, operator, n, {**spec, "phase": "forward"})
                values.update(got)
                status += notes
                if "forward_s" in got:
                    done_f.append((n, got["forward_s"]))
                elif "memory" in notes[0]:
                    over["forward"] = n
            if n <= p["backward_max"]:
                guess = _guess(done_b, n)
                if "backward" in over:
                    status.append(f"forward+backward not run: it exceeded memory_limit_mb at {_n(over['backward'])}")
                elif guess is not None and guess > p["max_seconds"]:
                    status.append(f"forward+backward not run: about {guess:.0f} s expected")
                else:
                    got, why = run_case({**spec, "phase": "forward_backward"}, p["malloc_env"], p["memory_limit_mb"])
                    if got is None:
                        status.append(f"forward+backward failed ({why})")
                        if why.startswith("memory"):
                            over["backward"] = n
                    else:
                        values.update(forward_backward_s=got["seconds"], peak_forward_backward_mb=got["peak_mb"],
                                      peak_forward_backward_gpu_mb=got.get("peak_gpu_mb"))
                        values["parameters"] = got["parameters"]
                        done_b.append((n, got["seconds"]))
            rows.append(_row(operator, n, **values, device=p["device"], status="; ".join(status) or None))
            print(json.dumps(rows[-1]), flush=True)
    return _merge(p, rows) if p["merge"] else rows


def _merge(p: dict, rows: list[dict], results: Path | str | None = None) -> list[dict]:
    """``rows`` with the rows of the operators not in ``p["operators"]`` copied from the latest full run in
    ``results`` (default ``benchmarks/results``, whatever ``--out`` is; ``measured_in`` names it), in
    :data:`OPERATORS` order."""
    path = results_path("pointcloud_scale", RESULTS if results is None else results)
    kept = []
    if path.is_file():
        for rec in latest_run(read_rows(path), full=True):
            if rec["row"]["operator"] not in p["operators"]:
                kept.append({**rec["row"], "measured_in": rec["row"]["measured_in"]
                             or f"run {rec['run_id']} of {rec['date']} (`{rec['command']}`)"})
    return sorted(kept + rows, key=lambda r: (OPERATORS.index(r["operator"]), r["N"]))


# ----------------------------------------------------------------------------------------------
# Tables


def _fmt(x, spec=".2f", scale=1.0) -> str:
    return "–" if x is None else format(scale * x, spec)


def _n(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:,}"


def table(records: list[dict]) -> str:
    """One line per operator and N: times (s), peak resident memory (GB), chunking and status."""
    rows = [r["row"] for r in records]
    measured = any(r["measured_in"] for r in rows)
    gpu = any(r.get("peak_forward_gpu_mb") is not None or r.get("peak_forward_backward_gpu_mb") is not None
              for r in rows)
    lines = ["| operator | N | forward (s) | peak RSS, forward (GB) | forward+backward (s) | "
             "peak RSS, forward+backward (GB) |" + (" peak GPU, forward (GB) | peak GPU, forward+backward (GB) |"
                                                   if gpu else "") + " notes |" + (" measured in |" if measured else ""),
             "|---|---|---|---|---|---|" + ("---|---|" if gpu else "") + "---|" + ("---|" if measured else "")]
    for r in rows:
        note = "; ".join(filter(None, [f"chunked, {r['chunk_points']:,} points per chunk" if r["chunk_points"] else None,
                                       r["status"]]))
        lines.append(f"| {r['operator']} | {_n(r['N'])} | {_fmt(r['forward_s'])} | "
                     f"{_fmt(r['peak_forward_mb'], '.2f', 1 / 1024)} | {_fmt(r['forward_backward_s'])} | "
                     f"{_fmt(r['peak_forward_backward_mb'], '.2f', 1 / 1024)} |"
                     + (f" {_fmt(r.get('peak_forward_gpu_mb'), '.2f', 1 / 1024)} | "
                        f"{_fmt(r.get('peak_forward_backward_gpu_mb'), '.2f', 1 / 1024)} |" if gpu else "")
                     + f" {note} |"
                     + (f" {r['measured_in'] or ''} |" if measured else ""))
    return "\n".join(lines)


def verdicts(rows: list[dict], n: int = TARGET_N, limit_mb: float = TARGET_MB) -> dict[str, str]:
    """Per operator: whether its forward at ``n`` points ran within ``limit_mb`` peak RSS."""
    out = {}
    for operator in dict.fromkeys(r["operator"] for r in rows):
        r = next((r for r in rows if r["operator"] == operator and r["N"] == n), None)
        if r is None:
            out[operator] = f"not run at {_n(n)}"
        elif r["peak_forward_mb"] is None:
            out[operator] = f"not met ({r['status']})"
        else:
            ok = r["peak_forward_mb"] <= limit_mb
            how = f", chunked ({r['chunk_points']:,} points per chunk)" if r["chunk_points"] else ""
            out[operator] = (f"{'met' if ok else 'not met'}: {r['peak_forward_mb'] / 1024:.2f} GB, "
                             f"{r['forward_s']:.1f} s{how}")
    return out


def notes(records: list[dict]) -> str:
    """How it was measured, the fitted forward-time exponents and the verdict of the 2^20 target."""
    p = records[0]["params"]
    rows = [r["row"] for r in records]
    on_gpu = p.get("device", "cpu") == "cuda"
    lines = [f"3-D uniform clouds, batch 1, fp32, {p['threads']} thread(s), default widths"
             + (", on the GPU (peak GPU memory: torch.cuda.max_memory_allocated, model and input included)"
                if on_gpu else "")
             + f"; memory: resident-set high-water mark of a fresh subprocess per case (absolute), killed above "
               f"{p['memory_limit_mb']:g} MB. " + malloc_note(p["malloc_env"] or {}), "",
             "| operator | parameters | forward time exponent | forward+backward time exponent | "
             f"forward at {_n(TARGET_N)} within {TARGET_MB // 1024} GB |", "|---|---|---|---|---|"]
    verdict = verdicts(rows)
    for operator in dict.fromkeys(r["operator"] for r in rows):
        mine = [r for r in rows if r["operator"] == operator]
        f = [r for r in mine if r["forward_s"] is not None and not r["chunk_points"]]
        b = [r for r in mine if r["forward_backward_s"] is not None]
        params = next((r["parameters"] for r in mine if r["parameters"]), None)
        lines.append(f"| {operator} | {'–' if params is None else f'{params:,}'} | "
                     f"{_fmt(fit_exponent([r['N'] for r in f], [r['forward_s'] for r in f]))} | "
                     f"{_fmt(fit_exponent([r['N'] for r in b], [r['forward_backward_s'] for r in b]))} | "
                     f"{verdict[operator]} |")
    lines += ["", "Exponents: least-squares slope of log(time) against log(N) over the sizes measured (unchunked)."]
    return "\n".join(lines)


BENCHMARKS = module_benchmarks(globals(), plot=("N", "forward_s", "operator"), log_axes=(True, True),
    description="Every point-set operator on 3-D uniform clouds up to 2^20 points: forward time and peak RSS "
                "(forward+backward up to 2^18), one thread, fp32;",
    claim="every point-set operator's forward at 2^20 points within 16 GB peak RSS (docs/benchmarks/point_clouds.md)",
)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="One case of pointcloud_scale, run in its own subprocess by run() (the "
                                             "benchmark itself: python -m benchmarks run pointcloud_scale)")
    ap.add_argument("--worker", required=True, help="the JSON spec of one case (see worker())")
    print(json.dumps(worker(json.loads(ap.parse_args().worker))), flush=True)
