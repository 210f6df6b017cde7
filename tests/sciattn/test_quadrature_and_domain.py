"""Quadrature rules and domains: exactness, measures, validation."""

from __future__ import annotations

import math

import pytest
import torch

from sciattn import Grid, PointCloud
from sciattn.quadrature import interval_rule, tensor_rule


@pytest.mark.parametrize("rule", ["uniform", "midpoint", "trapezoid"])
def test_constant_integrates_to_the_measure(rule):
    _, w = tensor_rule((5, 7), ((0.0, 2.0), (-1.0, 0.5)), rule)
    assert math.isclose(float(w.sum()), 3.0, rel_tol=1e-14)


def test_uniform_rule_is_spectrally_accurate_for_periodic_functions():
    x, w = interval_rule(16, 0.0, 1.0, "uniform")
    assert abs(float((w * torch.cos(2 * math.pi * 3 * x) ** 2).sum()) - 0.5) < 1e-14


@pytest.mark.parametrize("rule", ["midpoint", "trapezoid"])
def test_second_order_rules_converge_at_rate_two(rule):
    errs = []
    for n in (16, 32, 64):
        x, w = interval_rule(n + (rule == "trapezoid"), 0.0, 1.0, rule)
        errs.append(abs(float((w * torch.exp(x)).sum()) - (math.e - 1)))
    for a, b in zip(errs, errs[1:]):
        assert 3.8 < a / b < 4.2


def test_grid_nodes_follow_c_order_and_the_file_layout():
    g = Grid((4, 2))
    nodes, w = g.nodes_and_weights(torch.float64)
    assert torch.equal(nodes[1], torch.tensor([0.0, 0.5], dtype=torch.float64))
    assert torch.equal(nodes[2], torch.tensor([0.25, 0.0], dtype=torch.float64))
    assert torch.allclose(w, torch.full((8,), 1 / 8, dtype=torch.float64))
    field = g.coordinate_channels(3, torch.float64)
    assert field.shape == (3, 2, 4, 2)
    assert torch.equal(field[0].flatten(1).T, nodes)


def test_grid_and_cloud_errors_name_the_argument():
    with pytest.raises(ValueError, match="shape: expected"):
        Grid((0, 4))
    with pytest.raises(ValueError, match="bounds: expected 2"):
        Grid((4, 4), bounds=((0, 1),))
    with pytest.raises(ValueError, match="rule: expected one of"):
        Grid((4,), rule="simpson")
    with pytest.raises(ValueError, match="positions: expected at least one point"):
        PointCloud(torch.zeros(1, 0, 2))
    with pytest.raises(ValueError, match="positions: expected finite values"):
        PointCloud(torch.tensor([[[0.0, float("nan")]]]))
    with pytest.raises(ValueError, match=r"weights: expected shape \(1, 3\)"):
        PointCloud(torch.zeros(1, 3, 2), weights=torch.ones(1, 4))
    with pytest.raises(ValueError, match="mask: expected at least one real point"):
        PointCloud(torch.zeros(1, 3, 2), mask=torch.zeros(1, 3, dtype=torch.bool))


def test_cloud_weights_ignore_nan_padding_and_sum_to_one():
    pos = torch.rand(2, 5, 3)
    pos[0, 3:] = float("nan")
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    w = PointCloud(pos, weights=torch.full((2, 5), 2.0), mask=mask).quadrature_weights()
    torch.testing.assert_close(w.sum(1), torch.ones(2))
    assert torch.equal(w[0, 3:], torch.zeros(2))


def test_resample_field_restricts_nested_grids_exactly():
    from sciattn.domain import resample_field

    f = torch.randn(2, 3, 64, 48)
    assert torch.equal(resample_field(f, (16, 12)), f[..., ::4, ::4])
    f1 = torch.randn(1, 2, 40)
    assert torch.equal(resample_field(f1, (10,)), f1[..., ::4])


def test_resample_field_is_exact_for_linear_fields_on_unnested_grids():
    from sciattn.domain import Grid, resample_field

    def linear(shape):
        c = Grid(shape).coordinate_channels(1, torch.float64)
        return (1.0 + 2.0 * c[:, :1] - 3.0 * c[:, 1:]).to(torch.float64)

    got = resample_field(linear((50, 40)), (30, 20))  # 30 and 20 nodes lie inside the 50 x 40 hull
    torch.testing.assert_close(got, linear((30, 20)))


def test_resample_field_errors():
    from sciattn.domain import resample_field

    with pytest.raises(ValueError, match="field: expected a 4-D tensor"):
        resample_field(torch.randn(3, 8, 8), (4, 4))
    with pytest.raises(ValueError, match="at least 2 nodes"):
        resample_field(torch.randn(1, 1, 1, 8), (3, 3))


def test_fourier_resample_is_exact_for_band_limited_fields():
    from sciattn.domain import Grid, fourier_resample

    def field(shape):
        c = Grid(shape).coordinate_channels(1, torch.float64)
        x, y = c[:, :1], c[:, 1:]
        return torch.sin(2 * math.pi * 3 * x) * torch.cos(2 * math.pi * 2 * y) + 0.3 * torch.cos(
            2 * math.pi * (5 * x - 4 * y)) + 1

    torch.testing.assert_close(fourier_resample(field((16, 16)), (40, 36)), field((40, 36)))
    torch.testing.assert_close(fourier_resample(field((48, 48)), (16, 16)), field((16, 16)))
