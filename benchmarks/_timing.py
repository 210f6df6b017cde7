"""Device timing shared by the benchmark scripts: the median of repeated calls, timed with CUDA
events on a GPU (device work is asynchronous) and with the host clock on a CPU; and the glibc
allocator settings a CPU run was made under (they change the timing of large tensors)."""

from __future__ import annotations

import os
import statistics
import time

import torch


def median_ms(fn, reps: int, warmup: int = 1, cuda: bool | None = None) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` calls after ``warmup`` untimed calls."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            out.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            out.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(out)


def best_time(fn, reps: int) -> float:
    """Fastest of ``reps`` host-clock runs of ``fn()`` in seconds: on a shared machine the minimum is the least
    disturbed estimate."""
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


MALLOC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def malloc_settings() -> dict[str, str]:
    """The glibc malloc tunables set in the environment (empty: glibc's defaults)."""
    return {k: os.environ[k] for k in MALLOC_VARIABLES if k in os.environ}


def malloc_note(settings: dict[str, str]) -> str:
    """One sentence for a results header: ``glibc malloc settings: K=V, ... .``"""
    return "glibc malloc settings: " + (", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults") + "."
