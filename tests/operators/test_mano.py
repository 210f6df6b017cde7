"""MANO operator: any resolution, global receptive field, physical windows, errors."""

from __future__ import annotations

import pytest
import torch

from sciattn.operators import create_operator


def _model(**kw):
    cfg = dict(in_channels=1, out_channels=1, width=16, n_layers=2, n_heads=2, window=8)
    cfg.update(kw)
    return create_operator("mano", **cfg).eval()


@pytest.mark.parametrize("shape", [(48, 48), (100, 100), (128, 128), (50, 37)])
def test_a_model_built_for_64_runs_unchanged_at_other_sizes(shape):
    model = _model(window_fraction=0.125, window=None)
    with torch.no_grad():
        out = model(torch.randn(1, 1, *shape))
    assert out.shape == (1, 1, *shape) and torch.isfinite(out).all()


def test_receptive_field_is_global():
    model = _model().double()
    x = torch.randn(1, 1, 64, 64, dtype=torch.float64)
    bumped = x.clone()
    bumped[..., 0, 0] += 10.0
    with torch.no_grad():
        delta = (model(bumped) - model(x))[0, 0]
    assert delta[-1, -1].abs() > 1e-8  # the opposite corner feels the perturbation


def test_physical_window_is_fixed_across_resolutions():
    attn = _model(window_fraction=0.125, window=None).blocks[0].attn
    assert attn.window_cells((64, 64)) == (8, 8) and attn.window_cells((256, 256)) == (32, 32)
    assert len(attn.plan((64, 64))) == len(attn.plan((256, 256)))  # same physical hierarchy
    cells = _model().blocks[0].attn  # a window counted in cells instead adds levels
    assert len(cells.plan((256, 256))) == len(cells.plan((64, 64))) + 2


def test_one_dimensional_and_three_dimensional_grids():
    m1 = create_operator("mano", in_channels=2, out_channels=3, spatial_dims=1, width=8, n_layers=1, n_heads=2,
                         window=4)
    assert m1(torch.randn(2, 2, 30)).shape == (2, 3, 30)
    m3 = create_operator("mano", in_channels=1, out_channels=1, spatial_dims=3, width=8, n_layers=1, n_heads=2,
                         window=2)
    assert m3(torch.randn(1, 1, 6, 5, 4)).shape == (1, 1, 6, 5, 4)


def test_bad_inputs_name_the_problem():
    model = _model()
    with pytest.raises(ValueError, match=r"expected a grid of at least window=\(8, 8\) cells per axis"):
        model(torch.randn(1, 1, 4, 4))
    with pytest.raises(ValueError, match=r"x: expected size 1 along axis 1 \(input channels\), got 3"):
        model(torch.randn(1, 3, 16, 16))
    with pytest.raises(ValueError, match="x: expected finite values"):
        model(torch.full((1, 1, 16, 16), float("nan")))
