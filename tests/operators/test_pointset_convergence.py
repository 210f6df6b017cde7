"""Registry contract for point-set operators: refining the sampling makes the output converge.

Generated from the registry (every operator with ``operator_kind(name) == "points"``), at its default
configuration and, for operators with ``ball_modes``, in every one of them, at initialisation (seed 1):
a smooth two-channel field on ``[0, 1]²`` (``benchmarks/pointcloud_refinement.py``) is sampled at
4,096 i.i.d. uniform points, and the 256- and 1,024-point sets are its first points (nested). The
figure is the relative L2 difference at the shared points from the 4,096-point output.

* Modes an operator lists in ``convergent_ball_modes`` (Erwin's multiscale balls, its default, and its physical
  balls) must converge at
  first order in the point spacing ``h ∝ n^{-1/2}``: 4× the points halve ``h``, so ``e_1024 <= 0.6 ·
  e_256`` (0.5 is first order; nested Monte-Carlo samples measured against the finest set give
  ``√((1/1024 - 1/4096) / (1/256 - 1/4096)) ≈ 0.45``). The 5% bound is asserted at the issue's sizes,
  ``e_4096 <= 5%`` from 16,384 points (and the ratio again), in the ``slow`` test (about 15 s); at these
  small sets the difference at 1,024 points is about 8% (printed), above 5%.
* Token operators listed in ``TOKEN_POINT_OPERATORS`` (uniform weights on i.i.d. points: a Monte-Carlo rule) are
  held to the same ratio at their defaults.
* Every other mode (the published point-count balls, which shrink as points are added, and BSA's
  physical mode, whose top-k selection is discontinuous) has its figures printed
  (``pytest -rP`` shows them) and checked to be finite: reported, not claimed.

The 16,384-point figures of the issue are the rows of ``benchmarks/results/pointcloud_refinement.jsonl``
(``python -m benchmarks table pointcloud_refinement``).
"""

from __future__ import annotations

import math

import pytest
import torch

from sciattn.operators import create_operator, list_operators
from sciattn.operators.registry import operator_class, operator_kind

SIZES = (256, 1024, 4096)
ISSUE_SIZES = (1024, 4096, 16384)
POINT_OPERATORS = [n for n in list_operators() if operator_kind(n) == "points"]
# token operators (input_kind "grid") that also take point sets, held to the first-order claim here
TOKEN_POINT_OPERATORS = ["funcattn"]


def _field(p: torch.Tensor) -> torch.Tensor:
    x, y = p[..., 0], p[..., 1]
    return torch.stack([torch.sin(2 * math.pi * x) * torch.cos(math.pi * y),
                        torch.exp(-4 * ((x - 0.4) ** 2 + (y - 0.6) ** 2))], dim=-1)


def _cases():
    for name in POINT_OPERATORS + TOKEN_POINT_OPERATORS:
        modes = (None, *getattr(operator_class(name), "ball_modes", ()))  # the default, then every mode
        for mode in modes:
            yield pytest.param(name, mode, id=f"{name}-{mode or 'default'}")


def refinement_errors(name: str, mode: str | None, sizes=SIZES) -> list[float]:
    pts = torch.rand(1, sizes[-1], 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64).float()
    torch.manual_seed(1)
    extra = {} if mode is None else {"ball_mode": mode}
    model = create_operator(name, in_channels=2, out_channels=1, spatial_dims=2, **extra).eval()
    with torch.no_grad():
        outs = [model(_field(pts[:, :n]), pts[:, :n]) for n in sizes]
    ref = outs[-1]
    return [float((o - ref[:, : o.shape[1]]).norm() / ref[:, : o.shape[1]].norm()) for o in outs[:-1]]


def test_registry_has_point_operators():
    assert {"erwin", "bsa_transformer"} <= set(POINT_OPERATORS)


@pytest.mark.parametrize("name, mode", list(_cases()))
def test_point_refinement(name, mode):
    model_mode = mode if mode is not None else getattr(create_operator(
        name, in_channels=2, out_channels=1, spatial_dims=2), "ball_mode", None)
    claims = model_mode in getattr(operator_class(name), "convergent_ball_modes", ()) or name in TOKEN_POINT_OPERATORS
    e_coarse, e_mid = refinement_errors(name, mode)
    print(f"{name} ({model_mode or 'default'}): e_256 = {e_coarse:.4f}, e_1024 = {e_mid:.4f}, "
          f"ratio = {e_mid / e_coarse:.3f}, {'claims convergence' if claims else 'reported only'}")
    assert math.isfinite(e_coarse) and math.isfinite(e_mid)
    if claims:
        assert e_mid <= 0.6 * e_coarse, f"{name} ({model_mode}): e_1024 = {e_mid:.4f} > 0.6 · e_256 = {e_coarse:.4f}"


def _claimed():
    for name in POINT_OPERATORS:
        for mode in getattr(operator_class(name), "convergent_ball_modes", ()):
            yield pytest.param(name, mode, id=f"{name}-{mode}")


@pytest.mark.slow
@pytest.mark.parametrize("name, mode", list(_claimed()))
def test_point_refinement_at_issue_sizes(name, mode):
    e_coarse, e_mid = refinement_errors(name, mode, ISSUE_SIZES)
    print(f"{name} ({mode}): e_1024 = {e_coarse:.4f}, e_4096 = {e_mid:.4f}, ratio = {e_mid / e_coarse:.3f}")
    assert e_mid <= 0.6 * e_coarse, f"{name} ({mode}): e_4096 = {e_mid:.4f} > 0.6 · e_1024 = {e_coarse:.4f}"
    assert e_mid <= 0.05, f"{name} ({mode}): e_4096 = {e_mid:.4f} > 5%"
