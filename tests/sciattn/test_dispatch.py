"""Backend dispatch: selection by declared capabilities and the refusal report."""

from __future__ import annotations

import pytest
import torch

import sciattn
from sciattn._dispatch import _REGISTRY, Backend, BackendError, register_backend, select_backend


@pytest.fixture
def fake_gpu_backend():
    backend = register_backend(Backend(op="galerkin", name="fake_cuda", fn=lambda *a: None, priority=10,
                                       devices=("cuda",), dtypes=(torch.float16,), max_head_dim=8))
    yield backend
    _REGISTRY["galerkin"] = [b for b in _REGISTRY["galerkin"] if b.name != "fake_cuda"]


def _props(**kw):
    p = dict(device=torch.device("cpu"), dtype=torch.float32, head_dim=16, has_mask=False, has_weights=False)
    p.update(kw)
    return p


def test_automatic_choice_skips_backends_that_do_not_fit(fake_gpu_backend):
    assert select_backend("galerkin", None, **_props()).name == "reference"


def test_forced_backend_that_does_not_fit_lists_every_reason(fake_gpu_backend):
    with pytest.raises(BackendError) as info:
        select_backend("galerkin", "fake_cuda", **_props())
    msg = str(info.value)
    assert "fake_cuda: device cpu not in ('cuda',)" in msg
    assert "dtype torch.float32 not in ('torch.float16',)" in msg
    assert "head dim 16 > 8" in msg
    assert "reference: ok" in msg


def test_available_backends_reports_the_reference(capsys):
    rows = sciattn.available_backends()
    assert {"op": "galerkin", "backend": "reference"}.items() <= rows[-1].items() or any(
        r["backend"] == "reference" and r["available"] == "yes" for r in rows
    )
    assert "| galerkin | reference |" in capsys.readouterr().out


def test_unknown_op_is_an_error():
    with pytest.raises(ValueError, match="op: expected one of"):
        select_backend("no_such_op", None, **_props())
