"""Point-set operators on a non-uniform point set under refinement: quadrature weights against the published uniform
average.

The point sets are nested graded tensor grids on ``[0, 1]²``: nodes ``x_i = (i/n)^p`` per axis, ``i = 0..n``
(dense near the corner ``(0, 0)``; doubling ``n`` keeps every node), at the ``sizes`` ``n = 16, 32, 64`` and the
finest ``128`` (the last size). The input is a smooth field sampled at the nodes. One operator
(``create_operator(operator)``, its defaults, one seed, float64, eval) is evaluated on each set twice:

- **quadrature**: ``weights`` = the trapezoid weights of the graded nodes (cell sizes), the discretisation of
  the integrals of the layer;
- **uniform**: no weights, i.e. every point counts the same: the published code's average.

Two differences are reported at the ``(sizes[0] + 1)²`` nodes shared by every set, relative to the size of the
continuum output there:

- **vs finest**: against the same rule on the finest set (self-convergence; 0 on the finest set itself);
- **vs continuum**: against the operator's value with the integrals taken on a fine uniform midpoint grid
  (``reference`` points per axis, equal weights). It is computed in one call: the shared nodes enter with weight
  zero (they receive outputs but do not enter the sums) next to the fine grid with its weights.

The uniform average converges to the sampling-density-weighted integral of the graded family, not the one the layer
states: its "vs finest" may shrink while its "vs continuum" stays at a fixed bias; with the quadrature both shrink.
``init="wide"`` redraws every weight matrix with std ``0.5/sqrt(fan_in)`` (the published ``trunc_normal(0.02)``
makes the attention's contribution small at initialisation, which shrinks both differences alike).

    python -m benchmarks run refinement [--quick] [--set operator='"gnot"'] [--set init='"wide"']
                                        [--set sizes='[16, 32, 64, 128]'] [--set reference=384]
"""

from __future__ import annotations

import math
from typing import Any

from .harness import int_param, module_benchmarks

SCHEMA = {"operator": "str", "init": "str", "grading": "float", "n": "int", "points": "int", "rule": "str",
          "vs_finest": "float", "vs_continuum": "float"}
PARAMS = {"operator": "transolver", "grading": 3.0, "reference": 384, "seed": 0, "init": "published",
          "sizes": [16, 32, 64, 128]}
QUICK = {"reference": 96}
COLUMNS = ("n", "points", "rule", "vs_finest", "vs_continuum")
LABELS = {"n": "n per axis", "vs_finest": "vs finest", "vs_continuum": "vs continuum"}
INITS = ("published", "wide")
RULES = ("quadrature", "uniform")


def field(pos):
    """A smooth input ``(B, N, 1)`` at positions ``(B, N, 2)``."""
    import torch

    x, y = pos[..., 0], pos[..., 1]
    return (torch.sin(2 * math.pi * x) * torch.cos(math.pi * y) + 2 * x * y - y ** 2)[..., None]


def graded_nodes(n: int, p: float):
    """Graded tensor nodes ``((i/n)^p, (j/n)^p)`` (C order, ``(n+1)², 2``) and their trapezoid weights."""
    import torch

    t = (torch.arange(n + 1, dtype=torch.float64) / n) ** p
    h = torch.diff(t)
    w1 = torch.zeros(n + 1, dtype=torch.float64)
    w1[:-1] += h / 2
    w1[1:] += h / 2
    X, Y = torch.meshgrid(t, t, indexing="ij")
    return torch.stack([X.reshape(-1), Y.reshape(-1)], -1), (w1[:, None] * w1[None, :]).reshape(-1)


def shared_index(n: int, base: int):
    """Flat indices, in the ``(n+1)²`` set, of the ``(base+1)²`` nodes shared with the coarsest set."""
    import torch

    s = n // base
    i = torch.arange(base + 1) * s
    return (i[:, None] * (n + 1) + i[None, :]).reshape(-1)


def build(seed: int, init: str, operator: str = "transolver"):
    """``operator`` at its defaults (one input and output channel, 2-D), float64, eval; ``init="wide"`` redraws
    every weight matrix with std ``0.5/sqrt(fan_in)``."""
    import torch

    from sciattn.operators import create_operator

    torch.manual_seed(seed)
    model = create_operator(operator, in_channels=1, out_channels=1, spatial_dims=2).double().eval()
    if init == "wide":
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:
                    p.normal_(0, 0.5 / p.shape[1] ** 0.5)
    return model


def check_params(params: dict[str, Any]) -> None:
    """A ValueError naming the parameter for a bad one."""
    if params["init"] not in INITS:
        raise ValueError(f"init: expected one of {list(INITS)}, got {params['init']!r}")
    g = params["grading"]
    if isinstance(g, bool) or not isinstance(g, (int, float)) or not g > 0:
        raise ValueError(f"grading: expected a positive number, got {g!r}")
    int_param(params, "reference", 1)
    int_param(params, "seed", 0)
    sizes = params["sizes"]
    if (not isinstance(sizes, list) or len(sizes) < 2
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes)
            or any(a >= b for a, b in zip(sizes, sizes[1:])) or any(n % sizes[0] for n in sizes)):
        raise ValueError("sizes: expected at least two increasing positive integers, each a multiple of the first "
                         f"(nested sets; the last is the finest), got {sizes!r}")
    if not isinstance(params["operator"], str):
        raise ValueError(f"operator: expected the name of a registered operator, got {params['operator']!r}")
    from sciattn.operators import list_operators

    if params["operator"] not in list_operators():
        raise ValueError(f"operator: expected one of {list_operators()} (one that takes weighted point sets), "
                         f"got {params['operator']!r}")


def measure(grading: float, reference: int, seed: int, init: str, operator: str = "transolver",
            sizes: tuple[int, ...] = (16, 32, 64, 128)) -> list[dict]:
    """The rows ``{"n", "points", "rule", "vs_finest", "vs_continuum"}`` of one operator, for every size and rule
    (the last size is the finest)."""
    import torch

    with torch.no_grad():
        model = build(seed, init, operator)
        base, finest = sizes[0], sizes[-1]
        outs = {}
        for n in sizes:
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
    size = float(cont.norm())
    rows = []
    for n in sizes:
        for rule in RULES:
            out = outs[n][rule]
            rows.append({"n": n, "points": (n + 1) ** 2, "rule": rule,
                         "vs_finest": 0.0 if n == finest else float((out - outs[finest][rule]).norm()) / size,
                         "vs_continuum": float((out - cont).norm()) / size})
    return rows


def run(params: dict) -> list[dict]:
    check_params(params)
    rows = measure(float(params["grading"]), int(params["reference"]), int(params["seed"]), str(params["init"]),
                   str(params["operator"]), tuple(params["sizes"]))
    return [{"operator": params["operator"], "init": params["init"], "grading": float(params["grading"]), **r}
            for r in rows]


def table(records: list[dict]) -> str:
    """One line per size: both rules' differences side by side, to three significant digits (vs finest is a dash
    on the finest set)."""
    by = {(r["row"]["n"], r["row"]["rule"]): r["row"] for r in records}
    sizes = sorted({n for n, _ in by})
    lines = ["| n per axis | points | quadrature: vs finest | quadrature: vs continuum | uniform average: vs finest "
             "| uniform average: vs continuum |", "|---|---|---|---|---|---|"]
    for n in sizes:
        q, u = by[(n, "quadrature")], by[(n, "uniform")]
        qf, uf = ("—", "—") if n == sizes[-1] else (f"{q['vs_finest']:.2e}", f"{u['vs_finest']:.2e}")
        lines.append(f"| {n} | {q['points']} | {qf} | {q['vs_continuum']:.2e} | {uf} | {u['vs_continuum']:.2e} |")
    return "\n".join(lines) + "\n"


def notes(records: list[dict]) -> str:
    r, p = records[0]["row"], records[0]["params"]
    base = min(rec["row"]["n"] for rec in records)
    return (f"`{r['operator']}` at its defaults (seed {p['seed']}, init `{r['init']}`), input "
            f"`sin(2πx)cos(πy) + 2xy - y²` on nested graded grids `x = (i/n)^{r['grading']:g}` per axis; relative L2 "
            f"differences at the {(base + 1) ** 2} shared nodes of the coarsest set; continuum = integrals on a "
            f"{p['reference']}² uniform midpoint grid. `quadrature`: trapezoid weights of the graded nodes; "
            "`uniform`: the published equal-weight average.")


BENCHMARKS = module_benchmarks(
    globals(), columns=COLUMNS, labels=LABELS, plot=("points", "vs_continuum", "rule"), log_axes=(True, True),
    description="Point-set operator on nested graded point sets under refinement, quadrature weights against the "
                "published uniform average;",
    claim="quadrature weights converge to the continuum value, the uniform average keeps a bias "
          "(docs/operators/transolver.md, linear_no.md, ono.md, gnot.md, oformer.md)",
)
