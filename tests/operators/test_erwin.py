"""Erwin U-Net: invariances, receptive fields of balls / rotated trees / pooling, PyG adapter, config."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from sciattn.operators import create_operator
from sciattn.operators.erwin import Erwin

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _batch_checks as bc  # noqa: E402

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see tests/conftest.py


SMALL = dict(in_channels=3, out_channels=2, spatial_dims=2, c_hidden=[8, 16], ball_sizes=[8, 8], enc_depths=[2, 2],
             dec_depths=[2], strides=[2], n_heads=2, mlp_ratio=2)


def _batch(sizes, n, c=3, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.full((len(sizes), n, c), float("nan"), dtype=F64)
    pos = torch.full((len(sizes), n, d), float("nan"), dtype=F64)
    w = torch.full((len(sizes), n), float("nan"), dtype=F64)
    mask = torch.zeros(len(sizes), n, dtype=torch.bool)
    for b, s in enumerate(sizes):
        x[b, :s] = torch.randn(s, c, dtype=F64, generator=g)
        pos[b, :s] = torch.rand(s, d, dtype=F64, generator=g)
        w[b, :s] = torch.rand(s, dtype=F64, generator=g) + 0.1
        mask[b, :s] = True
    return x, pos, mask, w


def test_padding_invariance_and_permutation_equivariance_with_mixed_sizes():
    torch.manual_seed(0)
    model = Erwin(**SMALL).double()
    sizes = [45, 5, 20]  # 5 < one ball
    x, pos, mask, w = _batch(sizes, 48)
    y = model(x, pos, mask, w)
    assert torch.isfinite(y[mask]).all()
    for b, s in enumerate(sizes):
        alone = model(x[b:b + 1, :s], pos[b:b + 1, :s], None, w[b:b + 1, :s])
        torch.testing.assert_close(y[b, :s], alone[0], rtol=1e-11, atol=1e-12)
    perm = torch.randperm(48)
    yp = model(x[:, perm], pos[:, perm], mask[:, perm], w[:, perm])
    torch.testing.assert_close(yp[mask[:, perm]], y[:, perm][mask[:, perm]], rtol=1e-11, atol=1e-12)
    torch.testing.assert_close(model(x, pos, mask, 3.0 * w), y, equal_nan=True)  # only weight ratios matter


def _dependence(model, x, pos, i):
    """Input points whose features change output point ``i`` (nonzero gradient)."""
    x = x.clone().requires_grad_()
    model(x, pos)[0, i].sum().backward()
    return set((x.grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist())


def _members(tree, slot, size):
    start = slot // size * size
    ids = tree.perm[0, start:start + size][tree.mask[0, start:start + size]]
    return set(ids.tolist())


def test_receptive_fields_of_ball_rotated_tree_and_pooling():
    torch.manual_seed(1)
    x, pos = torch.randn(1, 64, 3, dtype=F64), torch.rand(1, 64, 2, dtype=F64)
    one_level = dict(in_channels=3, out_channels=1, spatial_dims=2, c_hidden=[8], ball_sizes=[8], enc_depths=[2],
                     dec_depths=[], strides=[], n_heads=2)
    flat = Erwin(**one_level, rotate=None).double()
    tree = flat.build_trees(pos).tree
    i = 10
    slot = int(tree.inverse[0, i])
    ball = _members(tree, slot, 8)
    assert _dependence(flat, x, pos, i) == ball  # exactly its ball, nothing else

    rotated = Erwin(**one_level, rotate=45.0).double()
    dep = _dependence(rotated, x, pos, i)
    assert ball < dep  # the rotated block reaches across the ball boundary

    unet = Erwin(**{**SMALL, "out_channels": 1}, rotate=None).double()
    dep = _dependence(unet, x, pos, i)
    coarse = _members(unet.build_trees(pos).tree, slot, 16)  # a coarse ball of 8 parents = 16 points
    assert ball < dep <= coarse


def test_pyg_batch_matches_dense_and_given_trees_are_reused():
    torch.manual_seed(2)
    model = Erwin(**SMALL).double()
    graphs = bc.check_pyg_batch_matches_dense(model, (30, 6, 17))
    x, pos = graphs[0].x[None], graphs[0].pos[None]
    trees = model.build_trees(pos)
    torch.testing.assert_close(model(x, pos, trees=trees), model(x, pos))


def test_a_few_steps_of_training_reduce_the_loss():
    torch.manual_seed(3)
    model = Erwin(**{**SMALL, "in_channels": 1, "out_channels": 1})
    pos = torch.rand(4, 64, 2)
    x = torch.ones(4, 64, 1)
    y = torch.sin(3 * pos[..., :1]) * torch.cos(2 * pos[..., 1:])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    trees = model.build_trees(pos)
    losses = []
    for _ in range(40):
        loss = (model(x, pos, trees=trees) - y).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_registry_config_is_plain_json_and_errors_name_the_argument():
    model = create_operator("erwin", **SMALL)
    config = json.loads(json.dumps(model.config))
    assert {k: config[k] for k in SMALL} == json.loads(json.dumps(SMALL))
    with pytest.raises(ValueError, match="enc_depths: expected 2 entries"):
        Erwin(**{**SMALL, "enc_depths": [2]})
    with pytest.raises(ValueError, match="strides: expected a power of two, got 3"):
        Erwin(**{**SMALL, "strides": [3]})
    with pytest.raises(ValueError, match="rotate: expected 0 or None for spatial_dims=1"):
        Erwin(**{**SMALL, "spatial_dims": 1})
    model = Erwin(**SMALL)
    with pytest.raises(ValueError, match="x: expected size 3 along axis 2"):
        model(torch.randn(1, 10, 4), torch.rand(1, 10, 2))
    with pytest.raises(ValueError, match=r"mask: expected shape \(1, 10\)"):
        model(torch.randn(1, 10, 3), torch.rand(1, 10, 2), torch.ones(1, 9, dtype=torch.bool))


LEGACY = Path(__file__).parent / "data" / "legacy_pointset_checkpoints.pt"


@pytest.mark.parametrize("name", ["erwin", "bsa_transformer"])
def test_checkpoints_written_before_physical_balls_and_euler_rotation_reproduce_their_outputs(name, tmp_path):
    # Written by the code of the recorded commit (3-D, rotate=45: the plane rotation of that code); their
    # configs store point counts and no ball_mode, their state dicts module version 1.
    from sciattn.train.checkpoint import load_model

    data = torch.load(LEGACY, weights_only=True)
    path = tmp_path / f"{name}.pt"
    path.write_bytes(data[name]["checkpoint"])
    model, _, _, _ = load_model(path)
    assert model.ball_mode == "points" and model.plane_rotation
    with torch.no_grad():
        out = model(data["x"], data["pos"], data["mask"])
    torch.testing.assert_close(out, data[name]["output"], rtol=1e-5, atol=1e-6)
    # the same config built anew rotates about all three axes (Erwin), which changes the output
    fresh = create_operator(name, **model.config).eval()
    fresh.load_state_dict(model.state_dict())
    assert not fresh.plane_rotation
    with torch.no_grad():
        assert not torch.allclose(fresh(data["x"], data["pos"], data["mask"]), out, atol=1e-4)


def test_ball_modes_are_inferred_and_validated():
    base = dict(in_channels=2, out_channels=1, spatial_dims=2)
    model = create_operator("erwin", **base)
    assert model.ball_mode == "multiscale" and model.key_diameter == 0.08 and model.near_points == 64
    assert create_operator("erwin", **base, ball_mode="physical").key_diameter is None
    with pytest.raises(ValueError, match="key_diameter: expected a length <= ball_diameters"):
        create_operator("erwin", **base, key_diameter=0.5)
    with pytest.raises(ValueError, match="key_diameter: expected None with ball_mode='physical'"):
        create_operator("erwin", **base, ball_mode="physical", key_diameter=0.05)
    with pytest.raises(ValueError, match="near_points: expected a power of two"):
        create_operator("erwin", **base, near_points=48)
    assert create_operator("erwin", **base, ball_sizes=[8, 8]).ball_mode == "points"
    assert create_operator("erwin", **base, ball_mode="points").ball_sizes == [64, 64]
    with pytest.raises(ValueError, match="ball_sizes"):
        create_operator("erwin", **base, ball_mode="physical", ball_sizes=[8, 8])
    with pytest.raises(ValueError, match="ball_diameters"):
        create_operator("erwin", **base, ball_mode="points", ball_diameters=[0.3, 0.6])
    with pytest.raises(ValueError, match="ball_mode"):
        create_operator("erwin", **base, ball_mode="radius")
    with pytest.raises(ValueError, match="pool_diameters"):
        create_operator("erwin", **base, pool_diameters=[-0.1])


def test_configs_stored_before_the_multiscale_and_window_defaults_keep_their_model():
    """A checkpoint's config stores every constructor key; one written before ``key_diameter`` (Erwin) or ``window``
    (BSA) existed meant the physical mode / global branches, and is migrated to them by the keys' absence."""
    from sciattn.train.checkpoint import migrate_ball_modes

    old = {"in_channels": 2, "out_channels": 1, "ball_mode": None, "ball_sizes": None, "strides": None}
    assert migrate_ball_modes("erwin", old)[1]["ball_mode"] == "physical"
    assert migrate_ball_modes("erwin", {**old, "ball_sizes": [8, 8]})[1]["ball_mode"] == "points"
    new = create_operator("erwin", in_channels=2, out_channels=1).config
    assert migrate_ball_modes("erwin", new) == ("erwin", new)  # holds key_diameter (None): kept, multiscale
    assert create_operator("erwin", **migrate_ball_modes("erwin", old)[1]).ball_mode == "physical"
    bsa = {k: v for k, v in create_operator("bsa_transformer", in_channels=2, out_channels=1).config.items()
           if k != "window"}
    assert migrate_ball_modes("bsa_transformer", bsa)[1]["window"] is None
    assert create_operator("bsa_transformer", in_channels=2, out_channels=1).config["window"] == 4096


@pytest.mark.parametrize("name", ["erwin", "bsa_transformer"])
def test_physical_mode_runs_a_padded_batch_one_cloud_at_a_time_and_reuses_its_geometry(name):
    from sciattn.operators._point_operator import PerCloudGeometry

    torch.manual_seed(0)
    small = (dict(c_hidden=[8, 8], enc_depths=[1, 1], dec_depths=[1], n_heads=2) if name == "erwin"
             else dict(width=8, depth=2, n_heads=2))
    model = create_operator(name, in_channels=3, out_channels=2, spatial_dims=2, ball_mode="physical",
                            **small).double()
    g = torch.Generator().manual_seed(1)
    pos = torch.rand(2, 90, 2, generator=g, dtype=F64)
    pos[1] = 3 * pos[1] - 1  # another extent
    x = torch.randn(2, 90, 3, generator=g, dtype=F64)
    mask = torch.ones(2, 90, dtype=torch.bool)
    mask[0, 60:] = False
    geo = model.build_trees(pos, mask)
    assert isinstance(geo, PerCloudGeometry) and [len(i) for i, _ in geo.rows] == [60, 90]
    out = model(x, pos, mask, trees=geo)
    torch.testing.assert_close(out, model(x, pos, mask), rtol=0, atol=0)
    torch.testing.assert_close(out[0, :60], model(x[:1, :60], pos[:1, :60])[0], rtol=0, atol=1e-14)
    assert (out[0, 60:] == 0).all()
    with pytest.raises(ValueError, match="trees: expected geometry of 1 clouds of 90 points, got 2 clouds of 90"):
        model(x[:1], pos[:1], mask[:1], trees=geo)
