"""Shared test fixtures: headless plotting, deterministic seeds, the shared real-data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def shared_data() -> Path:
    """The read-only real benchmark files; skips when the folder is absent."""
    if not (SHARED_DATA / "darcy_train_16.pt").is_file():
        pytest.skip(f"real benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA
