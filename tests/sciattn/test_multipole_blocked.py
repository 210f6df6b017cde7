"""The shared-box kernel's query blocks (``csrc/shared_boxes.cpp``): the scores, value sums and query gradients of
up to four queries of a row share every key load, and the key and value gradients are added once per eight
buffered queries. Every block size (runs of 1 to 9 queries along the last axis: full blocks, tails and the
backward's flush), queries without an admissible key inside a block, and head dimensions that pad (14) or span
several vectors (40) are checked against the SDPA path in float64, outputs and gradients, and so are the widened
boxes that runs of queries share where runs along an axis are short."""

from __future__ import annotations

import math

import pytest
import torch

from sciattn.multipole import _cpu_extension
from sciattn.multipole import box_attention as ba

F64 = torch.float64
needs_kernels = pytest.mark.skipif(_cpu_extension.why_not() is not None,
                                   reason=f"CPU kernels not available: {_cpu_extension.why_not()}")


def _compare(n, m, window, taper, d, logw, seed=0):
    torch.manual_seed(seed)
    b, h = logw.shape[0], 2
    q = torch.randn(b, h, d, *n, dtype=F64, requires_grad=True)
    k = torch.randn(b, h, d, *m, dtype=F64, requires_grad=True)
    v = torch.randn(b, h, d, *m, dtype=F64, requires_grad=True)
    logw = logw.clone().requires_grad_()
    out = ba.box_attention(q, k, v, logw, window, 0.3, taper=taper, backend="cpu")
    ref = ba.box_attention(q, k, v, logw, window, 0.3, taper=taper, backend="sdpa")
    assert (out - ref).abs().max() <= 1e-13 * ref.abs().max()
    g = torch.randn_like(ref)
    got = torch.autograd.grad((out * g).sum(), (q, k, v, logw))
    want = torch.autograd.grad((ref * g).sum(), (q, k, v, logw))
    for a, w in zip(got, want):
        assert (a - w).abs().max() <= 1e-12 * max(w.abs().max().item(), 1.0)
    return out


@needs_kernels
@pytest.mark.parametrize("run", range(1, 10))
@pytest.mark.parametrize("d", [14, 40])
def test_every_block_size(run, d, monkeypatch):
    monkeypatch.setattr(ba, "WIDEN_CELLS", 0)  # the runs as the level gives them (no widened boxes)
    m = (5, 6)
    n = (7, 6 * run)  # runs of `run` queries along the last axis share a box
    assert ba.lane_strides(n[1], m[1], 3) == (0, 0)  # the shared-box kernel
    logw = torch.rand(2, *m, dtype=F64).log()
    _compare(n, m, (2, 2), True, d, logw, seed=run)


@needs_kernels
def test_queries_without_admissible_keys_inside_blocks():
    torch.manual_seed(5)
    n, m = (9, 35), (6, 5)  # runs of 7 queries along the last axis: blocks of 4 and 3
    logw = torch.rand(2, *m, dtype=F64).log()
    logw[torch.rand(2, *m) < 0.55] = -math.inf
    out = _compare(n, m, (2, 2), True, 14, logw)
    dead = (out == 0).all(dim=2)  # (B, H, *n): queries with no admissible key
    assert dead.any() and not dead.all()
    # some block (queries 0-3 or 4-6 of a run of 7 along the last axis) mixes dead and live ones
    runs = dead.reshape(*dead.shape[:-1], 5, 7)
    mixed = [(blk.any(-1) & ~blk.all(-1)).any() for blk in (runs[..., :4], runs[..., 4:])]
    assert any(mixed)


@needs_kernels
def test_the_global_level_trains_through_the_kernels(monkeypatch):
    """With the blocked backward the shared-box kernel beats the SDPA path on the global level at every query count
    measured (32² to 512²), so training takes it too (it went through SDPA above 64 queries per key cell)."""
    n, m = (96, 96), (8, 8)  # 144 queries per key cell, one box of every key
    logw = torch.rand(1, *m, dtype=F64).log()
    want = _compare(n, m, (8, 8), True, 16, logw)

    def refuse(*args, **kwargs):
        raise AssertionError("the SDPA path was taken")

    monkeypatch.setattr(ba, "level_attention", refuse)
    torch.manual_seed(0)
    q = torch.randn(1, 2, 16, *n, dtype=F64, requires_grad=True)
    k = torch.randn(1, 2, 16, *m, dtype=F64, requires_grad=True)
    v = torch.randn(1, 2, 16, *m, dtype=F64, requires_grad=True)
    out = ba.box_attention(q, k, v, logw, (8, 8), 0.3, taper=True)
    out.sum().backward()
    assert torch.equal(out, want) and q.grad is not None


@needs_kernels
@pytest.mark.parametrize("n2, m2, lanes", [(32, 16, (0, 0)), (64, 16, (0, 0)), (64, 32, (1, 2)), (96, 32, (1, 3)),
                                          (128, 32, (1, 4)), (16, 16, (1, 1))])
def test_lane_strides_and_the_lane_kernel_with_query_strides(n2, m2, lanes):
    """Several queries per key cell with a box of half the key axis or more take the shared boxes (measured
    faster); query strides 2 to 4 with narrower boxes stay in the lanes, checked against SDPA."""
    assert ba.lane_strides(n2, m2, 9) == lanes
    logw = torch.rand(1, 3, m2, dtype=F64).log()
    _compare((3, n2), (3, m2), (2, 8), True, 14, logw)


WIDENED = [  # (n, m, window, taper): levels with one or two queries per key cell on some axis
    ((85, 85), (64, 64), (8, 8), True),
    ((41, 101), (32, 64), (8, 8), True),
    ((37, 29), (32, 32), (8, 8), False),
    ((101,), (64,), (8,), True),
    ((19, 23, 21), (16, 16, 16), (8, 8, 8), True),
]


@needs_kernels
@pytest.mark.parametrize("n, m, window, taper", WIDENED)
def test_widened_shared_boxes_equal_the_sdpa_path(n, m, window, taper):
    *_, (a, r), _ = ba._geometry(n, m, window, taper, F64, "cpu")
    assert (a, r) == (0, 0)
    logw = torch.rand(2, *m, dtype=F64).log()
    logw.view(-1)[::7] = -math.inf
    _compare(n, m, window, taper, 14, logw)


def test_widened_tables_keep_every_weight_and_share_starts():
    from sciattn.multipole.geometry import axis_geometry, folded_axis_geometry, widened_axis_geometry

    for n, m, c, folded in [(85, 64, 8, False), (141, 64, 8, False), (101, 32, 8, False), (40, 64, 8, True)]:
        plain = (folded_axis_geometry if folded else axis_geometry)(n, m, c, True)
        wide = widened_axis_geometry(n, m, c, True, 3, folded=folded)
        keys = n if folded else m
        assert wide.length == plain.length + 3 and int((wide.start + wide.length).max()) <= keys
        dense = [torch.full((n, keys), -math.inf, dtype=F64).scatter_(1, g.start[:, None] + torch.arange(g.length),
                                                                         g.logphi) for g in (plain, wide)]
        assert torch.equal(dense[0], dense[1])  # the same weight on every key cell of every query
        runs = torch.unique_consecutive(wide.start, return_counts=True)[1]
        assert runs.float().mean() >= 2 * torch.unique_consecutive(plain.start, return_counts=True)[1].float().mean()
    with pytest.raises(ValueError, match="extra >= 0"):
        widened_axis_geometry(85, 64, 8, True, -1)
