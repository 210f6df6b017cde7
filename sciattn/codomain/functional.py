"""Functional codomain attention (CoDA-NO) with quadrature weights, variable masks, backend
dispatch and a domain-parallel form."""

from __future__ import annotations

import math

import torch

from .._attention_inputs import choose_backend, zero_padding
from .._backend_registry import (
    register_backend,
    torch_backend,
)
from .._checks import (
    check_attention_dtypes,
    check_quadrature_weights,
    check_rank,
    check_tensor,
    values_checkable,
)
from .reference import codomain_logits_reference, codomain_reference

__all__ = ["codomain_attention", "codomain_logits"]


def _check_weights_on_every_rank(weights: torch.Tensor, group) -> None:
    """:func:`check_quadrature_weights` on this rank's points; with ``group`` the verdict is agreed over
    the group first (an all-reduce of one flag), so every rank raises together instead of one rank
    raising while the others wait in the attention's all-reduce."""
    try:
        check_quadrature_weights("weights", weights)
        local = None
    except ValueError as err:
        local = err
    if group is None or not values_checkable(weights):
        if local is not None:
            raise local
        return
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        if local is not None:
            raise local
        return  # the reducer names the missing process group
    flag = torch.tensor([0.0 if local is None else 1.0], device=weights.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if local is not None:
        raise local
    if flag.item() > 0:
        raise ValueError("weights: expected non-negative finite values at every point on every rank of group, got "
                         "an invalid weight on another rank")


def _check_inputs(q, k, v, weights, var_mask, group=None, validate=True):
    check_attention_dtypes(q, k, v, weights=weights)
    check_rank("q", q, 5, "(B, H, V, N, D)")
    check_rank("k", k, 5, "(B, H, V, N, D)")
    if tuple(q.shape) != tuple(k.shape):
        raise ValueError(f"q: expected the shape of k {tuple(k.shape)} (B, H, V, N, D), got {tuple(q.shape)}")
    b, h, nv, n, _ = k.shape
    if v is not None:
        check_rank("v", v, 5, "(B, H, V, N, E)")
        if tuple(v.shape[:4]) != (b, h, nv, n):
            raise ValueError(f"v: expected shape (B={b}, H={h}, V={nv}, N={n}, E) to match k, got {tuple(v.shape)}")
    if nv == 0 or n == 0:
        raise ValueError(f"k: expected at least one variable and one point, got V={nv}, N={n}")
    if weights is not None:
        check_tensor("weights", weights)
        if tuple(weights.shape) not in ((n,), (b, n)):
            raise ValueError(
                f"weights: expected shape ({n},) or ({b}, {n}) matching the points of k, got {tuple(weights.shape)}"
            )
        if validate:
            _check_weights_on_every_rank(weights, group)
    if var_mask is not None:
        check_tensor("var_mask", var_mask)
        if tuple(var_mask.shape) != (b, nv):
            raise ValueError(f"var_mask: expected shape ({b}, {nv}) (batch, variables), got {tuple(var_mask.shape)}")
        if var_mask.dtype != torch.bool:
            raise TypeError(f"var_mask: expected dtype torch.bool, got {var_mask.dtype}")
        if not torch.compiler.is_compiling() and not bool(var_mask.any(dim=1).all()):
            raise ValueError("var_mask: expected at least one present variable per sample, got a sample with none")


def _reducer(group):
    """Sum over the ranks of ``group`` with gradients (identity when ``group`` is None)."""
    if group is None:
        return lambda t: t
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(f"group: expected a process group of an initialised torch.distributed, got {group!r}")
    from torch.distributed.nn.functional import all_reduce

    return lambda t: all_reduce(t, op=dist.ReduceOp.SUM, group=group)


def _scale(temperature, head_dim, n_heads, like):
    """``1/temperature`` (float or tensor of shape () or (H,)), default ``1/sqrt(D)``."""
    if temperature is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(temperature, torch.Tensor):
        if temperature.dim() > 1 or temperature.numel() not in (1, n_heads):
            raise ValueError(f"temperature: expected a float or a tensor of shape () or ({n_heads},), "
                             f"got shape {tuple(temperature.shape)}")
        return (1.0 / temperature.to(like.dtype)).reshape(1, -1, 1, 1)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature: expected a positive float or None, got {temperature!r}")
    return 1.0 / float(temperature)


def _weights(weights, shape, like, reduce, validate=True):
    """Point weights ``(B, N)`` divided by their total over the whole (possibly distributed) domain."""
    b, n = shape
    if weights is None:
        w = torch.ones(b, n, dtype=like.dtype, device=like.device)
    else:
        w = weights.to(dtype=like.dtype, device=like.device)
        w = (w.unsqueeze(0) if w.dim() == 1 else w).expand(b, n)
    total = reduce(w.sum(dim=1, keepdim=True))  # over the whole domain: one rank may hold only zeros
    if validate and weights is not None and values_checkable(total) and not bool((total > 0).all()):
        s = int((~(total[:, 0] > 0)).nonzero()[0])
        raise ValueError(
            f"weights: expected a positive total weight over the domain of every sample (scores are "
            f"normalised by it), got {total[s, 0].item()} in sample {s}"
        )
    return w / total


def _zero_absent(t, var_mask):
    return t if var_mask is None else zero_padding(var_mask[:, None, :, None, None], t)[0]


def codomain_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weights: torch.Tensor | None = None,
    var_mask: torch.Tensor | None = None,
    temperature: float | torch.Tensor | None = None,
    backend: str | None = None,
    group=None,
    *,
    validate: bool = True,
) -> torch.Tensor:
    r"""Softmax attention between physical variables whose tokens are functions (CoDA-NO).

    .. math::
        s_{ab} = \frac{1}{\mu(\Omega)}\int_\Omega q_a(x)\cdot k_b(x)\, d\mu(x)
               \approx \sum_x w_x\, q_a(x)\cdot k_b(x), \qquad
        \mathrm{out}_a(x) = \sum_b \operatorname{softmax}_b\big(s_{ab}/\tau\big)\, v_b(x)

    with ``w`` the quadrature weights normalised to sum to one over the domain and
    ``τ = temperature`` (default ``sqrt(D)``). Because the score is a quadrature of an integral,
    the logits converge when the grid is refined; neuraloperator's ``CODALayer`` divides the
    plain sum over ``N·D`` entries by ``sqrt(N·D)`` instead, so its logits grow like ``sqrt(N)``.

    Equivalent PyTorch for uniform weights, no mask, one rank::

        s = torch.einsum("bhand,bhcnd->bhac", q, k) / (q.shape[3] * q.shape[4] ** 0.5)
        out = torch.einsum("bhac,bhcne->bhane", s.softmax(-1), v)

    Domain-parallel form: with ``group`` every rank passes its own slice of the points (and
    of ``weights``); the ``(B, H, V, V)`` score sums and the weight total are summed over the
    group with an autograd-aware all-reduce, so outputs and gradients equal those of one
    process holding all points. Absent variables need no communication.

    Args:
        dtypes: q, k, v floating and of one dtype; weights floating of any precision; an integer or bool
            tensor is a TypeError naming the argument (the policy in :mod:`sciattn._checks`).
        q, k: ``(B, H, V, N, D)`` query and key functions sampled at ``N`` points.
        v: ``(B, H, V, N, E)`` value functions.
        weights: ``(N,)`` or ``(B, N)`` quadrature weights of the points (any total; they are
            normalised over the domain). ``None`` means uniform. They must be finite and ``>= 0``
            with a positive total per sample over the domain (all ranks), else ``ValueError``;
            the check reads values (a host sync on an accelerator) and is skipped under
            ``torch.compile``/``torch.export``/``torch.jit.trace``.
        var_mask: ``(B, V)`` bool, True for present variables. Absent ones are never attended
            to, their outputs are zero, and whatever they hold (even NaN) has no effect.
        temperature: positive float, or a tensor of shape ``()`` or ``(H,)`` (e.g. learned);
            ``None`` means ``sqrt(D)``.
        backend: force a backend by name (see :func:`sciattn.available_backends`).
        group: a ``torch.distributed`` process group over which the points are split.
        validate: check that the weights are finite and non-negative with a positive total (a full
            pass and host syncs on an accelerator; :class:`~sciattn.codomain.CodomainAttention` checks
            its input weights once and passes False for the normalised weights it builds). Shapes are
            always checked.

    Shapes:
        returns ``(B, H, V, N, E)``.
    """
    _check_inputs(q, k, v, weights, var_mask, group, validate)
    b, h, nv, n, d = k.shape
    chosen = choose_backend(
        "codomain", backend, q, v, mask=var_mask, weights=weights, grad_inputs=(q, k, v, weights, temperature)
    )
    reduce = _reducer(group)
    w = _weights(weights, (b, n), q, reduce, validate)
    q, k, v = (_zero_absent(t, var_mask) for t in (q, k, v))
    return chosen.fn(q, k, v, w, scale=_scale(temperature, d, h, q), var_mask=var_mask, reduce=reduce)


def codomain_logits(
    q: torch.Tensor,
    k: torch.Tensor,
    weights: torch.Tensor | None = None,
    var_mask: torch.Tensor | None = None,
    temperature: float | torch.Tensor | None = None,
    group=None,
) -> torch.Tensor:
    """The attention logits ``s_ab / τ`` of :func:`codomain_attention`, before the softmax
    (``-inf`` on absent key variables). For diagnostics such as the logit-variance benchmark.

    Shapes:
        q, k: ``(B, H, V, N, D)``; returns ``(B, H, V, V)`` (query variable, key variable).
    """
    _check_inputs(q, k, None, weights, var_mask, group)
    b, h, nv, n, d = k.shape
    reduce = _reducer(group)
    w = _weights(weights, (b, n), q, reduce)
    q, k = (_zero_absent(t, var_mask) for t in (q, k))
    logits = codomain_logits_reference(q, k, w, _scale(temperature, d, h, q), reduce)
    if var_mask is not None:
        logits = logits.masked_fill(~var_mask[:, None, None, :], float("-inf"))
    return logits


register_backend(torch_backend("codomain", "reference", codomain_reference))
