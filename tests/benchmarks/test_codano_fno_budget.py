"""The FNO-budget benchmark's bookkeeping: reading CoDANO's reference, the reproduction check and the table."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def budget(import_benchmark):
    return import_benchmark("codano_fno_budget")


def _errors(e, e_avg):
    return {"test": {"all": e}, "test_half_turn_averaged": {"all": e_avg}}


def _fewshot_run(ours, fno):
    def entry(e, seconds, steps=400):
        return {"finetune": {"25": {**_errors(*e), "seconds": seconds, "steps": steps}}, "pretrain": {"seconds": 300}}

    return {"results": {"CoDANO (sciattn)": entry(ours, 130), "FNO (from scratch)": entry(fno, 13)}}


def test_reference_reads_codano_and_the_fno_from_a_fewshot_result(budget):
    ref = budget.reference(_fewshot_run((0.06, 0.05), (0.08, 0.075)), 25)
    assert ref["codano"] == {"test": 0.06, "test_half_turn_averaged": 0.05}
    assert ref["fno"] == {"test": 0.08, "test_half_turn_averaged": 0.075}
    assert (ref["codano_finetune_seconds"], ref["codano_pretrain_seconds"], ref["fno_steps"]) == (130, 300, 400)


def test_a_budget_row_that_does_not_repeat_the_fewshot_fno_is_refused(budget):
    ref = budget.reference(_fewshot_run((0.06, 0.05), (0.08, 0.075)), 25)
    budget.check_reproduces({"steps": 400, **_errors(0.08, 0.075)}, ref)
    with pytest.raises(RuntimeError, match="test_half_turn_averaged: the 400-step FNO gave 0.076000"):
        budget.check_reproduces({"steps": 400, **_errors(0.08, 0.076)}, ref)


def test_table_gains_are_against_each_budget_and_the_best_budget_is_named(budget):
    per_seed = {}
    for seed, (ours, fno_rows) in enumerate([((0.06, 0.05), [(0.08, 0.075), (0.07, 0.065)]),
                                              ((0.06, 0.05), [(0.10, 0.085), (0.09, 0.095)])]):
        per_seed[str(seed)] = {
            "reference": budget.reference(_fewshot_run(ours, fno_rows[0]), 25),
            "fno": [{"steps": st, "seconds": 10.0 * st / 400, **_errors(*e)} for st, e in zip((400, 4000), fno_rows)]}
    summary = {"seeds": [0, 1], "steps": [400, 4000], "n": 25, "per_seed": per_seed, "reference_steps": 400,
               "date": "d", "machine": "m", "torch": "t", "command": "c", "total_seconds": 60}
    text = budget.markdown(summary)
    # mean FNO at 400 steps: plain 0.09, averaged 0.08; CoDANO 0.06 / 0.05 -> 33.3 % and 37.5 % lower
    assert "| FNO (from scratch) | 400 | 10 | 0.0900 | 0.0800 | 33.3% lower | 37.5% lower |" in text
    assert "| FNO (from scratch) | 4000 | 100 | 0.0800 | 0.0800 | 25.0% lower | 37.5% lower |" in text
    assert "Best FNO budget (mean half-turn averaged error): 400 steps." in text
