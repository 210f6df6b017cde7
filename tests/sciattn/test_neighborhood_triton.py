"""The Triton CSR neighbourhood kernels under ``TRITON_INTERPRET=1``: outputs and every gradient
against the float64 reference in both backward modes (atomic and deterministic), fp16/bf16,
NaN-poisoned padding, empty rows and duplicates, head sizes 16..128, bitwise reproducibility of
the deterministic mode, the transposed index and its cache, ``opcheck`` and ``torch.compile``.

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
from sciattn.neighborhood import csr_from_pairs, neighborhood_attention
from sciattn.neighborhood._ops import _TRANSPOSES, transposed_csr

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _attention_cases as cases  # noqa: E402
import _triton_checks as checks  # noqa: E402
from _triton_checks import BACKEND, DEVICE, F64, assert_close, interpreter  # noqa: E402, F401  (autouse fixture)

pytestmark = pytest.mark.skipif(not has_triton(), reason="triton is not installed")
close = functools.partial(assert_close, "neighborhood")


@pytest.fixture(params=[False, True], ids=["atomic", "deterministic"])
def deterministic(request):
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(request.param)
    yield request.param
    torch.use_deterministic_algorithms(before)


def random_csr(nq, nk, p, seed, empty_rows=(1,)):
    """Random neighbourhoods (one pair listed twice, the given rows empty), as CSR."""
    g = torch.Generator().manual_seed(seed)
    allowed = torch.rand(nq, nk, generator=g) < p
    for r in empty_rows:
        allowed[r] = False
    rows, cols = allowed.nonzero(as_tuple=True)
    rows, cols = torch.cat([rows, rows[:1]]), torch.cat([cols, cols[:1]])
    return csr_from_pairs(rows, cols, nq)


def make_case(b=2, h=2, nq=9, nk=23, d=16, e=24, pad=4, p=0.5, seed=0):
    """Float64 inputs with non-uniform weights; the last ``pad`` keys are padding holding NaN in
    k, v and weights (and listed in the neighbourhoods, so the kernel must mask them)."""
    g = torch.Generator().manual_seed(seed)
    t = cases.random_inputs(g, b, h, nq, nk, d, e)
    mask = torch.ones(b, nk, dtype=torch.bool)
    mask[:, nk - pad :] = False
    cases.poison_padding(t, mask)
    ro, ci = random_csr(nq, nk, p, seed)
    return {n: x.to(DEVICE) for n, x in t.items()}, mask.to(DEVICE), (ro.to(DEVICE), ci.to(DEVICE))


def compare_with_reference(t, mask, csr, dtype):
    names = ("q", "k", "v", "weights")

    def inputs(dt, dev):
        return {n: (x.to(dtype).to(dt) if n in "qkv" else x).to(dev).requires_grad_() for n, x in t.items()}

    x, ref_x = inputs(dtype, DEVICE), inputs(F64, "cpu")
    ro, ci = csr
    out = neighborhood_attention(x["q"], x["k"], x["v"], ro, ci, x["weights"], mask, backend=BACKEND)
    ref = neighborhood_attention(ref_x["q"], ref_x["k"], ref_x["v"], ro.cpu(), ci.cpu(), ref_x["weights"], mask.cpu(),
                                 backend="reference")
    return out, checks.assert_matches_reference("neighborhood", out, ref, x, ref_x, names, dtype)


def test_output_and_all_gradients_match_float64_reference(deterministic):
    t, mask, csr = make_case()
    out, grads = compare_with_reference(t, mask, csr, torch.float32)
    assert out[:, :, 1].abs().max() == 0  # the empty row
    assert grads[0][:, :, 1].abs().max() == 0
    assert grads[1][:, :, -4:].abs().max() == 0 and grads[3][:, -4:].abs().max() == 0  # padding


@pytest.mark.parametrize("d,e", [(16, 16), (32, 8), (64, 48), (128, 128)])
def test_head_dims_up_to_128(d, e, deterministic):
    t, mask, csr = make_case(b=1, h=1, nq=5, nk=9, d=d, e=e, pad=2, seed=d)
    compare_with_reference(t, mask, csr, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_within_declared_tolerance(dtype, deterministic):
    t, mask, csr = make_case(b=1, h=2, nq=7, nk=15, d=32, e=16, pad=3, seed=3)
    compare_with_reference(t, mask, csr, dtype)


def test_long_rows_span_several_neighbour_blocks():
    t, mask, csr = make_case(b=1, h=1, nq=3, nk=80, d=16, e=16, pad=5, p=0.9, seed=4)
    assert int(csr[0].diff().max()) > 64  # more than two steps of 32 neighbours
    compare_with_reference(t, mask, csr, torch.float32)


def test_all_keys_of_a_query_padded_gives_zeros_and_zero_gradients(deterministic):
    t, mask, _ = make_case(b=1, h=1, nq=3, nk=5, pad=0, seed=5)
    ro, ci = torch.tensor([0, 2, 2, 4], device=DEVICE), torch.tensor([0, 1, 3, 4], device=DEVICE)
    mask[0, :2] = False  # row 0 lists only padded keys; row 1 is empty
    x = {n: v.float().masked_fill(v.isnan(), 0).requires_grad_() for n, v in t.items()}
    out = neighborhood_attention(x["q"], x["k"], x["v"], ro, ci, x["weights"], mask, backend=BACKEND)
    assert out[:, :, :2].abs().max() == 0
    out.sum().backward()
    assert x["q"].grad[:, :, :2].abs().max() == 0
    assert x["k"].grad[:, :, :3].abs().max() == 0 and x["v"].grad[:, :, :3].abs().max() == 0


def test_deterministic_mode_is_bitwise_reproducible_and_agrees_with_atomics():
    t, mask, (ro, ci) = make_case(b=1, h=2, nq=8, nk=20, seed=6)
    x = {n: v.float() for n, v in t.items()}

    def once(det):
        torch.use_deterministic_algorithms(det)
        try:
            leaves = {n: v.clone().requires_grad_() for n, v in x.items()}
            out = neighborhood_attention(leaves["q"], leaves["k"], leaves["v"], ro, ci, leaves["weights"], mask,
                                         backend=BACKEND)
            return (out, *torch.autograd.grad(out.square().sum(), list(leaves.values())))
        finally:
            torch.use_deterministic_algorithms(False)

    first, second, atomic = once(True), once(True), once(False)
    for a, b, c in zip(first, second, atomic):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_transposed_index_lists_each_keys_queries_and_is_cached():
    ro, ci = random_csr(6, 9, 0.4, seed=7)
    t_off, t_rows = transposed_csr(ro, ci, 9)
    pairs = {(i, int(j)) for i in range(6) for j in ci[ro[i] : ro[i + 1]]}
    back = {(int(i), j) for j in range(9) for i in t_rows[t_off[j] : t_off[j + 1]]}
    assert back == pairs and t_off[-1] == ci.numel()
    assert all(bool((t_rows[t_off[j] : t_off[j + 1]].diff() >= 0).all()) for j in range(9))  # ascending queries
    assert transposed_csr(ro, ci, 9)[1] is t_rows  # cached
    ci[0] = (ci[0] + 1) % 9  # an in-place edit invalidates the cache entry
    assert transposed_csr(ro, ci, 9)[1] is not t_rows
    n = len(_TRANSPOSES)
    del ro, ci, t_off, t_rows
    assert len(_TRANSPOSES) == n - 1  # dropped when the index tensors die


def _op_args():
    t, mask, (ro, ci) = make_case(b=1, h=1, nq=4, nk=6, d=16, e=16, pad=2, seed=8)
    log_w = torch.log(t["weights"].float().nan_to_num(1.0)).masked_fill(~mask, -math.inf)
    k, v = (t[n].float().nan_to_num(0.0) for n in "kv")
    return [t["q"].float(), k, v, log_w, ro, ci, 0.4]


def test_opcheck_forward_and_backward_ops():
    from sciattn.neighborhood._ops import neighborhood_bwd, neighborhood_fwd

    args = _op_args()
    grad_args = [a.clone().requires_grad_() if i < 4 else a for i, a in enumerate(args)]
    torch.library.opcheck(neighborhood_fwd, grad_args)
    out, lse = neighborhood_fwd(*args)
    for det in (False, True):
        bwd = [torch.randn_like(out), *args[:6], out, lse, args[6], det]
        torch.library.opcheck(neighborhood_bwd, bwd, test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


def test_compiles_with_fullgraph_through_the_custom_ops():
    t, mask, (ro, ci) = make_case(b=1, h=2, nq=6, nk=10, d=16, e=16, pad=2, seed=9)
    x = {n: v.float() for n, v in t.items()}
    q = x["q"].clone().requires_grad_()

    def f(q):
        return neighborhood_attention(q, x["k"], x["v"], ro, ci, x["weights"], mask, validate=False, backend=BACKEND)

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q)
    want = f(q)
    assert torch.equal(got, want)
    (g1,) = torch.autograd.grad(got.sum(), q)
    (g2,) = torch.autograd.grad(want.sum(), q)
    assert torch.equal(g1, g2)


COMPILE_FOR_SM90 = r"""
from sciattn.neighborhood import _triton as N

CSR = ("ROWS", "COLS", "TROWS", "TCOLS")
for dtype in ("bf16", "fp32"):
    for width in (64, 128):
        bn, warps = N._config(width, width, "fwd")
        build(N._fwd_kernel, dtype, dict(BLOCK_N=bn, BLOCK_D=width, BLOCK_E=width), warps, int_pointers=CSR)
        bn, warps = N._config(width, width, "bwd")
        for atomic in (True, False):
            build(N._dq_kernel, dtype, dict(ATOMIC=atomic, BLOCK_N=bn, BLOCK_D=width, BLOCK_E=width), warps,
                  int_pointers=CSR)
        build(N._dkdv_kernel, dtype, dict(BLOCK_N=bn, BLOCK_D=width, BLOCK_E=width), warps, int_pointers=CSR)
"""


@pytest.mark.slow
def test_kernels_compile_to_sm90_machine_code_without_a_gpu():
    """Compile every neighbourhood kernel with the launch configurations for H100 (sm_90) through ptxas."""
    checks.assert_compiles_for_sm90(COMPILE_FOR_SM90)
