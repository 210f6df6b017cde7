"""Time and memory of every registered attention backend against N, with dense SDPA for scale.

For each op with a shape factory in ``OPS`` and each backend registered for it that can run on the
``device`` parameter (see ``sciattn.available_backends()``; Triton backends only on CUDA, the CPU
interpreter is not a speed path), and for dense ``F.scaled_dot_product_attention`` on q, k, v of
the same shape, measure at N = ``min_n``, 2·``min_n``, … ≤ ``max_n`` points:

* forward time (no autograd) and forward+backward time (median of ``reps`` runs after a
  warm-up run that also absorbs kernel compilation);
* peak memory above the start of the case: ``torch.cuda.max_memory_allocated`` on CUDA, the
  resident-set high-water mark (reset through ``/proc/self/clear_refs``) on CPU;
* the **limit**: the least time the hardware needs for the case, ``max(bytes / copy bandwidth, FLOPs / matmul
  rate)``, and the measured time's share of it (``% of limit``). Both rates are measured in the same process
  before each series (:func:`measure_limits`): the copy bandwidth is the bytes read and written by
  ``dst.copy_(src)`` of a 128 MiB tensor (4× the last-level cache of the development machine) into memory already
  mapped, the matmul rate that of a square ``torch.mm`` in the run's dtype (2048² on the CPU, 8192² on CUDA), best
  of 5 each; every row of the run uses the highest of each (:func:`best_rates`: on a shared machine a lower one is
  load, not the hardware). The rows also keep the rate of ``src.clone()`` (a fresh output: on the CPU it includes
  the operating system's page faults, which no op returning a new tensor avoids).

The bytes and FLOPs of one case (``t`` = B·H·N·D elements of one q, k, v or output tensor in the run's dtype,
head dims D = E, N_q = N_k = N; weights ``(B, N)``; ``nnz`` = the CSR's entries, 49·N):

* galerkin_plain (the functional as ``galerkin_attention(q, k, v)``) and galerkin (the benchmark's settings: weights
  and the per-head LayerNorm of K and V): forward reads q, k, v and the weights and writes z: ``4t`` elements
  (+ B·N, galerkin only); FLOPs
  ``2·B·H·(N_k + N_q)·D·E`` (``M = Σ k vᵀ`` and ``z = q M``). Forward+backward adds reading dz, q, k, v (+ the
  weights) and writing dq, dk, dv (``7t``) and the four products ``dM = qᵀdz``, ``dq = dz Mᵀ``, ``dk``, ``dv``:
  ``11t`` elements, 3× the forward FLOPs. The LayerNorm and weight arithmetic is not counted.
* weighted_softmax and dense_sdpa: FLOPs ``2·B·H·N_q·N_k·(D + E)`` forward (``q kᵀ`` and ``P v``) and 3× that
  forward+backward (``dV = Pᵀ dO``, ``dP = dO Vᵀ``, ``dQ = dS K``, ``dK = dSᵀ Q``; the recomputed scores, the
  exponentials and the distance bias not counted); bytes as galerkin's (plus 3-D positions for the former).
* neighborhood: FLOPs ``2·B·H·nnz·(D + E)`` forward, 3× forward+backward; bytes as galerkin's plus the CSR index
  (``8·(nnz + N + 1)`` bytes, read once per pass). The gathered key and value rows are not counted as memory
  traffic (neighbours are near in memory and reread from the cache); the rows also keep the measured bandwidth of
  gathering key rows by the CSR's column indices (``gather_gbs``), the rate of an implementation that collects
  each edge's key and value rows (``nnz·H·(D + E)`` elements).

A series (op, backend) stops when a case runs out of memory, exceeds ``max_mem_gb`` (default: 8 on the CPU,
100 on CUDA), when the next size's predicted memory would exceed it, or when the time
spent on it (each case's warm-up call, which absorbs compilation, not counted) plus the predicted cost
of the next size would exceed ``series_budget`` seconds (:func:`stop_reason`); the last row of a series says why it stopped
(``stopped``). A backend that cannot run here, and an op without a shape factory, is a row with ``N``
empty and the reason in ``stopped``. The notes fit log-log exponents of time and memory over the
sizes from ``fit_min_n`` up to the largest N measured (≥ 2 points; a series with fewer such sizes is
fitted on its two largest, marked ``*``).

    python -m benchmarks run kernels [--quick]                 # CPU, about 40 min on 2 cores (--quick: 1 min)
    python -m benchmarks run kernels --set device=cuda --set dtype=bfloat16 --set heads=8 --set head_dim=64 \\
        --set max_n=1048576 --set series_budget=60 --set reps=10
    python -m benchmarks table kernels --where device=cuda row.op=galerkin

Rows are appended to ``benchmarks/results/kernels.jsonl`` (one per op, backend and N, with the limits and the rates
they were computed from); the docs' tables (one per op and device) are generated from them, and ``python -m benchmarks plot kernels --where device=cpu
row.op=galerkin`` draws forward+backward time against N per backend (log-log).

To benchmark another op, add ``OPS["my_op"] = OpSpec(make=..., call=...)``: ``make(n, cfg, device,
dtype)`` returns the inputs (tensors that need gradients have ``requires_grad``; ``cfg`` has ``batch``,
``heads`` and ``head_dim``), ``call(inputs, backend)`` runs the op's functional with that backend name,
``props`` describes the inputs to the dispatcher, and ``work(inputs)`` returns the bytes and FLOPs of the forward
and of forward+backward (:class:`Work`).
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .harness import format_value, module_benchmarks

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Work:
    """What one case must move and compute: bytes and FLOPs of the forward and of forward+backward."""

    forward_bytes: float
    forward_flops: float
    forward_backward_bytes: float
    forward_backward_flops: float

    def limits(self, copy_gbs: float, matmul_gflops: float) -> tuple[float, float]:
        """(forward, forward+backward) limits in seconds: ``max(bytes / bandwidth, FLOPs / rate)``."""
        bw, rate = copy_gbs * 1e9, matmul_gflops * 1e9
        return (max(self.forward_bytes / bw, self.forward_flops / rate),
                max(self.forward_backward_bytes / bw, self.forward_backward_flops / rate))


@dataclass
class OpSpec:
    """How to build inputs of size N for an op, call one of its backends, and what a case must do."""

    make: Callable[..., dict]
    call: Callable[[dict, str], Any]
    props: Callable[[Any], dict]
    describe: str
    work: Callable[[dict], Work]
    gather: Callable[[dict, Any], float] | None = None
    op: str | None = None  # the registry's op name, when it differs from the key in OPS
    dense: bool = True  # also time dense SDPA on the same q, k, v


def _streams(x: dict, extra_bytes: float = 0.0) -> tuple[float, float]:
    """(forward, forward+backward) bytes of the dense tensors: read q, k, v (+ the weights and ``extra_bytes``)
    and write the output; then read dout, q, k, v (+ the same again) and write dq, dk, dv (see the docstring)."""
    q, k, v = x["q"], x["k"], x["v"]
    t_q, t_k, t_v = (t.numel() * t.element_size() for t in (q, k, v))
    t_o = t_q // q.shape[-1] * v.shape[-1]
    side = x["weights"].numel() * x["weights"].element_size() + extra_bytes
    fwd = t_q + t_k + t_v + t_o + side
    return fwd, fwd + t_o + t_q + t_k + t_v + t_q + t_k + t_v + side


def _galerkin_work(x: dict) -> Work:
    b, h, nq, d = x["q"].shape
    nk, e = x["k"].shape[2], x["v"].shape[-1]
    flops = 2.0 * b * h * (nk + nq) * d * e
    fwd, fwd_bwd = _streams(x)
    return Work(fwd, flops, fwd_bwd, 3 * flops)


def _galerkin_plain_work(x: dict) -> Work:
    """As :func:`_galerkin_work` without the weights (uniform weights are not read)."""
    w = x["weights"].numel() * x["weights"].element_size()
    full = _galerkin_work(x)
    return Work(full.forward_bytes - w, full.forward_flops, full.forward_backward_bytes - 2 * w,
                full.forward_backward_flops)


def _softmax_work(x: dict) -> Work:
    """Global softmax attention (the weighted one, and dense SDPA on the same q, k, v)."""
    b, h, nq, d = x["q"].shape
    nk, e = x["k"].shape[2], x["v"].shape[-1]
    flops = 2.0 * b * h * nq * nk * (d + e)
    pos = x.get("pos")
    fwd, fwd_bwd = _streams(x, 0.0 if pos is None else 2 * pos.numel() * pos.element_size())
    return Work(fwd, flops, fwd_bwd, 3 * flops)


def _neighborhood_gather(x: dict, device) -> float:
    """The bandwidth (GB/s, bytes read + written) of gathering one head's key rows by the CSR's column indices
    (``k[0, 0].index_select(0, col_indices)``, at most 2^22 of them; best of 3): the rate at which the op could
    collect each edge's key or value row if it had to."""
    cols = x["col_indices"][: 1 << 22]
    rows = x["k"].detach()[0, 0]

    def once() -> float:
        return _timed(lambda: rows.index_select(0, cols), device, 1)

    once()
    return 2 * cols.numel() * rows.shape[-1] * rows.element_size() / min(once() for _ in range(3)) / 1e9


def _neighborhood_work(x: dict) -> Work:
    b, h, _, d = x["q"].shape
    e = x["v"].shape[-1]
    nnz = x["col_indices"].numel()
    flops = 2.0 * b * h * nnz * (d + e)
    index = x["col_indices"].numel() * x["col_indices"].element_size()
    index += x["row_offsets"].numel() * x["row_offsets"].element_size()
    fwd, fwd_bwd = _streams(x, index)
    return Work(fwd, flops, fwd_bwd, 3 * flops)


def _galerkin_make(n: int, cfg, device, dtype) -> dict:
    import torch

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


def _galerkin_plain_call(x: dict, backend: str):
    from sciattn.galerkin.functional import galerkin_attention

    return galerkin_attention(x["q"], x["k"], x["v"], backend=backend)


def _galerkin_call(x: dict, backend: str):
    from sciattn.galerkin.functional import KVNorm, galerkin_attention

    norm = KVNorm(x["k_weight"], x["k_bias"], x["v_weight"], x["v_bias"], 1e-5)
    return galerkin_attention(x["q"], x["k"], x["v"], weights=x["weights"], backend=backend, kv_norm=norm)


def _weighted_softmax_make(n: int, cfg, device, dtype) -> dict:
    import torch

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


def _weighted_softmax_call(x: dict, backend: str):
    from sciattn.weighted_softmax import weighted_softmax_attention

    return weighted_softmax_attention(x["q"], x["k"], x["v"], x["weights"], q_pos=x["pos"], k_pos=x["pos"],
                                      distance_scale=x["distance_scale"], backend=backend)


def _grid_disc_csr(n: int, radius: int, device):
    """CSR index of the discs ``|Δ| <= radius`` (in cells) on a periodic nx × ny grid of n cells."""
    import torch

    nx = 2 ** (n.bit_length() // 2)
    ny = n // nx
    span = range(-radius, radius + 1)
    offs = torch.tensor([(dx, dy) for dx in span for dy in span if dx * dx + dy * dy <= radius * radius], device=device)
    cell = torch.arange(n, device=device)
    cols = ((cell[:, None] // ny + offs[:, 0]) % nx) * ny + (cell[:, None] % ny + offs[:, 1]) % ny
    row_offsets = torch.arange(0, n * len(offs) + 1, len(offs), device=device)
    return row_offsets, cols.sort(dim=1).values.flatten()


def _neighborhood_make(n: int, cfg, device, dtype) -> dict:
    x = _weighted_softmax_make(n, cfg, device, dtype)
    x["row_offsets"], x["col_indices"] = _grid_disc_csr(n, 4, device)  # 49 neighbours per point
    return x


def _neighborhood_call(x: dict, backend: str):
    from sciattn.neighborhood import neighborhood_attention

    return neighborhood_attention(x["q"], x["k"], x["v"], x["row_offsets"], x["col_indices"], x["weights"],
                                  validate=False, backend=backend)


OPS: dict[str, OpSpec] = {
    "galerkin_plain": OpSpec(
        make=_galerkin_make,
        call=_galerkin_plain_call,
        props=lambda cfg: dict(head_dim=cfg.head_dim, has_mask=False, has_weights=False),
        describe="the Galerkin functional as `galerkin_attention(q, k, v)`: uniform weights, no LayerNorm, no mask",
        work=_galerkin_plain_work,
        op="galerkin",
        dense=False,
    ),
    "galerkin": OpSpec(
        make=_galerkin_make,
        call=_galerkin_call,
        props=lambda cfg: dict(head_dim=cfg.head_dim, has_mask=False, has_weights=True),
        describe="Galerkin attention with the fused per-head LayerNorm of K and V and quadrature weights",
        work=_galerkin_work,
    ),
    "weighted_softmax": OpSpec(
        make=_weighted_softmax_make,
        call=_weighted_softmax_call,
        props=lambda cfg: dict(head_dim=cfg.head_dim, has_mask=False, has_weights=True),
        describe="global softmax attention with key quadrature weights and the distance bias -λ_h‖p_i − p_j‖ "
        "(3-D positions, differentiated)",
        work=_softmax_work,
    ),
    "neighborhood": OpSpec(
        make=_neighborhood_make,
        call=_neighborhood_call,
        props=lambda cfg: dict(head_dim=cfg.head_dim, has_mask=False, has_weights=True),
        describe="CSR neighbourhood attention with key quadrature weights, 49 neighbours per point "
        "(discs of radius 4 cells on a periodic grid)",
        work=_neighborhood_work,
        gather=_neighborhood_gather,
    ),
}

DENSE = "dense_sdpa"
DTYPES = ("float32", "float16", "bfloat16")


def _dense_call(x: dict, backend: str):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(x["q"], x["k"], x["v"])


# ----------------------------------------------------------------------------------------------
# Measurement


def _sync(device) -> None:
    if device.type == "cuda":
        import torch

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

    def __init__(self, device) -> None:
        self.device, self.mb = device, None

    def __enter__(self):
        import torch

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
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.mb = (torch.cuda.max_memory_allocated(self.device) - self.base) / 2**20
        elif self.base is not None and _rss_mb() is not None:
            self.mb = max(_rss_mb()[1] - self.base, 0.0)
        return False


def _timed(fn: Callable[[], object], device, reps: int) -> float:
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_limits(device, dtype, reps: int = 5) -> dict:
    """The hardware's rates in this process: ``copy_gbs``, the bytes read and written per second by
    ``dst.copy_(src)`` of a 128 MiB (1 GiB on CUDA) tensor into memory already mapped; ``clone_gbs``, the same
    for ``src.clone()`` (a fresh output, page faults included on the CPU); ``matmul_gflops``, a square
    ``torch.mm`` in ``dtype`` (2048² on the CPU, 8192² on CUDA). Best of ``reps`` after a warm-up."""
    import torch

    def best(fn) -> float:
        fn()
        return min(_timed(fn, device, 1) for _ in range(reps))

    def copies() -> tuple[float, float]:
        src = torch.randn((1 << 28 if device.type == "cuda" else 1 << 25), device=device)
        dst = torch.empty_like(src)
        nbytes = 2 * src.numel() * src.element_size()
        return nbytes / best(lambda: dst.copy_(src)) / 1e9, nbytes / best(lambda: src.clone()) / 1e9

    def matmul() -> float:
        size = 8192 if device.type == "cuda" else 2048
        a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
        c = torch.empty_like(a)
        return 2.0 * size**3 / best(lambda: torch.mm(a, b, out=c)) / 1e9

    copy_gbs, clone_gbs = copies()
    matmul_gflops = matmul()
    return {"copy_gbs": copy_gbs, "clone_gbs": clone_gbs, "matmul_gflops": matmul_gflops}


def measure(spec: OpSpec, backend: str, n: int, cfg, device, dtype, rates: dict | None = None) -> dict:
    """One case: forward and forward+backward time and peak memory; with ``rates`` (:func:`measure_limits`),
    also the limits of the case, the rates they come from and its :class:`Work` (``work``)."""
    import torch

    call = _dense_call if backend == DENSE else spec.call
    x = spec.make(n, cfg, device, dtype)
    limits = {}
    if rates is not None:
        work = (_softmax_work if backend == DENSE else spec.work)(x)
        lim_f, lim_fb = work.limits(rates["copy_gbs"], rates["matmul_gflops"])
        limits = {"limit_forward_s": lim_f, "limit_forward_backward_s": lim_fb, **rates, "work": work}
        if spec.gather is not None and backend != DENSE:
            limits["gather_gbs"] = spec.gather(x, device)
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
            "peak_forward_mb": peak_f.mb, "peak_forward_backward_mb": peak_fb.mb, **limits}


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
    import torch

    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(err).lower()


def _row(op: str, backend: str | None, measured: dict | None = None, stopped: str | None = None) -> dict:
    m = measured or {}
    return {"op": op, "backend": backend, "N": m.get("N"), "forward_s": m.get("forward_s"),
            "forward_backward_s": m.get("forward_backward_s"), "warmup_s": m.get("warmup_s"),
            "peak_forward_mb": m.get("peak_forward_mb"), "peak_forward_backward_mb": m.get("peak_forward_backward_mb"),
            **{f: m.get(f) for f in LIMIT_FIELDS}, "stopped": stopped}


def run_series(spec: OpSpec, op: str, backend: str, cfg, device, dtype, works: list | None = None
               ) -> tuple[list[dict], str]:
    """Measure one series over increasing N until a stop rule fires; returns (rows, why it stopped). The
    hardware's rates are measured first (:func:`measure_limits`), for the limits of every case of the series;
    each case's :class:`Work` is appended to ``works`` (one per row)."""
    import torch

    rates = measure_limits(device, dtype)
    rows, spent, n = [], 0.0, cfg.min_n
    max_n = min(cfg.max_n, cfg.dense_max_n) if backend == DENSE else cfg.max_n
    while n <= max_n:
        t0 = time.perf_counter()
        try:
            row = measure(spec, backend, n, cfg, device, dtype, rates)
        except Exception as err:  # noqa: BLE001 - a failing case ends its series, the row says why
            if device.type == "cuda":
                torch.cuda.empty_cache()
            why = "out of memory" if _is_oom(err) else f"error: {type(err).__name__}: {str(err)[:200]}"
            return rows, f"{why} at N={n}"
        elapsed = time.perf_counter() - t0 - row["warmup_s"]  # compilation on first use is not charged
        spent += elapsed
        rows.append(_row(op, backend, row))
        if works is not None:
            works.append(row.get("work"))
        print(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in rows[-1].items()}), flush=True)
        why = stop_reason(rows, spent, elapsed, cfg, n)
        if why:
            return rows, why
        n *= 2
    return rows, f"reached N={max_n}"


def _peak(row: dict) -> float:
    return max(row["peak_forward_backward_mb"] or 0.0, row["peak_forward_mb"] or 0.0)


def stop_reason(rows: list[dict], spent: float, elapsed: float, cfg, n: int) -> str | None:
    """Why a series stops after its case at N = ``n`` (None: it goes on): its memory above ``max_mem_gb``, or the
    next size's predicted memory or time over ``max_mem_gb`` or ``series_budget``. The next size is predicted
    from the growth of the last two sizes, at least linear and at most 8×; predicting the memory keeps a
    quadratic series from taking more than the machine has (a case that runs out of memory may be killed by
    the operating system before it can report)."""
    peak = _peak(rows[-1])
    if peak > cfg.max_mem_gb * 1024:
        return f"memory {peak:.0f} MB > {cfg.max_mem_gb} GB at N={n}"
    time_growth, mem_growth = 2.0, 2.0
    if len(rows) >= 2:
        ratio = rows[-1]["forward_backward_s"] / max(rows[-2]["forward_backward_s"], 1e-9)
        time_growth = min(max(ratio, 2.0), 8.0)
        mem_growth = min(max(peak / max(_peak(rows[-2]), 1e-9), 2.0), 8.0)
    if peak * mem_growth > cfg.max_mem_gb * 1024:
        return f"predicted memory {peak * mem_growth:.0f} MB > {cfg.max_mem_gb} GB at N={2 * n} (after N={n})"
    if spent + elapsed * time_growth > cfg.series_budget:
        return f"time budget {cfg.series_budget:.0f} s (spent {spent:.0f} s) after N={n}"
    return None


# ----------------------------------------------------------------------------------------------
# The benchmark

LIMIT_FIELDS = ("limit_forward_s", "limit_forward_backward_s", "copy_gbs", "clone_gbs", "matmul_gflops", "gather_gbs")
SCHEMA = {
    "op": "str", "backend": "str?", "N": "int?", "forward_s": "float?", "forward_backward_s": "float?",
    "warmup_s": "float?", "peak_forward_mb": "float?", "peak_forward_backward_mb": "float?",
    **{f: "float?" for f in LIMIT_FIELDS}, "stopped": "str?",
}
PARAMS: dict[str, Any] = {
    "device": "cpu", "dtype": "float32", "ops": None, "backends": None, "batch": 1, "heads": 4, "head_dim": 32,
    "min_n": 2**12, "max_n": 2**20, "dense_max_n": 2**20, "fit_min_n": 2**14, "series_budget": 300.0,
    "max_mem_gb": None, "reps": 2,
}
QUICK = {"min_n": 2**9, "max_n": 2**11, "fit_min_n": 2**10, "series_budget": 10.0, "reps": 1}


def _check(p: dict) -> None:
    """A ValueError naming the first bad parameter."""
    if p["device"] not in ("cpu", "cuda"):
        raise ValueError(f"device: expected 'cpu' or 'cuda', got {p['device']!r}")
    if p["dtype"] not in DTYPES:
        raise ValueError(f"dtype: expected one of {list(DTYPES)}, got {p['dtype']!r}")
    if p["ops"] is not None and (not isinstance(p["ops"], list) or not set(p["ops"]) <= set(OPS) or not p["ops"]):
        raise ValueError(f"ops: expected null or a non-empty list of {sorted(OPS)}, got {p['ops']!r}")
    if p["backends"] is not None and (not isinstance(p["backends"], list)
                                      or not all(isinstance(b, str) for b in p["backends"])):
        raise ValueError(f"backends: expected null or a list of backend names, got {p['backends']!r}")
    for key in ("batch", "heads", "head_dim", "min_n", "max_n", "dense_max_n", "fit_min_n", "reps"):
        if not isinstance(p[key], int) or isinstance(p[key], bool) or p[key] < 1:
            raise ValueError(f"{key}: expected a positive integer, got {p[key]!r}")
    if p["min_n"] > p["max_n"]:
        raise ValueError(f"min_n: expected at most max_n ({p['max_n']}), got {p['min_n']}")
    for key in ("series_budget", "max_mem_gb"):
        if key == "max_mem_gb" and p[key] is None:
            continue
        if not isinstance(p[key], (int, float)) or isinstance(p[key], bool) or p[key] <= 0:
            raise ValueError(f"{key}: expected a positive number, got {p[key]!r}")


def run(params: dict) -> list[dict]:
    """Every series of the ops and backends that can run on ``params["device"]``, and a row per one that cannot."""
    _check(params)
    import torch

    if params["device"] == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: expected 'cuda' with a CUDA device available, got 'cuda' on a machine without CUDA")
    import sciattn
    from sciattn._dispatch import backends_for

    cfg = types.SimpleNamespace(**params)
    if cfg.max_mem_gb is None:
        cfg.max_mem_gb = 100.0 if params["device"] == "cuda" else 8.0
    device, dtype = torch.device(params["device"]), getattr(torch, params["dtype"])
    if device.type == "cpu":
        _fix_mmap_threshold()
    registered = sorted({r["op"] for r in sciattn.available_backends(print_table=False)})
    covered = {spec.op or key for key, spec in OPS.items()}
    rows = [_row(op, None, stopped="no shape factory in benchmarks/kernels.py OPS") for op in registered
            if op not in covered and params["ops"] is None]
    rated: list[tuple[dict, Work]] = []
    for op in params["ops"] or [key for key, spec in OPS.items() if (spec.op or key) in registered]:
        spec, series, skipped = OPS[op], [], []
        for b in backends_for(spec.op or op):
            if b.interpreter_devices is not None and device.type != "cuda":
                skipped.append(_row(op, b.name, stopped="Triton kernels are benchmarked on CUDA only "
                                                        "(the CPU interpreter is not a speed path)"))
                continue
            why = b.reasons_against(device=device, dtype=dtype, requires_grad=True, **spec.props(cfg))
            if why:
                skipped.append(_row(op, b.name, stopped="; ".join(why)))
                continue
            series.append(b.name)
        if spec.dense:
            series.append(DENSE)
        for name in series:
            if params["backends"] and name not in params["backends"]:
                continue
            print(f"# {op}/{name}", flush=True)
            works: list = []
            got, why = run_series(spec, op, name, cfg, device, dtype, works)
            rated += [(r, w) for r, w in zip(got, works) if w is not None]
            if got:
                got[-1]["stopped"] = why
            else:
                got = [_row(op, name, stopped=why)]
            rows += got
        rows += [r for r in skipped if not params["backends"] or r["backend"] in params["backends"]]
    best_rates(rated)
    return rows


def best_rates(rated: list[tuple[dict, Work]]) -> None:
    """Give every measured row the highest copy bandwidth, clone rate and matmul rate measured in the run (each
    series measured them before it started; on a shared machine a lower one is load, not the hardware) and its
    limits from them."""
    if not rated:
        return
    best = {f: max(r[f] for r, _ in rated) for f in ("copy_gbs", "clone_gbs", "matmul_gflops")}
    for r, work in rated:
        r.update(best)
        r["limit_forward_s"], r["limit_forward_backward_s"] = work.limits(best["copy_gbs"], best["matmul_gflops"])


def _exp(N: int) -> str:
    k = math.log2(N)
    return f"2^{int(k)}" if k == int(k) else f"{N:,}"


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1e3:.2f}"


def _mb(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def _share(time_s: float | None, limit_s: float | None) -> str:
    """The limit's share of the measured time, in percent."""
    return "—" if not time_s or limit_s is None else f"{100 * limit_s / time_s:.0f}%"


def table(records: list[dict]) -> str:
    """One line per row: backend (and op, when the rows hold several), N, forward and forward+backward times in
    ms, each with its limit (ms) and the limit as a share of the time, peaks in MB, and why a series stopped (its
    last row) or why a backend was not benchmarked (N empty). Rows recorded before the limits were measured
    show a dash there."""
    rows = [r["row"] for r in records]
    several = len({r["op"] for r in rows}) > 1
    head = (["op"] if several else []) + [
        "backend", "N", "forward (ms)", "limit (ms)", "% of limit", "fwd+bwd (ms)", "limit (ms)", "% of limit",
        "peak fwd (MB)", "peak fwd+bwd (MB)", "stopped because / not benchmarked"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * (2 + several) + "---:|" * 8 + "---|"]
    for r in rows:
        lim_f, lim_fb = r.get("limit_forward_s"), r.get("limit_forward_backward_s")
        cells = ([r["op"]] if several else []) + [
            format_value(r["backend"]), "—" if r["N"] is None else _exp(r["N"]), _ms(r["forward_s"]), _ms(lim_f),
            _share(r["forward_s"], lim_f), _ms(r["forward_backward_s"]), _ms(lim_fb),
            _share(r["forward_backward_s"], lim_fb), _mb(r["peak_forward_mb"]), _mb(r["peak_forward_backward_mb"]),
            format_value(r["stopped"]) if r["stopped"] else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fits(rows: list[dict], fit_min_n: int) -> dict[str, dict]:
    """Per series ``op/backend``: log-log exponents over N >= fit_min_n; a series with fewer than two such sizes
    is fitted on its two largest sizes instead (``below_fit_min_n``; ``N_range`` is the range used)."""
    measured = [r for r in rows if r["N"] is not None]
    out = {}
    for key in sorted({(r["op"], r["backend"]) for r in measured}):
        series = [r for r in measured if (r["op"], r["backend"]) == key]
        rs = [r for r in series if r["N"] >= fit_min_n]
        fallback = len(rs) < 2 <= len(series)
        if fallback:
            rs = sorted(series, key=lambda r: r["N"])[-2:]
        ns = [r["N"] for r in rs]
        out[f"{key[0]}/{key[1]}"] = {
            "N_range": [min(ns), max(ns)] if ns else None, "below_fit_min_n": fallback,
            "time_forward": fit_exponent(ns, [r["forward_s"] for r in rs]),
            "time_forward_backward": fit_exponent(ns, [r["forward_backward_s"] for r in rs]),
            "memory_forward_backward": fit_exponent(ns, [r["peak_forward_backward_mb"] or 0 for r in rs]),
        }
    return out


def _f2(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def notes(records: list[dict]) -> str:
    """The run's shape and timing settings, what each op computes, and the fitted exponents of each series."""
    p = records[0]["params"]
    rows = [r["row"] for r in records]
    cuda = p["device"] == "cuda"
    ops = list(dict.fromkeys(r["op"] for r in rows if r["op"] in OPS))
    lines = [f"{p['dtype']}, batch {p['batch']}, {p['heads']} heads × {p['head_dim']}; times are medians of "
             f"{p['reps']} runs after a warm-up; memory is the peak above the start of the case "
             f"({'allocated CUDA memory' if cuda else 'resident set size, coarse'})."
             + "".join(f" {op}: {OPS[op].describe}." for op in ops)]
    measured = [r for r in rows if r.get("copy_gbs") is not None]
    if measured:
        def span(field: str) -> str:
            values = [r[field] for r in measured if r.get(field) is not None]
            lo, hi = min(values), max(values)
            return f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}–{hi:.1f}"

        lines += ["", f"Limit: the least time the hardware needs for the case, max(bytes / copy bandwidth, FLOPs / "
                  f"matmul rate), with the highest rates measured in the same process (before each series): copy bandwidth "
                  f"{span('copy_gbs')} GB/s (`dst.copy_(src)`, 128 MiB, bytes read + written), matmul rate "
                  f"{span('matmul_gflops')} GFLOP/s (square `torch.mm`, {p['dtype']}); a fresh output "
                  f"(`src.clone()`) ran at {span('clone_gbs')} GB/s. The bytes and FLOPs of each op are stated in "
                  "the docstring of `benchmarks/kernels.py`; % of limit = limit / measured time."]
        gathered = [r for r in measured if r.get("gather_gbs")]
        if gathered:
            r = max(gathered, key=lambda r: r["N"])
            x = {"nnz": 49 * r["N"], "bytes": 49 * r["N"] * p["batch"] * p["heads"] * 2 * p["head_dim"] * 4}
            lines[-1] += (f" Gathering one head's key rows by the CSR's column indices ran at {span('gather_gbs')} "
                          f"GB/s (bytes read + written); collecting each edge's key and value rows once at that rate "
                          f"would take {1e3 * 2 * x['bytes'] / (r['gather_gbs'] * 1e9):,.0f} ms at N = {_exp(r['N'])} "
                          f"(nnz = {x['nnz']:,}), against a forward limit of {1e3 * r['limit_forward_s']:,.0f} ms.")
    fitted = {k: f for k, f in fits(rows, p["fit_min_n"]).items() if f["N_range"]}
    if fitted:
        lines += ["", f"Fitted log-log exponents over N ≥ {_exp(p['fit_min_n'])} up to the largest N measured "
                  "(* : fewer than two such sizes, fitted on the two largest instead):", "",
                  "| series | N range | time fwd | time fwd+bwd | memory fwd+bwd |", "|---|---|---:|---:|---:|"]
        for k, f in fitted.items():
            lo, hi = f["N_range"]
            lines.append(f"| {k} | {_exp(lo)}–{_exp(hi)}{' *' if f['below_fit_min_n'] else ''} | "
                         f"{_f2(f['time_forward'])} | {_f2(f['time_forward_backward'])} | "
                         f"{_f2(f['memory_forward_backward'])} |")
    return "\n".join(lines)


BENCHMARKS = module_benchmarks(
    globals(), packages=("triton",), plot=("N", "forward_backward_s", "backend"), log_axes=(True, True),
    description="Attention backends (and dense SDPA for scale) against N: forward and forward+backward time, "
                "peak memory;",
    claim="Galerkin and neighbourhood backends grow at most about linearly in N, the global weighted softmax "
          "and dense SDPA about quadratically (docs/benchmarks/kernels.md)",
)
