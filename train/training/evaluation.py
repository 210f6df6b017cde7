"""Evaluation of a trained operator on a dataset: mean per-sample relative L2 and H1 errors of
the decoded prediction and the time per sample, in one process or sharded over ranks.

For samples ``i = 1..n`` with prediction ``û_i = D(G(E(a_i)))`` (``E``/``D`` the input/output
normalisers) the reported errors are ``(1/n) Σ_i ‖û_i − u_i‖ / ‖u_i‖`` in the discrete L2 norm and
in neuraloperator's finite-difference H1 norm. Sharded: rank ``r`` of ``W`` takes samples
``r, r + W, ...``, the sums ``Σ_i`` and ``n`` are added over ranks (every sample counted once, as in
one process) and the time is the slowest rank's. With a domain mesh (:class:`.distributed.DomainMesh`)
the samples are sharded over its data coordinates and each rank of a domain group evaluates its part of
every sample's points (the operator and the error sum over the group).

Point samples (``pos``, :mod:`.batching`) are padded per batch and their error is the masked,
quadrature-weighted relative L2 error of the real points (:func:`.losses.relative_l2_points`); H1 is
not defined on point sets and is reported as ``None``. When the targets hold more channels than the
model predicts (later frames of a time series), the prediction is compared with the first ones
(the one-step error; :mod:`.rollout` gives the error over the whole horizon).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from .batching import collate, is_point_batch, predict, to_device
from .distributed import DistContext, DomainMesh, all_reduce_sum
from .losses import relative_h1, relative_l2, relative_l2_points

__all__ = ["evaluate_dataset", "evaluate_sharded"]


def _error_sums(model, dataset, *, x_normalizer, y_normalizer, spatial_dims, batch_size, device,
                domain: DomainMesh | None = None) -> list[float]:
    """``[Σ rel_l2, Σ rel_h1, n, seconds]`` over ``dataset`` (the global RNG is not touched); with a split
    ``domain``, over this rank's part of each sample's points, the errors summed over its domain group."""
    l2_sum = h1_sum = 0.0
    n = 0
    t0 = time.perf_counter()
    split = domain is not None and domain.split
    for batch in DataLoader(dataset, batch_size=batch_size, generator=torch.Generator(), collate_fn=collate):
        batch = to_device(batch, device)
        if split:
            batch = model.split_points(batch, domain.domain_rank, domain.domain_size)
        x, y = batch["x"], batch["y"]
        pred = predict(model, batch, x_normalizer, y_normalizer)
        if is_point_batch(batch):
            y = y[..., :pred.shape[-1]]
            l2_sum += float(relative_l2_points(pred, y, batch["mask"], batch["weights"],
                                               group=domain.domain_group if split else None)) * x.shape[0]
            h1_sum = float("nan")
        else:
            y = y[:, :pred.shape[1]]
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
    chunk_points: int | None = None,
) -> dict[str, float]:
    """Mean per-sample relative L2 and H1 errors of the decoded prediction, and seconds per sample.

    ``chunk_points``: evaluate the operator in chunks of that many query points (its sums over all points are
    formed first; the same result, with the activations of one chunk at a time; see
    :func:`sciattn.operators.point_parts.chunked_points`)."""
    from sciattn.operators.point_parts import chunked_points

    model.eval()
    with chunked_points(model, chunk_points):
        l2, h1, n, seconds = _error_sums(model, dataset, x_normalizer=x_normalizer, y_normalizer=y_normalizer,
                                         spatial_dims=spatial_dims, batch_size=batch_size, device=device)
    return _result(l2, h1, n, seconds)


def _result(l2: float, h1: float, n: float, seconds: float) -> dict[str, float]:
    h1_mean = h1 / n
    return {"rel_l2": l2 / n, "rel_h1": None if h1_mean != h1_mean else h1_mean, "seconds_per_sample": seconds / n,
            "n_samples": int(n)}


@torch.no_grad()
def evaluate_sharded(model: nn.Module, dataset: Dataset, ctx: DistContext, *, x_normalizer: nn.Module,
                     y_normalizer: nn.Module, spatial_dims: int, batch_size: int = 32,
                     device: str | torch.device = "cpu", domain: DomainMesh | None = None) -> dict[str, float]:
    """:func:`evaluate_dataset` with the samples sharded over the ranks of ``ctx`` (all ranks call it), or over
    the data coordinates of ``domain``, each sample's points split over its domain group."""
    kw = {"x_normalizer": x_normalizer, "y_normalizer": y_normalizer, "spatial_dims": spatial_dims,
          "batch_size": batch_size, "device": device}
    if not ctx.distributed:
        return evaluate_dataset(model, dataset, **kw)
    model.eval()
    domain = domain if domain is not None else DomainMesh(data_rank=ctx.rank, data_size=ctx.world_size)
    shard = Subset(dataset, range(domain.data_rank, len(dataset), domain.data_size))
    sums = _error_sums(model, shard, domain=domain, **kw) if len(shard) else [0.0, 0.0, 0.0, 0.0]
    totals = torch.tensor(sums[:3], dtype=torch.float64, device=device)
    l2, h1, n = (float(v) for v in all_reduce_sum(totals, ctx, group=domain.data_group))
    seconds = torch.tensor([sums[3]], dtype=torch.float64, device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # ranks run concurrently
    return _result(l2, h1, n, float(seconds))
