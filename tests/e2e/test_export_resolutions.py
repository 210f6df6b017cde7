"""``export_run`` on every registered operator: the exported program, run at three resolutions (grids) or
three cloud sizes (point sets), equals the eager ``decode(model(encode(x)))`` pipeline.

Each run is a checkpoint written with ``save_checkpoint`` (tiny configs, normalisers fitted on random
data, ``data_meta`` as the trainer writes it), so the test exercises the export of each architecture
rather than training. Tolerance: 1e-5 absolute on outputs of order 1 (float32; the program and the eager
model run the same kernels on the CPU, so the differences are round-off).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
import torch

from sciattn.operators import create_operator, list_operators
from sciattn.operators.registry import operator_class, operator_kind
from sciattn.pde_data.normalizers import UnitGaussianNormalizer
from sciattn.train.checkpoint import save_checkpoint
from sciattn.train.export import export_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operators"))
from test_registry import SMALL  # noqa: E402

ATOL = 1e-5
# The registry tests' small configurations (tests/operators/test_registry.py), with one layer where two are not
# needed to exercise the export, and MANO's head settings that the export handles.
GRID = {
    name: SMALL[name]
    for name in ("galerkin_transformer", "transolver", "linear_no", "ono", "gnot", "factformer", "oformer", "fno",
                 "anie", "funcattn", "fastmax_transformer", "continuum_transformer")
}
GRID |= {
    "codano": {**SMALL["codano"], "n_layers": 1},
    "mano": {**SMALL["mano"], "n_layers": 1},
    "mano_extended": dict(in_channels=2, out_channels=1, width=16, n_layers=1, n_heads=2, window=4, head_width=4,
                          head_modes=4, head_layers=1, head_grid=None, lift_spacing=None, rel_pos_bias=2),
    "schwarz_transformer": dict(in_channels=2, out_channels=1, width=8, n_layers=1, n_heads=2, subdomains=2),
    # modes 1: the traced sizes hold every mode from 8 points per axis (export_size_range), so 20x12 runs
    "continuum_vitno": {**SMALL["continuum_vitno"], "modes": 1},
}
SPHERE = {
    "spherical_transformer": dict(in_channels=2, out_channels=1, nlat=9, nlon=16, embed_dim=8, n_layers=1, n_heads=2),
    "planar_transformer": dict(in_channels=2, out_channels=1, nlat=9, nlon=16, embed_dim=8, n_layers=1, n_heads=2),
}
# The small configurations with one layer on point clouds; the ball-tree operators' as they are.
POINTS = {"erwin": SMALL["erwin"], "bsa_transformer": SMALL["bsa_transformer"]}
POINTS |= {
    name: {**SMALL[name], "n_layers": 1}
    for name in ("transolver", "linear_no", "ono", "gnot", "oformer", "anie", "funcattn", "fastmax_transformer",
                 "continuum_transformer")
}
POINTS |= {
    # the Galerkin Transformer on point clouds (pointwise regressor): no tree, so batch and N are dynamic directly
    "galerkin_transformer": dict(in_channels=2, out_channels=1, d_model=16, n_layers=1, n_heads=2,
                                 regressor="pointwise"),
    "schwarz_transformer": GRID["schwarz_transformer"],
}
# from the operators' contract: point-set operators, and those whose programs pad the cloud in the graph (ball trees)
POINT_OPERATORS = [n for n in list_operators() if operator_kind(n) == "points"]
PADDED = {n for n in POINTS if operator_class(n).export_policy.padded_points}
RESOLUTIONS = (16, 24, 32)
CLOUD_SIZES = (40, 64, 100)
DIFFS: dict[str, dict] = {}


def test_every_registered_operator_is_covered():
    assert set(list_operators()) == set(GRID) | set(SPHERE) | set(POINT_OPERATORS)
    assert {n for n in list_operators() if operator_kind(n) == "sphere"} == set(SPHERE)
    assert all(operator_class(n).export_policy.fixed_grid for n in SPHERE)


def _run(tmp_path, name, config, *, sample_shape, domain, train_resolution):
    torch.manual_seed(0)
    model = create_operator(name, **config)
    c_in, c_out = config["in_channels"], config["out_channels"]
    g = torch.Generator().manual_seed(1)
    xn = UnitGaussianNormalizer().fit(torch.randn(4, c_in, *sample_shape, generator=g) * 2 + 1)
    yn = UnitGaussianNormalizer().fit(torch.randn(4, c_out, *sample_shape, generator=g) * 0.5 - 3)
    run = tmp_path / name
    run.mkdir()
    save_checkpoint(run / "checkpoint.pt", model=model, x_normalizer=xn, y_normalizer=yn,
                    data_meta={"domain": domain, "train_resolution": list(train_resolution)})
    return run, model.eval(), xn, yn


def _eager_grid(model, xn, yn, x):
    with torch.no_grad():
        return yn.decode(model(xn.encode(x)))


def _eager_points(model, xn, yn, x, pos, weights, mask):
    with torch.no_grad():
        h = xn.encode(x.transpose(1, 2)).transpose(1, 2)
        return yn.decode(model(h, pos=pos, mask=mask, weights=weights).transpose(1, 2)).transpose(1, 2)


@pytest.mark.parametrize("name", sorted(GRID))
def test_grid_operators_at_three_resolutions(name, tmp_path):
    run, model, xn, yn = _run(tmp_path, name, GRID[name], sample_shape=(16, 16),
                              domain={"kind": "grid", "shape": [16, 16]}, train_resolution=(16, 16))
    info = export_run(run, tmp_path / f"{name}.pt2", input_dtype="float32")
    program = torch.export.load(tmp_path / f"{name}.pt2").module()
    c_in = GRID[name]["in_channels"]
    diffs = {}
    if name in ("mano", "mano_extended"):
        # Honest: with a window in cells the level count of MANO's pyramid grows with the grid, so the program holds
        # one grid (window_fraction gives dynamic sizes: the test below).
        assert info["fixed_resolution"] == list(info["input_shape"][2:]) and 0 in info["dynamic_dims"]
        assert f"'{name}'" in info["note"] and "levels" in info["note"] and "window_fraction" in info["note"]
        r = info["input_shape"][2]
        for b in (1, 3):
            x = torch.randn(b, c_in, r, r)
            diffs[f"{r} (B={b})"] = float((program(x) - _eager_grid(model, xn, yn, x)).abs().max())
        with pytest.raises(Exception, match="Guard failed|size"):
            program(torch.randn(1, c_in, r + 8, r + 8))
    else:
        assert info["dynamic_dims"] == [0, 2, 3] and info["fixed_resolution"] is None
        for b, r in zip((2, 1, 3), RESOLUTIONS):
            x = torch.randn(b, c_in, r, r) * 2 + 1
            ref = _eager_grid(model, xn, yn, x)
            out = program(x)
            assert out.shape == ref.shape == (b, GRID[name]["out_channels"], r, r)
            diffs[r] = float((out - ref).abs().max())
        x = torch.randn(2, c_in, 20, 12)  # non-square too
        diffs["20x12"] = float((program(x) - _eager_grid(model, xn, yn, x)).abs().max())
    DIFFS[name] = diffs
    print(f"\n{name}: max |exported - eager| {diffs}")
    assert max(diffs.values()) <= ATOL, diffs


@pytest.mark.parametrize("name", sorted(SPHERE))
def test_sphere_operators_export_at_their_grid_with_a_dynamic_batch(name, tmp_path):
    cfg = SPHERE[name]
    grid = (cfg["nlat"], cfg["nlon"])
    run, model, xn, yn = _run(tmp_path, name, cfg, sample_shape=grid,
                              domain={"kind": "sphere", "grid": "equiangular", "nlat": grid[0], "nlon": grid[1]},
                              train_resolution=grid)
    info = export_run(run, tmp_path / f"{name}.pt2", input_dtype="float64")
    assert info["kind"] == "sphere" and info["fixed_resolution"] == list(grid) and info["dynamic_dims"] == [0]
    assert "holds the" in info["note"] and "export once per grid" in info["note"] and info["input_dtype"] == "float64"
    program = torch.export.load(tmp_path / f"{name}.pt2").module()
    diffs = {}
    for b in (1, 2, 5):
        x = torch.randn(b, cfg["in_channels"], *grid, dtype=torch.float64)
        diffs[f"B={b}"] = float((program(x) - _eager_grid(model, xn, yn, x.float())).abs().max())
    with pytest.raises(Exception, match="Guard failed|size"):
        program(torch.randn(1, cfg["in_channels"], grid[0] * 2, grid[1] * 2, dtype=torch.float64))
    fine = (2 * grid[0] - 1, 2 * grid[1])  # another grid: exported there with the same weights
    info = export_run(run, tmp_path / f"{name}_fine.pt2", example_shape=fine, input_dtype="float64")
    assert info["fixed_resolution"] == list(fine) and "exported on the grid 17x32 with the weights" in info["note"]
    program = torch.export.load(tmp_path / f"{name}_fine.pt2").module()
    x = torch.randn(2, cfg["in_channels"], *fine, dtype=torch.float64)
    diffs["fine"] = float((program(x) - _eager_grid(model, xn, yn, x.float())).abs().max())
    DIFFS[name] = diffs
    print(f"\n{name}: max |exported - eager| {diffs}")
    assert max(diffs.values()) <= ATOL, diffs


@pytest.mark.parametrize("name", sorted(POINTS))
def test_point_set_operators_at_three_cloud_sizes(name, tmp_path):
    cfg = POINTS[name]
    run, model, xn, yn = _run(tmp_path, name, cfg, sample_shape=(64,),
                              domain={"kind": "point_cloud", "dim": 2, "n_points": 64}, train_resolution=(64,))
    info = export_run(run, tmp_path / f"{name}.pt2", max_points=max(CLOUD_SIZES))
    assert info["kind"] == "points" and info["input_names"] == ["x", "pos", "weights", "mask"]
    assert 1 in info["dynamic_dims"]
    program = torch.export.load(tmp_path / f"{name}.pt2").module()
    tree = name in PADDED
    if tree:
        assert info["max_points"] == max(CLOUD_SIZES) and "padding the cloud in the graph" in info["note"]
    else:
        assert info["dynamic_dims"] == [0, 1] and info["max_points"] is None
    g = torch.Generator().manual_seed(2)
    diffs = {}
    for k, n in enumerate(CLOUD_SIZES):
        b = 1 if tree else 1 + k
        x, pos = torch.randn(b, n, 2, generator=g), torch.rand(b, n, 2, generator=g)
        weights = torch.rand(b, n, generator=g) + 0.5
        mask = torch.ones(b, n, dtype=torch.bool)
        mask[:, -3:] = False  # a padded batch: the last points are padding in every cloud
        ref = _eager_points(model, xn, yn, x, pos, weights, mask)
        out = program(x, pos, weights, mask)
        assert out.shape == (b, n, cfg["out_channels"])
        diffs[n] = float((out - ref)[mask].abs().max())
    if tree:
        with pytest.raises(Exception, match="Guard failed|size|n <="):
            program(*(t[:, :1].expand(1, max(CLOUD_SIZES) + 1, *t.shape[2:]) for t in (x, pos, weights, mask)))
    DIFFS[f"{name} (points)"] = diffs
    print(f"\n{name} (points): max |exported - eager| {diffs}")
    assert max(diffs.values()) <= ATOL, diffs


# MANO with windows a fraction of the domain on the layer's input pyramid (its earlier mode): on every multiple
# n = K·4 (K >= 2) of its unit the pyramid is the one at 4 scaled by K (three levels, windows n/4 cells), so one
# program takes 8, 12, 16, ... and refuses the rest.
MANO_FRACTION = dict(in_channels=2, out_channels=1, width=16, n_layers=1, n_heads=2, window_fraction=0.25,
                     pyramid="input", coarse_cells=None)


@pytest.mark.slow  # 15-20 s; the default pyramid's export (the previous test) stays in the default run
def test_mano_with_window_fraction_exports_every_multiple_of_its_pyramid_unit(tmp_path):
    run, model, xn, yn = _run(tmp_path, "mano", MANO_FRACTION, sample_shape=(16, 16),
                              domain={"kind": "grid", "shape": [16, 16]}, train_resolution=(16, 16))
    assert model.export_size_multiple == (4, 4) and model.export_size_range == [(8, None), (8, None)]
    info = export_run(run, tmp_path / "mano.pt2", input_dtype="float32")
    assert info["dynamic_dims"] == [0, 2, 3] and info["fixed_resolution"] is None, info["note"]
    assert info["size_multiples"] == {"2": 4, "3": 4} and "multiples of (4, 4)" in info["note"]
    assert info["dynamic_ranges"]["2"] == [8, None] and info["dynamic_ranges"]["3"] == [8, None]
    program = torch.export.load(tmp_path / "mano.pt2").module()
    g = torch.Generator().manual_seed(4)
    diffs = {}
    for b, shape in zip((2, 1, 3), ((8, 8), (12, 20), (24, 16))):
        x = torch.randn(b, 2, *shape, generator=g) * 2 + 1
        ref = _eager_grid(model, xn, yn, x)
        out = program(x)
        assert out.shape == ref.shape == (b, 1, *shape)
        diffs["x".join(map(str, shape))] = float((out - ref).abs().max())
    for shape in ((18, 16), (4, 4)):  # not a multiple of 4; K = 1 (one-cell windows): eager pads, the program refuses
        with pytest.raises(Exception, match="Guard failed|size"):
            program(torch.randn(1, 2, *shape))
    DIFFS["mano (window_fraction 0.25)"] = diffs
    print(f"\nmano (window_fraction 0.25): max |exported - eager| {diffs}")
    assert max(diffs.values()) <= ATOL, diffs


# The shipped examples/configs/darcy64_mano.toml [model] (operator mano_extended; smaller widths, one block and one
# head layer, for time): the layer's physical pyramid (key grids 64, 32, 16, 8: reshapes on n = 64·K, K >= 2),
# lift_spacing = 1/64 with a 3x3 stencil (shift n/64 cells) and head_grid = 64 (exact restriction onto 64 nodes):
# the program takes 128, 192, 256, ... and refuses 96 (eager mode interpolates the stencil there) and 64.
SHIPPED_MANO = Path(__file__).resolve().parents[2] / "examples" / "configs" / "darcy64_mano.toml"


@pytest.mark.slow  # about a minute; the default run exports MANO's default pyramid at multiples of 64 (next test)
def test_shipped_darcy64_mano_exports_every_multiple_of_64(tmp_path):
    cfg = {k: v for k, v in tomllib.loads(SHIPPED_MANO.read_text())["model"].items() if k != "name"}
    assert cfg["coarse_cells"] == 8 and cfg["head_grid"] == 64 and cfg["lift_stencil"] == 3
    cfg.update(in_channels=1, out_channels=1, width=8, n_heads=2, n_layers=1, head_width=8, head_layers=1)
    name = tomllib.loads(SHIPPED_MANO.read_text())["model"]["name"]
    assert name == "mano_extended"
    run, model, xn, yn = _run(tmp_path, name, cfg, sample_shape=(64, 64),
                              domain={"kind": "grid", "shape": [64, 64]}, train_resolution=(64, 64))
    assert model.export_fixed_reason is None
    assert model.export_size_multiple == (64, 64) and model.export_size_range == [(128, None), (128, None)]
    info = export_run(run, tmp_path / "mano.pt2", input_dtype="float32")
    assert info["dynamic_dims"] == [0, 2, 3] and info["fixed_resolution"] is None, info["note"]
    assert info["size_multiples"] == {"2": 64, "3": 64} and info["dynamic_ranges"]["2"] == [128, None]
    program = torch.export.load(tmp_path / "mano.pt2").module()
    g = torch.Generator().manual_seed(5)
    diffs = {}
    for b, shape in zip((2, 1, 1), ((128, 128), (256, 256), (192, 128))):
        x = torch.randn(b, 1, *shape, generator=g) * 2 + 1
        ref = _eager_grid(model, xn, yn, x)
        out = program(x)
        assert out.shape == ref.shape == (b, 1, *shape)
        diffs["x".join(map(str, shape))] = float((out - ref).abs().max())
    for shape in ((96, 96), (64, 64)):  # not a multiple of 64 (a half-cell stencil shift); under the minimum
        with pytest.raises(Exception, match="Guard failed|size"):
            program(torch.randn(1, 1, *shape))
    DIFFS["mano (darcy64_mano.toml)"] = diffs
    print(f"\nmano (darcy64_mano.toml): max |exported - eager| {diffs}")
    assert max(diffs.values()) <= ATOL, diffs


# MANO at its default layer configuration (physical pyramid: window_fraction 1/8, coarse_cells 8, local window 3;
# one block of width 16 for time): key grids 64, 32, 16, 8 are reshapes on every n = 64·K (K >= 2), so one program
# takes 128, 192, 256, ... at any batch size (checked at 128, 192 and 256 per axis) and refuses 96 (not a
# multiple) and 64 (K = 1).
def test_mano_at_its_default_exports_every_multiple_of_64(tmp_path):
    cfg = dict(in_channels=1, out_channels=1, width=16, n_layers=1, n_heads=2)
    run, model, xn, yn = _run(tmp_path, "mano", cfg, sample_shape=(64, 64),
                              domain={"kind": "grid", "shape": [64, 64]}, train_resolution=(64, 64))
    assert model.blocks[0].attn.pyramid == "physical"
    assert model.export_size_multiple == (64, 64) and model.export_size_range == [(128, None), (128, None)]
    info = export_run(run, tmp_path / "mano.pt2", input_dtype="float32")
    assert info["dynamic_dims"] == [0, 2, 3] and info["fixed_resolution"] is None, info["note"]
    program = torch.export.load(tmp_path / "mano.pt2").module()
    g = torch.Generator().manual_seed(6)
    diffs = {}
    for b, shape in zip((2, 1, 1), ((128, 128), (192, 128), (128, 256))):
        x = torch.randn(b, 1, *shape, generator=g) * 2 + 1
        ref = _eager_grid(model, xn, yn, x)
        out = program(x)
        assert out.shape == ref.shape == (b, 1, *shape)
        diffs["x".join(map(str, shape))] = float((out - ref).abs().max())
    for shape in ((96, 96), (64, 64)):
        with pytest.raises(Exception, match="Guard failed|size"):
            program(torch.randn(1, 1, *shape))
    DIFFS["mano (default)"] = diffs
    print(f"\nmano (default): max |exported - eager| {diffs}")
    assert max(diffs.values()) <= ATOL, diffs


# Cao's 2-D layout (examples/configs/darcy16_galerkin.toml): conv blocks and attention on a 16x16 latent grid, the
# band-limited spectral regressor evaluated on the input grid. Restriction onto the latent grid slices (exactly) when
# every size is a multiple of 16, so the program declares sizes 16 * K: one program for 16, 32, 48, ...
LATENT = dict(in_channels=1, out_channels=1, d_model=16, n_layers=1, n_heads=2, regressor_width=8, n_modes=6,
              latent_resolution=16, conv_blocks=2)


def test_latent_galerkin_transformer_exports_every_multiple_of_its_latent_grid(tmp_path):
    run, model, xn, yn = _run(tmp_path, "galerkin_transformer", LATENT, sample_shape=(16, 16),
                              domain={"kind": "grid", "shape": [16, 16]}, train_resolution=(16, 16))
    info = export_run(run, tmp_path / "latent.pt2", input_dtype="float32")
    assert info["dynamic_dims"] == [0, 2, 3] and info["fixed_resolution"] is None, info["note"]
    assert info["size_multiples"] == {"2": 16, "3": 16} and "multiples of (16, 16)" in info["note"]
    assert info["dynamic_ranges"]["2"] == [16, None] and info["dynamic_ranges"]["3"] == [16, None]
    program = torch.export.load(tmp_path / "latent.pt2").module()
    g = torch.Generator().manual_seed(3)
    diffs = {}
    for b, shape in zip((2, 1, 3, 2), ((16, 16), (32, 32), (48, 48), (16, 48))):
        x = torch.randn(b, 1, *shape, generator=g) * 2 + 1
        ref = _eager_grid(model, xn, yn, x)
        out = program(x)
        assert out.shape == ref.shape == (b, 1, *shape)
        diffs["x".join(map(str, shape))] = float((out - ref).abs().max())
    with pytest.raises(Exception, match="Guard failed|size"):  # eager interpolates other sizes; the program refuses
        program(torch.randn(1, 1, 20, 20))
    DIFFS["galerkin_transformer (latent 16)"] = diffs
    print(f"\ngalerkin_transformer (latent 16, conv blocks): max |exported - eager| {diffs}")
    assert max(diffs.values()) <= ATOL, diffs


@pytest.mark.parametrize("name, config", [
    ("erwin", dict(in_channels=2, out_channels=1, spatial_dims=2, c_hidden=[8, 16], enc_depths=[1, 1],
                   dec_depths=[1], n_heads=2, mlp_ratio=2)),  # Erwin's default: ball_mode='multiscale'
    ("erwin", dict(in_channels=2, out_channels=1, spatial_dims=2, c_hidden=[8, 16], enc_depths=[1, 1],
                   dec_depths=[1], n_heads=2, mlp_ratio=2, ball_mode="physical")),
    ("bsa_transformer", dict(in_channels=2, out_channels=1, spatial_dims=2, width=8, depth=1, n_heads=2,
                             ball_mode="physical", ball_diameter=0.3, block_diameter=0.1, top_k=2, mlp_ratio=2)),
])
def test_physical_ball_layouts_are_refused_by_export_in_one_line(name, config, tmp_path, capsys):
    """Physical cell layouts have value-dependent shapes: export says so and what to do, before tracing; the
    CLI prints the same line."""
    from sciattn.train.cli import main as cli

    run, model, *_ = _run(tmp_path, name, config, sample_shape=(64,),
                          domain={"kind": "point_cloud", "dim": 2, "n_points": 64}, train_resolution=(64,))
    mode = model.ball_mode
    assert mode == config.get("ball_mode", "multiscale")
    with pytest.raises(ValueError, match=rf"export: operator '{name}' of .* cannot be exported: "
                                         rf"ball_mode='{mode}' .* export a model built with ball_mode='points'"):
        export_run(run, tmp_path / "x.pt2", max_points=100)
    assert not (tmp_path / "x.pt2").exists()
    assert cli(["export", str(run), "--out", str(tmp_path / "y.pt2")]) != 0
    err = capsys.readouterr().err
    assert f"cannot be exported: ball_mode='{mode}'" in err and "Traceback" not in err
    assert not (tmp_path / "y.pt2").exists()
