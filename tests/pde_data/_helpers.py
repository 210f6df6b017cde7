"""Shared by the pde_data tests: seeded generators and grid point sets, a spy on HDF5 reads, and the check that the
solvers' ``load_or_generate_*`` functions reuse their cache.

A test module puts this folder on ``sys.path`` and imports it (``import _helpers as th``).
"""

from __future__ import annotations

import h5py
import numpy as np


def rng(i: int = 0) -> np.random.Generator:
    """NumPy's default generator seeded with ``i``."""
    return np.random.default_rng(i)


def grid_points(k: int, endpoint: bool = True) -> np.ndarray:
    """The ``k × k`` tensor grid of the unit square as ``(k², 2)`` points (``ij`` order): nodes ``linspace(0, 1, k)``
    with ``endpoint``, else the left cell corners ``i / k``."""
    g = np.linspace(0.0, 1.0, k) if endpoint else np.arange(k) / k
    x, y = np.meshgrid(g, g, indexing="ij")
    return np.stack([x.ravel(), y.ravel()], axis=1)


def spy_h5_reads(monkeypatch) -> list[tuple[str, object]]:
    """Record every ``h5py.Dataset.__getitem__`` from now on (until ``monkeypatch.undo()``): returns the list that
    collects ``(dataset name, selection)`` of each read, which still returns the data."""
    calls = []
    original = h5py.Dataset.__getitem__

    def spy(self, args, *rest, **kw):
        calls.append((self.name, args))
        return original(self, args, *rest, **kw)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy)
    return calls


def assert_cache_reused(monkeypatch, folder, module, solver: str, load, load_other, first, resolutions) -> None:
    """The cache of a solver's ``load_or_generate_*`` in ``folder``, which ``first = load()`` filled: calling ``load()``
    again must read it (``module.solver`` is replaced by a function that fails the test, restored after) and return
    ``first``'s pairs, input and output, at every resolution; ``load_other()`` (another parameter) must then write a
    second file, and no temporary file may be left."""

    def boom(*args, **kwargs):
        raise AssertionError(f"{solver} must not be called on a cache hit")

    monkeypatch.setattr(module, solver, boom)
    second = load()
    for r in resolutions:
        np.testing.assert_array_equal(second[r][0], first[r][0])
        np.testing.assert_array_equal(second[r][1], first[r][1])
    monkeypatch.undo()
    load_other()
    files = sorted(folder.iterdir())
    assert len(files) == 2 and not any(p.name.endswith(".tmp") for p in files)
