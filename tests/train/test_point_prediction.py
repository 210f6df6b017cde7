"""Surrogate.predict_points: a point-set operator in a pipeline, called as the trainer calls it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sciattn.operators import create_operator
from sciattn.train import Surrogate
from sciattn.train.training.batching import collate, predict


class _Affine:
    """A per-channel normaliser on channels-first tensors ``(B, C, N)``, as the run's normalisers are."""

    def __init__(self, shift, scale):
        self.shift, self.scale = torch.tensor(shift)[None, :, None], torch.tensor(scale)[None, :, None]

    def encode(self, t):
        return (t - self.shift.to(t)) / self.scale.to(t)

    def decode(self, t):
        return t * self.scale.to(t) + self.shift.to(t)


@pytest.fixture(scope="module")
def sur():
    torch.manual_seed(0)
    model = create_operator("erwin", in_channels=2, out_channels=1, spatial_dims=2, c_hidden=[8, 16], enc_depths=[1, 1],
                            dec_depths=[1], n_heads=2, mlp_ratio=2).double()
    return Surrogate(model, _Affine([0.5, -1.0], [2.0, 0.5]), _Affine([3.0], [4.0]))


def _cloud(n, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, 2, generator=g, dtype=torch.float64), torch.rand(n, 2, generator=g, dtype=torch.float64),
            torch.rand(n, generator=g, dtype=torch.float64) + 0.1)


def test_equals_the_trainers_call_on_a_padded_batch_of_clouds_of_two_sizes(sur):
    clouds = [_cloud(150, 1), _cloud(97, 2)]
    samples = [{"x": x, "y": torch.zeros(len(x), 1, dtype=torch.float64), "pos": p, "weights": w / w.sum()}
               for x, p, w in clouds]
    batch = collate(samples)
    with torch.no_grad():
        ref = predict(sur.model, batch, sur.x_normalizer, sur.y_normalizer)
    for i, (x, p, w) in enumerate(clouds):
        out = sur.predict_points(x.numpy(), p.numpy(), w.numpy())
        assert isinstance(out, np.ndarray) and out.shape == (len(x), 1) and out.dtype == np.float64
        n = len(x)
        np.testing.assert_allclose(out, ref[i, :n].numpy(), rtol=1e-10, atol=1e-12)
    # a batch of equal clouds, tensors in and out, and the weights' scale does not matter
    x, p, w = clouds[0]
    both = sur.predict_points(torch.stack([x, x]), torch.stack([p, p]), torch.stack([w, 3 * w]))
    assert isinstance(both, torch.Tensor) and both.shape == (2, 150, 1)
    torch.testing.assert_close(both[0], both[1], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(both[0], ref[0, :150].double(), rtol=1e-10, atol=1e-12)


def test_point_order_does_not_change_the_answer_and_default_weights_are_uniform(sur):
    x, p, _ = _cloud(120, 3)
    perm = torch.randperm(120, generator=torch.Generator().manual_seed(4))
    out = sur.predict_points(x, p)
    torch.testing.assert_close(sur.predict_points(x[perm], p[perm]), out[perm], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(sur.predict_points(x, p, torch.full((120,), 0.5, dtype=torch.float64)), out,
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("call, exc, match", [
    (lambda s, x, p: s.predict_points(x[0], p), ValueError, r"x: expected 2 dims \(N, C\) or 3 dims"),
    (lambda s, x, p: s.predict_points(x, p[:, :1]), ValueError, r"pos: expected shape \(50, 2\)"),
    (lambda s, x, p: s.predict_points(x[:, :1], p), ValueError, r"x: expected 2 input channel\(s\)"),
    (lambda s, x, p: s.predict_points(x, p, -torch.ones(50)), ValueError, "weights: expected non-negative values"),
    (lambda s, x, p: s.predict_points(x, p, torch.ones(49)), ValueError, r"weights: expected shape \(50,\)"),
    (lambda s, x, p: s.predict_points(x.tolist(), p), TypeError, "x: expected a numpy.ndarray or torch.Tensor, got list"),
    (lambda s, x, p: s.predict_points(x, p * float("nan")), ValueError, "pos: expected finite values"),
    (lambda s, x, p: s.predict(x), ValueError, r"trained on point sets: predict_points\(x, pos, weights\)"),
])
def test_errors_name_the_argument(sur, call, exc, match):
    x, p, _ = _cloud(50, 5)
    with pytest.raises(exc, match=match):
        call(sur, x, p)
