"""Domain-parallel Galerkin attention: two gloo ranks holding halves of the points reproduce the
single-process layer on the full input, outputs and gradients."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.distributed as dist

from sciattn.galerkin import galerkin_attention
from sciattn.galerkin.distributed import domain_parallel_galerkin_attention

sys.path.insert(0, os.path.dirname(__file__))
from _gloo import gloo_group, run_ranks  # noqa: E402


def _inputs():
    g = torch.Generator().manual_seed(0)
    b, h, n, d, e = 2, 3, 23, 4, 5
    q = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    v = torch.randn(b, h, n, e, generator=g, dtype=torch.float64)
    w = torch.rand(b, n, generator=g, dtype=torch.float64) + 0.1
    mask = torch.rand(b, n, generator=g) > 0.2
    target = torch.randn(b, h, n, e, generator=g, dtype=torch.float64)
    return q, k, v, w, mask, target


def _loss(out, target, mask):
    return ((out - target).square() * mask[:, None, :, None]).sum()


def _worker(rank: int, world: int, port: int, results: dict) -> None:
    with gloo_group(rank, world, port):
        q, k, v, w, mask, target = _inputs()
        sl = slice(0, 11) if rank == 0 else slice(11, None)  # uneven split
        parts = [t[:, :, sl].clone().requires_grad_() for t in (q, k, v)]
        wr = w[:, sl].clone().requires_grad_()
        out = domain_parallel_galerkin_attention(*parts, wr, mask[:, sl])
        _loss(out, target[:, :, sl], mask[:, sl]).backward()
        results[rank] = [out.detach()] + [t.grad for t in (*parts, wr)]



@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_two_ranks_equal_the_full_layer_outputs_and_gradients():
    results = run_ranks("test_galerkin_distributed", "_worker")
    got = [results[r] for r in (0, 1)]
    q, k, v, w, mask, target = _inputs()
    full = [t.clone().requires_grad_() for t in (q, k, v, w)]
    out = galerkin_attention(full[0], full[1], full[2], weights=full[3], mask=mask)
    _loss(out, target, mask).backward()
    merged = [torch.cat([got[0][i], got[1][i]], dim=2 if i < 4 else 1) for i in range(5)]
    torch.testing.assert_close(merged[0], out.detach(), rtol=1e-12, atol=1e-12)
    for name, mine, ref in zip("qkvw", merged[1:], [t.grad for t in full]):
        # padded points have no gradient path in the full layer either
        torch.testing.assert_close(mine, ref, rtol=1e-10, atol=1e-12, msg=f"gradient of {name}")


def test_requires_an_initialised_group():
    q = torch.randn(1, 1, 4, 2)
    with pytest.raises(RuntimeError, match="group: expected an initialised torch.distributed process group"):
        domain_parallel_galerkin_attention(q, q, q)
