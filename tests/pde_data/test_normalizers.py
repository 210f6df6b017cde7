from pathlib import Path

import numpy as np
import pytest
import torch
from neuralop.data.transforms.normalizers import UnitGaussianNormalizer as NeuralopUGN

from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.pde_data.normalizers import (
    IdentityNormalizer,
    UnitGaussianNormalizer,
    fit_normalizers,
    normalizer_from_state,
    normalizer_to_state,
)

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def make_data(spatial=(16, 16), n=20, seed=0):
    """Three channels with very different offsets and scales, so a scalar (non per-channel) fit fails."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([1.0, 10.0, 0.1]).view(1, 3, *([1] * len(spatial)))
    shift = torch.tensor([0.0, -5.0, 3.0]).view(1, 3, *([1] * len(spatial)))
    return torch.randn(n, 3, *spatial, generator=g) * scale + shift


def hand_stats(data: torch.Tensor):
    a = data.double().numpy()
    c = a.shape[1]
    per_channel = np.moveaxis(a, 1, 0).reshape(c, -1)
    return per_channel.mean(axis=1), per_channel.std(axis=1, ddof=1)


@pytest.mark.parametrize("spatial", [(12,), (6, 7)])
def test_fit_matches_hand_computed_stats(spatial):
    data = make_data(spatial)
    n = UnitGaussianNormalizer().fit(data)
    mean, std = hand_stats(data)
    assert n.mean.shape == (1, 3, *([1] * len(spatial))) and n.std.shape == n.mean.shape
    np.testing.assert_allclose(n.mean.flatten().double().numpy(), mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(n.std.flatten().double().numpy(), std, rtol=1e-5)
    enc = n.encode(data).double().numpy()
    np.testing.assert_allclose(hand_stats(torch.from_numpy(enc))[0], 0.0, atol=1e-5)
    np.testing.assert_allclose(hand_stats(torch.from_numpy(enc))[1], 1.0, atol=1e-5)


def test_encode_formula_and_agreement_with_neuralop():
    data = make_data()
    ours = UnitGaussianNormalizer().fit(data)
    theirs = NeuralopUGN(dim=[0, 2, 3])
    theirs.fit(data)
    x = make_data(seed=1)[:4]
    expected = (x - ours.mean) / (ours.std + 1e-7)
    assert torch.allclose(ours.encode(x), expected, rtol=1e-6, atol=1e-6)
    assert torch.allclose(ours.encode(x), theirs.transform(x), rtol=1e-6, atol=1e-6)
    assert ours.eps == 1e-7


def test_round_trip():
    data = make_data()
    n = UnitGaussianNormalizer().fit(data)
    x = make_data(seed=2)[:5]
    assert torch.allclose(n.decode(n.encode(x)), x, rtol=1e-5, atol=1e-4)
    assert not torch.allclose(n.encode(x), x)


def test_other_resolution_uses_same_channel_stats():
    n = UnitGaussianNormalizer().fit(make_data((16, 16)))
    fine = make_data((64, 48), n=2, seed=3)
    enc = n.encode(fine)
    assert enc.shape == fine.shape
    for c in range(3):
        expected = (fine[:, c] - n.mean.flatten()[c]) / (n.std.flatten()[c] + 1e-7)
        assert torch.allclose(enc[:, c], expected, rtol=1e-6, atol=1e-6)
    assert torch.allclose(n.decode(enc), fine, rtol=1e-5, atol=1e-4)


def test_state_round_trip_through_file(tmp_path):
    x_norm = UnitGaussianNormalizer().fit(make_data())
    path = tmp_path / "ckpt.pt"
    torch.save(
        {"x_norm": normalizer_to_state(x_norm), "y_norm": normalizer_to_state(IdentityNormalizer())}, path
    )
    state = torch.load(path, weights_only=True)
    restored = normalizer_from_state(state["x_norm"])
    identity = normalizer_from_state(state["y_norm"])
    probe = make_data((9, 11), n=3, seed=4)
    assert isinstance(restored, UnitGaussianNormalizer) and isinstance(identity, IdentityNormalizer)
    assert torch.equal(restored.encode(probe), x_norm.encode(probe))
    assert torch.equal(restored.decode(probe), x_norm.decode(probe))
    assert identity.encode(probe) is probe


def test_state_dict_loads_into_unfitted_module(tmp_path):
    fitted = UnitGaussianNormalizer().fit(make_data())
    torch.save(fitted.state_dict(), tmp_path / "sd.pt")
    fresh = UnitGaussianNormalizer()
    fresh.load_state_dict(torch.load(tmp_path / "sd.pt", weights_only=True))
    probe = make_data(n=2, seed=5)
    assert torch.equal(fresh.encode(probe), fitted.encode(probe))


def test_dtype_move_and_errors():
    n = UnitGaussianNormalizer().fit(make_data())
    assert n.to(dtype=torch.float64).mean.dtype == torch.float64
    with pytest.raises(ValueError, match="channels"):
        n.encode(torch.zeros(2, 4, 8, 8))
    with pytest.raises(ValueError, match="x: expected a 4-D tensor"):
        n.encode(torch.zeros(3, 8, 8))
    with pytest.raises(RuntimeError, match="not fitted"):
        UnitGaussianNormalizer().encode(torch.zeros(1, 1, 4))
    with pytest.raises(ValueError, match="NaN"):
        UnitGaussianNormalizer().fit(torch.full((2, 1, 4), float("nan")))


def test_fit_normalizers_on_dataset():
    x, y = make_data(n=10), make_data(n=10, seed=7)[:, :2]
    ds = GridPairDataset(x, y, {"split": "train"})
    x_norm, y_norm = fit_normalizers(ds)
    np.testing.assert_allclose(x_norm.mean.flatten().numpy(), hand_stats(x)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_norm.std.flatten().numpy(), hand_stats(y)[1], rtol=1e-5)
    x_id, y_only = fit_normalizers(ds, normalize_x=False)
    assert isinstance(x_id, IdentityNormalizer) and torch.equal(x_id.encode(x), x)
    assert torch.equal(y_only.mean, y_norm.mean)
    with pytest.raises(ValueError, match="training split"):
        fit_normalizers(GridPairDataset(x, y, {"split": "test"}))


def test_real_darcy_train_stats():
    path = SHARED / "darcy_train_16.pt"
    if not path.is_file():
        pytest.skip(f"real benchmark file {path} is absent (shared data folder not mounted)")
    from sciattn.pde_data.neuralop_pt import load_neuralop_pt

    raw = torch.load(path, weights_only=True, map_location="cpu")
    x_norm, y_norm = fit_normalizers(load_neuralop_pt(path))
    y = raw["y"].double()
    assert y_norm.mean.item() == pytest.approx(y.mean().item(), rel=1e-5)
    assert y_norm.std.item() == pytest.approx(y.std().item(), rel=1e-5)
    assert x_norm.mean.item() == pytest.approx(raw["x"].double().mean().item(), rel=1e-5)
