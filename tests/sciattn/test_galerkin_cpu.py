"""The fused-kernel Galerkin backend (``cpu``) against the float64 ``reference`` backend at the widths where the
kernels unroll (every feature normalised, 16/32/64 wide) and at others (a LayerNorm on part of the features,
widths with a vector tail), with the default chunk sizes and with short chunks, NaN-poisoned padding and
token-major heads; its kernels called directly against the ``chunked`` backend's PyTorch steps; determinism
across thread counts. (Every case of ``test_galerkin_chunked.py`` also runs on ``cpu``.)"""

from __future__ import annotations

import pytest
import torch

from sciattn.galerkin import chunked
from sciattn.galerkin._cpu import EXTENSION, unavailable

from ._close import assert_close_scaled
from .test_galerkin_chunked import ALL, _inputs, _run

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"CPU kernels unavailable: {unavailable()}")


def _norm(h, dn, en, seed):
    g = torch.Generator().manual_seed(seed)
    return [1 + 0.3 * torch.randn(h, dn, generator=g, dtype=torch.float64),
            0.3 * torch.randn(h, dn, generator=g, dtype=torch.float64),
            1 + 0.3 * torch.randn(h, en, generator=g, dtype=torch.float64),
            0.3 * torch.randn(h, en, generator=g, dtype=torch.float64)]


@pytest.mark.parametrize("d, e, dn, en", [(32, 32, 32, 32), (16, 64, 16, 64), (32, 20, 30, 17), (40, 33, 40, 33)])
@pytest.mark.parametrize("token_major", [False, True], ids=["contiguous", "token_major"])
def test_float64_equals_reference_at_unrolled_and_general_widths(d, e, dn, en, token_major):
    x = _inputs(b=2, h=2, nq=70, nk=300, d=d, e=e, seed=11, token_major=token_major)
    x["norm"] = _norm(2, dn, en, 12)
    z, grads = _run(x, "cpu", ALL)
    z_ref, grads_ref = _run(x, "reference", ALL)
    assert_close_scaled(z, z_ref, "output")
    for name, a, r in zip([*ALL[:4], "k_weight", "k_bias", "v_weight", "v_bias"], grads, grads_ref):
        assert_close_scaled(a, r, f"grad {name}")
    pad = ~x["mask"][:, None, :, None]
    assert (grads[1].masked_select(pad) == 0).all() and (grads[2].masked_select(pad) == 0).all()


def test_float64_equals_reference_with_short_chunks_at_width_32(monkeypatch):
    monkeypatch.setattr(chunked, "CHUNK_ELEMENTS", 1)
    monkeypatch.setattr(chunked, "MIN_ROWS", 16)
    x = _inputs(b=1, h=4, nq=90, nk=201, d=32, e=32, seed=13)
    x["norm"] = _norm(4, 32, 32, 14)
    z, grads = _run(x, "cpu", ALL)
    z_ref, grads_ref = _run(x, "reference", ALL)
    assert_close_scaled(z, z_ref, "output")
    for a, r in zip(grads, grads_ref):
        assert_close_scaled(a, r, "grad")


@pytest.mark.parametrize("ln", [True, False], ids=["layernorm", "plain"])
@pytest.mark.parametrize("width, dn", [(32, 32), (13, 9)])
def test_kernels_equal_the_pytorch_steps(ln, width, dn):
    """One chunk through the two kernels and through chunked.py's _features/_layer_norm_backward steps."""
    g = torch.Generator().manual_seed(21)
    b, h, c = 2, 3, 37
    x = torch.randn(b, c, h, width, generator=g, dtype=torch.float64).transpose(1, 2)  # token-major strides
    keep = torch.rand(b, c, generator=g) > 0.2
    x = x.masked_fill(~keep[:, None, :, None], float("nan"))
    w = torch.rand(b, c, generator=g, dtype=torch.float64) * keep
    dy = torch.randn(b, h, c, width, generator=g, dtype=torch.float64)
    gamma = 1 + 0.3 * torch.randn(h, dn, generator=g, dtype=torch.float64)
    beta = 0.3 * torch.randn(h, dn, generator=g, dtype=torch.float64)
    ln_args = (gamma, beta, 1e-5) if ln else None
    lib = EXTENSION.load()
    s = chunked._Scratch(torch.float64, torch.device("cpu"))
    y_ref, xhat, r = chunked._features(x, keep[:, None, :, None], ln_args, s, "x")
    y = torch.empty(b, h, c, width, dtype=torch.float64)
    lib.gal_features(x, keep, w, *(ln_args or (None, None, 0.0)), y)
    assert_close_scaled(y, y_ref * w[:, None, :, None], "w · LN(x)")
    dx, dw = torch.empty_like(y), torch.zeros(b, c, dtype=torch.float64)
    dparams = [torch.zeros(h, dn, dtype=torch.float64) for _ in range(2)] if ln else [None, None]
    lib.gal_features_backward(x, keep, dy, w, *(ln_args or (None, None, 0.0)), dx, dw, *dparams)
    assert_close_scaled(dw, (dy * y_ref).sum(dim=(1, 3)), "dw")
    g_in = dy * w[:, None, :, None]
    if ln:
        dx_ref, dparams_ref = torch.empty_like(dx), [torch.zeros(h, dn, dtype=torch.float64) for _ in range(2)]
        chunked._layer_norm_backward(g_in, xhat, r, gamma, dx_ref, dparams_ref, s, "x")
        for a, ref in zip(dparams, dparams_ref):
            assert_close_scaled(a, ref, "dγ, dβ")
    else:
        dx_ref = g_in
    dx_ref = dx_ref.masked_fill(~keep[:, None, :, None], 0.0)
    assert_close_scaled(dx, dx_ref, "dx")


def test_kernels_give_the_same_bits_with_one_and_two_threads():
    """The per-(batch, head) partial sums of dw, dγ, dβ are reduced in a fixed order whatever the threads."""
    g = torch.Generator().manual_seed(23)
    b, h, c, f = 2, 4, 333, 32
    x, dy = (torch.randn(b, h, c, f, generator=g) for _ in range(2))
    w = torch.rand(b, c, generator=g)
    gamma, beta = 1 + 0.3 * torch.randn(h, f, generator=g), 0.3 * torch.randn(h, f, generator=g)
    lib = EXTENSION.load()
    threads = torch.get_num_threads()
    out = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            y, dx, dw = torch.empty_like(x), torch.empty_like(x), torch.zeros(b, c)
            dparams = [torch.zeros(h, f), torch.zeros(h, f)]
            lib.gal_features(x, None, w, gamma, beta, 1e-5, y)
            lib.gal_features_backward(x, None, dy, w, gamma, beta, 1e-5, dx, dw, *dparams)
            out.append((y, dx, dw, *dparams))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(*out))
