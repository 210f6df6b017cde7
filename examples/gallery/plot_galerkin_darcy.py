"""
Galerkin Transformer on Darcy flow
==================================

Train a small Galerkin Transformer on Darcy flow from the built-in finite-difference solver and
compare its prediction with the solution on a test sample.

Galerkin attention is the quadrature :math:`z_i = \\sum_j w_j\\,(q_i \\cdot k_j)\\, v_j` of the integral
operator :math:`\\int_\\Omega (q(x)\\cdot k(y))\\, v(y)\\, \\mathrm{d}y`, with no softmax: it is linear in
the number of grid points. The problem is :math:`-\\nabla\\cdot(a \\nabla u) = 1` on the unit square with
:math:`u = 0` on the boundary; the model maps the coefficient :math:`a` to the solution :math:`u`.

Run it with ``python examples/gallery/plot_galerkin_darcy.py``; ``SCIATTN_GALLERY_QUICK=1`` uses
fewer samples and epochs.
"""

import os

import matplotlib.pyplot as plt
import torch
from matplotlib.ticker import MaxNLocator

from sciattn.operators import create_operator
from sciattn.pde_data.darcy import generate_darcy
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.normalizers import fit_normalizers
from sciattn.train import Trainer, evaluate_dataset

torch.manual_seed(0)
QUICK = os.environ.get("SCIATTN_GALLERY_QUICK") == "1"
N_TRAIN, N_TEST, EPOCHS = (32, 8, 2) if QUICK else (160, 20, 6)  # under 2 minutes on a loaded 2-core machine
RES = 32

# %%
# Data
# ----
# :func:`~sciattn.pde_data.darcy.generate_darcy` draws piecewise-constant coefficients (a thresholded
# Gaussian random field) and solves each once with the five-point scheme. Fields are ``(N, 1, 32, 32)``.

data = generate_darcy(N_TRAIN + N_TEST, [RES], seed=0)
a, u = (torch.from_numpy(t)[:, None] for t in data[RES])
train = GridPairDataset(a[:N_TRAIN], u[:N_TRAIN], {"split": "train", "resolution": RES})
test = GridPairDataset(a[N_TRAIN:], u[N_TRAIN:], {"split": "test", "resolution": RES})

# %%
# Model and training
# ------------------
# The registry builds every operator by name; the normalisers are fitted on the training split only.

model = create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=32, n_layers=3,
                        n_heads=4, n_modes=8, regressor_width=16)
x_norm, y_norm = fit_normalizers(train)
trainer = Trainer(model=model, train_data=train, test_data={"test": test}, x_normalizer=x_norm,
                  y_normalizer=y_norm, spatial_dims=2, epochs=EPOCHS, batch_size=8, lr=3e-3, progress=False,
                  log=lambda message: None)
trainer.fit()
err = evaluate_dataset(model, test, x_normalizer=x_norm, y_normalizer=y_norm, spatial_dims=2)["rel_l2"]
print(f"relative L2 error on {N_TEST} test samples: {err:.4f}")

# %%
# Loss curve
# ----------

epochs = [row["epoch"] for row in trainer.history]
fig, ax = plt.subplots(figsize=(5, 3.2))
ax.semilogy(epochs, [row["train_loss"] for row in trainer.history], "o-", label="train loss (rel. L2)")
ax.semilogy(epochs, [row["test_rel_l2"] for row in trainer.history], "s-", label="test rel. L2")
ax.set_xlabel("epoch")
ax.xaxis.set_major_locator(MaxNLocator(integer=True))
ax.legend()
fig.tight_layout()

# %%
# Truth and prediction
# --------------------
# Truth and prediction share one colour scale, so their colours compare directly.

model.eval()
with torch.no_grad():
    pred = y_norm.decode(model(x_norm.encode(a[N_TRAIN:N_TRAIN + 1])))[0, 0]
truth = u[N_TRAIN, 0]
vmin, vmax = float(truth.min()), float(truth.max())
fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
panels = [("coefficient a", a[N_TRAIN, 0], {}), ("truth u", truth, dict(vmin=vmin, vmax=vmax)),
          ("prediction", pred, dict(vmin=vmin, vmax=vmax)), ("|error|", (pred - truth).abs(), dict(cmap="magma"))]
for ax, (title, field, kw) in zip(axes, panels):
    im = ax.imshow(field.numpy(), origin="lower", **kw)
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.colorbar(im, ax=ax, shrink=0.8)
fig.tight_layout()
plt.show()

# sphinx_gallery_thumbnail_number = 2
