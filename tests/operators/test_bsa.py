"""BSA transformer: invariances, a global receptive field in one block, PyG adapter, config."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from sciattn.operators import create_operator
from sciattn.operators.bsa import BSATransformer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _batch_checks as bc  # noqa: E402

F64 = torch.float64
SMALL = dict(in_channels=3, out_channels=2, spatial_dims=2, width=16, depth=2, n_heads=2, ball_size=8,
             block_size=2, top_k=2, mlp_ratio=2)


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see tests/conftest.py


def test_padding_invariance_and_permutation_equivariance_with_mixed_sizes():
    torch.manual_seed(0)
    model = BSATransformer(**SMALL).double()
    sizes, n = [40, 6, 19], 44  # 6 < one ball
    g = torch.Generator().manual_seed(1)
    x = torch.full((3, n, 3), float("nan"), dtype=F64)
    pos = torch.full((3, n, 2), float("nan"), dtype=F64)
    w = torch.full((3, n), float("nan"), dtype=F64)
    mask = torch.zeros(3, n, dtype=torch.bool)
    for b, s in enumerate(sizes):
        x[b, :s], pos[b, :s] = torch.randn(s, 3, dtype=F64, generator=g), torch.rand(s, 2, dtype=F64, generator=g)
        w[b, :s], mask[b, :s] = torch.rand(s, dtype=F64, generator=g) + 0.1, True
    y = model(x, pos, mask, w)
    for b, s in enumerate(sizes):
        alone = model(x[b:b + 1, :s], pos[b:b + 1, :s], None, w[b:b + 1, :s])
        torch.testing.assert_close(y[b, :s], alone[0], rtol=1e-11, atol=1e-12)
    perm = torch.randperm(n)
    yp = model(x[:, perm], pos[:, perm], mask[:, perm], w[:, perm])
    torch.testing.assert_close(yp[mask[:, perm]], y[:, perm][mask[:, perm]], rtol=1e-11, atol=1e-12)
    torch.testing.assert_close(model(x, pos, mask, 5.0 * w)[mask], y[mask])


def test_one_block_sees_the_whole_cloud():
    torch.manual_seed(2)
    model = BSATransformer(**{**SMALL, "depth": 1, "rotate": None}).double()
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn.gate.weight.normal_()
    x, pos = torch.randn(1, 64, 3, dtype=F64, requires_grad=True), torch.rand(1, 64, 2, dtype=F64)
    model(x, pos)[0, 5].sum().backward()
    assert (x.grad[0].abs().sum(-1) > 0).all()  # compressed branch: every point reaches every point


def test_pyg_batch_matches_dense():
    torch.manual_seed(3)
    bc.check_pyg_batch_matches_dense(BSATransformer(**SMALL).double(), (25, 4, 16))


def test_registry_config_is_plain_json_and_errors_name_the_argument():
    model = create_operator("bsa_transformer", **SMALL)
    config = json.loads(json.dumps(model.config))
    assert {k: config[k] for k in SMALL} == json.loads(json.dumps(SMALL))
    with pytest.raises(ValueError, match="block_size: expected a power of two <= ball_size=8, got 16"):
        BSATransformer(**{**SMALL, "block_size": 16})
    with pytest.raises(ValueError, match="ball_size: expected a power of two, got 12"):
        BSATransformer(**{**SMALL, "ball_size": 12})
    with pytest.raises(ValueError, match="pos: expected size 2 along axis 2"):
        BSATransformer(**SMALL)(torch.randn(1, 10, 3), torch.rand(1, 10, 3))
