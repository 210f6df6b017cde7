"""A trained surrogate inside a classical solver: warm-starting conjugate gradients on Darcy flow.

The five-point Darcy system ``A u = f`` (the one :func:`sciattn.pde_data.darcy.solve_darcy` solves
directly) is solved by Jacobi-preconditioned conjugate gradients to a relative residual of
``1e-8``, once from ``u0 = 0`` and once from the surrogate's prediction. The solver's answer is
the same either way (it is converged to the same tolerance); the surrogate only saves iterations.
The saving is largest at engineering tolerances: a surrogate's error is not smooth, so its residual
(``A`` amplifies rough errors) starts high, and the Krylov method must still resolve the slow
low-frequency modes to reach a tight tolerance. The report gives both.
The script trains a small Galerkin Transformer at 32x32, predicts zero-shot on the 64x64 solve
grid and reports the iterations and seconds saved per solve.

    python examples/warm_start_darcy.py [--epochs 10] [--n-train 400] [--out results.json]

Runs in about 2-6 minutes on 2 CPU cores. The benchmark ``warm_start_darcy`` runs :func:`warm_start` through the
harness (``python -m benchmarks run warm_start_darcy``); docs/pipelines.md shows its rows.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch

from sciattn.operators import create_operator
from sciattn.pde_data.darcy import DARCY_DEFAULTS, darcy_system, generate_darcy, sample_coefficient
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.normalizers import fit_normalizers
from sciattn.train import Trainer, evaluate_dataset

LOOSER_TOLERANCES = (1e-3, 1e-4, 1e-6)  # engineering tolerances, reported beside --rtol
SOLVE_GRID = 64  # nodes x_i = i/64; the stored fields hold i = 0..63, the unknowns are i, j = 1..63


def pcg_iterations(A, f, x0, rtol: float) -> tuple[int, float, np.ndarray]:
    """Jacobi-preconditioned CG from ``x0``: (iterations, seconds, solution)."""
    inv_diag = scipy.sparse.diags(1.0 / A.diagonal())
    count = [0]

    def callback(_):
        count[0] += 1

    t0 = time.perf_counter()
    x, info = scipy.sparse.linalg.cg(A, f, x0=x0, rtol=rtol, atol=0.0, M=inv_diag, maxiter=20000, callback=callback)
    seconds = time.perf_counter() - t0
    if info != 0:
        raise RuntimeError(f"CG did not converge (info={info})")
    return count[0], seconds, x


def warm_start(epochs: int = 10, n_train: int = 400, n_test: int = 20, rtol: float = 1e-8, seed: int = 0,
               progress: bool = True) -> dict:
    """Train the surrogate and solve the ``n_test`` test systems cold and warm; the report (a JSON-able dict:
    means over the test coefficients at ``rtol`` and at :data:`LOOSER_TOLERANCES`, and one entry per sample)."""
    torch.manual_seed(seed)
    t_start = time.perf_counter()

    data = generate_darcy(n_train + n_test, [32, SOLVE_GRID], seed=seed, progress=progress)

    def split(res, sl, name):
        a, u = (torch.from_numpy(t)[sl, None] for t in data[res])
        return GridPairDataset(a, u, {"split": name, "resolution": res})

    train = split(32, slice(0, n_train), "train")
    test64 = split(SOLVE_GRID, slice(n_train, None), "test")
    model = create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=32, n_layers=3,
                            n_heads=4, n_modes=12, regressor_width=20)
    xn, yn = fit_normalizers(train)
    Trainer(model=model, train_data=train, test_data={}, x_normalizer=xn, y_normalizer=yn, spatial_dims=2,
            epochs=epochs, batch_size=8, lr=3e-3, progress=False).fit()
    surrogate_error = evaluate_dataset(model, test64, x_normalizer=xn, y_normalizer=yn, spatial_dims=2)["rel_l2"]
    train_seconds = time.perf_counter() - t_start

    model.eval()
    with torch.no_grad():  # one warm-up call, so the timings below are steady-state inference
        model(torch.zeros(1, 1, SOLVE_GRID, SOLVE_GRID))
    rows = []
    tol_counts: dict[float, list[tuple[int, int]]] = {}
    for i in range(n_train, n_train + n_test):
        # The same coefficient generate_darcy drew for sample i, with its boundary nodes.
        a = sample_coefficient(1, SOLVE_GRID + 1, rng=np.random.default_rng([seed, i]), **DARCY_DEFAULTS)[0]
        A, f = darcy_system(a)
        t0 = time.perf_counter()
        with torch.no_grad():
            x = torch.from_numpy(a[:SOLVE_GRID, :SOLVE_GRID]).float()[None, None]
            pred = yn.decode(model(xn.encode(x)))[0, 0].double().numpy()
        predict_seconds = time.perf_counter() - t0
        cold_it, cold_s, u_cold = pcg_iterations(A, f, np.zeros_like(f), rtol)
        warm_it, warm_s, u_warm = pcg_iterations(A, f, pred[1:, 1:].ravel(), rtol)
        for tol in LOOSER_TOLERANCES:
            tol_counts.setdefault(tol, []).append(
                (pcg_iterations(A, f, np.zeros_like(f), tol)[0], pcg_iterations(A, f, pred[1:, 1:].ravel(), tol)[0])
            )
        scale = np.linalg.norm(u_cold)
        rows.append(dict(sample=i, cold_iterations=cold_it, warm_iterations=warm_it, cold_seconds=cold_s,
                         warm_seconds=warm_s + predict_seconds, predict_seconds=predict_seconds,
                         solutions_agree=float(np.linalg.norm(u_warm - u_cold) / scale)))

    cold = np.mean([r["cold_iterations"] for r in rows])
    warm = np.mean([r["warm_iterations"] for r in rows])
    return {
        "solve_grid": SOLVE_GRID,
        "cg_rtol": rtol,
        "preconditioner": "jacobi",
        "n_train": n_train,
        "epochs": epochs,
        "surrogate_rel_l2_at_64": surrogate_error,
        "mean_cold_iterations": float(cold),
        "mean_warm_iterations": float(warm),
        "iterations_saved_percent": float(100 * (1 - warm / cold)),
        "mean_cold_seconds": float(np.mean([r["cold_seconds"] for r in rows])),
        "mean_warm_seconds_incl_prediction": float(np.mean([r["warm_seconds"] for r in rows])),
        "by_tolerance": {
            f"{tol:g}": {"mean_cold_iterations": float(np.mean([c for c, _ in v])),
                         "mean_warm_iterations": float(np.mean([w for _, w in v])),
                         "iterations_saved_percent": float(100 * (1 - np.mean([w for _, w in v]) / np.mean([c for c, _ in v])))}
            for tol, v in tol_counts.items()
        },
        "max_solution_difference": float(max(r["solutions_agree"] for r in rows)),
        "train_seconds": train_seconds,
        "total_seconds": time.perf_counter() - t_start,
        "samples": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--n-train", type=int, default=400)
    ap.add_argument("--n-test", type=int, default=20)
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="also write the report as JSON here")
    args = ap.parse_args()
    report = warm_start(args.epochs, args.n_train, args.n_test, args.rtol, args.seed)
    summary = {k: v for k, v in report.items() if k != "samples"}
    print(json.dumps(summary, indent=2))
    print(f"warm start saves {report['iterations_saved_percent']:.1f}% of the CG iterations "
          f"({report['mean_cold_iterations']:.0f} -> {report['mean_warm_iterations']:.0f}) at surrogate relative L2 "
          f"{report['surrogate_rel_l2_at_64']:.3f}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
