"""
Spherical shallow water
=======================

Learn one hour of the rotating shallow-water equations on the sphere with the spherical transformer,
then roll it out as a time stepper.

Spherical attention is a quadrature on the sphere: keys are weighted by the area of their grid
cell, :math:`z_i = \\sum_j w_j e^{s_{ij}} v_j / \\sum_j w_j e^{s_{ij}}` with :math:`w_j` the latitude
quadrature weight times the longitude spacing, so points crowded near the poles do not count more
than the area they cover. The neighbourhood variant restricts :math:`j` to a geodesic disc around
:math:`i`. The data comes from the built-in spectral solver
(:func:`~sciattn.pde_data.shallow_water_data.generate_shallow_water`): geopotential, vorticity and
divergence on a 16×32 equiangular grid.

Run it with ``python examples/gallery/plot_spherical_shallow_water.py``; ``SCIATTN_GALLERY_QUICK=1`` uses
fewer samples and epochs.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from sciattn.operators import create_operator
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.normalizers import fit_normalizers
from sciattn.pde_data.shallow_water_data import generate_shallow_water
from sciattn.train import Surrogate, Trainer
from sciattn.train.analysis.area_metrics import area_weighted_l2

torch.manual_seed(0)
QUICK = os.environ.get("SCIATTN_GALLERY_QUICK") == "1"
N_TRAIN, EPOCHS, STEPS = (32, 1, 3) if QUICK else (256, 10, 6)
NLAT, NLON = 16, 32

# %%
# One-step pairs ``(state(t), state(t + 1 h))`` ``(N, 3, 16, 32)`` and a held-out trajectory.

data = generate_shallow_water(N_TRAIN, nlat=NLAT, nlon=NLON, n_traj=1, traj_len=STEPS, seed=0)
train = GridPairDataset(torch.from_numpy(data["x"]), torch.from_numpy(data["y"]), {"split": "train"})
model = create_operator("spherical_transformer", in_channels=3, out_channels=3, nlat=NLAT, nlon=NLON,
                        embed_dim=32, n_layers=2, n_heads=2, attention="neighborhood", residual_prediction=True)
x_norm, y_norm = fit_normalizers(train)
Trainer(model=model, train_data=train, test_data={}, x_normalizer=x_norm, y_normalizer=y_norm, spatial_dims=2,
        epochs=EPOCHS, batch_size=8, lr=2e-3, progress=False, log=lambda message: None).fit()

# %%
# Rollout
# -------
# :class:`~sciattn.train.Surrogate` turns the trained operator into a time stepper on NumPy arrays;
# ``rollout`` applies it ``STEPS`` times from the trajectory's first state. This small model, trained on
# one-step pairs only, is not stable: its error compounds from step to step (a log scale below), which
# is what rollout training (``[train] rollout_steps``) and larger models address.

surrogate = Surrogate(model, x_norm, y_norm, dt=3600.0, spatial_dims=2)
truth = data["trajectories"][0]                         # (STEPS + 1, 3, nlat, nlon)
rollout = surrogate.rollout(truth[0], STEPS)            # (STEPS + 1, 3, nlat, nlon)
weights = torch.from_numpy(data["weights"])
errors = [float(area_weighted_l2(torch.from_numpy(rollout[k:k + 1]), torch.from_numpy(truth[k:k + 1]), weights))
          for k in range(1, STEPS + 1)]
for k, err in enumerate(errors, 1):
    print(f"after {k} h: area-weighted relative L2 {err:.4f}")

fig, ax = plt.subplots(figsize=(5, 3.2))
ax.semilogy(range(1, STEPS + 1), errors, "o-")
ax.set_xlabel("hours of rollout")
ax.set_ylabel("area-weighted relative L2")
fig.tight_layout()

# %%
# Vorticity, truth and rollout
# ----------------------------
# Longitude on the horizontal axis, colatitude on the vertical; one colour scale per row pair.

lon = np.degrees(data["longitudes"])
lat = 90 - np.degrees(data["colatitudes"])
shown = [1, STEPS]
fig, axes = plt.subplots(2, len(shown), figsize=(5 * len(shown), 5.2), squeeze=False)
vmax = float(np.abs(truth[shown, 1]).max())
for col, k in enumerate(shown):
    for row, (title, field) in enumerate([("truth", truth[k, 1]), ("rollout", rollout[k, 1])]):
        im = axes[row, col].pcolormesh(lon, lat, field, vmin=-vmax, vmax=vmax, cmap="RdBu_r", shading="nearest")
        axes[row, col].set_title(f"vorticity, {title}, t = {k} h")
        axes[row, col].set_xlabel("longitude (deg)")
        axes[row, col].set_ylabel("latitude (deg)")
fig.colorbar(im, ax=axes, shrink=0.8)
plt.show()

# sphinx_gallery_thumbnail_number = 2
