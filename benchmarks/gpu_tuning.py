"""Launch-configuration sweep of the three Triton kernels at the kernel targets' shapes.

The block sizes, warps and pipeline stages in ``sciattn.*._triton`` were first chosen from sm_90
builds alone (no spills, shared memory fits). This benchmark times the candidates on a GPU, side by
side in one run, and checks each against the configuration in force (relative L2 of the output, and
of the gradients where the backward is swept), so a faster configuration that computes something
else is reported as such, not chosen. Sections (``sections`` parameter), each in its own process
(``python -m benchmarks.gpu_tuning --worker SECTION``, so a kernel fault cannot poison the others;
``timeout`` seconds each):

* ``galerkin``: N = 2^20, bf16, 8 heads × 64, fused K/V LayerNorm, weights. Forward: the
  (rows per block, warps, stages) of the ``kv`` and ``qm`` kernels and the programs per SM of the
  row split; forward+backward: the same for ``dq_dm`` and ``dkv``.
* ``softmax``: N = 2^16, bf16, 8 heads × 64 (compute-bound already, so ratios hold at 2^20):
  (BLOCK_M, BLOCK_N, warps, stages) of the forward and of the two backward kernels, with flash
  SDPA (no bias) timed in the same process for the ratio.
* ``neighborhood``: the spherical neighbourhood layer's op on the 1° grid (180×360, fp32, 64
  channels, θ = 0.017 and 0.03): neighbours per step and warps, forward and backward.

One row per candidate (its ``config``, the configuration ``in_force`` during the run, times, ratio to flash,
errors against the configuration in force, or the ``error`` it raised); a section that fails or times out is
one row with its ``error``. The notes name the fastest checked candidate of each sweep.

    python -m benchmarks run gpu_tuning [--quick] [--set sections='["softmax"]'] [--set timeout=60]

Needs CUDA and Triton. Rows are appended to ``benchmarks/results/gpu_tuning.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from .harness import module_benchmarks

ROOT = Path(__file__).resolve().parents[1]
SECTION_NAMES = ("galerkin", "softmax", "neighborhood")
SCHEMA = {
    "section": "str", "swept": "str", "theta": "float?", "shape": "str?", "config": "dict", "in_force": "dict?",
    "forward_ms": "float?", "forward_backward_ms": "float?", "op_forward_ms": "float?", "backward_ms": "float?",
    "TBps": "float?", "flash_ms": "float?", "over_flash": "float?", "rel_err": "float?", "grad_rel_err": "float?",
    "error": "str?",
}
PARAMS = {"device": "cuda", "sections": list(SECTION_NAMES), "timeout": 120.0}
QUICK = {"sections": ["neighborhood"], "timeout": 60.0}


def ms(fn, reps=10, warmup=2):
    from ._timing import median_ms

    return median_ms(fn, reps, warmup, cuda=True)


def rel(a, b):
    import torch

    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30)) if torch.isfinite(a).all() else float("nan")


def _try(rows, cfg, fn):
    try:
        rows.append({**cfg, **fn()})
    except Exception as err:  # noqa: BLE001 - a configuration that fails to compile or launch is reported
        rows.append({**cfg, "error": f"{type(err).__name__}: {str(err)[:160]}"})
    print(json.dumps(rows[-1]), flush=True)


def galerkin_section() -> dict:
    import torch

    import sciattn.galerkin._triton as T
    from sciattn.galerkin.functional import KVNorm, galerkin_attention

    n, h, d = 2**20, 8, 64
    g = torch.Generator().manual_seed(0)

    def r(*s, scale=1.0, shift=0.0):
        return (scale * torch.randn(*s, generator=g) + shift).cuda().to(torch.bfloat16).requires_grad_()

    q, k, v = r(1, h, n, d), r(1, h, n, d), r(1, h, n, d)
    w = (torch.rand(1, n, generator=g) + 0.5).cuda().to(torch.bfloat16)
    norm = KVNorm(r(h, d, scale=0.1, shift=1.0), r(h, d, scale=0.1), r(h, d, scale=0.1, shift=1.0), r(h, d, scale=0.1), 1e-5)
    leaves = [q, k, v, *norm[:4]]
    cot = torch.randn(1, h, n, d, generator=g).cuda().to(torch.bfloat16)

    def call():
        return galerkin_attention(q, k, v, weights=w, backend="triton", kv_norm=norm)

    base_tab = {key: dict(val) for key, val in T._CONFIGS["half"].items()}
    base_pps = T.PROGRAMS_PER_SM
    with torch.no_grad():
        want = call()
    want_g = torch.autograd.grad(call(), leaves, cot)
    must_move = 4 * n * h * d * 2 + n * 2
    fwd_rows, bwd_rows = [], []
    for blk, warps, stages in [(32, 8, 3), (64, 4, 3), (128, 4, 3), (128, 8, 3), (256, 8, 3)]:
        for pps in (4, 16):
            def run_fwd(blk=blk, warps=warps, stages=stages, pps=pps):
                T._CONFIGS["half"]["kv"][64] = T._CONFIGS["half"]["qm"][64] = (blk, warps, stages)
                T.PROGRAMS_PER_SM = pps
                with torch.no_grad():
                    t = ms(call)
                    err = rel(call(), want)
                return {"forward_ms": t, "TBps": must_move / t / 1e9, "rel_err_vs_current": err}

            _try(fwd_rows, {"kv_qm": [blk, warps, stages], "programs_per_sm": pps}, run_fwd)
    T._CONFIGS["half"] = {key: dict(val) for key, val in base_tab.items()}
    T.PROGRAMS_PER_SM = base_pps
    for blk, warps, stages in [(32, 8, 3), (64, 8, 3), (128, 8, 3)]:
        for pps in (4, 16):
            def run_bwd(blk=blk, warps=warps, stages=stages, pps=pps):
                T._CONFIGS["half"]["dq_dm"][64] = T._CONFIGS["half"]["dkv"][64] = (blk, warps, stages)
                T.PROGRAMS_PER_SM = pps
                t = ms(lambda: torch.autograd.grad(call(), leaves, cot))
                got = torch.autograd.grad(call(), leaves, cot)
                return {"forward_backward_ms": t, "grad_rel_err_vs_current": max(rel(a, b) for a, b in zip(got, want_g))}

            _try(bwd_rows, {"dq_dm_dkv": [blk, warps, stages], "programs_per_sm": pps}, run_bwd)
    T._CONFIGS["half"] = base_tab
    T.PROGRAMS_PER_SM = base_pps
    return {"shape": f"N=2^20, bf16, {h} heads x {d}", "current": {k_: v_[64] for k_, v_ in base_tab.items()},
            "current_programs_per_sm": base_pps, "forward": fwd_rows, "forward_backward": bwd_rows}


def softmax_section() -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import sciattn.weighted_softmax._triton as T
    from sciattn.weighted_softmax import weighted_softmax_attention

    n, h, d = 2**16, 8, 64
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, n, d, generator=g).cuda().to(torch.bfloat16).requires_grad_() for _ in range(3))
    w = (torch.rand(1, n, generator=g) + 0.5).cuda().to(torch.bfloat16)
    cot = torch.randn(1, h, n, d, generator=g).cuda().to(torch.bfloat16)

    def call():
        return weighted_softmax_attention(q, k, v, w, backend="triton")

    def flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    with torch.no_grad():
        flash_fwd = ms(flash, 5)
    flash_fb = ms(lambda: torch.autograd.grad(flash(), [q, k, v], cot), 5)
    key = (True, False)
    base = dict(T._CONFIGS[key])
    with torch.no_grad():
        want = call()
    want_g = torch.autograd.grad(call(), [q, k, v], cot)
    fwd_rows, bwd_rows = [], []
    for cfg in [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3), (128, 128, 8, 2),
                (64, 128, 4, 3), (128, 64, 8, 4)]:
        def run_fwd(cfg=cfg):
            T._CONFIGS[key] = {**base, "fwd": cfg}
            with torch.no_grad():
                t = ms(call, 5)
                err = rel(call(), want)
            return {"forward_ms": t, "over_flash": t / flash_fwd, "rel_err_vs_current": err}

        _try(fwd_rows, {"fwd": list(cfg)}, run_fwd)
    T._CONFIGS[key] = dict(base)
    for dkdv, dq in [((32, 64, 8, 2), (64, 32, 8, 2)), ((64, 64, 8, 2), (64, 64, 8, 2)), ((64, 128, 8, 2), (128, 64, 8, 2)),
                     ((64, 64, 4, 3), (64, 64, 4, 3))]:
        def run_bwd(dkdv=dkdv, dq=dq):
            T._CONFIGS[key] = {**base, "dkdv": dkdv, "dq": dq}
            t = ms(lambda: torch.autograd.grad(call(), [q, k, v], cot), 5)
            got = torch.autograd.grad(call(), [q, k, v], cot)
            return {"forward_backward_ms": t, "over_flash": t / flash_fb,
                    "grad_rel_err_vs_current": max(rel(a, b) for a, b in zip(got, want_g))}

        _try(bwd_rows, {"dkdv": list(dkdv), "dq": list(dq)}, run_bwd)
    T._CONFIGS[key] = base
    return {"shape": f"N=2^16, bf16, {h} heads x {d}, weights only", "current": {k_: list(v_) for k_, v_ in base.items()},
            "flash_forward_ms": flash_fwd, "flash_forward_backward_ms": flash_fb, "forward": fwd_rows,
            "forward_backward": bwd_rows}


def neighborhood_section() -> dict:
    import torch

    import sciattn.neighborhood._triton as T
    from sciattn.spherical import SphericalNeighborhoodAttention

    base = T._config
    out = {}
    for theta in (0.017, 0.03):
        torch.manual_seed(0)
        layer = SphericalNeighborhoodAttention(64, 1, (180, 360), theta_cutoff=theta).cuda()
        x = torch.randn(1, 64, 180, 360, device="cuda", requires_grad=True)
        cot = torch.randn(1, 64, 180, 360, device="cuda")
        want = layer(x)
        want_g = torch.autograd.grad(want, [x, *layer.parameters()], cot)
        with torch.no_grad():
            toks = layer._project(x, x, x)
        rows = []
        for bn, warps in ((32, 4), (32, 2), (16, 2), (16, 1), (8, 1), (8, 2)):
            def run(bn=bn, warps=warps, layer=layer, x=x, cot=cot, want=want, want_g=want_g, toks=toks):
                T._config = lambda bd, be, kernel: (bn, warps)
                with torch.no_grad():
                    fwd = ms(lambda: layer(x), 20, 3)
                    op = ms(lambda: layer._attend(*toks), 20, 3)
                times = []
                for i in range(13):
                    y = layer(x)
                    torch.cuda.synchronize()
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    g = torch.autograd.grad(y, [x, *layer.parameters()], cot)
                    b.record()
                    torch.cuda.synchronize()
                    if i >= 3:
                        times.append(a.elapsed_time(b))
                return {"forward_ms": fwd, "op_forward_ms": op, "backward_ms": statistics.median(times), "rel_err_out": rel(layer(x), want),
                        "rel_err_grads": max(rel(p, r) for p, r in zip(g, want_g))}

            _try(rows, {"theta": theta, "neighbours_per_step": bn, "warps": warps}, run)
        T._config = base
        out[str(theta)] = {"rows": rows}
    return out


SECTIONS = {"galerkin": galerkin_section, "softmax": softmax_section, "neighborhood": neighborhood_section}


# ----------------------------------------------------------------------------------------------
# Rows


def _row(section: str, swept: str, config: dict, **fields: Any) -> dict:
    row = dict.fromkeys(SCHEMA)
    row.update(section=section, swept=swept, config=config, **fields)
    for k, v in list(row.items()):  # a non-finite error or time (a kernel that produced NaN) is no number
        if isinstance(v, float) and not math.isfinite(v):
            row[k] = None
            row["error"] = (row["error"] + "; " if row["error"] else "") + f"{k} not finite ({v})"
    return row


_TIMES = ("forward_ms", "forward_backward_ms", "op_forward_ms", "backward_ms")


def rows_from(s: dict) -> list[dict]:
    """The rows of one run from the sections' dicts ``s`` (as the workers return them)."""
    rows = []
    for name in [k for k in SECTION_NAMES if k in s]:
        sec = s[name]
        if "error" in sec:
            rows.append(_row(name, "section", {}, error=sec["error"]))
            continue
        if name == "galerkin":
            in_force = {**sec["current"], "programs_per_sm": sec["current_programs_per_sm"]}
            for swept, key, time_key in (("forward", "kv_qm", "forward_ms"),
                                         ("backward", "dq_dm_dkv", "forward_backward_ms")):
                for r in sec["forward" if swept == "forward" else "forward_backward"]:
                    rows.append(_row(name, swept, {key: r[key], "programs_per_sm": r["programs_per_sm"]},
                                     shape=sec["shape"], in_force=in_force, **{time_key: r.get(time_key)},
                                     TBps=r.get("TBps"), rel_err=r.get("rel_err_vs_current"),
                                     grad_rel_err=r.get("grad_rel_err_vs_current"), error=r.get("error")))
        elif name == "softmax":
            for swept, keys, time_key, flash in (("forward", ("fwd",), "forward_ms", "flash_forward_ms"),
                                                 ("backward", ("dkdv", "dq"), "forward_backward_ms",
                                                  "flash_forward_backward_ms")):
                for r in sec["forward" if swept == "forward" else "forward_backward"]:
                    rows.append(_row(name, swept, {k: r[k] for k in keys}, shape=sec["shape"],
                                     in_force=sec["current"], **{time_key: r.get(time_key)}, flash_ms=sec[flash],
                                     over_flash=r.get("over_flash"), rel_err=r.get("rel_err_vs_current"),
                                     grad_rel_err=r.get("grad_rel_err_vs_current"), error=r.get("error")))
        else:
            for block in sec.values():
                for r in block["rows"]:
                    rows.append(_row(name, "forward and backward", {k: r[k] for k in ("neighbours_per_step", "warps")},
                                     theta=r["theta"], **{k: r.get(k) for k in _TIMES if k in r},
                                     rel_err=r.get("rel_err_out"), grad_rel_err=r.get("rel_err_grads"),
                                     error=r.get("error")))
    return rows


def _check_params(p: dict) -> None:
    if p["device"] != "cuda":
        raise ValueError(f"device: expected 'cuda' (the sweep times compiled Triton kernels), got {p['device']!r}")
    secs = p["sections"]
    if not isinstance(secs, list) or not secs or any(s not in SECTION_NAMES for s in secs):
        raise ValueError(f"sections: expected a non-empty list of {list(SECTION_NAMES)}, got {secs!r}")
    if not isinstance(p["timeout"], (int, float)) or isinstance(p["timeout"], bool) or p["timeout"] <= 0:
        raise ValueError(f"timeout: expected a positive number of seconds per section, got {p['timeout']!r}")
    import torch

    if not torch.cuda.is_available():
        raise ValueError("device: expected 'cuda' with a CUDA device available, got 'cuda' on a machine without CUDA")


def run(params: dict) -> list[dict]:
    _check_params(params)
    try:
        import triton  # noqa: F401
    except ImportError as err:
        raise ValueError(f"device: the sweep needs Triton on 'cuda'; it is not installed ({err})") from None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    s: dict[str, Any] = {}
    for name in params["sections"]:
        try:
            p = subprocess.run([sys.executable, "-m", "benchmarks.gpu_tuning", "--worker", name], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=params["timeout"])
            print(p.stdout[-4000:], p.stderr[-2000:], flush=True)
            res = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            s[name] = json.loads(res[-1][7:]) if res else {"error": f"exit {p.returncode}: {p.stderr[-300:]}"}
        except subprocess.TimeoutExpired:
            s[name] = {"error": f"timed out after {params['timeout']:.0f} s"}
    return rows_from(s)


# ----------------------------------------------------------------------------------------------
# Table and notes

_CONFIG_LABELS = {
    ("galerkin", "forward"): ("kv, qm (rows, warps, stages)", "forward_ms", "forward (ms)"),
    ("galerkin", "backward"): ("dq_dm, dkv (rows, warps, stages)", "forward_backward_ms", "fwd+bwd (ms)"),
    ("softmax", "forward"): ("fwd (BLOCK_M, BLOCK_N, warps, stages)", "forward_ms", "forward (ms)"),
    ("softmax", "backward"): ("dkdv; dq (BLOCK_M, BLOCK_N, warps, stages)", "forward_backward_ms", "fwd+bwd (ms)"),
}


def _v(v, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def _config(r: dict) -> str:
    return "; ".join(str(v) for k, v in r["config"].items() if k != "programs_per_sm")


def _groups(records: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for rec in records:
        r = rec["row"]
        if r["swept"] != "section":
            out.setdefault((r["section"], r["swept"], r["theta"]), []).append(r)
    return out


def _time_key(group: tuple) -> str:
    return _CONFIG_LABELS[group[:2]][1] if group[0] != "neighborhood" else "forward_ms"


def table(records: list[dict]) -> str:
    """One table per sweep (section, swept kernels, θ), candidates in the order timed."""
    out = []
    for (section, swept, theta), rows in _groups(records).items():
        r0 = rows[0]
        if section == "neighborhood":
            out += [f"Spherical neighbourhood layer, 1° (180×360), fp32, 64 channels, θ = {theta}; one (neighbours per "
                    "step, warps) for the forward and both backward kernels:", "",
                    "| neighbours per step | warps | layer forward (ms) | attention op forward (ms) | layer backward (ms) "
                    "| rel. error out / grads |", "|---:|---:|---:|---:|---:|---|"]
            for r in rows:
                out.append(f"| {r['config']['neighbours_per_step']} | {r['config']['warps']} | " + (
                    f"{r['error']} | | | |" if r["error"] else
                    f"{_v(r['forward_ms'], '.3f')} | {_v(r['op_forward_ms'], '.3f')} | {_v(r['backward_ms'], '.3f')} | "
                    f"{_v(r['rel_err'], '.1e')} / {_v(r['grad_rel_err'], '.1e')} |"))
            out.append("")
            continue
        label, key, head = _CONFIG_LABELS[section, swept]
        force = ", ".join(f"{k} {v}" for k, v in (r0["in_force"] or {}).items() if k != "programs_per_sm")
        pps = (r0["in_force"] or {}).get("programs_per_sm")
        title = "Galerkin" if section == "galerkin" else "Weighted softmax"
        flash = f"; flash SDPA (no bias) {r0['flash_ms']:.2f} ms" if r0["flash_ms"] is not None else ""
        out += [f"{title} ({r0['shape']}), {swept} kernels swept{flash}; in force: {force}"
                + (f", {pps} programs/SM" if pps else "") + ":", ""]
        err = "grad rel. error" if swept == "backward" else "rel. error"
        if section == "galerkin":
            cols = ["programs/SM", head] + (["TB/s"] if swept == "forward" else []) + [err]
        else:
            cols = [head, "/ flash", err]
        out += [f"| {label} | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
        for r in rows:
            cells = [str(r["config"]["programs_per_sm"])] if section == "galerkin" else []
            if r["error"]:
                cells += [r["error"]] + [""] * (len(cols) - len(cells) - 1)
            else:
                cells.append(_v(r[key], ".3f" if section == "galerkin" else ".2f"))
                if section == "galerkin" and swept == "forward":
                    cells.append(_v(r["TBps"], ".2f"))
                if section == "softmax":
                    cells.append(_v(r["over_flash"], ".2f"))
                cells.append(_v(r["grad_rel_err"] if swept == "backward" else r["rel_err"], ".1e"))
            out.append(f"| {_config(r)} | " + " | ".join(cells) + " |")
        out.append("")
    failed = [r["row"] for r in records if r["row"]["swept"] == "section"]
    out += [f"- section {r['section']} failed: `{r['error']}`" for r in failed]
    return "\n".join(out).rstrip("\n")


def fastest(records: list[dict]) -> dict[tuple, dict]:
    """The fastest candidate of each sweep that ran without an error (neighbourhood: by layer forward time)."""
    out = {}
    for group, rows in _groups(records).items():
        key = _time_key(group)
        ok = [r for r in rows if not r["error"] and r[key] is not None]
        if ok:
            out[group] = min(ok, key=lambda r: r[key])
    return out


def notes(records: list[dict]) -> str:
    lines = ["CUDA-event medians; every candidate is checked against the configuration in force during the run "
             "(relative L2 of the output, and of the gradients where the backward is swept)."]
    if any(r["row"]["section"] == "neighborhood" for r in records):
        lines.append("Neighbourhood: the gradient column is the largest relative error over the input and the "
                     "parameter gradients taken one tensor at a time, and is dominated by the key-projection bias, "
                     "whose gradient is zero in exact arithmetic (softmax is invariant to a shift shared by all logits "
                     "of a query), so it compares rounding noise with rounding noise; the output column and the "
                     "summed-gradient check of the `gpu_targets` benchmark are the accuracy checks.")
    best = fastest(records)
    if best:
        parts = []
        for (section, swept, theta), r in best.items():
            keys = [_time_key((section, swept, theta))] + (["backward_ms"] if section == "neighborhood" else [])
            for key in keys:
                ok = [x for x in _groups(records)[section, swept, theta] if not x["error"] and x[key] is not None]
                r = min(ok, key=lambda x, key=key: x[key])
                cfg = ", ".join(f"{k} {v}" for k, v in r["config"].items())
                parts.append(f"{section} {swept}{f' θ={theta}' if theta is not None else ''}, by "
                             f"{key.removesuffix('_ms').replace('_', '+')} time: {cfg} ({r[key]:.3f} ms)")
        lines.append("Fastest candidate of each sweep: " + "; ".join(parts) + ".")
    return "\n\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """One section in this process (``python -m benchmarks.gpu_tuning --worker SECTION``), run by :func:`run`;
    prints ``RESULT`` and the section's JSON."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--worker", required=True, choices=SECTION_NAMES)
    args = ap.parse_args(argv)
    print("RESULT " + json.dumps(SECTIONS[args.worker]()), flush=True)


BENCHMARKS = module_benchmarks(globals(), packages=("triton",),
    description="Launch-configuration sweep of the Triton kernels (Galerkin, weighted softmax, spherical "
                "neighbourhood) at the kernel targets' shapes, each candidate checked against the one in force;",
    claim="the launch configurations of sciattn/*/_triton.py chosen from the sweep's checked candidates "
          "(docs/benchmarks/gpu.md)",
)


if __name__ == "__main__":
    main()
