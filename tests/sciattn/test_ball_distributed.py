"""Domain-parallel ball attention: two gloo ranks holding whole balls reproduce the full layer."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.distributed as dist

from sciattn.balltree import BallAttention, build_ball_tree
from sciattn.balltree.distributed import all_reduce_gradients, ball_shard

sys.path.insert(0, os.path.dirname(__file__))
from _gloo import gloo_group, run_ranks  # noqa: E402

BALL = 8


def _setup():
    torch.manual_seed(0)
    layer = BallAttention(8, 2, spatial_dims=2, ball_size=BALL).double()
    g = torch.Generator().manual_seed(1)
    pos = torch.rand(2, 50, 2, generator=g, dtype=torch.float64)
    mask = torch.ones(2, 50, dtype=torch.bool)
    mask[1, 37:] = False  # a smaller second cloud: padding balls
    tree = build_ball_tree(pos, mask, BALL)
    h = tree.to_tree(torch.randn(2, 50, 8, generator=g, dtype=torch.float64))
    target = torch.randn(h.shape, generator=g, dtype=torch.float64)
    return layer, tree, h, target


def _worker(rank: int, world: int, port: int, results: dict) -> None:
    with gloo_group(rank, world, port):
        layer, tree, h, target = _setup()
        sl = ball_shard(h.shape[1], BALL, rank, world)
        out = layer.attend(h[:, sl], tree.pos[:, sl], tree.mask[:, sl])
        ((out - target[:, sl]).square() * tree.mask[:, sl, None]).sum().backward()
        all_reduce_gradients(layer)
        results[rank] = (sl.start, out.detach(), {n: p.grad.clone() for n, p in layer.named_parameters()})


def test_ball_shards_cover_the_tree_in_whole_balls():
    shards = [ball_shard(64, 8, r, 3) for r in range(3)]
    assert [(s.start, s.stop) for s in shards] == [(0, 24), (24, 48), (48, 64)]
    with pytest.raises(ValueError, match="n_tokens: expected a multiple of ball_size=8"):
        ball_shard(60, 8, 0, 2)
    with pytest.raises(ValueError, match=r"world_size: expected at most one rank per ball \(2 balls\), got 3"):
        ball_shard(16, 8, 0, 3)


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_two_ranks_with_whole_balls_equal_the_full_layer():
    got = sorted(run_ranks("test_ball_distributed", "_worker").values(), key=lambda r: r[0])
    layer, tree, h, target = _setup()
    assert got[0][0] == 0 and 0 < got[1][0] < h.shape[1]  # a real split at a ball boundary
    out = layer.attend(h, tree.pos, tree.mask)
    ((out - target).square() * tree.mask[..., None]).sum().backward()
    merged = torch.cat([got[0][1], got[1][1]], dim=1)
    torch.testing.assert_close(merged, out.detach(), rtol=1e-12, atol=1e-12)
    for name, p in layer.named_parameters():
        torch.testing.assert_close(got[0][2][name], p.grad, rtol=1e-10, atol=1e-12, msg=name)
        torch.testing.assert_close(got[1][2][name], p.grad, rtol=1e-10, atol=1e-12, msg=name)
