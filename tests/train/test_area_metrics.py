"""Tests of the area-weighted sphere errors and the rollout helper in sciattn.train.area_metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sciattn.domain import SphereGrid
from sciattn.train.area_metrics import area_weighted_l1, area_weighted_l2, rollout_errors

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see tests/conftest.py


def _weights(nlat: int, nlon: int, grid: str) -> torch.Tensor:
    return SphereGrid(nlat, nlon, grid).quadrature_weights()


def test_error_confined_to_the_poles_gets_its_small_area_weight():
    # Equiangular 17 x 8: Clenshaw–Curtis on 16 intervals gives each pole row the weight 1/(16² - 1) = 1/255
    # of ∫_{-1}^{1} d(cos θ) (total 2), so the two pole rows hold 2/255 of the weight, 1/255 of the area.
    q = _weights(17, 8, "equiangular")
    target = torch.ones(1, 1, 17, 8, dtype=F64)
    pred = target.clone()
    pred[..., 0, :] += 1.0
    pred[..., -1, :] += 1.0
    for relative in (True, False):  # |target| = 1 everywhere: absolute and relative coincide
        assert float(area_weighted_l2(pred, target, q, relative)) == pytest.approx(1 / math.sqrt(255), rel=1e-12)
        assert float(area_weighted_l1(pred, target, q, relative)) == pytest.approx(1 / 255, rel=1e-12)
    # a plain grid-point mean would count the poles as 2/17 of the sphere
    flat = torch.ones(17, 8, dtype=F64)
    assert float(area_weighted_l1(pred, target, flat)) == pytest.approx(2 / 17, rel=1e-14)


def test_analytic_fields_on_the_gauss_grid():
    # target = cos θ: ∫ cos² θ dA / 4π = 1/3; Gauss quadrature is exact for these polynomials in cos θ
    q = _weights(8, 16, "legendre-gauss")
    theta = SphereGrid(8, 16, "legendre-gauss").colatitudes()[:, None].expand(8, 16)
    t = torch.stack([torch.cos(theta), torch.cos(theta) ** 2])[None]  # (1, 2, 8, 16)
    zero = torch.zeros_like(t)
    l2 = area_weighted_l2(zero, t, q, relative=False, reduction="channel")
    torch.testing.assert_close(l2, torch.tensor([math.sqrt(1 / 3), math.sqrt(1 / 5)], dtype=F64), atol=1e-14, rtol=0)
    assert float(area_weighted_l1(zero[:, 1:], t[:, 1:], q, relative=False)) == pytest.approx(1 / 3, rel=1e-14)
    torch.testing.assert_close(area_weighted_l2(zero, t, q, reduction="channel"), torch.ones(2, dtype=F64))
    torch.testing.assert_close(area_weighted_l1(2 * t, t, q, reduction="channel"), torch.ones(2, dtype=F64))


def test_reductions_and_weight_scale_invariance():
    q = _weights(6, 12, "equiangular")
    g = torch.Generator().manual_seed(0)
    target = torch.randn(2, 3, 6, 12, dtype=F64, generator=g)
    s = torch.tensor([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]], dtype=F64)
    pred = target * (1 + s[..., None, None])  # relative error |s_bc| exactly, in L2 and L1
    for fn in (area_weighted_l2, area_weighted_l1):
        torch.testing.assert_close(fn(pred, target, q, reduction="none"), s.abs(), atol=1e-14, rtol=0)
        torch.testing.assert_close(fn(pred, target, q, reduction="channel"), s.abs().mean(0), atol=1e-14, rtol=0)
        assert float(fn(pred, target, q)) == pytest.approx(float(s.abs().mean()), abs=1e-14)
        torch.testing.assert_close(fn(pred, target, 7.5 * q, relative=False), fn(pred, target, q, relative=False))
    assert area_weighted_l2(pred.float(), target.float(), q).dtype == torch.float32


def test_metric_input_errors():
    q = _weights(4, 8, "equiangular")
    x = torch.zeros(1, 1, 4, 8, dtype=F64)
    with pytest.raises(ValueError, match=r"weights: expected shape \(4, 8\)"):
        area_weighted_l2(x, x, q.T)
    with pytest.raises(ValueError, match="weights: expected non-negative"):
        area_weighted_l1(x, x, -q)
    with pytest.raises(ValueError, match="pred, target: expected equal shapes"):
        area_weighted_l2(x, x[..., :3, :], q)
    with pytest.raises(ValueError, match="reduction: expected one of"):
        area_weighted_l2(x, x, q, reduction="sum")
    with pytest.raises(ValueError, match="pred: expected a 4-D tensor"):
        area_weighted_l2(x[0], x[0], q)


def test_rollout_of_the_exact_solver_is_stable_and_exact():
    from sciattn.pde_data.shallow_water import ShallowWaterSolver

    s = ShallowWaterSolver(8, 16, "legendre-gauss", dt=900.0)
    spec = torch.stack([s.random_initial_condition(np.random.default_rng(i)) for i in range(2)])
    states = [s.to_grid(spec)]
    for _ in range(3):
        spec = s.step(spec, 2)
        states.append(s.to_grid(spec))
    traj = torch.stack(states, 1)  # (2, 4, 3, 8, 16)
    q = SphereGrid(8, 16, "legendre-gauss").quadrature_weights()
    res = rollout_errors(lambda x: s.integrate(x, 2), traj[:, 0], traj[:, 1:], q)
    assert res.errors.shape == (3, 3) and res.mean_errors.shape == (3,)
    assert float(res.errors.max()) < 1e-10 and res.stable and res.first_failure is None
    assert res.verdict["verdict"] == "stable"
    # persistence: error k is the distance from the initial state to target k, computed independently
    res = rollout_errors(lambda x: x, traj[:, 0], traj[:, 1:], q, metric="l1", relative=False)
    for k in range(3):
        expect = (((traj[:, 0] - traj[:, k + 1]).abs() * q).sum((-2, -1)) / q.sum()).mean(0)
        torch.testing.assert_close(res.errors[k], expect)
    assert bool((res.errors[1:, 1:] > 0).all())


def test_rollout_stability_verdict():
    q = _weights(4, 8, "equiangular")
    x0 = 1.0 + torch.rand(2, 1, 4, 8, dtype=F64)
    targets = x0[:, None].expand(2, 4, 1, 4, 8)
    res = rollout_errors(lambda x: 1.5 * x, x0, targets, q)  # relative error 1.5^(k+1) - 1
    assert res.verdict["verdict"] == "unstable" and "exceeds 1.0 at frame" in res.verdict["reason"]
    torch.testing.assert_close(res.mean_errors, torch.tensor([0.5, 1.25, 2.375, 4.0625], dtype=F64))
    assert not res.stable and res.first_failure == 1 and res.bound == 1.0
    assert rollout_errors(lambda x: 1.5 * x, x0, targets, q, bound=5.0).stable

    calls = []

    def nan_at_third(x):
        calls.append(1)
        return x * float("nan") if len(calls) == 3 else x

    res = rollout_errors(nan_at_third, x0, targets, q)
    assert not res.stable and res.first_failure == 2 and torch.isnan(res.mean_errors[2])
    with pytest.raises(ValueError, match="step_fn: expected to return shape"):
        rollout_errors(lambda x: x[..., :2], x0, targets, q)
    with pytest.raises(ValueError, match="initial_states: expected shape"):
        rollout_errors(lambda x: x, x0[:1], targets, q)
