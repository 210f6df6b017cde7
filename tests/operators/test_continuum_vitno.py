"""The ViT neural operator (``sciattn.operators.continuum_vitno``) against a transcription of the published
forward (``_continuum_published.vitno_forward``): float64, matched weights, both patch forms (physical patches, and
the published patch side in points) on square grids where the published code runs, outputs and gradients; the
spectral modes a grid cannot hold; the error texts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from sciattn.domain import Grid
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _continuum_published as pub  # noqa: E402
import _token_checks as tc  # noqa: E402

TOL = 1e-10
CFG = dict(in_channels=1, out_channels=2, width=8, n_layers=2, n_heads=2, dim_ff=16, modes=3, smoothing_modes=5)


def _model(seed=0, **change):
    return pub.perturbed_model("continuum_vitno", {**CFG, **change}, seed)


_rel = pub.rel


def _published(model, x, patch_size):
    n = x.shape[-1]
    nodes, _ = Grid((n, n)).nodes_and_weights(x.dtype)
    cfg = model.config
    modes = (cfg["modes"],) * 2 if isinstance(cfg["modes"], int) else tuple(cfg["modes"])
    return pub.vitno_forward(dict(model.named_parameters()), x, nodes.T.reshape(2, n, n), patch_size=patch_size,
                             n_layers=cfg["n_layers"], n_heads=cfg["n_heads"], modes=modes,
                             smoothing_modes=cfg["smoothing_modes"], activation=cfg["activation"])


@pytest.mark.parametrize("form", ["physical", "published"])
def test_forward_and_gradients_equal_the_published_code(form):
    """At 16² with 8-point patches both forms are the published model; at 32² the physical form is the published
    one after ``set_im_size(32, 16)`` (the paper's zero-shot protocol) and the published form keeps 8 points."""
    change = dict(patches=2) if form == "physical" else dict(patches=None, patch_size=8)
    model = _model(**change)
    g = torch.Generator().manual_seed(3)
    for n, p in ((16, 8), (32, 16 if form == "physical" else 8)):
        x = torch.randn(2, 1, n, n, dtype=torch.float64, generator=g, requires_grad=True)
        ours, ref = model(x), _published(model, x, p)
        assert _rel(ours, ref) <= TOL, n
        gy = torch.randn_like(ref)
        go = torch.autograd.grad((ours * gy).sum(), [x, *model.parameters()])
        gr = torch.autograd.grad((ref * gy).sum(), [x, *model.parameters()])
        assert _rel(torch.cat([t.flatten() for t in go]), torch.cat([t.flatten() for t in gr])) <= TOL, n


def test_the_attention_matters_and_the_forms_differ_after_refinement():
    x = torch.randn(1, 1, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    physical, points = _model(patches=2)(x), _model(patches=None, patch_size=8)(x)
    assert _rel(points, physical) > 1e-3  # 4 patches of 16 points against 16 patches of 8
    # patch attention is not the identity: one patch per axis (self-attention only) is another answer
    assert _rel(_model(patches=1)(x), physical) > 1e-3


def test_modes_a_patch_cannot_hold_are_left_out():
    """At 4-point patches only frequencies -2..1 exist along the first axis (0..2 along the second, the rfft axis):
    the model equals one built with modes (2, 3) (the same weights for the frequencies it holds), where the
    published code would fail to broadcast."""
    big, small = _model(patches=4, modes=3), _model(patches=4, modes=[2, 3])
    with torch.no_grad():
        for name in ("weights1", "weights2"):
            w = getattr(big.lift, name)
            getattr(small.lift, name).copy_(w[:, :, :2] if name == "weights1" else w[:, :, 1:])
        for (n, p), (_, q) in zip(big.named_parameters(), small.named_parameters()):
            if not n.startswith("lift."):
                q.copy_(p)
    x = torch.randn(1, 1, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    assert _rel(big(x), small(x)) <= TOL


@pytest.mark.parametrize("change,exc,words", [
    (dict(patches=None), ValueError, ("patches, patch_size", "exactly one", "None")),
    (dict(patch_size=4), ValueError, ("patches, patch_size", "exactly one", "patch_size=4")),
    (dict(patches=0), ValueError, ("patches", "positive", "0")),
    (dict(modes=[3, 3, 3]), ValueError, ("modes", "2 ints", "[3, 3, 3]")),
    (dict(smoothing_modes=-1), ValueError, ("smoothing_modes", ">= 0", "-1")),
    (dict(n_heads=3), ValueError, ("width", "3")),
])
def test_bad_arguments_name_the_argument_the_expectation_and_the_value(change, exc, words):
    tc.check_bad_argument("continuum_vitno", CFG, change, exc, words)


def test_a_grid_the_patches_do_not_divide_is_refused():
    with pytest.raises(ValueError, match=r"x: expected spatial size 1 to be a multiple of patches=4 .* got 10"):
        create_operator("continuum_vitno", **CFG)(torch.randn(1, 1, 12, 10))
    with pytest.raises(ValueError, match=r"multiple of patch_size=8 \(points per patch side\), got 12"):
        create_operator("continuum_vitno", **{**CFG, "patches": None, "patch_size": 8})(torch.randn(1, 1, 12, 16))
