"""The ``codano_fewshot`` benchmark: a small run through the harness (its rows checked against the data and
each other), the committed rows, the target verdict over seeds, refused parameters, and the machinery
(:mod:`benchmarks._codano_fewshot`): the per-variable error, the models' sizes, and the exact symmetries
(diagonal shifts, the half-turn) of the forced Boussinesq solver that the fine-tuning augmentation and the
half-turn average rely on."""

from __future__ import annotations

import statistics

import pytest
import torch

from benchmarks import _codano_fewshot as fs
from benchmarks import codano_fewshot, harness

OURS = dict(width=codano_fewshot.PARAMS["ours_width"], n_heads=codano_fewshot.PARAMS["ours_heads"],
            head_channels=codano_fewshot.PARAMS["ours_head_channels"], mlp_ratio=codano_fewshot.PARAMS["ours_mlp_ratio"])
#: A budget smaller than --quick: a few pairs, a few steps, a narrow CoDANO.
TINY = {"seeds": [0], "ns_train": 8, "ns_test": 4, "pool": 6, "test": 4, "n_values": [2, 6], "pretrain_steps": 3,
        "finetune_steps": 2, "batch": 2, "ours_width": 8, "ours_heads": 2, "ours_head_channels": 2,
        "ours_mlp_ratio": 2}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("codano_fewshot")
    cache = tmp / "cache"
    records = harness.run_benchmark("codano_fewshot", quick=True, results=tmp, command="test",
                                    overrides={**TINY, "cache": str(cache)})
    return records, cache


@pytest.mark.slow  # ~25 s on a loaded 2-core machine, most of it importing neuralop
def test_a_tiny_run_gives_rows_consistent_with_its_data(tiny_run):
    records, cache = tiny_run
    p, rows = records[0]["params"], [r["row"] for r in records]
    assert p["res"] == codano_fewshot.QUICK["res"] and p["n_values"] == [2, 6]
    by = {(r["model"], r["stage"], r["data"], r["n"]): r for r in rows}
    ours, anchor, fno = codano_fewshot.MODELS
    # the stages: both codomain models pretrained and tested zero-shot, all three fine-tuned at every n
    assert {k for k in by if k[1] == "pretrain"} == {(ours, "pretrain", "ns", None), (anchor, "pretrain", "ns", None)}
    assert {k[0] for k in by if k[1] == "zero_shot"} == {ours, anchor}
    assert len([k for k in by if k[1] == "fine_tune"]) == 3 * 2 and len(rows) == 2 + 2 + 6 + 2
    # the persistence rows are the relative L2 of y = x on the very pairs the models were tested on
    data = fs.load(cache, {k: p[k] for k in codano_fewshot.CONFIG_KEYS}, seed=0, beta=p["beta"])
    for which, key in (("boussinesq", "test"), ("ns", "ns_test")):
        e = fs.per_variable_rel_l2(*data[key])
        row = by["persistence", "persistence", which, None]
        assert row["error"] == pytest.approx(e.mean().item(), rel=1e-6)
        assert row["error_u"] == pytest.approx(e[:, 0].mean().item(), rel=1e-6)
    assert by["persistence", "persistence", "ns", None]["error_theta"] is None
    for r in rows:  # the mean over variables of the per-variable means is the mean over samples and variables
        names = codano_fewshot.BOUS_VARS if r["data"] == "boussinesq" else codano_fewshot.NS_VARS
        assert r["error"] == pytest.approx(statistics.mean(r[f"error_{v}"] for v in names), rel=1e-5)
        if r["stage"] == "fine_tune":
            assert r["averaged"] == pytest.approx(statistics.mean(r[f"averaged_{v}"] for v in names), rel=1e-5)
            assert r["steps"] == 2 and r["batch"] == min(2, r["n"]) and r["seconds"] > 0
        else:
            assert r["averaged"] is None
        assert 0 < r["error"] < 10 and r["seed_seconds"] > 0
    # adding theta adds parameters (its encoding) to each codomain model; the FNO is the same at every n
    for m in (ours, anchor):
        assert by[m, "zero_shot", "boussinesq", 0]["parameters"] > by[m, "pretrain", "ns", None]["parameters"]
    assert by[fno, "fine_tune", "boussinesq", 2]["parameters"] == by[fno, "fine_tune", "boussinesq", 6]["parameters"]
    assert by[anchor, "pretrain", "ns", None]["trainer_call"].startswith("TypeError")


@pytest.mark.slow
def test_the_tiny_run_renders_its_table_with_the_one_seed_detail(tiny_run):
    records, _ = tiny_run
    text = harness.markdown_table(harness.get("codano_fewshot"), records)
    assert "Per variable" in text and "**mean**" not in text and "Target (n = 6" in text
    assert "quick budget" in text


def _rows(errors: dict) -> list[dict]:
    """Fine-tuned rows at n = 25 from ``{seed: (ours, anchor, fno)}`` (plain errors; averaged a tenth lower)."""
    return [{"seed": s, "model": m, "stage": "fine_tune", "n": 25, "error": e, "averaged": 0.9 * e}
            for s, es in errors.items() for m, e in zip(codano_fewshot.MODELS, es)]


def test_verdict_gain_per_seed_and_of_the_mean_errors():
    v = codano_fewshot.verdict(_rows({0: (0.06, 0.2, 0.10), 1: (0.09, 0.2, 0.10)}))
    assert v["gains"] == pytest.approx([0.4, 0.1]) and v["gain_of_mean_errors"] == pytest.approx(0.25)
    assert not v["target_met_by_mean"] and not v["target_met_by_every_seed"]
    v = codano_fewshot.verdict(_rows({0: (0.06, 0.2, 0.10), 1: (0.065, 0.2, 0.10)}))
    assert v["target_met_by_mean"] and v["target_met_by_every_seed"]
    v = codano_fewshot.verdict(_rows({0: (0.06, 0.05, 0.10), 1: (0.065, 0.2, 0.10)}))  # seed 0 above the anchor
    assert v["target_met_by_mean"] and not v["target_met_by_every_seed"]
    assert codano_fewshot.verdict(_rows({0: (0.07, 0.2, 0.10)}), "averaged")["gains"] == pytest.approx([0.3])


def _committed():
    path = harness.results_path("codano_fewshot")
    return [r for r in harness.read_rows(path) if not r["quick"]]


def test_committed_rows_validate_and_render_the_seed_table_and_one_seed():
    bench = harness.get("codano_fewshot")
    records = _committed()
    for i, r in enumerate(records):
        harness.validate_row(bench, r["row"], i)
        if r["row"]["stage"] == "fine_tune":  # fields not scrambled: the mean is the mean of the variables
            assert r["row"]["error"] == pytest.approx(
                statistics.mean(r["row"][f"error_{v}"] for v in codano_fewshot.BOUS_VARS), rel=1e-5)
    run = harness.latest_run(records, full=True, where={"seeds": [0, 1, 2]})
    text = harness.markdown_table(bench, run)
    assert text.count("**mean**") == 3 and text.count("Target (n = 25") == 2 and "Per variable" not in text
    one = harness.latest_run(records, full=True, where={"seeds": [0, 1, 2], "row.seed": 0})
    assert {r["row"]["seed"] for r in one} == {0}
    assert "Per variable" in harness.markdown_table(bench, one)


@pytest.mark.parametrize("key, value, message", [
    ("seeds", [], r"seeds: expected a non-empty list"),
    ("seeds", [0, 0], r"seeds: expected .* distinct"),
    ("n_values", [5, 200], r"n_values: expected .* in 1\.\.100 .* got \[5, 200\]"),
    ("res", 30, r"res: expected a multiple of 4"),
    ("augment", "rotate", r"augment: expected one of \['none', 'shift', 'symmetry'\], got 'rotate'"),
    ("theta_like", "p", r"theta_like: expected null or one of"),
    ("pretrain_steps", 0, r"pretrain_steps: expected a positive integer, got 0"),
])
def test_bad_parameters_are_refused_naming_them(tmp_path, key, value, message):
    with pytest.raises(ValueError, match=message):
        harness.run_benchmark("codano_fewshot", results=tmp_path, overrides={key: value})
    assert not list(tmp_path.iterdir())


def test_per_variable_rel_l2_is_per_sample_and_variable():
    target = torch.ones(2, 3, 4, 4)
    pred = target.clone()
    pred[1, 2] *= 1.5  # one sample, one variable off by 50%
    err = fs.per_variable_rel_l2(pred, target)
    expected = torch.zeros(2, 3)
    expected[1, 2] = 0.5
    torch.testing.assert_close(err, expected)


def test_default_codano_has_a_parameter_count_similar_to_the_fno():
    ours = fs.count_parameters(fs.build_ours(n_modes=8, **OURS))
    fno = fs.count_parameters(fs.build_fno(28, 8))
    assert 1 / 1.3 <= ours / fno <= 1.3


def _solve_boussinesq(w0, theta0, s):
    from sciattn.pde_data.coupled_navier_stokes import solve_coupled_navier_stokes
    from sciattn.pde_data.navier_stokes import fno_forcing

    w, th, _ = solve_coupled_navier_stokes(w0, theta0, nu=1e-3, kappa=1e-3, beta=0.2, t_final=0.1, dt=1e-2,
                                           forcing=fno_forcing(s))
    return torch.stack([w[..., -1], th[..., -1]])


def test_diagonal_shift_is_an_exact_symmetry_of_the_forced_boussinesq_solver():
    """Solving a rolled initial state equals rolling the solution for shifts along (1, -1) only:
    FNO's forcing depends on x + y, so a shift along (1, 0) changes the answer."""
    s = 16
    gen = torch.Generator().manual_seed(3)
    w0, th0 = torch.randn(2, s, s, generator=gen, dtype=torch.float64)
    ref = _solve_boussinesq(w0, th0, s)
    diag = _solve_boussinesq(w0.roll((5, -5), (0, 1)), th0.roll((5, -5), (0, 1)), s)
    torch.testing.assert_close(diag, ref.roll((5, -5), (-2, -1)), atol=1e-10, rtol=1e-10)
    axis = _solve_boussinesq(w0.roll(5, 0), th0.roll(5, 0), s)
    assert (axis - ref.roll(5, -2)).abs().max() > 1e-3


def test_diagonal_shift_rolls_input_and_target_of_each_pair_alike():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, 8, 8, generator=gen)
    y = torch.randn(6, 4, 8, 8, generator=gen)
    xs, ys = fs.diagonal_shift(x, y, torch.Generator().manual_seed(1))
    shifts = torch.randint(0, 8, (6,), generator=torch.Generator().manual_seed(1)).tolist()
    assert len(set(shifts)) > 1
    for i, k in enumerate(shifts):
        torch.testing.assert_close(xs[i], x[i].roll((k, -k), (-2, -1)))
        torch.testing.assert_close(ys[i], y[i].roll((k, -k), (-2, -1)))


def _states(w, th, s):
    """``(1, 4, s, s)`` stack of ``u, v, w, theta`` from the vorticity and the scalar."""
    from sciattn.pde_data.navier_stokes import spectral_grid, velocity

    u, v = velocity(torch.fft.rfft2(w), spectral_grid(s))
    return torch.stack([u, v, w, th])[None]


def test_half_turn_is_an_exact_symmetry_of_the_forced_boussinesq_solver():
    """Solving the half-turned initial state equals half-turning the solution (u, v and theta change
    sign, w does not); turning about the origin instead, whose line x + y = 0 is not a symmetry
    line of the forcing, changes the answer."""
    s, names = 16, ["u", "v", "w", "theta"]
    gen = torch.Generator().manual_seed(4)
    w0, th0 = torch.randn(2, s, s, generator=gen, dtype=torch.float64)
    ref = _solve_boussinesq(w0, th0, s)
    ref_states = _states(ref[0], ref[1], s)
    turned0 = fs.half_turn(torch.stack([w0, th0])[None], ["w", "theta"])[0]
    turned = _solve_boussinesq(turned0[0], turned0[1], s)
    torch.testing.assert_close(_states(turned[0], turned[1], s), fs.half_turn(ref_states, names),
                               atol=1e-10, rtol=1e-10)
    origin = lambda a: a[..., (-torch.arange(s)) % s, :][..., (-torch.arange(s)) % s]  # noqa: E731
    wrong = _solve_boussinesq(origin(w0), -origin(th0), s)
    assert (wrong[0] - origin(ref[0])).abs().max() > 1e-3


def test_half_turn_maps_grid_points_and_signs_and_is_an_involution():
    r = 8
    a = torch.randn(2, 3, r, r, generator=torch.Generator().manual_seed(5))
    t = fs.half_turn(a, ["u", "w", "theta"])
    for i, j in [(0, 0), (1, 3), (5, 7)]:  # (x, y) -> (1/4 - x, -y): index (i, j) -> (r/4 - i, -j)
        src = ((r // 4 - i) % r, (-j) % r)
        torch.testing.assert_close(t[:, :, i, j], a[:, :, src[0], src[1]] * torch.tensor([-1.0, 1.0, -1.0]))
    torch.testing.assert_close(fs.half_turn(t, ["u", "w", "theta"]), a)


def test_half_turn_rejects_grids_and_names_it_cannot_turn():
    with pytest.raises(ValueError, match="multiple of 4"):
        fs.half_turn(torch.zeros(1, 1, 6, 6), ["w"])
    with pytest.raises(ValueError, match=r"names: expected 1 names .* got \['p'\]"):
        fs.half_turn(torch.zeros(1, 1, 8, 8), ["p"])


def test_augment_pairs_shifts_like_diagonal_shift_and_half_turns_some_pairs():
    names = ["u", "v", "w", "theta"]
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 16, 4, 8, 8, generator=gen)
    xs, ys = fs.diagonal_shift(x, y, torch.Generator().manual_seed(2))
    xa, ya = fs.augment_pairs(x, y, names, torch.Generator().manual_seed(2), "shift")
    torch.testing.assert_close((xa, ya), (xs, ys))
    xa, ya = fs.augment_pairs(x, y, names, torch.Generator().manual_seed(2), "symmetry")
    turned = [i for i in range(16) if not torch.equal(xa[i], xs[i])]
    assert 0 < len(turned) < 16  # probability 1/2 per pair
    for i in range(16):
        expect = (fs.half_turn(xs[i:i + 1], names), fs.half_turn(ys[i:i + 1], names)) if i in turned \
            else (xs[i:i + 1], ys[i:i + 1])
        torch.testing.assert_close((xa[i:i + 1], ya[i:i + 1]), expect)
    assert fs.augment_pairs(x, y, names, gen, "none") == (x, y)


def test_train_names_an_unknown_augmentation():
    x = torch.zeros(2, 4, 8, 8)
    with pytest.raises(ValueError, match="augment"):
        fs.train("fno", None, (x, x), ["u", "v", "w", "theta"], steps=1, batch=2, lr=1e-3, seed=0,
                      residual=True, augment="rotate")


class _PositionalModel(torch.nn.Module):
    """A model with no symmetry: a fixed position-dependent bias plus a channel mix and a square."""

    def __init__(self, r, v):
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.bias = torch.randn(v, r, r, generator=gen)
        self.mix = torch.randn(v, v, generator=gen)

    def forward(self, x):
        return torch.einsum("ab,nbij->naij", self.mix, x).square() + self.bias


def test_half_turn_average_is_exactly_equivariant_for_any_model():
    names = ["u", "v", "w", "theta"]
    model = _PositionalModel(8, 4)
    x = torch.randn(3, 4, 8, 8, generator=torch.Generator().manual_seed(4))
    turn = lambda a: fs.half_turn(a, names)  # noqa: E731
    plain = lambda a: fs.predict("fno", model, a, names)  # noqa: E731
    averaged = lambda a: fs.half_turn_averaged_predict("fno", model, a, names)  # noqa: E731
    assert (plain(turn(x)) - turn(plain(x))).abs().max() > 0.1  # the model itself is not equivariant
    torch.testing.assert_close(averaged(turn(x)), turn(averaged(x)))
    torch.testing.assert_close(averaged(x), 0.5 * (plain(x) + turn(plain(turn(x)))))
    # an equivariant model is left as it is: the residual head alone (f = 0) predicts y = x
    zero = lambda a: torch.zeros_like(a)  # noqa: E731
    torch.testing.assert_close(fs.half_turn_averaged_predict("fno", zero, x, names), x)


def test_evaluate_reports_the_plain_or_the_half_turn_averaged_error():
    names = ["u", "v", "w", "theta"]
    model = _PositionalModel(8, 4)
    gen = torch.Generator().manual_seed(6)
    x, y = torch.randn(2, 12, 4, 8, 8, generator=gen)
    for flag, fn in ((False, fs.predict), (True, fs.half_turn_averaged_predict)):
        got = fs.evaluate("fno", model, (x, y), names, True, batch=5, half_turn_average=flag)
        err = fs.per_variable_rel_l2(fn("fno", model, x, names), y)
        assert got["all"] == pytest.approx(err.mean().item(), rel=1e-5)
        assert got["theta"] == pytest.approx(err[:, 3].mean().item(), rel=1e-5)
    plain = fs.evaluate("fno", model, (x, y), names, True)["all"]
    assert fs.evaluate("fno", model, (x, y), names, True, half_turn_average=True)["all"] != pytest.approx(plain)


