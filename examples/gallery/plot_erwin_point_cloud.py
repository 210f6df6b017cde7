"""
Erwin on a point cloud
======================

Ball-tree attention on an irregular point set: Darcy flow sampled at scattered points, each carrying
a quadrature weight (its Delaunay cell area), learned by the Erwin U-Net.

A ball tree groups the points into balls of a fixed number of points; attention is a softmax within
each ball, :math:`z_i = \\sum_{j \\in B(i)} w_j e^{s_{ij}} v_j / \\sum_{j \\in B(i)} w_j e^{s_{ij}}`, so the
cost is linear in the number of points. Samples are padded to a common size with a mask, and padding
never changes the answer at the real points. The balls hold a fixed number of *points*, so unlike
the grid families this layer does not converge under refinement: the model is trained and tested on
clouds of the same size.

Run it with ``python examples/gallery/plot_erwin_point_cloud.py``; ``SCIATTN_GALLERY_QUICK=1`` uses
fewer samples and epochs.
"""

import os

import matplotlib.pyplot as plt
import torch

from sciattn.operators import create_operator
from sciattn.pde_data.geofno import PointSetDataset
from sciattn.pde_data.irregular import generate_darcy_irregular
from sciattn.train import Trainer, evaluate_dataset
from sciattn.train.training.batching import collate, predict
from sciattn.train.training.run import fit_data_normalizers

torch.manual_seed(0)
QUICK = os.environ.get("SCIATTN_GALLERY_QUICK") == "1"
N_TRAIN, N_TEST, EPOCHS, N_POINTS = (16, 4, 1, 256) if QUICK else (128, 16, 7, 512)  # under 2 minutes on 2 cores

# %%
# Data: one Darcy solve per sample on a 64×64 grid, interpolated to jittered scattered points.
# Each sample is ``{"x": (N, 1), "y": (N, 1), "pos": (N, 2), "weights": (N,)}``.

data = generate_darcy_irregular(N_TRAIN + N_TEST, N_POINTS, fine_resolution=64, layout="jittered", seed=0)
train = PointSetDataset([data[i] for i in range(N_TRAIN)], {**data.meta, "split": "train"})
test = PointSetDataset([data[i] for i in range(N_TRAIN, N_TRAIN + N_TEST)], {**data.meta, "split": "test"})
print({k: tuple(v.shape) for k, v in data[0].items() if torch.is_tensor(v)})

# %%
# The Erwin operator: two levels of ball attention (balls of 32 points), coarsened by 2.

model = create_operator("erwin", in_channels=1, out_channels=1, spatial_dims=2, c_hidden=[32, 64],
                        ball_sizes=[32, 32], enc_depths=[2, 2], dec_depths=[2], strides=[2], n_heads=4, rotate=45.0)
x_norm, y_norm = fit_data_normalizers(train, c_out=1)  # over the real points of the training clouds
trainer = Trainer(model=model, train_data=train, test_data={"test": test}, x_normalizer=x_norm,
                  y_normalizer=y_norm, spatial_dims=2, epochs=EPOCHS, batch_size=8, lr=1e-3, progress=False,
                  log=lambda message: None)
trainer.fit()
err = evaluate_dataset(model, test, x_normalizer=x_norm, y_normalizer=y_norm, spatial_dims=2)["rel_l2"]
print(f"relative L2 error on {N_TEST} test clouds: {err:.4f}")

# %%
# Truth and prediction at the points of one test cloud, on one colour scale.

sample = test[0]
model.eval()
with torch.no_grad():  # collate pads a list of clouds into a batch with a mask; predict decodes
    pred = predict(model, collate([sample]), x_norm, y_norm)[0, :, 0]
truth, pos = sample["y"][:, 0], sample["pos"]
vmin, vmax = float(truth.min()), float(truth.max())
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
for ax, (title, values, kw) in zip(axes, [("truth", truth, dict(vmin=vmin, vmax=vmax)),
                                          ("prediction", pred, dict(vmin=vmin, vmax=vmax)),
                                          ("|error|", (pred - truth).abs(), dict(cmap="magma"))]):
    sc = ax.scatter(pos[:, 0], pos[:, 1], c=values.numpy(), s=12, **kw)
    ax.set_title(title)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    fig.colorbar(sc, ax=ax, shrink=0.8)
fig.tight_layout()
plt.show()
