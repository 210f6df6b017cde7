"""The point-set refinement benchmark on the harness: one operator on nested graded point sets, quadrature
weights against the published uniform average (:mod:`benchmarks.transolver_refinement` holds the protocol and
the measurement; this module only declares its parameters and rows).

    python -m benchmarks run refinement [--quick] [--set operator='"gnot"'] [--set init='"wide"']
"""

from __future__ import annotations

from .harness import Benchmark

SCHEMA = {"operator": "str", "init": "str", "grading": "float", "n": "int", "points": "int", "rule": "str",
          "vs_finest": "float", "vs_continuum": "float"}
PARAMS = {"operator": "transolver", "grading": 3.0, "reference": 384, "seed": 0, "init": "published"}
QUICK = {"reference": 96}
COLUMNS = ("n", "points", "rule", "vs_finest", "vs_continuum")
LABELS = {"n": "n per axis", "vs_finest": "vs finest", "vs_continuum": "vs continuum"}


def run(params: dict) -> list[dict]:
    from .transolver_refinement import measure

    rows = measure(float(params["grading"]), int(params["reference"]), int(params["seed"]), str(params["init"]),
                   str(params["operator"]))
    return [{"operator": params["operator"], "init": params["init"], "grading": float(params["grading"]), **r}
            for r in rows]


def notes(records: list[dict]) -> str:
    r, p = records[0]["row"], records[0]["params"]
    return (f"`{r['operator']}` at its defaults (seed {p['seed']}, init `{r['init']}`), input "
            f"`sin(2πx)cos(πy) + 2xy - y²` on nested graded grids `x = (i/n)^{r['grading']:g}` per axis; relative L2 "
            f"differences at the shared nodes of the coarsest set; continuum = integrals on a {p['reference']}² "
            "uniform midpoint grid. `quadrature`: trapezoid weights of the graded nodes; `uniform`: the published "
            "equal-weight average.")


BENCHMARKS = (
    Benchmark(
        name="refinement", run=run, schema=SCHEMA, params=PARAMS, quick=QUICK,
        columns=COLUMNS, labels=LABELS, notes=notes,
        description="Point-set operator on nested graded point sets under refinement, quadrature weights against the "
                    "published uniform average;",
        claim="quadrature weights converge to the continuum value, the uniform average keeps a bias "
              "(docs/operators/transolver.md, linear_no.md, ono.md, gnot.md, oformer.md)",
        plot=("points", "vs_continuum", "rule"), log_axes=(True, True),
    ),
)
