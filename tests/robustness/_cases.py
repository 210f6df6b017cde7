"""The case type and the one runner of the table-driven robustness suite (issue 23).

A :class:`Case` calls one public entry point with one bad input and declares the exception type
and the words its message must contain (at least the argument's name and what was expected).
A CLI case (``exc=None``) expects ``main([...])`` to return 2 with the words in one stderr line.
Our messages are one line; ``one_line=False`` marks the few that are multi-line by design
(a :class:`sciattn.BackendError` lists every backend and why it was refused, one per line).

The test modules add this folder to ``sys.path`` and import this module by name (the tests run
with ``--import-mode=importlib``), so every area shares the same runner.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import redirect_stderr
from dataclasses import dataclass, field

import pytest

__all__ = ["Case", "parametrize", "run_case"]


@dataclass(frozen=True)
class Case:
    area: str  # functionals, layers, operators, readers, config, cli, surrogate, export
    id: str
    call: Callable[..., object]  # the public entry point on the bad input; takes the module's fixture, if any
    exc: type[BaseException] | tuple[type[BaseException], ...] | None  # None: a CLI case (exit status 2, the message on stderr)
    words: tuple[str, ...]
    one_line: bool = True
    # environment the case pins while it runs (None: unset), so it means the same under any shell: e.g. the
    # forced-Triton-on-CPU cases unset TRITON_INTERPRET, whose interpreter would run the kernel instead of refusing
    env: Mapping[str, str | None] = field(default_factory=dict)


@contextlib.contextmanager
def pinned_env(env: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for ``None``, unset) the variables of ``env`` for the duration, then restore them."""
    saved = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def parametrize(cases: Sequence[Case]):
    """``pytest.mark.parametrize("case", cases)`` with the case ids (which must be unique)."""
    ids = [c.id for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    assert not dup, f"duplicate case ids {dup}"
    return pytest.mark.parametrize("case", list(cases), ids=ids)


def run_case(case: Case, *args: object) -> str:
    """Call ``case.call(*args)`` (under the case's pinned environment), check the exception (or exit status 2 and
    stderr) and the words; return the message."""
    with pinned_env(case.env):
        return _run_case(case, *args)


def _run_case(case: Case, *args: object) -> str:
    if case.exc is None:
        err = io.StringIO()
        with redirect_stderr(err):
            status = case.call(*args)
        message = err.getvalue().strip()
        assert status == 2, f"{case.id}: expected exit status 2, got {status!r} (stderr {message!r})"
        assert message, f"{case.id}: expected a message on stderr, got none"
        assert "Traceback" not in message, f"{case.id}: traceback on stderr: {message!r}"
    else:
        with pytest.raises(BaseException) as info:
            case.call(*args)
        assert isinstance(info.value, case.exc), (
            f"{case.id}: expected {case.exc}, got {type(info.value).__name__}: {info.value}"
        )
        message = str(info.value)
    if case.one_line:
        assert "\n" not in message.strip(), f"{case.id}: expected a one-line message, got {message!r}"
    missing = [w for w in case.words if w not in message]
    assert not missing, f"{case.id}: expected the words {missing} in the message, got {message!r}"
    return message
