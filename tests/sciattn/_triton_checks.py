"""Shared by the Triton kernel tests (``test_softmax_triton.py``, ``test_neighborhood_triton.py``): where the kernels
run, the fixture that turns Triton's interpreter on, the comparison with the backend's declared tolerances, and the
ahead-of-time build of the kernels for sm_90 (:data:`SM90_BUILD`, :func:`assert_compiles_for_sm90`).

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



def assert_matches_reference(op, out, ref, x, ref_x, names, dtype):
    """The kernel's ``out`` (computed in ``dtype`` from the inputs ``x``) against the float64 ``ref`` (from
    ``ref_x``): the output dtype, the output, and the gradients of ``names`` for one random cotangent, each within
    the backend's tolerances (:func:`assert_close`) and in its input's dtype. Returns the kernel's gradients."""
    assert out.dtype == dtype
    assert_close(op, out, ref, dtype, "output")
    cot = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=F64)
    grads = torch.autograd.grad((out * cot.to(DEVICE, dtype)).sum(), [x[n] for n in names])
    ref_grads = torch.autograd.grad((ref * cot).sum(), [ref_x[n] for n in names])
    for n, a, r in zip(names, grads, ref_grads):
        assert a.dtype == x[n].dtype, n
        assert_close(op, a, r, dtype, f"grad {n}")
    return grads

# The start of a script that compiles kernels for H100 (sm_90) through Triton's bundled ptxas, which needs no GPU:
# ``build(fn, dtype, const, warps, stages=None, int_pointers=())`` compiles ``fn`` with the constexprs ``const``, the
# feature tensors (Q, K, V, OUT, DO, DQ, DK, DV) in ``dtype``, the pointers named in ``int_pointers`` (CSR indices)
# as int64, every other pointer as fp32, sizes as i32, ``scale`` as fp32 and strides as i64.
SM90_BUILD = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

def build(fn, dtype, const, warps, stages=None, int_pointers=()):
    sig = {}
    for n in fn.arg_names:
        if n in const:
            sig[n] = "constexpr"
        elif n in ("H", "NQ", "NK", "D", "E"):
            sig[n] = "i32"
        elif n == "scale":
            sig[n] = "fp32"
        elif n in int_pointers:
            sig[n] = "*i64"
        elif n[0].isupper():
            sig[n] = "*" + (dtype if n in ("Q", "K", "V", "OUT", "DO", "DQ", "DK", "DV") else "fp32")
        else:
            sig[n] = "i64"
    options = dict(num_warps=warps) if stages is None else dict(num_warps=warps, num_stages=stages)
    triton.compile(ASTSource(fn, sig, const), target=GPUTarget("cuda", 90, 32), options=options)
"""


def assert_compiles_for_sm90(script: str) -> None:
    """Run :data:`SM90_BUILD` followed by ``script`` (its ``build`` calls) in a fresh Python without
    ``TRITON_INTERPRET`` (the interpreter skips Triton's type checks and code generation), and assert that every
    kernel compiled."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    program = SM90_BUILD + script + '\nprint("compiled")\n'
    run = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "compiled" in run.stdout, run.stderr[-3000:]
