"""The coupling sweep's bookkeeping: the increment ratio and the per-β verdict rows."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def sweep(import_benchmark):
    return import_benchmark("codano_coupling_sweep")


def test_increment_rms_ratio_compares_the_vorticity_increments(sweep):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 8, 8, generator=gen)
    dw = torch.randn(5, 8, 8, generator=gen)
    ns_y = x.clone()
    ns_y[:, 2] += dw
    bo_x = torch.randn(5, 4, 8, 8, generator=gen)
    bo_y = bo_x.clone()
    bo_y[:, 2] += 3 * dw
    bo_y[:, 0] += 100.0  # other variables do not count
    assert sweep.increment_rms_ratio((bo_x, bo_y), (x, ns_y)) == pytest.approx(3.0, rel=1e-6)


def _row(beta, e_ours, e_anchor, e_fno, fewshot):
    test = {m: {"all": e, **{v: e for v in fewshot.BOUS_VARS}}
            for m, e in zip(sweep_models(), (e_ours, e_anchor, e_fno))}
    per_model = {m: {"parameters": 100, "finetune": {"25": {"test": t}}} for m, t in test.items()}
    return {"beta": beta, "increment_rms_ratio": 1.0, "test": test,
            "targets": fewshot.check_targets(per_model, "25")}


def sweep_models():
    return ("CoDANO (sciattn)", "CODANO (neuralop 2.0)", "FNO (from scratch)")


def test_markdown_states_the_gain_and_verdict_per_beta(sweep, import_benchmark):
    fewshot = import_benchmark("codano_fewshot")
    assert sweep.MODELS == sweep_models()
    summary = {"config": dict(fewshot.FULL), "n": 25, "seed": 0, "date": "d", "machine": "m", "torch": "t",
               "neuralop": "n", "command": "c", "total_seconds": 60.0, "augment": True,
               "pretrain_ns_test": {"CoDANO (sciattn)": 0.02, "CODANO (neuralop 2.0)": 0.03},
               "rows": [_row(0.0, 0.035, 0.05, 0.10, fewshot), _row(0.2, 0.08, 0.2, 0.10, fewshot),
                        _row(0.4, 0.06, 0.05, 0.10, fewshot)]}
    lines = sweep.markdown(summary).splitlines()
    row = {line.split(" | ")[0]: line for line in lines if line.startswith("| 0") and "%" in line}
    assert len(row) == 3
    assert row["| 0"].endswith("| 65.0% lower | MET |")
    assert row["| 0.2"].endswith("| 20.0% lower | NOT MET |")
    assert row["| 0.4"].endswith("| 40.0% lower | NOT MET |")  # 30 % below the FNO but above the anchor
