import pytest
import torch

from sciattn.pde_data.grid_dataset import GridPairDataset


@pytest.mark.parametrize("spatial", [(7,), (5, 6)])
def test_items_and_properties(spatial):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 2, *spatial, generator=g)
    y = torch.randn(4, 3, *spatial, generator=g)
    ds = GridPairDataset(x, y, {"name": "toy"})
    assert len(ds) == 4
    assert ds.resolution == spatial
    assert ds.in_channels == 2 and ds.out_channels == 3
    for i in (0, 3, -1):
        item = ds[i]
        assert set(item) == {"x", "y"}
        assert torch.equal(item["x"], x[i]) and torch.equal(item["y"], y[i])
        assert item["x"].dtype == torch.float32 and item["y"].dtype == torch.float32


def test_casts_bool_and_float64_to_float32():
    x = torch.tensor([[[True, False, True]], [[False, False, True]]])
    y = torch.tensor([[[0.5, 1.5, 2.5]], [[3.0, 4.0, 5.0]]], dtype=torch.float64)
    ds = GridPairDataset(x, y)
    assert ds.x.dtype == torch.float32 and ds.y.dtype == torch.float32
    assert ds[0]["x"].tolist() == [[1.0, 0.0, 1.0]]
    assert ds[1]["y"].tolist() == [[3.0, 4.0, 5.0]]


def test_meta_is_copied():
    meta = {"split": "train"}
    ds = GridPairDataset(torch.zeros(2, 1, 3), torch.zeros(2, 1, 3), meta)
    meta["split"] = "test"
    assert ds.meta == {"split": "train"}


@pytest.mark.parametrize(
    "x_shape, y_shape",
    [((4, 1, 8, 8), (5, 1, 8, 8)), ((4, 1, 8, 8), (4, 1, 8, 9)), ((4, 1, 8), (4, 1, 8, 8))],
)
def test_mismatch_names_both_shapes(x_shape, y_shape):
    with pytest.raises(ValueError) as info:
        GridPairDataset(torch.zeros(x_shape), torch.zeros(y_shape))
    msg = str(info.value)
    assert str(x_shape) in msg and str(y_shape) in msg


def test_rejects_missing_spatial_axis_and_non_tensor():
    with pytest.raises(ValueError, match=r"x: .*\(4, 1\)"):
        GridPairDataset(torch.zeros(4, 1), torch.zeros(4, 1, 3))
    with pytest.raises(TypeError, match="y: expected a torch.Tensor"):
        GridPairDataset(torch.zeros(4, 1, 3), [[0.0]])
