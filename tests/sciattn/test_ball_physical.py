"""Physically scaled balls (sciattn.balltree.physical) and Erwin's 3-D rotation (sciattn.balltree.build)."""

from __future__ import annotations

import math

import pytest
import torch

from sciattn.balltree import BallAttention, build_ball_tree, rotation_matrix
from sciattn.balltree.physical import cell_centres, cell_layout, cloud_box, lattice_for


def _uniform(n: int, d: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.rand(1, n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_cells_have_the_physical_size_and_gain_points_under_refinement():
    pts = _uniform(4096)
    sizes = {}
    for n in (512, 4096):
        lay = cell_layout(pts[:, :n], None, [0.32, 0.12])
        tree = lay.tree
        assert lay.depths == [5, 8]  # 32 balls of 1/8 x 1/4 (diameter 0.28), 256 cells of 1/16 (0.088)
        balls = tree.pos.view(1, -1, lay.size(0), 2)
        m = tree.mask.view(1, -1, lay.size(0))
        # every ball's real points lie in one 1/8 x 1/4 box of the unit square (the same boxes at any n)
        lo = torch.where(m[..., None], balls, math.inf).amin(2)
        hi = torch.where(m[..., None], balls, -math.inf).amax(2)
        full = m.any(-1)
        extent = (hi - lo)[full]
        assert (extent[:, 0] <= 0.125).all() and (extent[:, 1] <= 0.25).all()
        assert (extent.amax(0) > torch.tensor([0.1, 0.2], dtype=extent.dtype)).all()
        sizes[n] = float(m.sum(-1).double().mean())
        # every real point exactly once
        assert torch.equal(torch.sort(tree.perm[tree.mask]).values, torch.arange(n))
    assert sizes[4096] > 6 * sizes[512]  # points per ball grow with the density


def test_cell_membership_is_the_same_at_every_resolution():
    pts = _uniform(4096, seed=3)
    box = cloud_box(pts, None, lattice_for([0.12]))
    coarse = cell_centres(pts[:, :256], box, 8)
    fine = cell_centres(pts, cloud_box(pts[:, :256], None, lattice_for([0.12])), 8)[:, :256]
    assert torch.equal(coarse, fine)  # snapped boxes agree: [0, 1]^2 on the 2^-6 lattice
    torch.testing.assert_close(box[0], torch.zeros(1, 2, dtype=torch.float64))
    torch.testing.assert_close(box[1], torch.ones(1, 2, dtype=torch.float64))


def test_layout_is_permutation_equivariant_and_masks_padding():
    pts = _uniform(300, d=3, seed=1).float()
    mask = torch.ones(1, 300, dtype=torch.bool)
    mask[0, 250:] = False
    pts[0, 250:] = float("nan")
    perm = torch.randperm(300, generator=torch.Generator().manual_seed(2))
    a = cell_layout(pts, mask, [0.5, 0.25])
    b = cell_layout(pts[:, perm], mask[:, perm], [0.5, 0.25])
    assert a.tree.perm.shape == b.tree.perm.shape
    torch.testing.assert_close(a.tree.pos, b.tree.pos)  # slot s holds the same point
    assert torch.equal(a.tree.mask, b.tree.mask) and int(a.tree.mask.sum()) == 250
    x = torch.randn(1, 300, 4)
    torch.testing.assert_close(a.tree.from_tree(a.tree.to_tree(x))[mask], x[mask])


def test_physical_ball_attention_converges_under_nested_refinement():
    pts = _uniform(4096, seed=5).float()
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 16)
    attn = BallAttention(16, 4, 2, None, ball_diameter=0.32, rpe=False)
    published = BallAttention(16, 4, 2, 32, rpe=False)
    published.load_state_dict(attn.state_dict())

    def errors(layer):
        with torch.no_grad():
            outs = {n: layer(lin(torch.sin(3 * pts[:, :n])), pts[:, :n]) for n in (256, 1024, 4096)}
        return [float((outs[n] - outs[4096][:, :n]).norm() / outs[4096][:, :n].norm()) for n in (256, 1024)]

    e_phys, e_pub = errors(attn), errors(published)
    assert e_phys[1] <= 0.6 * e_phys[0]
    assert e_phys[1] < 0.5 * e_pub[1]  # the point-count ball does not converge like the physical one


def test_layer_options_are_validated():
    with pytest.raises(ValueError, match="ball_size"):
        BallAttention(8, 2, 2, 16, ball_diameter=0.3)
    with pytest.raises(ValueError, match="ball_diameter"):
        BallAttention(8, 2, 2, None, ball_diameter=-1.0)
    with pytest.raises(ValueError, match="ball_size"):
        BallAttention(8, 2, 2, None)


def _rotated_balls_per_ball(rot: torch.Tensor, n=2048, ball=32) -> float:
    pos = _uniform(n, d=3, seed=4)
    plain, rt = build_ball_tree(pos, None, ball), build_ball_tree(pos, None, ball, rotate=rot)
    owner = torch.empty_like(rt.perm).scatter_(1, rt.perm, torch.arange(n).view(1, n) // ball)
    per = owner.gather(1, plain.perm).view(-1, ball)
    return sum(len(set(r.tolist())) for r in per) / per.shape[0]


def test_erwin_rotation_turns_all_three_axes_and_mixes_more():
    r = rotation_matrix(45.0, 3, torch.float64)
    torch.testing.assert_close(r @ r.T, torch.eye(3, dtype=torch.float64))
    assert abs(float(torch.linalg.det(r)) - 1) < 1e-12
    a = math.radians(45.0)
    c, s = math.cos(a), math.sin(a)
    rz = torch.tensor([[c, -s, 0], [s, c, 0], [0, 0, 1]], dtype=torch.float64)
    ry = torch.tensor([[c, 0, s], [0, 1, 0], [-s, 0, c]], dtype=torch.float64)
    rx = torch.tensor([[1, 0, 0], [0, c, -s], [0, s, c]], dtype=torch.float64)
    torch.testing.assert_close(r, rz @ ry @ rx)  # Erwin: the product of three Euler rotations
    plane = rotation_matrix(45.0, 3, torch.float64, plane=True)
    assert float(plane[2, 2]) == 1.0 and (r - torch.eye(3, dtype=torch.float64)).abs()[2].sum() > 0.5
    before, after = _rotated_balls_per_ball(plane), _rotated_balls_per_ball(r)
    print(f"rotated balls per ball: plane {before:.2f}, Euler {after:.2f}")
    assert after > before + 0.8
