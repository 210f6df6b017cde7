"""dataset_statistics and compare_statistics: values against numpy, masks, layouts, and the shift rule."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sciattn.pde_data.grid_dataset import GridPairDataset
from sciattn.train.data_stats import compare_statistics, dataset_statistics


def test_grid_statistics_match_numpy_per_channel():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(10, 2, 5, 6, generator=g) * torch.tensor([1.0, 4.0])[:, None, None] + torch.tensor([0.0, 7.0])[:, None, None]
    y = torch.rand(10, 1, 5, 6, generator=g)
    st = dataset_statistics(GridPairDataset(x, y))
    xa = x.double().numpy().transpose(1, 0, 2, 3).reshape(2, -1)
    np.testing.assert_allclose(st["x"]["mean"], xa.mean(1), rtol=1e-12)
    np.testing.assert_allclose(st["x"]["std"], xa.std(1), rtol=1e-10)
    np.testing.assert_allclose(st["x"]["min"], xa.min(1))
    np.testing.assert_allclose(st["y"]["max"], [y.max().item()])
    assert st["n_samples"] == 10 and st["layout"] == "grid"
    json.dumps(st)  # JSON-able


def test_generic_grid_dataset_equals_in_memory_path_and_max_samples_spreads():
    x, y = torch.arange(40.0).reshape(10, 1, 2, 2), torch.ones(10, 1, 2, 2)
    ds = GridPairDataset(x, y)
    samples = [ds[i] for i in range(10)]
    a = dataset_statistics(ds, max_samples=3)
    b = dataset_statistics(samples, max_samples=3)
    assert a == b and a["n_samples"] == 3
    # indices 0, 4/5, 9 spread over the set: the max comes from the last sample
    assert a["x"]["max"] == [39.0] and a["x"]["min"] == [0.0]


def test_point_sets_ignore_masked_points():
    pos = torch.rand(4, 2)
    x = torch.tensor([[1.0], [3.0], [1e6], [1e6]])
    sample = {"x": x, "y": x * 2, "pos": pos, "mask": torch.tensor([True, True, False, False])}
    st = dataset_statistics([sample, sample])
    assert st["layout"] == "points"
    assert st["x"]["mean"] == [2.0] and st["x"]["std"] == [1.0] and st["y"]["max"] == [6.0]


def test_compare_passes_same_distribution_and_names_each_violation():
    g = torch.Generator().manual_seed(0)
    ref = dataset_statistics(GridPairDataset(torch.randn(64, 1, 8, 8, generator=g), torch.randn(64, 1, 8, 8, generator=g)))
    same = dataset_statistics(GridPairDataset(torch.randn(16, 1, 8, 8, generator=g), torch.randn(16, 1, 8, 8, generator=g)))
    assert compare_statistics(ref, same) == []
    shifted = dataset_statistics(GridPairDataset(torch.randn(16, 1, 8, 8, generator=g) + 5.0,
                                                 torch.randn(16, 1, 8, 8, generator=g) * 10.0))
    reasons = compare_statistics(ref, shifted)
    assert any(r.startswith("x[0]: mean") for r in reasons)
    assert any(r.startswith("y[0]: std") for r in reasons)
    assert not any(r.startswith("x[0]: std") for r in reasons)
    two = dataset_statistics(GridPairDataset(torch.randn(4, 2, 8, 8, generator=g), torch.randn(4, 1, 8, 8, generator=g)))
    assert compare_statistics(ref, two)[0].startswith("x: 2 channels")
    # thresholds are arguments: a loose enough rule accepts the shifted mean
    assert not any(r.startswith("x[0]: mean") for r in compare_statistics(ref, shifted, mean_tol=10, range_tol=5))


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="max_samples"):
        dataset_statistics([{"x": torch.ones(1, 2), "y": torch.ones(1, 2)}], max_samples=0)
    with pytest.raises(ValueError, match="std_ratio"):
        compare_statistics({"x": {}, "y": {}}, {"x": {}, "y": {}}, std_ratio=0.5)
