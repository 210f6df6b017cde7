"""Bad inputs to every registered operator (issue 23): a float64 input to a float32 operator, an
integer input, NaN at a real point, a degenerate grid. Table-driven over the registry."""

from __future__ import annotations

import pytest
import torch

from sciattn.operators import create_operator, list_operators

from .test_registry import FIXED_GRID, POINT_INPUT, SMALL


def _inputs(name, grid=(8, 8)):
    c = SMALL[name]["in_channels"]
    grid = FIXED_GRID.get(name, grid)
    if name in POINT_INPUT:
        n = grid[0] * grid[1]
        return torch.randn(2, n, c), (torch.rand(2, n, 2),)
    return torch.randn(2, c, *grid), ()


@pytest.mark.parametrize("name", list_operators())
def test_float64_input_to_a_float32_operator_is_a_type_error(name):
    x, rest = _inputs(name)
    with pytest.raises(TypeError) as err:
        create_operator(name, **SMALL[name])(x.double(), *rest)
    msg = str(err.value)
    assert msg.startswith("x: expected dtype torch.float32 (the operator's parameters), got torch.float64"), msg
    assert "cast the input with .to(torch.float32)" in msg, msg


@pytest.mark.parametrize("name", list_operators())
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_integer_or_bool_input_is_a_type_error(name, dtype):
    x, rest = _inputs(name)
    with pytest.raises(TypeError) as err:
        create_operator(name, **SMALL[name])(x.to(dtype), *rest)
    msg = str(err.value)
    assert msg.startswith("x: expected a floating-point tensor of dtype torch.float32 (the operator's parameters)"), msg
    assert f"got {dtype}" in msg, msg


@pytest.mark.parametrize("name", list_operators())
def test_nan_at_a_real_point_is_a_value_error_with_the_first_index(name):
    x, rest = _inputs(name)
    idx = (1,) + (0,) * (x.dim() - 2) + (1,)
    x[idx] = float("nan")
    with pytest.raises(ValueError) as err:
        create_operator(name, **SMALL[name])(x, *rest)
    msg = str(err.value)
    assert msg.startswith("x: expected finite values, got 1 NaN"), msg
    assert f"the first at index {idx}" in msg, msg


# Minimum grids: at least 2 points along every spatial axis.
GRID_MIN = {"galerkin_transformer": "the Galerkin Transformer", "codano": "CoDANO"}


@pytest.mark.parametrize("name", list(GRID_MIN))
@pytest.mark.parametrize("grid", [(1, 1), (1, 8), (8, 1)])
def test_degenerate_grid_is_a_value_error_stating_the_minimum(name, grid):
    x, rest = _inputs(name, grid)
    with pytest.raises(ValueError) as err:
        create_operator(name, **SMALL[name])(x, *rest)
    msg = str(err.value)
    assert msg.startswith(f"x: {GRID_MIN[name]} needs at least 2 points along every spatial axis"), msg
    assert f"got the grid {grid}" in msg, msg


@pytest.mark.parametrize("name", list(GRID_MIN))
def test_smallest_accepted_grid_runs(name):
    x, rest = _inputs(name, (2, 2))
    assert torch.isfinite(create_operator(name, **SMALL[name])(x, *rest)).all()


def test_codano_with_every_variable_masked_is_a_value_error():
    model = create_operator("codano", **SMALL["codano"])
    x, _ = _inputs("codano")
    masked = torch.tensor([[False, True], [True, True]])
    with pytest.raises(ValueError) as err:
        model(x, masked=masked)
    msg = str(err.value)
    assert msg.startswith("masked: expected at least one unmasked (visible) variable per sample"), msg
    assert "all 2 variables masked in sample 1" in msg, msg
    assert torch.isfinite(model(x, masked=torch.tensor([[False, True], [True, False]]))).all()
