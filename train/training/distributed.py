"""Data-parallel training over ``torch.distributed``: process group, per-rank sampling and seeding.

Launch. ``torchrun --nproc-per-node N`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``; :func:`init_distributed` then joins the process group with
``init_method="env://"`` and backend ``nccl`` on CUDA, ``gloo`` on the CPU. Without those variables
(a plain ``sciattn train``) training runs in one process and nothing here communicates.

Gradient. With world size ``W``, global batch ``B`` (``train.batch_size``) and per-rank batch
``b = B / W``, rank ``r`` minimises ``L_r = (1/b) Σ_{i∈I_r} ℓ_i`` and DDP averages the gradients::

    (1/W) Σ_r ∇L_r = (1/B) Σ_{i∈I} ∇ℓ_i,      I = ∪_r I_r,

the gradient of the single-process loss on the same global batch ``I``.

Sampling. :class:`ResumableDistributedSampler` is torch's ``DistributedSampler`` (epoch
permutation ``π_e = randperm(N)`` seeded with ``seed + e``, rank ``r`` takes
``π_e[r], π_e[r + W], ...``), so the ``s``-th batches of all ranks together hold
``π_e[sB : (s+1)B]``: the ``s``-th batch of a single process with batch ``B`` (exactly when ``N``
is a multiple of ``W``; otherwise torch pads the permutation by repeating its head). It can start
an epoch after ``k`` batches, which makes mid-epoch resumption replay the same shuffling.

Unused parameters. DDP reduces every parameter's gradient once per backward and fails (or,
with ``find_unused_parameters=True``, walks the autograd graph every step) when a parameter
took no part in the loss. Every registered operator uses every parameter in its forward (a
registry-driven test checks it); a model whose forward really skips a branch says so with a
``ddp_find_unused_parameters`` attribute, and :func:`wrap_ddp` passes it on.

Seeding. Rank ``r`` seeds ``torch``, NumPy and ``random`` with ``seed + r`` (dropout and other
parameter-free randomness differ between ranks, reproducibly); the initial weights are rank 0's,
broadcast by DDP.

Domain parallelism (``train.domain_parallel = D``, :class:`DomainMesh`). The ``W`` ranks form a 2-D
device mesh ``(W / D) × D`` (``torch.distributed.device_mesh``, dims ``data`` × ``domain``; rank
``r`` at data coordinate ``p = r // D`` and domain coordinate ``d = r % D``). The sampler shards the
samples over the ``P = W / D`` data coordinates, and the ``D`` ranks of one data coordinate take the
same samples and hold a part ``d`` of their points each (``model.split_points``). The operator sums its
couplings over the domain group (:func:`sciattn.operators.point_parts.set_domain_group`), and so does
the loss (the relative L2 error's two sums over the points), so every rank of a domain group holds the
same loss ``L_p`` of its data coordinate. Backpropagating it on each of the ``D`` ranks, the backward of
the differentiable all-reduces adds the ``D`` equal cotangents: the ``D`` local parameter gradients sum
to ``D ∇L_p``. DDP, over all ``W`` ranks, averages::

    (1/W) Σ_{p,d} g_{p,d} = (1/W) Σ_p D ∇L_p = (1/P) Σ_p ∇L_p = ∇L,

the gradient of the single-process loss on the global batch: the domain ranks' local gradients are
summed (each holds only its points' share of every path through the sums), the data ranks' averaged.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler

from ..config import ConfigError

__all__ = [
    "DistContext",
    "DomainMesh",
    "ResumableDistributedSampler",
    "all_reduce_sum",
    "barrier",
    "current_context",
    "gather_objects",
    "init_distributed",
    "init_domain_mesh",
    "launched_by_torchrun",
    "per_rank_batch",
    "resolve_device",
    "seed_everything",
    "shutdown_distributed",
    "wrap_ddp",
]


@dataclass(frozen=True)
class DistContext:
    """Where this process sits: ``rank`` of ``world_size`` (``local_rank`` on its node)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        """Rank 0 writes metrics, plots, logs and checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def launched_by_torchrun() -> bool:
    """Whether the environment holds torchrun's ``RANK`` and ``WORLD_SIZE``."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def current_context() -> DistContext:
    """The context of an already initialised process group, else a single process."""
    if dist.is_available() and dist.is_initialized():
        return DistContext(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    return DistContext()


def init_distributed(device: str | torch.device = "cpu") -> DistContext:
    """Join torchrun's process group (``env://``; ``nccl`` on CUDA, ``gloo`` on the CPU).

    Returns the existing context when a group is already initialised and a single-process
    context when the process was not launched by torchrun.
    """
    if dist.is_available() and dist.is_initialized():
        return current_context()
    if not launched_by_torchrun():
        return DistContext()
    if not dist.is_available():
        raise RuntimeError("torch.distributed: launched by torchrun, but this torch build has no distributed support")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", 0))
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group(backend="nccl" if cuda else "gloo", init_method="env://", rank=rank, world_size=world)
    return DistContext(rank, world, local, initialized_here=True)


def shutdown_distributed(ctx: DistContext) -> None:
    """Destroy the process group if :func:`init_distributed` created it."""
    if ctx.initialized_here and dist.is_initialized():
        dist.destroy_process_group()


def resolve_device(device: str | torch.device, ctx: DistContext) -> torch.device:
    """``"cuda"`` becomes ``cuda:<local rank>`` under torchrun; anything else is unchanged."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and ctx.distributed:
        return torch.device("cuda", ctx.local_rank)
    return dev


def wrap_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.parallel.DistributedDataParallel:
    """``DistributedDataParallel(model)`` on ``device`` (its index as ``device_ids`` on CUDA).

    ``find_unused_parameters`` is the model's ``ddp_find_unused_parameters`` (default False): only
    a model that declares a skipped branch (e.g. CoDANO's encodings of variables outside its
    default order) pays for the per-step search of unused parameters.
    """
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    find = bool(getattr(model, "ddp_find_unused_parameters", False))
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find)


def per_rank_batch(batch_size: int, world_size: int, grad_accum_steps: int = 1) -> tuple[int, int]:
    """``(b, m)``: samples per rank per optimiser step ``b = B / W`` and per micro-batch ``m = b / k``.

    Raises ``ConfigError`` naming ``train.batch_size`` when ``B`` is not a multiple of ``W · k``.
    """
    unit = world_size * grad_accum_steps
    if batch_size % unit:
        raise ConfigError(
            f"train.batch_size: expected a multiple of world size x train.grad_accum_steps = {world_size} x "
            f"{grad_accum_steps} = {unit} (the global batch is split evenly over ranks and micro-batches), "
            f"got {batch_size}"
        )
    b = batch_size // world_size
    return b, b // grad_accum_steps


def seed_everything(seed: int) -> None:
    """Seed ``random``, NumPy's global generator and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def all_reduce_sum(t: torch.Tensor, ctx: DistContext, group: Any = None) -> torch.Tensor:
    """Sum ``t`` over the ranks of ``group`` (default: all) in place (no-op in one process); returns ``t``."""
    if ctx.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    return t


@dataclass(frozen=True)
class DomainMesh:
    """The ``data × domain`` layout of the ranks (module docstring): this rank's coordinates ``data_rank`` of
    ``data_size`` and ``domain_rank`` of ``domain_size``, the groups of its row and column (``None`` in one
    process) and the ``DeviceMesh``."""

    data_rank: int = 0
    data_size: int = 1
    domain_rank: int = 0
    domain_size: int = 1
    data_group: Any = None
    domain_group: Any = None
    mesh: Any = None

    @property
    def split(self) -> bool:
        """Whether each sample's points are split over the ranks of a domain group."""
        return self.domain_size > 1


def init_domain_mesh(ctx: DistContext, domain_parallel: int, device: str | torch.device = "cpu") -> DomainMesh:
    """The :class:`DomainMesh` of ``ctx`` with ``domain_parallel`` ranks per mesh (all ranks call it); errors name
    ``train.domain_parallel``."""
    if isinstance(domain_parallel, bool) or not isinstance(domain_parallel, int) or domain_parallel < 1:
        raise ConfigError(f"train.domain_parallel: expected an integer >= 1, got {domain_parallel!r}")
    if domain_parallel == 1:
        return DomainMesh(data_rank=ctx.rank, data_size=ctx.world_size)
    if ctx.world_size % domain_parallel:
        raise ConfigError(f"train.domain_parallel: expected a divisor of the number of ranks ({ctx.world_size}: "
                          f"torchrun --nproc-per-node x --nnodes), got {domain_parallel}")
    from torch.distributed.device_mesh import init_device_mesh

    shape = (ctx.world_size // domain_parallel, domain_parallel)
    mesh = init_device_mesh(torch.device(device).type, shape, mesh_dim_names=("data", "domain"))
    p, d = mesh.get_coordinate()
    return DomainMesh(data_rank=p, data_size=shape[0], domain_rank=d, domain_size=domain_parallel,
                      data_group=mesh.get_group("data"), domain_group=mesh.get_group("domain"), mesh=mesh)


def gather_objects(obj: Any, ctx: DistContext) -> list[Any]:
    """Every rank's ``obj``, in rank order (``[obj]`` in one process)."""
    if not ctx.distributed:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()


class ResumableDistributedSampler(DistributedSampler):
    """torch's ``DistributedSampler`` (shuffled, seeded) that can start an epoch after ``start_batch``
    batches of ``batch_size`` samples.

    Shapes:
        yields ``ceil(N / W) - start_batch · batch_size`` dataset indices per epoch (at least 0).
    """

    def __init__(self, dataset: Dataset, *, num_replicas: int, rank: int, seed: int, batch_size: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=False)
        self.batch_size = batch_size
        self.start_batch = 0

    @property
    def batches_per_epoch(self) -> int:
        return math.ceil(self.num_samples / self.batch_size)

    def set_position(self, epoch: int, start_batch: int = 0) -> None:
        """Epoch ``epoch`` (0-based, which fixes the permutation), skipping its first ``start_batch`` batches."""
        if not 0 <= start_batch <= self.batches_per_epoch:
            raise ValueError(f"start_batch: expected 0..{self.batches_per_epoch}, got {start_batch}")
        self.set_epoch(epoch)
        self.start_batch = start_batch

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        return iter(indices[self.start_batch * self.batch_size:])

    def __len__(self) -> int:
        return max(0, self.num_samples - self.start_batch * self.batch_size)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "start_batch": self.start_batch, "seed": self.seed,
                "num_replicas": self.num_replicas, "batch_size": self.batch_size}
