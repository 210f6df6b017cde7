"""The kernel issue's GPU targets, measured side by side in one run on one CUDA device.

Each section first checks the kernel against a reference on the same inputs (relative L2 error of
the output and of every gradient), then times it with CUDA events (median of ``--reps`` after a
warm-up that absorbs compilation). Sections:

* ``ceilings``: device-to-device copy bandwidth (bytes read + written) and a bf16 8192³ matrix
  product, so that bandwidth fractions use this card's measured ceiling as well as the datasheet.
* ``galerkin``: fused Triton Galerkin attention (per-head LayerNorm of K and V fused, quadrature
  weights) at ``N = 2^20``, bf16, 8 heads × 64. Forward bandwidth = the bytes that must move (read
  q, k, v and the weights once, write the output once) / forward time. Forward+backward against the
  plain-PyTorch ``reference`` backend on the same inputs.
* ``weighted_softmax``: the Triton weighted-softmax kernel (key quadrature weights as a log bias;
  and with the learned distance bias) against PyTorch's flash SDPA without bias
  (``SDPBackend.FLASH_ATTENTION``) at the same shape. Forward at ``N = 2^20`` when the predicted
  time fits ``--max-call-s``; forward+backward at ``--softmax-bwd-n``.
* ``sphere_neighborhood``: :class:`sciattn.spherical.SphericalNeighborhoodAttention` with its
  q/k/v/output projections, batch 1, 64 channels, one head, fp32, on the 1° equiangular grid
  (180 × 360) at θ = 0.017 and 0.03 rad: forward, and backward alone (events around
  ``backward()``), the quantities of torch-harmonics' published module-level benchmark
  (H100 80GB, fp32: θ=0.017 fwd 0.550 / bwd 1.115 ms, θ=0.03 fwd 0.801 / bwd 1.781 ms; its
  ``benchmarks/reference_results.csv``), which are printed beside ours as published figures,
  not rerun here.

    python benchmarks/gpu_targets.py --out benchmarks/results      # needs CUDA and Triton

Writes ``gpu_targets.json`` and ``gpu_targets.md`` under ``--out`` (after every section, so a run
killed part-way keeps what it measured).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from _timing import median_ms

ROOT = Path(__file__).resolve().parents[1]
DATASHEET_HBM_TBPS = {"H200": 4.8, "H100": 3.35}  # vendor datasheets (SXM parts), for the second fraction
PUBLISHED_TH_H100 = {0.017: (0.550, 1.115), 0.03: (0.801, 1.781)}  # torch-harmonics, fp32, 1°, ms (fwd, bwd)


DEV = "cuda"  # --device; "cpu" (with TRITON_INTERPRET=1 and tiny sizes) only to test this script


def _sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


class _Timer:
    """Milliseconds between ``start()`` and ``stop()``: CUDA events on CUDA, the host clock on CPU."""

    def start(self):
        if DEV == "cuda":
            self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.a.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> float:
        if DEV == "cuda":
            self.b.record()
            torch.cuda.synchronize()
            return self.a.elapsed_time(self.b)
        return 1e3 * (time.perf_counter() - self.t0)


def event_ms(fn, reps: int, warmup: int = 1) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` runs (CUDA events on CUDA)."""
    return median_ms(fn, reps, warmup, cuda=DEV == "cuda")


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    if not torch.isfinite(got).all():
        return float("nan")
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _rand(*shape, gen, device, dtype, scale=1.0, shift=0.0, grad=True):
    t = (scale * torch.randn(*shape, generator=gen) + shift).to(device=device, dtype=dtype)
    return t.requires_grad_(grad)


# ----------------------------------------------------------------------------------------------


def ceilings(cfg) -> dict:
    x = torch.randn(cfg.copy_elems, device=DEV, dtype=torch.float32)  # 4 GiB by default
    y = torch.empty_like(x)
    ms = event_ms(lambda: y.copy_(x), cfg.reps, warmup=2)
    copy_tbps = 2 * x.numel() * 4 / (ms * 1e-3) / 1e12
    m = cfg.matmul_n
    a = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
    mm_ms = event_ms(lambda: a @ b, cfg.reps, warmup=3)
    return {"copy_TBps": copy_tbps, "copy_bytes": 2 * x.numel() * 4, "copy_ms": ms,
            "bf16_matmul_n": m, "bf16_matmul_TFLOPs": 2 * m**3 / (mm_ms * 1e-3) / 1e12}


def galerkin(cfg, copy_tbps: float | None) -> dict:
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
    x = inputs(cfg.check_n, dt, seed=1)
    ref_x = {k: t.detach().float().requires_grad_(t.requires_grad) for k, t in x.items()}
    got, want = call(x, "triton"), call(ref_x, "reference")
    cot = torch.randn_like(want)
    leaves = [k for k, t in x.items() if t.requires_grad]
    g1 = torch.autograd.grad(got, [x[k] for k in leaves], cot.to(dt))
    g2 = torch.autograd.grad(want, [ref_x[k] for k in leaves], cot)
    out["check_N"] = cfg.check_n
    out["rel_err"] = {"out": rel_err(got, want), **{f"grad_{k}": rel_err(a, b) for k, a, b in zip(leaves, g1, g2)}}
    del x, ref_x, got, want, g1, g2

    n = cfg.n
    x = inputs(n, dt)
    leaves = [t for t in x.values() if t.requires_grad]
    with torch.no_grad():
        fwd = {b: event_ms(lambda b=b: call(x, b), cfg.reps, warmup=2) for b in ("triton", "reference")}
    cot = torch.randn(1, h, n, d, device=dev, dtype=dt)

    def fb(b):
        torch.autograd.grad(call(x, b), leaves, cot)

    both = {b: event_ms(lambda b=b: fb(b), cfg.reps, warmup=2) for b in ("triton", "reference")}
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
        x = inputs(cfg.check_n // 4, seed=2)
        ref_x = {k: t.detach().float().requires_grad_(t.requires_grad) for k, t in x.items()}
        got, want = ours(x, distance), ours(ref_x, distance, "reference")
        cot = torch.randn_like(want)
        names = ["q", "k", "v"] + (["pos", "lam"] if distance else [])
        g1 = torch.autograd.grad(got, [x[k] for k in names], cot.to(dt))
        g2 = torch.autograd.grad(want, [ref_x[k] for k in names], cot)
        out["check"]["distance" if distance else "weights"] = {
            "N": cfg.check_n // 4, "out": rel_err(got, want), **{f"grad_{k}": rel_err(a, b) for k, a, b in zip(names, g1, g2)}}

    variants = {"flash_sdpa_no_bias": flash, "triton_weights": lambda x: ours(x, False),
                "triton_weights_distance": lambda x: ours(x, True)}
    rows = []
    # forward: predict the cost at N from a probe at 2^16 (quadratic), run when it fits
    probe_n = min(2**16, cfg.n)
    x = inputs(probe_n)
    with torch.no_grad():
        probe = {k: event_ms(lambda f=f: f(x), 3) for k, f in variants.items()}
    for n in sorted({probe_n, cfg.n}):
        if n != probe_n:
            x = inputs(n)
        row = {"N": n, "pass": "forward"}
        for k, f in variants.items():
            predicted = probe[k] * (n / probe_n) ** 2 / 1e3
            if predicted > cfg.max_call_s:
                row[k] = None
                row[f"{k}_skipped"] = f"predicted {predicted:.1f} s per call > --max-call-s {cfg.max_call_s}"
                continue
            reps = cfg.reps if predicted < 0.5 else (2 if predicted < 3 else 1)
            with torch.no_grad():
                row[k] = probe[k] if n == probe_n else event_ms(lambda f=f, x=x: f(x), reps, warmup=0)
        rows.append(row)
        del x
    n = cfg.softmax_bwd_n
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
    from sciattn.spherical import SphericalNeighborhoodAttention

    rows = []
    for theta in (0.017, 0.03):
        t0 = time.perf_counter()
        torch.manual_seed(0)
        shape = tuple(cfg.sphere_shape)
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
                "grad_params": rel_err(torch.cat([a.flatten() for a in gg[1:]]), torch.cat([b.flatten() for b in gw[1:]]))}
        layer.backend = None  # the automatic choice, as users get it
        rows_backend = select_backend_name(layer, x)
        with torch.no_grad():
            fwd = event_ms(lambda layer=layer, x=x: layer(x), cfg.reps, warmup=3)
        cot = torch.randn(1, 64, *shape, device=DEV)
        bwd_times, timer = [], _Timer()
        for i in range(cfg.reps + 3):
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
        rows.append({"grid": f"equiangular {shape[0]}x{shape[1]}", "theta": theta, "channels": 64, "heads": 1, "dtype": "float32",
                     "neighbours_per_point": nnz / (shape[0] * shape[1]), "csr_setup_s_cpu": setup_s,
                     "backend": rows_backend, "forward_ms": fwd, "backward_ms": statistics.median(bwd_times),
                     "torch_harmonics_H100_published_ms": {"forward": pub[0], "backward": pub[1]},
                     "rel_err_vs_reference": errs})
    return {"rows": rows}


def select_backend_name(layer, x) -> str:
    """The neighbourhood backend the automatic choice picks for this layer and input."""
    from sciattn._dispatch import select_backend

    return select_backend("neighborhood", None, device=x.device, dtype=x.dtype, head_dim=64, has_mask=False,
                          has_weights=True, requires_grad=True).name


# ----------------------------------------------------------------------------------------------


def write_markdown(path: Path, s: dict) -> None:
    m = s["meta"]
    lines = [f"# Kernel targets on {m['device_name']}", "",
             f"{m['date']}, torch {m['torch']}, triton {m['triton']}, CUDA {m['cuda']}, {m['sms']} SMs. "
             f"Command: `{m['command']}`. Times are medians of CUDA-event timings after warm-up.", ""]
    c = s.get("ceilings")
    if isinstance(c, dict) and "copy_TBps" in c:
        lines += [f"Measured ceilings: device-to-device copy {c['copy_TBps']:.2f} TB/s (read + write), "
                  f"bf16 8192³ matmul {c['bf16_matmul_TFLOPs']:.0f} TFLOP/s.", ""]
    g = s.get("galerkin")
    if isinstance(g, dict) and "forward_ms" in g:
        f, b = g["forward_ms"], g["forward_backward_ms"]
        lines += [f"## Galerkin attention, N = 2^{int(math.log2(g['N']))}, bf16, {g['heads']} heads × {g['head_dim']}, "
                  "fused K/V LayerNorm, quadrature weights", "",
                  "| backend | forward (ms) | fwd+bwd (ms) |", "|---|---:|---:|",
                  f"| triton | {f['triton']:.3f} | {b['triton']:.3f} |",
                  f"| reference (PyTorch) | {f['reference']:.3f} | {b['reference']:.3f} |", "",
                  f"- forward moves at least {g['bytes_must_move_forward'] / 2**30:.2f} GiB: "
                  f"{g['forward_TBps']:.2f} TB/s = {100 * g['forward_fraction_of_measured_copy']:.0f}% of the measured "
                  "copy bandwidth" + (f", {100 * g['forward_fraction_of_datasheet']:.0f}% of the datasheet "
                                      f"{g['datasheet_TBps']} TB/s" if g.get("datasheet_TBps") else ""),
                  f"- forward+backward: triton is {g['speedup_forward_backward_vs_reference']:.2f}× faster than the "
                  f"reference (forward {g['speedup_forward_vs_reference']:.2f}×)",
                  f"- check at N = {g['check_N']} (bf16 kernel vs float32 reference, relative L2): "
                  + ", ".join(f"{k} {v:.1e}" for k, v in g["rel_err"].items()), ""]
    w = s.get("weighted_softmax")
    if isinstance(w, dict) and "rows" in w:
        lines += ["## Weighted softmax attention against flash SDPA (no bias), bf16, 8 heads × 64", "",
                  "| N | pass | flash SDPA (ms) | triton, weights (ms) | ratio | triton, weights + distance (ms) | ratio |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for r in w["rows"]:
            def ms(k, r=r):
                return "–" if r.get(k) is None else f"{r[k]:.2f}"

            ratio = ms
            lines.append(f"| 2^{int(math.log2(r['N']))} | {r['pass']} | {ms('flash_sdpa_no_bias')} | {ms('triton_weights')} | "
                         f"{ratio('triton_weights_over_flash')} | {ms('triton_weights_distance')} | "
                         f"{ratio('triton_weights_distance_over_flash')} |")
        skips = [f"{k}: {v}" for r in w["rows"] for k, v in r.items() if k.endswith("_skipped")]
        lines += [""] + [f"- skipped {x}" for x in skips]
        lines += ["- check (bf16 kernel vs float32 reference, relative L2): " + "; ".join(
            f"{name}: " + ", ".join(f"{k} {v:.1e}" for k, v in c.items() if k != "N") for name, c in w["check"].items()), ""]
    sp = s.get("sphere_neighborhood")
    if isinstance(sp, dict) and "rows" in sp:
        lines += ["## Spherical neighbourhood attention layer (projections included), "
                  f"{sp['rows'][0]['grid']} (180×360 is 1°), 64 channels, 1 head, batch 1, fp32, "
                  f"backend `{sp['rows'][0]['backend']}` (automatic choice)", "",
                  "| θ (rad) | neighbours/point | forward (ms) | backward (ms) | torch-harmonics H100, published: fwd / bwd (ms) |",
                  "|---|---:|---:|---:|---|"]
        for r in sp["rows"]:
            p = r["torch_harmonics_H100_published_ms"]
            lines.append(f"| {r['theta']} | {r['neighbours_per_point']:.1f} | {r['forward_ms']:.3f} | {r['backward_ms']:.3f} | "
                         f"{p['forward']} / {p['backward']} |")
        lines += ["", "- the published figures are torch-harmonics' own H100 measurements (not rerun here); this run is "
                  "on the device named above", "- check (triton vs reference backend, fp32, relative L2): " + "; ".join(
                      f"θ={r['theta']}: " + ", ".join(f"{k} {v:.1e}" for k, v in r["rel_err_vs_reference"].items())
                      for r in sp["rows"]), ""]
    errors = {k: v["error"] for k, v in s.items() if isinstance(v, dict) and "error" in v}
    if errors:
        lines += ["## Sections that failed", ""] + [f"- {k}: `{v}`" for k, v in errors.items()] + [""]
    path.write_text("\n".join(lines))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2**20, help="N for the Galerkin and softmax targets")
    ap.add_argument("--softmax-bwd-n", type=int, default=2**18, help="N of the softmax forward+backward comparison")
    ap.add_argument("--max-call-s", type=float, default=12.0, help="skip softmax cases predicted slower per call")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sections", nargs="+", default=["ceilings", "galerkin", "sphere_neighborhood", "weighted_softmax"])
    ap.add_argument("--check-n", type=int, default=8192, help="N of the correctness checks")
    ap.add_argument("--copy-elems", type=int, default=2**30, help="float32 elements of the copy-bandwidth test")
    ap.add_argument("--matmul-n", type=int, default=8192)
    ap.add_argument("--sphere-shape", type=int, nargs=2, default=[180, 360])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu only tests this script (TRITON_INTERPRET=1, tiny sizes); numbers need cuda")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    cfg = ap.parse_args(argv)
    global DEV
    DEV = cfg.device
    if DEV == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_targets.py --device cuda: expected a CUDA device, found none")
    import triton

    if DEV == "cuda":
        p = torch.cuda.get_device_properties(0)
        name, sms = p.name, p.multi_processor_count
    else:
        name, sms = f"CPU ({platform.machine()}), script test only", 0
    s = {"meta": {"date": datetime.date.today().isoformat(), "device_name": name, "sms": sms,
                  "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
                  "python": platform.python_version(),
                  "command": "python benchmarks/gpu_targets.py " + " ".join(sys.argv[1:] if argv is None else argv)}}
    cfg.out.mkdir(parents=True, exist_ok=True)
    copy_tbps = None
    for name in cfg.sections:
        t0 = time.perf_counter()
        try:
            if name == "ceilings":
                s[name] = ceilings(cfg)
                copy_tbps = s[name]["copy_TBps"]
            elif name == "galerkin":
                s[name] = galerkin(cfg, copy_tbps)
            elif name == "weighted_softmax":
                s[name] = weighted_softmax(cfg)
            elif name == "sphere_neighborhood":
                s[name] = sphere_neighborhood(cfg)
            else:
                raise ValueError(f"--sections: unknown section {name!r}")
        except Exception as err:  # noqa: BLE001 - one failing section must not lose the others
            s[name] = {"error": f"{type(err).__name__}: {str(err)[:300]}", "traceback": traceback.format_exc()[-2000:]}
        s[name]["seconds"] = time.perf_counter() - t0
        if DEV == "cuda":
            torch.cuda.empty_cache()
        print(json.dumps({name: s[name]}, default=str)[:3000], flush=True)
        (cfg.out / "gpu_targets.json").write_text(json.dumps(s, indent=2, default=str) + "\n")
        write_markdown(cfg.out / "gpu_targets.md", s)
    print((cfg.out / "gpu_targets.md").read_text())
    return s


if __name__ == "__main__":
    main()
