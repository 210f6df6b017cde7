"""Time and memory of every registered attention backend against N, with dense SDPA for scale.

For each op with a shape factory in ``OPS`` and each backend registered for it that can run on
``--device`` (see ``sciattn.available_backends()``; Triton backends only on CUDA, the CPU
interpreter is not a speed path), and for dense ``F.scaled_dot_product_attention`` on q, k, v of
the same shape, measure at N = 2^min … 2^max points:

* forward time (no autograd) and forward+backward time (median of ``--reps`` runs after a
  warm-up run that also absorbs kernel compilation);
* peak memory above the start of the case: ``torch.cuda.max_memory_allocated`` on CUDA, the
  resident-set high-water mark (reset through ``/proc/self/clear_refs``) on CPU.

A series (op, backend) stops when a case runs out of memory, exceeds ``--max-mem-gb``, or when
the time spent on it (each case's warm-up call, which absorbs compilation, not counted) plus the predicted cost of the next size would exceed ``--series-budget``
seconds. Fitted log-log exponents of time and memory use the sizes from 2^14 up to the largest N
measured (≥ 2 points). Results go to ``--out`` (default ``benchmarks/results``) as
``kernels_<device>.json``, ``kernels_<device>.md`` and ``kernels_<device>.png``.

    python benchmarks/kernels.py --device cpu                       # < 10 min on 2 cores
    python benchmarks/kernels.py --device cuda --dtype bfloat16 --heads 8 --head-dim 64 --max-n 1048576

To benchmark another op, add ``OPS["my_op"] = OpSpec(make=..., call=...)``: ``make(n, cfg, device,
dtype)`` returns the inputs (tensors that need gradients have ``requires_grad``), ``call(inputs,
backend)`` runs the op's functional with that backend name, and ``props`` describes the inputs to
the dispatcher.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class OpSpec:
    """How to build inputs of size N for an op and call one of its backends."""

    make: Callable[[int, argparse.Namespace, torch.device, torch.dtype], dict]
    call: Callable[[dict, str], torch.Tensor]
    props: Callable[[argparse.Namespace], dict]
    describe: str


def _galerkin_make(n: int, cfg: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> dict:
    g = torch.Generator(device="cpu").manual_seed(n)
    b, h, d = cfg.batch, cfg.heads, cfg.head_dim

    def r(*shape, scale=1.0, shift=0.0):
        return (scale * torch.randn(*shape, generator=g) + shift).to(device=device, dtype=dtype).requires_grad_()

    return {
        "q": r(b, h, n, d), "k": r(b, h, n, d), "v": r(b, h, n, d),
        "weights": (torch.rand(b, n, generator=g) + 0.5).to(device=device, dtype=dtype),
        "k_weight": r(h, d, scale=0.1, shift=1.0), "k_bias": r(h, d, scale=0.1),
        "v_weight": r(h, d, scale=0.1, shift=1.0), "v_bias": r(h, d, scale=0.1),
    }


def _galerkin_call(x: dict, backend: str) -> torch.Tensor:
    from sciattn.galerkin.functional import KVNorm, galerkin_attention

    norm = KVNorm(x["k_weight"], x["k_bias"], x["v_weight"], x["v_bias"], 1e-5)
    return galerkin_attention(x["q"], x["k"], x["v"], weights=x["weights"], backend=backend, kv_norm=norm)


def _weighted_softmax_make(n: int, cfg: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> dict:
    g = torch.Generator(device="cpu").manual_seed(n)
    b, h, d = cfg.batch, cfg.heads, cfg.head_dim

    def r(*shape, scale=1.0, shift=0.0):
        return (scale * torch.randn(*shape, generator=g) + shift).to(device=device, dtype=dtype).requires_grad_()

    return {
        "q": r(b, h, n, d), "k": r(b, h, n, d), "v": r(b, h, n, d),
        "weights": (torch.rand(b, n, generator=g) + 0.5).to(device=device, dtype=dtype),
        "pos": torch.rand(b, n, 3, generator=g).to(device=device, dtype=dtype).requires_grad_(),
        "distance_scale": r(h, scale=0.1, shift=1.0),
    }


def _weighted_softmax_call(x: dict, backend: str) -> torch.Tensor:
    from sciattn.weighted_softmax import weighted_softmax_attention

    return weighted_softmax_attention(x["q"], x["k"], x["v"], x["weights"], q_pos=x["pos"], k_pos=x["pos"],
                                      distance_scale=x["distance_scale"], backend=backend)


def _grid_disc_csr(n: int, radius: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR index of the discs ``|Δ| <= radius`` (in cells) on a periodic nx × ny grid of n cells."""
    nx = 2 ** (n.bit_length() // 2)
    ny = n // nx
    span = range(-radius, radius + 1)
    offs = torch.tensor([(dx, dy) for dx in span for dy in span if dx * dx + dy * dy <= radius * radius], device=device)
    cell = torch.arange(n, device=device)
    cols = ((cell[:, None] // ny + offs[:, 0]) % nx) * ny + (cell[:, None] % ny + offs[:, 1]) % ny
    row_offsets = torch.arange(0, n * len(offs) + 1, len(offs), device=device)
    return row_offsets, cols.sort(dim=1).values.flatten()


def _neighborhood_make(n: int, cfg: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> dict:
    x = _weighted_softmax_make(n, cfg, device, dtype)
    x["row_offsets"], x["col_indices"] = _grid_disc_csr(n, 4, device)  # 49 neighbours per point
    return x


def _neighborhood_call(x: dict, backend: str) -> torch.Tensor:
    from sciattn.neighborhood import neighborhood_attention

    return neighborhood_attention(x["q"], x["k"], x["v"], x["row_offsets"], x["col_indices"], x["weights"],
                                  validate=False, backend=backend)


OPS: dict[str, OpSpec] = {
    "galerkin": OpSpec(
        make=_galerkin_make,
        call=_galerkin_call,
        props=lambda cfg: dict(head_dim=cfg.head_dim, has_mask=False, has_weights=True),
        describe="Galerkin attention with the fused per-head LayerNorm of K and V and quadrature weights",
    ),
}
OPS["weighted_softmax"] = OpSpec(
    make=_weighted_softmax_make,
    call=_weighted_softmax_call,
    props=lambda cfg: dict(head_dim=cfg.head_dim, has_mask=False, has_weights=True),
    describe="global softmax attention with key quadrature weights and the distance bias -λ_h‖p_i − p_j‖ "
    "(3-D positions, differentiated)",
)
OPS["neighborhood"] = OpSpec(
    make=_neighborhood_make,
    call=_neighborhood_call,
    props=lambda cfg: dict(head_dim=cfg.head_dim, has_mask=False, has_weights=True),
    describe="CSR neighbourhood attention with key quadrature weights, 49 neighbours per point "
    "(discs of radius 4 cells on a periodic grid)",
)

DENSE = "dense_sdpa"


def _dense_call(x: dict, backend: str) -> torch.Tensor:
    return F.scaled_dot_product_attention(x["q"], x["k"], x["v"])


# ----------------------------------------------------------------------------------------------
# Measurement


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rss_mb() -> tuple[float, float] | None:
    """(current, high-water) resident set size in MB, or None off Linux."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    rss = re.search(r"VmRSS:\s+(\d+)", text)
    hwm = re.search(r"VmHWM:\s+(\d+)", text)
    return (int(rss.group(1)) / 1024, int(hwm.group(1)) / 1024) if rss and hwm else None


def _fix_mmap_threshold() -> None:
    """Make glibc serve every allocation above 64 KiB by mmap and return it on free, so that the
    CPU resident-set high-water mark sees each case's real peak (by default glibc raises its mmap
    threshold after large frees and keeps later buffers in the heap, hiding them)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


class _Peak:
    """Peak memory (MB) above the start of a ``with`` block."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.mb = device, None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            try:
                Path("/proc/self/clear_refs").write_text("5")  # reset the RSS high-water mark
                self.base = _rss_mb()[0]
            except (OSError, TypeError):
                self.base = None
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.mb = (torch.cuda.max_memory_allocated(self.device) - self.base) / 2**20
        elif self.base is not None and _rss_mb() is not None:
            self.mb = max(_rss_mb()[1] - self.base, 0.0)
        return False


def _timed(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(spec: OpSpec, backend: str, n: int, cfg, device, dtype) -> dict:
    """One case: forward and forward+backward time and peak memory."""
    call = _dense_call if backend == DENSE else spec.call
    x = spec.make(n, cfg, device, dtype)
    leaves = [t for t in x.values() if isinstance(t, torch.Tensor) and t.requires_grad]

    def forward():
        with torch.no_grad():
            return call(x, backend)

    cot = None

    def forward_backward():
        nonlocal cot
        out = call(x, backend)
        if cot is None:
            cot = torch.randn_like(out)
        torch.autograd.grad(out, leaves, cot, allow_unused=True)  # dense SDPA ignores weights and norms

    t0 = time.perf_counter()
    forward_backward()  # warm-up: autograd graph, kernel compilation (the forward kernels too)
    _sync(device)
    warm = time.perf_counter() - t0
    with _Peak(device) as peak_f:  # the first timed run of each kind also gives its peak memory
        first_f = _timed(forward, device, 1)
    with _Peak(device) as peak_fb:
        first_fb = _timed(forward_backward, device, 1)
    fwd = statistics.median([first_f] + [_timed(forward, device, 1) for _ in range(cfg.reps - 1)])
    fwd_bwd = statistics.median([first_fb] + [_timed(forward_backward, device, 1) for _ in range(cfg.reps - 1)])
    return {"N": n, "forward_s": fwd, "forward_backward_s": fwd_bwd, "warmup_s": warm,
            "peak_forward_mb": peak_f.mb, "peak_forward_backward_mb": peak_fb.mb}


def fit_exponent(ns: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(value) against log(N); None with fewer than 2 points."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(ns, values) if v and v > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def _is_oom(err: BaseException) -> bool:
    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(err).lower()


def run_series(spec: OpSpec, op: str, backend: str, cfg, device, dtype, log) -> tuple[list[dict], str]:
    """Measure one series over increasing N until a stop rule fires; returns (rows, why it stopped)."""
    rows, spent, n = [], 0.0, cfg.min_n
    max_n = min(cfg.max_n, cfg.dense_max_n) if backend == DENSE else cfg.max_n
    while n <= max_n:
        t0 = time.perf_counter()
        try:
            row = measure(spec, backend, n, cfg, device, dtype)
        except Exception as err:  # noqa: BLE001 - a failing case ends its series, the report says why
            if device.type == "cuda":
                torch.cuda.empty_cache()
            why = "out of memory" if _is_oom(err) else f"error: {type(err).__name__}: {str(err)[:200]}"
            return rows, f"{why} at N={n}"
        finally:
            elapsed = time.perf_counter() - t0
        # the warm-up (kernel compilation on first use) is not charged to the series budget
        elapsed -= row["warmup_s"]
        spent += elapsed
        row.update(op=op, backend=backend)
        rows.append(row)
        log(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}))
        peak = max(row["peak_forward_backward_mb"] or 0.0, row["peak_forward_mb"] or 0.0)
        if peak > cfg.max_mem_gb * 1024:
            return rows, f"memory {peak:.0f} MB > {cfg.max_mem_gb} GB at N={n}"
        # Predict the next size's cost from the growth so far (at least linear).
        cost = elapsed
        growth = 2.0
        if len(rows) >= 2:
            ratio = rows[-1]["forward_backward_s"] / max(rows[-2]["forward_backward_s"], 1e-9)
            growth = min(max(ratio, 2.0), 8.0)
        if spent + cost * growth > cfg.series_budget:
            return rows, f"time budget {cfg.series_budget:.0f} s (spent {spent:.0f} s) after N={n}"
        n *= 2
    return rows, f"reached N={max_n}"


# ----------------------------------------------------------------------------------------------
# Reporting


def _fits(rows: list[dict], fit_min_n: int) -> dict:
    """Exponents over N >= fit_min_n; a series with fewer than two such sizes is fitted on its two
    largest sizes instead, and says so (``N_range`` is always the range actually used)."""
    out = {}
    for key in sorted({(r["op"], r["backend"]) for r in rows}):
        series = [r for r in rows if (r["op"], r["backend"]) == key]
        rs = [r for r in series if r["N"] >= fit_min_n]
        fallback = len(rs) < 2 <= len(series)
        if fallback:
            rs = sorted(series, key=lambda r: r["N"])[-2:]
        ns = [r["N"] for r in rs]
        out[f"{key[0]}/{key[1]}"] = {
            "points": len(rs),
            "N_range": [min(ns), max(ns)] if ns else None,
            "below_fit_min_n": fallback,
            "time_forward": fit_exponent(ns, [r["forward_s"] for r in rs]),
            "time_forward_backward": fit_exponent(ns, [r["forward_backward_s"] for r in rs]),
            "memory_forward_backward": fit_exponent(ns, [r["peak_forward_backward_mb"] or 0 for r in rs]),
        }
    return out


def _fmt(v, scale=1.0, digits=1):
    return "–" if v is None else f"{v * scale:.{digits}f}"


def write_markdown(path: Path, summary: dict) -> None:
    m = summary["meta"]
    lines = [
        f"# Attention kernels on {m['device']} ({m['device_name']})", "",
        f"{m['date']}, torch {m['torch']}, triton {m['triton']}, {m['dtype']}, batch {m['batch']}, "
        f"{m['heads']} heads × {m['head_dim']}. Command: `{m['command']}`.",
        "Times are medians; memory is the peak above the start of the case "
        f"({'allocated CUDA memory' if m['device'] == 'cuda' else 'resident set size, coarse'}).", "",
    ]
    for op in summary["ops"]:
        lines += [f"## {op}: {OPS[op].describe}", "",
                  "| backend | N | forward (ms) | fwd+bwd (ms) | peak fwd (MB) | peak fwd+bwd (MB) |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in (r for r in summary["rows"] if r["op"] == op):
            lines.append(f"| {r['backend']} | 2^{int(math.log2(r['N']))} | {_fmt(r['forward_s'], 1e3, 2)} | "
                         f"{_fmt(r['forward_backward_s'], 1e3, 2)} | {_fmt(r['peak_forward_mb'])} | "
                         f"{_fmt(r['peak_forward_backward_mb'])} |")
        lines += ["", "| series | stopped because |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in summary["stopped"].items() if k.startswith(op + "/")]
        lines += ["", f"Fitted log-log exponents over N ≥ 2^{int(math.log2(m['fit_min_n']))} up to the largest N "
                  "measured (* : fewer than two such sizes, fitted on the two largest instead):", "",
                  "| series | N range | time fwd | time fwd+bwd | memory fwd+bwd |", "|---|---|---:|---:|---:|"]
        for k, f in summary["fitted_exponents"].items():
            if k.startswith(op + "/") and f["N_range"]:
                lo, hi = (int(math.log2(x)) for x in f["N_range"])
                star = " *" if f["below_fit_min_n"] else ""
                lines.append(f"| {k} | 2^{lo}–2^{hi}{star} | {_fmt(f['time_forward'], 1, 2)} | "
                             f"{_fmt(f['time_forward_backward'], 1, 2)} | {_fmt(f['memory_forward_backward'], 1, 2)} |")
        lines.append("")
    if summary["skipped"]:
        lines += ["Not benchmarked:", ""] + [f"- {k}: {v}" for k, v in summary["skipped"].items()] + [""]
    path.write_text("\n".join(lines))


def write_plot(path: Path, summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = summary["ops"]
    fig, axes = plt.subplots(len(ops), 2, figsize=(11, 4 * len(ops)), squeeze=False)
    for i, op in enumerate(ops):
        for backend in sorted({r["backend"] for r in summary["rows"] if r["op"] == op}):
            rs = [r for r in summary["rows"] if r["op"] == op and r["backend"] == backend]
            ns = [r["N"] for r in rs]
            (line,) = axes[i][0].loglog(ns, [r["forward_backward_s"] * 1e3 for r in rs], "o-", label=f"{backend} fwd+bwd")
            axes[i][0].loglog(ns, [r["forward_s"] * 1e3 for r in rs], "x--", color=line.get_color(), alpha=0.6,
                              label=f"{backend} fwd")
            mem = [(n, r["peak_forward_backward_mb"]) for n, r in zip(ns, rs) if r["peak_forward_backward_mb"]]
            if mem:
                axes[i][1].loglog(*zip(*mem), "o-", color=line.get_color(), label=backend)
        axes[i][0].set(title=f"{op}: time ({summary['meta']['device']}, {summary['meta']['dtype']})",
                       xlabel="N (points)", ylabel="ms")
        axes[i][1].set(title=f"{op}: peak memory, forward+backward", xlabel="N (points)", ylabel="MB")
        for ax in axes[i]:
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------


def _parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default=None,
                    help="default: float32 on cpu, bfloat16 on cuda")
    ap.add_argument("--ops", nargs="+", default=None, help="ops to run (default: every op with a shape factory)")
    ap.add_argument("--backends", nargs="+", default=None, help=f"backends to run (default: all that fit, and {DENSE})")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=None, help="default: 4 on cpu, 8 on cuda")
    ap.add_argument("--head-dim", type=int, default=None, help="default: 32 on cpu, 64 on cuda")
    ap.add_argument("--min-n", type=int, default=2**12)
    ap.add_argument("--max-n", type=int, default=None, help="default: 2^18 on cpu, 2^20 on cuda")
    ap.add_argument("--dense-max-n", type=int, default=2**20, help=f"largest N for {DENSE}")
    ap.add_argument("--fit-min-n", type=int, default=2**14)
    ap.add_argument("--series-budget", type=float, default=None, help="seconds per series (default: 120 cpu, 60 cuda)")
    ap.add_argument("--max-mem-gb", type=float, default=None, help="stop a series above this (default: 4 cpu, 100 cuda)")
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions (default: 2 cpu, 10 cuda)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--no-plot", action="store_true")
    cfg = ap.parse_args(argv)
    cuda = cfg.device == "cuda"
    defaults = dict(dtype="bfloat16" if cuda else "float32", heads=8 if cuda else 4, head_dim=64 if cuda else 32,
                    max_n=2**20 if cuda else 2**18, series_budget=60.0 if cuda else 120.0,
                    max_mem_gb=100.0 if cuda else 4.0, reps=10 if cuda else 2)
    for key, value in defaults.items():
        if getattr(cfg, key) is None:
            setattr(cfg, key, value)
    return cfg


def main(argv=None) -> dict:
    cfg = _parse(argv)
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: expected a CUDA device, found none")
    import sciattn
    from sciattn._dispatch import backends_for

    device, dtype = torch.device(cfg.device), getattr(torch, cfg.dtype)
    if device.type == "cpu":
        _fix_mmap_threshold()
    registered = sorted({r["op"] for r in sciattn.available_backends(print_table=False)})
    ops = [op for op in (cfg.ops or registered) if op in OPS]
    skipped = {op: "no shape factory in benchmarks/kernels.py OPS" for op in registered if op not in OPS}
    rows, stopped = [], {}
    log = lambda s: print(s, flush=True)  # noqa: E731
    for op in ops:
        spec = OPS[op]
        series = []
        for b in backends_for(op):
            key = f"{op}/{b.name}"
            if b.interpreter_devices is not None and device.type != "cuda":
                skipped[key] = "Triton kernels are benchmarked on CUDA only (the CPU interpreter is not a speed path)"
                continue
            why = b.reasons_against(device=device, dtype=dtype, requires_grad=True, **spec.props(cfg))
            if why:
                skipped[key] = "; ".join(why)
                continue
            series.append(b.name)
        series.append(DENSE)
        for name in series:
            if cfg.backends and name not in cfg.backends:
                continue
            log(f"# {op}/{name}")
            got, why = run_series(spec, op, name, cfg, device, dtype, log)
            rows += got
            stopped[f"{op}/{name}"] = why
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    meta = {
        "benchmark": "kernels", "date": datetime.date.today().isoformat(), "device": cfg.device,
        "device_name": torch.cuda.get_device_name(device) if cfg.device == "cuda"
        else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        "torch": torch.__version__, "triton": triton_version, "dtype": cfg.dtype, "batch": cfg.batch,
        "heads": cfg.heads, "head_dim": cfg.head_dim, "fit_min_n": cfg.fit_min_n, "reps": cfg.reps,
        "series_budget_s": cfg.series_budget, "command": "python benchmarks/kernels.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    summary = {"meta": meta, "ops": ops, "rows": rows, "stopped": stopped, "skipped": skipped,
               "fitted_exponents": _fits(rows, cfg.fit_min_n)}
    cfg.out.mkdir(parents=True, exist_ok=True)
    stem = cfg.out / f"kernels_{cfg.device}"
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    write_markdown(stem.with_suffix(".md"), summary)
    if not cfg.no_plot and rows:
        write_plot(stem.with_suffix(".png"), summary)
    print(stem.with_suffix(".md").read_text())
    return summary


if __name__ == "__main__":
    main()
