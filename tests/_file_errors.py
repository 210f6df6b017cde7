"""Shared by the tests of the file readers (checkpoints, exported programs, NetCDF data): a missing file and a file
that is not of the reader's format are refused with errors that name the problem."""

from __future__ import annotations

from pathlib import Path

import pytest


def check_missing_and_corrupt(load, missing: Path, missing_match: str, corrupt: Path, content: bytes,
                              corrupt_match: str) -> None:
    """``load(missing)`` (a path that does not exist) raises ``FileNotFoundError`` matching ``missing_match``; after
    ``content`` (a few bytes not in the reader's format) is written to ``corrupt``, ``load(corrupt)`` raises
    ``ValueError`` matching ``corrupt_match``."""
    with pytest.raises(FileNotFoundError, match=missing_match):
        load(missing)
    corrupt.write_bytes(content)
    with pytest.raises(ValueError, match=corrupt_match):
        load(corrupt)
