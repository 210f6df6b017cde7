"""Burgers generators against neuraloperator's real burgers_{train,test}_16.pt: energy decay and mode energies.

    python -m benchmarks run burgers_match [--quick] [--set data='"../shared/data"'] [--set n_samples=200]

Rows: the matched generator (preset ``neuralop_burgers``, :mod:`sciattn.pde_data.burgers_neuralop`), the FNO
paper's law at the file's ``nu = 0.01``, and the FNO paper's regime (``nu = 0.1``, preset ``fno_burgers``, our
``burgers`` defaults, on ``t in [0, 1]``), each over 17 snapshots (the first two on the files' ``t in [0, 0.96]``),
solved at 256 points with ``dt = 1e-3``, against both files. Each row also carries the fit of the initial law and
the replay of the file's own initial fields. Rows are appended to ``benchmarks/results/burgers_match.jsonl``;
``docs/data.md`` shows the table generated from the latest run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from sciattn.pde_data.burgers import BURGERS_DEFAULTS, generate_burgers_trajectories
from sciattn.pde_data.burgers_neuralop import (
    NEURALOP_BURGERS_FIT,
    compare_to_reference,
    fit_initial_law,
    generate_burgers_neuralop,
    replay_error,
    summary_statistics,
)

from .harness import module_benchmarks

ROOT = Path(__file__).resolve().parents[1]
LAWS = {
    "matched (neuralop_burgers)": None,
    "FNO law, nu = 0.01": {**{k: BURGERS_DEFAULTS[k] for k in ("sigma", "tau", "alpha")}, "nu": 0.01, "t_final": 0.96},
    "FNO paper, nu = 0.1 (fno_burgers)": {k: BURGERS_DEFAULTS[k] for k in ("nu", "t_final", "sigma", "tau", "alpha")},
}


def _max_rel(obs: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(obs - ref) / np.abs(ref)))


def measure(data: Path, n_samples: int, seed: int) -> dict:
    files = {s: torch.load(data / f"burgers_{s}_16.pt", weights_only=True) for s in ("train", "test")}
    x_train, y_train = (files["train"][k].numpy() for k in ("x", "y"))
    generated = {}
    for name, law in LAWS.items():
        if law is None:
            generated[name] = generate_burgers_neuralop(n_samples, 16, seed=seed)[1]
        else:
            generated[name] = generate_burgers_trajectories(n_samples, 16, fine_resolution=256, dt=1e-3, seed=seed,
                                                            **law)[1]
    rows = []
    for split, f in files.items():
        ref = summary_statistics(f["y"].numpy())
        for name, y in generated.items():
            obs = summary_statistics(y)
            rows.append({"file": split, "generator": name, "energy_at_t1": float(obs["energy_decay"][-1]),
                         "file_energy_at_t1": float(ref["energy_decay"][-1]),
                         "decay_max_rel": _max_rel(obs["energy_decay"], ref["energy_decay"]),
                         "spectrum_t0_max_rel": _max_rel(obs["spectrum_initial"], ref["spectrum_initial"]),
                         "spectrum_t1_max_rel": _max_rel(obs["spectrum_final"], ref["spectrum_final"]),
                         "passes": compare_to_reference(obs, ref) == []})
    fit = fit_initial_law(x_train)
    replay = {str(t): replay_error(x_train[:100], y_train[:100], nu=0.01, t_final=t) for t in (0.9, 0.96, 1.0)}
    return {"n_samples": n_samples, "seed": seed, "solve_points": 256, "dt": 1e-3, "fit": {k: fit[k] for k in ("sigma", "tau", "alpha",
                                                                                       "log_residual")},
            "recorded_fit": NEURALOP_BURGERS_FIT, "replay_error_by_t_final": replay, "rows": rows}


SCHEMA = {"file": "str", "generator": "str", "energy_at_t1": "float", "file_energy_at_t1": "float",
          "decay_max_rel": "float", "spectrum_t0_max_rel": "float", "spectrum_t1_max_rel": "float", "passes": "bool",
          "fit_sigma": "float", "fit_tau": "float", "fit_alpha": "float", "fit_log_residual": "float",
          "replay_t0_9": "float", "replay_t0_96": "float", "replay_t1_0": "float"}
COLUMNS = ("file", "generator", "energy_at_t1", "file_energy_at_t1", "decay_max_rel", "spectrum_t0_max_rel",
           "spectrum_t1_max_rel", "passes")
LABELS = {"energy_at_t1": "energy at the last snapshot", "file_energy_at_t1": "file's", "decay_max_rel": "decay",
          "spectrum_t0_max_rel": "modes 1-5 at t = 0", "spectrum_t1_max_rel": "modes 1-5 at the last snapshot",
          "passes": "match"}
PARAMS = {"data": str(ROOT.parent / "shared" / "data"), "n_samples": 200, "seed": 1}
QUICK = {"n_samples": 16}


def rows_of(result: dict) -> list[dict]:
    """One row per (file, generator), each carrying the fit and the replay errors."""
    fit, rep = result["fit"], result["replay_error_by_t_final"]
    extra = {"fit_sigma": float(fit["sigma"]), "fit_tau": float(fit["tau"]), "fit_alpha": float(fit["alpha"]),
             "fit_log_residual": float(fit["log_residual"]), "replay_t0_9": float(rep["0.9"]),
             "replay_t0_96": float(rep["0.96"]), "replay_t1_0": float(rep["1.0"])}
    return [{**r, **extra} for r in result["rows"]]


def run(params: dict) -> list[dict]:
    data = Path(params["data"])
    if not (data / "burgers_train_16.pt").is_file():
        raise FileNotFoundError(f"data: expected a folder holding burgers_train_16.pt, got {str(data)!r}")
    torch.set_num_threads(1)
    return rows_of(measure(data, int(params["n_samples"]), int(params["seed"])))


def notes(records: list[dict]) -> str:
    r, p = records[0]["row"], records[0]["params"]
    return (f"{p['n_samples']} generated samples (seed {p['seed']}), 17 snapshots (t in [0, 0.96]; [0, 1] for "
            "nu = 0.1), solved at 256 points, dt 0.001. Columns: the largest relative deviation from the file "
            "(tolerances: decay 12%, mode energies 25%).\n\n"
            f"Initial law fitted to `burgers_train_16.pt`: sigma {r['fit_sigma']:.1f}, tau {r['fit_tau']:.2f}, alpha "
            f"{r['fit_alpha']:.2f} (log residual {r['fit_log_residual']:.4f}). Replaying the file's own initial fields "
            f"at nu = 0.01: relative error {r['replay_t0_96']:.2e} for t_final = 0.96, {r['replay_t0_9']:.2e} for 0.9, "
            f"{r['replay_t1_0']:.2e} for 1.")


BENCHMARKS = module_benchmarks(globals(), columns=COLUMNS, labels=LABELS,
    description="Burgers generators against neuraloperator's burgers_{train,test}_16.pt (energy decay, mode energies);",
    claim="the matched generator (preset neuralop_burgers) passes the file checks, the FNO regime does not (docs/data.md)",
)
