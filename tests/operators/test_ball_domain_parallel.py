"""Erwin and BSA domain-parallel by whole balls (operators/_domain_geometry.py, operators/_domain_slots.py): two gloo
ranks, each holding the part of every cloud that ``model.split_points`` gives it, equal one process on the whole
batch — outputs, the gradients with respect to the features, the quadrature weights and the positions, and the
parameter gradients summed over the ranks (float64, a padded ragged batch of three clouds, non-uniform weights,
rotated blocks at every level) — at the default modes (Erwin multiscale, BSA point counts with a window), and the
refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from sciattn.operators import create_operator
from sciattn.operators.point_parts import check_supports, contiguous_split, domain_parallel, split_points

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "sciattn"))
from _gloo import gloo_group, run_ranks  # noqa: E402

CFGS = {
    # small widths; the modes, lengths and rotations of the defaults (two levels, a rotated block on each)
    "erwin": ("erwin", dict(in_channels=2, out_channels=3, spatial_dims=3, c_hidden=(8, 16), n_heads=2,
                            mlp_ratio=2, near_points=16)),
    "erwin_defaults": ("erwin", dict(in_channels=2, out_channels=3, spatial_dims=3)),
    "erwin_2d": ("erwin", dict(in_channels=2, out_channels=3, spatial_dims=2, c_hidden=(8, 16, 16), n_heads=2,
                               mlp_ratio=2, near_points=16, ball_diameters=[0.2, 0.4, 0.8], pool_diameters=[0.1, 0.2],
                               enc_depths=(2, 2, 2), dec_depths=(2, 2))),
    "bsa": ("bsa_transformer", dict(in_channels=2, out_channels=3, spatial_dims=3, width=8, depth=2, n_heads=2,
                                    mlp_ratio=2, ball_size=8, block_size=2, window=32, top_k=2)),
    "bsa_window_4096": ("bsa_transformer", dict(in_channels=2, out_channels=3, spatial_dims=3, width=8, depth=2,
                                                n_heads=2, mlp_ratio=2)),  # the default window: 2 windows of 4096
}
SIZES = {"bsa_window_4096": (5000, 3000, 30)}


def _case(name: str):
    """Three clouds: a unit cube, an anisotropic box padded with garbage, and 30 points in one small cluster (one
    unit: one rank holds all of it, the other none)."""
    n0, n1, n2 = SIZES.get(name, (400, 300, 30))
    d = CFGS[name][1]["spatial_dims"]
    g = torch.Generator().manual_seed(0)
    pos = torch.rand(3, n0, d, generator=g, dtype=torch.float64)
    pos[1] = pos[1] * torch.tensor([2.0, 0.7, 1.0][:d], dtype=torch.float64)
    pos[2] = 0.3 + 0.05 * pos[2]
    x = torch.randn(3, n0, 2, generator=g, dtype=torch.float64)
    w = torch.rand(3, n0, generator=g, dtype=torch.float64) + 0.1
    mask = torch.ones(3, n0, dtype=torch.bool)
    mask[1, n1:] = False
    mask[2, n2:] = False
    x[~mask], w[~mask] = float("nan"), float("nan")
    target = torch.randn(3, n0, 3, generator=g, dtype=torch.float64)
    return {"x": x, "pos": pos, "weights": w, "mask": mask, "y": target}


def _build(name: str):
    operator, cfg = CFGS[name]
    torch.manual_seed(0)
    return create_operator(operator, **cfg).double()


def _run(model, batch) -> dict:
    """Output and gradients of ``Σ_real |out - y|²`` (each rank's loss is its share of the total)."""
    x, w, pos = (batch[k].clone().requires_grad_() for k in ("x", "weights", "pos"))
    model.zero_grad(set_to_none=True)
    out = model(x, pos, mask=batch["mask"], weights=w)
    torch.where(batch["mask"][..., None], (out - batch["y"]).square(), 0).sum().backward()
    return {"out": out.detach(), "x": x.grad, "weights": w.grad, "pos": pos.grad,
            "params": torch.cat([p.grad.reshape(-1) for p in model.parameters()])}


FAST = ("erwin", "bsa")  # the default suite; the rest (default widths, 2-D with three levels, BSA's 4096-slot
SLOW = tuple(n for n in CFGS if n not in FAST)  # window on 5,000 points) take ~30 s on two loaded cores: slow


def _worker(rank: int, world: int, port: int, results: dict) -> None:
    _ranks(FAST, rank, world, port, results, checks=True)


def _worker_slow(rank: int, world: int, port: int, results: dict) -> None:
    _ranks(SLOW, rank, world, port, results, checks=False)


def _ranks(names, rank: int, world: int, port: int, results: dict, checks: bool) -> None:
    torch.set_num_threads(1)
    with gloo_group(rank, world, port):
        out = {}
        for name in names:
            model = _build(name)
            whole = _case(name)
            n = whole["x"].shape[1]
            index = torch.arange(n, dtype=torch.float64).expand(3, n)[..., None]
            part = model.split_points({**whole, "y": torch.cat([whole["y"], index], -1)}, rank, world)
            part["y"], index = part["y"][..., :3], part["y"][..., 3].long()
            with domain_parallel(model, dist.group.WORLD):
                got = _run(model, part)
                geo = model.build_trees(part["pos"], part["mask"], part["weights"])
                moved = [lv.rot_exchange.send_rows[1 - rank] for lv in geo.levels if lv.rot_exchange is not None]
                for lv in geo.levels:  # a negative control: the rotated blocks on this rank's slots alone
                    lv.rot_exchange = None
                with torch.no_grad():
                    alone = model(part["x"], part["pos"], mask=part["mask"], weights=part["weights"], trees=geo)
            out[name] = {**got, "index": index, "mask": part["mask"], "moved": moved, "alone": alone}
        if not checks:
            results[rank] = out
            return
        model, whole = _build("erwin"), _case("erwin")
        wrong = split_points(whole, rank, world)  # contiguous runs of the input: not whole cells
        bad = split_points(whole, rank, world) if rank == 0 else model.split_points(whole, rank, world)
        if rank == 1:
            bad["x"][0, 3, 0] = float("nan")
        for key, batch in (("wrong", wrong), ("nan", bad)):
            try:
                with domain_parallel(model, dist.group.WORLD):
                    model(batch["x"], batch["pos"], mask=batch["mask"], weights=batch["weights"])
                out[key] = "no error"
            except ValueError as err:
                out[key] = str(err)
        results[rank] = out


def _scatter_parts(parts: list[dict], key: str, like: torch.Tensor) -> torch.Tensor:
    """Every rank's per-point ``key`` put back at the points' input indices."""
    full = torch.zeros_like(like)
    for p in parts:
        for b in range(like.shape[0]):
            m = p["mask"][b]
            full[b, p["index"][b][m]] = p[key][b][m]
    return full


def rel(a, b) -> float:
    return float((a - b).abs().max()) / float(b.abs().max())


def _compare(results: dict, names) -> None:
    """Within 1e-10 relative: outputs and input gradients of the parts put back at their points, parameter
    gradients summed over the ranks, against one process on the whole padded batch."""
    errors, controls = {}, {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks (two threads on two loaded cores run 10x slower)
    try:
        refs = {name: _run(_build(name), _case(name)) for name in names}
    finally:
        torch.set_num_threads(threads)
    for name in names:
        whole, ref = _case(name), refs[name]
        parts = [results[r][name] for r in (0, 1)]
        real = whole["mask"]
        errors[name] = {key: rel(*(torch.where(real[..., None] if ref[key].dim() == 3 else real, t, 0)
                                   for t in (_scatter_parts(parts, key, ref[key]), ref[key])))
                        for key in ("out", "x", "weights", "pos")}
        errors[name]["params"] = rel(parts[0]["params"] + parts[1]["params"], ref["params"])
        # each real point is held by one rank; the padding rows of the output are those of one process (head(0))
        held = sum(torch.zeros_like(real, dtype=torch.long).scatter_add(1, p["index"], p["mask"].long()) for p in parts)
        assert torch.equal(held, real.long()), name
        assert all(p["mask"][0].sum() > 0 for p in parts), name  # the first cloud is split over both ranks
        assert sorted(int(p["mask"][2].sum()) for p in parts) == [0, 30], name  # the cluster: one rank holds it
        pad = ~parts[0]["mask"]
        assert torch.allclose(parts[0]["out"][pad], _build(name).head.bias.detach().expand_as(parts[0]["out"])[pad])
        # the rotated blocks couple the parts: tokens cross to the other rank at every level, both ways
        n_levels = len(_build(name).c_hidden) if name.startswith("erwin") else 1
        assert all(len(p["moved"]) == n_levels and min(p["moved"]) > 0 for p in parts), (name, [p["moved"] for p in parts])
        controls[name] = rel(*(torch.where(real[..., None], t, 0) for t in (
            _scatter_parts(parts, "alone", ref["out"]), ref["out"])))
        assert controls[name] > 1e-3, name  # the exchange matters
    print("max relative error, 2 gloo ranks against one process:", errors)
    print("output error with the rotated blocks on each rank's slots alone (no exchange):", controls)
    for name, e in errors.items():
        assert max(e.values()) <= 1e-10, (name, e)


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_two_gloo_ranks_equal_one_process_outputs_and_gradients():
    """Small widths at the default modes and lengths (measured ~1e-15), and the errors of a wrong split and of a
    bad input on one rank."""
    results = run_ranks("test_ball_domain_parallel", "_worker", where=str(HERE))
    _compare(results, FAST)
    for r in (0, 1):
        assert results[r]["wrong"].startswith("x: rank 0's points are not a part of whole units of the Erwin layout"), \
            results[r]["wrong"]
    assert results[1]["nan"].startswith("x: expected finite values"), results[1]["nan"]
    assert results[0]["nan"].startswith("x: the input of another rank of the domain-parallel group"), results[0]["nan"]


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_two_gloo_ranks_equal_one_process_at_the_defaults():
    """Erwin at its defaults, a 2-D Erwin of three levels, BSA at its 4096-slot window (measured ~1e-15)."""
    _compare(run_ranks("test_ball_domain_parallel", "_worker_slow", where=str(HERE)), SLOW)


def test_split_points_gives_each_real_point_to_one_rank_in_whole_units():
    for name in ("erwin", "bsa"):
        model, whole = _build(name), _case(name)
        n = whole["x"].shape[1]
        index = torch.arange(n, dtype=torch.float64).expand(3, n)[..., None]
        parts = [model.split_points({**whole, "y": index}, r, 3) for r in range(3)]
        held = torch.zeros(3, n, dtype=torch.long)
        for p in parts:
            idx = p["y"][..., 0].long()
            held.scatter_add_(1, idx, p["mask"].long())
            for b in range(3):  # in input order, with the points' own values
                i = idx[b][p["mask"][b]]
                assert bool((i[1:] > i[:-1]).all())
                assert torch.equal(p["pos"][b][p["mask"][b]], whole["pos"][b, i])
        assert torch.equal(held, whole["mask"].long()), name
        assert all(int(p["mask"][0].sum()) > 60 for p in parts), name  # balanced: each rank a share of cloud 0
    with pytest.raises(ValueError, match=r"part: expected an int in \[0, 2\), got 2"):
        _build("erwin").split_points(_case("erwin"), 2, 2)


def test_modes_that_cannot_split_exactly_are_refused_naming_the_option():
    cases = [
        (dict(ball_mode="physical"), "erwin", r"as configured: ball_mode='physical'; it runs domain-parallel with "
                                              r"ball_mode='multiscale' \(the default\)"),
        (dict(ball_mode="points"), "erwin", r"as configured: ball_mode='points'"),
        (dict(ball_mode="physical"), "bsa_transformer", r"as configured: ball_mode='physical'; its compressed"),
        (dict(window=None), "bsa_transformer", r"as configured: window=None; the compressed and selected branches"),
    ]
    for kw, operator, msg in cases:
        model = create_operator(operator, in_channels=1, out_channels=1, spatial_dims=2, **kw)
        with pytest.raises(ValueError, match=r"train.domain_parallel: operator '" + operator + ".*" + msg):
            check_supports(model, key="train.domain_parallel")
        with pytest.raises(ValueError, match=msg):
            model.split_points(_case("erwin_2d") | {"x": torch.zeros(3, 400, 1)}, 0, 2)
    check_supports(create_operator("erwin", in_channels=1, out_channels=1), key="model")
    check_supports(create_operator("bsa_transformer", in_channels=1, out_channels=1), key="model")
    assert contiguous_split(10, 0, 2) == slice(0, 5)


def test_coarse_cells_that_do_not_hold_the_finer_balls_are_refused():
    """A finer level's balls larger than the coarsest level's: no split is local; the error names ball_diameters."""
    model = create_operator("erwin", in_channels=2, out_channels=3, spatial_dims=3, c_hidden=(8, 8), n_heads=2,
                            ball_diameters=[0.8, 0.2], pool_diameters=[0.05])
    with pytest.raises(ValueError, match=r"ball_diameters: domain-parallel Erwin splits the clouds at the ball cells "
                                         r"of its coarsest level.*level 0's \(ball_diameters\[0\]=0.8\) are not nested"):
        model.split_points(_case("erwin"), 0, 2)
