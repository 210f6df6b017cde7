"""MSPT (``sciattn.operators.mspt``) against a transcription of the published forward (``_mspt_published.py``):
float64, matched weights, parameters drawn away from the small initialisation so every branch matters. The
published ``"linear"`` chunking is fed the points in our ball-tree order (``ball_mode="points"``); the physical
mode's weighted attention is checked against an explicit quadrature softmax."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from sciattn.balltree.patch import count_patches, patch_attention, physical_patches
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _mspt_published as pub  # noqa: E402

TOL = 1e-10
CFG = dict(in_channels=3, out_channels=2, spatial_dims=2, width=16, depth=3, n_heads=4, mlp_ratio=2)


def _model(seed=0, **change):
    torch.manual_seed(seed)
    model = create_operator("mspt", **{**CFG, **change}).double().eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _cloud(n, b=1, seed=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, n, CFG["in_channels"], generator=g, dtype=torch.float64),
            torch.rand(b, n, 2, generator=g, dtype=torch.float64))


def _rel(a, b):
    return float((a - b).abs().max().detach() / b.abs().max().detach())


@pytest.mark.parametrize("n, k", [(96, 8), (120, 12), (64, 32)])
def test_points_mode_equals_the_published_forward(n, k):
    model = _model(ball_mode="points", n_patches=k)
    x, pos = _cloud(n)
    order = model.build_trees(pos).tree.perm[0]
    assert sorted(order.tolist()) == list(range(n))  # n divisible by k: every slot holds a point
    ref = pub.forward(pos[:, order], x[:, order], pub.published_parameters(model), n_blocks=CFG["depth"],
                      heads=CFG["n_heads"], n_patches=k)
    ours = model(x, pos)
    assert _rel(ours[:, order], ref) <= TOL
    # the global tokens matter: a model whose patches are one run (no exchange between patches) differs
    assert _rel(_model(ball_mode="points", n_patches=1)(x, pos)[:, order], ref) > 1e-3


def test_points_mode_gradients_equal_the_published_forward():
    model = _model(ball_mode="points", n_patches=8)
    x, pos = _cloud(64)
    x.requires_grad_(True)
    order = model.build_trees(pos).tree.perm[0]
    params = pub.published_parameters(model)
    ref = pub.forward(pos[:, order], x[:, order], params, n_blocks=CFG["depth"], heads=CFG["n_heads"], n_patches=8)
    r = torch.randn(ref.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    gx_ref, = torch.autograd.grad((ref * r).sum(), x)
    gx, = torch.autograd.grad((model(x, pos)[:, order] * r).sum(), x)
    assert _rel(gx, gx_ref) <= TOL


def test_points_mode_patches_are_ball_tree_runs_of_n_over_k_points():
    pos = torch.rand(2, 50, 2, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 50, dtype=torch.bool)
    mask[1, 37:] = False
    tree = count_patches(pos, mask, 8)
    assert tree.ball_size == 7  # ⌈50 / 8⌉
    per_patch = tree.mask.view(2, 8, 7).sum(2)
    assert per_patch[0].tolist() == [7] * 7 + [1] and per_patch[1].tolist() == [5] * 7 + [2]  # ⌈37 / 8⌉ = 5
    alone = count_patches(pos[1:, :37], None, 8)  # the padded cloud's patches are its own
    runs = [set(tree.perm[1].view(8, 7)[j][tree.mask[1].view(8, 7)[j]].tolist()) for j in range(8)]
    assert runs == [set(alone.perm[0].view(8, 5)[j][alone.mask[0].view(8, 5)[j]].tolist()) for j in range(8)]


def test_patch_attention_equals_an_explicit_quadrature_softmax():
    g = torch.Generator().manual_seed(1)
    b, h, k, m, d = 2, 2, 3, 4, 5
    qp, kp, vp = (torch.randn(b, h, k * m, d, generator=g, dtype=torch.float64) for _ in range(3))
    qg, kg, vg = (torch.randn(b, h, k, d, generator=g, dtype=torch.float64) for _ in range(3))
    w = torch.rand(b, k * m, generator=g, dtype=torch.float64)
    w[0, 5] = 0.0  # a padding slot
    mass = w.view(b, k, m).sum(2)
    omega = mass / mass.sum(1, keepdim=True)
    pts, glob = patch_attention((qp, kp, vp), (qg, kg, vg), m, w.log(), mass.log(), omega)
    for bi in range(b):
        for kk in range(k):
            keys = torch.cat([kp[bi, :, kk * m:(kk + 1) * m], kg[bi]], 1)
            vals = torch.cat([vp[bi, :, kk * m:(kk + 1) * m], vg[bi]], 1)
            kw = torch.cat([w[bi, kk * m:(kk + 1) * m], mass[bi]])
            for qi in range(m):
                s = torch.exp(keys @ qp[bi, :, kk * m + qi, :, None] / math.sqrt(d))[..., 0] * kw
                want = (s[..., None] * vals).sum(1) / s.sum(1, keepdim=True)
                assert torch.allclose(pts[bi, :, kk * m + qi], want, rtol=1e-12, atol=1e-12)
        want_g = 0
        for kk in range(k):
            keys = torch.cat([kp[bi, :, kk * m:(kk + 1) * m], kg[bi]], 1)
            vals = torch.cat([vp[bi, :, kk * m:(kk + 1) * m], vg[bi]], 1)
            kw = torch.cat([w[bi, kk * m:(kk + 1) * m], mass[bi]])
            s = torch.exp(qg[bi] @ keys.transpose(1, 2) / math.sqrt(d)) * kw
            want_g = want_g + omega[bi, kk] * (s @ vals) / s.sum(-1, keepdim=True)
        assert torch.allclose(glob[bi], want_g, rtol=1e-12, atol=1e-12)


def test_physical_patches_keep_their_cells_under_refinement():
    pts = torch.rand(1, 4096, 2, generator=torch.Generator().manual_seed(0))
    coarse, fine = (physical_patches(pts[:, :n], None, 0.25) for n in (1024, 4096))
    assert coarse.n_balls == fine.n_balls == 64  # cells 1/8 wide: diameter 0.177 <= 0.25
    assert fine.ball_size >= 2 * coarse.ball_size  # the patches gain points


def test_uniform_weights_change_nothing_and_weights_matter_in_the_physical_mode():
    model = _model()
    x, pos = _cloud(200)
    y = model(x, pos)
    assert _rel(model(x, pos, weights=torch.full((1, 200), 0.37, dtype=torch.float64)), y) <= TOL
    w = torch.rand(1, 200, generator=torch.Generator().manual_seed(4), dtype=torch.float64) + 0.1
    assert _rel(model(x, pos, weights=w), y) > 1e-3


def test_points_mode_weights_are_relative_to_the_cloud_mean():
    model = _model(ball_mode="points", n_patches=8)
    x, pos = _cloud(64)
    y = model(x, pos)
    assert _rel(model(x, pos, weights=torch.full((1, 64), 1 / 64, dtype=torch.float64)), y) <= TOL
    w = torch.rand(1, 64, generator=torch.Generator().manual_seed(4), dtype=torch.float64) + 0.1
    assert _rel(model(x, pos, weights=w), y) > 1e-3


@pytest.mark.parametrize(("change", "match"), [
    (dict(ball_mode="points", patch_diameter=0.2), r"patch_diameter: expected None with ball_mode='points'"),
    (dict(ball_mode="physical", n_patches=8), r"n_patches: expected None with ball_mode='physical'"),
    (dict(n_patches=0), r"n_patches: expected a positive int, got 0"),
    (dict(patch_diameter=-1.0), r"patch_diameter: expected a positive finite float, got -1.0"),
    (dict(ball_mode="grid"), r"ball_mode: expected one of"),
    (dict(width=10, n_heads=4), r"n_heads: expected a divisor of width=10, got 4"),
])
def test_errors_name_the_argument(change, match):
    with pytest.raises((ValueError, TypeError), match=match):
        create_operator("mspt", **{**CFG, **change})


def test_mode_inference_and_contract():
    assert create_operator("mspt", in_channels=1, out_channels=1).ball_mode == "physical"
    assert create_operator("mspt", in_channels=1, out_channels=1, n_patches=16).ball_mode == "points"
    model = create_operator("mspt", in_channels=1, out_channels=1)
    assert model.export_unsupported_reason and "patch layout" in model.export_unsupported_reason
    assert not model.supports_domain_parallel
