"""CPU speed of the neighbourhood-attention operator alone: sciattn's ``reference`` and ``sparse`` backends
against torch-harmonics' optimized CPU kernel, on the spherical transformer's grid.

Case: 64×128 Legendre–Gauss grid, self-attention over geodesic discs, 128 channels, one head, batch 1,
fp32, one torch thread. Radii: the default cutoff (one latitude spacing, 0.0487 rad) and the spherical
transformer's ``(7/√π)·Δθ`` (0.1924 rad), as in ``benchmarks/spherical_attention.py``. No projections:
the operator is fed the same random q, k, v fields and the grid's area weights ``2π w_k / nlon``; for
torch-harmonics, the query is pre-scaled and the fields are passed in its NHWC layout
(``attention_kernels::_neighborhood_s2_attention_optimized``, its custom op with autograd), and its
output is checked against ours (max abs difference reported).

Each (implementation, radius) runs in a fresh subprocess. Times are the minimum over repeats after
one warm-up call of the process's CPU time (user + system, which is what one thread costs and is
insensitive to other processes sharing the cores) and, for reference, of wall time. ``forward`` runs
under ``torch.no_grad()``; ``forward+backward`` backpropagates a fixed random cotangent into q, k, v.

torch-harmonics 0.9.3 pins torch 2.14 but its wheel imports under torch 2.13 when installed with
``pip install --no-deps --target DIR`` and put on ``PYTHONPATH`` (``--th-path DIR`` does that for the
subprocess); without it the columns read "not available".

    python benchmarks/neighborhood_cpu.py [--reps 5] [--th-path /tmp/thpkg]

Writes benchmarks/results/neighborhood_cpu.{json,md}.
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

ROOT = Path(__file__).resolve().parents[1]

CASE = r"""
import json, math, sys, time, warnings
import torch
impl, theta, reps, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
theta = None if theta == "default" else float(theta)
from sciattn.domain import SphereGrid
from sciattn.spherical.functional import area_weights
from sciattn.spherical.neighborhoods import sphere_disc_csr
nlat, nlon, c = 64, 128, 128
grid = SphereGrid(nlat, nlon, "legendre-gauss")
ro, ci = sphere_disc_csr(grid, grid, theta)
n, scale = nlat * nlon, 1.0 / math.sqrt(c)
g = torch.Generator().manual_seed(0)
q, k, v, cot = (torch.randn(1, 1, n, c, generator=g) for _ in range(4))
log_w = torch.log(area_weights(grid)).float()[None]
t0 = time.perf_counter()
if impl == "torch_harmonics":
    warnings.simplefilter("ignore")
    import torch_harmonics as th
    from torch_harmonics.attention.optimized.attention_optimized import _neighborhood_s2_attention_optimized as op
    layer = th.NeighborhoodAttentionS2(c, (nlat, nlon), (nlat, nlon), grid_in="legendre-gauss",
                                       grid_out="legendre-gauss", num_heads=1, theta_cutoff=theta)
    extra = (layer.quad_weights, layer.psi_col_idx, layer.psi_roff_idx, layer.psi_seg, layer.psi_seg_off, 1, nlon,
             nlat, nlon)
    nhwc = lambda t: t.reshape(1, nlat, nlon, c)
    def attend(q, k, v):
        return op(nhwc(k), nhwc(v), nhwc(q) * scale, *extra).reshape(1, 1, n, c)
else:
    from sciattn.neighborhood._sparse import neighborhood_sparse, sparse_plan
    from sciattn.neighborhood.reference import neighborhood_reference
    if impl == "sparse":
        sparse_plan(ro, ci, n_keys=n, device=torch.device("cpu"))  # built once, cached (setup)
    fn = neighborhood_sparse if impl == "sparse" else neighborhood_reference
    def attend(q, k, v):
        return fn(q, k, v, log_w, ro, ci, scale)
setup = time.perf_counter() - t0
def timed(f, n_reps, warm_up=True):
    if warm_up:
        f()
    cpu, wall = [], []
    for _ in range(n_reps):
        c0, w0 = time.process_time(), time.perf_counter()
        f()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return min(cpu), min(wall)
def fwd():
    with torch.no_grad():
        return attend(q, k, v)
leaves = [t.clone().requires_grad_() for t in (q, k, v)]
def fwd_bwd():
    torch.autograd.grad(attend(*leaves), leaves, cot)
first = time.perf_counter(); fwd_bwd(); slow = time.perf_counter() - first > 3
f_cpu, f_wall = timed(fwd, reps)
b_cpu, b_wall = timed(fwd_bwd, 1 if slow else max(2, reps // 2), warm_up=False)  # warmed up above
out = fwd()
torch.save(out, sys.argv[5])
print(json.dumps({"setup_s": setup, "forward_cpu_s": f_cpu, "forward_wall_s": f_wall, "forward_backward_cpu_s": b_cpu,
                  "forward_backward_wall_s": b_wall, "nnz": int(ci.numel()),
                  "mean_neighbours": ci.numel() / n}))
"""

IMPLS = ("reference", "sparse", "torch_harmonics")


def run_case(impl, theta, reps, threads, th_path, out_file):
    env = dict(os.environ)
    if th_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(th_path), env.get("PYTHONPATH", "")) if p)
    args = [sys.executable, "-c", CASE, impl, theta, str(reps), str(threads), str(out_file)]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def spacing():
    from sciattn.domain import SphereGrid
    from sciattn.spherical.neighborhoods import latitude_spacing

    return latitude_spacing(SphereGrid(64, 128, "legendre-gauss"))


def ms(row, key):
    return "—" if key not in row else f"{row[key] * 1e3:.1f}"


def markdown(meta, rows):
    lines = [
        f"Neighbourhood attention operator alone (no projections), 64×128 Legendre–Gauss grid, 128 channels, 1 head, "
        f"batch 1, fp32, {meta['threads']} torch thread, {meta['machine']} ({meta['cpu']}), torch {meta['torch']}, "
        f"{meta['date']}; load average at start {meta['load_average']} on {meta['cores']} cores (shared machine). "
        f"Command: `{meta['command']}`.",
        "",
        "| θ_c (rad) | mean neighbours | implementation | forward CPU (ms) | forward+backward CPU (ms) | forward wall (ms) | "
        "forward+backward wall (ms) | CPU time ÷ sparse (fwd, fwd+bwd) | setup (s) | max abs diff vs sparse |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for impl in IMPLS:
            o = r[impl]
            if "error" in o:
                lines.append(f"| {r['theta']} | | {impl} | {o['error']} | | | | | | |")
                continue
            diff = "—" if impl == "sparse" or "max_abs_diff" not in o else f"{o['max_abs_diff']:.1e}"
            base = r["sparse"]
            ratio = "—" if "error" in base else ", ".join(
                f"{o[key] / base[key]:.1f}" for key in ("forward_cpu_s", "forward_backward_cpu_s"))
            lines.append(f"| {r['theta']} | {o['mean_neighbours']:.1f} | {impl} | {ms(o, 'forward_cpu_s')} | "
                         f"{ms(o, 'forward_backward_cpu_s')} | {ms(o, 'forward_wall_s')} | "
                         f"{ms(o, 'forward_backward_wall_s')} | {ratio} | {o['setup_s']:.2f} | {diff} |")
    lines += [
        "",
        "reference: `sciattn.neighborhood.reference` (edge-chunked gather/scatter); sparse: "
        "`sciattn.neighborhood._sparse` (SDDMM + segment softmax + SpMM, recompute in backward); torch_harmonics: "
        "0.9.3 `attention_kernels::_neighborhood_s2_attention_optimized` (its C++ CPU kernel) with the same fields, "
        "quadrature weights and cutoff. CPU = process CPU time (min over repeats after a warm-up); wall = elapsed "
        "time, inflated by other processes on the shared cores. A forward+backward over 3 s is timed once. "
        "setup: index construction (sciattn: the cached sparse plan; torch-harmonics: the layer's psi).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--th-path", type=Path, default=None, help="directory holding the torch_harmonics wheel's files")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    import torch

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    meta = {
        "date": datetime.date.today().isoformat(), "machine": platform.machine(), "cpu": cpu,
        "cores": os.cpu_count(), "threads": args.threads, "torch": torch.__version__,
        "load_average": "%.1f, %.1f, %.1f" % os.getloadavg(),
        "command": "python benchmarks/neighborhood_cpu.py " + " ".join(sys.argv[1:]),
    }
    tmp = args.results / ".neighborhood_cpu_outputs"
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    for theta in ("default", f"{7 / math.sqrt(math.pi) * spacing():.6f}"):
        row = {"theta": f"{spacing():.5f}" if theta == "default" else theta}
        for impl in IMPLS:
            row[impl] = run_case(impl, theta, args.reps, args.threads, args.th_path, tmp / f"{impl}_{theta}.pt")
        ours = torch.load(tmp / f"sparse_{theta}.pt") if "error" not in row["sparse"] else None
        for impl in IMPLS:
            path = tmp / f"{impl}_{theta}.pt"
            if ours is not None and impl != "sparse" and "error" not in row[impl] and path.exists():
                row[impl]["max_abs_diff"] = float((torch.load(path) - ours).abs().max())
        print(json.dumps(row), flush=True)
        rows.append(row)
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    (args.results / "neighborhood_cpu.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    (args.results / "neighborhood_cpu.md").write_text(markdown(meta, rows))
    print(markdown(meta, rows))


if __name__ == "__main__":
    main()
