"""The fused CPU box-attention kernels (``csrc/``), built and loaded on first use by :mod:`sciattn._cpu_build`.

Why our own kernel: with head dimensions of 16 to 32, PyTorch's fused CPU SDPA spends most of its time
per score on the softmax bookkeeping, not on the two dot products, and runs at about 30% of the fp32 matmul
rate whatever the block shape; the physical pyramid's boxes also need per-query window weights that SDPA can
only take as a materialised mask. The kernel computes the scores of one query against its box as a loop over
keys that the compiler vectorises, with the window weights from the per-axis tables of
:mod:`sciattn.multipole.geometry` (``benchmarks/multipole_scaling`` measures both paths).

Where the library cannot be built (no compiler, no ninja, ``SCIATTN_CPU_KERNELS=0``) :func:`load` returns
``None`` and :func:`why_not` says why, and the layer runs its pure-PyTorch path instead.
"""

from __future__ import annotations

from pathlib import Path

from .._cpu_build import ENV_SWITCH, CpuExtension, build_lock, fcntl

__all__ = ["load", "why_not", "ENV_SWITCH", "build_lock", "fcntl"]

EXTENSION = CpuExtension("sciattn_box", Path(__file__).with_name("csrc"))


def load():
    """The registered operator namespace (``torch.ops.<name>``: ``boxes_forward``, ``lanes_forward``, and their
    backwards), or ``None`` where the kernel cannot be built."""
    return EXTENSION.load()


def why_not() -> str | None:
    """Why :func:`load` gives ``None`` (``None`` when the kernel is available)."""
    return EXTENSION.why_not()
