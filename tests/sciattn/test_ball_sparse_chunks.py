"""The windowed compressed and selected BSA branches run a bounded number of windows at a time: outputs and gradients
equal the frozen all-windows-at-once oracle (``_bsa_reference``) in float64, for every chunking."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import sciattn.balltree.sparse as sparse
from sciattn.balltree import BallSparseAttention, build_ball_tree

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bsa_reference import windowed_sparse_reference  # noqa: E402

F64 = torch.float64


def _layer(seed, **kw):
    torch.manual_seed(seed)
    mod = BallSparseAttention(16, 2, 2, 16, block_size=4, top_k=3, window=64, **kw).double()
    with torch.no_grad():  # non-trivial parameters in every branch
        mod.pool_logits.normal_()
        mod.sigma_compressed.copy_(torch.tensor([1.5, 0.3]))
        mod.sigma_selected.copy_(torch.tensor([0.7, 2.5]))
    return mod


def _inputs(seed, b, n):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(b, n, 2, dtype=F64, generator=g)
    mask = torch.ones(b, n, dtype=torch.bool)
    if b > 1:  # a padded batch: the second cloud is shorter, and has masked points inside
        mask[1, n - n // 3:] = False
        mask[1, 5:9] = False
    tree = build_ball_tree(pos, mask, 16)
    h = tree.to_tree(torch.randn(b, n, 16, dtype=F64, generator=g)).requires_grad_()
    w = tree.values_to_tree(torch.rand(b, n, dtype=F64, generator=g) + 0.1)
    return h, tree.pos, tree.mask, w


def _grads(mod, outs, h, seed):
    g = torch.Generator().manual_seed(seed)
    loss = sum((o * torch.randn(o.shape, dtype=F64, generator=g)).sum() for o in outs)
    params = [p for p in mod.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [h, *params], allow_unused=True)
    return [torch.zeros_like(t) if gr is None else gr for t, gr in zip([h, *params], grads)]


# one window per run, three (uneven: 8 or 16 windows in 3s), the default
CHUNKS = [1, 3, None]


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize(("b", "n", "kw"), [
    (1, 50, {}),                                   # P = 64: one window
    (2, 230, {}),                                  # P = 256: 4 windows per cloud, padded batch
    (1, 1000, {}),                                 # P = 1024: 16 windows, N not a multiple of the window
    (2, 512, {"coarse_queries": False}),           # fine queries
    (2, 300, {"group_size": 2}),                   # groups smaller than blocks: own selection scores
    (1, 700, {"exclude_own_ball": False}),
])
def test_chunked_windows_match_the_all_windows_oracle(monkeypatch, chunk, b, n, kw):
    mod = _layer(1, **kw)
    if chunk is not None:  # exactly `chunk` windows per run
        blk, grp, mb = 4, mod.group_size, 16
        largest = max((mb if mod.coarse_queries else 64) * mb, (64 // grp) * mb, 64 * 3 * blk)
        monkeypatch.setattr(sparse, "CHUNK_ELEMENTS", chunk * mod.n_heads * largest)
        assert sparse.window_chunk(64, blk, grp, 3, mod.n_heads, mod.coarse_queries) == chunk
    h, pos, mask, w = _inputs(2, b, n)
    got = mod.branches(h, pos, mask, w)[1:]
    want = windowed_sparse_reference(mod, h, pos, mask, w)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)
        assert e.abs().max() > 1e-2  # a non-trivial output
    want_grads = _grads(mod, want, h, 3)
    for g, e in zip(_grads(mod, got, h, 3), want_grads):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)
    assert all(e.abs().max() > 0 for e in want_grads[:1]) and sum(e.abs().sum() for e in want_grads) > 0


def test_window_chunk_bounds_the_largest_intermediate():
    """Defaults (W = 4096, b = g = 8, k = 4, 4 heads): (W/b)² = 262,144 compressed scores per window and head, so
    2 windows per run at 2^21 entries; a window larger than the bound still runs, alone."""
    assert sparse.window_chunk(4096, 8, 8, 4, 4, True) == sparse.CHUNK_ELEMENTS // (4 * 512 * 512) == 2
    assert sparse.window_chunk(4096, 8, 8, 4, 4, False) == 1  # fine queries: W·W/b = 2^21 per head
    assert sparse.window_chunk(64, 4, 4, 3, 2, True) == sparse.CHUNK_ELEMENTS // (2 * 64 * 3 * 4)
