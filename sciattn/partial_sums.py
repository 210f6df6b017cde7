r"""Sums over the points of a set held in parts: the chunks of one process, or the ranks of a process group.

A layer that couples points through integrals over the domain — slice tokens, linear-attention moments, a
softmax over the points, a covariance — needs them only as sums over the points,

.. math::
    S = \sum_j w_j\, f(h_j) = \sum_p S_p ,\qquad S_p = \sum_{j \in \text{part } p} w_j\, f(h_j),

so when the points are split into parts, each part computes its *partial sums* ``S_p``, the partial sums are
combined into ``S``, and the layer is then applied pointwise on each part with the same ``S``. The parts are
either chunks of the points in one process (chunked evaluation: :func:`add_partial_sums` accumulates them) or
the ranks of a process group (domain parallelism: :class:`RankSums` all-reduces them, differentiably, through
``torch.distributed.nn.functional.all_reduce``).

A softmax over the points is a ratio of two sums of exponentials, ``Σ_j w_j e^{s_j} v_j / Σ_j w_j e^{s_j}``; each
part keeps its denominator relative to its own shift ``m_p = max_j (s_j + log w_j)`` and its mean
(:class:`ExpSums`, computed by :func:`exp_sums`), and parts are combined with the masses rescaled to the common
shift ``M = max_p m_p``: ``D = Σ_p e^{m_p - M} D_p``, ``mean = Σ_p e^{m_p - M} D_p mean_p / D``. The shifts carry no
gradient: the softmax does not depend on them.

Shapes: a partial sum is a tensor of any shape (the point axis already summed out) or an :class:`ExpSums`; a
layer's partial sums are a tuple of them, the same structure on every part.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["ExpSums", "LocalSums", "RankSums", "add_partial_sums", "exp_sums", "raise_together"]


@dataclass
class ExpSums:
    """A weighted softmax over some points, kept as ``den = Σ_j w_j e^{s_j - m}`` ``(...)`` and the mean
    ``mean = Σ_j w_j e^{s_j - m} v_j / den`` ``(..., E)``, with the shift ``m`` ``(...)`` (no gradient; ``-inf``
    where those points have no positive weight; ``mean`` is then 0). The mean, not the sum, is kept: it is
    bounded by the values, so it does not overflow in half precision however many points there are."""

    shift: torch.Tensor
    den: torch.Tensor
    mean: torch.Tensor

    def mass(self, shift: torch.Tensor) -> torch.Tensor:
        """``den`` relative to ``shift`` (``>=`` this one's shift): ``den e^{m - shift}``."""
        return self.den * torch.exp(self.shift - _finite(shift))  # e^{-inf} = 0 for a part without mass


PartialSums = tuple  # of torch.Tensor | ExpSums


def _finite(shift: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(shift), shift, torch.zeros((), dtype=shift.dtype, device=shift.device))


def _safe(den: torch.Tensor) -> torch.Tensor:
    return torch.where(den > 0, den, torch.ones((), dtype=den.dtype, device=den.device))


def exp_sums(logits: torch.Tensor, w: torch.Tensor, v: torch.Tensor) -> ExpSums:
    """:class:`ExpSums` of ``logits`` over their point axis ``-2``, with weights ``w`` (broadcast to ``logits``;
    zero drops a point), against the values ``v``.

    Shapes: ``logits`` ``(..., N, K)`` (``K`` softmaxes over the ``N`` points), ``w`` broadcastable to it,
    ``v`` ``(..., N, E)``; ``shift`` and ``den`` are ``(..., K)``, ``mean`` ``(..., K, E)``."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # exponentials and their sum in float32, as softmax is under autocast
    logw = torch.where(w > 0, w.clamp_min(torch.finfo(w.dtype).tiny).log().to(logits.dtype),
                       torch.full((), float("-inf"), dtype=logits.dtype, device=logits.device))
    z = logits + logw
    shift = z.detach().amax(dim=-2)
    e = torch.exp(z - _finite(shift).unsqueeze(-2))  # 0 where w = 0
    den = e.sum(dim=-2)
    return ExpSums(shift, den, (e / _safe(den).unsqueeze(-2)).to(v.dtype).transpose(-1, -2) @ v)


def _add(a, b):
    if isinstance(a, ExpSums):
        shift = torch.maximum(a.shift, b.shift)
        ma, mb = a.mass(shift), b.mass(shift)
        den = ma + mb
        mean = (ma[..., None] * a.mean + mb[..., None] * b.mean) / _safe(den)[..., None]
        return ExpSums(shift, den, mean.to(a.mean.dtype))
    return a + b


def add_partial_sums(total: PartialSums | None, part: PartialSums) -> PartialSums:
    """The partial sums of two disjoint sets of points (``total`` ``None``: ``part`` alone)."""
    if total is None:
        return part
    return tuple(_add(a, b) for a, b in zip(total, part, strict=True))


class LocalSums:
    """Every point is here: partial sums are already the sums (the identity)."""

    distributed = False

    def __call__(self, sums: PartialSums) -> PartialSums:
        return sums


def _all_reduce(t: torch.Tensor, op, group) -> torch.Tensor:
    """``torch.distributed.nn.functional.all_reduce`` (autograd: the backward of a sum is the sum of the
    cotangents over the ranks); its deprecation notice for the functional collectives is silenced, as those
    have no autograd before torch 2.6."""
    from torch.distributed.nn.functional import all_reduce

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return all_reduce(t, op=op, group=group)


class RankSums:
    """Partial sums of every rank of ``group`` (each holds a part of the points) added over the group.

    Plain sums go through one differentiable all-reduce (the tensors flattened into one buffer); the shifts of
    :class:`ExpSums` first through one all-reduce of their maxima (no gradient), then the rescaled sums with the
    plain ones. The backward of the sum all-reduce sums the cotangents over the ranks, so with each rank's loss
    its share of the total loss, every rank's gradient with respect to its own inputs is that of the total loss,
    and the parameter gradients of the total loss are the sum over the ranks of the local ones."""

    distributed = True

    def __init__(self, group) -> None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(f"group: expected a process group of an initialised torch.distributed, got {group!r}")
        self.group = group

    def __call__(self, sums: PartialSums) -> PartialSums:
        import torch.distributed as dist

        exps = [s for s in sums if isinstance(s, ExpSums)]
        shifts = {}
        if exps:
            flat = torch.cat([s.shift.detach().reshape(-1) for s in exps])
            dist.all_reduce(flat, op=dist.ReduceOp.MAX, group=self.group)
            for s, m in zip(exps, flat.split([s.shift.numel() for s in exps]), strict=True):
                shifts[id(s)] = m.view_as(s.shift)
        parts = []
        for s in sums:
            if isinstance(s, ExpSums):
                mass = s.mass(shifts[id(s)])
                parts += [mass, mass[..., None] * s.mean]
            else:
                parts.append(s)
        dtype = parts[0].dtype
        for p in parts[1:]:
            dtype = torch.promote_types(dtype, p.dtype)
        total = _all_reduce(torch.cat([p.reshape(-1).to(dtype) for p in parts]), dist.ReduceOp.SUM, self.group)
        pieces = iter(t.view_as(p).to(p.dtype)
                      for t, p in zip(total.split([p.numel() for p in parts]), parts, strict=True))
        out = []
        for s in sums:
            if isinstance(s, ExpSums):
                den, weighted = next(pieces), next(pieces)
                out.append(ExpSums(shifts[id(s)], den, (weighted / _safe(den)[..., None]).to(s.mean.dtype)))
            else:
                out.append(next(pieces))
        return tuple(out)

    def count(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over the group (no gradient)."""
        import torch.distributed as dist

        t = t.detach().clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t


def raise_together(group, checks: Sequence[Callable[[], object]]) -> None:
    """Run ``checks`` (input checks that raise ``ValueError`` or ``TypeError``) on this rank and agree on the
    verdict over ``group`` (one all-reduce of a flag), so every rank raises together instead of one raising
    while the others wait in a collective: the rank that failed raises its own error, the others an error
    saying another rank's input failed."""
    import torch.distributed as dist

    error: Exception | None = None
    try:
        for check in checks:
            check()
    except (ValueError, TypeError) as err:
        error = err
    if group is None:
        if error is not None:
            raise error
        return
    flag = torch.tensor([0.0 if error is None else 1.0])
    if dist.get_backend(group) == "nccl":
        flag = flag.cuda()
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if error is not None:
        raise error
    if float(flag.item()) > 0:
        raise ValueError("x: the input of another rank of the domain-parallel group failed its checks (that rank "
                         "names the argument); every rank stops")
