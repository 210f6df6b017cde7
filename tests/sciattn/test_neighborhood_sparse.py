"""The sparse-BLAS neighbourhood attention backend (SDDMM + segment softmax + SpMM): against the
float64 reference and independent oracles, in outputs and all gradients; its plan cache; the
O(N·C) activation memory of its recompute-in-backward scheme."""

from __future__ import annotations

import math

import pytest
import torch

from sciattn._dispatch import backends_for
from sciattn.domain import SphereGrid
from sciattn.neighborhood import csr_from_pairs, neighborhood_attention
from sciattn.neighborhood._sparse import build_sparse_plan, neighborhood_sparse, sparse_plan
from sciattn.neighborhood.reference import neighborhood_reference
from sciattn.spherical.functional import area_weights
from sciattn.spherical.neighborhoods import sphere_disc_csr
from sciattn.weighted_softmax import weighted_softmax_attention

F64 = torch.float64


def ragged_csr(nq, nk, seed, empty_rows=(1,), full_row=None):
    """Rows of random lengths 0..nk in shuffled (unsorted) order, a duplicated pair in row 0."""
    g = torch.Generator().manual_seed(seed)
    rows, cols = [], []
    for i in range(nq):
        n = 0 if i in empty_rows else (nk if i == full_row else int(torch.randint(1, nk + 1, (1,), generator=g)))
        c = torch.randperm(nk, generator=g)[:n]
        if i == 0:
            c = torch.cat([c, c[:1]])  # listed twice: a double quadrature weight
        rows.append(torch.full_like(c, i))
        cols.append(c)
    rows, cols = torch.cat(rows), torch.cat(cols)
    counts = torch.bincount(rows, minlength=nq)
    offsets = torch.zeros(nq + 1, dtype=torch.int64)
    offsets[1:] = counts.cumsum(0)
    return offsets, cols  # rows are already grouped in order; columns stay unsorted


def prepared(b=2, h=2, nq=9, nk=13, d=5, e=3, seed=0, dtype=F64, masked=(0, 3)):
    """Inputs as the functional hands them to a backend: masked keys have k = v = 0, log w = -inf."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, nq, d, generator=g, dtype=F64)
    k = torch.randn(b, h, nk, d, generator=g, dtype=F64)
    v = torch.randn(b, h, nk, e, generator=g, dtype=F64)
    log_w = torch.log(torch.rand(b, nk, generator=g, dtype=F64) * 2 + 0.05)
    keep = torch.ones(b, nk, dtype=torch.bool)
    keep[0, list(masked)] = False
    log_w = log_w.masked_fill(~keep, -math.inf)
    k, v = k * keep[:, None, :, None], v * keep[:, None, :, None]
    return [t.to(dtype) for t in (q, k, v)] + [log_w.to(dtype)]


def grads(fn, inputs, ro, ci, scale, seed=1):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves, ro, ci, scale)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=F64).to(out.dtype)
    return out, torch.autograd.grad(out, leaves, g)


def test_float64_outputs_and_all_gradients_match_reference_on_ragged_unsorted_rows():
    inputs = prepared()
    ro, ci = ragged_csr(9, 13, seed=0, full_row=4)
    want, want_g = grads(neighborhood_reference, inputs, ro, ci, 0.6)
    got, got_g = grads(neighborhood_sparse, inputs, ro, ci, 0.6)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for name, x, y in zip(("q", "k", "v", "log_w"), got_g, want_g):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12, msg=lambda m, n=name: f"d{n}: {m}")
    assert got[:, :, 1].abs().max() == 0  # the empty row


def test_float32_matches_float64_reference_within_1e_5():
    inputs = prepared(seed=2)
    ro, ci = ragged_csr(9, 13, seed=2)
    want, want_g = grads(neighborhood_reference, inputs, ro, ci, 0.8)
    got, got_g = grads(neighborhood_sparse, [t.float() for t in inputs], ro, ci, 0.8)
    assert got.dtype == torch.float32
    for x, y in zip((got, *got_g), (want, *want_g)):
        torch.testing.assert_close(x.double(), y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_accumulate_in_float32(dtype):
    inputs = prepared(seed=3)
    ro, ci = ragged_csr(9, 13, seed=3)
    low = [t.to(dtype) for t in inputs]
    got = neighborhood_sparse(*low, ro, ci, 0.5)
    want = neighborhood_reference(*[t.double() for t in low], ro, ci, 0.5)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)


def test_gradcheck_float64():
    q, k, v, log_w = prepared(b=1, h=2, nq=4, nk=5, d=2, e=2, seed=4, masked=(1,))
    ro, ci = ragged_csr(4, 5, seed=4)
    args = [t.clone().requires_grad_() for t in (q, k, v, log_w)]
    assert torch.autograd.gradcheck(lambda *a: neighborhood_sparse(*a, ro, ci, 0.7), args)


def test_all_pairs_index_equals_global_weighted_softmax_attention():
    """Independent oracle: with every key in every neighbourhood this is global attention."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, n, 4, generator=g, dtype=F64) for n in (6, 8, 8))
    w = torch.rand(2, 8, generator=g, dtype=F64) + 0.1
    rows, cols = torch.meshgrid(torch.arange(6), torch.arange(8), indexing="ij")
    ro, ci = csr_from_pairs(rows.flatten(), cols.flatten(), 6)
    got = neighborhood_sparse(q, k, v, torch.log(w), ro, ci, 0.5)
    want = weighted_softmax_attention(q, k, v, w, scale=0.5, backend="reference")
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_rows_without_a_live_key_give_zero_output_and_zero_gradients():
    q, k, v, log_w = prepared(b=1, h=1, nq=3, nk=4, seed=6, masked=(0, 1))
    ro = torch.tensor([0, 0, 2, 3])  # row 0 empty; row 1 lists only masked keys 0, 1; row 2 lists key 3
    ci = torch.tensor([1, 0, 3])
    leaves = [t.clone().requires_grad_() for t in (q, k, v, log_w)]
    out = neighborhood_sparse(*leaves, ro, ci, 0.5)
    assert out[:, :, :2].abs().max() == 0
    torch.testing.assert_close(out[:, :, 2], v[:, :, 3])
    out.sum().backward()
    for leaf in leaves:
        assert torch.isfinite(leaf.grad).all()
    assert leaves[0].grad.abs().max() == 0  # one live key at most: no dependence on q
    assert leaves[3].grad[0, :2].abs().max() == 0


def test_sphere_disc_index_matches_reference():
    """The main user: geodesic discs on a Legendre–Gauss grid (arcs wrap around longitude 0)."""
    grid = SphereGrid(6, 12, "legendre-gauss")
    ro, ci = sphere_disc_csr(grid, grid, 0.9)
    n = grid.nlat * grid.nlon
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, n, 3, generator=g, dtype=F64) for _ in range(3))
    log_w = torch.log(area_weights(grid))[None]
    want, want_g = grads(neighborhood_reference, (q, k, v, log_w), ro, ci, 0.9)
    got, got_g = grads(neighborhood_sparse, (q, k, v, log_w), ro, ci, 0.9)
    for x, y in zip((got, *got_g), (want, *want_g)):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


def saved_bytes(fn):
    """Bytes of the tensors autograd keeps for the backward pass of ``fn()`` (distinct storages)."""
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def test_saved_activations_are_order_n_c_and_do_not_grow_with_the_neighbourhood():
    grid = SphereGrid(8, 16, "equiangular")
    n, c = grid.nlat * grid.nlon, 16
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 1, n, c, generator=g).requires_grad_() for _ in range(3))
    log_w = torch.log(area_weights(grid).float())[None]
    sizes = {}
    for theta in (0.3, 2.0):  # mean neighbourhood about 5 and about 87 keys
        ro, ci = sphere_disc_csr(grid, grid, theta)
        sizes[theta] = (ci.numel(), saved_bytes(lambda ro=ro, ci=ci: neighborhood_sparse(q, k, v, log_w, ro, ci, 0.3)))
    (nnz_small, small), (nnz_big, big) = sizes.values()
    assert nnz_big > 15 * nnz_small
    assert small == big
    # q, k, v, output (B·H·N·C floats each), log w and lse (N each): nothing of size nnz·C
    assert big <= 4 * (4 * n * c + 2 * n)


def test_plan_is_canonical_cached_and_rebuilt_after_in_place_edits():
    ro, ci = ragged_csr(5, 7, seed=9, empty_rows=(2,))
    plan = build_sparse_plan(ro, ci, 7)
    rows = torch.repeat_interleave(torch.arange(5), ro.diff())
    pairs = torch.stack([rows, ci], 1).tolist()
    for r in range(5):  # sorted, duplicate-free, same multiset with multiplicities folded into log2_mult
        got = plan.col_indices[plan.row_offsets[r] : plan.row_offsets[r + 1]].tolist()
        assert got == sorted(set(got)) and set(got) == {c for rr, c in pairs if rr == r}
    dup = plan.log2_mult.nonzero().flatten()
    assert dup.numel() == 1 and plan.log2_mult[dup].item() == 1.0 and plan.edge_rows[dup].item() == 0
    t_cols = plan.col_indices[plan.t_perm]  # the transpose: grouped by key, rows ascending
    assert torch.equal(t_cols, torch.sort(plan.col_indices, stable=True).values)
    assert torch.equal(plan.t_rows, plan.edge_rows[plan.t_perm])
    first = sparse_plan(ro, ci, n_keys=7, device=torch.device("cpu"))
    assert sparse_plan(ro, ci, n_keys=7, device=torch.device("cpu")) is first
    ci[0] = (ci[0] + 1) % 7  # an in-place edit bumps the version: the plan is rebuilt
    assert sparse_plan(ro, ci, n_keys=7, device=torch.device("cpu")) is not first


def test_repeated_calls_are_bitwise_identical():
    inputs = prepared(seed=10)
    ro, ci = ragged_csr(9, 13, seed=10)
    a = grads(neighborhood_sparse, inputs, ro, ci, 0.5)
    b = grads(neighborhood_sparse, inputs, ro, ci, 0.5)
    for x, y in zip((a[0], *a[1]), (b[0], *b[1])):
        assert torch.equal(x, y)


def test_a_plan_for_another_index_is_rejected():
    inputs = prepared(seed=11)
    ro, ci = ragged_csr(9, 13, seed=11)
    plan = build_sparse_plan(*ragged_csr(8, 13, seed=11), 13)
    with pytest.raises(ValueError, match="plan: expected a plan for Nq=9"):
        neighborhood_sparse(*inputs, ro, ci, 0.5, plan=plan)


@pytest.mark.skipif("sparse" not in [b.name for b in backends_for("neighborhood")],
                    reason="backend 'sparse' not registered in sciattn.neighborhood.functional yet")
def test_functional_with_nan_poisoned_padding_matches_reference_backend():
    g = torch.Generator().manual_seed(12)
    b, h, nq, nk = 2, 2, 7, 10
    q = torch.randn(b, h, nq, 4, generator=g, dtype=F64)
    k = torch.randn(b, h, nk, 4, generator=g, dtype=F64)
    v = torch.randn(b, h, nk, 3, generator=g, dtype=F64)
    w = torch.rand(b, nk, generator=g, dtype=F64) + 0.1
    mask = torch.ones(b, nk, dtype=torch.bool)
    mask[0, 7:] = False
    k = k.masked_fill(~mask[:, None, :, None], math.nan)
    v = v.masked_fill(~mask[:, None, :, None], math.nan)
    w = w.masked_fill(~mask, math.nan)
    ro, ci = ragged_csr(nq, nk, seed=12)
    results = []
    for backend in ("reference", "sparse"):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, w)]
        out = neighborhood_attention(*leaves[:3], ro, ci, leaves[3], mask, backend=backend)
        results.append((out, torch.autograd.grad(out.sum(), leaves)))
    (want, want_g), (got, got_g) = results
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for x, y in zip(got_g, want_g):
        assert torch.isfinite(x).all()
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_compiles_with_fullgraph_by_deferring_to_the_reference():
    inputs = [t.float() for t in prepared(b=1, h=1, nq=4, nk=5, d=2, e=2, seed=13, masked=())]
    ro, ci = ragged_csr(4, 5, seed=13, empty_rows=())
    q = inputs[0].clone().requires_grad_()

    def f(q):
        return neighborhood_sparse(q, *inputs[1:], ro, ci, 0.5)

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q)
    torch.testing.assert_close(got, f(q))
    (gc,) = torch.autograd.grad(got.sum(), q)
    (ge,) = torch.autograd.grad(f(q).sum(), q)
    torch.testing.assert_close(gc, ge)
