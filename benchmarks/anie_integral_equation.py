"""ANIE on a second-kind Fredholm integral equation with a closed-form solution (issue 37).

The problem, on the periodic interval ``[0, 1)``::

    y(t) = f(t) + λ ∫_0^1 k(t, s) y(s) ds,      k(t, s) = Σ_ij C_ij e_i(t) e_j(s)

with the real trigonometric basis ``e = (1, cos 2πt, sin 2πt, …, cos 2πKt, sin 2πKt)`` and a fixed random matrix
``C`` (seed 0), scaled so that the spectral radius of ``λ C G`` is ``rho`` (``G = diag(1, 1/2, …)``, the Gram
matrix of ``e``). The free functions ``f`` are random trigonometric polynomials of degree ``K`` (coefficients
``N(0, 1/(1 + k)²)``); the solution lies in the same space, ``ŷ = (I - λ C G)⁻¹ f̂``, and is evaluated exactly
at any node, so every resolution holds the same sample (no solver error). An operator learns ``f -> y`` from
``n_train`` pairs at ``train_resolution`` nodes ``t_i = i / n`` and is evaluated on ``n_test`` fresh pairs at
each of ``resolutions`` (zero-shot above the training one). The row ``identity`` is the error of answering
``y = f``: how far the integral term moves the solution.

ANIE's paper tests integro-differential dynamics (Lotka–Volterra, Lorenz, Burgers, Navier–Stokes, brain
recordings) and reports MSE tables we could not retrieve; it has no figure on this generated problem, so no
published number is set beside ours (docs/operators/anie.md).

    python -m benchmarks run anie_integral_equation [--quick] [--set operators='["anie"]']
"""

from __future__ import annotations

from typing import Any

from benchmarks._fit import fit_relative_l2
from benchmarks.harness import int_param, module_benchmarks

PARAMS: dict[str, Any] = {
    "operators": ["anie", "galerkin_transformer"], "degree": 4, "rho": 0.7, "n_train": 512, "n_test": 128,
    "train_resolution": 32, "resolutions": [32, 64, 128], "epochs": 60, "batch": 32, "lr": 1e-3, "seed": 0,
}
QUICK: dict[str, Any] = {"operators": ["anie"], "n_train": 256, "n_test": 64, "epochs": 15,
                         "resolutions": [32, 64]}
SCHEMA = {"operator": "str", "parameters": "int", "train_resolution": "int", "resolution": "int", "rel_l2": "float",
          "seconds": "float"}


def problem(degree: int, rho: float, seed: int = 0):
    """``(C, lam)``: the kernel's coefficient matrix and ``λ`` (``λ C G`` has spectral radius ``rho``)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    m = 2 * degree + 1
    c = torch.randn(m, m, generator=g, dtype=torch.float64)
    gram = torch.diag(torch.tensor([1.0] + [0.5] * (m - 1), dtype=torch.float64))
    radius = torch.linalg.eigvals(c @ gram).abs().max().item()
    return c, rho / radius


def basis(t, degree: int):
    """``(len(t), 2K + 1)``: the real trigonometric basis at nodes ``t``."""
    import math

    import torch

    cols = [torch.ones_like(t)]
    for k in range(1, degree + 1):
        cols += [torch.cos(2 * math.pi * k * t), torch.sin(2 * math.pi * k * t)]
    return torch.stack(cols, dim=-1)


def samples(count: int, degree: int, rho: float, seed: int):
    """``(f̂, ŷ)`` coefficient arrays ``(count, 2K + 1)`` of free functions and their exact solutions."""
    import torch

    c, lam = problem(degree, rho)
    m = 2 * degree + 1
    g = torch.Generator().manual_seed(seed)
    decay = torch.tensor([1.0] + [1.0 / (1 + k) for k in range(1, degree + 1) for _ in (0, 1)], dtype=torch.float64)
    fhat = torch.randn(count, m, generator=g, dtype=torch.float64) * decay
    gram = torch.diag(torch.tensor([1.0] + [0.5] * (m - 1), dtype=torch.float64))
    yhat = torch.linalg.solve(torch.eye(m, dtype=torch.float64) - lam * c @ gram, fhat.T).T
    return fhat, yhat


def on_grid(coef, n: int, degree: int):
    """Coefficients ``(B, 2K + 1)`` -> fields ``(B, 1, n)`` at ``t_i = i / n`` (float32)."""
    import torch

    t = torch.arange(n, dtype=torch.float64) / n
    return (coef @ basis(t, degree).T)[:, None].float()


def _rel(pred, true):
    return ((pred - true).flatten(1).norm(dim=1) / true.flatten(1).norm(dim=1)).mean().item()


def check_params(params: dict[str, Any]) -> None:
    for key in ("degree", "n_train", "n_test", "train_resolution", "epochs", "batch"):
        int_param(params, key)
    int_param(params, "seed", 0)
    if not 0 < params["rho"] < 1:
        raise ValueError(f"rho: expected a spectral radius in (0, 1), got {params['rho']!r}")
    res = params["resolutions"]
    if not isinstance(res, list) or not res or any(not isinstance(n, int) or n <= 2 * params["degree"] for n in res):
        raise ValueError(f"resolutions: expected a non-empty list of node counts above 2*degree="
                         f"{2 * params['degree']}, got {res!r}")
    if params["train_resolution"] <= 2 * params["degree"]:
        raise ValueError(f"train_resolution: expected more than 2*degree={2 * params['degree']} nodes, got "
                         f"{params['train_resolution']}")


def train_and_test(name: str, params: dict[str, Any]) -> list[dict]:
    import torch

    from sciattn.operators import create_operator

    deg, rho, seed = params["degree"], params["rho"], params["seed"]
    ftr, ytr = samples(params["n_train"], deg, rho, seed + 1)
    fte, yte = samples(params["n_test"], deg, rho, seed + 2)
    n0 = params["train_resolution"]
    x, y = on_grid(ftr, n0, deg), on_grid(ytr, n0, deg)
    torch.manual_seed(seed)
    model = create_operator(name, in_channels=1, out_channels=1, spatial_dims=1)
    n_params = sum(p.numel() for p in model.parameters())
    _, seconds = fit_relative_l2(model, x, y, params)
    rows = []
    with torch.no_grad():
        for n in params["resolutions"]:
            err = _rel(model(on_grid(fte, n, deg)), on_grid(yte, n, deg))
            rows.append({"operator": name, "parameters": n_params, "train_resolution": n0, "resolution": n,
                         "rel_l2": err, "seconds": seconds})
    return rows


def run(params: dict) -> list[dict]:
    import torch

    check_params(params)
    torch.set_num_threads(1)
    deg, rho, seed = params["degree"], params["rho"], params["seed"]
    fte, yte = samples(params["n_test"], deg, rho, seed + 2)
    rows = [{"operator": "identity", "parameters": 0, "train_resolution": params["train_resolution"], "resolution": n,
             "rel_l2": _rel(on_grid(fte, n, deg), on_grid(yte, n, deg)), "seconds": 0.0}
            for n in params["resolutions"]]
    for name in params["operators"]:
        rows += train_and_test(name, params)
    return rows


def notes(records: list[dict]) -> str:
    p = records[0]["params"]
    return (f"Fredholm equation of the second kind on [0, 1), trigonometric degree {p['degree']}, spectral radius of "
            f"λCG {p['rho']}; {p['n_train']} training and {p['n_test']} test pairs, {p['epochs']} epochs (Adam, lr "
            f"{p['lr']}, cosine, batch {p['batch']}, relative L2 loss), trained at {p['train_resolution']} nodes, "
            f"seed {p['seed']}; `rel_l2`: mean relative L2 error on the test pairs at each resolution (zero-shot above "
            f"the training one); `identity`: answering y = f; `seconds`: training time on one thread.")


BENCHMARKS = module_benchmarks(globals(),
    description="ANIE on a second-kind Fredholm integral equation with a closed-form solution (f -> y), trained at "
                "one resolution and evaluated at others;",
    claim="ANIE's error on a second-kind integral equation with a known solution, against answering y = f and the "
          "Galerkin Transformer, stays flat at unseen resolutions (docs/operators/anie.md)",
)
