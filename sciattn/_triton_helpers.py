"""Triton helpers shared by the kernel files of the families (Galerkin, weighted softmax, CSR neighbourhood).

The kernels index their launch grid the same way (axis 1: batch × heads), load tiles of ``(B, H, N, C)`` tensors
with masked reads that never touch padding or memory past ``N``, reduce with the standard combine functions, and
refuse CPU tensors unless Triton's interpreter runs them. Those pieces live here once:

- :func:`reduce_sum`, :func:`reduce_max`: ``tl.sum`` / ``tl.max`` written as the reductions they are.
  ``tl.sum`` and ``tl.max`` are themselves ``@triton.jit`` functions, fixed as compiled-only if triton was imported
  before ``TRITON_INTERPRET=1`` was set, and then unusable inside an interpreted kernel; the builtin ``tl.reduce``
  with the same combine functions compiles to the same code and runs under the interpreter whatever the order.
- :func:`batch_head`: the program's ``(bh, b, h)``; :func:`program_tiles`: with its block index and the feature
  columns of its tiles, the first lines of every kernel.
- :func:`load_tile`: a ``(rows × cols)`` tile in the storage dtype, masked rows and columns read as 0.
- :func:`block_size`, :func:`check_device`, :func:`check_grid`: the launchers' tile width and input checks.

This module imports triton. Only the kernel modules import it, and they are loaded lazily on first use, so
``import sciattn`` never imports triton. The ``@triton.jit`` functions are decorated once, as compiled or as
interpreted functions (``TRITON_INTERPRET=1``), when this module is imported; a kernel module imported later under
the other mode gets a re-decorated copy (:func:`for_current_mode`), since an interpreted kernel cannot call a
compiled helper, nor the reverse.
"""

from __future__ import annotations

import importlib
import sys

import torch
import triton
import triton.language as tl
from triton import knobs

__all__ = [
    "INTERPRETED",
    "MAX_HEAD_DIM",
    "reduce_sum",
    "reduce_max",
    "batch_head",
    "program_tiles",
    "load_tile",
    "block_size",
    "check_device",
    "check_grid",
    "for_current_mode",
    "jit_helpers",
]

MAX_HEAD_DIM = 128


@triton.jit
def reduce_sum(x, axis: tl.constexpr):
    return tl.reduce(x, axis, tl.standard._sum_combine)


@triton.jit
def reduce_max(x, axis: tl.constexpr):
    return tl.reduce(x, axis, tl.standard._elementwise_max)


# Whether TRITON_INTERPRET=1 was set when the functions above were decorated (it cannot change for them later).
INTERPRETED = type(reduce_sum).__name__ == "InterpretedFunction"


@triton.jit
def batch_head(H):
    """``(bh, b, h)``: the program's index along axis 1 of the grid (batch × heads), its batch and its head."""
    bh = tl.program_id(1)
    return bh, (bh // H).to(tl.int64), (bh % H).to(tl.int64)


@triton.jit
def program_tiles(H, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    """``(pid, bh, b, h, cd, ce)``: the program's block index along axis 0 of the grid, its batch × head index along
    axis 1 with its batch and head (:func:`batch_head`), and the column indices ``0..BLOCK_D-1`` and ``0..BLOCK_E-1``
    of its key (``D``) and value (``E``) feature tiles."""
    bh, b, h = batch_head(H)
    return tl.program_id(0), bh, b, h, tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_E)


@triton.jit
def load_tile(ptr, base, rows, ok, row_stride, cols, ncols, col_stride):
    """A (rows × cols) tile in storage dtype; masked-off rows/columns are 0 and never read."""
    p = ptr + base + rows.to(tl.int64)[:, None] * row_stride + cols[None, :] * col_stride
    return tl.load(p, mask=ok[:, None] & (cols[None, :] < ncols), other=0.0)


def block_size(n: int) -> int:
    """The tile width for ``n`` features: a power of two, at least 16 (``tl.dot``'s minimum)."""
    return max(16, triton.next_power_of_2(n))


def check_device(t: torch.Tensor, kernels: str, module: str, interpreted: bool) -> None:
    """CUDA tensors, or any when the kernels of ``module`` are ``interpreted``; else ``RuntimeError`` naming ``q``,
    the fix and the module."""
    if t.device.type != "cuda" and not interpreted:
        raise RuntimeError(
            f"q: the triton {kernels} kernels need CUDA tensors, got device {t.device.type}; for CPU tensors set "
            f"TRITON_INTERPRET=1 before {module} is first imported"
        )


def check_grid(bh: int) -> None:
    """Batch × heads runs along grid axis 1, whose CUDA limit is 65535."""
    if bh > 65535:
        raise ValueError(f"q: expected batch × heads <= 65535 (the CUDA grid limit of these kernels), got {bh}")


def jit_helpers():
    """``(INTERPRETED, reduce_sum, reduce_max, load_tile, program_tiles)`` of this (possibly re-imported) module."""
    return INTERPRETED, reduce_sum, reduce_max, load_tile, program_tiles


def for_current_mode():
    """This module, re-imported (its helpers decorated afresh) if ``TRITON_INTERPRET`` changed since its first
    import. A kernel module calls it at import time and binds the helpers it uses from the result."""
    module = sys.modules[__name__]
    if module.INTERPRETED != bool(knobs.runtime.interpret):
        module = importlib.reload(module)
    return module
