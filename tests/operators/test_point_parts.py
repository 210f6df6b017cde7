"""One mesh in parts (operators/point_parts.py, sciattn/partial_sums.py): chunked evaluation equals the whole
pass, and two gloo ranks holding parts of the points equal one process, outputs and gradients, for Transolver,
LinearNO, GNOT and ONO (float64, a padded ragged batch, non-uniform weights)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from sciattn.operators import create_operator
from sciattn.operators.point_parts import (
    check_supports,
    chunked_points,
    contiguous_split,
    domain_parallel,
    set_domain_group,
    split_points,
    supporting_operators,
)
from sciattn.partial_sums import ExpSums, add_partial_sums, exp_sums

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "sciattn"))
import _token_checks as tc  # noqa: E402
from _gloo import gloo_group, run_ranks  # noqa: E402

CFGS = {
    "transolver": dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, slice_num=5,
                       mlp_ratio=2),
    "linear_no": dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, key_ratio=5,
                      learn_temperature=True),
    "gnot": dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, n_experts=2),
    "ono": dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, psi_dim=4),
    "funcattn": dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, basis_num=5),
}
N = 49  # 40 real points of sample 0, 20 of sample 1, padded with garbage (NaN features and weights)


def _case():
    x, pos, w = tc.cloud(b=2, n=40)
    xp, posp, wp, mask = tc.pad_cloud(x, pos, w, N - 40)
    mask[1, 20:] = False  # on two ranks (points 0..24 | 25..48), rank 1 holds only padding of sample 1
    target = torch.randn(2, N, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    return xp, posp, wp, mask, target


def _loss(out, target, mask):
    """A sum over the points: each rank's loss is its share of the total."""
    return ((out - target).square() * mask[..., None]).sum()


def flat(grads: dict) -> torch.Tensor:
    """Every parameter gradient in one vector (its largest entry sets the scale: a bias whose gradient cancels
    to 1e-7 of the others carries that cancellation's rounding)."""
    return torch.cat([g.reshape(-1) for g in grads.values()])


def _run(model, x, pos, w, mask, target):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    model.zero_grad(set_to_none=True)
    out = model(x, pos, w, mask)
    _loss(out, target, mask).backward()
    return {"out": out.detach(), "x": x.grad, "weights": w.grad,
            "params": {k: p.grad.clone() for k, p in model.named_parameters()}}


def rel(a, b) -> float:
    """``max|a - b| / max|b|`` (``max|a|`` where ``b`` is zero: a clamped temperature has no gradient)."""
    scale = float(b.abs().max())
    return float((a - b).abs().max()) / (scale if scale > 0 else 1.0)


# ----------------------------------------------------------------------------- chunks
@pytest.mark.parametrize("name", list(CFGS))
def test_chunked_evaluation_equals_the_whole_pass(name):
    model = tc.build(name, CFGS[name])
    xp, posp, wp, mask, target = _case()
    grid = torch.randn(2, 2, 7, 6, dtype=torch.float64)
    with torch.no_grad():
        ref, ref_grid = model(xp, posp, wp, mask), model(grid)
        for chunk in (1, 6, 25, 48, 49, 1000):  # chunk 1: chunks of only padding; >= N: one chunk
            with chunked_points(model, chunk):
                assert model.point_plan.chunk == chunk
                assert rel(model(xp, posp, wp, mask), ref) <= 1e-12, chunk
                assert rel(model(grid), ref_grid) <= 1e-12, chunk
        assert model.point_plan.chunk is None  # restored
        # a different sum would show: dropping one chunk's sums changes the output
        assert rel(model(xp[:, :30], posp[:, :30], wp[:, :30], mask[:, :30]), ref[:, :30]) > 1e-6
    whole = _run(model, xp, posp, wp, mask, target)  # gradients through the chunked pass are the same too
    with chunked_points(model, 8):
        chunked = _run(model, xp, posp, wp, mask, target)
    for key in ("out", "x", "weights"):
        assert rel(chunked[key], whole[key]) <= 1e-11, key
    assert rel(flat(chunked["params"]), flat(whole["params"])) <= 1e-11


def test_exp_sums_of_parts_combine_to_the_weighted_softmax():
    g = torch.Generator().manual_seed(0)
    s = 30 * torch.randn(3, 20, 4, generator=g, dtype=torch.float64)  # large logits: the shifts matter
    w = torch.rand(3, 20, 1, generator=g, dtype=torch.float64)
    w[0, :10] = 0  # the first part of sample 0 has no mass
    v = torch.randn(3, 20, 5, generator=g, dtype=torch.float64)
    p = w * torch.exp(s - s.amax(1, keepdim=True))
    ref = (p / p.sum(1, keepdim=True)).transpose(1, 2) @ v
    total = None
    for part in (slice(0, 10), slice(10, 13), slice(13, 20)):
        total = add_partial_sums(total, (exp_sums(s[:, part], w[:, part], v[:, part]),))
    (got,) = total
    assert isinstance(got, ExpSums) and rel(got.mean, ref) <= 1e-13
    assert torch.isinf(exp_sums(s[:, :10], w[:, :10], v[:, :10]).shift[0]).all()


# ----------------------------------------------------------------------------- ranks
def _relative_l2_run(model, s: slice, group) -> dict:
    """The training loss on points ``s`` (the relative L2 error of each cloud, its two sums over the points
    all-reduced over ``group``) and its gradient with respect to the input."""
    from sciattn.train.losses import relative_l2_points

    xp, posp, wp, mask, target = _case()
    x = xp[:, s].clone().requires_grad_()
    with domain_parallel(model, group) if group is not None else chunked_points(model, None):
        out = model(x, posp[:, s], wp[:, s], mask[:, s])
    loss = relative_l2_points(out, target[:, s], mask[:, s], wp[:, s], group=group)
    loss.backward()
    return {"loss": loss.detach(), "x": x.grad}


def _worker(rank: int, world: int, port: int, results: dict) -> None:
    torch.set_num_threads(1)
    with gloo_group(rank, world, port):
        out = {}
        xp, posp, wp, mask, target = _case()
        s = contiguous_split(N, rank, world)
        for name, cfg in CFGS.items():
            model = tc.build(name, cfg)
            with domain_parallel(model, dist.group.WORLD):
                out[name] = _run(model, xp[:, s], posp[:, s], wp[:, s], mask[:, s], target[:, s])
                with chunked_points(model, 6), torch.no_grad():
                    out[name]["chunked"] = model(xp[:, s], posp[:, s], wp[:, s], mask[:, s])
        out["loss"] = _relative_l2_run(tc.build("transolver", CFGS["transolver"]), s, dist.group.WORLD)
        bad = xp[:, s].clone()
        if rank == 1:
            bad[0, 2, 0] = float("nan")  # a real point of sample 0 on rank 1 only
        model = tc.build("transolver", CFGS["transolver"])
        try:
            with domain_parallel(model, dist.group.WORLD):
                model(bad, posp[:, s], wp[:, s], mask[:, s])
            out["bad"] = "no error"
        except ValueError as err:
            out["bad"] = str(err)
        results[rank] = out


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_two_gloo_ranks_equal_one_process_outputs_and_gradients():
    """Outputs and input gradients of the parts concatenated, parameter gradients summed over the ranks, against
    one process on the whole batch: within 1e-10 relative (measured ~1e-15)."""
    results = run_ranks("test_point_parts", "_worker", where=str(HERE))
    xp, posp, wp, mask, target = _case()
    errors = {}
    for name, cfg in CFGS.items():
        ref = _run(tc.build(name, cfg), xp, posp, wp, mask, target)
        parts = [results[r][name] for r in (0, 1)]
        ref["chunked"] = ref["out"]
        errors[name] = {key: rel(torch.cat([p[key] for p in parts], dim=1), ref[key])
                        for key in ("out", "chunked", "x", "weights")}
        errors[name]["params"] = rel(flat(parts[0]["params"]) + flat(parts[1]["params"]), flat(ref["params"]))
        assert ref["out"].abs().max() > 0.05
    print("max relative error, 2 gloo ranks against one process:", errors)
    for name, e in errors.items():
        assert max(e.values()) <= 1e-10, (name, e)
    # the loss of sciattn train (relative L2 per cloud, sums all-reduced): every rank holds the whole clouds' loss;
    # each backpropagates it, the all-reduce's backward adds the 2 equal cotangents: 2x the one-process gradient
    ref = _relative_l2_run(tc.build("transolver", CFGS["transolver"]), slice(0, N), None)
    for r in (0, 1):
        assert rel(results[r]["loss"]["loss"], ref["loss"]) <= 1e-13
    grad = torch.cat([results[r]["loss"]["x"] for r in (0, 1)], dim=1)
    assert rel(grad, 2 * ref["x"]) <= 1e-10
    assert results[1]["bad"].startswith("x: expected finite values"), results[1]["bad"]
    assert results[0]["bad"].startswith("x: the input of another rank of the domain-parallel group"), results[0]["bad"]


# ----------------------------------------------------------------------------- the protocol
def test_operators_without_the_capability_are_refused_by_name():
    assert supporting_operators() == ["bsa_transformer", "erwin", "funcattn", "gnot", "linear_no", "ono", "transolver"]
    oformer = create_operator("oformer", in_channels=1, out_channels=1, spatial_dims=2)
    with pytest.raises(ValueError, match=r"train.domain_parallel: operator 'oformer' \(OFormer\) does not run "
                                         r"domain-parallel .*operators that do: \['bsa_transformer', 'erwin', 'funcattn', 'gnot', "
                                         r"'linear_no', 'ono', 'transolver'\]"):
        check_supports(oformer, key="train.domain_parallel")
    erwin = create_operator("erwin", in_channels=1, out_channels=1, spatial_dims=2)
    with pytest.raises(ValueError, match=r"chunk_points: operator 'erwin' \(Erwin\) does not evaluate in chunks"):
        with chunked_points(erwin, 100):
            pass
    with chunked_points(erwin, None):  # no chunks: any operator
        pass
    model = tc.build("transolver", CFGS["transolver"])
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="chunk_points: expected a positive int"):
            with chunked_points(model, bad):
                pass
    with pytest.raises(ValueError, match="group: expected a process group of an initialised torch.distributed"):
        set_domain_group(model, object())


def test_split_points_is_contiguous_and_covers_every_point_once():
    batch = {"x": torch.arange(2 * 11).reshape(2, 11, 1), "pos": torch.zeros(2, 11, 2), "other": torch.ones(3)}
    parts = [split_points(batch, r, 3) for r in range(3)]
    assert [p["x"].shape[1] for p in parts] == [4, 4, 3]
    assert torch.equal(torch.cat([p["x"] for p in parts], 1), batch["x"]) and parts[1]["other"] is batch["other"]
    with pytest.raises(ValueError, match=r"part: expected an int in \[0, 3\), got 3"):
        contiguous_split(11, 3, 3)
    with pytest.raises(ValueError, match="parts: expected at most one part per point"):
        contiguous_split(2, 0, 3)


def test_half_precision_softmax_sums_in_chunks():
    """A bfloat16 LinearNO (softmax over the points in ExpSums: exponentials and sums in float32, the mean in the
    values' dtype) runs whole and in chunks, within bfloat16 round-off of float32."""
    model = create_operator("linear_no", in_channels=1, out_channels=1, spatial_dims=2, width=16, n_layers=2,
                            n_heads=2, key_ratio=4)
    g = torch.Generator().manual_seed(0)
    x, pos = torch.randn(2, 300, 1, generator=g), torch.rand(2, 300, 2, generator=g)
    with torch.no_grad():
        ref = model(x, pos)
        half = model.to(torch.bfloat16)
        whole = half(x.bfloat16(), pos.bfloat16())
        with chunked_points(half, 64):
            chunked = half(x.bfloat16(), pos.bfloat16())
    assert whole.dtype == chunked.dtype == torch.bfloat16
    assert rel(whole.float(), ref) < 5e-2 and rel(chunked.float(), ref) < 5e-2
