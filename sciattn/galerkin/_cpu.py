r"""The ``cpu`` backend of Galerkin attention: :mod:`.chunked`'s chunk loops with their elementwise steps fused in C++.

It evaluates the same quadrature as :func:`sciattn.galerkin.reference.galerkin_reference`,

.. math::
    M = \sum_j w_j\, \mathrm{LN}_K(k_j)\, \mathrm{LN}_V(v_j)^\top, \qquad z_i = q_i M,

with the chunk loops, the explicit backward and the matrix products (``baddbmm``/``bmm``, BLAS) of the
``chunked`` backend. What changes is the elementwise work on each chunk of keys and values: the ``chunked``
backend runs the zeroing of the padding, the LayerNorm (mean, centring, variance, reciprocal square root, affine)
and the product with ``w_j`` one PyTorch op at a time, a pass over the chunk each (about a dozen forward, twice
that backward), which at N = 2^20 with ``kv_norm`` is about a third of its time. Here each is one pass of a C++
kernel per chunk and tensor (``csrc/features.cpp`` states the formulas): forward ``LN(k̃_c)`` and
``w_c · LN(ṽ_c)``; backward, after the products ``∂LN(k) = (w·LN(v)) dMᵀ`` and ``t = LN(k) dM``, the LayerNorm
backward of keys and of values, with ``∂w_j = Σ_h t_j · LN(v_j)``, ``∂LN(v) = w t``, ``dγ`` and ``dβ``, the
statistics recomputed per row from the input (nothing but the row is stored). Without ``kv_norm`` the elementwise
work is a single product with ``w_j`` per chunk, which PyTorch already runs at the kernels' pace (measured: the
kernels were 2–3% slower), so the backend then runs ``chunked``'s steps unchanged.

The kernels are built on first use by :mod:`sciattn._cpu_build` (no compiler, or ``SCIATTN_CPU_KERNELS=0``: the
backend reports itself unavailable and the dispatcher takes ``chunked``). float32 and float64 run the same code;
float64 equals the reference to round-off (``tests/sciattn/test_galerkin_chunked.py`` runs every case on both
backends, ``tests/sciattn/test_galerkin_cpu.py``). Second derivatives (``create_graph=True``) go through the
reference's autograd graph; while tracing the backend is the reference's computation, as for ``chunked``.

Shapes: q ``(B, H, Nq, D)``; k ``(B, H, Nk, D)``; v ``(B, H, Nk, E)``; w ``(B, Nk)`` normalised weights (zero on
padding); mask ``(B, Nk)`` bool or None; LayerNorm weights ``(H, Dn)`` / ``(H, En)``; returns ``(B, H, Nq, E)``.
Any strides with unit stride along the features (e.g. heads split from a token-major projection) are read in
place; others are copied first.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from .._cpu_build import CpuExtension, unit_stride_rows
from .chunked import chunked_galerkin

__all__ = ["galerkin_cpu", "EXTENSION", "unavailable"]

EXTENSION = CpuExtension("sciattn_gal", Path(__file__).with_name("csrc"))


#: The backend's availability probe: why the kernels cannot be built here, or None (builds them once).
unavailable = EXTENSION.why_not


def galerkin_cpu(q: Tensor, k: Tensor, v: Tensor, w: Tensor, mask: Tensor | None, norm) -> Tensor:
    """The ``cpu`` backend: prepared inputs as the functional passes them (``w`` normalised, in q's dtype;
    ``norm`` a :class:`~sciattn.galerkin.functional.KVNorm` or None). Shapes: the module docstring."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        from .functional import _reference_backend

        return _reference_backend(q, k, v, w, mask, norm)
    if norm is None:  # one multiply per chunk, at PyTorch's pace already: chunked's steps (measured no slower)
        return chunked_galerkin(q, k, v, w, mask, None, None)
    return chunked_galerkin(q, unit_stride_rows(k), unit_stride_rows(v), w, mask, norm, EXTENSION.load())
