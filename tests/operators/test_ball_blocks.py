"""The ball-tree operators' shared pieces: the pointwise SwiGLU runs in token chunks on the CPU (so no intermediate
is an allocation the C library maps afresh at every call) and gives the one-run results to round-off."""

from __future__ import annotations

import pytest
import torch

from sciattn.operators import _ball_blocks as bb
from sciattn.operators import create_operator

F64 = torch.float64


def _rel(a, b):
    return float((a - b).detach().abs().max() / b.detach().abs().max().clamp_min(1e-300))


@pytest.mark.parametrize("shape", [(2, 37, 6), (1, 100, 6)])
def test_swiglu_in_token_chunks_equals_one_run(monkeypatch, shape):
    torch.manual_seed(0)
    mlp = bb.SwiGLU(6, 12).double()
    h = torch.randn(*shape, dtype=F64, requires_grad=True)
    one = mlp(h)
    g_one = torch.autograd.grad(one.square().sum(), [h, *mlp.parameters()])
    monkeypatch.setattr(bb, "MLP_CHUNK_BYTES", 24 * 8 * shape[0] * 5)  # five tokens per run, a short last run
    assert bb._mlp_rows(h, 24) == 5
    chunked = mlp(h)
    g_chunked = torch.autograd.grad(chunked.square().sum(), [h, *mlp.parameters()])
    assert _rel(chunked, one) <= 1e-13
    for a, b in zip(g_chunked, g_one):
        assert _rel(a, b) <= 1e-12


def test_no_chunks_when_small_or_traced():
    h = torch.zeros(1, 10, 4)
    assert bb._mlp_rows(h, 8) is None  # 320 bytes: one run
    assert bb._mlp_rows(torch.zeros(1, 1 << 16, 64), 1024) == bb.MLP_CHUNK_BYTES // (1024 * 4)


def test_erwin_with_chunked_mlps_equals_one_run(monkeypatch):
    torch.manual_seed(1)
    model = create_operator("erwin", in_channels=2, out_channels=1, spatial_dims=2).double()
    x, pos = torch.randn(2, 300, 2, dtype=F64), torch.rand(2, 300, 2, dtype=F64)
    one = model(x, pos=pos)
    g_one = torch.autograd.grad(one.sum(), list(model.parameters()), allow_unused=True)
    monkeypatch.setattr(bb, "MLP_CHUNK_BYTES", 4096)
    chunked = model(x, pos=pos)
    g_chunked = torch.autograd.grad(chunked.sum(), list(model.parameters()), allow_unused=True)
    assert _rel(chunked, one) <= 1e-12
    for a, b in zip(g_chunked, g_one):
        if b is not None:
            assert _rel(a, b) <= 1e-11
