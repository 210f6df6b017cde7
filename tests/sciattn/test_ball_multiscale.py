"""Multiscale physical balls (sciattn/balltree/multiscale.py, multiscale_attention.py): the layout holds every real
point once, nests key cells in ball cells and is chosen per cloud; the attention equals a direct per-query
transcription of its formula (float64), and the physical mode's ball attention when every key cell holds one point.
And the physical cell layout against its frozen copy from before it chose depths per cloud (tests/sciattn/_physical_v1.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from sciattn.balltree import BallAttention
from sciattn.balltree.multiscale import multiscale_layout
from sciattn.balltree.multiscale_attention import MultiscaleBallAttention, multiscale_attention
from sciattn.balltree.physical import _halvings_at, cell_layout, cloud_box, lattice_for
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _physical_v1 as v1  # noqa: E402

F64 = torch.float64


def _clouds(d: int, seed: int = 0):
    """A padded batch: uniform in [0,1]^d, a large shifted one, a tiny one, a clustered one (sizes differ)."""
    g = torch.Generator().manual_seed(seed)
    specs = [(300, 0.0, 1.0), (420, -2.0, 5.0), (40, 0.4, 0.05), (350, 3.0, 0.6)]
    n = max(s[0] for s in specs)
    pos = torch.full((len(specs), n, d), float("nan"), dtype=F64)
    mask = torch.zeros(len(specs), n, dtype=torch.bool)
    for i, (k, lo, side) in enumerate(specs):
        p = lo + side * torch.rand(k, d, generator=g, dtype=F64)
        if i == 3:
            p[: k // 4] = lo + side * (0.3 + 0.02 * torch.rand(k // 4, d, generator=g, dtype=F64))
        pos[i, :k], mask[i, :k] = p, True
    return pos, mask


LENGTHS = dict(ball=0.32, key=0.08, pool=0.12)


def _layout(pos, mask, **kw):
    box = cloud_box(pos, mask, lattice_for([0.32, 0.08, 0.12]))
    return multiscale_layout(pos, mask, box, **{**LENGTHS, "window": 64, "unit": 16, **kw})


@pytest.mark.parametrize("d", [2, 3])
def test_layout_holds_every_real_point_once_with_key_cells_nested_in_balls(d):
    pos, mask = _clouds(d)
    lay = _layout(pos, mask)
    tree, far = lay.tree, lay.far
    b, p = tree.perm.shape
    assert p % 64 == 0 and far.window == 64
    for i in range(b):
        real = tree.perm[i][tree.mask[i]]
        assert sorted(real.tolist()) == mask[i].nonzero()[:, 0].tolist()  # every real point exactly once
    torch.testing.assert_close(tree.pos[tree.mask], tree.to_tree(torch.nan_to_num(pos))[tree.mask])
    nk = far.n_keys
    real_slots = tree.mask
    # a key cell lies in one ball and is a run of slots; units of 16 slots never straddle balls
    kb = far.key_ball.gather(1, far.key_index)
    assert torch.equal(kb[real_slots], far.slot_ball[real_slots])
    idx = torch.arange(p).expand(b, p)
    assert ((idx >= far.key_start.gather(1, far.key_index)) & (idx < far.key_end.gather(1, far.key_index)))[real_slots].all()
    unit_ball = far.slot_ball.view(b, p // 16, 16)
    first = unit_ball[..., :1]
    assert ((unit_ball == first) | ~real_slots.view(b, p // 16, 16)).all()
    # every window's listed key cells include all key cells of the balls of its real slots
    for i in range(b):
        for w in range(p // 64):
            sl = slice(64 * w, 64 * w + 64)
            balls = set(far.slot_ball[i, sl][real_slots[i, sl]].tolist())
            need = {c for c in range(nk) if int(far.key_ball[i, c]) in balls}
            assert need == set(far.window_keys[i, w].tolist()) - {nk}
    # a key cell's points lie in one cell of its depth (at most the key diameter across, unless the depth is clamped
    # at ⌈log2 n⌉ + 2 for the cloud's n real points: under-resolved, as documented)
    box = cloud_box(pos, mask, lattice_for([0.32, 0.08, 0.12]))
    halv = _halvings_at(box[1], lay.depths["key"])
    diam = torch.linalg.vector_norm(box[1] / torch.exp2(halv.to(F64)), dim=-1)
    for i in range(b):
        n_i = int(mask[i].sum())
        clamped = int(lay.depths["key"][i]) == (n_i - 1).bit_length() + 2
        assert clamped or float(diam[i]) <= 0.08
        for c in far.key_index[i][real_slots[i]].unique().tolist():
            pts = tree.pos[i][real_slots[i] & (far.key_index[i] == c)]
            assert torch.cdist(pts, pts).max() <= float(diam[i]) + 1e-12


def test_layout_of_a_cloud_does_not_depend_on_its_batch_or_padding():
    pos, mask = _clouds(3)
    lay = _layout(pos, mask)
    for i in range(pos.shape[0]):
        k = int(mask[i].sum())
        alone = _layout(pos[i:i + 1, :k], None)
        pa, pb = alone.tree.perm.shape[1], lay.tree.perm.shape[1]
        assert pa <= pb
        real = alone.tree.mask[0]
        assert torch.equal(lay.tree.mask[i, :pa], real) and not lay.tree.mask[i, pa:].any()
        assert torch.equal(lay.tree.perm[i, :pa][real], alone.tree.perm[0][real])
        for name in ("slot_ball", "key_index"):
            assert torch.equal(getattr(lay.far, name)[i, :pa][real], getattr(alone.far, name)[0][real])
        torch.testing.assert_close(lay.centres[i, :pa][real], alone.centres[0][real], rtol=0, atol=1e-12)


def _direct(q, k, v, pos, w, mask, far, sigma, scale):
    """The formula of sciattn/balltree/multiscale_attention.py, query by query: the window's points of the query's
    ball exact, and every key cell of the ball pooled, with its mass outside the window."""
    b, h, p, _ = q.shape
    out = torch.zeros(b, h, p, v.shape[-1], dtype=F64)
    m = far.window
    for i in range(b):
        sb, kid = far.slot_ball[i], far.key_index[i]
        for s in range(p):
            if not mask[i, s]:
                continue
            win = torch.zeros(p, dtype=torch.bool)
            win[(s // m) * m:(s // m) * m + m] = True
            same = mask[i] & (sb == sb[s])
            keys, vals, logits_pos, logw = [], [], [], []
            for j in (same & win & (w[i] > 0)).nonzero()[:, 0].tolist():
                keys.append(k[i, :, j]), vals.append(v[i, :, j]), logits_pos.append(pos[i, j])
                logw.append(math.log(w[i, j]))
            for c in kid[same].unique().tolist():
                members = same & (kid == c)
                wc = w[i, members]
                total = float(wc.sum())
                resid = total - float(w[i, members & win].sum())
                if resid <= 1e-12 * max(total, 1e-300):
                    continue
                keys.append((wc[None, :, None] * k[i, :, members]).sum(1) / total)  # (H, D)
                vals.append((wc[None, :, None] * v[i, :, members]).sum(1) / total)
                logits_pos.append((wc[:, None] * pos[i, members]).sum(0) / total)
                logw.append(math.log(resid))
            if not keys:  # no admissible key in the ball: zero
                continue
            kk, vv = torch.stack(keys, 1), torch.stack(vals, 1)  # (H, n, ·)
            dist = torch.stack([torch.linalg.vector_norm(pos[i, s] - x) for x in logits_pos])
            score = scale * (kk @ q[i, :, s, :, None])[..., 0] + torch.tensor(logw, dtype=F64)
            if sigma is not None:
                score = score - sigma[:, None] * dist
            out[i, :, s] = (torch.softmax(score, -1)[..., None] * vv).sum(1)
    return out


@pytest.mark.parametrize("d", [2, 3])
def test_attention_equals_its_direct_transcription(d):
    g = torch.Generator().manual_seed(d)
    pos, mask = _clouds(d, seed=d)
    pos, mask = pos[:, :160], mask[:, :160]  # small, so the direct loop is quick; still several balls per cloud
    lay = _layout(pos, mask, window=32, unit=8)
    tree, far = lay.tree, lay.far
    b, p = tree.perm.shape
    h, dh = 2, 3
    q, k, v = (torch.randn(b, h, p, dh, generator=g, dtype=F64) for _ in range(3))
    w = torch.exp(torch.randn(b, p, generator=g, dtype=F64)) * tree.mask
    w[0, tree.mask[0].nonzero()[:3, 0]] = 0.0  # zero weights exclude a key
    sigma = torch.rand(h, generator=g, dtype=F64) + 0.5
    got = multiscale_attention(q, k, v, tree.pos, w, tree.mask, far, sigma, 0.7)
    want = _direct(q, k, v, tree.pos, w, tree.mask, far, sigma, 0.7)
    real = tree.mask[:, None, :, None].expand_as(got)
    torch.testing.assert_close(got[real], want[real], rtol=1e-12, atol=1e-12)
    assert (got.abs() > 0).any(-1)[tree.mask[:, None].expand(b, h, p)].float().mean() > 0.99


def test_equals_the_physical_ball_attention_when_every_key_cell_holds_one_point():
    """Points at the centres of the 1/16 cells of [0,1]²: the key cells (diameter 0.09) hold one point each, so the
    pooled far field is exact and the layer is the physical mode's ball attention over the 0.32 ball cell."""
    g = torch.Generator().manual_seed(5)
    t = (torch.arange(16, dtype=F64) + 0.5) / 16
    pos = torch.cartesian_prod(t, t)[None] + 0.001 * torch.rand(1, 256, 2, generator=g, dtype=F64)
    pos = torch.cat([pos, pos[:, torch.randperm(256, generator=g)]])
    x = torch.randn(2, 256, 8, generator=g, dtype=F64)
    w = torch.exp(torch.randn(2, 256, generator=g, dtype=F64))
    torch.manual_seed(0)
    phys = BallAttention(8, 2, 2, None, ball_diameter=0.32).double()
    ms = MultiscaleBallAttention(8, 2, 2, ball_diameter=0.32, key_diameter=0.09).double()
    ms.load_state_dict(phys.state_dict())
    with torch.no_grad():
        phys.sigma.fill_(3.0)
        ms.sigma.fill_(3.0)
    box = cloud_box(pos, None, lattice_for([0.32, 0.09]))
    lay = multiscale_layout(pos, None, box, ball=0.32, key=0.09, window=16, unit=16)
    tw = lay.tree.values_to_tree(w)
    got = lay.tree.from_tree(ms.attend(lay.tree.to_tree(x), lay.tree.pos, lay.tree.mask, tw, centres=lay.centres,
                                       far=lay.far))
    clay = cell_layout(pos, None, [0.32], box=box)
    want = clay.tree.from_tree(phys.attend(clay.tree.to_tree(x), clay.tree.pos, clay.tree.mask,
                                           clay.tree.values_to_tree(w), sizes=(clay.size(0),),
                                           centres=clay.centres(0)))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # with key cells of 4 points (diameter 0.18) the far field is pooled: a different quadrature
    lay4 = multiscale_layout(pos, None, cloud_box(pos, None, lattice_for([0.32, 0.18])), ball=0.32, key=0.18,
                             window=16, unit=16)
    pooled = lay4.tree.from_tree(ms.attend(lay4.tree.to_tree(x), lay4.tree.pos, lay4.tree.mask,
                                           lay4.tree.values_to_tree(w), centres=lay4.centres, far=lay4.far))
    assert (pooled - want).abs().max() > 1e-3


def test_attention_checks_its_arguments():
    with pytest.raises(ValueError, match="key_diameter: expected a length <= ball_diameter=0.2"):
        MultiscaleBallAttention(8, 2, 2, ball_diameter=0.2, key_diameter=0.3)
    pos = torch.rand(1, 30, 2, dtype=F64)
    box = cloud_box(pos, None, 0.25)
    with pytest.raises(ValueError, match="window: expected a positive multiple of unit=16, got 24"):
        multiscale_layout(pos, None, box, ball=0.3, key=0.1, window=24, unit=16)
    with pytest.raises(ValueError, match="key: expected a length <= ball=0.3"):
        multiscale_layout(pos, None, box, ball=0.3, key=0.5)
    layer = MultiscaleBallAttention(8, 2, 2, ball_diameter=0.3, key_diameter=0.1)
    with pytest.raises(ValueError, match="far: expected the FarField"):
        layer.attend(torch.randn(1, 32, 8), torch.rand(1, 32, 2))


# ---------------------------------------------------------------- the physical layout against its frozen copy
@pytest.mark.parametrize("case", ["uniform-2d", "uniform-3d", "clustered-rotated", "guarded"])
def test_physical_cell_layout_of_one_cloud_equals_the_frozen_copy(case):
    g = torch.Generator().manual_seed(7)
    d = 2 if case == "uniform-2d" else 3
    pos = torch.rand(1, 700, d, generator=g, dtype=F64)
    lengths, rotate = [0.32, 0.12], None
    if case == "clustered-rotated":
        pos[0, :300] = 0.4 + 0.01 * torch.rand(300, d, generator=g, dtype=F64)
        rotate = 45.0
    if case == "guarded":  # a surface in a box whose cells are mostly empty: the memory guard coarsens
        pos[0, :, 2] = 0.5
        pos = 10 * pos
        lengths = [0.05, 0.02]
    new, old = cell_layout(pos, None, lengths, rotate), v1.cell_layout(pos, None, lengths, rotate)
    assert torch.equal(new.tree.perm, old.tree.perm) and torch.equal(new.tree.mask, old.tree.mask)
    assert new.capacity == old.capacity and [new.size(i) for i in range(2)] == [old.size(i) for i in range(2)]
    assert [int(t) for t in new.depths] == old.depths
    torch.testing.assert_close(new.centres(0), old.centres(0), rtol=0, atol=0)


@pytest.mark.parametrize("d", [2, 3])
def test_physical_erwin_of_one_cloud_equals_the_frozen_geometry(d):
    g = torch.Generator().manual_seed(d)
    pos = torch.rand(1, 400, d, generator=g, dtype=F64)
    x = torch.randn(1, 400, 2, generator=g, dtype=F64)
    torch.manual_seed(0)
    model = create_operator("erwin", in_channels=2, out_channels=1, spatial_dims=d, ball_mode="physical",
                            c_hidden=[8, 8, 8], enc_depths=[2, 1, 1], dec_depths=[1, 1], n_heads=2,
                            pool_diameters=[0.12, 0.3]).double()
    torch.testing.assert_close(model(x, pos), model(x, pos, trees=v1.physical_trees_v1(model, pos)), rtol=0, atol=0)


def test_layer_forward_is_permutation_equivariant_and_independent_of_batch_and_padding():
    g = torch.Generator().manual_seed(11)
    torch.manual_seed(0)
    layer = MultiscaleBallAttention(8, 2, 3, ball_diameter=0.32, key_diameter=0.08, near_points=32).double()
    pos, mask = _clouds(3)
    x = torch.where(mask[..., None], torch.randn(*mask.shape, 8, generator=g, dtype=F64), float("nan"))
    w = torch.where(mask, torch.rand(*mask.shape, generator=g, dtype=F64) + 0.1, float("nan"))
    out = layer(x, pos, mask, w)
    assert torch.isfinite(out).all()  # NaN padding never reaches an output
    for i in range(pos.shape[0]):
        k = int(mask[i].sum())
        alone = layer(x[i:i + 1, :k], pos[i:i + 1, :k], None, w[i:i + 1, :k])
        torch.testing.assert_close(out[i:i + 1, :k], alone, rtol=1e-12, atol=1e-12)
        perm = torch.randperm(k, generator=g)
        moved = layer(x[i:i + 1, :k][:, perm], pos[i:i + 1, :k][:, perm], None, w[i:i + 1, :k][:, perm])
        torch.testing.assert_close(moved, alone[:, perm], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="tree: expected None"):
        layer(x, pos, mask, w, tree=object())
    with pytest.raises(ValueError, match="near_points: expected a power of two, got 48"):
        MultiscaleBallAttention(8, 2, 3, ball_diameter=0.32, key_diameter=0.08, near_points=48)
