"""Ball sparse attention (BSA): each branch against an independent dense formula, block selection,
gating, padding and permutation invariances, gradients and errors."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from sciattn.balltree import BallSparseAttention, build_ball_tree
from sciattn.balltree.sparse import select_blocks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _dense_attention import dense_biased_attention  # noqa: E402

F64 = torch.float64


def _setup(seed, **kw):
    torch.manual_seed(seed)
    mod = BallSparseAttention(16, 2, 2, 16, **kw).double()
    with torch.no_grad():  # distinct, non-trivial parameters per branch
        mod.sigma_selected.copy_(torch.tensor([0.7, 2.5]))
        mod.sigma_compressed.copy_(torch.tensor([1.5, 0.3]))
        mod.pool_logits.normal_()
    b, n = 2, 50
    x, pos = torch.randn(b, n, 16, dtype=F64), torch.rand(b, n, 2, dtype=F64)
    mask = torch.rand(b, n) > 0.2
    w = torch.rand(b, n, dtype=F64) + 0.1
    tree = build_ball_tree(pos, mask, 16)
    h, wt = tree.to_tree(x), tree.values_to_tree(w)
    q, k, v = mod.project(h, tree.pos, tree.mask, 16)
    return mod, tree, h, wt, (q, k, v)


def test_selection_of_every_block_equals_full_attention():
    mod, tree, h, wt, (q, k, v) = _setup(0, block_size=4, top_k=1000, exclude_own_ball=False)
    _, _, sel = mod.branches(h, tree.pos, tree.mask, wt)
    want = dense_biased_attention(q, k, v, tree.pos, torch.log(wt).masked_fill(~tree.mask, -math.inf), mod.sigma_selected)
    m = tree.mask
    torch.testing.assert_close(sel.transpose(1, 2)[m], want.transpose(1, 2)[m], rtol=1e-10, atol=1e-12)


def test_selection_of_every_other_ball_equals_attention_outside_the_own_ball():
    mod, tree, h, wt, (q, k, v) = _setup(1, block_size=8, group_size=4, top_k=1000, exclude_own_ball=True)
    _, _, sel = mod.branches(h, tree.pos, tree.mask, wt)
    ball = torch.arange(tree.padded_size) // 16
    other = (ball[:, None] != ball[None, :])[None, None]
    want = dense_biased_attention(q, k, v, tree.pos, torch.log(wt).masked_fill(~tree.mask, -math.inf), mod.sigma_selected, other)
    m = tree.mask
    torch.testing.assert_close(sel.transpose(1, 2)[m], want.transpose(1, 2)[m], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("coarse", [True, False])
def test_compressed_branch_with_blocks_of_one_point_is_full_attention(coarse):
    mod, tree, h, wt, (q, k, v) = _setup(2, block_size=1, coarse_queries=coarse)
    _, comp, _ = mod.branches(h, tree.pos, tree.mask, wt)
    want = dense_biased_attention(q, k, v, tree.pos, torch.log(wt).masked_fill(~tree.mask, -math.inf), mod.sigma_compressed)
    m = tree.mask
    torch.testing.assert_close(comp.transpose(1, 2)[m], want.transpose(1, 2)[m], rtol=1e-10, atol=1e-12)


def test_compressed_branch_pools_with_the_learned_slot_weights():
    mod, tree, h, wt, (q, k, v) = _setup(3, block_size=4)
    _, comp, _ = mod.branches(h, tree.pos, tree.mask, wt)
    b, hh, p, dh = q.shape
    logw = torch.log(wt).masked_fill(~tree.mask, -math.inf).view(b, p // 4, 4)
    logq = torch.zeros_like(logw).masked_fill(~tree.mask.view(b, p // 4, 4), -math.inf)

    def pool(t, logits, lw):  # per block: Σ_j softmax(a_slot + log w)_j t_j, written out
        out = torch.zeros(b, hh, p // 4, t.shape[-1], dtype=F64)
        for bi in range(b):
            for c in range(p // 4):
                a = logits[:, :] + lw[bi, c][None]
                if torch.isinf(a).all():
                    continue
                out[bi, :, c] = (torch.softmax(a, -1)[..., None] * t[bi, :, 4 * c:4 * c + 4]).sum(1)
        return out

    qc, kc, vc = pool(q, mod.pool_logits[0], logq), pool(k, mod.pool_logits[1], logw), pool(v, mod.pool_logits[2], logw)
    mass = torch.logsumexp(logw, -1)
    cen = torch.stack([torch.stack([tree.pos[bi, 4 * c:4 * c + 4][tree.mask[bi, 4 * c:4 * c + 4]].mean(0)
                                    if tree.mask[bi, 4 * c:4 * c + 4].any() else torch.zeros(2, dtype=F64)
                                    for c in range(p // 4)]) for bi in range(b)])
    want = dense_biased_attention(qc, kc, vc, cen, mass, mod.sigma_compressed).repeat_interleave(4, dim=2)
    m = tree.mask
    torch.testing.assert_close(comp.transpose(1, 2)[m], want.transpose(1, 2)[m], rtol=1e-10, atol=1e-12)


def test_select_blocks_keeps_the_top_k_admissible_blocks():
    imp = torch.tensor([[[0.1, 0.5, 0.3, 0.9, 0.2], [0.4, 0.1, 0.8, 0.0, 0.7]]])
    allowed = torch.tensor([[[True, True, True, False, True], [True, False, False, False, False]]])
    idx, ok = select_blocks(imp, allowed, 2)
    assert idx[0, 0].tolist() == [1, 2] and ok[0, 0].tolist() == [True, True]
    assert idx[0, 1, 0] == 0 and ok[0, 1].tolist() == [True, False]  # only one admissible block


def test_gates_mix_the_three_branches_per_token_and_head():
    mod, tree, h, wt, _ = _setup(4, block_size=4, top_k=2)
    with torch.no_grad():
        mod.gate.weight.normal_()
    local, comp, sel = mod.branches(h, tree.pos, tree.mask, wt)
    g = torch.sigmoid(mod.gate(h)).view(*h.shape[:2], 3, 2)
    z = sum(g[:, :, r].transpose(1, 2)[..., None] * o for r, o in enumerate((local, comp, sel)))
    torch.testing.assert_close(mod.attend(h, tree.pos, tree.mask, wt), mod.proj(z.transpose(1, 2).flatten(2)))


def test_padding_and_permutation_invariance_with_a_cloud_smaller_than_a_ball():
    torch.manual_seed(5)
    mod = BallSparseAttention(16, 2, 3, 16, block_size=4, top_k=3).double()
    sizes, n = [60, 7, 35], 64
    x = torch.full((3, n, 16), float("nan"), dtype=F64)
    pos = torch.full((3, n, 3), float("nan"), dtype=F64)
    mask = torch.zeros(3, n, dtype=torch.bool)
    alone = []
    for b, s in enumerate(sizes):
        xb, pb = torch.randn(1, s, 16, dtype=F64), torch.rand(1, s, 3, dtype=F64)
        x[b, :s], pos[b, :s], mask[b, :s] = xb[0], pb[0], True
        alone.append(mod(xb, pb)[0])
    y = mod(x, pos, mask)
    for b, s in enumerate(sizes):
        torch.testing.assert_close(y[b, :s], alone[b], rtol=1e-12, atol=1e-12)
    perm = torch.randperm(n)
    yp = mod(x[:, perm], pos[:, perm], mask[:, perm])
    torch.testing.assert_close(yp[mask[:, perm]], y[:, perm][mask[:, perm]], rtol=1e-12, atol=1e-12)


def test_every_parameter_gets_a_gradient():
    torch.manual_seed(6)
    mod = BallSparseAttention(16, 2, 2, 8, block_size=2, group_size=4, top_k=2).double()
    with torch.no_grad():
        mod.gate.weight.normal_()
    x, pos = torch.randn(2, 40, 16, dtype=F64), torch.rand(2, 40, 2, dtype=F64)
    mod(x, pos).square().sum().backward()
    for name, p in mod.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="block_size: expected a power of two <= ball_size=16, got 32"):
        BallSparseAttention(16, 2, 2, 16, block_size=32)
    with pytest.raises(ValueError, match="group_size: expected a power of two, got 3"):
        BallSparseAttention(16, 2, 2, 16, group_size=3)
    with pytest.raises(ValueError, match="top_k: expected a positive int, got 0"):
        BallSparseAttention(16, 2, 2, 16, top_k=0)


def test_window_runs_the_compressed_and_selected_branches_of_each_window_alone():
    """``window=W``: the branches of a cloud of ``P > W`` tree slots are those of each run of ``W`` slots on its own
    (the oracle: the global layer called on each window); ``P <= W`` is the global layer; the local branch is kept."""
    torch.manual_seed(4)
    glob = BallSparseAttention(16, 2, 2, 16, block_size=4, top_k=3, window=None).double()
    win = BallSparseAttention(16, 2, 2, 16, block_size=4, top_k=3, window=64).double()
    with torch.no_grad():
        glob.pool_logits.normal_()
    win.load_state_dict(glob.state_dict())
    b, n = 2, 230
    pos = torch.rand(b, n, 2, dtype=F64)
    mask = torch.rand(b, n) > 0.1
    tree = build_ball_tree(pos, mask, 16)
    p = tree.perm.shape[1]
    assert p == 256
    h = tree.to_tree(torch.randn(b, n, 16, dtype=F64))
    w = tree.values_to_tree(torch.rand(b, n, dtype=F64) + 0.1)
    got = win.branches(h, tree.pos, tree.mask, w)
    for start in range(0, p, 64):
        sl = slice(start, start + 64)
        want = glob.branches(h[:, sl], tree.pos[:, sl], tree.mask[:, sl], w[:, sl])
        for g, e in zip(got, want):
            torch.testing.assert_close(g[:, :, sl], e, rtol=1e-12, atol=1e-12)
    full = glob.branches(h, tree.pos, tree.mask, w)
    torch.testing.assert_close(got[0], full[0], rtol=1e-12, atol=1e-12)  # local: the same balls
    assert (got[1] - full[1]).abs().max() > 1e-3  # compressed: 64 slots instead of 256
    big = BallSparseAttention(16, 2, 2, 16, block_size=4, top_k=3, window=256).double()
    big.load_state_dict(glob.state_dict())
    for g, e in zip(big.branches(h, tree.pos, tree.mask, w), full):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"window: expected None or a power of two >= ball_size=16 \(point-count balls\), got 8"):
        BallSparseAttention(16, 2, 2, 16, block_size=4, window=8)
    with pytest.raises(ValueError, match="window: expected a power of two, got 100"):
        BallSparseAttention(16, 2, 2, 16, block_size=4, window=100)
