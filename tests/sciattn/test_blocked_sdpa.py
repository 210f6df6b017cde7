"""Block-diagonal fused SDPA: explicit formula, chunking (CPU), broadcast and per-chunk biases, empty blocks."""

from __future__ import annotations

import math

import pytest
import torch

from sciattn._blocked_sdpa import blocked_sdpa

F64 = torch.float64


def _explicit(q, k, v, logw, bias, scale):
    """softmax_j(scale q_i·k_j + log w_j + b_ij) v_j per block, zero for blocks without a key."""
    s = torch.einsum("bhmid,bhmjd->bhmij", q, k) * scale + logw[:, None, :, None, :] + bias
    empty = torch.isinf(logw).all(-1)[:, None, :, None, None]
    p = torch.softmax(torch.where(empty, 0.0, s), dim=-1)
    return torch.einsum("bhmij,bhmje->bhmie", torch.where(empty, 0.0, p), v)


def _inputs(seed, b=2, h=3, nb=7, m=8, d=5, e=4):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, nb, m, d, dtype=F64, generator=g) for _ in range(2))
    v = torch.randn(b, h, nb, m, e, dtype=F64, generator=g)
    logw = torch.log(torch.rand(b, nb, m, dtype=F64, generator=g) + 0.1)
    logw[torch.rand(b, nb, m, generator=g) < 0.3] = -math.inf
    logw[1, 4] = -math.inf  # an empty block
    shared = torch.randn(h, 1, m, m, dtype=F64, generator=g)  # the same in every block
    per_block = torch.randn(b, h, nb, m, m, dtype=F64, generator=g)
    return q, k, v, logw, shared, per_block


@pytest.mark.parametrize("scores_per_call", [None, 8 * 8, 2 * 3 * 3 * 64, 10**9])
@pytest.mark.parametrize("kind", ["none", "shared", "per_block"])
def test_matches_explicit_formula_in_outputs_and_gradients(kind, scores_per_call):
    q, k, v, logw, shared, per_block = _inputs(0)
    cot = torch.randn(2, 3, 7, 8, 4, dtype=F64, generator=torch.Generator().manual_seed(1))

    def run(fn):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, shared, per_block)]
        if kind == "none":
            bias, explicit_bias = None, 0.0
        elif kind == "shared":
            bias = explicit_bias = leaves[3]
        else:
            bias, explicit_bias = (lambda start, count: leaves[4][:, :, start : start + count]), leaves[4]
        out = fn(leaves, bias, explicit_bias)
        (out * cot).sum().backward()
        used = {"none": 3, "shared": 4, "per_block": 5}[kind]
        return [out.detach()] + [t.grad for t in leaves[:3]] + [leaves[used - 1].grad] * (used > 3)

    got = run(lambda t, bias, _: blocked_sdpa(*t[:3], logw, bias, 0.7, scores_per_call))
    want = run(lambda t, _, eb: _explicit(*t[:3], logw, eb, 0.7))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)
    assert torch.equal(got[0][1, :, 4], torch.zeros_like(got[0][1, :, 4]))


def test_chunks_follow_the_cpu_default(monkeypatch):
    import sciattn._blocked_sdpa as blocked

    calls = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **kw: calls.append(a[0].shape) or real(*a, **kw))
    monkeypatch.setattr(blocked, "CPU_SCORES_PER_CALL", 2 * 3 * 2 * 64)  # 2 blocks of 8x8 per (B, H) pair
    q, k, v, logw, _, _ = _inputs(2)
    blocked_sdpa(q, k, v, logw, None, 0.5)
    assert [s[1] for s in calls] == [6, 6, 6, 3]  # H·Mc for Mc = 2, 2, 2, 1
