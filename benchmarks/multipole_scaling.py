"""Scaling and convergence of one multipole attention layer, beside Galerkin and dense softmax attention.

For 2-D grids from 64² to 1024² (CPU by default), one layer with 64 channels and 4 heads, batch 1:
forward and forward+backward time (median of repeats; one timed call when a call takes over 5 s) and
peak memory (resident set high-water mark of a fresh subprocess per case, above its start: after the
forward passes under ``no_grad``, and after forward+backward), so cases do not share allocations.
Methods:

* ``multipole``: :class:`~sciattn.multipole.MultipoleAttention` at its default (physical pyramid, tapered
  windows);
* ``multipole_cells8``: ``window=8`` cells (the input pyramid, resolution-dependent);
* ``multipole_fraction``: ``pyramid="input", window_fraction=1/8`` (level 0 windows of ``n/8`` cells);
* ``galerkin``: :class:`~sciattn.GalerkinAttention`; ``dense_sdpa``: global SDPA over all cells, only while
  its N² scores fit (``--dense-max``).

A case of a comparison method whose forward+backward time, extrapolated from the two previous sizes,
exceeds ``--max-seconds`` (60) is skipped; the default runs at every size. Fitted exponents of time and memory against N come from a least-squares line in log-log
over the sizes each method ran at. Convergence (same run): one layer per multipole configuration, fixed
seed, on a smooth 64-channel field sampled at cell centres of 64², 128² and 256²; the 256² output is
averaged onto the coarse cells and ``e_n = ||y_n - R_n y_256|| / ||R_n y_256||``.

    python benchmarks/multipole_scaling.py [--sizes 64 128 256 512 1024] [--device cpu] [--threads 1]
    python benchmarks/multipole_scaling.py --methods multipole --merge   # rerun the default, keep the others' rows

On the CPU, glibc serves every allocation above 32 MiB with a fresh ``mmap`` whose pages fault in
on first touch; from 512² on, each ``(B, H, N, D)`` tensor of the layer crosses that line and the
largest grids then time the allocator as much as the attention. A CPU run may set
``MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=8589934592`` for every method alike;
the header records the settings in force.

Writes benchmarks/results/multipole_scaling.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

from _timing import malloc_note, malloc_settings

ROOT = Path(__file__).resolve().parents[1]


METHODS = ("multipole", "multipole_cells8", "multipole_fraction", "galerkin", "dense_sdpa")
MULTIPOLE = {"multipole": {}, "multipole_cells8": {"window": 8},
             "multipole_fraction": {"pyramid": "input", "window_fraction": 0.125}}
LABELS = {"multipole": "multipole, default (physical pyramid, tapered windows)", "multipole_cells8": "multipole, window=8 cells",
          "multipole_fraction": "multipole, pyramid='input', window_fraction=1/8", "galerkin": "Galerkin",
          "dense_sdpa": "dense SDPA"}


def convergence(method: str, sizes=(64, 128), reference: int = 256) -> dict:
    """``{n: e_n}`` of one layer of the multipole configuration ``method`` (module docstring), float32."""
    import torch

    from sciattn.multipole import MultipoleAttention

    torch.manual_seed(0)
    c = 64
    layer = MultipoleAttention(c, 4, 2, **MULTIPOLE[method]).eval()
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
        for n in sizes:
            r = reference // n
            coarse = ref.reshape(1, c, n, r, n, r).mean((3, 5))
            out[n] = float((layer(field(n)) - coarse).norm() / coarse.norm())
    return out


def measure_case(method: str, n: int, device: str, reps: int, phase: str = "both") -> dict:
    """One layer on an n × n grid: median forward and forward+backward seconds and peak memory.

    On CPU the peak is the resident set's high-water mark of this process (run each case in a fresh
    subprocess); on CUDA it is ``torch.cuda.max_memory_allocated`` above the allocation at the start,
    and times are synchronised."""
    import resource
    import time

    import torch

    cuda = device.startswith("cuda")
    torch.manual_seed(0)
    c, h = 64, 4
    x = torch.randn(1, c, n, n, device=device, requires_grad=True)
    if method in MULTIPOLE:
        from sciattn.multipole import MultipoleAttention

        layer = MultipoleAttention(c, h, 2, **MULTIPOLE[method]).to(device)
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

    out = {"base_rss_mb": base}
    if phase in ("both", "forward"):
        with torch.no_grad():
            out["forward_s"] = timed(run)
        out["peak_forward_mb"] = peak_now()
    if phase in ("both", "backward"):
        def fwd_bwd():
            run().float().square().mean().backward()

        out["forward_backward_s"] = timed(fwd_bwd)
        out["peak_rss_mb"] = peak_now()
    return out


CASE = """
import json, sys, torch
sys.path.insert(0, {here!r})
torch.set_num_threads({threads})
from multipole_scaling import measure_case
print(json.dumps(measure_case(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5])))
"""
CONVERGENCE = """
import json, sys, torch
sys.path.insert(0, {here!r})
torch.set_num_threads({threads})
from multipole_scaling import convergence
print(json.dumps(convergence(sys.argv[1])))
"""


def fit_exponent(ns, values):
    xs, ys = [math.log(n) for n in ns], [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dense-max", type=int, default=None, help="largest side for dense attention (128 cpu, 512 cuda)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per case (1 on a busy machine)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--max-seconds", type=float, default=60.0,
                    help="skip a case whose forward+backward, extrapolated from the two previous sizes, exceeds it")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--from-log", type=Path, default=None,
                    help="rebuild the results from the JSON rows a run printed (e.g. one stopped by a time limit)")
    ap.add_argument("--log-meta", nargs=3, metavar=("DATE", "MACHINE", "TORCH"), default=None,
                    help="with --from-log: date, device name and torch version of the logged run")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows and convergence of the methods not run from the existing results file "
                         "(the note names their run); with --methods, to rerun one configuration")
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    if args.dense_max is None:
        args.dense_max = 512 if cuda else 128
    if args.from_log is not None:
        rows = [json.loads(ln) for ln in args.from_log.read_text().splitlines() if ln.startswith('{"method"')]
        date, machine, torch_version = args.log_meta or (datetime.date.today().isoformat(), "unknown", "unknown")
        note = ("Rebuilt with `--from-log` from the rows printed by a run that stopped before its last case "
                "(cases not listed did not finish).")
        return report(rows, args, cuda, date, machine, torch_version, note)  # no convergence rows in a log
    rows, skipped = [], []
    here = str(Path(__file__).resolve().parent)
    for method in args.methods:
        done = []
        for n in args.sizes:
            if method == "dense_sdpa" and n > args.dense_max:
                continue
            if len(done) >= 2 and method != "multipole":  # the default runs at every size
                (n1, t1), (n2, t2) = done[-2:]
                guess = t2 * (n / n2) ** (2 * max(1.0, math.log(t2 / t1) / math.log(n2 / n1) / 2))
                if guess > args.max_seconds:
                    skipped.append(f"{method} {n}² (about {guess:.0f} s forward+backward expected)")
                    print(f"skip {method} {n}: about {guess:.0f} s expected", flush=True)
                    continue
            if cuda:  # device memory is measured by the allocator, so one process serves every case
                result = measure_case(method, n, args.device, args.reps)
            else:
                code = CASE.format(here=here, threads=args.threads)
                result = {}
                for phase in ("forward", "backward"):  # separate processes: each peak is its own
                    out = subprocess.run([sys.executable, "-c", code, method, str(n), args.device, str(args.reps),
                                          phase], capture_output=True, text=True)
                    if out.returncode != 0:  # e.g. killed for memory: recorded, the other phase still counts
                        skipped.append(f"{method} {n}² {phase} (exit {out.returncode})")
                        continue
                    got = json.loads(out.stdout.strip().splitlines()[-1])
                    result["base_rss_mb"] = min(result.get("base_rss_mb", math.inf), got.pop("base_rss_mb"))
                    result.update(got)
                if "forward_s" not in result:
                    continue
                result.setdefault("forward_backward_s", None)
                result.setdefault("peak_rss_mb", None)
            row = {"method": method, "side": n, "N": n * n, **result}
            rows.append(row)
            if row["forward_backward_s"] is not None:
                done.append((n, row["forward_backward_s"]))
            print(json.dumps(row), flush=True)
    conv = {}
    for method in args.methods:
        if method in MULTIPOLE:
            code = CONVERGENCE.format(here=here, threads=args.threads)
            out = subprocess.run([sys.executable, "-c", code, method], capture_output=True, text=True, check=True)
            conv[method] = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps({"convergence": method, **conv[method]}), flush=True)
    import torch

    machine = (torch.cuda.get_device_name() if cuda
               else f"{platform.machine()}, {platform.processor() or 'cpu'}, {os.cpu_count()} cores, "
                    f"{args.threads} torch thread(s) per case")
    note = ("Not measured (over --max-seconds, or the process failed): " + "; ".join(skipped) + ".") if skipped else None
    if args.merge:
        rows, conv, note = merge_previous(args, rows, conv, note)
    report(rows, args, cuda, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), machine,
           torch.__version__, note, conv)


def merge_previous(args, rows, conv, note):
    """``(rows, conv, note)`` with the rows and convergence figures of the methods not in ``--methods`` taken from
    the existing results file (in ``METHODS`` order), and a note naming the run they come from."""
    stem = "multipole_scaling_cuda" if args.device.startswith("cuda") else "multipole_scaling"
    path = args.results / f"{stem}.json"
    if not path.exists():
        return rows, conv, note
    old = json.loads(path.read_text())
    kept = [r for r in old["rows"] if r["method"] not in args.methods]
    if not kept:
        return rows, conv, note
    order = {m: i for i, m in enumerate(METHODS)}
    rows = sorted(kept + rows, key=lambda r: (order[r["method"]], r["side"]))
    merged = {m: e for m, e in (old.get("convergence") or {}).items() if m not in args.methods}
    merged.update(conv)
    conv = {m: merged[m] for m in sorted(merged, key=order.get)}
    methods = sorted({r["method"] for r in kept}, key=order.get)
    extra = (f"Rows of {', '.join(LABELS[m] for m in methods)} kept from the run of {old['date']} "
             f"(`{old.get('command', '')}`); {', '.join(LABELS[m] for m in args.methods)} rerun.")
    return rows, conv, extra if note is None else f"{extra} {note}"


def _mem(r, key="peak_rss_mb"):
    value = r.get(key, r.get("peak_rss_mb"))
    return None if value is None else max(value - r["base_rss_mb"], 1.0)


def _fmt(x, spec=".2f", scale=1.0):
    return "–" if x is None else format(scale * x, spec)


def report(rows, args, cuda, date, machine, torch_version, note, conv=None) -> None:
    """Fitted exponents, convergence, the dense/multipole time ratios and the JSON + Markdown results."""
    fits = {}
    for method in METHODS:
        rs = [r for r in rows if r["method"] == method]
        rb = [r for r in rs if r.get("forward_backward_s") is not None]
        if len(rs) >= 2:
            ns, nb = [r["N"] for r in rs], [r["N"] for r in rb]
            fits[method] = {
                "time_forward": fit_exponent(ns, [r["forward_s"] for r in rs]),
                "time_forward_backward": fit_exponent(nb, [r["forward_backward_s"] for r in rb]) if len(rb) > 1
                else None,
                "memory_forward": fit_exponent(ns, [_mem(r, "peak_forward_mb") for r in rs]),
                "memory": fit_exponent(nb, [_mem(r) for r in rb]) if len(rb) > 1 else None,
                "sizes_forward": [r["side"] for r in rs], "sizes_forward_backward": [r["side"] for r in rb],
            }
    mp = {r["side"]: r for r in rows if r["method"] == "multipole"}
    speedups = {r["side"]: r["forward_backward_s"] / mp[r["side"]]["forward_backward_s"]
                for r in rows if r["method"] == "dense_sdpa" and r["side"] in mp
                and r.get("forward_backward_s") and mp[r["side"]].get("forward_backward_s")}
    malloc = malloc_settings()
    command = "python benchmarks/multipole_scaling.py" + (f" --device {args.device}" if cuda else "")
    if getattr(args, "threads", 1) != 1 and not cuda:
        command += f" --threads {args.threads}"
    if list(getattr(args, "methods", METHODS)) != list(METHODS):
        command += " --methods " + " ".join(args.methods)
    if getattr(args, "merge", False):
        command += " --merge"
    summary = {"benchmark": "multipole_scaling", "date": date, "device": args.device, "malloc_env": malloc,
               "machine": machine, "torch": torch_version, "command": command,
               "layer": "64 channels, 4 heads, batch 1", "configurations": {m: LABELS[m] for m in METHODS},
               "rows": rows, "fitted_exponents": fits, "convergence": conv or {},
               "dense_over_multipole_forward_backward": speedups}
    if note:
        summary["note"] = note
    args.results.mkdir(parents=True, exist_ok=True)
    stem = "multipole_scaling_cuda" if cuda else "multipole_scaling"
    (args.results / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = markdown(summary)
    (args.results / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def markdown(summary: dict) -> list[str]:
    """The Markdown tables of a results summary (also used for the docs' generated block)."""
    cuda = summary["device"].startswith("cuda")
    note = summary.get("note")
    lines = [f"One attention layer, 64 channels, 4 heads, batch 1, {summary['device']}, {summary['date']}, "
             f"{summary['machine']}, torch {summary['torch']}. Command: `{summary.get('command', '')}`."
             + (f" {note}" if note else "") + ("" if cuda else " " + malloc_note(summary["malloc_env"]))
             + " Memory: " + ("CUDA allocator peak above the start." if cuda else
                              "resident-set high-water mark of a fresh subprocess per case, above its start."),
             ""]
    conv, fits = summary.get("convergence") or {}, summary["fitted_exponents"]
    if conv:
        lines += ["| configuration | e64 | e128 | time exponent (fwd / fwd+bwd) | memory exponent (fwd / fwd+bwd) |",
                  "|---|---|---|---|---|"]
        for m, e in conv.items():
            f = fits.get(m)
            ex = (f"{_fmt(f['time_forward'])} / {_fmt(f['time_forward_backward'])} | "
                  f"{_fmt(f['memory_forward'])} / {_fmt(f['memory'])}") if f else "– | –"
            lines.append(f"| {LABELS.get(m, m)} | {100 * e['64']:.2f}% | {100 * e['128']:.2f}% | {ex} |"
                         if "64" in e else f"| {LABELS.get(m, m)} | {100 * e[64]:.2f}% | {100 * e[128]:.2f}% | {ex} |")
        lines += ["", "e_n: relative difference of one layer (same weights, smooth field) at n² to its 256² output "
                  "averaged onto the n² cells. Exponents: least-squares slope of log(time or memory) against "
                  "log(N) over the sizes below.", ""]
    lines += ["| method | grid | forward (ms) | forward+backward (ms) | peak memory, forward (MB) | "
              "peak memory, forward+backward (MB) |", "|---|---|---|---|---|---|"]
    for r in summary["rows"]:
        fwd_mem = _fmt(_mem(r, "peak_forward_mb"), ".0f") if "peak_forward_mb" in r else "–"
        lines.append(f"| {LABELS.get(r['method'], r['method'])} | {r['side']}² | {_fmt(r['forward_s'], '.1f', 1e3)} | "
                     f"{_fmt(r.get('forward_backward_s'), '.1f', 1e3)} | {fwd_mem} | {_fmt(_mem(r), '.0f')} |")
    lines += ["", "| method | time exponent, forward | time exponent, forward+backward | memory exponent, forward | "
              "memory exponent, forward+backward |", "|---|---|---|---|---|"]
    lines += [f"| {LABELS.get(m, m)} | {_fmt(f['time_forward'])} | {_fmt(f['time_forward_backward'])} | "
              f"{_fmt(f['memory_forward'])} | {_fmt(f['memory'])} |" for m, f in fits.items()]
    speedups = summary.get("dense_over_multipole_forward_backward") or {}
    if speedups:
        lines += ["", "Dense SDPA time / multipole time, forward+backward: "
                  + ", ".join(f"{side}²: {x:.1f}×" for side, x in sorted(speedups.items(), key=lambda kv: int(kv[0])))]
    return lines


if __name__ == "__main__":
    main()
