"""benchmarks/pointcloud_refinement.py: through the harness, Erwin's multiscale and physical balls converge at
initialisation and its
point-count balls do not; the Euler rotation mixes the 3-D tree more than the plane rotation; the training path
trains and evaluates through ``sciattn train``/``evaluate``; the committed rows validate and render; bad parameters
are refused by name."""

from __future__ import annotations

import math

import pytest

from benchmarks import harness
from benchmarks import pointcloud_refinement as pr


def test_init_refinement_and_mixing_through_the_harness(tmp_path):
    over = {"operators": ["erwin"], "sizes": [256, 1024, 4096], "train": False, "mixing_points": 512}
    records = harness.run_benchmark("pointcloud_refinement", quick=True, results=tmp_path, overrides=over,
                                    command="pytest pointcloud_refinement")
    rows = {(r["row"]["part"], r["row"]["balls"], r["row"]["rotation"]): r["row"] for r in records}
    points, physical = rows["refinement", "points", None], rows["refinement", "physical", None]
    for r in (points, physical):
        assert r["sizes"] == [256, 1024, 4096] and len(r["init_errors"]) == 2
        assert all(math.isfinite(e) and e > 0 for e in r["init_errors"])
        assert r["train_seconds"] is None and r["rel_l2_512"] is None
    # physical and multiscale (Erwin's default) balls: first order in h ∝ n^{-1/2} (the registry contract,
    # tests/operators/test_pointset_convergence.py)
    multiscale = rows["refinement", "multiscale", None]
    assert multiscale["init_errors"][1] <= 0.6 * multiscale["init_errors"][0]
    e256, e1024 = physical["init_errors"]
    assert e1024 <= 0.6 * e256
    # published point counts: the balls shrink with the points, no convergence
    assert points["init_errors"][1] > 0.8 * points["init_errors"][0] and points["init_errors"][1] > 0.5
    plane, euler = rows["mixing", "points", "plane"], rows["mixing", "points", "euler"]
    assert 1.0 <= plane["rotated_balls_per_ball"] < euler["rotated_balls_per_ball"] <= 64
    table = harness.markdown_table(harness.get("pointcloud_refinement"), records)
    assert "| init e_256 | init e_1024 | e_1024 / e_256 |" in table
    assert f"| erwin | physical | {e256:.4f} | {e1024:.4f} | {e1024 / e256:.2f} |" in table
    assert f"{euler['rotated_balls_per_ball']:.2f} with Erwin's three Euler rotations" in table


@pytest.mark.slow
def test_training_path(tmp_path):
    over = {"operators": ["erwin"], "balls": ["physical"], "sizes": [256, 1024], "n_train": 4, "n_test": 2,
            "mixing": False, "out": str(tmp_path / "runs")}
    records = harness.run_benchmark("pointcloud_refinement", quick=True, results=tmp_path, overrides=over)
    (row,) = [r["row"] for r in records]
    assert row["train_seconds"] > 0
    for key in ("rel_l2_512", "rel_l2_2048"):
        assert math.isfinite(row[key]) and 0 < row[key] < 2
    assert (tmp_path / "runs" / "erwin_physical" / "sweep.json").is_file()
    assert "(c) not run" in harness.markdown_table(harness.get("pointcloud_refinement"), records)


def test_config_toml_carries_the_ball_mode():
    import tomllib

    cfg = tomllib.loads(pr.config_toml("bsa_transformer", pr.model_keys("physical"), 2, 10, 5))
    assert cfg["model"]["ball_mode"] == "physical"  # BSA's registry default is the point counts
    assert cfg["train"]["epochs"] == 2 and cfg["data"]["n_train"] == 10 and cfg["data"]["n_test"] == 5
    erwin = tomllib.loads(pr.config_toml("erwin", pr.model_keys("points"), 1, 1, 1))["model"]
    assert erwin["ball_mode"] == "points" and erwin["ball_sizes"] == [32, 32]


@pytest.mark.parametrize(("operators", "balls", "rotation_rows"), [
    (["erwin", "bsa_transformer"], ["points", "physical"], True), (["erwin"], ["multiscale"], False),
    (["mspt"], ["points", "physical"], False)])
def test_committed_rows_validate_and_render(operators, balls, rotation_rows):
    """The committed runs the docs show: Erwin's and BSA's point-count and physical balls (with the rotation rows),
    Erwin's multiscale balls, and MSPT's two patch modes."""
    bench, records = harness.latest_committed_run("pointcloud_refinement", where={"balls": balls, "operators": operators})
    assert records
    table = harness.markdown_table(bench, records)
    refinement = [r["row"] for r in records if r["row"]["part"] == "refinement"]
    assert {r["balls"] for r in refinement} == set(balls)
    for r in refinement:
        cells = " | ".join(format(e, ".4f") for e in r["init_errors"])
        assert f"| {r['operator']} | {r['balls']} | {cells} |" in table
    mixing = any(r["row"]["part"] == "mixing" for r in records)
    assert ("rotated balls per ball" in table) == mixing and mixing == rotation_rows


@pytest.mark.parametrize(("key", "value"), [("balls", ["fixed"]), ("operators", ["fno"]), ("sizes", [1024, 256]),
                                            ("train", "yes"), ("epochs", 0)])
def test_bad_parameter_is_refused_by_name(tmp_path, key, value):
    with pytest.raises(ValueError, match=key):
        harness.run_benchmark("pointcloud_refinement", quick=True, results=tmp_path, overrides={key: value})
