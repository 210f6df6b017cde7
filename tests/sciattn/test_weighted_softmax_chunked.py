"""The ``chunked`` weighted-softmax backend (the CPU default) against the float64 ``reference`` backend over several
query chunks (a short last one): outputs and every gradient (q, k, v, weights, both position sets, λ) with
non-uniform weights, N_q != N_k, NaN-poisoned padding, coincident points (zero distances), a batch element
without live keys, strided heads and any subset of inputs needing gradients; first and second derivatives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from sciattn._dispatch import select_backend
from sciattn.weighted_softmax import chunked, weighted_softmax_attention

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _close import assert_close_scaled  # noqa: E402

NAMES = ("q", "k", "v", "weights", "q_pos", "k_pos", "distance_scale")


@pytest.fixture
def small_chunks(monkeypatch):
    """4-row query chunks, so that every case spans several chunks and ends on a shorter one."""
    monkeypatch.setattr(chunked, "CHUNK_SCORES", 1)
    monkeypatch.setattr(chunked, "MIN_ROWS", 4)


def _inputs(b=2, h=3, nq=19, nk=23, d=5, e=4, p=3, seed=0, mask=True, token_major=False):
    g = torch.Generator().manual_seed(seed)

    def heads(n, f):
        t = torch.randn(b, n, h * f, generator=g, dtype=torch.float64).view(b, n, h, f).transpose(1, 2)
        return t if token_major else t.contiguous()

    x = {"q": heads(nq, d), "k": heads(nk, d), "v": heads(nk, e),
         "weights": torch.rand(b, nk, generator=g, dtype=torch.float64) + 0.2,
         "q_pos": torch.rand(b, nq, p, generator=g, dtype=torch.float64),
         "k_pos": torch.rand(b, nk, p, generator=g, dtype=torch.float64),
         "distance_scale": torch.rand(h, generator=g, dtype=torch.float64) + 0.5, "mask": None}
    x["k_pos"][:, 2] = x["q_pos"][:, 5]  # coincident points: d = 0, where ‖·‖ has no derivative
    if mask:
        m = torch.ones(b, nk, dtype=torch.bool)
        m[0, nk * 2 // 3:] = False
        m[-1, 4] = False
        x["mask"] = m
        for n in ("k", "v"):
            x[n] = x[n].masked_fill(~m[:, None, :, None], float("nan"))
        x["weights"] = x["weights"].masked_fill(~m, float("nan"))
        x["k_pos"] = x["k_pos"].masked_fill(~m[..., None], float("inf"))
    return x


def _run(x, backend, need, distance=True, dtype=torch.float64):
    t = {n: x[n].detach().to(dtype if n in "qkv" else torch.float64).requires_grad_(n in need) for n in NAMES}
    kw = {n: t[n] for n in NAMES[4:]} if distance else {}
    o = weighted_softmax_attention(t["q"], t["k"], t["v"], t["weights"], x["mask"], backend=backend, **kw)
    wrt = [t[n] for n in NAMES if n in need and (distance or n not in NAMES[4:])]
    cot = torch.randn(o.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)
    return o, (torch.autograd.grad(o, wrt, cot) if wrt else ())


def _compare(x, need, distance=True, dtype=torch.float64, tol=(1e-12, 1e-12)):
    o, grads = _run(x, "chunked", need, distance, dtype)
    o_ref, grads_ref = _run(x, "reference", need, distance)
    assert o.dtype == dtype
    assert_close_scaled(o, o_ref, "output", *tol)
    assert len(grads) == len(grads_ref)
    for a, r in zip(grads, grads_ref):
        assert_close_scaled(a, r, "gradient", *tol)
    return grads


@pytest.mark.parametrize("distance", [False, True], ids=["weights", "distance"])
@pytest.mark.parametrize("mask", [False, True], ids=["dense", "padded"])
@pytest.mark.parametrize("token_major", [False, True], ids=["contiguous", "token_major"])
def test_matches_reference_over_several_chunks(small_chunks, distance, mask, token_major):
    x = _inputs(mask=mask, token_major=token_major)
    grads = _compare(x, NAMES, distance)
    if mask:  # nothing reaches padded keys, values or weights
        pad = ~x["mask"][:, None, :, None]
        assert (grads[1].masked_select(pad) == 0).all() and (grads[2].masked_select(pad) == 0).all()
        assert (grads[3].masked_select(~x["mask"]) == 0).all()


def test_float32_within_its_tolerance(small_chunks):
    _compare(_inputs(b=1, nq=40, nk=57, seed=2), NAMES, True, torch.float32, (1e-5, 1e-6))


@pytest.mark.parametrize("need", [("q",), ("k", "v"), ("weights",), ("q_pos",), ("k_pos",), ("distance_scale",), ()])
def test_any_subset_of_inputs_needing_gradients(small_chunks, need):
    _compare(_inputs(seed=4), need)


def test_batch_element_without_live_keys_gets_zeros(small_chunks):
    x = _inputs(seed=5)
    x["mask"][1] = False
    grads = _compare(x, NAMES)
    o, _ = _run(x, "chunked", ())
    assert (o[1] == 0).all() and (grads[0][1] == 0).all()


def test_first_and_second_derivatives_by_gradcheck(small_chunks):
    x = _inputs(b=1, h=2, nq=9, nk=7, d=3, e=2, p=2, seed=6, mask=False)
    mask = torch.ones(1, 7, dtype=torch.bool)
    mask[0, 5] = False
    args = [x[n].detach().clone().requires_grad_() for n in NAMES]

    def f(q, k, v, w, qp, kp, lam):
        return weighted_softmax_attention(q, k, v, w, mask, q_pos=qp, k_pos=kp, distance_scale=lam,
                                          backend="chunked")

    assert torch.autograd.gradcheck(f, args)

    def g(q, k, v, w):  # second derivatives as the reference has them: cdist has none, so without distances
        return weighted_softmax_attention(q, k, v, w, mask, backend="chunked")

    assert torch.autograd.gradgradcheck(g, args[:4])


def test_cpu_default_without_the_fused_kernels_is_chunked_for_fp32_and_fp64_only(monkeypatch):
    monkeypatch.setenv("SCIATTN_CPU_KERNELS", "0")  # else the fused `cpu` backend comes first where it builds

    def chosen(dtype):
        return select_backend("weighted_softmax", None, device=torch.device("cpu"), dtype=dtype, head_dim=32,
                              has_mask=True, has_weights=True, requires_grad=True).name

    assert chosen(torch.float32) == "chunked" and chosen(torch.float64) == "chunked"
    assert chosen(torch.bfloat16) == "sdpa"
