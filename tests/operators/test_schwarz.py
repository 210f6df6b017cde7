"""Two-level overlapping Schwarz attention against the paper's operator (arXiv 2606.18525), transcribed in float64 in
tests/operators/_schwarz_paper.py: the partitions of unity, the functional and the whole registered operator at
matched weights (<= 1e-10 relative), the paper's algebraic form, and the error texts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sciattn.domain import Grid
from sciattn.multipole.schwarz import (
    coarse_hats,
    physical_partition,
    points_partition,
    schwarz_attention,
)
from sciattn.operators import create_operator

from . import _schwarz_paper as paper

TOL = 1e-10


def _rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))


def _ref_partition(pos: np.ndarray, subdomains, overlap):
    return paper.per_point([paper.axis_partition_physical(pos[:, a], s, overlap) for a, s in enumerate(subdomains)])


def _ref_hats(pos: np.ndarray, nodes):
    return paper.per_point([paper.axis_hats(pos[:, a], m) for a, m in enumerate(nodes)])


@pytest.mark.parametrize("subdomains,overlap", [((5,), 0.1), ((3, 4), 0.05), ((2, 1), 0.25)])
def test_physical_partition_is_the_papers_and_sums_to_one(subdomains, overlap):
    g = torch.Generator().manual_seed(0)
    pos = torch.rand(200, len(subdomains), generator=g, dtype=torch.float64)
    pos[:4] = torch.tensor([0.0, 1.0, 0.2, 0.8], dtype=torch.float64)[:, None]  # ends and a core edge
    ours = physical_partition(pos, subdomains, overlap)
    ref = _ref_partition(pos.numpy(), subdomains, overlap)
    assert np.abs(ours.numpy() - ref).max() < 1e-14
    assert np.abs(ref.sum(1) - 1).max() < 1e-14  # Σ_i R_iᵀ D_i R_i = I
    assert ((ref > 0).sum(1) > 1).any()  # the subdomains overlap


@pytest.mark.parametrize("shape,subdomains,overlap_points", [((17,), (4,), 2), ((9, 11), (2, 3), 1), ((8,), (3,), 0)])
def test_points_partition_is_the_multiplicity_weighting(shape, subdomains, overlap_points):
    ours = points_partition(shape, subdomains, overlap_points, torch.float64).numpy()
    ref = paper.per_point([paper.axis_partition_points(n, s, overlap_points)[idx.reshape(-1)]
                           for n, s, idx in zip(shape, subdomains, np.meshgrid(*[np.arange(n) for n in shape],
                                                                               indexing="ij"))])
    assert np.abs(ours - ref).max() < 1e-15
    assert np.abs(ours.sum(1) - 1).max() < 1e-15


def test_coarse_hats_interpolate_linear_functions():
    pos = torch.rand(50, 2, dtype=torch.float64)
    phi = coarse_hats(pos, (4, 6))
    assert np.abs(phi.numpy() - _ref_hats(pos.numpy(), (4, 6))).max() < 1e-14
    nodes = torch.stack(torch.meshgrid(torch.linspace(0, 1, 4, dtype=torch.float64),
                                       torch.linspace(0, 1, 6, dtype=torch.float64), indexing="ij"), -1).reshape(-1, 2)
    f = 2 * nodes[:, 0] - 3 * nodes[:, 1] + 0.5  # bilinear interpolation reproduces affine functions
    assert torch.allclose(phi @ f, 2 * pos[:, 0] - 3 * pos[:, 1] + 0.5, atol=1e-13)


def _random(b, n, h, d, e, m, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    w = torch.rand(b, n, generator=g, dtype=torch.float64) + 0.1
    return r(b, n, h, d), r(b, n, h, d), r(b, n, h, e), w / w.sum(1, keepdim=True), r(b, m, h, d), r(b, m, h, d)


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize("coarse", [True, False])
def test_functional_equals_the_papers_operator(dims, coarse):
    """Non-uniform weights, scattered points, several heads: ``z = M V`` with ``M`` assembled from ``R_i``, ``D_i``,
    ``Φ`` as dense matrices."""
    n, subdomains, nodes = 40, (4,) * dims, (3,) * dims
    pos = torch.rand(n, dims, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    q, k, v, w, q0, k0 = _random(2, n, 2, 3, 4, 3 ** dims, seed=2)
    part = physical_partition(pos, subdomains, 0.1)[None]
    hats = coarse_hats(pos, nodes)[None] if coarse else None
    ours = schwarz_attention(q, k, v, w, part, hats, *((q0, k0) if coarse else (None, None)))
    ref_hats = _ref_hats(pos.numpy(), nodes) if coarse else None
    ref = paper.schwarz_forward(_ref_partition(pos.numpy(), subdomains, 0.1), q.numpy(), k.numpy(), v.numpy(),
                                w.numpy(), ref_hats, q0.numpy(), k0.numpy())
    assert _rel(ours, ref) < TOL


def _paper_model(model, x: torch.Tensor) -> np.ndarray:
    """The registered operator's forward on a grid, every attention through the dense transcription, the
    partition and hats from the reference, the coarse tokens pooled here (float64)."""
    d = model.spatial_dims
    grid = Grid.from_field(x, d)
    pos, w = (t.double() for t in grid.nodes_and_weights(torch.float64))
    w = (w / w.sum()).expand(x.shape[0], -1) if model.quadrature else torch.ones(x.shape[0], len(w),
                                                                                  dtype=torch.float64)
    if model.geometry == "points":
        part = paper.per_point([paper.axis_partition_points(n, s, model.overlap_points)[i.reshape(-1)]
                                for n, s, i in zip(grid.shape, model.subdomains,
                                                   np.meshgrid(*[np.arange(n) for n in grid.shape], indexing="ij"))])
    else:
        part = _ref_partition(pos.numpy(), model.subdomains, model.overlap)
    hats = _ref_hats(pos.numpy(), model.coarse_nodes)
    a = x.flatten(2).transpose(1, 2)
    with torch.no_grad():
        h = model.lift(torch.cat([a, pos.expand(x.shape[0], -1, -1)], -1))
        for block in model.blocks:
            att, u = block.attn, block.ln1(h)
            q, k, v = (att.heads(lin(u)).numpy() for lin in (att.q, att.k, att.v))
            coarse = (None, None, None)
            if att.q0 is not None:
                wh = w.numpy()[:, :, None] * hats[None]  # (B, N, M)
                h0 = torch.from_numpy(np.einsum("bnm,bnc->bmc", wh, u.numpy()) / wh.sum(1)[..., None])
                coarse = (hats, att.heads(att.q0(h0)).numpy(), att.heads(att.k0(h0)).numpy())
            z = paper.schwarz_forward(part, q, k, v, w.numpy(), *coarse)
            h = h + att.out(torch.from_numpy(z).flatten(2))
            h = h + block.ffn(block.ln2(h))
        out = model.project(model.norm(h))
    return out.transpose(1, 2).reshape(x.shape[0], model.out_channels, *grid.shape).numpy()


@pytest.mark.parametrize("config,shape", [
    (dict(spatial_dims=1, subdomains=4, overlap=0.1), (33,)),
    (dict(spatial_dims=2, subdomains=[2, 3], overlap=0.08, coarse_nodes=[3, 2]), (9, 12)),
    (dict(spatial_dims=1, subdomains=5, geometry="points", overlap_points=2, quadrature=False), (30,)),
    (dict(spatial_dims=2, subdomains=2, coarse=False), (10, 10)),
])
def test_operator_equals_the_papers_operator(config, shape):
    torch.manual_seed(0)
    model = create_operator("schwarz_transformer", in_channels=2, out_channels=3, width=8, n_layers=2, n_heads=2,
                            **config).double().eval()
    x = torch.randn(2, 2, *shape, dtype=torch.float64)
    with torch.no_grad():
        ours = model(x).numpy()
    assert _rel(ours, _paper_model(model, x)) < TOL


def test_one_sample_alone_equals_its_batch_row_on_a_point_set():
    torch.manual_seed(0)
    model = create_operator("schwarz_transformer", in_channels=1, out_channels=1, width=8, n_layers=1,
                            n_heads=2).double().eval()
    x, pos = torch.randn(2, 30, 1, dtype=torch.float64), torch.rand(2, 30, 2, dtype=torch.float64)
    mask = torch.ones(2, 30, dtype=torch.bool)
    mask[1, 20:] = False
    with torch.no_grad():
        both = model(x, pos, mask=mask)
        alone = model(x[1:, :20], pos[1:, :20])
    assert torch.allclose(both[1, :20], alone[0], atol=1e-12)
    assert both[1, 20:].abs().max() == 0


@pytest.mark.parametrize("kwargs,words", [
    (dict(overlap=0.2), r"overlap: expected a fraction of the domain in \(0, 1/\(2\*subdomains\)\] = \(0, 0.125\]"),
    (dict(overlap=0), "overlap: expected"),
    (dict(geometry="cells"), r"geometry: expected one of \['physical', 'points'\], got 'cells'"),
    (dict(coarse_nodes=1), "coarse_nodes: expected at least 2 nodes per axis, got 1"),
    (dict(subdomains=[2, 2, 2]), r"subdomains: expected an int or 2 ints \(one per spatial axis\), got \[2, 2, 2\]"),
    (dict(overlap_points=-1), "overlap_points: expected an int >= 0, got -1"),
    (dict(coarse=1), "coarse: expected a bool, got 1"),
])
def test_bad_arguments_are_named(kwargs, words):
    with pytest.raises((ValueError, TypeError), match=words):
        create_operator("schwarz_transformer", in_channels=1, out_channels=1, **kwargs)


def test_point_sets_refuse_the_algebraic_form():
    model = create_operator("schwarz_transformer", in_channels=1, out_channels=1, geometry="points")
    with pytest.raises(ValueError, match="pos: point sets need geometry='physical' and quadrature=True"):
        model(torch.randn(1, 10, 1), torch.rand(1, 10, 2))


def test_functional_names_a_missing_coarse_argument():
    q = torch.randn(1, 5, 1, 2)
    with pytest.raises(ValueError, match=r"hats, q0, k0: expected all three \(coarse level\) or none"):
        schwarz_attention(q, q, q, torch.ones(1, 5) / 5, torch.ones(1, 5, 1), torch.ones(1, 5, 2))


def _dense_local_terms(q, k, v, weights, partition):
    """The local terms as first written (per-point ``D × E`` products, then sums over the subdomains): the float64
    oracle of the chunked matrix products that replaced them."""
    root = partition.clamp_min(0).sqrt().to(q.dtype)
    kv = torch.einsum("bnhd,bnhe->bnhde", k * weights.to(q.dtype)[..., None, None], v)
    local = torch.einsum("bns,bnhde->bshde", root.expand(q.shape[0], -1, -1), kv)
    return torch.einsum("bnhd,bnhde->bnhe", q, torch.einsum("bns,bshde->bnhde", root.expand(q.shape[0], -1, -1),
                                                             local))


@pytest.mark.parametrize("path, chunk, per_row", [
    ("dense", None, False), ("dense", 7 * 2 * 9 * 2 * 4, False),  # one chunk; chunks of 7 points (and a tail)
    ("sparse", None, False), ("sparse", None, True),  # per subdomain over its points; two clouds' own partitions
])
def test_local_terms_equal_the_per_point_products(path, chunk, per_row, monkeypatch):
    import sciattn.multipole.schwarz as schwarz

    if chunk is not None:
        monkeypatch.setattr(schwarz, "CHUNK_ELEMENTS", chunk)
    calls = []
    for name in ("_local_sparse", "_local_dense"):
        real = getattr(schwarz, name)
        monkeypatch.setattr(schwarz, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    monkeypatch.setattr(schwarz, "SPARSE_BELOW", 2.0 if path == "sparse" else -1.0)
    n = 45
    pos = torch.rand(2 if per_row else 1, n, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    q, k, v, w, _, _ = _random(2, n, 2, 3, 4, 1, seed=5)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    part = physical_partition(pos, (3, 3), 0.1)
    ours, ref = schwarz_attention(q, k, v, w, part), _dense_local_terms(q, k, v, w, part)
    assert _rel(ours.detach(), ref.detach()) < 1e-13
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad((ours * g).sum(), (q, k, v)), torch.autograd.grad((ref * g).sum(), (q, k, v))):
        assert (a - b).abs().max() <= 1e-12 * b.abs().max()
    assert calls == [f"_local_{path}"]


def test_the_supports_choose_the_sparse_form_at_the_defaults():
    import sciattn.multipole.schwarz as schwarz

    pos = torch.stack(torch.meshgrid(*(torch.arange(64, dtype=torch.float64).add(0.5) / 64,) * 2, indexing="ij"), -1)
    root = physical_partition(pos.reshape(-1, 2), (4, 4), 1 / 16)[None].sqrt()
    supports = schwarz._supports(root)
    assert supports is not None and len(supports) == 16
    member = root[0] > 0
    for i, idx in enumerate(supports):  # exactly the points of positive weight, each subdomain
        assert torch.equal(idx, member[:, i].nonzero().squeeze(1))
    assert sum(len(i) for i in supports) / member.shape[0] < 2  # fewer than two subdomains per point on average
