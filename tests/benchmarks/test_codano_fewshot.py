"""The few-shot benchmark's bookkeeping: the target verdicts, the per-variable error, and that
the default CoDANO, the anchor-sized budget and the FNO stay within the stated parameter band."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def fewshot(import_benchmark):
    return import_benchmark("codano_fewshot")


def _results(e_ours, e_anchor, e_fno, params=(100, 100, 100)):
    names = ("CoDANO (sciattn)", "CODANO (neuralop 2.0)", "FNO (from scratch)")
    return {n: {"parameters": p, "finetune": {"25": {"test": {"all": e}}}}
            for n, e, p in zip(names, (e_ours, e_anchor, e_fno), params)}


def test_targets_need_30_percent_below_fno_and_below_the_anchor(fewshot):
    verdicts = list(fewshot.check_targets(_results(0.069, 0.2, 0.1), "25").values())
    assert verdicts == ["MET", "MET", "similar (within ±30%)"]
    verdicts = fewshot.check_targets(_results(0.0839, 0.2001, 0.1035, (294_707, 259_909, 261_384)), "25")
    assert list(verdicts.values()) == ["NOT MET", "MET", "similar (within ±30%)"]
    assert "18.9% lower" in next(iter(verdicts))
    verdicts = fewshot.check_targets(_results(0.12, 0.1, 0.1, (100, 100, 131)), "25")
    assert list(verdicts.values()) == ["NOT MET", "NOT MET", "NOT similar"]
    assert "20.0% higher" in next(iter(verdicts))


def test_per_variable_rel_l2_is_per_sample_and_variable(fewshot):
    target = torch.ones(2, 3, 4, 4)
    pred = target.clone()
    pred[1, 2] *= 1.5  # one sample, one variable off by 50%
    err = fewshot.per_variable_rel_l2(pred, target)
    expected = torch.zeros(2, 3)
    expected[1, 2] = 0.5
    torch.testing.assert_close(err, expected)


def test_default_codano_has_a_parameter_count_similar_to_the_fno(fewshot):
    ours = fewshot.count_parameters(fewshot.build_ours(n_modes=8, **fewshot.OURS))
    fno = fewshot.count_parameters(fewshot.build_fno(28, 8))
    assert 1 / 1.3 <= ours / fno <= 1.3


def _solve_boussinesq(w0, theta0, s):
    from sciattn.pde_data.coupled_navier_stokes import solve_coupled_navier_stokes
    from sciattn.pde_data.navier_stokes import fno_forcing

    w, th, _ = solve_coupled_navier_stokes(w0, theta0, nu=1e-3, kappa=1e-3, beta=0.2, t_final=0.1, dt=1e-2,
                                           forcing=fno_forcing(s))
    return torch.stack([w[..., -1], th[..., -1]])


def test_diagonal_shift_is_an_exact_symmetry_of_the_forced_boussinesq_solver(fewshot):
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


def test_diagonal_shift_rolls_input_and_target_of_each_pair_alike(fewshot):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, 8, 8, generator=gen)
    y = torch.randn(6, 4, 8, 8, generator=gen)
    xs, ys = fewshot.diagonal_shift(x, y, torch.Generator().manual_seed(1))
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


def test_half_turn_is_an_exact_symmetry_of_the_forced_boussinesq_solver(fewshot):
    """Solving the half-turned initial state equals half-turning the solution (u, v and theta change
    sign, w does not); turning about the origin instead, whose line x + y = 0 is not a symmetry
    line of the forcing, changes the answer."""
    s, names = 16, ["u", "v", "w", "theta"]
    gen = torch.Generator().manual_seed(4)
    w0, th0 = torch.randn(2, s, s, generator=gen, dtype=torch.float64)
    ref = _solve_boussinesq(w0, th0, s)
    ref_states = _states(ref[0], ref[1], s)
    turned0 = fewshot.half_turn(torch.stack([w0, th0])[None], ["w", "theta"])[0]
    turned = _solve_boussinesq(turned0[0], turned0[1], s)
    torch.testing.assert_close(_states(turned[0], turned[1], s), fewshot.half_turn(ref_states, names),
                               atol=1e-10, rtol=1e-10)
    origin = lambda a: a[..., (-torch.arange(s)) % s, :][..., (-torch.arange(s)) % s]  # noqa: E731
    wrong = _solve_boussinesq(origin(w0), -origin(th0), s)
    assert (wrong[0] - origin(ref[0])).abs().max() > 1e-3


def test_half_turn_maps_grid_points_and_signs_and_is_an_involution(fewshot):
    r = 8
    a = torch.randn(2, 3, r, r, generator=torch.Generator().manual_seed(5))
    t = fewshot.half_turn(a, ["u", "w", "theta"])
    for i, j in [(0, 0), (1, 3), (5, 7)]:  # (x, y) -> (1/4 - x, -y): index (i, j) -> (r/4 - i, -j)
        src = ((r // 4 - i) % r, (-j) % r)
        torch.testing.assert_close(t[:, :, i, j], a[:, :, src[0], src[1]] * torch.tensor([-1.0, 1.0, -1.0]))
    torch.testing.assert_close(fewshot.half_turn(t, ["u", "w", "theta"]), a)


def test_half_turn_rejects_grids_and_names_it_cannot_turn(fewshot):
    with pytest.raises(ValueError, match="multiple of 4"):
        fewshot.half_turn(torch.zeros(1, 1, 6, 6), ["w"])
    with pytest.raises(ValueError, match=r"names: expected 1 names .* got \['p'\]"):
        fewshot.half_turn(torch.zeros(1, 1, 8, 8), ["p"])


def test_augment_pairs_shifts_like_diagonal_shift_and_half_turns_some_pairs(fewshot):
    names = ["u", "v", "w", "theta"]
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 16, 4, 8, 8, generator=gen)
    xs, ys = fewshot.diagonal_shift(x, y, torch.Generator().manual_seed(2))
    xa, ya = fewshot.augment_pairs(x, y, names, torch.Generator().manual_seed(2), "shift")
    torch.testing.assert_close((xa, ya), (xs, ys))
    xa, ya = fewshot.augment_pairs(x, y, names, torch.Generator().manual_seed(2), "symmetry")
    turned = [i for i in range(16) if not torch.equal(xa[i], xs[i])]
    assert 0 < len(turned) < 16  # probability 1/2 per pair
    for i in range(16):
        expect = (fewshot.half_turn(xs[i:i + 1], names), fewshot.half_turn(ys[i:i + 1], names)) if i in turned \
            else (xs[i:i + 1], ys[i:i + 1])
        torch.testing.assert_close((xa[i:i + 1], ya[i:i + 1]), expect)
    assert fewshot.augment_pairs(x, y, names, gen, "none") == (x, y)


def test_train_names_an_unknown_augmentation(fewshot):
    x = torch.zeros(2, 4, 8, 8)
    with pytest.raises(ValueError, match="augment"):
        fewshot.train("fno", None, (x, x), ["u", "v", "w", "theta"], steps=1, batch=2, lr=1e-3, seed=0,
                      residual=True, augment="rotate")


def test_augment_mode_reads_result_files_from_before_the_half_turn(fewshot):
    assert [fewshot.augment_mode(v) for v in (True, False, "symmetry", "shift")] == ["shift", "none", "symmetry",
                                                                                        "shift"]
    assert fewshot.augment_suffix("symmetry") == "" and fewshot.augment_suffix("shift") == "_shift_augment"


def test_result_stem_names_the_committed_result_files(fewshot):
    assert fewshot.result_stem() == "codano_fewshot"
    assert fewshot.result_stem(beta=0.0) == "codano_fewshot_beta0"
    assert fewshot.result_stem(theta_like="w") == "codano_fewshot_theta_like_w"
    assert fewshot.result_stem(augment="shift", seed=1) == "codano_fewshot_shift_augment_seed1"
    assert fewshot.result_stem(beta=0.1, augment="none", seed=2) == "codano_fewshot_beta0.1_none_augment_seed2"


class _PositionalModel(torch.nn.Module):
    """A model with no symmetry: a fixed position-dependent bias plus a channel mix and a square."""

    def __init__(self, r, v):
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.bias = torch.randn(v, r, r, generator=gen)
        self.mix = torch.randn(v, v, generator=gen)

    def forward(self, x):
        return torch.einsum("ab,nbij->naij", self.mix, x).square() + self.bias


def test_half_turn_average_is_exactly_equivariant_for_any_model(fewshot):
    names = ["u", "v", "w", "theta"]
    model = _PositionalModel(8, 4)
    x = torch.randn(3, 4, 8, 8, generator=torch.Generator().manual_seed(4))
    turn = lambda a: fewshot.half_turn(a, names)  # noqa: E731
    plain = lambda a: fewshot.predict("fno", model, a, names)  # noqa: E731
    averaged = lambda a: fewshot.half_turn_averaged_predict("fno", model, a, names)  # noqa: E731
    assert (plain(turn(x)) - turn(plain(x))).abs().max() > 0.1  # the model itself is not equivariant
    torch.testing.assert_close(averaged(turn(x)), turn(averaged(x)))
    torch.testing.assert_close(averaged(x), 0.5 * (plain(x) + turn(plain(turn(x)))))
    # an equivariant model is left as it is: the residual head alone (f = 0) predicts y = x
    zero = lambda a: torch.zeros_like(a)  # noqa: E731
    torch.testing.assert_close(fewshot.half_turn_averaged_predict("fno", zero, x, names), x)


def test_evaluate_reports_the_plain_or_the_half_turn_averaged_error(fewshot):
    names = ["u", "v", "w", "theta"]
    model = _PositionalModel(8, 4)
    gen = torch.Generator().manual_seed(6)
    x, y = torch.randn(2, 12, 4, 8, 8, generator=gen)
    for flag, fn in ((False, fewshot.predict), (True, fewshot.half_turn_averaged_predict)):
        got = fewshot.evaluate("fno", model, (x, y), names, True, batch=5, half_turn_average=flag)
        err = fewshot.per_variable_rel_l2(fn("fno", model, x, names), y)
        assert got["all"] == pytest.approx(err.mean().item(), rel=1e-5)
        assert got["theta"] == pytest.approx(err[:, 3].mean().item(), rel=1e-5)
    plain = fewshot.evaluate("fno", model, (x, y), names, True)["all"]
    assert fewshot.evaluate("fno", model, (x, y), names, True, half_turn_average=True)["all"] != pytest.approx(plain)


def test_targets_are_checked_for_the_metric_asked_for(fewshot):
    res = _results(0.08, 0.2, 0.1)
    for r, e in zip(res.values(), (0.06, 0.2, 0.1)):
        r["finetune"]["25"]["test_half_turn_averaged"] = {"all": e}
    assert list(fewshot.check_targets(res, "25").values())[0] == "NOT MET"
    assert list(fewshot.check_targets(res, "25", "test_half_turn_averaged").values())[0] == "MET"
