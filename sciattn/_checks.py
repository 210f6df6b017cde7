"""Input validation with messages that name the argument, what was expected and what was given.

Every public entry point of sciattn validates its inputs with these helpers before any
tensor arithmetic, so a user sees ``ValueError: q: expected a 4-D tensor (B, H, N, D), got
shape (3, 5)`` instead of a stack trace from inside torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch

__all__ = [
    "check_tensor",
    "check_rank",
    "check_finite",
    "check_floating",
    "check_attention_dtypes",
    "check_input_dtype",
    "check_finite_at",
    "check_min_grid",
    "check_dim",
    "check_positive_int",
    "check_heads",
    "check_positive_float",
    "check_backend_name",
    "check_choice",
    "check_file",
    "check_data_file",
    "unreadable_file",
    "assert_no_violation",
    "check_quadrature_weights",
    "check_some_true",
    "sanitize_padded_rows",
    "values_checkable",
]


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def check_tensor(name: str, value: object) -> torch.Tensor:
    """Return ``value`` if it is a tensor; raise ``TypeError`` naming ``name`` otherwise."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    return value


def check_rank(name: str, value: object, ranks: int | Sequence[int], layout: str = "") -> torch.Tensor:
    """Check that ``value`` is a tensor whose rank is in ``ranks``.

    ``layout`` describes the expected axes, e.g. ``"(B, N, C)"``, and is quoted in the error.
    """
    t = check_tensor(name, value)
    allowed = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    if t.dim() not in allowed:
        want = " or ".join(f"{r}-D" for r in allowed)
        lay = f" {layout}" if layout else ""
        raise ValueError(f"{name}: expected a {want} tensor{lay}, got shape {_shape(t)}")
    return t


def check_finite(name: str, value: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Raise ``ValueError`` if ``value`` holds NaN or Inf.

    With ``mask`` (broadcastable boolean, True = real entry), padded entries are ignored, so
    padding may hold anything.
    """
    bad = ~torch.isfinite(value)
    if mask is not None:
        bad = bad & mask
    if torch.compiler.is_compiling():  # torch.compile / torch.export: an in-graph assertion, no branch
        torch._assert_async(~bad.any(), f"{name}: expected finite values")
        return value
    if bool(bad.any()):
        n_nan = int((torch.isnan(value) & (bad)).sum())
        n_inf = int(bad.sum()) - n_nan
        raise ValueError(
            f"{name}: expected finite values, got {n_nan} NaN and {n_inf} Inf entries in a tensor of shape {_shape(value)}"
            f", the first at index {_first_index(bad)}"
        )
    return value


def check_dim(name: str, value: torch.Tensor, axis: int, expected: int, meaning: str = "") -> None:
    """Check ``value.shape[axis] == expected``; ``meaning`` names the axis in the message."""
    got = value.shape[axis]
    if got != expected:
        what = f" ({meaning})" if meaning else ""
        raise ValueError(
            f"{name}: expected size {expected} along axis {axis}{what}, got {got} (shape {_shape(value)})"
        )


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` as an int if it is a positive integer; raise otherwise. A symbolic size
    (``torch.SymInt``, under ``torch.export`` with dynamic dims) is returned as is: it is a size."""
    if isinstance(value, torch.SymInt):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value}")
    return value


def check_heads(name: str, width: object, n_heads: object) -> None:
    """A layer's ``width`` (argument ``name``) and ``n_heads``: positive ints, ``n_heads`` dividing ``width``."""
    check_positive_int(name, width)
    check_positive_int("n_heads", n_heads)
    if width % n_heads:
        raise ValueError(f"n_heads: expected a divisor of {name}={width}, got {n_heads}")


def check_positive_float(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite real number > 0 (an epsilon, a step); raise otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a positive float, got {type(value).__name__} {value!r}")
    if not (value > 0 and value != float("inf")):
        raise ValueError(f"{name}: expected a positive finite float, got {value!r}")
    return float(value)


def check_backend_name(op: str, backend: object) -> str | None:
    """Check at construction that a forced ``backend`` is registered for ``op`` (``None``: automatic),
    with the dispatcher's own wording, so a typo is not refused only at the first forward."""
    if backend is None:
        return None
    from ._dispatch import BackendError, backends_for

    names = [b.name for b in backends_for(op)]
    if backend not in names:
        raise BackendError(f"backend: expected one of {names} for op {op!r}, got {backend!r}")
    return backend


def check_per_axis_ints(name: str, value: object, d: int) -> tuple[int, ...]:
    """``value`` as a tuple of ``d`` positive ints; an int applies to every spatial axis."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,) * d
    if not isinstance(value, (tuple, list)) or len(value) != d:
        raise ValueError(f"{name}: expected an int or {d} ints (one per spatial axis), got {value!r}")
    return tuple(check_positive_int(name, v) for v in value)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """Check that ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {sorted(choices)}, got {value!r}")
    return value  # type: ignore[return-value]


def check_file(name: str, path: str | os.PathLike) -> Path:
    """Return ``path`` as a ``Path`` if it is an existing file; ``FileNotFoundError`` naming it otherwise."""
    p = Path(path)
    if not p.is_file():
        where = "a directory" if p.is_dir() else "missing"
        raise FileNotFoundError(f"{name}: expected an existing file, got {str(p)!r} ({where})")
    return p


def check_data_file(name: str, path: str | os.PathLike) -> Path:
    """:func:`check_file`, and the file must not be empty: ``ValueError`` ``name: 'PATH' is empty (0 bytes)``."""
    p = check_file(name, path)
    if p.stat().st_size == 0:
        raise ValueError(f"{name}: {str(p)!r} is empty (0 bytes)")
    return p


def _cause(err: BaseException) -> str:
    """A library's error as one short line: the first line, h5py's ``Unable to ... (cause)`` unwrapped,
    torch's advice after the first sentence dropped, the type named when the text says little."""
    import re

    lines = str(err).strip().splitlines()
    text = lines[0].strip() if lines else ""
    m = re.match(r"^Unable to [^(]*\((.*)\)$", text)
    if m:
        text = m.group(1)
    if len(text) > 160 and ". " in text:
        text = text.split(". ", 1)[0]
    if len(text.split()) < 3:  # "101", "" (EOFError), a bare key: say what raised it
        text = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return text


def unreadable_file(name: str, path: str | os.PathLike, what: str, lib: str, err: BaseException) -> ValueError:
    """The error for a file its reader could not parse, in one line with the path and the cause:
    ``name: 'PATH' is truncated or corrupt, could not read it as WHAT (LIB: cause)``; an empty file
    is reported as such. Returned, not raised (``raise unreadable_file(...) from err``)."""
    p = Path(path)
    try:
        if p.stat().st_size == 0:
            return ValueError(f"{name}: {str(p)!r} is empty (0 bytes)")
    except OSError:
        pass
    return ValueError(f"{name}: {str(p)!r} is truncated or corrupt, could not read it as {what} ({lib}: {_cause(err)})")


def assert_no_violation(bad: torch.Tensor, message: str, exc: type[Exception] = ValueError) -> None:
    """Raise ``exc(message)`` if any entry of the bool tensor ``bad`` is True.

    On CPU in eager mode this is an ordinary check. Under ``torch.compile`` it is an in-graph
    ``torch._assert_async`` with the message. On an accelerator in eager mode it is the
    message-less ``torch._assert_async``, a device-side assertion, so validation never forces a
    host sync (the message overload is not asynchronous there); a failure then surfaces as a
    device assertion, and the same call on CPU tensors gives the message.
    """
    if torch.compiler.is_compiling():
        torch._assert_async(~bad.any(), message)
    elif bad.device.type != "cpu":
        torch._assert_async(~bad.any())
    elif bool(bad.any()):
        raise exc(message)


def values_checkable(*tensors: torch.Tensor | None) -> bool:
    """Whether checks that read tensor *values* should run: not while ``torch.compile`` /
    ``torch.export`` or ``torch.jit.trace`` records a graph, and not for meta or fake tensors.

    Such checks force a host sync on an accelerator (they read the values back); under tracing
    they are skipped, so a compiled or exported graph carries no value checks."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    for t in tensors:
        if t is None:
            continue
        if t.device.type == "meta" or isinstance(t, torch._subclasses.fake_tensor.FakeTensor):
            return False
    return True


def _first_index(bad: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in bad.nonzero()[0])


def check_quadrature_weights(
    name: str,
    weights: torch.Tensor | None,
    mask: torch.Tensor | None = None,
    *,
    need_mass: bool = False,
    mask_name: str = "mask",
) -> torch.Tensor | None:
    """The package's policy for quadrature weights and padding masks, in one place.

    - At real points (``mask`` True, or everywhere without a mask) ``weights`` must be finite and
      ``>= 0``; a zero weight removes the point. Padded points (``mask`` False) may hold anything,
      NaN and ±inf included: they are never read.
    - With ``need_mass`` (an attention that divides by the total weight, e.g. Galerkin's
      normalised quadrature) every sample needs at least one real point (a True ``mask`` entry)
      and a positive total weight over its real points.

    ``weights`` is ``(N,)`` or ``(B, N)`` (or any shape broadcastable to ``mask``); ``mask`` is
    the bool ``(B, N)`` of real points; the sample axis is the first one of the broadcast shape
    (a 1-D ``weights`` without mask is one sample). Violations are ``ValueError`` naming the
    argument, what was expected and the first offending value and index, e.g.
    ``weights: expected non-negative finite values at unmasked points, got -0.5 at index (0, 3)``.

    The check reads values, which on an accelerator costs a host sync; it is skipped while
    tracing or compiling (see :func:`values_checkable`). Returns ``weights``.
    """
    if not values_checkable(weights, mask):
        return weights
    if mask is not None and need_mass:
        check_some_true(mask_name, mask)
    if weights is None:
        return weights
    w = weights if mask is None else weights.expand(mask.shape)
    where = "at every point" if mask is None else "at unmasked points"
    bad = ~(torch.isfinite(w) & (w >= 0))
    if mask is not None:
        bad = bad & mask
    if bool(bad.any()):
        idx = _first_index(bad)
        raise ValueError(f"{name}: expected non-negative finite values {where}, got {w[idx].item()} at index {idx}")
    if need_mass:
        real = w if mask is None else torch.where(mask, w, torch.zeros((), dtype=w.dtype, device=w.device))
        total = real.reshape(real.shape[0], -1).sum(dim=1) if real.dim() > 1 else real.sum()[None]
        none = ~(total > 0)
        if bool(none.any()):
            s = _first_index(none)[0]
            raise ValueError(
                f"{name}: expected a positive total weight {where} of every sample (the attention divides by it), "
                f"got {total[s].item()} in sample {s}"
            )
    return weights


def check_some_true(name: str, mask: torch.Tensor) -> None:
    """``mask`` (bool, samples first) needs a True entry in every sample; skipped while tracing."""
    if values_checkable(mask):
        empty = ~mask.reshape(mask.shape[0], -1).any(dim=1)
        if bool(empty.any()):
            raise ValueError(
                f"{name}: expected at least one True entry (real point) per sample, "
                f"got none in sample {_first_index(empty)[0]} of {mask.shape[0]}"
            )


def sanitize_padded_rows(t: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``t`` with its non-finite entries in padded rows (``keep`` False, broadcastable) read as zero.

    Finite entries are kept bit for bit, so a padded query row is still computed from what it
    holds; only NaN and ±inf (which would turn ``0 · NaN`` into NaN gradients) are replaced.
    A ``torch.where``, not a product: ``0 · NaN`` is NaN."""
    return torch.where(keep | torch.isfinite(t), t, torch.zeros((), dtype=t.dtype, device=t.device))


# --------------------------------------------------------------------------- dtype and NaN policy
#
# The package's policy for dtypes (issue 23), in one place:
#
# - Functionals (``galerkin_attention``, ``weighted_softmax_attention``, ``neighborhood_attention``,
#   ``window_attention``, ``codomain_attention``, ``ball_attention``, ``spherical_*attention``) take
#   floating ``q``, ``k``, ``v`` of one dtype. Auxiliary real-valued inputs (quadrature ``weights``,
#   positions, ``bias``, ``sigma``, ``distance_scale``) must be floating too, of any precision: the
#   functional reads them at the precision it computes in (they are not required to match ``q``).
#   An integer or bool tensor where a floating one is expected is a ``TypeError`` naming the
#   argument, what was expected and the dtype given (:func:`check_attention_dtypes`).
# - Layers and operators compute in their parameters' dtype: a floating input of another dtype is
#   a ``TypeError`` naming the argument, the module's dtype and the input's, with the two fixes;
#   an integer or bool input is refused the same way (:func:`check_input_dtype`). Under
#   ``torch.autocast`` the dtype check is skipped (autocast chooses the dtypes).
# - Non-finite values (NaN, ±inf) at real points of a layer's or operator's input are a
#   ``ValueError`` naming the argument and the first offending index; padded points may hold
#   anything (:func:`check_finite_at`). The check is skipped while tracing or compiling.


def check_floating(name: str, value: object, expected: str = "a floating-point tensor") -> torch.Tensor:
    """``value`` if it is a floating-point tensor; ``TypeError`` naming ``name`` and its dtype otherwise."""
    t = check_tensor(name, value)
    if not t.is_floating_point():
        raise TypeError(f"{name}: expected {expected}, got dtype {t.dtype}")
    return t


def check_attention_dtypes(q: object, k: object, v: object = None, **aux: object) -> None:
    """The functionals' dtype policy: ``q``, ``k``, ``v`` floating and of one dtype (``q``'s);
    each non-None ``aux`` tensor (weights, positions, bias, ...) floating, of any precision.
    ``TypeError`` naming the argument, the expected and the given dtype otherwise."""
    qt = check_floating("q", q, "a floating-point tensor (float16, bfloat16, float32 or float64)")
    for name, t in (("k", k), ("v", v)):
        if t is None:
            continue
        t = check_floating(name, t, f"a floating-point tensor of dtype {qt.dtype} (the dtype of q)")
        if t.dtype != qt.dtype:
            raise TypeError(
                f"{name}: expected dtype {qt.dtype} (the dtype of q; q, k and v share one floating dtype), got {t.dtype}"
            )
    for name, t in aux.items():
        if t is not None:
            check_floating(name, t, "a floating-point tensor (any precision)")


def module_dtype(module: torch.nn.Module) -> torch.dtype | None:
    """The dtype a module computes in: that of its first floating parameter (or buffer); None if it has none."""
    for t in module.parameters():
        if t.is_floating_point():
            return t.dtype
    for t in module.buffers():
        if t.is_floating_point():
            return t.dtype
    return None


def check_input_dtype(name: str, value: object, module: torch.nn.Module, kind: str = "layer") -> torch.Tensor:
    """The layers' and operators' dtype policy: input ``value`` must have the dtype of ``module``'s
    parameters. A floating input of another dtype, or an integer/bool input, is a ``TypeError``:
    ``x: expected dtype torch.float32 (the operator's parameters), got torch.float64; cast the input with
    .to(torch.float32)`` (the input is cast, not the module: a spectral layer's complex weights do not
    follow ``.double()``). Skipped under ``torch.autocast``. Returns ``value``."""
    t = check_tensor(name, value)
    want = module_dtype(module)
    if want is None:
        return check_floating(name, t)
    if t.dtype == want:
        return t
    if t.is_floating_point() and torch.is_autocast_enabled(t.device.type):
        return t
    if not t.is_floating_point():
        raise TypeError(
            f"{name}: expected a floating-point tensor of dtype {want} (the {kind}'s parameters), got {t.dtype}; "
            f"cast the input with .to({want})"
        )
    raise TypeError(
        f"{name}: expected dtype {want} (the {kind}'s parameters), got {t.dtype}; cast the input with .to({want})"
    )


def check_finite_at(name: str, value: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The layers' NaN policy: ``ValueError`` naming ``name`` and the first index if ``value`` holds
    NaN or ±inf at a real point (``mask`` True, broadcastable; everywhere without a mask). Skipped
    while tracing or compiling (:func:`values_checkable`). Returns ``value``."""
    if not values_checkable(value, mask):
        return value
    return check_finite(name, value, mask)


def check_min_grid(name: str, value: torch.Tensor, who: str, why: str, *, minimum: int = 2, first_axis: int = 2) -> None:
    """The degenerate-grid policy: every grid axis of ``value`` (from ``first_axis``) needs at least
    ``minimum`` points, else ``ValueError`` naming the argument, the model (``who``), the reason
    (``why``) and the grid given. Symbolic sizes (``torch.export``) pass."""
    grid = tuple(value.shape[first_axis:])
    if any(isinstance(s, int) and s < minimum for s in grid):
        raise ValueError(f"{name}: {who} needs at least {minimum} points along every spatial axis ({why}), got the grid {grid}")
