"""The Burgers generator matched to neuraloperator's bundled ``burgers_{train,test}_16.pt``, and its fit.

The bundled files hold ``x`` (N, 16) float64, ``y`` (N, 17, 16) float64 (time before space, ``y[:, 0] == x``)
and ``visc = 0.01``. Upstream ships no script that made them. What the files show (:func:`replay_error`,
:func:`summary_statistics`, ``python -m sciattn.pde_data.burgers_neuralop PATH``):

- **time span** ``t in [0, 0.96]``, 17 equally spaced snapshots (``dt_out = 0.06``), ``nu = 0.01``: solving the
  file's own ``x`` (Fourier-interpolated from 16 to 256 points, exact for its band-limited content) with
  :func:`.burgers.solve_burgers` reproduces ``y`` of the first 100 training samples to 1.3e-4 (relative L2 over all
  17 snapshots), against 1.5% for ``t in [0, 1]`` (the span the reference notes assumed), 2.3% for
  ``[0, 0.9]`` and 0.23% for ``nu = 0.0099`` or ``0.0101`` at 0.96. (0.96 is every third of 51 snapshots on
  ``[0, 1]``; that is our guess at how the file was cut, not upstream's word.)
- the **energy** ``mean |u(t)|^2 / mean |u(0)|^2`` falls to 0.31 by ``t = 0.96`` (0.95, 0.90, ... per step);
- the **initial law** is far smoother than the FNO paper's ``N(0, 625 (-Delta + 25 I)^-2)``: the mode
  energies ``E_k = mean |rfft(x)_k / 16|^2`` fall by 67x from ``k = 1`` to 2 (the FNO law: 8x).

The fit (:func:`fit_initial_law`) keeps the FNO *form* of :func:`.burgers.sample_burgers_initial`, mode
standard deviations ``s_k = sigma (4 pi^2 k^2 + tau^2)^(-alpha/2)`` with ``E_k = s_k^2``, and fits
``(sigma, tau, alpha)`` to the file's ``E_1 .. E_7`` by least squares in ``log E``, over a grid of ``tau``
(0..12 step 0.25) and ``alpha`` (2..6 step 0.05) with ``sigma`` in closed form. The model sums the energies
of every mode of an 8192-point field that aliases onto each of the 16-point modes (the file is a subsample),
so the weak high modes are not misread. Result (:data:`NEURALOP_BURGERS_FIT`): ``tau = 5``, ``alpha = 4``,
``sigma = 629.2``, log residual 0.0045, every ``E_k`` within 4%. So the law is the FNO one with
``alpha = 4`` and ``sigma ≈ 625 = 25^2``: FNO's standard deviations *squared* (covariance
``(-Delta + 25 I)^-4``); that reading is ours, the numbers are the fit's.

Only the initial law is fitted. The dynamics at the file's ``nu`` and span are then a prediction, checked by
:func:`compare_to_reference` (``tests/pde_data/test_burgers_neuralop.py``, ``python -m benchmarks run burgers_match``): 200
generated samples (seed 1, solved at 256 points) against the 800 training samples give an energy decay within
3.0% at every snapshot (0.300 against 0.310 at the last), the lowest five mode energies of ``u(0)`` within 7.9% and
of the last snapshot within 7.3%; against the 400 test samples 3.3%, 10.5% and 15.7%. With 800 generated samples
(seed 2) the decay agrees to 0.4% (train) and 0.7% (test).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sciattn._checks import check_positive_int

from .burgers import generate_burgers_trajectories, solve_burgers

__all__ = [
    "NEURALOP_BURGERS_FIT",
    "NEURALOP_BURGERS_FILE",
    "compare_to_reference",
    "energy_decay",
    "fit_initial_law",
    "generate_burgers_neuralop",
    "mode_energies",
    "replay_error",
    "summary_statistics",
]

#: What the files are (read from them): viscosity, time span, snapshots, stored points.
NEURALOP_BURGERS_FILE: dict[str, float] = {"nu": 0.01, "t_final": 0.96, "n_times": 17, "resolution": 16}

#: Fitted to ``burgers_train_16.pt`` by ``python -m sciattn.pde_data.burgers_neuralop PATH`` (see the module).
NEURALOP_BURGERS_FIT: dict[str, float] = {"nu": 0.01, "t_final": 0.96, "sigma": 629.2, "tau": 5.0, "alpha": 4.0}


def _as_series(name: str, y: np.ndarray) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 3 or y.shape[1] < 2 or y.shape[2] < 4:
        raise ValueError(f"{name}: expected an array (N, T, X) with T >= 2 and X >= 4, got shape {y.shape}")
    return y


def mode_energies(u: np.ndarray) -> np.ndarray:
    """``E_k = mean_n |rfft(u_n)_k / X|^2`` of fields ``(N, X)``: ``(X // 2 + 1,)`` (mode ``k`` is the 1-D shell)."""
    u = np.asarray(u, dtype=np.float64)
    if u.ndim != 2 or u.shape[1] < 4:
        raise ValueError(f"u: expected an array (N, X) with X >= 4, got shape {u.shape}")
    return (np.abs(np.fft.rfft(u, axis=-1) / u.shape[-1]) ** 2).mean(0)


def energy_decay(y: np.ndarray) -> np.ndarray:
    """``mean_n |y_n(t)|^2 / mean_n |y_n(0)|^2`` for every snapshot of ``y`` ``(N, T, X)``: ``(T,)``."""
    y = _as_series("y", y)
    e = (y**2).mean(-1).mean(0)
    return e / e[0]


def summary_statistics(y: np.ndarray, modes: int = 5) -> dict[str, np.ndarray]:
    """Energy decay over the snapshots and the energies of modes ``1..modes`` at the first and last snapshot."""
    y = _as_series("y", y)
    modes = check_positive_int("modes", modes)
    return {"energy_decay": energy_decay(y), "spectrum_initial": mode_energies(y[:, 0])[1 : modes + 1],
            "spectrum_final": mode_energies(y[:, -1])[1 : modes + 1]}


def compare_to_reference(obs: dict, ref: dict, *, decay_tol: float = 0.12, spectrum_tol: float = 0.25) -> list[str]:
    """Reasons ``obs`` does not match ``ref`` (empty when it does).

    Energy decay: every snapshot's ratio within ``decay_tol`` (relative) of the reference's; spectra: every
    mode energy within ``spectrum_tol`` (relative). The default tolerances are set against the spread of these
    statistics between disjoint 200-sample subsets of the training file and the whole file (decay 4.6%, mode
    energies 15% at ``t = 0`` and 19% at the last snapshot, printed by the CLI as ``subset_spread``): 2.6x and 1.3x
    that spread, which the matched generator meets (3.0%, 7.9%, 7.3% on the training file) and the FNO-paper law
    misses by orders of magnitude.
    """
    reasons = []
    checks = (("energy_decay", decay_tol), ("spectrum_initial", spectrum_tol), ("spectrum_final", spectrum_tol))
    for key, tol in checks:
        o, r = np.asarray(obs[key]), np.asarray(ref[key])
        if o.shape != r.shape:
            reasons.append(f"{key}: expected shape {r.shape}, got {o.shape}")
            continue
        rel = np.abs(o - r) / np.abs(r)
        if np.any(rel > tol):
            k = int(np.argmax(rel))
            reasons.append(f"{key}: expected within {tol:.0%} of the reference, got {rel[k]:.1%} at index {k} "
                           f"({o[k]:.4g} vs {r[k]:.4g})")
    return reasons


def replay_error(x: np.ndarray, y: np.ndarray, *, nu: float, t_final: float, n_solve: int = 256,
                 dt: float = 1e-3) -> float:
    """Relative L2 error of solving the file's own ``x`` and comparing with its ``y`` over all snapshots.

    ``x`` ``(N, X)`` is Fourier-interpolated to ``n_solve`` points (the Nyquist coefficient split evenly), solved by
    :func:`.burgers.solve_burgers` to ``len(y[0])`` equally spaced times on ``[0, t_final]`` and restricted back.
    """
    x = np.asarray(x, dtype=np.float64)
    y = _as_series("y", y)
    n, r = x.shape
    if y.shape[0] != n or y.shape[2] != r:
        raise ValueError(f"y: expected shape ({n}, T, {r}) to match x {x.shape}, got {y.shape}")
    n_solve = check_positive_int("n_solve", n_solve)
    if n_solve % r:
        raise ValueError(f"n_solve: expected a multiple of the file's {r} points, got {n_solve}")
    spec = np.zeros((n, n_solve // 2 + 1), dtype=np.complex128)
    spec[:, : r // 2 + 1] = np.fft.rfft(x, axis=-1) * (n_solve / r)
    if r % 2 == 0:
        spec[:, r // 2] *= 0.5
    u0 = np.fft.irfft(spec, n_solve)
    times = np.linspace(0.0, t_final, y.shape[1])
    sol = solve_burgers(u0, nu=nu, t_final=t_final, dt=dt, record_times=times)[:, :: n_solve // r, :]
    return float(np.linalg.norm(np.swapaxes(sol, 1, 2) - y) / np.linalg.norm(y))


def fit_initial_law(
    x: np.ndarray,
    *,
    source_points: int = 8192,
    modes: int = 7,
    taus: Iterable[float] = tuple(np.arange(0.0, 12.001, 0.25)),
    alphas: Iterable[float] = tuple(np.arange(2.0, 6.001, 0.05)),
) -> dict[str, object]:
    """Fit ``(sigma, tau, alpha)`` of :func:`.burgers.sample_burgers_initial` to initial fields ``x`` ``(N, X)``.

    Model of the stored mode energy ``E_k``, ``k = 1..modes``: the sum of ``sigma^2 (4 pi^2 j^2 + tau^2)^(-alpha)``
    over the modes ``j < source_points / 2`` of the source grid that alias onto ``k`` at ``X`` points. For each
    ``(tau, alpha)`` of the grid, ``log sigma^2`` is the mean log misfit (closed form); the pair with the least
    squared log residual wins. Returns the fit, its residual and ``model / reference`` per mode.
    """
    x = np.asarray(x, dtype=np.float64)
    r = x.shape[-1]
    modes = check_positive_int("modes", modes)
    if modes > (r - 1) // 2:
        raise ValueError(f"modes: expected at most (X - 1) // 2 = {(r - 1) // 2}, got {modes}")
    ref = np.log(mode_energies(x)[1 : modes + 1])
    j = np.arange(1, check_positive_int("source_points", source_points) // 2, dtype=np.float64)
    folded = np.mod(j, r)
    folded = np.minimum(folded, r - folded).astype(int)
    onto = [(folded == k) for k in range(1, modes + 1)]
    best = None
    for tau in taus:
        base = np.log(4.0 * np.pi**2 * j**2 + float(tau) ** 2)
        for alpha in alphas:
            e = np.exp(-float(alpha) * base)
            model = np.log(np.array([e[m].sum() for m in onto]))
            off = float(np.mean(ref - model))
            res = float(np.sum((model + off - ref) ** 2))
            if best is None or res < best[0]:
                best = (res, float(tau), float(alpha), off, model)
    res, tau, alpha, off, model = best
    return {"sigma": float(np.exp(off / 2.0)), "tau": tau, "alpha": round(alpha, 6), "log_residual": res,
            "model_over_reference": np.exp(model + off - ref).tolist(), "modes": modes, "source_points": source_points}


def generate_burgers_neuralop(n_samples: int, resolution: int = 16, *, seed: int = 0, fine_resolution: int = 256,
                              dt: float = 1e-3, **params: float) -> tuple[np.ndarray, np.ndarray]:
    """``(x (N, r), y (N, 17, r))`` in the files' layout, from the fitted law (:data:`NEURALOP_BURGERS_FIT`).

    Solved at ``fine_resolution`` (default 256: the statistics match those solved at 1024 with ``dt = 1e-4`` to
    three digits) with step ``dt``; ``params`` override the fit (``nu``, ``t_final``, ``sigma``, ``tau``, ``alpha``).
    """
    unknown = sorted(set(params) - set(NEURALOP_BURGERS_FIT))
    if unknown:
        raise TypeError(f"params: expected keywords among {sorted(NEURALOP_BURGERS_FIT)}, got unknown {unknown}")
    return generate_burgers_trajectories(n_samples, resolution, n_times=int(NEURALOP_BURGERS_FILE["n_times"]),
                                         fine_resolution=fine_resolution, seed=seed, dt=dt,
                                         **{**NEURALOP_BURGERS_FIT, **params})


def _subset_spread(y: np.ndarray, n: int) -> dict[str, float]:
    """Largest relative deviation of each statistic between disjoint ``n``-sample subsets and the whole file."""
    whole = summary_statistics(y)
    out = {k: 0.0 for k in whole}
    for s0 in range(0, len(y) - n + 1, n):
        part = summary_statistics(y[s0 : s0 + n])
        for k in whole:
            out[k] = max(out[k], float(np.max(np.abs(part[k] - whole[k]) / np.abs(whole[k]))))
    return out


def _main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    import torch

    p = argparse.ArgumentParser(description="Fit the matched Burgers generator to neuraloperator's burgers_*_16.pt")
    p.add_argument("path")
    p.add_argument("--n-samples", type=int, default=200, help="generated samples compared with the file")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    data = torch.load(args.path, weights_only=True)
    x, y = data["x"].numpy().astype(np.float64), data["y"].numpy().astype(np.float64)
    fit = fit_initial_law(x)
    replay = {str(t): replay_error(x[:100], y[:100], nu=float(data["visc"].flatten()[0]), t_final=t)
              for t in (0.9, 0.96, 1.0)}
    _, yy = generate_burgers_neuralop(args.n_samples, x.shape[-1], seed=args.seed)
    ref, obs = summary_statistics(y), summary_statistics(yy)
    as_list = lambda d: {k: np.asarray(v).round(5).tolist() for k, v in d.items()}  # noqa: E731
    print(json.dumps({"fit": fit, "replay_error_by_t_final": replay, "reference": as_list(ref),
                      "generated": as_list(obs), "subset_spread": _subset_spread(y, args.n_samples),
                      "mismatch": compare_to_reference(obs, ref)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
