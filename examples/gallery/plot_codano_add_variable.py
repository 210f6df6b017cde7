"""
CoDA-NO: a new physical variable with ``add_variable``
======================================================

Codomain attention treats each physical variable as a token: a field :math:`u_a(x)` attends to
:math:`u_b` through quadratures of whole fields, :math:`\\langle q_a, k_b\\rangle = \\int_\\Omega q_a(x)
\\cdot k_b(x)\\, \\mathrm{d}x \\approx \\sum_j w_j\\, q_a(x_j)\\cdot k_b(x_j)`. The same weights therefore
run on any set of variables. Here a CoDANO learns one step of 2-D Navier–Stokes with the variables
``u, v, w`` (velocity and vorticity), then :meth:`~sciattn.operators.CoDANO.add_variable` gives it a
temperature ``theta`` and it is fine-tuned on a few samples of the Boussinesq system (buoyancy couples
``theta`` into the flow), where it predicts all four variables.

Run it with ``python examples/gallery/plot_codano_add_variable.py``; ``SCIATTN_GALLERY_QUICK=1`` uses
fewer samples and epochs.
"""

import os

import matplotlib.pyplot as plt
import torch

from sciattn.operators import create_operator
from sciattn.pde_data.coupled_navier_stokes import generate_coupled_navier_stokes
from sciattn.train.training.losses import relative_l2

torch.manual_seed(0)
QUICK = os.environ.get("SCIATTN_GALLERY_QUICK") == "1"
N_PRE, N_FEW, N_TEST, STEPS = (16, 8, 4, 10) if QUICK else (120, 24, 16, 120)  # under 2 minutes on 2 cores
RES = 32


def one_step_pairs(system, n_train, seed):
    """Train and test pairs ``(N, V, 32, 32)`` of ``system`` and its variable names."""
    pairs = generate_coupled_navier_stokes(n_train + N_TEST, [RES], system=system, seed=seed)
    x, y = (torch.from_numpy(t) for t in pairs.pairs[RES])
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:]), list(pairs.variables)


def train(model, data, variables, steps, lr=3e-3):
    """Adam on the relative L2 error of random batches of 8, passing the variable names every call."""
    x, y = data
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(steps):
        idx = torch.randint(len(x), (8,))
        loss = relative_l2(model(x[idx], variables=variables), y[idx], spatial_dims=2)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_error(model, data, variables):
    model.eval()
    with torch.no_grad():
        return float(relative_l2(model(data[0], variables=variables), data[1], spatial_dims=2))


# %%
# Pretraining on ``u, v, w``
# --------------------------

ns_train, ns_test, ns_vars = one_step_pairs("ns", N_PRE, seed=0)
model = create_operator("codano", variables=ns_vars, width=16, n_layers=2, n_heads=2, n_modes=8)
train(model, ns_train, ns_vars, STEPS)
ns_err = test_error(model, ns_test, ns_vars)
print(f"Navier-Stokes {ns_vars}: relative L2 {ns_err:.4f}")

# %%
# Adding ``theta`` and fine-tuning on a few Boussinesq samples
# ------------------------------------------------------------
# ``add_variable`` adds only the new variable's positional encoding (here a copy of the vorticity's,
# so the model starts by treating it as that analogue); nothing shared changes.

bq_train, bq_test, bq_vars = one_step_pairs("boussinesq", N_FEW, seed=1)
model.add_variable("theta", like="w")
zero_shot = test_error(model, bq_test, bq_vars)
train(model, bq_train, bq_vars, STEPS // 2, lr=1e-3)
bq_err = test_error(model, bq_test, bq_vars)
print(f"Boussinesq {bq_vars} before fine-tuning: relative L2 {zero_shot:.4f}")
print(f"Boussinesq {bq_vars} after {N_FEW} samples: relative L2 {bq_err:.4f}")

# %%
# The four predicted fields of one test sample
# --------------------------------------------
# Each column shares one colour scale between truth (top) and prediction (bottom).

model.eval()
with torch.no_grad():
    pred = model(bq_test[0][:1], variables=bq_vars)[0]
truth = bq_test[1][0]
fig, axes = plt.subplots(2, len(bq_vars), figsize=(3 * len(bq_vars), 5.6))
for col, name in enumerate(bq_vars):
    vmin, vmax = float(truth[col].min()), float(truth[col].max())
    for row, (title, field) in enumerate([("truth", truth[col]), ("prediction", pred[col])]):
        im = axes[row, col].imshow(field.numpy(), origin="lower", vmin=vmin, vmax=vmax, cmap="RdBu_r")
        axes[row, col].set_title(f"{name}: {title}")
        axes[row, col].set_xticks([])
        axes[row, col].set_yticks([])
    fig.colorbar(im, ax=axes[:, col], shrink=0.7)
plt.show()
