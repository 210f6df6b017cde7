"""The physical pyramid's GPU path (flex attention, compiled) against its SDPA path on a CUDA device: outputs and
gradients of one level and of the whole layer. Skips without CUDA; run by benchmarks/gpu_check.sh."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from sciattn.multipole import MultipoleAttention

ba = importlib.import_module("sciattn.multipole.box_attention")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("n, m, window, taper", [((64, 64), (64, 64), (8, 8), True), ((128, 96), (32, 32), (8, 8), True),
                                                 ((48, 40), (8, 8), (8, 8), False), ((64, 64), (64, 64), (3, 3), False)])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-5), (torch.float64, 1e-11)])
def test_flex_level_equals_sdpa_on_cuda(n, m, window, taper, dtype, tol):
    torch.manual_seed(0)
    dev = "cuda"
    q = torch.randn(2, 4, 16, *n, dtype=dtype, device=dev, requires_grad=True)
    k = torch.randn(2, 4, 16, *m, dtype=dtype, device=dev, requires_grad=True)
    v = torch.randn(2, 4, 16, *m, dtype=dtype, device=dev, requires_grad=True)
    logw = torch.rand(2, *m, dtype=dtype, device=dev).log()
    logw.view(-1)[::7] = -math.inf
    out = ba.box_attention(q, k, v, logw, window, 0.25, taper=taper, backend="flex")
    ref = ba.box_attention(q, k, v, logw, window, 0.25, taper=taper, backend="sdpa")
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad((out * g).sum(), (q, k, v)), torch.autograd.grad((ref * g).sum(), (q, k, v))):
        torch.testing.assert_close(a, b, rtol=10 * tol, atol=10 * tol)


def test_flex_layer_equals_the_default_on_cuda():
    torch.manual_seed(1)
    flex = MultipoleAttention(64, 4, 2, backend="flex").cuda()
    sdpa = MultipoleAttention(64, 4, 2, backend="sdpa").cuda()
    sdpa.load_state_dict(flex.state_dict())
    x = torch.randn(2, 64, 128, 128, device="cuda")
    torch.testing.assert_close(flex(x), sdpa(x), rtol=1e-4, atol=1e-5)
