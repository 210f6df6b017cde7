"""
MSPT on a car surface
=====================

The Multi-Scale Patch Transformer on an irregular 3-D point set: the surface pressure of ShapeNet-Car cars
(``mini_car.pt``, 3,586 surface points per car, each weighing a third of its triangles' areas).

MSPT cuts the point set into patches. In each patch one softmax runs over the patch's points and over one pooled
token per patch of the whole car, so a point sees its neighbourhood in full and the rest of the car at the
patches' resolution. sciattn's default patches are cells of a fixed physical size, and the pooling and the keys
carry the quadrature weights, so the layer converges as the surface is sampled more finely; the published
patches (``ball_mode="points"``) are runs of a fixed *number* of points of the ball-tree order.

The data are neuraloperator's mini ShapeNet-Car file: set ``SCIATTN_DATA`` to the folder holding
``mini_car.pt`` (``sciattn data fetch`` downloads it); without it the example draws the patch layouts only and
says so. Three cars:
train on two, test on the third, a small budget (a smoke fit, not a benchmark). Run it with
``python examples/gallery/plot_mspt_car.py``; ``SCIATTN_GALLERY_QUICK=1`` trains for fewer epochs.
"""

import os
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from sciattn.operators import create_operator
from sciattn.pde_data.readers.shapenet_car import load_mini_car
from sciattn.train import Trainer, evaluate_dataset
from sciattn.train.training.batching import collate, predict
from sciattn.train.training.run import fit_data_normalizers

torch.manual_seed(0)
QUICK = os.environ.get("SCIATTN_GALLERY_QUICK") == "1"
EPOCHS = 3 if QUICK else 15  # about 70 s on 2 busy cores


def find_mini_car() -> Path | None:
    """``mini_car.pt`` in ``$SCIATTN_DATA``, ``~/.cache/sciattn/data``, ``$SCIATTN_SHARED_DATA`` or the
    ``shared/data`` folder beside the repository, else None."""
    folders = [os.environ.get("SCIATTN_DATA"), Path.home() / ".cache" / "sciattn" / "data",
               os.environ.get("SCIATTN_SHARED_DATA"), Path(__file__).resolve().parents[2].parent / "shared" / "data"]
    for folder in folders:
        if folder and (Path(folder) / "mini_car.pt").is_file():
            return Path(folder) / "mini_car.pt"
    return None


def patch_of_each_point(tree) -> torch.Tensor:
    """The patch index of every input point of a one-cloud layout (``model.build_trees(pos).tree``)."""
    patch = torch.empty(tree.n_points, dtype=torch.long)
    real = tree.mask[0]
    patch[tree.perm[0][real]] = (torch.arange(tree.perm.shape[1]) // tree.ball_size)[real]
    return patch


# %%
# The two patch layouts on the unit square, at 1,024 and at 4,096 points (the first 1,024 of the same sample).
# The physical cells are the same at both resolutions and gain points; the published runs of the ball-tree
# order keep their number (32), so each gains points too, but their boundaries follow the sample, and each
# global token still counts as one point against ``N/32`` points of a patch.

pts = torch.rand(1, 4096, 2, generator=torch.Generator().manual_seed(0))
fig, axes = plt.subplots(2, 2, figsize=(8, 8))
for row, mode in enumerate(["physical", "points"]):
    layout_model = create_operator("mspt", in_channels=1, out_channels=1, spatial_dims=2, ball_mode=mode)
    for col, n in enumerate([1024, 4096]):
        tree = layout_model.build_trees(pts[:, :n]).tree
        ax = axes[row, col]
        ax.scatter(pts[0, :n, 0], pts[0, :n, 1], c=patch_of_each_point(tree).numpy() % 20, cmap="tab20", s=3)
        ax.set_title(f"{mode}: {n} points, {tree.n_balls} patches")
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
fig.tight_layout()

path = find_mini_car()
if path is None:
    print("mini_car.pt not found (set SCIATTN_DATA to its folder, or run `sciattn data fetch`): skipped")
else:
    # %%
    # Data: every car is ``{"x": (N, 6) positions and normals, "y": (N, 1) pressure, "pos": (N, 3),
    # "weights": (N,)}``; the last car is the test set.
    train = load_mini_car(path, "train", split_rule="last:1")
    test = load_mini_car(path, "test", split_rule="last:1")
    print(f"{len(train)} training cars, {len(test)} test car, {train[0]['pos'].shape[0]} points each")

    # %%
    # The operator: two MSPT blocks, width 32, default patches (cells at most 0.32 across in the unit cube the
    # cars are scaled to). ``build_trees`` shows the layout: patches of the car and the points in each.
    model = create_operator("mspt", in_channels=6, out_channels=1, spatial_dims=3, width=32, depth=2, n_heads=4)
    tree = model.build_trees(train[0]["pos"][None]).tree
    print(f"{tree.n_balls} patches of at most {tree.ball_size} points")
    x_norm, y_norm = fit_data_normalizers(train, c_out=1)
    trainer = Trainer(model=model, train_data=train, test_data={"test": test}, x_normalizer=x_norm,
                      y_normalizer=y_norm, spatial_dims=3, epochs=EPOCHS, batch_size=1, lr=2e-3, progress=False,
                      log=lambda message: None)
    trainer.fit()
    err = evaluate_dataset(model, test, x_normalizer=x_norm, y_normalizer=y_norm, spatial_dims=3)["rel_l2"]
    print(f"relative L2 error on the test car after {EPOCHS} epochs on two cars: {err:.4f}")

    # %%
    # The patches (colour: patch index) and the test car's pressure, truth and prediction (seen from above).
    sample = test[0]
    model.eval()
    with torch.no_grad():
        pred = predict(model, collate([sample]), x_norm, y_norm)[0, :, 0]
    patch = patch_of_each_point(tree)
    truth, pos = sample["y"][:, 0], sample["pos"]
    vmin, vmax = float(truth.min()), float(truth.max())
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    panels = [("patches (training car)", train[0]["pos"], patch.numpy() % 20, dict(cmap="tab20")),
              ("pressure, truth", pos, truth.numpy(), dict(vmin=vmin, vmax=vmax)),
              ("pressure, MSPT", pos, pred.numpy(), dict(vmin=vmin, vmax=vmax))]
    for ax, (title, p, values, kw) in zip(axes, panels):
        ax.scatter(p[:, 0], p[:, 2], c=values, s=3, **kw)
        ax.set_title(title)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    plt.show()
