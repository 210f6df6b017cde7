"""Large CPU output tensors backed by transparent huge pages where Linux allows it.

A fresh CPU tensor of more than a few MB is a new anonymous mapping (glibc serves every request above 32 MiB,
its largest mmap threshold, by ``mmap``), so its first write takes one page fault per 4 KiB page. Measured on
the 2-core development VM: writing a fresh 512 MB tensor ran at 1.8–2.4 GB/s against 25 GB/s into memory
already mapped, so an op whose output is that size spent more time in page faults than in arithmetic.
``madvise(MADV_HUGEPAGE)`` on the tensor's memory before the first write lets the kernel map it in 2 MiB
pages where ``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise`` (a common default) or ``always``
(9.8 GB/s on the same VM). It is a hint: nothing else changes, and where it is unavailable (not Linux, no
libc, THP ``never``) :func:`empty_large` is :func:`torch.empty`. PyTorch's own switch for this
(``THP_MEM_ALLOC_ENABLE=1``) applies to every allocation and must be set before torch starts.
"""

from __future__ import annotations

import sys

import torch

__all__ = ["empty_large", "HUGE_PAGE", "MIN_BYTES"]

HUGE_PAGE = 1 << 21  # 2 MiB, the x86-64 and aarch64 (4 KiB base page) huge page size
MIN_BYTES = 1 << 23  # below 8 MiB the faults are cheap and the memory may come from the heap
_MADV_HUGEPAGE = 14
_madvise = None if sys.platform.startswith("linux") else False


def _load():
    """libc's ``madvise``, or False where it cannot be loaded."""
    global _madvise
    if _madvise is None:
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).madvise
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            fn.restype = ctypes.c_int
            _madvise = fn
        except (OSError, AttributeError):
            _madvise = False
    return _madvise


def advise_huge_pages(t: torch.Tensor) -> bool:
    """Ask for huge pages on the 2 MiB-aligned part of ``t``'s memory (before anything is written to it); True
    when the call was made and accepted. Only the pages inside ``t``'s own bytes are advised."""
    fn = _load()
    if not fn or t.device.type != "cpu":
        return False
    start = t.data_ptr()
    end = start + t.numel() * t.element_size()
    lo = (start + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE
    hi = end // HUGE_PAGE * HUGE_PAGE
    return hi > lo and fn(lo, hi - lo, _MADV_HUGEPAGE) == 0


def empty_large(shape: tuple[int, ...], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """:func:`torch.empty` of ``shape``; on the CPU, a tensor of at least :data:`MIN_BYTES` is first advised to
    huge pages (see the module docstring). Its values are uninitialised, like ``torch.empty``'s."""
    t = torch.empty(shape, dtype=dtype, device=device)
    if t.device.type == "cpu" and t.numel() * t.element_size() >= MIN_BYTES:
        advise_huge_pages(t)
    return t
