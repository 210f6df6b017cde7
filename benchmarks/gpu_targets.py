"""The kernel targets on one CUDA device, measured side by side in one run.

Each section first checks the kernel against a reference on the same inputs (relative L2 error of
the output and of every gradient; a ``check`` row), then times it with CUDA events (median of
``reps`` after a warm-up that absorbs compilation). Sections (``sections`` parameter):

* ``ceilings``: device-to-device copy bandwidth (bytes read + written) and a bf16 ``matmul_n``³
  matrix product, so that bandwidth fractions use this card's measured ceiling as well as the datasheet.
* ``galerkin``: fused Triton Galerkin attention (per-head LayerNorm of K and V fused, quadrature
  weights) at ``N = n`` (2^20), bf16, 8 heads × 64. Forward bandwidth = the bytes that must move (read
  q, k, v and the weights once, write the output once) / forward time. Forward and forward+backward
  against the plain-PyTorch ``reference`` backend on the same inputs.
* ``weighted_softmax``: the Triton weighted-softmax kernel (key quadrature weights as a log bias;
  and with the learned distance bias) against PyTorch's flash SDPA without bias
  (``SDPBackend.FLASH_ATTENTION``) at the same shape. Forward at 2^16 and at ``n`` when the time
  predicted from the 2^16 probe (quadratic) fits ``max_call_s``; forward+backward at ``softmax_bwd_n``.
* ``sphere_neighborhood``: :class:`sciattn.spherical.SphericalNeighborhoodAttention` with its
  q/k/v/output projections, batch 1, 64 channels, one head, fp32, on the 1° equiangular grid
  (``sphere_shape`` 180 × 360) at θ = 0.017 and 0.03 rad: forward, and backward alone (events around
  ``backward()``), the quantities of torch-harmonics' published module-level benchmark
  (H100 80GB, fp32: θ=0.017 fwd 0.550 / bwd 1.115 ms, θ=0.03 fwd 0.801 / bwd 1.781 ms; its
  ``benchmarks/reference_results.csv``), which are carried in the rows as published figures, not rerun.

The first row (section ``device``) records the device, its SM count, compute capability, memory, the CUDA
version torch was built with and the driver (``nvidia-smi``). The notes give each target's verdict
(:data:`TARGETS`), computed from the rows. A section that raises is one row with its ``error``; the others run.

    python -m benchmarks run gpu_targets [--quick] [--set sections='["galerkin"]'] [--set n=262144]

Needs CUDA and Triton (``device: "cpu"`` only tests the script under ``TRITON_INTERPRET=1`` with tiny sizes,
and needs Triton installed). Rows are appended to ``benchmarks/results/gpu_targets.jsonl``.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import time
import traceback
from typing import Any

from .harness import format_value, module_benchmarks

DATASHEET_HBM_TBPS = {"H200": 4.8, "H100": 3.35}  # vendor datasheets (SXM parts), for the second fraction
PUBLISHED_TH_H100 = {0.017: (0.550, 1.115), 0.03: (0.801, 1.781)}  # torch-harmonics, fp32, 1°, ms (fwd, bwd)
SECTIONS = ("ceilings", "galerkin", "sphere_neighborhood", "weighted_softmax")
SOFTMAX_VARIANTS = ("flash_sdpa_no_bias", "triton_weights", "triton_weights_distance")

#: The verdicts of the notes: (section, statement). Each is decided from the rows of one run:
#: ``galerkin``: the Triton kernel's forward and forward+backward are faster than the PyTorch reference on the
#: same inputs; ``weighted_softmax``: the Triton kernel with weights only takes at most flash SDPA's (no bias)
#: time at every N and pass timed; ``sphere_neighborhood``: the layer's forward and backward take at most
#: torch-harmonics' published H100 times at both θ.
TARGETS = {  # the kernel issue's targets (H200, bf16, N = 2^20, 8 heads x 64; the sphere layer in fp32)
    "galerkin_bandwidth": "fused Galerkin forward at >= 60% of the HBM bandwidth (measured copy), by bytes that must move",
    "galerkin": "fused Galerkin forward+backward >= 2x faster than the PyTorch reference",
    "weighted_softmax": "weighted softmax attention within 1.3x of flash SDPA without bias at the same shape",
    "sphere_neighborhood": "neighbourhood attention on the 1° sphere (θ = 0.03) faster than torch-harmonics' "
                           "published H100 times (forward 0.80 ms, backward 1.78 ms)",
}
BANDWIDTH_TARGET, SPEEDUP_TARGET, FLASH_TARGET, SPHERE_THETA = 0.60, 2.0, 1.3, 0.03

SCHEMA = {
    "section": "str", "case": "str", "pass": "str?", "N": "int?", "dtype": "str?", "ms": "float?",
    "rate": "float?", "unit": "str?", "speedup_vs_reference": "float?", "over_flash": "float?",
    "published_ms": "float?", "rel_err": "dict?", "skipped": "str?", "error": "str?", "info": "dict?",
}
PARAMS = {"device": "cuda", "sections": list(SECTIONS), "n": 2**20, "softmax_bwd_n": 2**18, "max_call_s": 12.0,
          "reps": 20, "check_n": 8192, "copy_elems": 2**30, "matmul_n": 8192, "sphere_shape": [180, 360]}
QUICK = {"n": 2**16, "softmax_bwd_n": 2**14, "reps": 3, "check_n": 2048, "copy_elems": 2**26, "matmul_n": 2048,
         "sphere_shape": [90, 180]}

DEV = "cuda"  # set by run() from the device parameter


def _sync() -> None:
    import torch

    if DEV == "cuda":
        torch.cuda.synchronize()


class _Timer:
    """Milliseconds between ``start()`` and ``stop()``: CUDA events on CUDA, the host clock on CPU."""

    def start(self):
        import torch

        if DEV == "cuda":
            self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.a.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> float:
        import torch

        if DEV == "cuda":
            self.b.record()
            torch.cuda.synchronize()
            return self.a.elapsed_time(self.b)
        return 1e3 * (time.perf_counter() - self.t0)


def event_ms(fn, reps: int, warmup: int = 1) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` runs (CUDA events on CUDA)."""
    from ._timing import median_ms

    return median_ms(fn, reps, warmup, cuda=DEV == "cuda")


def rel_err(got, want) -> float:
    import torch

    got, want = got.detach().double(), want.detach().double()
    if not torch.isfinite(got).all():
        return float("nan")
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _rand(*shape, gen, device, dtype, scale=1.0, shift=0.0, grad=True):
    import torch

    t = (scale * torch.randn(*shape, generator=gen) + shift).to(device=device, dtype=dtype)
    return t.requires_grad_(grad)


# ----------------------------------------------------------------------------------------------
# The sections: each returns the dict the rows are made from (:func:`rows_from`).


def device_info() -> dict:
    """Name, SMs, capability, memory, CUDA build and driver of the device (CPU: the test mode)."""
    import platform

    import torch

    if DEV != "cuda":
        return {"device_name": f"CPU ({platform.machine()}), script test only", "sms": 0}
    p = torch.cuda.get_device_properties(0)
    driver = None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        driver = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"device_name": p.name, "sms": p.multi_processor_count, "capability": f"sm_{p.major}{p.minor}",
            "memory_GiB": round(p.total_memory / 2**30, 1), "cuda": torch.version.cuda, "nvidia_driver": driver}


def ceilings(cfg) -> dict:
    import torch

    x = torch.randn(cfg["copy_elems"], device=DEV, dtype=torch.float32)  # 4 GiB by default
    y = torch.empty_like(x)
    ms = event_ms(lambda: y.copy_(x), cfg["reps"], warmup=2)
    copy_tbps = 2 * x.numel() * 4 / (ms * 1e-3) / 1e12
    m = cfg["matmul_n"]
    a = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
    mm_ms = event_ms(lambda: a @ b, cfg["reps"], warmup=3)
    return {"copy_TBps": copy_tbps, "copy_bytes": 2 * x.numel() * 4, "copy_ms": ms,
            "bf16_matmul_n": m, "bf16_matmul_ms": mm_ms, "bf16_matmul_TFLOPs": 2 * m**3 / (mm_ms * 1e-3) / 1e12}


def galerkin(cfg, copy_tbps: float | None) -> dict:
    import torch

    from sciattn.galerkin.functional import KVNorm, galerkin_attention

    dt, dev = torch.bfloat16, DEV
    h, d = 8, 64

    def inputs(n, dtype, seed=0):
        g = torch.Generator().manual_seed(seed)
        x = {k: _rand(1, h, n, d, gen=g, device=dev, dtype=dtype) for k in "qkv"}
        x["w"] = (torch.rand(1, n, generator=g) + 0.5).to(dev, dtype)
        for k in ("kw", "vw"):
            x[k] = _rand(h, d, gen=g, device=dev, dtype=dtype, scale=0.1, shift=1.0)
        for k in ("kb", "vb"):
            x[k] = _rand(h, d, gen=g, device=dev, dtype=dtype, scale=0.1)
        return x

    def call(x, backend):
        norm = KVNorm(x["kw"], x["kb"], x["vw"], x["vb"], 1e-5)
        return galerkin_attention(x["q"], x["k"], x["v"], weights=x["w"], backend=backend, kv_norm=norm)

    out = {}
    # correctness: triton in bf16 against the reference in float32 on the same (bf16-rounded) values
    x = inputs(cfg["check_n"], dt, seed=1)
    ref_x = {k: t.detach().float().requires_grad_(t.requires_grad) for k, t in x.items()}
    got, want = call(x, "triton"), call(ref_x, "reference")
    cot = torch.randn_like(want)
    leaves = [k for k, t in x.items() if t.requires_grad]
    g1 = torch.autograd.grad(got, [x[k] for k in leaves], cot.to(dt))
    g2 = torch.autograd.grad(want, [ref_x[k] for k in leaves], cot)
    out["check_N"] = cfg["check_n"]
    out["rel_err"] = {"out": rel_err(got, want), **{f"grad_{k}": rel_err(a, b) for k, a, b in zip(leaves, g1, g2)}}
    del x, ref_x, got, want, g1, g2

    n = cfg["n"]
    x = inputs(n, dt)
    leaves = [t for t in x.values() if t.requires_grad]
    with torch.no_grad():
        fwd = {b: event_ms(lambda b=b: call(x, b), cfg["reps"], warmup=2) for b in ("triton", "reference")}
    cot = torch.randn(1, h, n, d, device=dev, dtype=dt)

    def fb(b):
        torch.autograd.grad(call(x, b), leaves, cot)

    both = {b: event_ms(lambda b=b: fb(b), cfg["reps"], warmup=2) for b in ("triton", "reference")}
    tensor_bytes = n * h * d * 2
    must_move = 4 * tensor_bytes + n * 2 + 4 * h * d * 2  # q, k, v read, out written; weights; LN params
    tbps = must_move / (fwd["triton"] * 1e-3) / 1e12
    name = torch.cuda.get_device_name() if DEV == "cuda" else "cpu"
    sheet = next((v for k, v in DATASHEET_HBM_TBPS.items() if k in name), None)
    out.update({
        "N": n, "heads": h, "head_dim": d, "dtype": "bfloat16",
        "forward_ms": fwd, "forward_backward_ms": both,
        "bytes_must_move_forward": must_move, "forward_TBps": tbps,
        "forward_fraction_of_measured_copy": tbps / copy_tbps if copy_tbps else None,
        "forward_fraction_of_datasheet": tbps / sheet if sheet else None,
        "datasheet_TBps": sheet,
        "speedup_forward_backward_vs_reference": both["reference"] / both["triton"],
        "speedup_forward_vs_reference": fwd["reference"] / fwd["triton"],
    })
    return out


def weighted_softmax(cfg) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from sciattn.weighted_softmax import weighted_softmax_attention

    dt, dev, h, d = torch.bfloat16, DEV, 8, 64

    def inputs(n, seed=0, dtype=dt):
        g = torch.Generator().manual_seed(seed)
        x = {k: _rand(1, h, n, d, gen=g, device=dev, dtype=dtype) for k in "qkv"}
        x["w"] = (torch.rand(1, n, generator=g) + 0.5).to(dev, dtype)
        x["pos"] = _rand(1, n, 3, gen=g, device=dev, dtype=dtype)
        x["lam"] = _rand(h, gen=g, device=dev, dtype=dtype, scale=0.1, shift=1.0)
        return x

    def ours(x, distance, backend="triton"):
        kw = dict(q_pos=x["pos"], k_pos=x["pos"], distance_scale=x["lam"]) if distance else {}
        return weighted_softmax_attention(x["q"], x["k"], x["v"], x["w"], backend=backend, **kw)

    def flash(x):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(x["q"], x["k"], x["v"])

    out = {"check": {}}
    for distance in (False, True):
        x = inputs(cfg["check_n"] // 4, seed=2)
        ref_x = {k: t.detach().float().requires_grad_(t.requires_grad) for k, t in x.items()}
        got, want = ours(x, distance), ours(ref_x, distance, "reference")
        cot = torch.randn_like(want)
        names = ["q", "k", "v"] + (["pos", "lam"] if distance else [])
        g1 = torch.autograd.grad(got, [x[k] for k in names], cot.to(dt))
        g2 = torch.autograd.grad(want, [ref_x[k] for k in names], cot)
        out["check"]["distance" if distance else "weights"] = {
            "N": cfg["check_n"] // 4, "out": rel_err(got, want),
            **{f"grad_{k}": rel_err(a, b) for k, a, b in zip(names, g1, g2)}}

    variants = {"flash_sdpa_no_bias": flash, "triton_weights": lambda x: ours(x, False),
                "triton_weights_distance": lambda x: ours(x, True)}
    rows = []
    # forward: predict the cost at N from a probe at 2^16 (quadratic), run when it fits
    probe_n = min(2**16, cfg["n"])
    x = inputs(probe_n)
    with torch.no_grad():
        probe = {k: event_ms(lambda f=f: f(x), 3) for k, f in variants.items()}
    for n in sorted({probe_n, cfg["n"]}):
        if n != probe_n:
            x = inputs(n)
        row = {"N": n, "pass": "forward"}
        for k, f in variants.items():
            predicted = probe[k] * (n / probe_n) ** 2 / 1e3
            if predicted > cfg["max_call_s"]:
                row[k] = None
                row[f"{k}_skipped"] = f"predicted {predicted:.1f} s per call > max_call_s {cfg['max_call_s']}"
                continue
            reps = cfg["reps"] if predicted < 0.5 else (2 if predicted < 3 else 1)
            with torch.no_grad():
                row[k] = probe[k] if n == probe_n else event_ms(lambda f=f, x=x: f(x), reps, warmup=0)
        rows.append(row)
        del x
    n = cfg["softmax_bwd_n"]
    x = inputs(n)
    row = {"N": n, "pass": "forward_backward"}
    for k, f in variants.items():
        leaves = [x[a] for a in ("q", "k", "v")] + ([x["pos"], x["lam"]] if k.endswith("distance") else [])
        cot = torch.randn(1, h, n, d, device=dev, dtype=dt)
        row[k] = event_ms(lambda f=f, leaves=leaves, cot=cot: torch.autograd.grad(f(x), leaves, cot), 3)
    rows.append(row)
    for r in rows:
        fl = r.get("flash_sdpa_no_bias")
        for k in ("triton_weights", "triton_weights_distance"):
            r[f"{k}_over_flash"] = r[k] / fl if r.get(k) and fl else None
    out["rows"] = rows
    return out


def sphere_neighborhood(cfg) -> dict:
    import torch

    from sciattn.spherical import SphericalNeighborhoodAttention

    rows = []
    for theta in (0.017, 0.03):
        t0 = time.perf_counter()
        torch.manual_seed(0)
        shape = tuple(cfg["sphere_shape"])
        layer = SphericalNeighborhoodAttention(64, 1, shape, grid_in="equiangular", theta_cutoff=theta)
        setup_s = time.perf_counter() - t0
        layer = layer.to(DEV)
        nnz = int(layer.col_indices.numel())
        x = torch.randn(1, 64, *shape, device=DEV, requires_grad=True)
        # correctness: the Triton backend against the reference backend, same weights and input
        layer.backend = "reference"
        want = layer(x)
        gw = torch.autograd.grad(want.square().sum(), [x, *layer.parameters()])
        layer.backend = "triton"
        got = layer(x)
        gg = torch.autograd.grad(got.square().sum(), [x, *layer.parameters()])
        errs = {"out": rel_err(got, want), "grad_x": rel_err(gg[0], gw[0]),
                "grad_params": rel_err(torch.cat([a.flatten() for a in gg[1:]]),
                                       torch.cat([b.flatten() for b in gw[1:]]))}
        layer.backend = None  # the automatic choice, as users get it
        rows_backend = select_backend_name(layer, x)
        with torch.no_grad():
            fwd = event_ms(lambda layer=layer, x=x: layer(x), cfg["reps"], warmup=3)
        cot = torch.randn(1, 64, *shape, device=DEV)
        bwd_times, timer = [], _Timer()
        for i in range(cfg["reps"] + 3):
            y = layer(x)
            _sync()
            timer.start()
            y.backward(cot)
            if i >= 3:
                bwd_times.append(timer.stop())
            else:
                _sync()
            x.grad = None
            layer.zero_grad(set_to_none=True)
        pub = PUBLISHED_TH_H100[theta]
        rows.append({"grid": f"equiangular {shape[0]}x{shape[1]}", "theta": theta, "channels": 64, "heads": 1,
                     "dtype": "float32", "neighbours_per_point": nnz / (shape[0] * shape[1]),
                     "csr_setup_s_cpu": setup_s, "backend": rows_backend, "forward_ms": fwd,
                     "backward_ms": statistics.median(bwd_times),
                     "torch_harmonics_H100_published_ms": {"forward": pub[0], "backward": pub[1]},
                     "rel_err_vs_reference": errs})
    return {"rows": rows}


def select_backend_name(layer, x) -> str:
    """The neighbourhood backend the automatic choice picks for this layer and input."""
    from sciattn._dispatch import select_backend

    return select_backend("neighborhood", None, device=x.device, dtype=x.dtype, head_dim=64, has_mask=False,
                          has_weights=True, requires_grad=True).name


# ----------------------------------------------------------------------------------------------
# Rows


def _row(section: str, case: str, **fields: Any) -> dict:
    """A row of the schema; a non-finite check error (a kernel that produced NaN) is ``None`` and named in ``error``."""
    row = dict.fromkeys(SCHEMA)
    row.update(section=section, case=case, **fields)
    bad = [k for k, v in (row["rel_err"] or {}).items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        row["rel_err"] = {k: None if k in bad else v for k, v in row["rel_err"].items()}
        row["error"] = f"non-finite {', '.join(bad)}"
    return row


def rows_from(s: dict) -> list[dict]:
    """The rows of one run from the sections' dicts ``s`` (``meta`` holds :func:`device_info`)."""
    rows = []
    meta = s.get("meta", {})
    rows.append(_row("device", meta.get("device_name", "not recorded"),
                     info={k: meta[k] for k in ("sms", "capability", "memory_GiB", "cuda") if k in meta}))
    for name in [k for k in s if k != "meta"]:
        sec = s[name]
        if "error" in sec:
            rows.append(_row(name, "error", error=sec["error"]))
        elif name == "ceilings":
            rows.append(_row(name, "copy", dtype="float32", ms=sec["copy_ms"], rate=sec["copy_TBps"], unit="TB/s",
                             info={"bytes": sec["copy_bytes"]}))
            rows.append(_row(name, "bf16_matmul", N=sec["bf16_matmul_n"], dtype="bfloat16",
                             ms=sec.get("bf16_matmul_ms"), rate=sec["bf16_matmul_TFLOPs"], unit="TFLOP/s"))
        elif name == "galerkin":
            info = {"heads": sec["heads"], "head_dim": sec["head_dim"]}
            rows.append(_row(name, "check", N=sec["check_N"], dtype="bfloat16", rel_err=sec["rel_err"],
                             info={"reference_dtype": "float32"}))
            for backend in ("triton", "reference"):
                for p, key in (("forward", "forward_ms"), ("forward_backward", "forward_backward_ms")):
                    row = _row(name, backend, **{"pass": p}, N=sec["N"], dtype=sec["dtype"], ms=sec[key][backend],
                               info=dict(info))
                    if backend == "triton":
                        row["speedup_vs_reference"] = sec[f"speedup_{p}_vs_reference"]
                        if p == "forward":
                            row.update(rate=sec["forward_TBps"], unit="TB/s")
                            row["info"].update(
                                bytes_must_move=sec["bytes_must_move_forward"],
                                fraction_of_measured_copy=sec["forward_fraction_of_measured_copy"],
                                fraction_of_datasheet=sec["forward_fraction_of_datasheet"],
                                datasheet_TBps=sec["datasheet_TBps"])
                    rows.append(row)
        elif name == "weighted_softmax":
            for kind, c in sec["check"].items():
                rows.append(_row(name, f"check {kind}", N=c["N"], dtype="bfloat16",
                                 rel_err={k: v for k, v in c.items() if k != "N"},
                                 info={"reference_dtype": "float32"}))
            for r in sec["rows"]:
                for v in SOFTMAX_VARIANTS:
                    rows.append(_row(name, v, **{"pass": r["pass"]}, N=r["N"], dtype="bfloat16", ms=r.get(v),
                                     over_flash=r.get(f"{v}_over_flash"), skipped=r.get(f"{v}_skipped")))
        elif name == "sphere_neighborhood":
            for r in sec["rows"]:
                info = {"theta": r["theta"], "grid": r["grid"], "channels": r["channels"], "heads": r["heads"],
                        "neighbours_per_point": r["neighbours_per_point"], "csr_setup_s_cpu": r["csr_setup_s_cpu"],
                        "backend": r["backend"]}
                n = math.prod(int(t) for t in r["grid"].split()[-1].split("x"))
                rows.append(_row(name, "check", N=n, dtype=r["dtype"], rel_err=r["rel_err_vs_reference"],
                                 info={"theta": r["theta"], "reference": "backend 'reference'"}))
                for p in ("forward", "backward"):
                    rows.append(_row(name, "layer", **{"pass": p}, N=n, dtype=r["dtype"], ms=r[f"{p}_ms"],
                                     published_ms=r["torch_harmonics_H100_published_ms"][p], info=dict(info)))
    return rows


def _check_params(p: dict) -> None:
    if p["device"] not in ("cuda", "cpu"):
        raise ValueError(f"device: expected 'cuda' (or 'cpu', the script test under TRITON_INTERPRET=1), "
                         f"got {p['device']!r}")
    secs = p["sections"]
    if not isinstance(secs, list) or not secs or any(s not in SECTIONS for s in secs):
        raise ValueError(f"sections: expected a non-empty list of {list(SECTIONS)}, got {p['sections']!r}")
    for key in ("n", "softmax_bwd_n", "reps", "check_n", "copy_elems", "matmul_n"):
        if not isinstance(p[key], int) or isinstance(p[key], bool) or p[key] < 1:
            raise ValueError(f"{key}: expected a positive integer, got {p[key]!r}")
    if not isinstance(p["max_call_s"], (int, float)) or p["max_call_s"] <= 0:
        raise ValueError(f"max_call_s: expected a positive number of seconds, got {p['max_call_s']!r}")
    shape = p["sphere_shape"]
    if not (isinstance(shape, list) and len(shape) == 2 and all(isinstance(t, int) and t > 1 for t in shape)):
        raise ValueError(f"sphere_shape: expected [nlat, nlon], two integers > 1, got {shape!r}")
    import torch

    if p["device"] == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: expected 'cuda' with a CUDA device available, got 'cuda' on a machine without CUDA")
    if p["device"] == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("device: 'cpu' only tests the script under the Triton interpreter; expected "
                         f"TRITON_INTERPRET=1 in the environment, got {os.environ.get('TRITON_INTERPRET')!r}")


def run(params: dict) -> list[dict]:
    global DEV
    _check_params(params)
    try:
        import triton  # noqa: F401
    except ImportError as err:
        raise ValueError(f"device: the kernels need Triton on a {params['device']!r} device; it is not "
                         f"installed ({err})") from None
    import torch

    DEV = params["device"]
    s: dict[str, Any] = {"meta": device_info()}
    copy_tbps = None
    for name in params["sections"]:
        try:
            if name == "ceilings":
                s[name] = ceilings(params)
                copy_tbps = s[name]["copy_TBps"]
            elif name == "galerkin":
                s[name] = galerkin(params, copy_tbps)
            elif name == "weighted_softmax":
                s[name] = weighted_softmax(params)
            else:
                s[name] = sphere_neighborhood(params)
        except Exception as err:  # noqa: BLE001 - one failing section must not lose the others
            print(traceback.format_exc()[-2000:], flush=True)
            s[name] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
        if DEV == "cuda":
            torch.cuda.empty_cache()
    return rows_from(s)


# ----------------------------------------------------------------------------------------------
# Table and notes


def _rows(records: list[dict], section: str) -> list[dict]:
    return [r["row"] for r in records if r["row"]["section"] == section]


def _e(v: float | None) -> str:
    return "non-finite" if v is None else f"{v:.1e}"


def _pow2(n: int) -> str:
    k = math.log2(n)
    return f"2^{int(k)}" if k == int(k) else format_value(n)


def _f2(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def _errs(d: dict) -> str:
    return ", ".join(f"{k} {_e(v)}" for k, v in d.items())


def table(records: list[dict]) -> str:
    """One table per section, as measured."""
    out = []
    c = {r["case"]: r for r in _rows(records, "ceilings")}
    if "copy" in c:
        out += ["Measured ceilings:", "", "| ceiling | size | time (ms) | rate |", "|---|---|---:|---:|",
                f"| device-to-device copy (read + write), float32 | {c['copy']['info']['bytes'] / 2**30:.0f} GiB | "
                f"{format_value(c['copy']['ms'])} | {c['copy']['rate']:.2f} TB/s |"]
        if "bf16_matmul" in c:
            m = c["bf16_matmul"]
            out.append(f"| bf16 matmul | {m['N']}³ | {format_value(m['ms'])} | {m['rate']:.0f} TFLOP/s |")
        out.append("")
    g = [r for r in _rows(records, "galerkin") if r["pass"]]
    if g:
        i = g[0]["info"]
        out += [f"Galerkin attention, N = {_pow2(g[0]['N'])}, {g[0]['dtype']}, {i['heads']} heads × {i['head_dim']}, "
                "fused K/V LayerNorm, quadrature weights:", "",
                "| backend | pass | time (ms) | speed-up vs reference | forward TB/s |", "|---|---|---:|---:|---:|"]
        out += [f"| {r['case']} | {r['pass']} | {r['ms']:.3f} | {_x(r['speedup_vs_reference'])} | "
                f"{_f2(r['rate'])} |" for r in g]
        out.append("")
    w = [r for r in _rows(records, "weighted_softmax") if r["pass"]]
    if w:
        out += ["Weighted softmax attention against flash SDPA (no bias), bf16, 8 heads × 64:", "",
                "| N | pass | flash SDPA (ms) | triton, weights (ms) | / flash | triton, weights + distance (ms) | "
                "/ flash |", "|---|---|---:|---:|---:|---:|---:|"]
        for key in dict.fromkeys((r["N"], r["pass"]) for r in w):
            by = {r["case"]: r for r in w if (r["N"], r["pass"]) == key}

            def ms(v, by=by):
                return "–" if by.get(v, {}).get("ms") is None else f"{by[v]['ms']:.2f}"

            def ratio(v, by=by):
                return "–" if by.get(v, {}).get("over_flash") is None else f"{by[v]['over_flash']:.2f}"

            out.append(f"| {_pow2(key[0])} | {key[1]} | {ms('flash_sdpa_no_bias')} | {ms('triton_weights')} | "
                       f"{ratio('triton_weights')} | {ms('triton_weights_distance')} | "
                       f"{ratio('triton_weights_distance')} |")
        out.append("")
    sp = [r for r in _rows(records, "sphere_neighborhood") if r["case"] == "layer"]
    if sp:
        i = sp[0]["info"]
        out += [f"Spherical neighbourhood attention layer (projections included), {i['grid']}, {i['channels']} "
                f"channels, {i['heads']} head, batch 1, {sp[0]['dtype']}, backend `{i['backend']}` (automatic "
                "choice):", "",
                "| θ (rad) | neighbours/point | forward (ms) | backward (ms) | torch-harmonics H100, published: "
                "fwd / bwd (ms) |", "|---|---:|---:|---:|---|"]
        for theta in dict.fromkeys(r["info"]["theta"] for r in sp):
            by = {r["pass"]: r for r in sp if r["info"]["theta"] == theta}
            f, b = by["forward"], by["backward"]
            out.append(f"| {theta} | {f['info']['neighbours_per_point']:.1f} | {f['ms']:.3f} | {b['ms']:.3f} | "
                       f"{f['published_ms']} / {b['published_ms']} |")
        out.append("")
    failed = [r for r in records if r["row"]["error"]]
    if failed:
        out += ["Failures:", ""] + [f"- {r['row']['section']}{'' if r['row']['case'] == 'error' else ' ' + r['row']['case']}"
                                    f": `{r['row']['error']}`" for r in failed]
    return "\n".join(out).rstrip("\n")


def verdicts(records: list[dict]) -> dict[str, tuple[bool, str]]:
    """``{target: (met, the numbers it was decided on)}`` for each target of :data:`TARGETS` the run measured."""
    out = {}
    g = {r["pass"]: r for r in _rows(records, "galerkin") if r["case"] == "triton"}
    fwd = g.get("forward")
    if fwd and (fwd["info"] or {}).get("fraction_of_measured_copy") is not None:
        frac = fwd["info"]["fraction_of_measured_copy"]
        sheet = fwd["info"].get("fraction_of_datasheet")
        out["galerkin_bandwidth"] = (frac >= BANDWIDTH_TARGET, f"{100 * frac:.0f}% of the measured copy bandwidth"
                                     + (f", {100 * sheet:.0f}% of the datasheet's" if sheet is not None else ""))
    fb = g.get("forward_backward")
    if fb and fb["speedup_vs_reference"] is not None:
        out["galerkin"] = (fb["speedup_vs_reference"] >= SPEEDUP_TARGET,
                           f"{fb['speedup_vs_reference']:.2f}× faster than the reference")
    w = [r for r in _rows(records, "weighted_softmax") if r["case"] == "triton_weights" and r["over_flash"] is not None]
    if w:
        out["weighted_softmax"] = (all(r["over_flash"] <= FLASH_TARGET for r in w), ", ".join(
            f"{r['over_flash']:.2f}× flash's time ({r['pass']}, N = {_pow2(r['N'])})" for r in w))
    sp = [r for r in _rows(records, "sphere_neighborhood")
          if r["case"] == "layer" and (r["info"] or {}).get("theta") == SPHERE_THETA]
    if sp:
        out["sphere_neighborhood"] = (all(r["ms"] < r["published_ms"] for r in sp), ", ".join(
            f"{r['pass']} {r['ms']:.3f} vs {r['published_ms']} ms" for r in sp))
    return out


def notes(records: list[dict]) -> str:
    dev = _rows(records, "device")
    lines = []
    if dev:
        i = dev[0]["info"] or {}
        lines.append(f"Device: {dev[0]['case']}" + "".join(
            f", {fmt.format(i[k])}" for k, fmt in (("sms", "{} SMs"), ("capability", "{}"), ("memory_GiB", "{} GiB"),
                                                  ("cuda", "CUDA {}")) if i.get(k) is not None)
                     + ". Times are medians of CUDA-event timings after warm-up.")
    g = [r for r in _rows(records, "galerkin") if r["case"] == "triton" and r["pass"] == "forward"]
    if g:
        i = g[0]["info"]
        frac = [f"{100 * i[k]:.0f}% of the {what}" for k, what in
                (("fraction_of_measured_copy", "measured copy bandwidth"),
                 ("fraction_of_datasheet", f"datasheet {i['datasheet_TBps']} TB/s")) if i.get(k) is not None]
        lines.append(f"Galerkin forward moves at least {i['bytes_must_move'] / 2**30:.2f} GiB: {g[0]['rate']:.2f} TB/s"
                     + (" = " + ", ".join(frac) if frac else "") + ".")
    checks = [r["row"] for r in records if r["row"]["case"].startswith("check")]
    if checks:
        lines.append("Checks against the reference on the same inputs (relative L2 of the output and each gradient; "
                     "bf16 kernels against a float32 reference, the sphere layer's triton against its reference "
                     "backend in fp32): " + "; ".join(
                         f"{r['section']}{' ' + r['case'][6:] if r['case'] != 'check' else ''}"
                         f"{' θ=' + str(r['info']['theta']) if r['info'] and 'theta' in r['info'] else ''} "
                         f"(N = {format_value(r['N'])}): {_errs(r['rel_err'])}" for r in checks) + ".")
    skips = [r["row"] for r in records if r["row"]["skipped"]]
    if skips:
        lines.append("Not run: " + "; ".join(f"{r['case']} {r['pass']} at N = {_pow2(r['N'])} ({r['skipped']})"
                                             for r in skips) + ".")
    if _rows(records, "sphere_neighborhood"):
        lines.append("The torch-harmonics figures are its own published H100 measurements (not rerun here); this run "
                     "is on the device named above.")
    v = verdicts(records)
    if v:
        lines.append("Targets: " + "; ".join(f"{TARGETS[k]}: {'met' if ok else 'not met'} ({why})"
                                             for k, (ok, why) in v.items()) + ".")
    return "\n\n".join(lines)


BENCHMARKS = module_benchmarks(globals(), packages=("triton",),
    description="Kernel targets on one CUDA device (Galerkin bandwidth and speed-up, weighted softmax against "
                "flash SDPA, spherical neighbourhood attention at 1°), each checked against its reference first;",
    claim="the kernel targets: Galerkin bandwidth and 2x speed-up, weighted softmax within 1.3x of flash SDPA, the "
          "1° sphere layer faster than torch-harmonics' published H100 times (docs/benchmarks/gpu.md)",
)
