"""CoDA-NO operator: variable equivariance, variable-specific encodings, new variables, masked
pretraining, 1-D/2-D/3-D grids and errors."""

from __future__ import annotations

import json

import pytest
import torch

from sciattn.operators import create_operator
from sciattn.operators.codano import CoDANO  # registers "codano"


def _model(**kw):
    cfg = dict(variables=["u", "v", "p"], width=8, n_layers=2, n_heads=2, n_modes=4, pos_modes=2)
    cfg.update(kw)
    return create_operator("codano", **cfg)


def test_permuting_variables_and_their_names_permutes_the_output():
    model = _model().eval()
    x = torch.randn(2, 3, 12, 10)
    perm = [2, 0, 1]
    with torch.no_grad():
        out = model(x)
        out_p = model(x[:, perm], variables=[model.variables[i] for i in perm])
        swapped_names = model(x[:, perm])  # same fields, wrong names: the encodings must matter
    torch.testing.assert_close(out_p, out[:, perm], rtol=1e-5, atol=1e-5)
    assert (swapped_names - out[:, perm]).abs().max() > 1e-3


@pytest.mark.parametrize("spatial_dims,shape", [(1, (24,)), (2, (10, 9)), (3, (6, 5, 4))])
def test_1d_2d_3d_grids_are_equivariant_and_train(spatial_dims, shape):
    model = _model(spatial_dims=spatial_dims, n_layers=1)
    x = torch.randn(2, 3, *shape)
    out = model(x)
    assert out.shape == x.shape and torch.isfinite(out).all()
    with torch.no_grad():
        torch.testing.assert_close(model(x[:, [1, 2, 0]], variables=["v", "p", "u"]), out[:, [1, 2, 0]],
                                   rtol=1e-5, atol=1e-5)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):
        loss = (model(x) - x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("spatial_dims,shape", [(1, (24,)), (2, (10, 9)), (3, (6, 5, 4))])
def test_spectral_mixer_is_equivariant_on_1d_2d_3d_and_zero_kernels_give_the_pointwise_model(spatial_dims, shape):
    torch.manual_seed(0)
    spectral = _model(spatial_dims=spatial_dims, mixer="spectral", mixer_modes=3).eval()
    x = torch.randn(2, 3, *shape)
    with torch.no_grad():
        out = spectral(x)
        torch.testing.assert_close(spectral(x[:, [1, 2, 0]], variables=["v", "p", "u"]), out[:, [1, 2, 0]],
                                   rtol=1e-5, atol=1e-5)
        pointwise = _model(spatial_dims=spatial_dims).eval()
        missing = pointwise.load_state_dict(spectral.state_dict(), strict=False).unexpected_keys
        assert missing and all(".spectral." in k for k in missing)  # only the mixers' kernels differ
        assert (pointwise(x) - out).abs().max() > 1e-4  # the mixer acts
        for block in spectral.blocks:
            for param in block.spectral.parameters():
                param.zero_()
        torch.testing.assert_close(spectral(x), pointwise(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mixer", ["pointwise", "spectral"])
def test_a_block_commutes_with_periodic_shifts(mixer):
    """Spectral Q/K/V, domain inner products, instance norms and the mixer are all shift-equivariant
    on a periodic grid, so one block is too (the model is not: its encodings fix positions)."""
    torch.manual_seed(0)
    block = _model(mixer=mixer, **({"mixer_modes": 3} if mixer == "spectral" else {})).blocks[0].double().eval()
    h = torch.randn(2, 3, 8, 12, 10, dtype=torch.float64)
    w = torch.full((2, 120), 1 / 120, dtype=torch.float64)
    with torch.no_grad():
        out = block(h, w)
        shifted = block(torch.roll(h, (3, 5), dims=(-2, -1)), w)
    torch.testing.assert_close(shifted, torch.roll(out, (3, 5), dims=(-2, -1)), rtol=1e-6, atol=1e-6)


def test_y_is_accepted_and_ignored_for_trainer_style_calls():
    model = _model().eval()
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(model(**{"x": x, "y": torch.randn(1, 3, 8, 8)}), model(x))


def test_a_subset_of_variables_runs_and_equals_the_full_model_without_the_rest():
    model = _model(n_layers=1).eval()
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        sub = model(x[:, [2, 0]], variables=["p", "u"])
    assert sub.shape == (1, 2, 8, 8) and torch.isfinite(sub).all()
    with torch.no_grad():  # the third variable takes part in the attention of the others
        assert (sub - model(x)[:, [2, 0]]).abs().max() > 1e-4


def test_add_variable_then_fine_tune_changes_only_the_new_encoding():
    model = _model()
    x_old = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        before_out = model(x_old)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = model.add_variable("T")
    assert model.known_variables == ["u", "v", "p", "T"] and model.config["extra_variables"] == ["T"]
    x_new = torch.randn(2, 4, 8, 8)
    target = torch.randn(2, 4, 8, 8)
    opt = torch.optim.SGD(params, lr=0.5)
    loss0 = (model(x_new, variables=["u", "T", "v", "p"]) - target).square().mean()
    opt.zero_grad()
    loss0.backward()
    opt.step()
    loss1 = (model(x_new, variables=["u", "T", "v", "p"]) - target).square().mean()
    assert loss1 < loss0
    after = model.state_dict()
    changed = sorted(k for k in after if k not in before or not torch.equal(after[k], before[k]))
    assert changed == ["encoding.fields.var_T.cos", "encoding.fields.var_T.sin"]
    with torch.no_grad():
        torch.testing.assert_close(model(x_old), before_out)  # old variables: same model
    # the config rebuilds the grown model, so checkpoints round-trip
    rebuilt = create_operator("codano", **json.loads(json.dumps(model.config)))
    rebuilt.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x_new, variables=["u", "T", "v", "p"]),
                                   model(x_new, variables=["u", "T", "v", "p"]))


def test_a_variable_added_like_an_analogue_is_first_predicted_as_that_analogue():
    model = _model().eval()
    model.add_variable("T", like="p")
    x = torch.randn(2, 3, 8, 8)
    x = torch.cat([x, x[:, 2:3]], dim=1)  # T carries the same field as p
    with torch.no_grad():
        out = model(x, variables=["u", "v", "p", "T"])
    # same field, same encoding: same token, so (equivariance) the same prediction
    torch.testing.assert_close(out[:, 3], out[:, 2], rtol=1e-5, atol=1e-6)
    fresh = _model().eval()
    fresh.load_state_dict(model.state_dict(), strict=False)
    fresh.add_variable("T")
    with torch.no_grad():
        other = fresh(x, variables=["u", "v", "p", "T"])
    assert (other[:, 3] - other[:, 2]).abs().max() > 1e-3  # a fresh encoding tells them apart


def test_masked_fields_are_invisible_and_the_mask_field_learns():
    model = _model()
    x = torch.randn(2, 3, 8, 8)
    masked = torch.tensor([[False, True, False], [True, False, True]])
    poisoned = x.clone()
    poisoned[masked] = float("nan")
    with torch.no_grad():
        torch.testing.assert_close(model(poisoned, masked=masked), model(x, masked=masked))
        assert (model(x, masked=masked) - model(x)).abs().max() > 1e-4
    model(x).sum().backward()  # unmasked: the mask field still gets a (zero) gradient, as DDP expects
    assert torch.equal(model.mask_field.cos.grad, torch.zeros_like(model.mask_field.cos))


def test_sample_mask_hides_the_right_count_and_keeps_one():
    g = torch.Generator().manual_seed(0)
    for nv, ratio, count in [(3, 0.5, 2), (3, 0.99, 2), (4, 0.01, 1), (5, 0.4, 2)]:
        m = CoDANO.sample_mask(64, nv, ratio, generator=g)
        assert (m.sum(1) == count).all()
    m = CoDANO.sample_mask(4000, 4, 0.5, generator=g)
    torch.testing.assert_close(m.float().mean(0), torch.full((4,), 0.5), atol=0.03, rtol=0)  # uniform choice


def test_masked_reconstruction_loss_is_the_relative_l2_on_masked_variables_and_decreases():
    torch.manual_seed(1)
    model = _model(n_layers=1)
    x = torch.randn(4, 3, 8, 8) + 2.0
    loss = model.masked_reconstruction_loss(x, mask_ratio=0.4, generator=torch.Generator().manual_seed(5))
    masked = CoDANO.sample_mask(4, 3, 0.4, generator=torch.Generator().manual_seed(5))
    pred = model(x, masked=masked)
    rel = (pred - x).flatten(2).norm(dim=-1) / x.flatten(2).norm(dim=-1)  # uniform grid: plain norms
    torch.testing.assert_close(loss, rel[masked].mean())
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    first = None
    for step in range(8):
        loss = model.masked_reconstruction_loss(x, mask_ratio=0.4, generator=torch.Generator().manual_seed(step))
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.8 * first
    assert model.mask_field.cos.grad.abs().sum() > 0


def test_registry_config_is_plain_json_and_channel_keywords_are_checked():
    model = _model(in_channels=3, out_channels=3)
    assert json.loads(json.dumps(model.config))["variables"] == ["u", "v", "p"]
    with pytest.raises(ValueError, match=r"in_channels: expected len\(variables\)=3 .* got 2"):
        _model(in_channels=2)


def test_errors_name_argument_expected_and_given():
    model = _model()
    with pytest.raises(ValueError, match=r"variables: expected names from \['u', 'v', 'p'\] .*got unknown \['T'\]"):
        model(torch.randn(1, 3, 8, 8), variables=["u", "T", "p"])
    msg = r"x: expected size 3 along axis 1 \(one field per variable in \['u', 'v', 'p'\]\), got 2"
    with pytest.raises(ValueError, match=msg):
        model(torch.randn(1, 2, 8, 8))
    with pytest.raises(ValueError, match="x: expected finite values, got 1 NaN"):
        bad = torch.randn(1, 3, 8, 8)
        bad[0, 1, 2, 2] = float("nan")
        model(bad)
    with pytest.raises(ValueError, match=r"variables: expected distinct variable names, got duplicates \['u'\]"):
        model(torch.randn(1, 2, 8, 8), variables=["u", "u"])
    with pytest.raises(ValueError, match=r"x: expected a 4-D tensor \(B, V=3, 2 spatial axes\)"):
        model(torch.randn(3, 8, 8))
    with pytest.raises(ValueError, match=r"masked: expected a bool tensor of shape \(1, 3\)"):
        model(torch.randn(1, 3, 8, 8), masked=torch.ones(1, 3))
    with pytest.raises(ValueError, match="x: expected at least 2 variables for masked reconstruction"):
        model.masked_reconstruction_loss(torch.randn(1, 1, 8, 8), variables=["u"])
    with pytest.raises(ValueError, match=r"mask_ratio: expected a float in \(0, 1\), got 1.5"):
        model.masked_reconstruction_loss(torch.randn(1, 3, 8, 8), mask_ratio=1.5)
    with pytest.raises(ValueError, match=r"variables: expected a non-empty list of variable names, got 'uvp'"):
        _model(variables="uvp")
    with pytest.raises(ValueError, match=r"mixer: expected one of .*'pointwise'.*got 'fno'"):
        _model(mixer="fno")
    with pytest.raises(ValueError, match=r"mixer_modes: expected an int or 2 ints \(one per spatial axis\), got \[4\]"):
        _model(mixer="spectral", mixer_modes=[4])
    with pytest.raises(ValueError, match=r"mixer_modes: expected None with mixer='pointwise'"):
        _model(mixer_modes=4)
