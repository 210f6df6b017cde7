"""Discretisation convergence of every sphere operator in the registry, at its default configuration.

For each registered operator with ``operator_kind(name) == "sphere"``: built once with its defaults (only the
channels and the construction grid given), at initialisation (seed 0, float64), the same weights are run on a
smooth input, a few low-degree spherical harmonics, sampled on four nested grids. The outputs on the three
coarser grids are compared with the finest one's at their shared nodes:

* operators with a latitude rule (a ``grid`` argument, e.g. ``spherical_transformer``): equiangular grids
  ``nlat = 2^k + 1`` (17, 33, 65 vs 129), ``nlon = 2 (nlat - 1)``, whose nodes ``θ = π i/(nlat-1)``,
  ``λ = 2π j/nlon`` are nested; built at 33 x 64; the error is the relative L2 norm with the coarse grid's
  area weights (:meth:`sciattn.domain.SphereGrid.quadrature_weights`);
* the others treat the grid as an image of pixel centres ``(i + 1/2)/n`` (``planar_transformer``), nested under
  refinement by 3: 8 x 16, 24 x 48, 72 x 144 vs 216 x 432 (the input sampled at ``θ = π y``, ``λ = 2π x``);
  built at 16 x 32; the error is the plain relative L2 norm over the shared pixels.

The protocol (:func:`benchmarks.sphere_resolution.grid_setup`) is shared with the benchmark
``python -m benchmarks run sphere_resolution``, whose table is in docs/fidelity.md.

Required: the error shrinks at least at first order (``e_mid <= 0.6 e_coarse`` for the grids 2 (or 3) times
apart) and is at most 5% at the second-finest grid. Measured (2026-12-02, this commit's defaults):
spherical_transformer 2.3% / 0.45% / 0.17%, planar_transformer 3.5% / 0.26% / 0.028%.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.sphere_resolution import grid_setup, sphere_operators  # the protocol lives in the benchmark
from sciattn.operators import create_operator

SPHERE_OPERATORS = sphere_operators()


@pytest.mark.parametrize("name", SPHERE_OPERATORS)
def test_sphere_operator_converges_under_refinement_at_its_defaults(name):
    build, grids, sample, shared, weights = grid_setup(name)
    torch.manual_seed(0)
    model = create_operator(name, in_channels=2, out_channels=1, nlat=build[0], nlon=build[1]).double().eval()
    with torch.no_grad():
        outs = {n: model(sample(n)) for n in grids}
    ref = outs[grids[-1]]
    assert torch.isfinite(ref).all() and ref.abs().max() > 1e-3  # not a vanishing output
    errors = []
    for n in grids[:-1]:
        r, w = shared(ref, n), weights(n)
        assert r.shape == outs[n].shape
        errors.append(float((((outs[n] - r) ** 2 * w).sum() / (r ** 2 * w).sum()).sqrt()))
    assert errors[1] <= 0.6 * errors[0] and errors[2] <= 0.6 * errors[1], errors  # at least first order
    assert errors[2] <= 0.05, errors  # at most 5% at the second-finest grid
    assert errors[0] > 1e-6, errors  # the grids really differ (the test can fail)


def test_every_sphere_operator_is_covered():
    assert {"spherical_transformer", "planar_transformer"} <= set(SPHERE_OPERATORS)
