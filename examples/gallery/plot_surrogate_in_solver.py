"""
A surrogate inside a solver loop
================================

Use a trained run as the initial guess of a classical iterative solver: conjugate gradients on the
five-point Darcy system :math:`A u = f` on a 64×64 grid, started once from zero and once from the
surrogate's prediction.

The run is trained at 32×32 with :func:`sciattn.train.train_run` (what ``sciattn train`` runs) and
loaded back with :meth:`Surrogate.from_run <sciattn.train.Surrogate.from_run>`, which takes NumPy
arrays and knows the run's normalisers, channel names and domain. The solver converges to the same
answer either way (it is run to the same tolerance); the prediction only changes how many iterations
that takes. A surrogate's error is not smooth, so its residual starts high and the saving is largest
at loose tolerances; :doc:`the pipelines page <../pipelines>` reports the full measurement
(``examples/warm_start_darcy.py``).

Run it with ``python examples/gallery/plot_surrogate_in_solver.py``; ``SCIATTN_GALLERY_QUICK=1`` uses
fewer samples and epochs.
"""

import os
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from sciattn.pde_data.darcy import DARCY_DEFAULTS, darcy_system, sample_coefficient
from sciattn.train import Surrogate, load_config, train_run

QUICK = os.environ.get("SCIATTN_GALLERY_QUICK") == "1"
N_TRAIN, EPOCHS, N_SOLVES = (32, 1, 2) if QUICK else (300, 10, 8)
TOLERANCES = [1e-2, 1e-3, 1e-4, 1e-6, 1e-8]

# %%
# Train a run
# -----------
# The configuration is the same dict a TOML file holds (``examples/configs/``).

config = load_config({
    "model": {"name": "galerkin_transformer", "d_model": 32, "n_layers": 3, "n_heads": 4, "n_modes": 12,
              "regressor_width": 20},
    "data": {"train": "darcy", "resolution": 32, "n_train": N_TRAIN, "n_test": 8},
    "train": {"epochs": EPOCHS, "batch_size": 8, "lr": 3e-3, "seed": 0},
})
with tempfile.TemporaryDirectory() as run_dir:  # checkpoint.pt, metrics.json, plots
    train_run(config, run_dir, progress=False, log=lambda message: None)
    surrogate = Surrogate.from_run(run_dir)
print("inputs", surrogate.input_names, "outputs", surrogate.output_names)

# %%
# Conjugate gradients from zero and from the prediction
# -----------------------------------------------------
# New coefficients on the 65-node grid; the unknowns are the 63×63 interior nodes, the model sees the
# nodes ``i / 64``, ``i = 0..63`` (the layout of the generated data).


def cg_iterations(A, f, x0, rtol):
    inv_diag = scipy.sparse.diags(1.0 / A.diagonal())
    count = [0]
    x, info = scipy.sparse.linalg.cg(A, f, x0=x0, rtol=rtol, atol=0.0, M=inv_diag, maxiter=20000,
                                     callback=lambda xk: count.__setitem__(0, count[0] + 1))
    assert info == 0, f"CG did not converge (info={info})"
    return count[0], x


rng = np.random.default_rng(123)
counts = {tol: ([], []) for tol in TOLERANCES}
for _ in range(N_SOLVES):
    a = sample_coefficient(1, 65, rng=rng, **DARCY_DEFAULTS)[0]
    A, f = darcy_system(a)
    guess = surrogate.predict(a[None, :64, :64])[0]           # (64, 64): zero-shot at twice the training grid
    for tol in TOLERANCES:
        counts[tol][0].append(cg_iterations(A, f, np.zeros_like(f), tol)[0])
        counts[tol][1].append(cg_iterations(A, f, guess[1:, 1:].ravel(), tol)[0])

for tol, (cold, warm) in counts.items():
    print(f"rtol {tol:g}: {np.mean(cold):6.1f} iterations from zero, {np.mean(warm):6.1f} from the surrogate")

fig, ax = plt.subplots(figsize=(5.5, 3.4))
ax.semilogx(TOLERANCES, [np.mean(c) for c, _ in counts.values()], "o-", label="from zero")
ax.semilogx(TOLERANCES, [np.mean(w) for _, w in counts.values()], "s-", label="from the surrogate")
ax.invert_xaxis()
ax.set_xlabel("relative residual tolerance")
ax.set_ylabel("mean CG iterations")
ax.legend()
fig.tight_layout()

# %%
# The last solve: converged solution and the surrogate's guess, on one colour scale.

_, u = cg_iterations(A, f, np.zeros_like(f), 1e-8)
solution = np.zeros((64, 64))
solution[1:, 1:] = u.reshape(63, 63)
vmin, vmax = float(solution.min()), float(solution.max())
fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
for ax, (title, field, kw) in zip(axes, [("CG solution", solution, dict(vmin=vmin, vmax=vmax)),
                                         ("surrogate guess", guess, dict(vmin=vmin, vmax=vmax)),
                                         ("|difference|", np.abs(guess - solution), dict(cmap="magma"))]):
    im = ax.imshow(field, origin="lower", **kw)
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.colorbar(im, ax=ax, shrink=0.8)
fig.tight_layout()
plt.show()

# sphinx_gallery_thumbnail_number = 2
