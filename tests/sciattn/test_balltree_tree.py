"""Batched ball trees: exact agreement with a recursive NumPy oracle and with balltree-erwin,
split properties, rotated trees, padding, no host sync, caching and errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sciattn.balltree import BallTreeCache, ball_centers, build_ball_tree, mixing_index, rotation_matrix
from sciattn.balltree.build import _axis_orders, rotate_points
from sciattn.balltree.reference import ball_tree_numpy

MINI_CAR = Path(__file__).resolve().parents[3] / "shared" / "data" / "mini_car.pt"


def _real_order(tree, b):
    """Tree order of cloud ``b`` with -1 on padding, as a NumPy array."""
    return torch.where(tree.mask[b], tree.perm[b], -1).numpy()


def _oracle(pos, mask, b, ball_size):
    """The NumPy oracle's tree order of cloud ``b`` in input indices, padded with -1 to the row."""
    idx = np.nonzero(mask[b].numpy())[0]
    order = ball_tree_numpy(pos[b, idx].numpy(), ball_size)
    return np.where(order >= 0, idx[np.maximum(order, 0)], -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,ball", [((3, 100, 3), 16), ((2, 37, 2), 8), ((4, 5, 2), 8), ((2, 300, 1), 32),
                                        ((2, 64, 3), 64)])
def test_tree_order_equals_recursive_numpy_oracle(dtype, shape, ball):
    g = torch.Generator().manual_seed(sum(shape) + ball)
    pos = torch.rand(*shape, generator=g, dtype=dtype)
    mask = torch.rand(shape[:2], generator=g) > 0.3
    mask[:, 0] = True
    tree = build_ball_tree(pos, mask, ball)
    for b in range(shape[0]):
        want = _oracle(pos, mask, b, ball)
        got = _real_order(tree, b)
        np.testing.assert_array_equal(got[: len(want)], want)
        assert (got[len(want):] == -1).all()  # the rest of the row is whole padding balls


def test_heavy_ties_on_a_grid_are_broken_by_the_other_coordinates_like_the_oracle():
    xs = torch.arange(12.0)
    pos = torch.cartesian_prod(xs, xs[:7]).unsqueeze(0)  # 84 points, every coordinate repeated
    pos = pos[:, torch.randperm(84, generator=torch.Generator().manual_seed(0))]
    tree = build_ball_tree(pos, None, 8)
    np.testing.assert_array_equal(_real_order(tree, 0)[:128], _oracle(pos, torch.ones(1, 84, dtype=torch.bool), 0, 8))
    again = build_ball_tree(pos, None, 8)
    assert torch.equal(tree.perm, again.perm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,ball,rotate", [((3, 150, 3), 8, None), ((2, 90, 2), 16, 45.0), ((2, 70, 1), 4, None),
                                               ((1, 40, 3), 1, 30.0)])
def test_duplicates_and_masks_match_the_oracle_in_every_slot(dtype, shape, ball, rotate):
    # Coordinates on a coarse grid (many exact ties, -0.0 next to 0.0), masked points holding NaN:
    # the order of every slot, inside balls too, equals the recursive (coordinate, index) oracle.
    g = torch.Generator().manual_seed(sum(shape) + ball)
    pos = (torch.randint(-2, 3, shape, generator=g) * 0.5).to(dtype)
    zero = pos == 0
    negative = torch.randint(0, 2, (int(zero.sum()),), generator=g).bool()
    pos[zero] = torch.where(negative, torch.tensor(-0.0, dtype=dtype), torch.tensor(0.0, dtype=dtype))
    mask = torch.rand(shape[:2], generator=g) > 0.25
    mask[:, 1] = True
    pos[~mask] = float("nan")
    tree = build_ball_tree(pos, mask, ball, rotate)
    frame = pos if rotate is None else rotate_points(pos, rotation_matrix(rotate, shape[2], dtype))
    for b in range(shape[0]):
        want = _oracle(frame, mask, b, ball)
        got = _real_order(tree, b)
        np.testing.assert_array_equal(got[: len(want)], want)
        assert (got[len(want):] == -1).all()
    again = build_ball_tree(pos, mask, ball, rotate)
    assert torch.equal(tree.perm, again.perm) and torch.equal(tree.pos, again.pos)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("per_row", [True, False])
def test_axis_orders_sort_by_coordinate_then_all_coordinates_then_index_on_every_path(dtype, per_row):
    # Both the per-row radix sorts (CPU default) and the packed / two-pass sorts (accelerators).
    g = torch.Generator().manual_seed(11)
    coords = (torch.randint(-3, 4, (2, 3, 64), generator=g) * 0.25).to(dtype)
    coords[0, 1, :5] = -0.0
    coords[1, 2] = torch.randn(64, generator=g).to(dtype) * 1e30 if dtype == torch.float64 else coords[1, 2]
    valid = torch.rand(2, 64, generator=g) > 0.2
    got = _axis_orders(coords, valid, torch.int32, per_row=per_row)
    assert got.dtype == torch.int32
    for b in range(2):
        keys = [np.where(valid[b].numpy(), coords[b, a].double().numpy(), np.inf) for a in range(3)]
        for a in range(3):
            want = np.lexsort((np.arange(64), keys[2], keys[1], keys[0], keys[a]))
            np.testing.assert_array_equal(got[b, a].numpy(), want)


def test_a_large_cloud_with_ties_matches_the_oracle():
    # 2^15 slots: the per-row sort path; quantised coordinates give thousands of ties per axis.
    g = torch.Generator().manual_seed(12)
    pos = (torch.rand(1, 20000, 3, generator=g) * 40).floor() / 40
    tree = build_ball_tree(pos, None, 64)
    assert tree.padded_size == 2**15
    np.testing.assert_array_equal(_real_order(tree, 0), ball_tree_numpy(pos[0].numpy(), 64))


def test_centres_and_radii_are_those_of_ball_centers_computed_once():
    g = torch.Generator().manual_seed(13)
    pos = torch.randn(2, 200, 3, generator=g)
    mask = torch.rand(2, 200, generator=g) > 0.3
    tree = build_ball_tree(pos, mask, 16)
    zeroed = torch.where(tree.mask[..., None], tree.pos, torch.zeros(()))
    assert len(tree.centers) == len(tree.radii) == 5  # node sizes 16, 32, ..., 256
    for k, (cen, rad) in enumerate(zip(tree.centers, tree.radii)):
        want_c, want_r = ball_centers(zeroed, tree.mask, 16 * 2**k)
        assert torch.equal(cen, want_c) and torch.equal(rad, want_r)
    assert tree.centers is tree.centers and tree.radii is tree.radii  # computed on first use, kept
    pad = ~tree.mask.view(2, 16, 16)  # padding slots sit at the centre of their ball
    torch.testing.assert_close(tree.pos.view(2, 16, 16, 3)[pad],
                               tree.centers[0][:, :, None].expand(2, 16, 16, 3)[pad], rtol=0, atol=0)


def test_every_node_is_a_median_split_along_its_widest_axis_and_balls_are_prefix_packed():
    g = torch.Generator().manual_seed(3)
    ball = 8
    pos = torch.randn(2, 90, 3, generator=g, dtype=torch.float64) * torch.tensor([3.0, 1.0, 0.5], dtype=torch.float64)
    mask = torch.ones(2, 90, dtype=torch.bool)
    mask[1, 51:] = False
    tree = build_ball_tree(pos, mask, ball)
    assert tree.padded_size == 128
    for b, n in ((0, 90), (1, 51)):
        pb = max(2 ** math.ceil(math.log2(n)), ball)
        order = _real_order(tree, b)
        assert sorted(order[order >= 0].tolist()) == list(range(n))  # each real point exactly once
        assert (order[pb:] == -1).all()
        c = pb
        while c > 1:
            for start in range(0, pb, c):
                node = order[start:start + c]
                real = node[node >= 0]
                if len(real) < 2:
                    continue
                x = pos[b, real].numpy()
                axis = int(np.argmax(x.max(0) - x.min(0)))
                left, right = node[: c // 2], node[c // 2:]
                left, right = left[left >= 0], right[right >= 0]
                expect = len(real) // 2 if c > ball else min(len(real), c // 2)
                assert len(left) == expect
                if len(left) and len(right):
                    assert pos[b, left, axis].max() <= pos[b, right, axis].min()
                if c <= ball:  # inside a ball the real points form a prefix of every node
                    assert (node[: len(real)] >= 0).all()
            c //= 2


def test_centres_radii_inverse_and_round_trip():
    g = torch.Generator().manual_seed(4)
    pos = torch.rand(2, 50, 2, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 50, generator=g) > 0.2
    pos[~mask] = float("nan")
    tree = build_ball_tree(pos, mask, 8)
    p = tree.padded_size
    assert torch.equal(tree.perm.gather(1, tree.inverse), torch.arange(p).expand(2, p))
    for k, (cen, rad) in enumerate(zip(tree.centers, tree.radii)):
        size = 8 * 2**k
        for b in range(2):
            for j in range(p // size):
                ids = tree.perm[b, j * size:(j + 1) * size][tree.mask[b, j * size:(j + 1) * size]]
                if len(ids) == 0:
                    assert rad[b, j] == 0
                    continue
                c = pos[b, ids].mean(0)
                torch.testing.assert_close(cen[b, j], c)
                torch.testing.assert_close(rad[b, j], (pos[b, ids] - c).norm(dim=-1).max())
    assert torch.isfinite(tree.pos).all()
    x = torch.randn(2, 50, 3, dtype=torch.float64)
    x[~mask] = float("nan")
    t = tree.to_tree(x)
    assert torch.equal(t[~tree.mask], torch.zeros_like(t[~tree.mask]))
    torch.testing.assert_close(tree.from_tree(t)[mask], x[mask])


def test_a_cloud_smaller_than_a_ball_is_one_ball_and_padding_never_mixes_samples():
    g = torch.Generator().manual_seed(5)
    pos = torch.rand(3, 40, 3, generator=g)
    mask = torch.zeros(3, 40, dtype=torch.bool)
    mask[0, :40], mask[1, :3], mask[2, 10:27] = True, True, True
    tree = build_ball_tree(pos, mask, 16)
    assert tree.padded_size == 64
    assert tree.mask[1].nonzero().flatten().tolist() == [0, 1, 2]  # 3 points: a prefix of ball 0
    counts = tree.mask[2].view(4, 16).sum(1).tolist()
    assert counts == [8, 9, 0, 0]  # 17 points pad to 32 (median split 8 | 9), then whole padding balls
    assert tree.mask[2, :8].all() and tree.mask[2, 16:25].all()  # real points are a prefix of each ball
    for b in range(3):  # a cloud's tree does not depend on the batch it sits in
        alone = build_ball_tree(pos[b:b + 1, mask[b]], None, 16)
        ids = mask[b].nonzero().flatten()
        got = torch.where(tree.mask[b], tree.perm[b], -1)[: alone.padded_size]
        want = torch.where(alone.mask[0], ids[alone.perm[0].clamp(max=len(ids) - 1)], -1)
        assert torch.equal(got, want)


def _ball_sets(order, ball):
    return [frozenset(int(i) for i in order[j:j + ball] if i >= 0) for j in range(0, len(order), ball)]


def test_ball_memberships_match_balltree_erwin():
    balltree = pytest.importorskip("balltree")  # the balltree-erwin package
    g = torch.Generator().manual_seed(6)
    for n, ball, d in ((1000, 64, 3), (2049, 256, 3), (300, 32, 2)):
        pos = torch.rand(1, n, d, generator=g, dtype=torch.float64)
        idx, msk = balltree.build_balltree(pos[0], torch.zeros(n, dtype=torch.long))
        theirs = np.where(msk.numpy(), idx.numpy(), -1)
        tree = build_ball_tree(pos, None, ball)
        assert tree.padded_size == len(theirs)
        assert _ball_sets(_real_order(tree, 0), ball) == _ball_sets(theirs, ball)


def test_real_car_surface_matches_both_oracles():
    if not MINI_CAR.is_file():
        pytest.skip(f"{MINI_CAR} not found")
    verts = torch.load(MINI_CAR, weights_only=True)[0]["vertices"]  # (3586, 3) float32, real mesh ties
    tree = build_ball_tree(verts[None], None, 256)
    order = _real_order(tree, 0)
    np.testing.assert_array_equal(order, ball_tree_numpy(verts.numpy(), 256))
    try:
        import balltree
    except ImportError:
        return
    idx, msk = balltree.build_balltree(verts.double(), torch.zeros(len(verts), dtype=torch.long))
    theirs = np.where(msk.numpy(), idx.numpy(), -1)
    moved = sum(len(a ^ b) for a, b in zip(_ball_sets(order, 256), _ball_sets(theirs, 256))) // 2
    # The mesh has tied coordinates (3549 distinct x of 3586): nth_element splits ties arbitrarily,
    # our (coordinate, other coordinates) order deterministically, so a handful of points may differ.
    assert moved <= 36  # <= 1% of the points


def test_rotated_tree_equals_tree_of_the_rotated_cloud_and_changes_memberships():
    g = torch.Generator().manual_seed(7)
    pos = torch.rand(2, 200, 3, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 200, generator=g) > 0.1
    rot = build_ball_tree(pos, mask, 16, rotate=45.0)
    r = rotation_matrix(45.0, 3, torch.float64)
    torch.testing.assert_close(r @ r.T, torch.eye(3, dtype=torch.float64))
    explicit = build_ball_tree(rotate_points(pos, r), mask, 16)
    torch.testing.assert_close(rotate_points(pos, r), pos @ r.T, rtol=0, atol=1e-15)
    assert torch.equal(rot.perm, explicit.perm)
    assert torch.equal(rot.perm, build_ball_tree(pos, mask, 16, rotate=r).perm)
    torch.testing.assert_close(rot.pos[rot.mask], pos.gather(1, rot.perm.clamp(max=199)[..., None].expand(-1, -1, 3))[rot.mask])
    plain = build_ball_tree(pos, mask, 16)
    for b in range(2):
        assert _ball_sets(_real_order(plain, b), 16) != _ball_sets(_real_order(rot, b), 16)
    x = torch.randn(2, 200, 4, dtype=torch.float64)
    idx = mixing_index(plain, rot)
    torch.testing.assert_close(plain.to_tree(x).gather(1, idx[..., None].expand(-1, -1, 4)), rot.to_tree(x))


def test_build_has_no_host_sync():
    pos = torch.rand(2, 70, 3)
    mask = torch.rand(2, 70) > 0.2
    mask[:, 0] = True
    eager = build_ball_tree(pos, mask, 16)
    compiled = torch.compile(build_ball_tree, fullgraph=True, backend="eager")(pos, mask, 16, 45.0)
    assert torch.equal(compiled.perm, build_ball_tree(pos, mask, 16, 45.0).perm)

    def forbidden(*args, **kwargs):
        raise AssertionError("host sync")

    names = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "numpy", "cpu")
    saved = {n: getattr(torch.Tensor, n) for n in names}
    try:
        for n in names:
            setattr(torch.Tensor, n, forbidden)
        tree = build_ball_tree(pos, mask, 16, rotate=30.0, check=False)
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)
    assert torch.equal(tree.perm, build_ball_tree(pos, mask, 16, rotate=30.0).perm)
    assert torch.equal(eager.mask.sum(1), mask.sum(1))


def test_build_on_meta_tensors_needs_no_data_and_checks_with_device_assertions(monkeypatch):
    # Meta tensors hold no data: any host read (item, bool, nonzero, ...) raises. The input checks
    # must stay on the device too, as message-less _assert_async (the message overload is not
    # asynchronous on CUDA).
    calls = []
    monkeypatch.setattr(torch, "_assert_async", lambda *args: calls.append(len(args)))
    pos = torch.rand(3, 300, 3, device="meta")
    mask = torch.ones(3, 300, dtype=torch.bool, device="meta")
    for rotate in (None, 45.0):
        tree = build_ball_tree(pos, mask, 16, rotate=rotate, check=True)
        assert tree.perm.shape == (3, 512) and tree.perm.device.type == "meta"
    assert calls and all(n == 1 for n in calls)


# aten ops that read device data on the host or copy host data to the device: each forces a
# host synchronisation (or a blocking copy) on CUDA.
_HOST_SYNC_OPS = {"_local_scalar_dense", "item", "nonzero", "masked_select", "is_nonzero", "equal", "unique_dim",
                  "_unique", "_unique2", "unique_consecutive", "bincount", "histc", "lift_fresh", "_assert_async"}


def test_build_runs_no_op_that_reads_or_copies_host_data():
    # check=True on CPU raises host-side on purpose; the device path of the checks is the meta test's.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    g = torch.Generator().manual_seed(0)
    pos, mask = torch.rand(3, 300, 3, generator=g), torch.rand(3, 300, generator=g) > 0.2
    with Record() as rec:
        tree = build_ball_tree(pos, mask, 16, rotate=45.0, check=False)
        stats = (tree.centers, tree.radii)  # computed on first use
    assert "sort" in rec.ops  # the recorder sees the build
    assert len(stats[0]) == len(stats[1]) > 0
    assert not rec.ops & _HOST_SYNC_OPS, sorted(rec.ops & _HOST_SYNC_OPS)


def test_cache_reuses_the_tree_of_the_same_unmodified_tensor():
    cache = BallTreeCache(maxsize=2)
    pos = torch.rand(1, 30, 2)
    t1 = cache.get(pos, ball_size=8)
    assert cache.get(pos, ball_size=8) is t1 and cache.hits == 1
    assert cache.get(pos, ball_size=8, rotate=45.0) is not t1
    assert cache.get(pos.clone(), ball_size=8) is not t1  # contents are never compared
    pos.mul_(2.0)  # in-place change: the version counter invalidates the entry
    t2 = cache.get(pos, ball_size=8)
    assert t2 is not t1 and cache.misses == 4
    torch.testing.assert_close(t2.pos[t2.mask], 2 * t1.pos[t1.mask])


def test_errors_name_the_argument():
    pos = torch.rand(2, 10, 3)
    with pytest.raises(ValueError, match="ball_size: expected a power of two, got 48"):
        build_ball_tree(pos, None, 48)
    with pytest.raises(ValueError, match="pos: expected a non-empty point cloud"):
        build_ball_tree(torch.rand(2, 0, 3), None, 8)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1] = False
    with pytest.raises(ValueError, match="mask: expected at least one real point per cloud"):
        build_ball_tree(pos, mask, 8)
    bad = pos.clone()
    bad[0, 3, 1] = float("nan")
    with pytest.raises(ValueError, match="pos: expected finite coordinates"):
        build_ball_tree(bad, None, 8)
    padded = torch.ones(2, 10, dtype=torch.bool)
    padded[0, 3] = False
    build_ball_tree(bad, padded, 8)  # NaN in padding is fine
    with pytest.raises(ValueError, match=r"mask: expected shape \(2, 10\)"):
        build_ball_tree(pos, torch.ones(2, 9, dtype=torch.bool), 8)
    with pytest.raises(ValueError, match=r"rotate: expected a \(3, 3\) matrix"):
        build_ball_tree(pos, None, 8, rotate=torch.eye(2))
    with pytest.raises(ValueError, match="rotate: expected positions with at least 2 dimensions"):
        build_ball_tree(torch.rand(1, 10, 1), None, 8, rotate=45.0)
    with pytest.raises(ValueError, match="padded_size: expected a power of two >= 16"):
        build_ball_tree(pos, None, 16, padded_size=8)
    with pytest.raises(ValueError, match="pos: expected a 3-D tensor"):
        build_ball_tree(torch.rand(10, 3), None, 8)


def _assert_permuted_tree(pos, mask, ball, rotate, perm):
    """The tree of ``pos[:, perm]`` holds, slot by slot, the points of the tree of ``pos``; padding
    slots stay padding. Returns the slots whose point differs (only exact duplicates may)."""
    tree = build_ball_tree(pos, mask, ball, rotate)
    moved = build_ball_tree(pos[:, perm], None if mask is None else mask[:, perm], ball, rotate)
    assert torch.equal(tree.mask, moved.mask)
    n = pos.shape[1]
    back = torch.where(moved.mask, perm[moved.perm.clamp(max=n - 1)], -1)
    want = torch.where(tree.mask, tree.perm, -1)
    torch.testing.assert_close(moved.pos, tree.pos, rtol=0, atol=0)  # same coordinates in every slot
    return back != want


@pytest.mark.parametrize("rotate", [None, 45.0])
@pytest.mark.parametrize("shape,ball", [((12, 7), 8), ((6, 5, 4), 16), ((16, 16), 32)])
def test_permuting_grid_points_permutes_the_tree(shape, ball, rotate):
    # A point cloud on a grid ties along every axis (maximal ties), and its 45 degree rotation
    # nearly ties in floating point: the tree must still follow the points, not their input order.
    axes = [torch.arange(k, dtype=torch.float32) / k for k in shape]
    pos = torch.cartesian_prod(*axes).unsqueeze(0).repeat(2, 1, 1)
    n = pos.shape[1]
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, n // 3:n // 2] = False  # a padded second cloud
    g = torch.Generator().manual_seed(n + ball)
    for _ in range(3):
        perm = torch.randperm(n, generator=g)
        assert not _assert_permuted_tree(pos, mask, ball, rotate, perm).any()


def test_exact_duplicates_are_the_only_points_that_may_swap_slots():
    g = torch.Generator().manual_seed(21)
    pos = (torch.randint(0, 4, (1, 120, 2), generator=g) / 4.0).double()  # 16 sites: many coincident points
    perm = torch.randperm(120, generator=g)
    swapped = _assert_permuted_tree(pos, None, 8, None, perm)
    assert swapped.any()  # coincident points follow their input order...
    tree = build_ball_tree(pos, None, 8)
    site = (pos[0, :, 0] * 4 * 4 + pos[0, :, 1] * 4).long()
    counts = torch.bincount(site, minlength=16)
    assert (counts[site[tree.perm[0][swapped[0]]]] > 1).all()  # ...and only they
    distinct = torch.rand(1, 120, 2, generator=g, dtype=torch.float64)
    assert not _assert_permuted_tree(distinct, None, 8, 45.0, perm).any()


def test_permuting_a_real_car_surface_permutes_the_tree(shared_data):
    # ShapeNet-Car vertices repeat coordinates (thousands of ties per axis); before the
    # order-independent tie-break, permuting them changed the tree and Erwin's output.
    cars = torch.load(shared_data / "mini_car.pt", weights_only=True)
    verts = torch.stack([c["vertices"] for c in cars])  # (3, 3586, 3) float32
    assert min(v[:, 2].unique().numel() for v in verts) < verts.shape[1]  # tied z coordinates
    g = torch.Generator().manual_seed(22)
    for rotate in (None, 45.0):
        perm = torch.randperm(verts.shape[1], generator=g)
        swapped = _assert_permuted_tree(verts, None, 256, rotate, perm)
        assert not swapped.any()  # no car has coincident vertices
