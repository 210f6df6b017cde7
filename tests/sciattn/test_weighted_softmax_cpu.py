"""The fused C++ weighted-softmax backend (``cpu``) against the float64 ``reference`` backend: outputs and every
gradient (q, k, v, weights, both position sets, λ) in float64 (≤ 1e-12) and float32 (its declared tolerance),
with and without the distance bias, NaN-poisoned padding, coincident points (d = 0), a batch element without live
keys, N_q != N_k, odd head sizes (zero-channel padding) and sizes spanning several 64-query and 64-key blocks
with short last ones; determinism across thread counts; its place in the dispatcher."""

from __future__ import annotations

import pytest
import torch

from sciattn._dispatch import backends_for, select_backend
from sciattn.weighted_softmax import weighted_softmax_attention
from sciattn.weighted_softmax._cpu import unavailable

from ._close import assert_close_scaled
from .test_weighted_softmax_chunked import NAMES, _inputs, _run

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"CPU kernels unavailable: {unavailable()}")


def _compare(x, need=NAMES, distance=True, dtype=torch.float64, tol=(1e-12, 1e-12)):
    o, grads = _run(x, "cpu", need, distance, dtype)
    o_ref, grads_ref = _run(x, "reference", need, distance)
    assert o.dtype == dtype
    assert_close_scaled(o, o_ref, "output", *tol)
    assert len(grads) == len(grads_ref)
    for name, a, r in zip([n for n in NAMES if n in need], grads, grads_ref):
        assert_close_scaled(a, r, f"d{name}", *tol)
    return o, grads


@pytest.mark.parametrize("distance", [False, True], ids=["weights", "distance"])
@pytest.mark.parametrize("mask", [False, True], ids=["dense", "padded"])
@pytest.mark.parametrize("sizes", [(19, 23, 5, 4), (150, 139, 32, 32), (70, 131, 20, 40)],
                         ids=["small_odd", "blocks_32", "blocks_odd"])
def test_float64_equals_the_reference_outputs_and_all_gradients(distance, mask, sizes):
    nq, nk, d, e = sizes
    x = _inputs(b=2, h=2, nq=nq, nk=nk, d=d, e=e, mask=mask, seed=nq)
    _, grads = _compare(x, NAMES, distance)
    if mask:  # nothing reaches padded keys, values or weights (poisoned with NaN / inf)
        pad = ~x["mask"][:, None, :, None]
        assert (grads[1].masked_select(pad) == 0).all() and (grads[2].masked_select(pad) == 0).all()
        assert (grads[3].masked_select(~x["mask"]) == 0).all()
        if distance:
            assert (grads[5].masked_select(~x["mask"][..., None]) == 0).all()


def test_token_major_heads_and_two_position_dimensions():
    _compare(_inputs(nq=33, nk=70, d=16, e=16, p=2, seed=9, token_major=True))


@pytest.mark.parametrize("sizes", [(40, 57, 5, 4), (150, 139, 32, 32)], ids=["small_odd", "blocks_32"])
def test_float32_within_its_declared_tolerance(sizes):
    nq, nk, d, e = sizes
    rtol, atol = next(b for b in backends_for("weighted_softmax") if b.name == "cpu").tolerances[torch.float32]
    _compare(_inputs(b=1, nq=nq, nk=nk, d=d, e=e, seed=2), NAMES, True, torch.float32, (rtol, atol))


@pytest.mark.parametrize("need", [("q",), ("k", "v"), ("weights",), ("q_pos",), ("k_pos",), ("distance_scale",), ()])
def test_any_subset_of_inputs_needing_gradients(need):
    _compare(_inputs(seed=4), need)


def test_batch_element_without_live_keys_gets_zeros_and_zero_gradients():
    x = _inputs(nq=70, nk=30, seed=5)
    x["mask"][1] = False
    o, grads = _compare(x)
    assert (o[1] == 0).all()
    for g in grads[:3]:
        assert (g[1] == 0).all()
    assert (grads[4][1] == 0).all() and (grads[5][1] == 0).all()


def test_results_are_bitwise_identical_across_runs_and_thread_counts():
    """Forward tasks are (batch, head, query block), backward tasks (batch, head), each owning its sums."""
    x = _inputs(b=2, h=3, nq=130, nk=90, d=32, e=32, seed=7)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _run(x, "cpu", NAMES, True, torch.float32)
        torch.set_num_threads(2)
        two = _run(x, "cpu", NAMES, True, torch.float32)
        again = _run(x, "cpu", NAMES, True, torch.float32)
    finally:
        torch.set_num_threads(threads)
    for a, b, c in zip((one[0], *one[1]), (two[0], *two[1]), (again[0], *again[1])):
        assert torch.equal(a, b) and torch.equal(b, c)


def test_second_derivatives_through_the_reference_graph():
    x = _inputs(b=1, h=2, nq=9, nk=7, d=3, e=2, p=2, seed=6, mask=False)
    mask = torch.ones(1, 7, dtype=torch.bool)
    mask[0, 5] = False
    args = [x[n].detach().clone().requires_grad_() for n in NAMES[:4]]

    def g(q, k, v, w):
        return weighted_softmax_attention(q, k, v, w, mask, backend="cpu")

    assert torch.autograd.gradcheck(g, args)
    assert torch.autograd.gradgradcheck(g, args)


def test_dispatcher_picks_cpu_for_fp32_and_fp64_and_chunked_when_switched_off(monkeypatch):
    def chosen(dtype):
        return select_backend("weighted_softmax", None, device=torch.device("cpu"), dtype=dtype, head_dim=32,
                              has_mask=True, has_weights=True, requires_grad=True).name

    assert chosen(torch.float32) == "cpu" and chosen(torch.float64) == "cpu"
    assert chosen(torch.bfloat16) == "sdpa"
    monkeypatch.setenv("SCIATTN_CPU_KERNELS", "0")
    assert chosen(torch.float32) == "chunked" and chosen(torch.float64) == "chunked"
