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
    "check_dim",
    "check_positive_int",
    "check_choice",
    "check_file",
    "assert_no_violation",
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
