"""The multi-seed collector: gains, the verdicts for the mean and every seed, and protocol checks."""

from __future__ import annotations

import copy

import pytest


@pytest.fixture(scope="module")
def seeds(import_benchmark):
    return import_benchmark("codano_fewshot_seeds")


def _run(seed, ours, anchor, fno):
    res = {m: {"parameters": 100, "finetune": {"25": {"test": {"all": e}}}}
           for m, e in zip(("CoDANO (sciattn)", "CODANO (neuralop 2.0)", "FNO (from scratch)"), (ours, anchor, fno))}
    return {"seed": seed, "results": res, "config": {"n_values": [25]}, "target_n": 25, "ours": {}, "lr": {},
            "residual": True, "beta": 0.2, "theta_like": None, "augment": True, "command": "c", "total_seconds": 60}


def test_gain_per_seed_and_of_the_mean_errors(seeds):
    s = seeds.collect([_run(0, 0.06, 0.2, 0.10), _run(1, 0.09, 0.2, 0.10)])
    assert s["gains"] == pytest.approx([0.4, 0.1])
    assert s["gain_of_mean_errors"] == pytest.approx(0.25)
    assert s["mean"]["CoDANO (sciattn)"]["25"] == pytest.approx(0.075)
    assert not s["target_met_by_mean"] and not s["target_met_by_every_seed"]
    s = seeds.collect([_run(0, 0.06, 0.2, 0.10), _run(1, 0.065, 0.2, 0.10)])
    assert s["target_met_by_mean"] and s["target_met_by_every_seed"]
    s = seeds.collect([_run(0, 0.06, 0.05, 0.10), _run(1, 0.065, 0.2, 0.10)])  # seed 0 above the anchor
    assert s["target_met_by_mean"] and not s["target_met_by_every_seed"]
    assert "in every seed NOT MET" in seeds.markdown({**s, "date": "d", "command": "c"})


def test_runs_with_different_protocols_are_refused(seeds):
    other = copy.deepcopy(_run(1, 0.06, 0.2, 0.1))
    other["augment"] = False
    with pytest.raises(ValueError, match=r"seed 1 differs from seed 0 in \['augment'\]"):
        seeds.collect([_run(0, 0.06, 0.2, 0.1), other])
    other["augment"] = "symmetry"  # True in older files means the shifts only
    with pytest.raises(ValueError, match=r"seed 1 differs from seed 0 in \['augment'\]"):
        seeds.collect([_run(0, 0.06, 0.2, 0.1), other])
    other["augment"] = "shift"
    assert seeds.collect([_run(0, 0.06, 0.2, 0.1), other])["gains"] == pytest.approx([0.4, 0.4])


def test_result_file_names_follow_the_benchmark(seeds, tmp_path):
    assert seeds.result_file(tmp_path, 0).name == "codano_fewshot.json"
    assert seeds.result_file(tmp_path, 2).name == "codano_fewshot_seed2.json"
    assert seeds.result_file(tmp_path, 0, "shift").name == "codano_fewshot_shift_augment.json"
    assert seeds.result_file(tmp_path, 1, "none").name == "codano_fewshot_none_augment_seed1.json"


def test_half_turn_averaged_errors_are_collected_when_every_run_has_them(seeds):
    runs = [_run(0, 0.08, 0.2, 0.10), _run(1, 0.09, 0.2, 0.10)]
    assert "half_turn_averaged" not in seeds.collect(runs)
    for run, e in zip(runs, (0.06, 0.065)):
        for m, v in zip(seeds.MODELS, (e, 0.2, 0.1)):
            run["results"][m]["finetune"]["25"]["test_half_turn_averaged"] = {"all": v}
    s = seeds.collect(runs)
    assert s["gains"] == pytest.approx([0.2, 0.1]) and not s["target_met_by_mean"]
    avg = s["half_turn_averaged"]
    assert avg["metric"] == "test_half_turn_averaged" and avg["gains"] == pytest.approx([0.4, 0.35])
    assert avg["target_met_by_mean"] and avg["target_met_by_every_seed"]
    text = seeds.markdown({**s, "date": "d", "command": "c"})
    assert text.count("Target (n = 25") == 2 and "half-turned counterpart" in text
    del runs[1]["results"][seeds.MODELS[2]]["finetune"]["25"]["test_half_turn_averaged"]
    assert "half_turn_averaged" not in seeds.collect(runs)
