"""The ``chunked`` and ``cpu`` Galerkin backends (the CPU defaults) against the float64 ``reference`` backend, over several chunks
(a short last one), with non-uniform weights, N_q != N_k, NaN-poisoned padding, the LayerNorm on part of the
features, strided (token-major) heads, any subset of inputs needing gradients, first and second derivatives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from sciattn._dispatch import select_backend
from sciattn.galerkin import chunked
from sciattn.galerkin._cpu import unavailable as cpu_unavailable
from sciattn.galerkin.functional import KVNorm, galerkin_attention

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _close import assert_close_scaled  # noqa: E402


@pytest.fixture(params=["chunked", "cpu"])
def backend(request):
    """Every case runs on ``chunked`` (elementwise steps in PyTorch) and on ``cpu`` (the same chunk loops with them
    fused in C++, skipped where the kernels cannot be built)."""
    if request.param == "cpu" and cpu_unavailable() is not None:
        pytest.skip(f"CPU kernels unavailable: {cpu_unavailable()}")
    return request.param


@pytest.fixture
def small_chunks(monkeypatch):
    """16-row chunks, so that the cases below span several chunks and end on a shorter one."""
    monkeypatch.setattr(chunked, "CHUNK_ELEMENTS", 1)
    monkeypatch.setattr(chunked, "MIN_ROWS", 16)


def _inputs(b=2, h=3, nq=131, nk=150, d=6, e=5, seed=0, norm=True, mask=True, token_major=False):
    g = torch.Generator().manual_seed(seed)

    def heads(n, f, scale=1.0, shift=0.0):
        t = scale * torch.randn(b, n, h * f, generator=g, dtype=torch.float64) + shift
        t = t.view(b, n, h, f).transpose(1, 2)  # (B, H, n, f) with token-major strides, as a layer makes them
        return t if token_major else t.contiguous()

    x = {"q": heads(nq, d), "k": heads(nk, d, 1.5, 0.5), "v": heads(nk, e, 1.0, -0.3),
         "weights": torch.rand(b, nk, generator=g, dtype=torch.float64) + 0.2, "mask": None, "norm": None}
    if mask:
        m = torch.ones(b, nk, dtype=torch.bool)
        m[0, nk * 3 // 4:] = False
        m[-1, nk // 2:] = False
        m[0, 3] = False  # a hole inside the first chunk
        pad = ~m[:, None, :, None]
        x["k"] = x["k"].masked_fill(pad, float("nan"))
        x["v"] = x["v"].masked_fill(pad, float("inf"))
        x["weights"] = x["weights"].masked_fill(~m, float("nan"))
        x["mask"] = m
    if norm:  # LayerNorm of the first d - 2 / e - 1 features; the others (coordinates) pass through
        x["norm"] = [1 + 0.3 * torch.randn(h, d - 2, generator=g, dtype=torch.float64),
                     0.3 * torch.randn(h, d - 2, generator=g, dtype=torch.float64),
                     1 + 0.3 * torch.randn(h, e - 1, generator=g, dtype=torch.float64),
                     0.3 * torch.randn(h, e - 1, generator=g, dtype=torch.float64)]
    return x


def _run(x, backend, need, dtype=torch.float64):
    leaves = {n: (x[n].detach().to(dtype).requires_grad_(n in need)) for n in ("q", "k", "v", "weights")}
    params = None
    if x["norm"] is not None:
        params = [p.detach().to(dtype).requires_grad_("norm" in need) for p in x["norm"]]
    norm = None if params is None else KVNorm(*params, 1e-5)
    z = galerkin_attention(leaves["q"], leaves["k"], leaves["v"], weights=leaves["weights"], mask=x["mask"],
                           backend=backend, kv_norm=norm)
    wrt = [leaves[n] for n in ("q", "k", "v", "weights") if n in need] + (params if "norm" in need else [])
    cot = torch.randn(z.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64).to(dtype)
    grads = torch.autograd.grad(z, wrt, cot) if wrt else ()
    return z, grads


ALL = ("q", "k", "v", "weights", "norm")


@pytest.mark.parametrize("norm", [False, True], ids=["plain", "norm"])
@pytest.mark.parametrize("mask", [False, True], ids=["dense", "padded"])
@pytest.mark.parametrize("token_major", [False, True], ids=["contiguous", "token_major"])
def test_matches_reference_over_several_chunks(small_chunks, backend, norm, mask, token_major):
    x = _inputs(norm=norm, mask=mask, token_major=token_major)
    need = ALL if norm else ALL[:4]
    z, grads = _run(x, backend, need)
    z_ref, grads_ref = _run(x, "reference", need)
    assert_close_scaled(z, z_ref, "output")
    for name, a, r in zip([*need[:4], "k_weight", "k_bias", "v_weight", "v_bias"], grads, grads_ref):
        assert_close_scaled(a, r, f"grad {name}")
    if mask:  # padded keys and values get exact zeros
        pad = ~x["mask"][:, None, :, None]
        assert (grads[1].masked_select(pad) == 0).all() and (grads[2].masked_select(pad) == 0).all()
        assert (grads[3].masked_select(~x["mask"]) == 0).all()


def test_float32_matches_reference_within_its_tolerance(small_chunks, backend):
    x = _inputs(b=1, nq=200, nk=333, seed=3)
    z, grads = _run(x, backend, ALL, torch.float32)
    z_ref, grads_ref = _run(x, "reference", ALL)
    assert z.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads)
    assert_close_scaled(z, z_ref, "output", 1e-5, 1e-6)
    for a, r in zip(grads, grads_ref):
        assert_close_scaled(a, r, "grad", 1e-5, 1e-6)


@pytest.mark.parametrize("need", [("q",), ("k",), ("v",), ("weights",), ("norm",), ("v", "norm"), ()])
def test_any_subset_of_inputs_needing_gradients(small_chunks, backend, need):
    x = _inputs(seed=4)
    z, grads = _run(x, backend, need)
    z_ref, grads_ref = _run(x, "reference", need)
    assert_close_scaled(z, z_ref, "output")
    assert len(grads) == len(grads_ref)
    for a, r in zip(grads, grads_ref):
        assert_close_scaled(a, r, f"grad of {need}")


def test_self_attention_layout_with_padded_queries(small_chunks, backend):
    """N_q == N_k with a mask: padded query rows hold NaN too; outputs and gradients still match."""
    x = _inputs(nq=150, nk=150, seed=5)
    x["q"] = x["q"].masked_fill(~x["mask"][:, None, :, None], float("nan"))
    z, grads = _run(x, backend, ALL)
    z_ref, grads_ref = _run(x, "reference", ALL)
    assert_close_scaled(z, z_ref, "output")
    for a, r in zip(grads, grads_ref):
        assert_close_scaled(a, r, "grad")


def test_first_and_second_derivatives_by_gradcheck(small_chunks, backend):
    x = _inputs(b=1, h=2, nq=7, nk=45, d=4, e=3, seed=6)
    mask = x["mask"]
    q, k, v, w = (x[n].detach().clone().masked_fill(~torch.isfinite(x[n]), 0.0).requires_grad_()
                  for n in ("q", "k", "v", "weights"))
    params = [p.detach().clone().requires_grad_() for p in x["norm"]]

    def f(q, k, v, w, *p):
        return galerkin_attention(q, k, v, weights=w, mask=mask, backend=backend, kv_norm=KVNorm(*p, 1e-5))

    assert torch.autograd.gradcheck(f, (q, k, v, w, *params))
    assert torch.autograd.gradgradcheck(f, (q, k, v, w, *params))


def test_cpu_default_is_cpu_or_chunked_for_fp32_and_fp64_only():
    def chosen(dtype):
        return select_backend("galerkin", None, device=torch.device("cpu"), dtype=dtype, head_dim=32,
                              has_mask=True, has_weights=True, requires_grad=True).name

    expected = "chunked" if cpu_unavailable() is not None else "cpu"  # cpu: the fused kernels, where they build
    assert chosen(torch.float32) == expected and chosen(torch.float64) == expected
    assert chosen(torch.bfloat16) == "reference"
