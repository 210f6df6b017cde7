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

import io
from collections.abc import Callable, Sequence
from contextlib import redirect_stderr
from dataclasses import dataclass

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


def parametrize(cases: Sequence[Case]):
    """``pytest.mark.parametrize("case", cases)`` with the case ids (which must be unique)."""
    ids = [c.id for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    assert not dup, f"duplicate case ids {dup}"
    return pytest.mark.parametrize("case", list(cases), ids=ids)


def run_case(case: Case, *args: object) -> str:
    """Call ``case.call(*args)``, check the exception (or exit status 2 and stderr) and the words;
    return the message."""
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
