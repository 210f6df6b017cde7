"""The Triton weighted-softmax kernels under ``TRITON_INTERPRET=1``: outputs and every gradient
against the float64 reference, fp16/bf16, NaN-poisoned padding, head sizes 16..128, bitwise
reproducibility, ``opcheck`` of the custom ops and ``torch.compile``.

The ``interpreter`` fixture turns the interpreter on for each test (kernels are decorated on first
use, inside such a test); export ``TRITON_INTERPRET=0`` on a GPU machine to test compiled kernels.
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

import pytest
import torch

from sciattn._capabilities import has_triton
from sciattn.weighted_softmax import weighted_softmax_attention

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _attention_cases as cases  # noqa: E402
import _triton_checks as checks  # noqa: E402
from _triton_checks import BACKEND, DEVICE, F64, assert_close, interpreter  # noqa: E402, F401  (autouse fixture)

pytestmark = pytest.mark.skipif(not has_triton(), reason="triton is not installed")
GRAD_NAMES = ("q", "k", "v", "weights", "q_pos", "k_pos", "distance_scale")
close = functools.partial(assert_close, "weighted_softmax")


def make_case(b=2, h=2, nq=19, nk=70, d=16, e=24, p=3, pad=9, seed=0):
    """Float64 inputs with non-uniform weights and positions in [10, 11]^p; the last ``pad`` keys of
    sample 0 (and 4 more of sample 1) are padding holding NaN in k, v, weights and key positions."""
    g = torch.Generator().manual_seed(seed)
    t = cases.random_inputs(g, b, h, nq, nk, d, e)
    t.update({
        "q_pos": torch.rand(b, nq, p, generator=g, dtype=F64) + 10,  # off the origin: a |a|²+|b|²−2a·b
        "k_pos": torch.rand(b, nk, p, generator=g, dtype=F64) + 10,  # distance would lose fp32 accuracy
        "distance_scale": torch.rand(h, generator=g, dtype=F64) + 0.5,
    })
    mask = torch.ones(b, nk, dtype=torch.bool)
    mask[:, nk - pad :] = False
    if b > 1:
        mask[1, : min(4, nk - pad)] = False
    cases.poison_padding(t, mask)
    t["k_pos"] = t["k_pos"].masked_fill(~mask[..., None], math.nan)
    return {n: x.to(DEVICE) for n, x in t.items()}, mask.to(DEVICE)


def run(t, mask, backend, distance=True, scale=None):
    kw = dict(q_pos=t["q_pos"], k_pos=t["k_pos"], distance_scale=t["distance_scale"]) if distance else {}
    return weighted_softmax_attention(t["q"], t["k"], t["v"], t["weights"], mask, scale=scale, backend=backend, **kw)


def compare_with_reference(t, mask, dtype, distance=True, names=GRAD_NAMES):
    """Run the kernel in ``dtype`` and the reference in float64 on the same rounded values; compare
    the output and the gradients of ``names`` for one random cotangent."""
    names = [n for n in names if distance or n not in ("q_pos", "k_pos", "distance_scale")]

    def inputs(dt, dev):
        return {n: (x.to(dtype).to(dt) if n in "qkv" else x).to(dev).requires_grad_(n in names) for n, x in t.items()}

    x, ref_x = inputs(dtype, DEVICE), inputs(F64, "cpu")
    out = run(x, mask, BACKEND, distance)
    ref = run(ref_x, mask.cpu(), "reference", distance)
    return out, checks.assert_matches_reference("weighted_softmax", out, ref, x, ref_x, names, dtype)


@pytest.mark.parametrize("distance", [False, True])
def test_output_and_all_gradients_match_float64_reference(distance):
    t, mask = make_case()
    out, grads = compare_with_reference(t, mask, torch.float32, distance)
    if distance:
        assert grads[-1].abs().min() > 0  # dλ is really produced


@pytest.mark.parametrize("d,e", [(16, 16), (32, 8), (64, 48), (128, 128)])
def test_head_dims_up_to_128(d, e):
    t, mask = make_case(b=1, h=1, nq=9, nk=20, d=d, e=e, pad=3, seed=d)
    compare_with_reference(t, mask, torch.float32, distance=d == 64, names=("q", "k", "v", "weights"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_within_declared_tolerance(dtype):
    t, mask = make_case(b=1, h=2, nq=17, nk=40, d=32, e=16, pad=5, seed=3)
    compare_with_reference(t, mask, dtype, distance=True)


def test_self_attention_with_shared_positions_has_zero_distance_gradient_on_the_diagonal():
    t, mask = make_case(b=1, h=2, nq=12, nk=12, pad=0, seed=4)
    t["k_pos"] = t["q_pos"]  # p_i = p_i: the distance is 0 and not differentiable there
    compare_with_reference(t, mask, torch.float32, distance=True)


def test_queries_with_no_live_key_get_zeros_and_no_gradient():
    t, mask = make_case(b=2, h=1, nq=5, nk=7, pad=0, seed=5)
    mask[1] = False
    x = {n: v.float().requires_grad_() for n, v in t.items()}
    out = run(x, mask, BACKEND)
    assert out[1].abs().max() == 0
    out.sum().backward()
    assert x["q"].grad[1].abs().max() == 0 and x["q_pos"].grad[1].abs().max() == 0


def test_block_edges_one_query_one_key_and_a_key_block_plus_one():
    for nq, nk in ((1, 3), (3, 65)):  # (one live key would make dq analytically 0)
        t, mask = make_case(b=1, h=1, nq=nq, nk=nk, d=16, e=16, pad=0, seed=nk)
        compare_with_reference(t, mask, torch.float32, distance=True, names=("q", "k", "v", "distance_scale"))


def test_results_are_bitwise_reproducible():
    t, mask = make_case(b=1, h=2, nq=9, nk=70, seed=6)

    def once():
        x = {n: v.float().requires_grad_() for n, v in t.items()}
        out = run(x, mask, BACKEND)
        grads = torch.autograd.grad(out.square().sum(), [x[n] for n in GRAD_NAMES])
        return (out, *grads)

    for a, b in zip(once(), once()):
        assert torch.equal(a, b)


def _op_args(distance):
    t, mask = make_case(b=1, h=2, nq=5, nk=9, d=16, e=16, pad=2, seed=7)
    log_w = torch.log(t["weights"].float()).masked_fill(~mask, -math.inf)
    k = t["k"].float().nan_to_num(0.0)
    v = t["v"].float().nan_to_num(0.0)
    pos = (t["q_pos"].float(), t["k_pos"].float().nan_to_num(0.0), t["distance_scale"].float())
    args = [t["q"].float(), k, v, log_w, 0.3, *(pos if distance else (None, None, None))]
    for i in (0, 1, 2, 3, 5, 6, 7):
        if args[i] is not None:
            args[i] = args[i].clone().requires_grad_()
    return args


@pytest.mark.parametrize("distance", [False, True])
def test_opcheck_forward_and_backward_ops(distance):
    from sciattn.weighted_softmax._ops import weighted_softmax_bwd, weighted_softmax_fwd

    args = _op_args(distance)
    torch.library.opcheck(weighted_softmax_fwd, args)
    with torch.no_grad():
        out, lse = weighted_softmax_fwd(*args)
    plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    bwd_args = [torch.randn_like(out), *plain[:4], out, lse, *plain[4:]]
    torch.library.opcheck(weighted_softmax_bwd, bwd_args,
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


def test_compiles_with_fullgraph_through_the_custom_ops():
    t, mask = make_case(b=1, h=2, nq=6, nk=11, d=16, e=16, pad=2, seed=8)
    x = {n: v.float().requires_grad_(n in ("q", "distance_scale")) for n, v in t.items()}

    def f(q, lam):
        return weighted_softmax_attention(q, x["k"], x["v"], x["weights"], mask, q_pos=x["q_pos"], k_pos=x["k_pos"],
                                          distance_scale=lam, backend=BACKEND)

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x["q"], x["distance_scale"])
    want = f(x["q"], x["distance_scale"])
    assert torch.equal(got, want)
    g1 = torch.autograd.grad(got.sum(), [x["q"], x["distance_scale"]])
    g2 = torch.autograd.grad(want.sum(), [x["q"], x["distance_scale"]])
    for a, b in zip(g1, g2):
        assert torch.equal(a, b)


COMPILE_FOR_SM90 = r"""
import torch
from sciattn.weighted_softmax import _triton as W

for dtype, tdt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
    prec = W._precision(tdt)
    for width in (64, 128):
        for kernel, fn in (("fwd", W._fwd_kernel), ("dkdv", W._dkdv_kernel), ("dq", W._dq_kernel)):
            bm, bn, warps, stages = W._config(tdt, width, width, kernel)
            const = dict(HAS_DIST=True, NPOS=3, PREC=prec, UPCAST=False, BLOCK_M=bm, BLOCK_N=bn,
                         BLOCK_D=width, BLOCK_E=width)
            if kernel != "fwd":
                const["BLOCK_P"] = 4
            build(fn, dtype, const, warps, stages)
"""


@pytest.mark.slow
def test_kernels_compile_to_sm90_machine_code_without_a_gpu():
    """Compile every weighted-softmax kernel with the launch configurations for H100 (sm_90) through ptxas."""
    checks.assert_compiles_for_sm90(COMPILE_FOR_SM90)
