"""Evaluation of a trained operator on a dataset: mean per-sample relative L2 and H1 errors of
the decoded prediction and the time per sample, in one process or sharded over ranks.

For samples ``i = 1..n`` with prediction ``û_i = D(G(E(a_i)))`` (``E``/``D`` the input/output
normalisers) the reported errors are ``(1/n) Σ_i ‖û_i − u_i‖ / ‖u_i‖`` in the discrete L2 norm and
in neuraloperator's finite-difference H1 norm. Sharded: rank ``r`` of ``W`` takes samples
``r, r + W, ...``, the sums ``Σ_i`` and ``n`` are added over ranks (every sample counted once, as in
one process) and the time is the slowest rank's.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from .distributed import DistContext, all_reduce_sum
from .losses import relative_h1, relative_l2

__all__ = ["evaluate_dataset", "evaluate_sharded"]


def _error_sums(model, dataset, *, x_normalizer, y_normalizer, spatial_dims, batch_size, device) -> list[float]:
    """``[Σ rel_l2, Σ rel_h1, n, seconds]`` over ``dataset`` (the global RNG is not touched)."""
    l2_sum = h1_sum = 0.0
    n = 0
    t0 = time.perf_counter()
    for batch in DataLoader(dataset, batch_size=batch_size, generator=torch.Generator()):
        x, y = batch["x"].to(device), batch["y"].to(device)
        pred = y_normalizer.decode(model(x_normalizer.encode(x)))
        l2_sum += float(relative_l2(pred, y, spatial_dims)) * x.shape[0]
        h1_sum += float(relative_h1(pred, y, spatial_dims)) * x.shape[0]
        n += x.shape[0]
    return [l2_sum, h1_sum, float(n), time.perf_counter() - t0]


@torch.no_grad()
def evaluate_dataset(
    model: nn.Module,
    dataset: Dataset,
    *,
    x_normalizer: nn.Module,
    y_normalizer: nn.Module,
    spatial_dims: int,
    batch_size: int = 32,
    device: str | torch.device = "cpu",
) -> dict[str, float]:
    """Mean per-sample relative L2 and H1 errors of the decoded prediction, and seconds per sample."""
    model.eval()
    l2, h1, n, seconds = _error_sums(model, dataset, x_normalizer=x_normalizer, y_normalizer=y_normalizer,
                                     spatial_dims=spatial_dims, batch_size=batch_size, device=device)
    return {"rel_l2": l2 / n, "rel_h1": h1 / n, "seconds_per_sample": seconds / n, "n_samples": int(n)}


@torch.no_grad()
def evaluate_sharded(model: nn.Module, dataset: Dataset, ctx: DistContext, *, x_normalizer: nn.Module,
                     y_normalizer: nn.Module, spatial_dims: int, batch_size: int = 32,
                     device: str | torch.device = "cpu") -> dict[str, float]:
    """:func:`evaluate_dataset` with the samples sharded over the ranks of ``ctx`` (all ranks call it)."""
    kw = {"x_normalizer": x_normalizer, "y_normalizer": y_normalizer, "spatial_dims": spatial_dims,
          "batch_size": batch_size, "device": device}
    if not ctx.distributed:
        return evaluate_dataset(model, dataset, **kw)
    model.eval()
    shard = Subset(dataset, range(ctx.rank, len(dataset), ctx.world_size))
    sums = _error_sums(model, shard, **kw) if len(shard) else [0.0, 0.0, 0.0, 0.0]
    l2, h1, n = (float(v) for v in all_reduce_sum(torch.tensor(sums[:3], dtype=torch.float64, device=device), ctx))
    seconds = torch.tensor([sums[3]], dtype=torch.float64, device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # ranks run concurrently
    return {"rel_l2": l2 / n, "rel_h1": h1 / n, "seconds_per_sample": float(seconds) / n, "n_samples": int(n)}
