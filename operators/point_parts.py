r"""One mesh in parts: chunked evaluation and domain parallelism for the operators whose points couple only
through sums over the points (Transolver, LinearNO, GNOT, ONO).

Such an operator is a pointwise lift, then *stages*, then a pointwise head. A stage is a sum over the points
followed by a pointwise map:

.. math::
    S = \sum_j w_j\, f(u_j) \qquad\text{(partial sums: } S = \textstyle\sum_p S_p \text{ over parts } p),\qquad
    u_i \leftarrow g(u_i, S),

with ``u_i`` the per-point state (for example the token ``h_i`` of a Transolver block, ``f`` its slice weights
times its features, ``g`` the deslice, the residuals and the MLP). :func:`run_stages` runs the stages on the points
in one of three ways, which give the same result up to the order of the additions (tested to 1e-12 relative in
float64):

* **whole** (the default): ``S`` from all points at once, then ``g``;
* **chunked** (:func:`chunked_points`, for evaluation where the activations of all points do not fit): the partial
  sums of each chunk of ``chunk`` points are added up (:func:`sciattn.partial_sums.add_partial_sums`) before ``g`` is
  applied chunk by chunk. Only the per-point state of the stage (a few ``(B, N, C)`` tensors) is held for all
  points; every intermediate of ``f`` and ``g`` is held for one chunk at a time (under ``torch.no_grad``);
* **domain-parallel** (:func:`domain_parallel`, :func:`set_domain_group`): each rank of a process group holds a part
  of the points of the same mesh; the partial sums are all-reduced over the group
  (:class:`sciattn.partial_sums.RankSums`, differentiable), so every rank applies ``g`` with the ``S`` of the whole
  mesh. The quadrature weights are normalised by their sum over every rank's points. Chunks and ranks combine.

The protocol an operator follows to run domain-parallel (what the trainer reads; the ball-tree operators Erwin
and BSA implement it too, :mod:`._domain_geometry`):

* the class attribute ``supports_domain_parallel = True`` (``supports_chunked_points`` for chunked evaluation);
* ``split_points(batch, part, parts)``: the points of a padded batch (``x``, ``y``, ``pos``, ``weights``,
  ``mask`` ``(B, N, ·)``) that part ``part`` of ``parts`` holds — here contiguous runs of about ``N / parts``
  points (:func:`contiguous_split`; any split is right for these operators, whose outputs do not depend on the
  point order); a ball-tree operator splits at whole units of its layout (cells, windows), so that its
  attention needs no communication;
* ``forward`` reads ``self.point_plan`` (:class:`PointPlan`) and sums every coupling over its group;
* optionally ``domain_parallel_refusal()``: a sentence naming the option for a configuration that cannot split
  exactly (None where it can); :func:`check_supports` raises it.

An operator without the capability is refused with an error naming it (:func:`check_supports`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from sciattn.partial_sums import LocalSums, PartialSums, RankSums, add_partial_sums

__all__ = ["PointPlan", "Stage", "check_supports", "chunked_points", "contiguous_split", "domain_parallel",
           "run_stages", "set_domain_group", "split_points", "supporting_operators"]

POINT_KEYS = ("x", "y", "pos", "weights", "mask")


class Stage(NamedTuple):
    """``partial(state, w) -> (partial sums, cache)`` over the points given, and
    ``apply(state, w, sums, cache) -> state`` pointwise with the sums over all points (``cache``: what
    ``partial`` computed on the same points, or ``None`` when it must be recomputed)."""

    partial: Callable[[tuple, torch.Tensor], tuple[PartialSums, Any]]
    apply: Callable[[tuple, torch.Tensor, PartialSums, Any], tuple]


@dataclass(frozen=True)
class PointPlan:
    """How an operator's sums over points are formed: ``group`` (a process group over whose ranks the points
    are split; ``None``: every point is in this process) and ``chunk`` (evaluate in chunks of this many points;
    ``None``: all at once)."""

    group: Any = None
    chunk: int | None = None

    def reducer(self):
        return LocalSums() if self.group is None else RankSums(self.group)


def _take(state: tuple, s: slice) -> tuple:
    return tuple(t[:, s] for t in state)


def _cat(states: list[tuple]) -> tuple:
    return tuple(torch.cat(ts, dim=1) for ts in zip(*states, strict=True))


def run_stages(op: nn.Module, a: torch.Tensor, pos: torch.Tensor, w: torch.Tensor, plan: PointPlan) -> torch.Tensor:
    """``op.readout(stages(op.lift_state(a, pos)))`` with the sums over points formed as ``plan`` says.

    ``op`` defines ``lift_state(a (B, N, C_in), pos (B, N, d)) -> state`` (a tuple of ``(B, N, ·)`` tensors),
    ``stages() -> list[Stage]`` and ``readout(state) -> (B, N, C_out)``; ``w`` ``(B, N)`` are the quadrature weights,
    normalised over all points (every rank's)."""
    sums = plan.reducer()
    n = a.shape[1]
    if plan.chunk is None or plan.chunk >= n:
        state = op.lift_state(a, pos)
        for stage in op.stages():
            part, cache = stage.partial(state, w)
            state = stage.apply(state, w, sums(part), cache)
        return op.readout(state)
    parts = [slice(i, min(i + plan.chunk, n)) for i in range(0, n, plan.chunk)]
    state = _cat([op.lift_state(a[:, s], pos[:, s]) for s in parts])
    for stage in op.stages():
        total = None
        for s in parts:
            total = add_partial_sums(total, stage.partial(_take(state, s), w[:, s])[0])
        total = sums(total)
        state = _cat([stage.apply(_take(state, s), w[:, s], total, None) for s in parts])
    return torch.cat([op.readout(_take(state, s)) for s in parts], dim=1)


# ----------------------------------------------------------------------------------------------- the protocol
def _name(model: nn.Module) -> str:
    return getattr(model, "operator_name", type(model).__name__)


def supporting_operators(capability: str = "supports_domain_parallel") -> list[str]:
    """The registered operators whose class has ``capability``."""
    from .registry import list_operators, operator_class

    return [n for n in list_operators() if getattr(operator_class(n), capability, False)]


def check_supports(model: nn.Module, capability: str = "supports_domain_parallel", key: str = "model") -> None:
    """A ``ValueError`` naming ``key`` (the argument or config key that asked for it), the operator and the
    operators that have ``capability``, when ``model`` does not."""
    if getattr(model, capability, False):
        refusal = getattr(model, "domain_parallel_refusal", None)
        why = refusal() if capability == "supports_domain_parallel" and callable(refusal) else None
        if why:
            raise ValueError(f"{key}: operator {_name(model)!r} ({type(model).__name__}) does not run domain-parallel "
                             f"as configured: {why}")
        return
    what = {"supports_domain_parallel": "run domain-parallel (one mesh split over the ranks of a process group)",
            "supports_chunked_points": "evaluate in chunks of points"}[capability]
    raise ValueError(f"{key}: operator {_name(model)!r} ({type(model).__name__}) does not {what}; operators that "
                     f"do: {supporting_operators(capability)}")


def _check_chunk(chunk: object) -> int | None:
    if chunk is None:
        return None
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk_points: expected a positive int (points per chunk) or None, got {chunk!r}")
    return chunk


def set_domain_group(model: nn.Module, group: Any) -> None:
    """From now on ``model`` holds a part of the points of each mesh it is given and sums every coupling over the
    ranks of ``group`` (``None``: back to one process). Raises for an operator without the capability."""
    check_supports(model, "supports_domain_parallel", "model")
    plan = getattr(model, "point_plan", PointPlan())
    if group is not None:
        RankSums(group)  # checks that torch.distributed is initialised
    model.point_plan = PointPlan(group, plan.chunk)


@contextlib.contextmanager
def domain_parallel(model: nn.Module, group: Any) -> Iterator[nn.Module]:
    """:func:`set_domain_group` for the body of a ``with`` block (the previous plan is restored after)."""
    old = getattr(model, "point_plan", PointPlan())
    set_domain_group(model, group)
    try:
        yield model
    finally:
        model.point_plan = old


@contextlib.contextmanager
def chunked_points(model: nn.Module, chunk: int | None) -> Iterator[nn.Module]:
    """``model`` evaluates in chunks of ``chunk`` query points in the body of a ``with`` block (``None``: no
    chunks, any operator). Memory is bounded only without gradients (``torch.no_grad``)."""
    chunk = _check_chunk(chunk)
    if chunk is None:
        yield model
        return
    check_supports(model, "supports_chunked_points", "chunk_points")
    old = getattr(model, "point_plan", PointPlan())
    model.point_plan = PointPlan(old.group, chunk)
    try:
        yield model
    finally:
        model.point_plan = old


def contiguous_split(n: int, part: int, parts: int) -> slice:
    """Points ``[start, stop)`` of part ``part`` of ``parts``: contiguous runs, sizes differing by at most one."""
    for name, value in (("n", n), ("parts", parts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < parts:
        raise ValueError(f"part: expected an int in [0, {parts}), got {part!r}")
    if n < parts:
        raise ValueError(f"parts: expected at most one part per point ({n} points), got {parts}")
    base, extra = divmod(n, parts)
    start = part * base + min(part, extra)
    return slice(start, start + base + (1 if part < extra else 0))


def split_points(batch: dict[str, torch.Tensor], part: int, parts: int) -> dict[str, torch.Tensor]:
    """The entries of a padded point batch (:data:`POINT_KEYS`, point axis 1) restricted to part ``part`` of
    ``parts`` (:func:`contiguous_split`); other entries unchanged."""
    s = contiguous_split(int(batch["x"].shape[1]), part, parts)
    return {k: (v[:, s] if k in POINT_KEYS else v) for k, v in batch.items()}
