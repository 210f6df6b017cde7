"""The fused C++ neighbourhood attention backend (``cpu``): outputs and every gradient against the float64
reference, in float64 (the generic kernel) and float32 (the vector kernel for head sizes that are multiples of
16); duplicates, empty rows, padding, strided inputs, determinism, and its place in the dispatcher."""

from __future__ import annotations

import math

import pytest
import torch

from sciattn.neighborhood import neighborhood_attention
from sciattn.neighborhood._cpu import neighborhood_cpu, unavailable
from sciattn.neighborhood.reference import neighborhood_reference

from .test_neighborhood_sparse import grads, prepared, ragged_csr

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"CPU kernels unavailable: {unavailable()}")
F64 = torch.float64


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-300)).item()


@pytest.mark.parametrize("d, e", [(5, 3), (16, 16), (32, 48)])
def test_float64_outputs_and_all_gradients_equal_the_reference(d, e):
    ro, ci = ragged_csr(11, 17, seed=3, empty_rows=(1, 4), full_row=2)
    inputs = prepared(nq=11, nk=17, d=d, e=e, seed=d)
    out, g = grads(neighborhood_cpu, inputs, ro, ci, 0.4)
    ref_out, ref_g = grads(neighborhood_reference, inputs, ro, ci, 0.4)
    assert _rel(out, ref_out) <= 1e-13
    for a, b in zip(g, ref_g):
        assert _rel(a, b) <= 1e-13


@pytest.mark.parametrize("d, e", [(16, 16), (32, 32), (64, 16), (16, 64), (48, 32), (5, 3)])
def test_float32_vector_kernels_match_the_float64_reference(d, e):
    """Head sizes that are multiples of 16 (up to 64) take the vector kernels, the rest the generic loop; rows
    longer than one block of 16 neighbours, shorter ones, empty ones and a duplicated pair all occur."""
    ro, ci = ragged_csr(40, 45, seed=d + e, empty_rows=(1,), full_row=3)
    inputs = prepared(nq=40, nk=45, d=d, e=e, seed=7)
    ref_out, ref_g = grads(neighborhood_reference, inputs, ro, ci, 1 / math.sqrt(d))
    out, g = grads(neighborhood_cpu, [t.float() for t in inputs], ro, ci, 1 / math.sqrt(d))
    assert out.dtype == torch.float32
    assert _rel(out, ref_out) <= 2e-6
    for a, b in zip(g, ref_g):
        assert _rel(a, b) <= 2e-5


def test_padding_poisoned_with_nan_and_masked_queries_through_the_functional():
    torch.manual_seed(0)
    b, h, n, d = 2, 2, 30, 16
    q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
    w = torch.rand(b, n) + 0.1
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[1, -7:] = False
    for t in (q, k, v):
        t[1, :, -7:] = float("nan")
    w[1, -7:] = float("inf")
    ro, ci = ragged_csr(n, n, seed=1, empty_rows=())
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = neighborhood_attention(*leaves, ro, ci, w, mask, backend="cpu")
    out.square().sum().backward()
    assert torch.isfinite(out).all() and all(torch.isfinite(t.grad).all() for t in leaves)
    clean = [t.clone() for t in (q, k, v)]
    for t in clean:
        t[1, :, -7:] = 0.0
    w_clean = torch.where(mask, w, torch.ones(()))
    ref = neighborhood_attention(*(t.double() for t in clean), ro, ci, w_clean.double(), mask, backend="reference")
    assert _rel(out[:, :, :-7], ref[:, :, :-7]) <= 2e-6
    assert (leaves[1].grad[1, :, -7:] == 0).all() and (leaves[2].grad[1, :, -7:] == 0).all()


def test_strided_heads_and_repeated_calls_are_bitwise_identical():
    """Heads split from a token-major projection (a strided view) give the same bits as contiguous inputs, and
    the backward (one task per batch element and head) is deterministic."""
    torch.manual_seed(2)
    x = torch.randn(1, 50, 3, 4, 16)  # (B, N, q/k/v, H, D)
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
    ro, ci = ragged_csr(50, 50, seed=5, empty_rows=())

    def run(*t):
        leaves = [a.detach().clone().requires_grad_() if a.is_contiguous() else a.detach().requires_grad_()
                  for a in t]
        out = neighborhood_attention(*leaves, ro, ci, backend="cpu")
        out.sin().sum().backward()
        return [out.detach()] + [a.grad for a in leaves]

    first = run(q, k, v)
    again = run(q, k, v)
    contiguous = run(*(t.contiguous() for t in (q, k, v)))
    for a, b, c in zip(first, again, contiguous):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_the_weights_gradient_sums_over_heads_and_matches_the_reference():
    torch.manual_seed(4)
    q, k, v = (torch.randn(2, 3, 20, 32, dtype=F64) for _ in range(3))
    ro, ci = ragged_csr(20, 20, seed=9, empty_rows=(0,))
    w = (torch.rand(2, 20, dtype=F64) + 0.2).requires_grad_()
    got = torch.autograd.grad(neighborhood_attention(q, k, v, ro, ci, w, backend="cpu").sum(), w)[0]
    want = torch.autograd.grad(neighborhood_attention(q, k, v, ro, ci, w, backend="reference").sum(), w)[0]
    assert _rel(got, want) <= 1e-13


def test_expanded_inputs_and_single_channel_heads_equal_the_reference():
    """Broadcast (stride-0) batch and head axes and one-channel heads, as a layer's constant field gives them."""
    torch.manual_seed(6)
    q, k = torch.randn(2, 2, 30, 3, dtype=F64), torch.randn(2, 2, 30, 3, dtype=F64)
    v = torch.full((1, 1, 30, 1), 2.5, dtype=F64).expand(2, 2, 30, 1).requires_grad_()
    ro, ci = ragged_csr(30, 30, seed=2, empty_rows=())
    got = neighborhood_attention(q, k, v, ro, ci, backend="cpu")
    want = neighborhood_attention(q, k, v, ro, ci, backend="reference")
    assert _rel(got, want) <= 1e-13 and torch.allclose(got, torch.full_like(got, 2.5), rtol=1e-13, atol=1e-13)
    assert _rel(torch.autograd.grad(got.sum(), v)[0], torch.autograd.grad(want.sum(), v)[0]) <= 1e-13
