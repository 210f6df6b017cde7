"""GalerkinTransformer: grid and point-set modes, invariances, errors."""

from __future__ import annotations

import pytest
import torch

from sciattn.operators import create_operator


def _points_model():
    return create_operator("galerkin_transformer", in_channels=3, out_channels=2, spatial_dims=2, d_model=16,
                           n_layers=2, n_heads=2, regressor="pointwise").double()


def test_point_set_permutation_equivariance():
    model = _points_model()
    x, pos = torch.randn(2, 30, 3, dtype=torch.float64), torch.rand(2, 30, 2, dtype=torch.float64)
    w = torch.rand(2, 30, dtype=torch.float64) + 0.1
    perm = torch.randperm(30)
    out = model(x, pos, w)
    torch.testing.assert_close(model(x[:, perm], pos[:, perm], w[:, perm]), out[:, perm])


def test_point_set_padding_invariance_with_mixed_sizes():
    model = _points_model()
    a_x, a_pos = torch.randn(1, 20, 3, dtype=torch.float64), torch.rand(1, 20, 2, dtype=torch.float64)
    b_x, b_pos = torch.randn(1, 7, 3, dtype=torch.float64), torch.rand(1, 7, 2, dtype=torch.float64)
    pad = 13
    x = torch.cat([a_x, torch.cat([b_x, torch.full((1, pad, 3), float("nan"), dtype=torch.float64)], 1)])
    pos = torch.cat([a_pos, torch.cat([b_pos, torch.full((1, pad, 2), float("nan"), dtype=torch.float64)], 1)])
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[1, 7:] = False
    out = model(x, pos, mask=mask)
    torch.testing.assert_close(out[:1], model(a_x, a_pos))
    torch.testing.assert_close(out[1:, :7], model(b_x, b_pos))
    assert torch.equal(out[1, 7:], torch.zeros(pad, 2, dtype=torch.float64))


def test_grid_mode_equals_point_mode_on_grid_nodes():
    """A grid is a point set with the grid's nodes and weights: both paths agree (pointwise head)."""
    model = create_operator("galerkin_transformer", in_channels=1, out_channels=1, spatial_dims=2, d_model=16,
                            n_layers=2, n_heads=2, regressor="pointwise").double()
    x = torch.randn(2, 1, 6, 5, dtype=torch.float64)
    from sciattn import Grid

    nodes, w = Grid((6, 5)).nodes_and_weights(torch.float64)
    grid_out = model(x)
    pts_out = model(x.flatten(2).transpose(1, 2), nodes.expand(2, -1, -1), w.expand(2, -1))
    torch.testing.assert_close(grid_out.flatten(2).transpose(1, 2), pts_out)


def test_one_dimensional_grids():
    model = create_operator("galerkin_transformer", in_channels=1, out_channels=1, spatial_dims=1, d_model=16,
                            n_layers=1, n_heads=2, n_modes=6, regressor_width=8)
    assert model(torch.randn(3, 1, 32)).shape == (3, 1, 32)
    assert model(torch.randn(1, 1, 128)).shape == (1, 1, 128)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda m: m(torch.randn(2, 16, 16)), ValueError, r"x: expected a 4-D tensor \(B, C_in=1, 2 spatial axes\)"),
        (lambda m: m(torch.randn(2, 3, 8, 8)), ValueError, r"x: expected size 1 along axis 1 \(input channels\), got 3"),
        (lambda m: m(torch.full((1, 1, 8, 8), float("nan"))), ValueError, "x: expected finite values, got 64 NaN"),
        (lambda m: m(torch.full((1, 1, 8, 8), float("inf"))), ValueError, "0 NaN and 64 Inf"),
    ],
)
def test_bad_grid_input(call, exc, match):
    model = create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=16, n_layers=1,
                            n_heads=2, regressor_width=8, n_modes=4)
    with pytest.raises(exc, match=match):
        call(model)


def test_bad_point_input():
    model = _points_model().float()
    with pytest.raises(ValueError, match="positions: expected at least one point"):
        model(torch.randn(1, 0, 3), torch.rand(1, 0, 2))
    with pytest.raises(ValueError, match=r"weights: expected shape \(1, 5\)"):
        model(torch.randn(1, 5, 3), torch.rand(1, 5, 2), torch.rand(1, 4))
    with pytest.raises(ValueError, match="pos: expected 2 coordinates per point, got 3"):
        model(torch.randn(1, 5, 3), torch.rand(1, 5, 3))
    with pytest.raises(ValueError, match="x: expected finite values"):
        model(torch.full((1, 5, 3), float("nan")), torch.rand(1, 5, 2))
    spectral = create_operator("galerkin_transformer", in_channels=3, out_channels=1, d_model=16, n_layers=1,
                               n_heads=2)
    with pytest.raises(ValueError, match="regressor='pointwise'"):
        spectral(torch.randn(1, 5, 3), torch.rand(1, 5, 2))


@pytest.mark.parametrize("conv_blocks", [0, 1])
def test_latent_grid_model_restricts_to_its_coarse_prediction(conv_blocks):
    """With a latent grid, a finer input gives a prediction whose values at the coarse nodes equal
    the coarse prediction, and in between are the Fourier interpolant of the band-limited output."""
    model = create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=16, n_layers=2,
                            n_heads=2, n_modes=6, regressor_width=8, latent_resolution=16,
                            conv_blocks=conv_blocks).eval()
    fine = torch.randn(2, 1, 64, 64)
    with torch.no_grad():
        out_fine, out_coarse = model(fine), model(fine[..., ::4, ::4])
    assert out_fine.shape == (2, 1, 64, 64)
    torch.testing.assert_close(out_fine[..., ::4, ::4], out_coarse, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(out_fine[..., 1::4, 1::4], out_coarse)  # genuinely new values in between
    with torch.no_grad():
        assert model(torch.randn(1, 1, 50, 30)).shape == (1, 1, 50, 30)


def test_latent_grid_errors():
    with pytest.raises(ValueError, match="conv_blocks: requires latent_resolution"):
        create_operator("galerkin_transformer", in_channels=1, out_channels=1, conv_blocks=2)
    with pytest.raises(ValueError, match="latent_resolution: requires regressor='spectral'"):
        create_operator("galerkin_transformer", in_channels=1, out_channels=1, regressor="pointwise",
                        latent_resolution=16)
    with pytest.raises(ValueError, match=r"latent_resolution: expected an int >= 2 or 2 such ints, got \[16\]"):
        create_operator("galerkin_transformer", in_channels=1, out_channels=1, latent_resolution=[16])


def test_band_limited_output_has_no_grid_scale_jumps():
    """Without the pointwise bypass, the last block's field has at most n_modes Fourier modes,
    whatever jumps the input has (checked with the activation and head removed)."""
    model = create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=16, n_layers=1,
                            n_heads=2, n_modes=4, regressor_width=8, band_limited_output=True).eval()
    model.regressor.head = torch.nn.Identity()
    model.regressor.act = torch.nn.Identity()
    x = (torch.rand(1, 1, 32, 32) > 0.5).float()
    with torch.no_grad():
        spectrum = torch.fft.rfft2(model(x)).abs()
    kept = torch.zeros_like(spectrum, dtype=torch.bool)
    # 4 modes along axis 0 (-2..1, and +2 by Hermitian symmetry of the k1 = 0 column), 3 along the rfft axis
    kept[..., :3, :3] = kept[..., -2:, :3] = True
    assert spectrum[~kept].max() < 1e-5 * spectrum[kept].max()
    # The same weights plus the last block's pointwise bypass (which a band-limited model does not
    # build): grid-scale content appears.
    bypass = create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=16, n_layers=1,
                             n_heads=2, n_modes=4, regressor_width=8).eval()
    bypass.regressor.head = torch.nn.Identity()
    bypass.regressor.act = torch.nn.Identity()
    missing, unexpected = bypass.load_state_dict(model.state_dict(), strict=False)
    assert missing == ["regressor.skips.1.weight", "regressor.skips.1.bias"] and unexpected == []
    with torch.no_grad():
        assert torch.fft.rfft2(bypass(x)).abs()[~kept].max() > 1e-3 * spectrum[kept].max()


def test_latent_grid_output_is_the_trigonometric_interpolant():
    """Between the coarse nodes, the fine prediction is the band-limited interpolant: no aliased
    high frequencies (the check that caught neuraloperator's output_shape misplacing modes)."""
    model = create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=16, n_layers=1,
                            n_heads=2, n_modes=6, regressor_width=8, latent_resolution=16).eval()
    model.regressor.head = torch.nn.Identity()
    model.regressor.act = torch.nn.Identity()
    with torch.no_grad():
        fine = model(torch.randn(1, 1, 64, 64))
    spectrum = torch.fft.rfft2(fine[0, 0]).abs()
    assert spectrum[8:-8].max() < 1e-5 * spectrum.max() and spectrum[:, 8:].max() < 1e-5 * spectrum.max()
