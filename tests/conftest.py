"""Shared test fixtures: headless plotting, deterministic seeds, the shared real-data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")

# ../shared/data beside the repository; SCIATTN_SHARED_DATA (or SCIATTN_TEST_SHARED_DATA) points elsewhere
# (e.g. from a git worktree)
SHARED_DATA = Path(os.environ.get("SCIATTN_SHARED_DATA") or os.environ.get("SCIATTN_TEST_SHARED_DATA")
                   or Path(__file__).resolve().parents[1].parent / "shared" / "data")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """One intra-op thread for the test (then the previous count): on the shared 2-core CI machine, oversubscribed
    threads make small models and tiny transforms crawl. A module opts in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def shared_data() -> Path:
    """The read-only real benchmark files; skips when the folder is absent."""
    if not (SHARED_DATA / "darcy_train_16.pt").is_file():
        pytest.skip(f"real benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


TINY_CONFIG = """
[model]
name = "galerkin_transformer"
d_model = 16
n_layers = {n_layers}
n_heads = 2
n_modes = 4
regressor_width = 8

[data]
format = "neuralop_pt"
train = "{root}/darcy_train_8.pt"
test = "{root}/darcy_test_8.pt"

[train]
epochs = {epochs}
batch_size = 8
lr = 5e-3
seed = 3
"""


@pytest.fixture(scope="session")
def tiny_darcy(tmp_path_factory):
    """``make(name, ...) -> (root, config_path)``: tiny Darcy files from the built-in solver in
    neuraloperator's format (``darcy_{train,test}_{res}.pt``) and a small training config."""
    from sciattn.pde_data.darcy import generate_darcy
    from sciattn.pde_data.neuralop_pt import write_neuralop_pt

    def make(name, *, resolutions=(8,), n_train=16, n_test=4, epochs=1, n_layers=1):
        root = tmp_path_factory.mktemp(name)
        data = generate_darcy(n_train + n_test, list(resolutions), seed=5)
        for res in resolutions:
            a, u = (torch.from_numpy(t) for t in data[res])
            write_neuralop_pt(root / f"darcy_train_{res}.pt", a[:n_train] > 5, 100 * u[:n_train])
            write_neuralop_pt(root / f"darcy_test_{res}.pt", a[n_train:] > 5, 100 * u[n_train:])
        cfg = root / "tiny.toml"
        cfg.write_text(TINY_CONFIG.format(root=root, epochs=epochs, n_layers=n_layers))
        return root, cfg

    return make
