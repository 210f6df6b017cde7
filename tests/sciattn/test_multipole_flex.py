"""The flex_attention backend of window attention: block-diagonal block mask plus score mod.

On CPU flex_attention has no backward, so the forward is compared with the reference here and
the dispatcher must refuse it for inputs that require gradients."""

from __future__ import annotations

import warnings

import pytest
import torch

from sciattn import BackendError
from sciattn._capabilities import has_flex_attention
from sciattn.multipole.functional import window_attention

pytestmark = pytest.mark.skipif(not has_flex_attention(), reason="flex_attention is not available in this torch")


@pytest.mark.parametrize("with_bias", [False, True])
def test_flex_matches_the_reference_with_weights_masks_padding_and_bias(with_bias):
    g = torch.Generator().manual_seed(0)
    b, h, d = 2, 3, 8
    q, k, v = (torch.randn(b, h, 10, 13, d, generator=g, dtype=torch.float64) for _ in range(3))
    w = torch.rand(10, 13, generator=g, dtype=torch.float64) + 0.1
    mask = torch.rand(b, 10, 13, generator=g) > 0.2
    mask[0, :4, :4] = False  # one window with no admissible key -> zeros
    k = torch.where(mask[:, None, ..., None], k, torch.nan)  # NaN-poisoned padding
    bias = torch.randn(h, 16, 16, generator=g, dtype=torch.float64) if with_bias else None
    ref = window_attention(q, k, v, 4, weights=w, mask=mask, bias=bias, backend="reference")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex warns that eager mode is unfused
        flex = window_attention(q, k, v, 4, weights=w, mask=mask, bias=bias, backend="flex")
    torch.testing.assert_close(flex, ref, rtol=1e-12, atol=1e-12)
    assert torch.equal(flex[0, :, :4, :4], torch.zeros_like(flex[0, :, :4, :4]))


def test_flex_is_refused_for_gradients_on_cpu_with_the_reason():
    q = torch.randn(1, 1, 8, 8, 4, requires_grad=True)
    with pytest.raises(BackendError, match=r"flex: no backward on cpu"):
        window_attention(q, q, q, 4, backend="flex")
    assert window_attention(q, q, q, 4).requires_grad  # automatic choice falls back to sdpa
