"""
MANO: zero-shot across resolutions
==================================

Train the multipole attention neural operator (MANO) on Darcy flow at 32×32 and evaluate it,
without retraining, at 64×64 and 128×128 on the same distribution.

MANO's default layer keeps the queries at full resolution and attends, with tapered windows, to key
grids of a fixed physical size (64, 32, 16 and 8 cells per axis) plus a local 3×3 term. Since those key
grids and windows do not move when the input grid is refined, the same weights discretise the same
operator on any grid, so the error should stay flat as the grid is refined. The test data at every
resolution comes from one solve per sample at 128×128, restricted exactly to 64 and 32: each resolution
holds the same samples.

The budget here (32 samples, 3 epochs) keeps the script under two minutes on two CPU cores, so the model
is barely trained and its error is high; what the example shows is that the error does not grow with the
resolution. Trained numbers are in the benchmarks (``python -m benchmarks run darcy_mano``).

Run it with ``python examples/gallery/plot_mano_zero_shot.py``; ``SCIATTN_GALLERY_QUICK=1`` uses
fewer samples and epochs.
"""

import os

import matplotlib.pyplot as plt
import torch

from sciattn.operators import create_operator
from sciattn.pde_data.darcy import generate_darcy
from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.normalizers import fit_normalizers
from sciattn.train import Trainer, evaluate_dataset

torch.manual_seed(0)
QUICK = os.environ.get("SCIATTN_GALLERY_QUICK") == "1"
N_TRAIN, N_TEST, EPOCHS = (24, 4, 1) if QUICK else (32, 4, 3)  # under 2 minutes on a loaded 2-core machine
RESOLUTIONS = [32, 64, 128]

data = generate_darcy(N_TRAIN + N_TEST, RESOLUTIONS, seed=0)


def split(res, rows, name):
    a, u = (torch.from_numpy(t)[rows, None] for t in data[res])
    return GridPairDataset(a, u, {"split": name, "resolution": res})


train = split(32, slice(0, N_TRAIN), "train")
tests = {res: split(res, slice(N_TRAIN, None), "test") for res in RESOLUTIONS}

# %%
# The operator with its default configuration (only the channels are given):

model = create_operator("mano", in_channels=1, out_channels=1)
x_norm, y_norm = fit_normalizers(train)
Trainer(model=model, train_data=train, test_data={}, x_normalizer=x_norm, y_normalizer=y_norm, spatial_dims=2,
        epochs=EPOCHS, batch_size=4, lr=3e-3, progress=False, log=lambda message: None).fit()

errors = {res: evaluate_dataset(model, ds, x_normalizer=x_norm, y_normalizer=y_norm, spatial_dims=2)["rel_l2"]
          for res, ds in tests.items()}
for res, err in errors.items():
    print(f"{res:4d}x{res:<4d} relative L2 {err:.4f}" + ("  (training resolution)" if res == 32 else ""))

# %%
# Error against resolution
# ------------------------

fig, ax = plt.subplots(figsize=(5, 3.2))
ax.plot(RESOLUTIONS, [errors[r] for r in RESOLUTIONS], "o-")
ax.set_xscale("log", base=2)
ax.set_xticks(RESOLUTIONS, [str(r) for r in RESOLUTIONS])
ax.set_ylim(0, 1.2 * max(errors.values()))
ax.set_xlabel("grid points per axis (trained at 32)")
ax.set_ylabel("relative L2 error")
fig.tight_layout()

# %%
# One sample at every resolution
# ------------------------------
# Truth (top) and zero-shot prediction (bottom) on one colour scale.

model.eval()
truth_ref = tests[128].y[0, 0]
vmin, vmax = float(truth_ref.min()), float(truth_ref.max())
fig, axes = plt.subplots(2, 3, figsize=(10, 6.2))
for col, res in enumerate(RESOLUTIONS):
    ds = tests[res]
    with torch.no_grad():
        pred = y_norm.decode(model(x_norm.encode(ds.x[:1])))[0, 0]
    for row, (title, field) in enumerate([("truth", ds.y[0, 0]), ("prediction", pred)]):
        im = axes[row, col].imshow(field.numpy(), origin="lower", vmin=vmin, vmax=vmax)
        axes[row, col].set_title(f"{title}, {res}x{res}")
        axes[row, col].set_xticks([])
        axes[row, col].set_yticks([])
fig.colorbar(im, ax=axes, shrink=0.8)
plt.show()

# sphinx_gallery_thumbnail_number = 2
