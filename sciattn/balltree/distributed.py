r"""Domain-parallel ball attention: each rank holds whole balls, so attention needs no communication.

Ball attention only couples points of the same ball,

.. math::
    z_i = \frac{\sum_{j \in \beta(i)} w_j e^{s_{ij}} v_j}{\sum_{j \in \beta(i)} w_j e^{s_{ij}}} ,

and in tree order every ball is a contiguous slice of ``m`` tokens. Splitting the tree-ordered
tokens at ball boundaries (:func:`ball_shard`) therefore gives each rank a set of complete balls
whose outputs equal the full layer's outputs on those balls exactly; only the parameter
gradients are summed across ranks (as ``DistributedDataParallel`` or :func:`all_reduce_gradients`
does). Build the tree once on the full cloud (or load a cached one) and shard its order.

Shapes: tree-ordered tokens ``(B, P, C)`` with ``P`` a multiple of the ball size ``m``; a rank's
shard is ``(B, P_r, C)`` with ``P_r`` a multiple of ``m``.
"""

from __future__ import annotations

import torch.distributed as dist
from torch import nn

from .._checks import check_positive_int

__all__ = ["ball_shard", "all_reduce_gradients"]


def ball_shard(n_tokens: int, ball_size: int, rank: int, world_size: int) -> slice:
    """The tree-order slice of ``rank``: a contiguous run of whole balls, balls split as evenly as possible."""
    check_positive_int("n_tokens", n_tokens)
    check_positive_int("ball_size", ball_size)
    check_positive_int("world_size", world_size)
    if n_tokens % ball_size:
        raise ValueError(f"n_tokens: expected a multiple of ball_size={ball_size} (tree order), got {n_tokens}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank: expected an int in [0, {world_size}), got {rank!r}")
    n_balls = n_tokens // ball_size
    if n_balls < world_size:
        raise ValueError(f"world_size: expected at most one rank per ball ({n_balls} balls), got {world_size}")
    base, extra = divmod(n_balls, world_size)
    start = rank * base + min(rank, extra)
    stop = start + base + (1 if rank < extra else 0)
    return slice(start * ball_size, stop * ball_size)


def all_reduce_gradients(module: nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Sum the parameter gradients of ``module`` over the ranks of ``group`` (in place)."""
    for p in module.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)

