"""A new operator needs only its file (issue 36): operators defined here, one of each input kind, registered in the
test, go through ``sciattn train``, ``--resume``, ``sciattn evaluate --resolutions`` and ``sciattn export`` with no
change to ``sciattn.train``: the pipeline reads their contract (:mod:`sciattn.operators.contract`), never their
names.

Each operator is a pointwise map plus a quadrature mean of the field (a one-term integral operator)::

    u(x) = W_2 gelu(W_1 [a(x), p(x)] + ∫ W_1 [a, p] dμ)

with uniform weights on grids, the given weights on point sets and the cos-latitude weights on the sphere.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from torch import nn

from sciattn.operators import ExportPolicy, Operator, create_operator, register_operator
from sciattn.operators import registry as registry_module
from sciattn.train.checkpoint import load_checkpoint, load_model
from sciattn.train.cli import main
from sciattn.train.export import load_program

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class TinyGrid(Operator):
    """Pointwise lift plus the uniform-quadrature mean over the grid; ``(B, C_in, *n) -> (B, C_out, *n)``."""

    input_kind = "grid"
    config_version = 2
    legacy_defaults = {"gain": 0.5}  # version 1 configs had no ``gain``: their mean entered at half weight

    def __init__(self, *, in_channels: int, out_channels: int, spatial_dims: int = 2, width: int = 8,
                 gain: float = 1.0):
        super().__init__()
        self.in_channels, self.out_channels, self.spatial_dims, self.gain = in_channels, out_channels, spatial_dims, gain
        self.lift, self.proj = nn.Linear(in_channels, width), nn.Linear(width, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lift(x.movedim(1, -1))  # (B, *n, width)
        axes = tuple(range(1, 1 + self.spatial_dims))
        h = h + self.gain * h.mean(dim=axes, keepdim=True)
        return self.proj(nn.functional.gelu(h)).movedim(-1, 1)


class TinyPoints(Operator):
    """Pointwise lift of ``[a, p]`` plus its weighted mean over the real points; ``(B, N, C_in) -> (B, N, C_out)``."""

    input_kind = "points"

    def __init__(self, *, in_channels: int, out_channels: int, spatial_dims: int = 2, width: int = 8):
        super().__init__()
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.lift, self.proj = nn.Linear(in_channels + spatial_dims, width), nn.Linear(width, out_channels)

    def forward(self, x, pos, mask=None, weights=None):
        w = torch.ones(x.shape[:2], dtype=x.dtype) if weights is None else weights.to(x.dtype)
        if mask is not None:
            w = w * mask.to(x.dtype)
        h = self.lift(torch.cat([x, pos.to(x.dtype)], dim=-1))
        mean = (w[..., None] * h).sum(1, keepdim=True) / w.sum(1)[:, None, None]
        out = self.proj(nn.functional.gelu(h + mean))
        return out if mask is None else out * mask[..., None].to(out.dtype)


class TinySphere(Operator):
    """Pointwise lift plus the cos-latitude quadrature mean on an equiangular ``nlat x nlon`` grid (poles
    included); runs on any such grid with the same weights (:meth:`on_grid`)."""

    input_kind = "sphere"
    spatial_dims = 2
    export_policy = ExportPolicy(fixed_grid="the test's sphere operator is exported on one grid")

    def __init__(self, *, in_channels: int, out_channels: int, nlat: int, nlon: int, width: int = 8):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.shape = self.inner_shape = (nlat, nlon)
        self.lift, self.proj = nn.Linear(in_channels, width), nn.Linear(width, out_channels)

    def on_grid(self, nlat: int, nlon: int):
        other = copy.deepcopy(self)
        other.shape = (nlat, nlon)
        return other

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nlat = x.shape[2]
        lat = torch.linspace(-math.pi / 2, math.pi / 2, nlat, dtype=x.dtype)
        w = torch.cos(lat).clamp_min(0)[:, None] / nlat  # per row; the longitude mean is uniform
        h = self.lift(x.movedim(1, -1))  # (B, nlat, nlon, width)
        mean = (w[..., None] * h.mean(dim=2, keepdim=True)).sum(1, keepdim=True) / w.sum()
        return self.proj(nn.functional.gelu(h + mean)).movedim(-1, 1)


class TinyGridOld(Operator):
    """A name whose stored configs another operator builds now (a registry-level rename)."""

    def __init__(self, *, in_channels: int, out_channels: int):
        super().__init__()

    @classmethod
    def renamed_to(cls, config):
        return "test_tiny_grid"


OPERATORS = {"test_tiny_grid": TinyGrid, "test_tiny_points": TinyPoints, "test_tiny_sphere": TinySphere,
             "test_tiny_grid_old": TinyGridOld}


@pytest.fixture(scope="module", autouse=True)
def registered():
    for name, cls in OPERATORS.items():
        register_operator(name)(cls)
    yield
    for name in OPERATORS:  # the registry-wide tests list every registered operator: leave none behind
        registry_module._OPERATORS.pop(name, None)


# kind: (model, data, swept resolutions, training resolution, export shape); tiny sizes so each runs in seconds
CASES = {
    "grid": ('name = "test_tiny_grid"', 'train = "darcy"\nresolution = 8\ntest_resolutions = [8]', [8, 16], 8, None),
    "points": ('name = "test_tiny_points"',
               'train = "darcy_irregular"\nresolution = 64\noptions = { fine_resolution = 16 }', [32, 64], 64, None),
    "sphere": ('name = "test_tiny_sphere"',
               'train = "shallow_water"\nresolution = 8\noptions = { n_traj = 2, traj_len = 2 }', [8, 16], 8, None),
}


def _config(tmp_path, kind: str):
    model, data, *_ = CASES[kind]
    path = tmp_path / f"{kind}.toml"
    path.write_text(f"[model]\n{model}\n\n[data]\n{data}\nn_train = 4\nn_test = 2\n\n"
                    f"[train]\nepochs = 1\nbatch_size = 2\nlr = 1e-3\nloss = \"l2\"\nscheduler = \"cosine\"\n")
    return path


@pytest.mark.parametrize("kind", sorted(CASES))
def test_an_operator_defined_in_a_test_trains_resumes_sweeps_and_exports(kind, tmp_path, capsys):
    _, _, resolutions, train_res, _ = CASES[kind]
    cfg, run, root = _config(tmp_path, kind), tmp_path / "run", tmp_path / "data"
    common = ["--no-progress", "--set", f'data.root="{root}"']
    assert main(["train", str(cfg), "--out", str(run), *common]) == 0
    state = load_checkpoint(run)
    name = f"test_tiny_{kind}"
    assert state["operator"] == name and state["epoch"] == 1
    assert state["operator_config_version"] == OPERATORS[name].config_version
    assert json.loads(state["operator_config"]) == load_model(run)[0].config

    # resume for a second epoch (the cosine schedule may be extended): the stored weights go on training
    before = state["model"]
    assert main(["train", str(cfg), "--out", str(run), "--resume", "--set", "train.epochs=2", *common]) == 0
    after = load_checkpoint(run)
    assert after["epoch"] == 2 and after["step"] == 2 * state["step"]
    assert any(not torch.equal(before[k], after["model"][k]) for k in before)

    # the resolution sweep on the run's own generator
    capsys.readouterr()
    assert main(["evaluate", str(run), "--resolutions", *map(str, resolutions), "--n-samples", "2",
                 "--root", str(root), "--no-progress"]) == 0
    reports = list((run / "eval").glob("*.json"))
    assert len(reports) == 1, reports
    report = json.loads(reports[0].read_text())
    rows = {r["resolution"]: r for r in report["rows"]}
    assert list(rows) == resolutions and report["train_resolution"] == train_res
    assert all(math.isfinite(r["rel_l2"]) and r["rel_l2"] > 0 for r in rows.values())
    assert report["layout"] == ("points" if kind == "points" else "grid")
    assert report["sphere"] is (kind == "sphere")

    # export, and the program equals the eager pipeline on another input
    out = tmp_path / "program.pt2"
    assert main(["export", str(run), "--out", str(out)]) == 0
    program = load_program(out)
    model, xn, yn, _ = load_model(run)
    spec = program.spec
    assert spec["operator"] == name and spec["kind"] == kind
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        if kind == "points":
            assert spec["dynamic_dims"] == [0, 1] and spec["max_points"] is None  # no padding policy: direct N
            x, pos = torch.randn(3, 50, spec["in_channels"], generator=g), torch.rand(3, 50, 2, generator=g)
            w, mask = torch.ones(3, 50), torch.ones(3, 50, dtype=torch.bool)
            got = program(x, pos, w, mask)
            want = yn.decode(model(xn.encode(x.transpose(1, 2)).transpose(1, 2), pos=pos, mask=mask,
                                   weights=w).transpose(1, 2)).transpose(1, 2)
        else:
            shape = spec["fixed_resolution"] or [12, 10]
            if kind == "sphere":
                assert shape == [8, 16] and "the test's sphere operator is exported on one grid" in spec["note"]
            else:
                assert spec["fixed_resolution"] is None and spec["dynamic_dims"] == [0, 2, 3]
            x = torch.randn(2, spec["in_channels"], *shape, generator=g).to(getattr(torch, spec["input_dtype"]))
            got = program(x)
            want = yn.decode(model(xn.encode(x.float())))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_the_operator_s_own_migration_and_rename_apply_on_load(tmp_path):
    """``legacy_defaults`` fill a key an old stored config lacks; ``renamed_to`` hands a stored name to another
    operator: both through ``load_model``, which names no operator."""
    from sciattn.pde_data.normalizers import UnitGaussianNormalizer
    from sciattn.train.checkpoint import save_checkpoint

    torch.manual_seed(0)
    model = create_operator("test_tiny_grid", in_channels=1, out_channels=1, gain=0.5)
    norm = UnitGaussianNormalizer(torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    path = save_checkpoint(tmp_path / "checkpoint.pt", model=model, x_normalizer=norm, y_normalizer=norm)
    state = torch.load(path, weights_only=True)
    old = {k: v for k, v in json.loads(state["operator_config"]).items() if k != "gain"}  # as version 1 stored it
    x = torch.randn(2, 1, 6, 5)
    for stored_name in ("test_tiny_grid", "test_tiny_grid_old"):
        state.update(operator=stored_name, operator_config=json.dumps(old))
        state.pop("operator_config_version", None)
        torch.save(state, path)
        loaded, *_ = load_model(path)
        assert loaded.operator_name == "test_tiny_grid" and loaded.config["gain"] == 0.5
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), model(x))
    assert create_operator("test_tiny_grid", in_channels=1, out_channels=1).config["gain"] == 1.0


def test_registering_a_class_without_the_contract_is_refused():
    with pytest.raises(TypeError, match=r"cls: expected a subclass of sciattn.operators.Operator .* got 'Linear'"):
        register_operator("test_not_an_operator")(nn.Linear)
    bad = type("Bad", (Operator,), {"input_kind": "mesh"})
    with pytest.raises(ValueError, match=r"input_kind: expected one of \('grid', 'points', 'sphere'\) on operator "
                                         r"'test_bad', got 'mesh'"):
        register_operator("test_bad")(bad)
    assert "test_not_an_operator" not in registry_module._OPERATORS and "test_bad" not in registry_module._OPERATORS
