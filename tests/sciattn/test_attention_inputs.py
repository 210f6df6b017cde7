"""The preparation every attention functional shares (sciattn/_attention_inputs.py): log-weights with padding and
zero weights excluded, padding read as zero, and the shape errors' wording."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from sciattn._attention_inputs import (
    check_key_weights_and_mask,
    check_qkv,
    mask_padding,
    prepare_key_logweights,
)

F64 = torch.float64


def test_log_weights_are_minus_inf_at_padding_and_zero_weights_and_never_read_padding():
    w = torch.tensor([[0.5, 0.0, math.nan, 2.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[True, True, False, True]])
    logw = prepare_key_logweights(w, mask, (1, 4), F64, w.device)
    assert logw[0, 0] == math.log(0.5) and logw[0, 3] == math.log(2.0)
    assert logw[0, 1] == -math.inf and logw[0, 2] == -math.inf
    logw[:, [0, 3]].sum().backward()
    assert w.grad[0, 2] == 0  # the NaN at the padded key reaches no gradient
    assert torch.isfinite(w.grad[0, [0, 3]]).all()
    uniform = prepare_key_logweights(None, None, (2, 3), torch.float32, w.device)
    assert uniform.dtype == torch.float32 and torch.equal(uniform, torch.zeros(2, 3))


def test_checked_log_weights_refuse_a_negative_weight_at_a_real_key_by_name():
    w = torch.tensor([1.0, -0.5, 1.0], dtype=F64)
    with pytest.raises(ValueError, match=r"weights: expected non-negative finite values at every point, got -0.5"):
        prepare_key_logweights(w, None, (2, 3), F64, w.device, check=True)


def test_padding_reads_as_zero_and_padded_query_rows_keep_finite_values():
    q, k, v = (torch.randn(1, 1, 3, 2, dtype=F64) for _ in range(3))
    q[0, 0, 2, 0] = k[0, 0, 2, 1] = v[0, 0, 2, 0] = math.nan
    q[0, 0, 2, 1] = 7.0
    mask = torch.tensor([[True, True, False]])
    q2, k2, v2 = mask_padding(q, k, v, mask)
    assert torch.equal(k2[0, 0, 2], torch.zeros(2, dtype=F64)) and torch.equal(v2[0, 0, 2], torch.zeros(2, dtype=F64))
    assert torch.equal(q2[0, 0, 2], torch.tensor([0.0, 7.0], dtype=F64))  # NaN read as 0, finite kept bit for bit
    assert torch.equal(k2[:, :, :2], k[:, :, :2]) and torch.equal(q2[:, :, :2], q[:, :, :2])


@pytest.mark.parametrize("args, error, text", [
    (((2, 1, 3, 4), (2, 1, 5, 4), (2, 1, 6, 4)), ValueError, "v: expected shape (B=2, H=1, Nk=5, E) to match k"),
    (((2, 1, 3, 4), (2, 1, 5, 3), (2, 1, 5, 4)), ValueError, "q: expected shape (B=2, H=1, Nq, D=3) to match k"),
    (((2, 1, 3, 4), (2, 1, 0, 4), (2, 1, 0, 4)), ValueError, "k: expected at least one key/value point, got Nk=0"),
])
def test_qkv_shape_errors_name_the_argument(args, error, text):
    with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")):
        check_qkv(*(torch.zeros(s) for s in args))


def test_weight_and_mask_errors_name_what_they_index():
    with pytest.raises(ValueError, match=r"weights: expected shape \(5,\) or \(2, 5\) matching q, got \(4,\)"):
        check_key_weights_and_mask(torch.ones(4), None, 2, 5, "q")
    with pytest.raises(TypeError, match="mask: expected dtype torch.bool, got torch.int64"):
        check_key_weights_and_mask(None, torch.ones(2, 5, dtype=torch.long), 2, 5)
    with pytest.raises(TypeError, match="mask: expected a torch.Tensor, got list"):
        check_key_weights_and_mask(None, [[True] * 5] * 2, 2, 5)


def test_import_sciattn_loads_no_triton_helper():
    code = "import sys, sciattn; assert 'sciattn._triton_helpers' not in sys.modules and 'triton' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
