"""Speed and memory of one spherical attention layer (global and geodesic-disc neighbourhood) on the CPU, against
torch-harmonics' layers when it is installed.

Cases (rows with ``part = "case"``): Legendre–Gauss grids ``nlat x 2 nlat`` for each of ``sizes``, each of
``channels``, one head, batch 1, self-attention with q/k/v/output projections
(:class:`sciattn.spherical.SphericalAttention` and :class:`~sciattn.spherical.SphericalNeighborhoodAttention` at
the default cutoff, one latitude spacing, plus the spherical transformer's cutoff ``(7/√π)·Δθ`` on the grids of
``transformer_cutoff_sizes``). Each case runs in a fresh subprocess (``python -m benchmarks.spherical_attention
--worker SPEC``): setup time (index construction), forward and forward+backward time (median of ``reps`` after a
warm-up; a case whose first call takes over 5 s is timed once, warm-up included) and peak memory (growth of the
subprocess's maximum resident set size over the case).

When ``torch_harmonics`` imports (the ``sphere`` extra; its version is recorded), the same cases run with its
``AttentionS2`` / ``NeighborhoodAttentionS2`` (CPU kernel) as the ``th_*`` fields (its global layer only up to
``th_global_max``); otherwise ``th_status`` says "torch-harmonics not available" and those fields are empty.

Side by side (rows with ``part = "side_by_side"``, only with torch-harmonics): both neighbourhood layers in one
process at ``pair_nlat`` (each of ``pair_channels``, default cutoff): every round calls ours and torch-harmonics'
layer once each, in alternating order, so both see the same machine state; the medians over ``rounds`` and the
median and quartiles of the per-round ratio (torch-harmonics time / ours). On a shared machine that ratio is the
number to read; the per-case medians can drift between subprocesses.

    python -m benchmarks run spherical_attention [--quick] [--set reps=7] [--set torch_harmonics=false]
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any

from .harness import ROOT, module_benchmarks

SLOW_S = 5.0  # a case whose first call takes longer is timed once


# ---- the subprocess worker -----------------------------------------------------------------------------------------


def _timed(fn, n: int) -> float:
    import time

    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return sorted(out)[len(out) // 2]


def _layer(impl: str, kind: str, shape: tuple[int, int], channels: int, theta: float | None):
    grid = "legendre-gauss"
    if impl == "sciattn":
        from sciattn.spherical import SphericalAttention, SphericalNeighborhoodAttention

        if kind == "global":
            layer = SphericalAttention(channels, 1, shape, grid_in=grid)
        else:
            layer = SphericalNeighborhoodAttention(channels, 1, shape, grid_in=grid, theta_cutoff=theta)
        nnz = layer.col_indices.numel() if kind != "global" else (shape[0] * shape[1]) ** 2
        return layer, nnz
    import torch_harmonics as th

    if kind == "global":
        layer = th.AttentionS2(channels, 1, shape, shape, grid_in=grid, grid_out=grid)
    else:
        layer = th.NeighborhoodAttentionS2(channels, shape, shape, grid_in=grid, grid_out=grid, num_heads=1,
                                           theta_cutoff=theta)
    nnz = layer.psi_col_idx.numel() * shape[1] if kind != "global" else (shape[0] * shape[1]) ** 2
    return layer, nnz


def case_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One case in this process: ``spec = {impl, kind, nlat, channels, theta (None: default), reps, threads}``."""
    import resource
    import time

    import torch

    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(0)
    shape = (int(spec["nlat"]), 2 * int(spec["nlat"]))
    t0 = time.perf_counter()
    layer, nnz = _layer(spec["impl"], spec["kind"], shape, int(spec["channels"]), spec["theta"])
    setup = time.perf_counter() - t0
    x = torch.randn(1, int(spec["channels"]), *shape, requires_grad=True)

    def fwd():
        with torch.no_grad():
            layer(x)

    def fwd_bwd():
        layer(x).square().mean().backward()

    reps = int(spec["reps"])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    fwd()
    first = time.perf_counter() - t
    f = _timed(fwd, reps) if first < SLOW_S else first
    peak_f = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    fwd_bwd()
    first = time.perf_counter() - t
    b = _timed(fwd_bwd, reps) if first < SLOW_S else first
    peak_b = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"setup_s": setup, "forward_s": f, "forward_backward_s": b, "edges": nnz,
            "peak_forward_mb": (peak_f - base) / 1024, "peak_forward_backward_mb": (peak_b - base) / 1024}


def pair_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Both neighbourhood layers side by side: ``spec = {nlat, channels, rounds, threads}``."""
    import time

    import torch

    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(0)
    shape = (int(spec["nlat"]), 2 * int(spec["nlat"]))
    channels = int(spec["channels"])
    layers = {impl: _layer(impl, "neighborhood", shape, channels, None)[0] for impl in ("sciattn", "torch_harmonics")}
    x = torch.randn(1, channels, *shape, requires_grad=True)

    def fwd(layer):
        with torch.no_grad():
            layer(x)

    def fwd_bwd(layer):
        layer(x).square().mean().backward()

    def med(v):
        return sorted(v)[len(v) // 2]

    out = {}
    for name, step in (("forward", fwd), ("forward_backward", fwd_bwd)):
        for layer in layers.values():
            step(layer)  # warm-up
        times: dict[str, list[float]] = {k: [] for k in layers}
        for r in range(int(spec["rounds"])):
            for k in (list(layers) if r % 2 == 0 else list(layers)[::-1]):
                t = time.perf_counter()
                step(layers[k])
                times[k].append(time.perf_counter() - t)
        ratio = sorted(a / b for a, b in zip(times["torch_harmonics"], times["sciattn"], strict=True))
        out[name] = {"sciattn_s": med(times["sciattn"]), "torch_harmonics_s": med(times["torch_harmonics"]),
                     "ratio_median": med(ratio), "ratio_q1": ratio[len(ratio) // 4],
                     "ratio_q3": ratio[(3 * len(ratio)) // 4]}
    return out


def _subprocess(spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"])}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.spherical_attention", "--worker", json.dumps(spec)],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode:
        tail = proc.stderr.strip().splitlines()
        return {"error": tail[-1] if tail else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def torch_harmonics_available() -> bool:
    """Whether ``torch_harmonics`` imports with both attention layers (probed in a subprocess)."""
    probe = "import torch_harmonics as th; th.AttentionS2; th.NeighborhoodAttentionS2"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, cwd=ROOT).returncode == 0


def lg_spacing(nlat: int) -> float:
    """The largest latitude spacing of the Legendre–Gauss grid ``nlat x 2 nlat`` (the default cutoff)."""
    from sciattn.domain import SphereGrid
    from sciattn.spherical.neighborhoods import latitude_spacing

    return float(latitude_spacing(SphereGrid(nlat, 2 * nlat, "legendre-gauss")))


def cases(sizes: list[int], channels: list[int], transformer_sizes: list[int]):
    """``(kind, nlat, channels, theta)``: ``theta`` ``None`` for the default cutoff, else the spherical
    transformer's ``(7/√π)·Δθ`` (formatted to 6 decimals, as the layer receives it)."""
    for nlat in sizes:
        for c in channels:
            yield "global", nlat, c, None
            yield "neighborhood", nlat, c, None
            if nlat in transformer_sizes:
                yield "neighborhood", nlat, c, float(f"{7 / math.sqrt(math.pi) * lg_spacing(nlat):.6f}")


# ---- the harness entry ---------------------------------------------------------------------------------------------

_MEASURES = ("setup_s", "forward_s", "forward_backward_s", "edges", "peak_forward_mb", "peak_forward_backward_mb")
SCHEMA = {
    "part": "str", "layer": "str", "grid": "str", "channels": "int", "theta_cutoff": "str?",
    "edges": "int?", "setup_s": "float?", "forward_s": "float?", "forward_backward_s": "float?",
    "peak_forward_mb": "float?", "peak_forward_backward_mb": "float?", "error": "str?",
    "th_status": "str", "th_edges": "int?", "th_setup_s": "float?", "th_forward_s": "float?",
    "th_forward_backward_s": "float?", "th_peak_forward_mb": "float?", "th_peak_forward_backward_mb": "float?",
    "th_error": "str?",
    # side by side (part = "side_by_side"): one row per pass
    "pass": "str?", "rounds": "int?", "sciattn_s": "float?", "torch_harmonics_s": "float?",
    "ratio_median": "float?", "ratio_q1": "float?", "ratio_q3": "float?",
    "load_average": "str?",
}
PARAMS = {"sizes": [64, 128], "channels": [64, 128], "transformer_cutoff_sizes": [64], "reps": 2, "threads": 1,
          "torch_harmonics": True, "th_global_max": 64, "rounds": 41, "pair_nlat": 64, "pair_channels": [64, 128]}
QUICK = {"sizes": [16], "channels": [16], "transformer_cutoff_sizes": [16], "reps": 1, "th_global_max": 16,
         "rounds": 3, "pair_nlat": 16, "pair_channels": [16]}
TH_NOT_AVAILABLE = "torch-harmonics not available"


def _int_list(params: dict, key: str, least: int, empty: bool = False) -> list[int]:
    v = params[key]
    if (not isinstance(v, list) or (not v and not empty)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= least for n in v)):
        raise ValueError(f"{key}: expected a {'' if empty else 'non-empty '}list of integers >= {least}, got {v!r}")
    return v


def _positive(params: dict, key: str) -> int:
    v = params[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{key}: expected a positive integer, got {v!r}")
    return v


def run(params: dict) -> list[dict]:
    sizes = _int_list(params, "sizes", 4)
    channels = _int_list(params, "channels", 1)
    transformer_sizes = _int_list(params, "transformer_cutoff_sizes", 4, empty=True)
    pair_channels = _int_list(params, "pair_channels", 1, empty=True)
    reps, threads, rounds = (_positive(params, k) for k in ("reps", "threads", "rounds"))
    pair_nlat, th_global_max = _positive(params, "pair_nlat"), _positive(params, "th_global_max")
    if not isinstance(params["torch_harmonics"], bool):
        raise ValueError(f"torch_harmonics: expected true or false, got {params['torch_harmonics']!r}")
    have_th = params["torch_harmonics"] and torch_harmonics_available()
    status_off = TH_NOT_AVAILABLE if params["torch_harmonics"] else "not run (torch_harmonics=false)"
    if not have_th:
        print(status_off, flush=True)
    load = "%.1f, %.1f, %.1f" % os.getloadavg()
    empty = dict.fromkeys(SCHEMA)
    rows = []
    for kind, nlat, c, theta in cases(sizes, channels, transformer_sizes):
        spec = {"kind": kind, "nlat": nlat, "channels": c, "theta": theta, "reps": reps, "threads": threads}
        row = {**empty, "part": "case", "layer": kind, "grid": f"{nlat}×{2 * nlat}", "channels": c,
               "theta_cutoff": None if kind == "global" else (f"{lg_spacing(nlat):.5f}" if theta is None
                                                              else f"{theta:.6f}"),
               "load_average": load}
        ours = _subprocess({**spec, "impl": "sciattn"})
        row.update({k: ours.get(k) for k in _MEASURES}, error=ours.get("error"))
        if not have_th:
            row["th_status"] = status_off
        elif kind == "global" and nlat > th_global_max:
            row["th_status"] = f"not run (time budget: global layer only up to nlat {th_global_max})"
        else:
            th = _subprocess({**spec, "impl": "torch_harmonics"})
            row.update({f"th_{k}": th.get(k) for k in _MEASURES}, th_error=th.get("error"))
            row["th_status"] = "error" if "error" in th else "ran"
        print(json.dumps(row), flush=True)
        rows.append(row)
    if have_th:
        for c in pair_channels:
            res = _subprocess({"pair": True, "nlat": pair_nlat, "channels": c, "rounds": rounds, "threads": threads})
            for name in ("forward", "forward_backward"):
                row = {**empty, "part": "side_by_side", "layer": "neighborhood", "grid": f"{pair_nlat}×{2 * pair_nlat}",
                       "channels": c, "th_status": "error" if "error" in res else "ran", "pass": name,
                       "rounds": rounds, "error": res.get("error"), "load_average": load,
                       **(res.get(name) or {})}
                rows.append(row)
            print(json.dumps(res), flush=True)
    return rows


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{1e3 * v:.1f}"


def _mb(v: float | None) -> str:
    return "—" if v is None else f"{v:.0f}"


def table(records: list[dict]) -> str:
    """The cases table (with the torch-harmonics columns when it ran) and the side-by-side table."""
    rows = [r["row"] for r in records]
    case_rows = [r for r in rows if r["part"] == "case"]
    have_th = any(r["th_status"] in ("ran", "error") for r in case_rows)
    lines = ["| layer | grid | C | θ_c (rad) | edges | setup (s) | forward (ms) | forward+backward (ms) | peak MB fwd "
             "| peak MB fwd+bwd |" + (" th forward (ms) | th forward+backward (ms) | th peak MB fwd+bwd |"
                                      if have_th else ""),
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if have_th else "")]
    for r in case_rows:
        theta = r["theta_cutoff"] or "—"
        if r["error"]:
            lines.append(f"| {r['layer']} | {r['grid']} | {r['channels']} | {theta} | error: {r['error']} |")
            continue
        line = (f"| {r['layer']} | {r['grid']} | {r['channels']} | {theta} | {r['edges']:,} | {r['setup_s']:.2f} | "
                f"{_ms(r['forward_s'])} | {_ms(r['forward_backward_s'])} | {_mb(r['peak_forward_mb'])} | "
                f"{_mb(r['peak_forward_backward_mb'])} |")
        if have_th:
            if r["th_error"]:
                line += f" error: {r['th_error']} | | |"
            else:
                line += (f" {_ms(r['th_forward_s'])} | {_ms(r['th_forward_backward_s'])} | "
                         f"{_mb(r['th_peak_forward_backward_mb'])} |")
        lines.append(line)
    pairs = [r for r in rows if r["part"] == "side_by_side"]
    if pairs:
        lines += ["", f"Side by side in one process, neighbourhood layers at the default cutoff, {pairs[0]['rounds']} "
                  "rounds of alternating calls (ratio = torch-harmonics time / ours per round; > 1: ours is faster):",
                  "", "| grid | C | pass | ours (ms) | th (ms) | ratio median | ratio quartiles |",
                  "|---|---|---|---|---|---|---|"]
        for r in pairs:
            if r["error"]:
                lines.append(f"| {r['grid']} | {r['channels']} | {r['pass']} | error: {r['error']} |")
                continue
            lines.append(f"| {r['grid']} | {r['channels']} | {r['pass'].replace('_', '+')} | {_ms(r['sciattn_s'])} | "
                         f"{_ms(r['torch_harmonics_s'])} | {r['ratio_median']:.2f} | "
                         f"{r['ratio_q1']:.2f} – {r['ratio_q3']:.2f} |")
    return "\n".join(lines)


def notes(records: list[dict]) -> str:
    rows = [r["row"] for r in records]
    case_rows = [r for r in rows if r["part"] == "case"]
    statuses = {r["th_status"] for r in case_rows}
    version = records[0]["versions"].get("torch-harmonics")
    if TH_NOT_AVAILABLE in statuses:
        th = f"{TH_NOT_AVAILABLE}: no comparison columns and no side-by-side table."
    elif not statuses & {"ran", "error"}:
        th = "torch-harmonics not run (`torch_harmonics=false`): no comparison columns."
    else:
        th = (f"th: torch-harmonics{' ' + version if version else ''} (`AttentionS2`, `NeighborhoodAttentionS2` with "
              "its CPU kernel), same weights shape, cutoff and grid; — = not run (time budget).")
    p = records[0]["params"]
    load = case_rows[0]["load_average"] if case_rows else None
    return (f"One spherical attention layer (1 head, batch 1, fp32, Legendre–Gauss grid, self-attention with "
            f"projections) on the CPU, {p.get('threads')} torch thread(s)"
            + (f", load average at start {load}" if load else "") + ".\n\n" + th + "\n\n"
            f"Times: median of repeats after a warm-up; a case whose first call takes over {SLOW_S:g} s is timed "
            "once, warm-up included. Peak MB: growth of the subprocess's maximum resident set size.")


def main(argv: list[str] | None = None) -> None:
    """The worker of one case (``python -m benchmarks.spherical_attention --worker SPEC``), run in its own
    subprocess by :func:`run`; the benchmark itself runs through the harness
    (``python -m benchmarks run spherical_attention``)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    ap.add_argument("--worker", required=True, help="the JSON spec of one case")
    spec = json.loads(ap.parse_args(argv).worker)
    print(json.dumps(pair_worker(spec) if spec.get("pair") else case_worker(spec)), flush=True)


BENCHMARKS = module_benchmarks(globals(), packages=("torch-harmonics",),
    description="One spherical attention layer (global and geodesic-disc neighbourhood) on the CPU: setup, "
                "forward and forward+backward time and peak memory, against torch-harmonics' layers;",
    claim="on the CPU our neighbourhood layer is faster than torch-harmonics' (side-by-side ratio > 1) "
          "(docs/benchmarks/sphere.md)",
)


if __name__ == "__main__":
    main()
