"""Shared by the Triton kernel tests (``test_softmax_triton.py``, ``test_neighborhood_triton.py``): where the kernels
run, the fixture that turns Triton's interpreter on, and the comparison with the backend's declared tolerances.

A test module imports ``interpreter`` (an autouse fixture: pytest collects it from the module's namespace).
Not importorskip: importing triton before ``TRITON_INTERPRET=1`` is set would make its library functions
compiled-only for the rest of the session, so nothing here imports triton.
"""

from __future__ import annotations

import os

import pytest
import torch

from sciattn._dispatch import backends_for

F64 = torch.float64
BACKEND = "triton"
# CPU tensors through the interpreter; export TRITON_INTERPRET=0 on a GPU machine to test the compiled kernels.
DEVICE = "cuda" if os.environ.get("TRITON_INTERPRET") == "0" and torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    """``TRITON_INTERPRET=1`` for the test unless the environment sets it (the kernels are decorated on first use,
    inside such a test)."""
    if "TRITON_INTERPRET" not in os.environ:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def tolerance(op: str, dtype: torch.dtype) -> tuple[float, float]:
    """The ``triton`` backend's declared ``(rtol, atol)`` for ``op`` at ``dtype``."""
    return next(b for b in backends_for(op) if b.name == BACKEND).tolerances[dtype]


def assert_close(op: str, got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """|got − want| <= atol·max|want| + rtol·|want| with the backend's declared tolerances; ``got`` finite."""
    rtol, atol = tolerance(op, dtype)
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert torch.isfinite(got).all(), f"{what}: non-finite values"
    err = (got - want).abs()
    bound = atol * float(want.abs().max().clamp_min(1e-12)) + rtol * want.abs()
    assert bool((err <= bound).all()), f"{what}: max error {float(err.max()):.3g} (rtol={rtol}, atol={atol})"
