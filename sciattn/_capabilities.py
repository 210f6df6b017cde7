"""The only place that probes the environment for optional accelerators and libraries.

Every probe is lazy and cached, and none of them raises: ``import sciattn`` works whether or
not triton, CUDA, flex attention or torch-harmonics are present.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

__all__ = ["has_cuda", "has_triton", "triton_interpreter_enabled", "has_flex_attention", "has_torch_harmonics", "capability_report"]


@functools.cache
def has_cuda() -> bool:
    return bool(torch.cuda.is_available())


@functools.cache
def has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def triton_interpreter_enabled() -> bool:
    """Whether ``TRITON_INTERPRET`` asks Triton to interpret kernels on the CPU (read on every call)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


@functools.cache
def has_flex_attention() -> bool:
    return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None


@functools.cache
def has_torch_harmonics() -> bool:
    return importlib.util.find_spec("torch_harmonics") is not None


def capability_report() -> dict[str, bool | str]:
    """A plain dict describing the environment, for ``available_backends()`` and bug reports."""
    return {
        "torch": torch.__version__,
        "cuda": has_cuda(),
        "triton": has_triton(),
        "flex_attention": has_flex_attention(),
        "torch_harmonics": has_torch_harmonics(),
    }
