"""A trained surrogate inside a classical solver: conjugate-gradient iterations saved by a warm start on Darcy.

Runs ``warm_start`` of the user example ``examples/warm_start_darcy.py`` (loaded from its file, unchanged): a
small Galerkin Transformer is trained at 32×32 on the built-in Darcy solver's data, predicts zero-shot on the
64×64 solve grid, and the five-point Darcy system of each test coefficient is solved by Jacobi-preconditioned
CG from ``u0 = 0`` (cold) and from the prediction (warm), to the relative residual ``rtol`` and to the looser
engineering tolerances 1e-3, 1e-4 and 1e-6.

    python -m benchmarks run warm_start_darcy [--quick] [--set epochs=10] [--set n_train=400] [--set n_test=20]

One row per tolerance (mean cold and warm iterations over the test coefficients, the iterations saved; the
seconds per solve at ``rtol``) is appended to ``benchmarks/results/warm_start_darcy.jsonl``; docs/pipelines.md
shows the table generated from the latest run. ``--quick`` trains one epoch on 16 samples and solves 2 systems
(a check of the path, not the claim).
"""

from __future__ import annotations

from pathlib import Path

from .harness import module_benchmarks

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "warm_start_darcy.py"

SCHEMA = {"rtol": "float", "cold_iterations": "float", "warm_iterations": "float", "iterations_saved_percent": "float",
          "cold_seconds": "float?", "warm_seconds": "float?", "surrogate_rel_l2": "float",
          "max_solution_difference": "float", "n_test": "int", "train_seconds": "float", "total_seconds": "float"}
COLUMNS = ("rtol", "cold_iterations", "warm_iterations", "iterations_saved_percent", "cold_seconds", "warm_seconds")
LABELS = {"rtol": "CG relative residual", "cold_iterations": "mean iterations from zero",
          "warm_iterations": "mean iterations from the surrogate", "iterations_saved_percent": "iterations saved (%)",
          "cold_seconds": "seconds per solve from zero", "warm_seconds": "seconds per solve from the surrogate "
                                                                         "(incl. inference)"}
PARAMS = {"epochs": 10, "n_train": 400, "n_test": 20, "rtol": 1e-8, "seed": 0}
QUICK = {"epochs": 1, "n_train": 16, "n_test": 2}


def rows_of(report: dict, n_test: int) -> list[dict]:
    """One row per tolerance of the example's report (the looser ones, then ``cg_rtol``), each with the run's
    values."""
    run = {"surrogate_rel_l2": report["surrogate_rel_l2_at_64"],
           "max_solution_difference": report["max_solution_difference"], "n_test": n_test,
           "train_seconds": report["train_seconds"], "total_seconds": report["total_seconds"]}
    rows = [{"rtol": float(tol), "cold_iterations": v["mean_cold_iterations"],
             "warm_iterations": v["mean_warm_iterations"], "iterations_saved_percent": v["iterations_saved_percent"],
             "cold_seconds": None, "warm_seconds": None, **run} for tol, v in report["by_tolerance"].items()]
    rows.append({"rtol": float(report["cg_rtol"]), "cold_iterations": report["mean_cold_iterations"],
                 "warm_iterations": report["mean_warm_iterations"],
                 "iterations_saved_percent": report["iterations_saved_percent"],
                 "cold_seconds": report["mean_cold_seconds"],
                 "warm_seconds": report["mean_warm_seconds_incl_prediction"], **run})
    return rows


def run(params: dict) -> list[dict]:
    import runpy

    for key in ("epochs", "n_train", "n_test"):
        if not isinstance(params[key], int) or isinstance(params[key], bool) or params[key] < 1:
            raise ValueError(f"{key}: expected a positive int, got {params[key]!r}")
    rtol = params["rtol"]
    if not isinstance(rtol, (int, float)) or isinstance(rtol, bool) or not 0 < rtol < 1:
        raise ValueError(f"rtol: expected a relative residual in (0, 1), got {rtol!r}")
    if not isinstance(params["seed"], int):
        raise ValueError(f"seed: expected an int, got {params['seed']!r}")
    warm_start = runpy.run_path(str(EXAMPLE))["warm_start"]
    report = warm_start(params["epochs"], params["n_train"], params["n_test"], float(rtol), params["seed"],
                        progress=False)
    return rows_of(report, params["n_test"])


def table(records: list[dict]) -> str:
    """One line per tolerance: iterations to one decimal, the saving in percent, seconds where measured."""
    from .harness import format_value

    lines = ["| " + " | ".join(LABELS[c] for c in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for rec in records:
        r = rec["row"]
        lines.append(f"| {r['rtol']:g} | {r['cold_iterations']:.1f} | {r['warm_iterations']:.1f} | "
                     f"{r['iterations_saved_percent']:.1f} | {format_value(r['cold_seconds'])} | "
                     f"{format_value(r['warm_seconds'])} |")
    return "\n".join(lines)


def notes(records: list[dict]) -> str:
    r, p = records[-1]["row"], records[0]["params"]
    return (f"Galerkin Transformer trained at 32×32 ({p['n_train']} samples, {p['epochs']} epochs, seed {p['seed']}), "
            f"relative L2 {r['surrogate_rel_l2']:.3f} zero-shot on the 64×64 solve grid; Jacobi-preconditioned CG "
            f"on the 64×64 Darcy system, means over {r['n_test']} test coefficients (seconds only at the final "
            f"tolerance). Largest relative difference between the two converged solutions at "
            f"{p['rtol']:g}: {r['max_solution_difference']:.1e}; training {r['train_seconds']:.0f} s, whole run "
            f"{r['total_seconds']:.0f} s.")


BENCHMARKS = module_benchmarks(globals(), columns=COLUMNS, labels=LABELS,
    description="CG iterations on the 64×64 Darcy system from zero and from a surrogate's zero-shot prediction "
                "(examples/warm_start_darcy.py);",
    claim="the warm start converges to the same solution; it saves iterations at engineering tolerances, "
          "hardly any at 1e-8 (docs/pipelines.md)",
)
