"""Two-process gloo runs for the domain-parallel tests.

``run_ranks("test_x", "_worker")`` spawns ranks that import the test file by name (from this folder, or from
``where``) and call ``_worker(rank, world, port, results)``; a worker wraps its body in
``gloo_group(rank, world, port)``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import sys
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

HERE = str(Path(__file__).resolve().parent)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def gloo_group(rank: int, world: int, port: int):
    """A gloo process group for the body; on success every rank meets at a barrier before any tears
    the group down (a rank leaving mid-transfer aborts its peer)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_ranks(module: str, worker: str, world: int = 2, where: str = HERE) -> dict:
    """Run ``module.worker(rank, world, port, results)`` on ``world`` spawned ranks; ``{rank: result}``."""
    with mp.Manager() as manager:
        results = manager.dict()
        sys.path.insert(0, where)  # the spawned workers import the test file by name
        try:
            fn = getattr(importlib.import_module(module), worker)
            mp.spawn(fn, args=(world, free_port(), results), nprocs=world, join=True)
        finally:
            sys.path.remove(where)
        return dict(results)
