"""Cost of the ball-tree operators against the number of points, at their defaults, on uniform and non-uniform clouds.

Erwin and the BSA transformer at default widths (3-D, one input and one output channel, float32, batch 1, one torch
thread) on clouds of N = 2^11 .. 2^17 points of three kinds (:func:`make_cloud`):

* ``uniform``: uniform in ``[0, 1]^3``;
* ``shell_cluster``: three quarters on a thin spherical shell (radius 0.4, thickness 0.01, centred in the cube) and a
  quarter in a small dense cluster (a Gaussian of standard deviation 0.02 on the shell), the way a car mesh is refined
  near its features;
* ``mixture``: eight Gaussian clusters with standard deviations from 0.005 to 0.1 and weights ``∝ 1/(i + 1)``.

One row per variant, cloud kind and N: forward and forward+backward time, as the process's CPU time (the work done,
which other processes on a shared machine hardly change) and as wall-clock time, each the least of ``reps`` calls
(seconds), and peak memory (growth of the resident set in MB during one call,
:func:`benchmarks.balltree_scaling.peak_memory_mb`). The variants
(:data:`VARIANTS`) are the two defaults, Erwin (``ball_mode="multiscale"``) and BSA (point counts, ``window=4096``),
and for comparison Erwin's physical and point-count modes and BSA's published global branches (``window=None``), each
up to the size given in ``variants`` (the quadratic ones stop early). The notes fit ``cost ∝ N^p`` (least squares in
log-log over every size a variant ran at) per variant, cloud and quantity, and give the verdict of the issue's target:
both defaults at ``p <= 1.15`` for time (CPU time: one thread, so it is the time an idle machine would take) and
peak memory, forward and forward+backward, on every cloud kind; the wall-clock exponents are listed beside them.

Every row is measured in a fresh ``python -m benchmarks.balltree_operator_scaling --worker SPEC`` (``isolate``), so its
peak memory starts from a clean heap and a worker the kernel kills for memory on a shared machine (BSA's
forward+backward at 2^17 points takes about 12 GB) is retried (``tries``, ``retry_wait_s`` apart). A worker may use
at most ``worker_memory_gb`` of address space (``RLIMIT_AS``): a case that needs more fails at once, without driving
the shared machine out of memory. A row that fails is recorded with its ``status`` (and no numbers), and the larger
sizes of that variant and cloud are skipped: Erwin's physical balls on the shell-plus-cluster cloud need about
12 GB at 2,048 points, and more than the limit at 4,096. Rows already measured with the same ``sciattn/`` and ``operators/`` sources are kept in
``benchmarks/runs/balltree_operator_scaling/`` and reused when the run is started again (``resume``). As ``balltree_scaling``, the committed run sets glibc's
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` so the largest tensors stay on the reused heap (rows
record the settings)::

    OMP_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=8589934592 \\
        python -m benchmarks run balltree_operator_scaling [--quick] [--set sizes='[2048, 4096]']
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .balltree_scaling import fit_exponent, peak_memory_mb
from .harness import ROOT, int_param, module_benchmarks

CLOUDS = ("uniform", "shell_cluster", "mixture")
#: variant -> (operator, extra constructor keys); the first of each operator is its default
VARIANTS = {
    "erwin": ("erwin", {}),
    "erwin physical": ("erwin", {"ball_mode": "physical"}),
    "erwin points": ("erwin", {"ball_mode": "points"}),
    "bsa_transformer": ("bsa_transformer", {}),
    "bsa_transformer window=None": ("bsa_transformer", {"window": None}),
}
DEFAULTS = ("erwin", "bsa_transformer")
TARGET = 1.15
UPPER = 4  # sizes of the second fit in the notes
QUANTITIES = (("forward_cpu_s", "time fwd"), ("forward_backward_cpu_s", "time fwd+bwd"),
              ("peak_mb_forward", "memory fwd"), ("peak_mb_forward_backward", "memory fwd+bwd"))
WALL = (("forward_s", "wall fwd"), ("forward_backward_s", "wall fwd+bwd"))


def best_times(fn, reps: int) -> tuple[float, float]:
    """``(wall, cpu)``: the least wall-clock and the least process CPU time of ``reps`` calls of ``fn`` (seconds)."""
    wall, cpu = [], []
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return min(wall), min(cpu)


def make_cloud(kind: str, n: int, seed: int = 0):
    """``(n, 3)`` float32 points of cloud ``kind`` (module docstring), deterministic in ``(kind, n, seed)``."""
    import torch

    if kind not in CLOUDS:
        raise ValueError(f"clouds: expected kinds from {list(CLOUDS)}, got {kind!r}")
    g = torch.Generator().manual_seed(seed * 1_000_003 + n * 7 + CLOUDS.index(kind))
    if kind == "uniform":
        return torch.rand(n, 3, generator=g)
    if kind == "shell_cluster":
        k = n // 4
        u = torch.randn(n - k, 3, generator=g)
        shell = 0.5 + (0.4 + 0.01 * torch.rand(n - k, 1, generator=g)) * u / u.norm(dim=1, keepdim=True)
        cluster = torch.tensor([0.9, 0.5, 0.5]) + 0.02 * torch.randn(k, 3, generator=g)
        return torch.cat([shell, cluster]).clamp(0, 1)
    c = 8  # mixture
    centres = 0.15 + 0.7 * torch.rand(c, 3, generator=g)
    sigma = torch.logspace(torch.log10(torch.tensor(0.005)), -1, c)
    share = 1 / torch.arange(1, c + 1, dtype=torch.float32)
    which = torch.multinomial(share / share.sum(), n, replacement=True, generator=g)
    return (centres[which] + sigma[which, None] * torch.randn(n, 3, generator=g)).clamp(0, 1)


def _model(variant: str):
    import torch

    from sciattn.operators import create_operator

    name, extra = VARIANTS[variant]
    torch.manual_seed(0)
    return create_operator(name, in_channels=1, out_channels=1, spatial_dims=3, **extra)


def _mode(model) -> str:
    """The model's ball mode (and BSA's window in the point-count mode)."""
    if model.ball_mode == "points" and hasattr(model, "blocks"):
        return f"points, window {model.blocks[0].attn.window}"
    return model.ball_mode


def _row(variant: str, model, cloud: str, n: int, reps: int) -> dict:
    import torch

    from ._timing import malloc_settings

    pos = make_cloud(cloud, n)[None]
    x = torch.randn(1, n, 1, generator=torch.Generator().manual_seed(n))

    def fwd():
        with torch.no_grad():
            model(x, pos)

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        model(x, pos).square().mean().backward()

    mem_f = peak_memory_mb(fwd)  # also the warm-up of the forward
    t_f, c_f = best_times(fwd, reps)
    mem_fb = peak_memory_mb(fwd_bwd)
    t_fb, c_fb = best_times(fwd_bwd, reps)
    return {"variant": variant, "operator": VARIANTS[variant][0], "mode": _mode(model), "cloud": cloud, "n": n,
            "forward_cpu_s": c_f, "forward_backward_cpu_s": c_fb, "forward_s": t_f, "forward_backward_s": t_fb,
            "peak_mb_forward": mem_f, "peak_mb_forward_backward": mem_fb, "threads": torch.get_num_threads(),
            "malloc": malloc_settings(), "status": "ok"}


def check(params: dict) -> dict:
    """``params`` with its values checked (a ValueError names the parameter)."""
    sizes = params["sizes"]
    if (not isinstance(sizes, list) or not sizes
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in sizes)):
        raise ValueError(f"sizes: expected a non-empty list of point counts >= 2, got {sizes!r}")
    clouds = params["clouds"]
    if not isinstance(clouds, list) or not clouds or any(c not in CLOUDS for c in clouds):
        raise ValueError(f"clouds: expected a non-empty list of {list(CLOUDS)}, got {clouds!r}")
    variants = params["variants"]
    if (not isinstance(variants, dict) or not variants or any(v not in VARIANTS for v in variants)
            or any(m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 2)
                   for m in variants.values())):
        raise ValueError(f"variants: expected a dict from variants of {list(VARIANTS)} to a largest N (int) or "
                         f"null (every size), got {variants!r}")
    for key in ("reps", "threads", "tries"):
        int_param(params, key)
    for key in ("isolate", "resume"):
        if not isinstance(params[key], bool):
            raise ValueError(f"{key}: expected true or false, got {params[key]!r}")
    for key in ("retry_wait_s", "worker_memory_gb"):
        v = params[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"{key}: expected a number >= 0 (worker_memory_gb 0: no limit), got {v!r}")
    return params


OUT_OF_MEMORY = 3  # a worker's exit status when it reached its memory limit


def worker(spec: dict) -> dict:
    """One row (:func:`_row`) in this process: ``spec`` = ``{"variant", "cloud", "n", "reps", "threads"}`` and
    optionally ``"memory_gb"``, the address space this process may use (``RLIMIT_AS``)."""
    import resource

    import torch

    if spec.get("memory_gb"):
        limit = int(float(spec["memory_gb"]) * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    torch.set_num_threads(int(spec["threads"]))
    return _row(spec["variant"], _model(spec["variant"]), spec["cloud"], int(spec["n"]), int(spec["reps"]))


def _failed(spec: dict, status: str) -> dict:
    """The row of a case that was not measured (``status`` says why)."""
    from ._timing import malloc_settings

    return {"variant": spec["variant"], "operator": VARIANTS[spec["variant"]][0], "mode": "—", "cloud": spec["cloud"],
            "n": spec["n"], "forward_cpu_s": None, "forward_backward_cpu_s": None, "forward_s": None,
            "forward_backward_s": None, "peak_mb_forward": None, "peak_mb_forward_backward": None,
            "threads": spec["threads"], "malloc": malloc_settings(), "status": status}


def _isolated(spec: dict, tries: int, wait: float) -> dict:
    """:func:`worker` in a fresh subprocess, tried up to ``tries`` times ``wait`` seconds apart; a failed row
    (:func:`_failed`) when every try fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    why = "not run"
    for attempt in range(tries):
        proc = subprocess.run([sys.executable, "-m", "benchmarks.balltree_operator_scaling", "--worker",
                               json.dumps(spec)], capture_output=True, text=True, cwd=ROOT, env=env)
        if proc.returncode == 0:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        if proc.returncode == OUT_OF_MEMORY:  # deterministic: no retry
            return _failed(spec, f"out of memory: more than {spec.get('memory_gb')} GB")
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        why = f"exit {proc.returncode} ({'killed, out of memory?' if proc.returncode < 0 else tail[0][:160]})"
        print(f"  worker {spec} failed, try {attempt + 1} of {tries}: {why}", flush=True)
        if attempt + 1 < tries:
            time.sleep(wait)
    return _failed(spec, f"failed {tries} times: {why}")


MEASURED = ("sciattn", "operators")  # the sources a row measures


def _cache_path() -> Path | None:
    """Where rows measured with the committed ``sciattn/`` and ``operators/`` are kept, named by their git tree
    hashes (None when they hold uncommitted changes)."""
    from .harness import _git

    trees = [_git("rev-parse", f"HEAD:{d}") for d in MEASURED]
    if not all(trees) or _git("status", "--porcelain", "--untracked-files=no", "--", *MEASURED):
        return None
    return ROOT / "benchmarks" / "runs" / "balltree_operator_scaling" / f"{trees[0][:12]}-{trees[1][:12]}.jsonl"


def run(params: dict) -> list[dict]:
    import torch

    from ._timing import malloc_settings

    p = check(params)
    torch.set_num_threads(p["threads"])
    cache = _cache_path() if p["resume"] and p["isolate"] else None
    done: dict[str, dict] = {}
    if cache is not None and cache.is_file():
        for line in cache.read_text().splitlines():
            entry = json.loads(line)
            done[entry["key"]] = entry["row"]
    rows = []
    for variant, largest in p["variants"].items():
        model = None if p["isolate"] else _model(variant)
        for cloud in p["clouds"]:
            failed_at = None
            for n in p["sizes"]:
                if largest is not None and n > largest:
                    continue
                spec = {"variant": variant, "cloud": cloud, "n": n, "reps": p["reps"], "threads": p["threads"]}
                key = json.dumps({**spec, "malloc": malloc_settings()}, sort_keys=True)
                spec["memory_gb"] = p["worker_memory_gb"]
                if failed_at is not None:  # a larger size needs more memory still
                    rows.append(_failed(spec, f"skipped: N = {failed_at} failed"))
                elif key in done:
                    rows.append(done[key])
                elif p["isolate"]:
                    rows.append(_isolated(spec, p["tries"], p["retry_wait_s"]))
                    if cache is not None:
                        cache.parent.mkdir(parents=True, exist_ok=True)
                        with cache.open("a") as f:
                            f.write(json.dumps({"key": key, "row": rows[-1]}) + "\n")
                else:
                    rows.append(_row(variant, model, cloud, n, p["reps"]))
                r = rows[-1]
                if r["status"] != "ok":
                    failed_at = failed_at or n
                    print(f"{variant} {cloud} N={n}: {r['status']}", flush=True)
                    continue
                print(f"{variant} {cloud} N={n}: CPU fwd {r['forward_cpu_s']:.3f} s, fwd+bwd "
                      f"{r['forward_backward_cpu_s']:.3f} s (wall {r['forward_s']:.3f}, {r['forward_backward_s']:.3f}), "
                      f"peak {r['peak_mb_forward']} / {r['peak_mb_forward_backward']} MB", flush=True)
    return rows


# ---- table and notes, from the rows ------------------------------------------------------------------------------

def exponents(rows: list[dict], largest: int | None = None, quantities=QUANTITIES
              ) -> dict[tuple[str, str], dict[str, float | None]]:
    """``{(variant, cloud): {quantity: p}}``: the fitted exponent of every field of ``quantities`` over the
    rows where it is a positive number (``None`` with fewer than two sizes); ``largest``: over the ``largest``
    biggest sizes of each variant and cloud only (the slope where a fixed cost no longer flattens it)."""
    out: dict[tuple[str, str], dict[str, float | None]] = {}
    for key in dict.fromkeys((r["variant"], r["cloud"]) for r in rows):
        sel = [r for r in rows if (r["variant"], r["cloud"]) == key]
        if largest is not None:
            keep = sorted({r["n"] for r in sel})[-largest:]
            sel = [r for r in sel if r["n"] in keep]
        out[key] = {}
        for field, _ in quantities:
            pts = sorted((r["n"], r[field]) for r in sel if r[field] is not None and r[field] > 0)
            out[key][field] = fit_exponent([n for n, _ in pts], [v for _, v in pts])
    return out


def verdict(rows: list[dict]) -> dict[str, bool | None]:
    """Per default variant: every exponent on every cloud kind at most :data:`TARGET` (None: not measured, or a
    quantity with fewer than two sizes)."""
    exps = exponents(rows)
    out: dict[str, bool | None] = {}
    for variant in DEFAULTS:
        values = [p for (v, _), per in exps.items() if v == variant for p in per.values()]
        out[variant] = None if not values or any(p is None for p in values) else all(p <= TARGET for p in values)
    return out


def _s(v):
    return "—" if v is None else f"{v:.3f}"


def _mb(v):
    return "—" if v is None else f"{v:.0f}"


def table(records: list[dict]) -> str:
    rows = [r["row"] for r in records]
    lines = ["| variant | mode | cloud | N | CPU fwd (s) | CPU fwd+bwd (s) | wall fwd (s) | wall fwd+bwd (s) | "
             "peak MB fwd | peak MB fwd+bwd | status |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['variant']} | {r['mode']} | {r['cloud']} | {r['n']} | {_s(r['forward_cpu_s'])} | "
              f"{_s(r['forward_backward_cpu_s'])} | {_s(r['forward_s'])} | {_s(r['forward_backward_s'])} | "
              f"{_mb(r['peak_mb_forward'])} | {_mb(r['peak_mb_forward_backward'])} | {r['status']} |" for r in rows]
    return "\n".join(lines) + "\n"


def _measured(rows: list[dict], variant: str, cloud: str, largest: int | None = None) -> str:
    """The range of sizes measured (status ok) of a variant and cloud: ``"2048–131072"``, ``"2048"`` or ``"—"``."""
    ns = sorted(r["n"] for r in rows if (r["variant"], r["cloud"]) == (variant, cloud) and r["status"] == "ok")
    ns = ns[-largest:] if largest else ns
    return "—" if not ns else str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"


def notes(records: list[dict]) -> str:
    from ._timing import malloc_note

    rows = [r["row"] for r in records]
    both = QUANTITIES + WALL
    wall = exponents(rows, quantities=WALL)
    lines = ["Fitted exponents (time or peak memory ∝ N^p, least squares in log-log over the sizes each variant ran at; "
             "time is CPU time, wall-clock time in the last two columns):",
             "", "| variant | cloud | sizes | " + " | ".join(label for _, label in both) + " |",
             "|---|---|---|" + "---|" * len(both)]
    for (variant, cloud), per in exponents(rows).items():
        per = {**per, **wall[variant, cloud]}
        lines.append(f"| {variant} | {cloud} | {_measured(rows, variant, cloud)} | "
                     + " | ".join("—" if per[f] is None else f"{per[f]:.2f}" for f, _ in both) + " |")
    lines += ["", f"Target: the defaults' exponents at most {TARGET} for time and peak memory, forward and "
                  f"forward+backward, on every cloud kind."]
    for variant, ok in verdict(rows).items():
        state = "not measured" if ok is None else "met" if ok else "not met"
        lines.append(f"- {variant} (default): {state}.")
    upper = exponents(rows, largest=UPPER)
    lines += ["", f"The same fit over the {UPPER} largest sizes of each variant and cloud only, where a fixed cost "
                  "(coarse levels, layouts, padding of sparse cells) no longer lowers the slope:", "",
              "| variant | cloud | sizes | " + " | ".join(label for _, label in QUANTITIES) + " |",
              "|---|---|---|" + "---|" * len(QUANTITIES)]
    for (variant, cloud), per in upper.items():
        lines.append(f"| {variant} | {cloud} | {_measured(rows, variant, cloud, UPPER)} | "
                     + " | ".join("—" if per[f] is None else f"{per[f]:.2f}" for f, _ in QUANTITIES) + " |")
    settings = {tuple(sorted(r["malloc"].items())) for r in rows}
    threads = sorted({r["threads"] for r in rows})
    lines += ["", f"{', '.join(map(str, threads))} torch thread(s). "
              + " ".join(malloc_note(dict(s)) for s in sorted(settings))]
    return "\n".join(lines) + "\n"


SCHEMA = {"variant": "str", "operator": "str", "mode": "str", "cloud": "str", "n": "int", "forward_cpu_s": "float?",
          "forward_backward_cpu_s": "float?", "forward_s": "float?", "forward_backward_s": "float?",
          "peak_mb_forward": "float?", "peak_mb_forward_backward": "float?", "threads": "int", "malloc": "dict",
          "status": "str"}
PARAMS = {"sizes": [2**k for k in range(11, 18)], "clouds": list(CLOUDS),
          "variants": {"erwin": None, "bsa_transformer": None, "erwin points": None, "erwin physical": 8192,
                       "bsa_transformer window=None": 16384},
          "reps": 2, "threads": 1, "isolate": True, "tries": 4, "retry_wait_s": 120.0, "resume": True,
          "worker_memory_gb": 16.0}
QUICK = {"sizes": [1024, 2048, 4096], "variants": {"erwin": None, "bsa_transformer": None, "erwin physical": 2048},
         "reps": 1, "isolate": False}

BENCHMARKS = module_benchmarks(globals(),
    description="Erwin and BSA operators: time and peak memory against N on uniform and non-uniform 3-D clouds, "
                "one CPU thread;",
    claim="Erwin's default (multiscale balls) and BSA's default (window 4096) have fitted time and peak-memory "
          "exponents at most 1.15 from 2^11 to 2^17 points, forward and forward+backward, on uniform, "
          "shell-plus-cluster and mixture clouds (docs/benchmarks/point_clouds.md)",
)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="One row of balltree_operator_scaling, run in its own subprocess by run() "
                                             "(the benchmark itself: python -m benchmarks run balltree_operator_scaling)")
    ap.add_argument("--worker", required=True, metavar="JSON",
                    help='{"variant", "cloud", "n", "reps", "threads", "memory_gb"}')
    try:
        print(json.dumps(worker(json.loads(ap.parse_args().worker))))
    except (MemoryError, RuntimeError) as err:  # torch reports an allocation beyond the limit as a RuntimeError
        if not isinstance(err, MemoryError) and "alloc" not in str(err).lower() and "memory" not in str(err).lower():
            raise
        print(f"out of memory: {str(err)[:200]}", file=sys.stderr)
        sys.exit(OUT_OF_MEMORY)
