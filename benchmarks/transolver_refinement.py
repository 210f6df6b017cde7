"""Transolver on a non-uniform point set under refinement: quadrature weights against the published uniform average.

The point sets are nested graded tensor grids on ``[0, 1]²``: nodes ``x_i = (i/n)^p`` per axis, ``i = 0..n``
(dense near the corner ``(0, 0)``; doubling ``n`` keeps every node), at ``n = 16, 32, 64`` and the finest ``128``.
The input is a smooth field sampled at the nodes. One Transolver (``create_operator("transolver")``, its defaults,
one seed) is evaluated on each set twice:

- **quadrature**: ``weights`` = the trapezoid weights of the graded nodes (cell sizes), the discretisation of
  the integrals in Physics-Attention;
- **uniform**: no weights, i.e. every point counts the same: the published code's average.

Two differences are reported at the ``17²`` nodes shared by every set, relative to the size of the output there:

- **vs finest**: against the same rule on the finest set (self-convergence);
- **vs continuum**: against the operator's value with the integrals taken on a fine uniform midpoint grid
  (``--reference`` points per axis, equal weights). It is computed in one call: the shared nodes enter with weight
  zero (they receive outputs but do not enter the sums) next to the fine grid with its weights.

The uniform average converges to the sampling-density-weighted integral of the graded family, not the one the layer
states: its "vs finest" may shrink while its "vs continuum" stays at a fixed bias; with the quadrature both shrink.

    python benchmarks/transolver_refinement.py [--grading 3] [--reference 384] [--seed 0] [--init published|wide]
                                               [--operator transolver|linear_no|ono] [--name STEM]

``--init wide`` redraws every weight matrix with std ``0.5/sqrt(fan_in)`` (the published ``trunc_normal(0.02)``
makes the attention's contribution small at initialisation, which shrinks both differences alike).
Writes rows (date, hardware, versions, command) to ``benchmarks/results/transolver_refinement.json`` and the
table ``transolver_refinement.md`` generated from them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

from sciattn.operators import create_operator

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SIZES = (16, 32, 64)
FINEST = 128


def field(pos: torch.Tensor) -> torch.Tensor:
    """A smooth input ``(B, N, 1)`` at positions ``(B, N, 2)``."""
    x, y = pos[..., 0], pos[..., 1]
    return (torch.sin(2 * math.pi * x) * torch.cos(math.pi * y) + 2 * x * y - y ** 2)[..., None]


def graded_nodes(n: int, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Graded tensor nodes ``((i/n)^p, (j/n)^p)`` (C order, ``(n+1)², 2``) and their trapezoid weights."""
    t = (torch.arange(n + 1, dtype=torch.float64) / n) ** p
    h = torch.diff(t)
    w1 = torch.zeros(n + 1, dtype=torch.float64)
    w1[:-1] += h / 2
    w1[1:] += h / 2
    X, Y = torch.meshgrid(t, t, indexing="ij")
    return torch.stack([X.reshape(-1), Y.reshape(-1)], -1), (w1[:, None] * w1[None, :]).reshape(-1)


def shared_index(n: int, base: int) -> torch.Tensor:
    """Flat indices, in the ``(n+1)²`` set, of the ``(base+1)²`` nodes shared with the coarsest set."""
    s = n // base
    i = torch.arange(base + 1) * s
    return (i[:, None] * (n + 1) + i[None, :]).reshape(-1)


def build(seed: int, init: str, operator: str = "transolver") -> torch.nn.Module:
    torch.manual_seed(seed)
    model = create_operator(operator, in_channels=1, out_channels=1, spatial_dims=2).double().eval()
    if init == "wide":
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:
                    p.normal_(0, 0.5 / p.shape[1] ** 0.5)
    return model


@torch.no_grad()
def measure(grading: float, reference: int, seed: int, init: str, operator: str = "transolver") -> list[dict]:
    model = build(seed, init, operator)
    base = SIZES[0]
    outs = {}
    for n in (*SIZES, FINEST):
        pos, w = graded_nodes(n, grading)
        a = field(pos[None])
        idx = shared_index(n, base)
        outs[n] = {"quadrature": model(a, pos[None], w[None])[0, idx], "uniform": model(a, pos[None])[0, idx]}
    # the continuum value at the shared nodes: weight 0 there, the integrals on a fine uniform midpoint grid
    shared_pos = graded_nodes(base, grading)[0]
    t = (torch.arange(reference, dtype=torch.float64) + 0.5) / reference
    X, Y = torch.meshgrid(t, t, indexing="ij")
    fine = torch.stack([X.reshape(-1), Y.reshape(-1)], -1)
    pos = torch.cat([shared_pos, fine])[None]
    w = torch.cat([torch.zeros(len(shared_pos), dtype=torch.float64), torch.ones(len(fine), dtype=torch.float64)])
    cont = model(field(pos), pos, w[None])[0, : len(shared_pos)]
    rows = []
    for n in SIZES:
        for rule in ("quadrature", "uniform"):
            out = outs[n][rule]
            size = float(cont.norm())
            rows.append({"n": n, "points": (n + 1) ** 2, "rule": rule,
                         "vs_finest": float((out - outs[FINEST][rule]).norm()) / size,
                         "vs_continuum": float((out - cont).norm()) / size})
    for rule in ("quadrature", "uniform"):
        rows.append({"n": FINEST, "points": (FINEST + 1) ** 2, "rule": rule, "vs_finest": 0.0,
                     "vs_continuum": float((outs[FINEST][rule] - cont).norm()) / float(cont.norm())})
    return rows


def markdown(result: dict) -> str:
    lines = [f"Command: `{result['command']}`; {result['date']}, {result['hardware']}, torch {result['torch']}, "
             f"{result['threads']} torch threads, {result['seconds']:.0f} s.", "",
             f"`{result.get('operator', 'transolver')}` at its defaults (seed {result['seed']}, init `{result['init']}`), input "
             f"`sin(2πx)cos(πy) + 2xy - y²` on nested graded grids `x = (i/n)^{result['grading']:g}` per axis; "
             f"relative L2 differences at the {(SIZES[0] + 1) ** 2} shared nodes; continuum = integrals on a "
             f"{result['reference']}² uniform midpoint grid.", "",
             "| n per axis | points | quadrature: vs finest | quadrature: vs continuum | uniform average: vs finest "
             "| uniform average: vs continuum |", "|---|---|---|---|---|---|"]
    by = {(r["n"], r["rule"]): r for r in result["rows"]}
    for n in (*SIZES, FINEST):
        q, u = by[(n, "quadrature")], by[(n, "uniform")]
        qf, uf = ("—", "—") if n == FINEST else (f"{q['vs_finest']:.2e}", f"{u['vs_finest']:.2e}")
        lines.append(f"| {n} | {q['points']} | {qf} | {q['vs_continuum']:.2e} | {uf} | {u['vs_continuum']:.2e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grading", type=float, default=3.0)
    p.add_argument("--reference", type=int, default=384)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", choices=("published", "wide"), default="published")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--name", default=None, help="results file stem (default: OPERATOR_refinement)")
    p.add_argument("--operator", default="transolver", help="any operator taking weighted point sets")
    args = p.parse_args(argv)
    started = time.perf_counter()
    rows = measure(args.grading, args.reference, args.seed, args.init, args.operator)
    name = args.name or f"{args.operator}_refinement"
    result = {"date": datetime.date.today().isoformat(),
              "hardware": f"{platform.machine()} {platform.processor() or ''}".strip(), "torch": torch.__version__,
              "python": platform.python_version(), "threads": torch.get_num_threads(),
              "command": "python benchmarks/transolver_refinement.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "grading": args.grading, "reference": args.reference, "seed": args.seed, "init": args.init,
              "operator": args.operator,
              "seconds": time.perf_counter() - started, "rows": rows}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.results / f"{name}.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
