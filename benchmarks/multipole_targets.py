"""The multipole layer's speed targets, measured side by side in one process.

One layer each, 64 channels, 4 heads, batch 1, fp32, one thread, on ``sizes`` (256² and 512² by default):

* ``multipole``: :class:`~sciattn.multipole.MultipoleAttention` at its default (physical pyramid, tapered
  windows), through the fused CPU kernels;
* ``multipole_sdpa``: the same layer and weights with the kernels switched off (``SCIATTN_CPU_KERNELS=0``): the
  SDPA path, the algorithm before the kernels (equal outputs, float64-tested);
* ``galerkin``: :class:`~sciattn.GalerkinAttention`; ``spectral_conv``: neuraloperator's ``SpectralConv`` with
  16 modes per axis (FNO's layer).

The methods run interleaved (each repeat times every method once, in turn) and each time is the median of
``reps`` repeats of the thread's CPU time (``time.thread_time``: what another process takes from the machine
does not count, its effect on caches and memory bandwidth still does). The same process measures the fp32
matrix-product rate (2048³) and the copy bandwidth (a 256 MiB clone), and the rows state the layer's useful
FLOPs (:func:`benchmarks.multipole_scaling.useful_gflop`) as a share of that rate. Peak memory is measured per
case in its own process by ``multipole_scaling``.

    python -m benchmarks run multipole_targets [--quick]

The notes judge the grid kernels issue's targets from the rows: the default layer within 1.5× of the Galerkin
layer and 4× of the spectral conv, forward and forward+backward, and at least 25% of the matmul rate.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from .harness import int_param, module_benchmarks

METHODS = ("multipole", "multipole_sdpa", "galerkin", "spectral_conv")
LABELS = {"multipole": "multipole, default (fused CPU kernels)", "multipole_sdpa": "multipole, default, SDPA path",
          "galerkin": "Galerkin", "spectral_conv": "SpectralConv (16 modes)"}
CHANNELS, HEADS = 64, 4
TARGETS = {"galerkin": 1.5, "spectral_conv": 4.0}
TARGET_FLOP_SHARE = 0.25

SCHEMA = {"method": "str", "side": "int", "forward_ms": "float", "forward_backward_ms": "float",
          "ratio_forward": "float?", "ratio_forward_backward": "float?", "useful_gflop": "float?",
          "flop_share": "float?", "matmul_gflops": "float", "copy_gbs": "float", "kernels": "str?"}
PARAMS: dict[str, Any] = {"sizes": [256, 512], "reps": 5}
QUICK = {"sizes": [32, 64], "reps": 2}


def _rates():
    import torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    x = torch.empty(64 * 2 ** 20)
    mm, cp = [], []
    for _ in range(3):
        t0 = time.thread_time()
        a @ b
        mm.append(time.thread_time() - t0)
        t0 = time.thread_time()
        x.clone()
        cp.append(time.thread_time() - t0)
    return 2 * 2048 ** 3 / min(mm) / 1e9, 2 * x.numel() * 4 / min(cp) / 1e9


def run(params: dict[str, Any]) -> list[dict]:
    import torch

    from sciattn import GalerkinAttention
    from sciattn.multipole import MultipoleAttention, _cpu_extension

    from .multipole_scaling import useful_gflop

    reps = int_param(params, "reps")
    sizes = params["sizes"]
    if not isinstance(sizes, list) or not sizes or not all(isinstance(n, int) and n >= 8 for n in sizes):
        raise ValueError(f"sizes: expected a non-empty list of grid sides >= 8, got {sizes!r}")
    from neuralop.layers.spectral_convolution import SpectralConv

    torch.set_num_threads(1)
    torch.manual_seed(0)
    mano = MultipoleAttention(CHANNELS, HEADS, 2)
    layers = {"multipole": mano, "multipole_sdpa": mano, "galerkin": GalerkinAttention(CHANNELS, HEADS),
              "spectral_conv": SpectralConv(CHANNELS, CHANNELS, (16, 16))}
    kernels = _cpu_extension.why_not() or "built"
    rows = []
    for n in sizes:
        x = torch.randn(1, CHANNELS, n, n)
        xg = x.clone().requires_grad_()

        def call(method, inp):
            if method == "multipole_sdpa":
                os.environ[_cpu_extension.ENV_SWITCH] = "0"
            try:
                if method == "galerkin":
                    return layers[method](inp.flatten(2).transpose(1, 2))
                return layers[method](inp)
            finally:
                os.environ.pop(_cpu_extension.ENV_SWITCH, None)

        fwd = {m: [] for m in METHODS}
        both = {m: [] for m in METHODS}
        for m in METHODS:  # warm-up: kernels built, geometry cached, allocator primed
            with torch.no_grad():
                call(m, x)
            call(m, xg).square().mean().backward()
        for _ in range(reps):
            for m in METHODS:
                with torch.no_grad():
                    t0 = time.thread_time()
                    call(m, x)
                    fwd[m].append(time.thread_time() - t0)
                t0 = time.thread_time()
                call(m, xg).square().mean().backward()
                both[m].append(time.thread_time() - t0)
        matmul, copy = _rates()
        med = {m: (statistics.median(fwd[m]), statistics.median(both[m])) for m in METHODS}
        gflop = useful_gflop(mano, n)
        for m in METHODS:
            f, b = med[m]
            mine = m in ("multipole", "multipole_sdpa")
            rows.append({"method": m, "side": n, "forward_ms": 1e3 * f, "forward_backward_ms": 1e3 * b,
                         "ratio_forward": med["multipole"][0] / f if m != "multipole" else None,
                         "ratio_forward_backward": med["multipole"][1] / b if m != "multipole" else None,
                         "useful_gflop": gflop if mine else None,
                         "flop_share": gflop / f / matmul if mine else None,
                         "matmul_gflops": matmul, "copy_gbs": copy, "kernels": kernels if mine else None})
            print({k: rows[-1][k] for k in ("method", "side", "forward_ms", "forward_backward_ms")}, flush=True)
    return rows


def notes(records: list[dict]) -> str:
    """The targets' verdicts from the rows."""
    rows = [r["row"] for r in records]
    out = ["Times: median thread CPU time of the repeats, methods interleaved in one process. ratio: the default "
           "layer's time over the row's method's (so 1.5 means the default takes 1.5× as long)."]
    for side in sorted({r["side"] for r in rows}):
        at = {r["method"]: r for r in rows if r["side"] == side}
        if "multipole" not in at:
            continue
        parts = []
        for m, target in TARGETS.items():
            if m in at and at[m]["ratio_forward"] is not None:
                r = at[m]
                ok = max(r["ratio_forward"], r["ratio_forward_backward"]) <= target
                parts.append(f"/ {LABELS[m]}: {r['ratio_forward']:.2f}× forward, {r['ratio_forward_backward']:.2f}× "
                             f"forward+backward (≤ {target:g}×: {'met' if ok else 'not met'})")
        d = at["multipole"]
        parts.append(f"useful FLOPs {d['useful_gflop']:.2f} GFLOP per forward = {d['flop_share']:.0%} of the "
                     f"{d['matmul_gflops']:.0f} GFLOP/s matmul rate (≥ {TARGET_FLOP_SHARE:.0%}: "
                     + ("met" if d["flop_share"] >= TARGET_FLOP_SHARE else "not met") + ")")
        if "multipole_sdpa" in at:
            s = at["multipole_sdpa"]
            parts.append(f"the fused kernels are {1 / s['ratio_forward']:.2f}× faster than the SDPA path forward and "
                         f"{1 / s['ratio_forward_backward']:.2f}× forward+backward")
        out.append(f"\n{side}²: " + "; ".join(parts) + ".")
    return "\n".join(out)


BENCHMARKS = module_benchmarks(globals(), packages=("neuraloperator",),
    labels={"side": "grid side", "forward_ms": "forward (ms)", "forward_backward_ms": "forward+backward (ms)",
            "ratio_forward": "default / this, forward", "ratio_forward_backward": "default / this, fwd+bwd",
            "useful_gflop": "useful GFLOP", "flop_share": "share of matmul rate",
            "matmul_gflops": "matmul GFLOP/s", "copy_gbs": "copy GB/s"},
    description="The default multipole layer against its SDPA path, the Galerkin layer and FNO's spectral conv, "
                "interleaved in one process (1 thread, fp32);",
    claim="the grid kernels issue's targets: within 1.5x of Galerkin and 4x of SpectralConv, >= 25% of the "
          "matmul rate (docs/benchmarks/kernels.md)",
)
