"""CSR neighbourhood attention: the reference against a dense float64 oracle and against global
weighted-softmax attention; the CSR builders and validation; dispatch and compilation."""

from __future__ import annotations

import math
import re

import pytest
import torch

from sciattn import BackendError
from sciattn._capabilities import has_triton
from sciattn._dispatch import select_backend
from sciattn.neighborhood import csr_from_pairs, csr_within_distance, neighborhood_attention
from sciattn.weighted_softmax import weighted_softmax_attention

F64 = torch.float64


def multiplicity(row_offsets, col_indices, nq, nk):
    """C[i, j] = how often key j is listed in query i's neighbourhood (a plain Python loop)."""
    c = torch.zeros(nq, nk, dtype=F64)
    for i in range(nq):
        for j in col_indices[int(row_offsets[i]) : int(row_offsets[i + 1])].tolist():
            c[i, j] += 1
    return c


def dense_oracle(q, k, v, w, counts, scale):
    """out_i = Σ_j C_ij w_j e^{s_ij} v_j / Σ_j C_ij w_j e^{s_ij}; zero where the sum is empty."""
    s = scale * torch.einsum("bhid,bhjd->bhij", q, k)
    coef = counts[None, None] * w[:, None, None, :]
    live = coef > 0
    shift = torch.where(live, s, torch.full_like(s, -math.inf)).amax(-1, keepdim=True).detach()
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.where(live, coef * torch.exp(s - shift), torch.zeros_like(s))
    den = e.sum(-1, keepdim=True)
    return torch.where(den > 0, (e @ v) / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(den))


def random_csr(nq, nk, p=0.4, seed=0, empty_rows=(2,), duplicate=True):
    g = torch.Generator().manual_seed(seed)
    allowed = torch.rand(nq, nk, generator=g) < p
    for r in empty_rows:
        allowed[r] = False
    rows, cols = allowed.nonzero(as_tuple=True)
    if duplicate:  # a listed pair twice counts twice (a double quadrature weight)
        rows, cols = torch.cat([rows, rows[:1]]), torch.cat([cols, cols[:1]])
    return csr_from_pairs(rows, cols, nq)


def make_case(b=2, h=2, nq=7, nk=10, d=4, e=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, nq, d, generator=g, dtype=F64)
    k = torch.randn(b, h, nk, d, generator=g, dtype=F64)
    v = torch.randn(b, h, nk, e, generator=g, dtype=F64)
    w = torch.rand(b, nk, generator=g, dtype=F64) * 2 + 0.05
    mask = torch.rand(b, nk, generator=g) > 0.3
    return q, k, v, w, mask


def test_reference_matches_dense_oracle_with_weights_mask_duplicates_and_empty_rows():
    q, k, v, w, mask = make_case()
    ro, ci = random_csr(7, 10)
    got = neighborhood_attention(q, k, v, ro, ci, w, mask, scale=0.6)
    want = dense_oracle(q, k, v, w * mask, multiplicity(ro, ci, 7, 10), 0.6)
    torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-12)
    assert got[:, :, 2].abs().max() == 0  # the empty row


def test_reference_gradients_match_dense_oracle():
    q, k, v, w, mask = make_case(seed=1)
    ro, ci = random_csr(7, 10, seed=1)
    a = [t.clone().requires_grad_() for t in (q, k, v, w)]
    b = [t.clone().requires_grad_() for t in (q, k, v, w)]
    got = neighborhood_attention(*a[:3], ro, ci, a[3], mask)
    want = dense_oracle(*b[:3], b[3] * mask, multiplicity(ro, ci, 7, 10), 0.5)
    g = torch.randn_like(want)
    for n, x, y in zip("qkvw", torch.autograd.grad(got, a, g), torch.autograd.grad(want, b, g)):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11, msg=lambda m, n=n: f"d{n}: {m}")


def test_reference_gradcheck_float64():
    q, k, v, w, mask = make_case(b=1, h=2, nq=4, nk=5, d=2, e=2, seed=2)
    ro, ci = random_csr(4, 5, p=0.6, seed=2, empty_rows=(1,))
    args = [t.clone().requires_grad_() for t in (q, k, v, w)]
    assert torch.autograd.gradcheck(lambda q, k, v, w: neighborhood_attention(q, k, v, ro, ci, w, mask), args)


def test_every_key_in_every_neighbourhood_equals_global_weighted_softmax():
    q, k, v, w, mask = make_case(nq=5, nk=8, seed=3)
    rows, cols = torch.meshgrid(torch.arange(5), torch.arange(8), indexing="ij")
    ro, ci = csr_from_pairs(rows.flatten(), cols.flatten(), 5)
    got = neighborhood_attention(q, k, v, ro, ci, w, mask)
    want = weighted_softmax_attention(q, k, v, w, mask, backend="sdpa")
    torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-12)


def test_unbounded_radius_equals_global_attention_on_a_point_cloud():
    g = torch.Generator().manual_seed(4)
    pos = torch.rand(9, 2, generator=g, dtype=F64)
    ro, ci = csr_within_distance(pos, pos, radius=10.0)
    q, k, v, w, _ = make_case(b=1, nq=9, nk=9, seed=4)
    torch.testing.assert_close(neighborhood_attention(q, k, v, ro, ci, w),
                               weighted_softmax_attention(q, k, v, w, backend="reference"))


def test_padding_is_invisible_even_when_poisoned_with_nan():
    q, k, v, w, _ = make_case(b=2, nk=6, seed=5)
    ro, ci = random_csr(7, 9, p=0.6, seed=5)  # neighbourhoods that reach into the padding
    pad = 3
    kp, vp = (torch.cat([t, torch.full((2, 2, pad, t.shape[-1]), math.nan, dtype=F64)], 2) for t in (k, v))
    wp = torch.cat([w, torch.full((2, pad), math.nan, dtype=F64)], 1)
    mask = torch.ones(2, 6 + pad, dtype=torch.bool)
    mask[:, 6:] = False
    leaves = [t.clone().requires_grad_() for t in (q, kp, vp, wp)]
    got = neighborhood_attention(*leaves[:3], ro, ci, leaves[3], mask)
    counts = multiplicity(ro, ci, 7, 9)[:, :6]
    torch.testing.assert_close(got, dense_oracle(q, k, v, w, counts, 0.5), rtol=1e-11, atol=1e-12)
    got.sum().backward()
    for n, leaf in zip("qkvw", leaves):
        assert torch.isfinite(leaf.grad).all(), n
    assert leaves[1].grad[:, :, 6:].abs().max() == 0 and leaves[3].grad[:, 6:].abs().max() == 0


def test_query_with_no_live_neighbour_gets_zeros_and_zero_gradient():
    q, k, v, w, _ = make_case(b=1, nq=3, nk=4, seed=6)
    ro = torch.tensor([0, 0, 2, 3])  # row 0 empty; row 1 lists keys 0, 1; row 2 lists key 3
    ci = torch.tensor([0, 1, 3])
    mask = torch.tensor([[False, False, True, True]])  # row 1's keys are all padding
    q = q.clone().requires_grad_()
    out = neighborhood_attention(q, k, v, ro, ci, w, mask)
    assert out[:, :, :2].abs().max() == 0
    torch.testing.assert_close(out[:, :, 2], v[:, :, 3])
    (g,) = torch.autograd.grad(out.sum(), q)
    assert g.abs().max() == 0  # one live key: the output does not depend on q at all


def test_csr_builders_sort_and_match_brute_force():
    ro, ci = csr_from_pairs(torch.tensor([2, 0, 2, 0]), torch.tensor([1, 3, 0, 2]), 4)
    assert ro.tolist() == [0, 2, 2, 4, 4] and ci.tolist() == [2, 3, 0, 1]
    g = torch.Generator().manual_seed(7)
    qp, kp = torch.rand(6, 2, generator=g), torch.rand(11, 2, generator=g)
    ro, ci = csr_within_distance(qp, kp, 0.4, chunk=4)
    near = torch.cdist(qp, kp) <= 0.4
    assert torch.equal(multiplicity(ro, ci, 6, 11).bool(), near) and ro[-1] == near.sum()


_q = torch.zeros(1, 2, 3, 4)
_k = torch.zeros(1, 2, 5, 4)
_v = torch.zeros(1, 2, 5, 3)
_ro = torch.tensor([0, 1, 2, 3])
_ci = torch.tensor([0, 1, 4])


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(row_offsets=torch.tensor([0, 1, 3])), ValueError, r"row_offsets: expected length Nq \+ 1 = 4, got 3"),
        (dict(row_offsets=torch.tensor([0, 2, 1, 3])), ValueError, r"row_offsets: expected non-decreasing offsets"),
        (dict(row_offsets=torch.tensor([0, 1, 2, 4])), ValueError, r"from 0 to nnz=3, got 0\.\.4"),
        (dict(col_indices=torch.tensor([0, 1, 5])), ValueError, r"col_indices: expected key indices in \[0, 5\), got range \[0, 5\]"),
        (dict(col_indices=torch.tensor([-1, 1, 2])), ValueError, r"col_indices: expected key indices in \[0, 5\)"),
        (dict(col_indices=torch.tensor([0.0, 1.0, 2.0])), TypeError, r"col_indices: expected an integer tensor"),
        (dict(row_offsets=torch.zeros(2, 2, dtype=torch.long)), ValueError, r"row_offsets: expected a 1-D tensor"),
        (dict(q=torch.zeros(1, 2, 3)), ValueError, r"q: expected a 4-D tensor"),
        (dict(q=torch.zeros(1, 2, 3, 5)), ValueError, r"q: expected shape \(B=1, H=2, Nq, D=4\)"),
        (dict(v=torch.zeros(1, 1, 5, 3)), ValueError, r"v: expected shape \(B=1, H=2, Nk=5, E\)"),
        (dict(weights=torch.ones(2, 5)), ValueError, r"weights: expected shape \(5,\) or \(1, 5\)"),
        (dict(mask=torch.ones(1, 5)), TypeError, r"mask: expected dtype torch.bool"),
        (dict(mask=torch.ones(5, dtype=torch.bool)), ValueError, r"mask: expected shape \(1, 5\)"),
        (dict(backend="nope"), BackendError, r"backend: expected one of .*'reference'"),
    ],
)
def test_bad_inputs_raise_errors_naming_the_argument(kwargs, exc, match):
    args = dict(q=_q, k=_k, v=_v, row_offsets=_ro, col_indices=_ci)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        neighborhood_attention(**args)


def test_forced_kernel_on_cpu_lists_why_each_backend_was_refused(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(BackendError) as info:
        neighborhood_attention(_q, _k, _v, _ro, _ci, backend="triton")
    msg = str(info.value)
    assert re.search(r"triton: (.*; )?device cpu not in \('cuda',\)", msg)
    assert "reference: ok" in msg
    with pytest.raises(BackendError, match=r"triton: .*head dim 129 > 128"):
        neighborhood_attention(_q, _k, torch.zeros(1, 2, 5, 129), _ro, _ci, backend="triton")


def test_default_backend_is_the_cpu_kernel_or_sparse_on_cpu_and_the_kernel_on_cuda(monkeypatch):
    from sciattn.neighborhood._cpu import unavailable

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # even with the interpreter on, CPU never defaults to triton
    props = dict(dtype=torch.float32, head_dim=64, has_mask=True, has_weights=True, requires_grad=True)
    cpu_default = "sparse" if unavailable() else "cpu"
    assert select_backend("neighborhood", None, device=torch.device("cpu"), **props).name == cpu_default
    assert select_backend("neighborhood", None, device=torch.device("cpu"), **dict(props, dtype=torch.float16)).name \
        == "sparse"
    monkeypatch.setenv("SCIATTN_CPU_KERNELS", "0")  # the switch hands the CPU back to the sparse backend
    assert select_backend("neighborhood", None, device=torch.device("cpu"), **props).name == "sparse"
    monkeypatch.delenv("SCIATTN_CPU_KERNELS")
    cuda64 = dict(props, dtype=F64)
    assert select_backend("neighborhood", None, device=torch.device("cuda"), **cuda64).name == "reference"
    if not has_triton():
        pytest.skip("triton is not installed: the forced and the CUDA-default kernel choices need it")
    assert select_backend("neighborhood", "triton", device=torch.device("cpu"), **props).name == "triton"
    assert select_backend("neighborhood", None, device=torch.device("cuda"), **props).name == "triton"


@pytest.mark.slow
def test_reference_compiles_with_fullgraph_forward_and_backward():
    """Needs ``repeat_interleave(..., output_size=nnz)`` in the reference (a static edge count)."""
    q, k, v, w, mask = (t.float() if t.is_floating_point() else t for t in make_case(b=1, h=1, nq=4, nk=5, d=2, e=2))
    ro, ci = random_csr(4, 5, p=0.6, seed=8, empty_rows=())
    q = q.clone().requires_grad_()

    def f(q):
        return neighborhood_attention(q, k, v, ro, ci, w, mask, validate=False)

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q)
    torch.testing.assert_close(got, f(q))
    (gc,) = torch.autograd.grad(got.sum(), q)
    (ge,) = torch.autograd.grad(f(q).sum(), q)
    torch.testing.assert_close(gc, ge)
