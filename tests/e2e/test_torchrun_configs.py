"""Every config in examples/configs trains under ``torchrun --nproc-per-node 2`` (gloo, CPU) through
``sciattn train``, for one epoch: the README's DDP command, on each shipped config.

The configs are globbed, so configs added later are covered without editing this file:

* default suite: every config with tiny data (``n_train = 4``, ``n_test = 2``, test at the training
  resolution only) and global batch 2 (one sample per rank), all in **one** torchrun launch
  (``_torchrun_many.py`` calls the CLI's ``main`` per config: each run otherwise costs ~20 s of
  process start and imports on 2 cores), plus the README's own command, ``-m sciattn.train.cli``
  in its own launch, on the first config;
* ``-m slow``: every config in its own ``-m sciattn.train.cli`` launch, with the tiny data and at
  its shipped sizes.

A config whose data files (e.g. ``../shared/data``) are absent is skipped.
"""

from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(glob.glob(str(REPO / "examples" / "configs" / "*.toml")))
GENERATED = {"darcy", "burgers", "navier_stokes", "shallow_water", "coupled_navier_stokes"}


def _raw(path: str) -> dict:
    return tomllib.loads(Path(path).read_text())


def _ids(paths):
    return [Path(p).stem for p in paths]


def _missing_files(data: dict) -> list[str]:
    """Data paths of the config (relative to the repository root, as the README runs it) that do not exist."""
    out = []
    for key in ("train", "test"):
        value = data.get(key, "")
        if not value or value in GENERATED or data.get("format") == "darcy_solver":
            continue
        looks_like_path = "/" in value or Path(value).suffix != ""
        if looks_like_path and not (REPO / value).expanduser().exists():
            out.append(str(REPO / value))
    return out


def _overrides(raw: dict, cache: Path, tiny: bool) -> list[str]:
    data = raw.get("data", {})
    sets = ["train.epochs=1", "train.batch_size=2", "train.grad_accum_steps=1", "train.threads=1",
            "train.tensorboard=false", "train.wandb=false", f"data.cache_dir={json.dumps(str(cache))}"]
    if tiny:
        sets += ["data.n_train=4", "data.n_test=2"]
        res = data.get("resolution", data.get("train_resolution"))
        if "test_resolutions" in data and res is not None:
            sets.append(f"data.test_resolutions=[{res}]")
    return sets


def _torchrun(config: str, out: Path, sets: list[str], timeout: float):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "sciattn.train.cli", "train", config, "--out", str(out), "--no-progress",
           *[a for s in sets for a in ("--set", s)]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.perf_counter() - started


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("torchrun_cache")


def _train_and_check(config: str, tmp_path: Path, cache: Path, tiny: bool, timeout: float) -> None:
    raw = _raw(config)
    missing = _missing_files(raw.get("data", {}))
    if missing:
        pytest.skip(f"{Path(config).name}: data files not found: {missing}")
    proc, seconds = _torchrun(config, tmp_path / "run", _overrides(raw, cache, tiny), timeout)
    print(f"{Path(config).name}: torchrun wall {seconds:.1f} s")
    assert proc.returncode == 0, f"{Path(config).name}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    assert "parameters that were not used" not in proc.stderr
    assert "2 ranks" in proc.stdout
    _check_run(tmp_path / "run", Path(config).name)


def test_configs_folder_is_not_empty():
    assert len(CONFIGS) >= 3


@pytest.fixture(scope="module")
def one_launch(tmp_path_factory, cache):
    """Train every runnable config (tiny) in one torchrun launch: ``{config: (rc, seconds, out)}``,
    ``rc = None`` for a config not reached (the launch stops at the first failure); the launch's
    stdout/stderr for the messages."""
    root = tmp_path_factory.mktemp("torchrun_many")
    jobs = []
    for config in CONFIGS:
        raw = _raw(config)
        if _missing_files(raw.get("data", {})):
            continue
        jobs.append({"name": Path(config).stem, "config": config, "out": str(root / Path(config).stem),
                     "sets": _overrides(raw, cache, tiny=True)})
    spec = root / "spec.json"
    spec.write_text(json.dumps(jobs))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(Path(__file__).with_name("_torchrun_many.py")), str(spec)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    print(f"one torchrun launch for {len(jobs)} configs: {time.perf_counter() - started:.1f} s")
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("@@ "):
            name, rc, sec = line[3:].split()
            results[name] = (int(rc.split("=")[1]), float(sec.split("=")[1]))
    return results, proc, root


def _check_run(out: Path, name: str) -> None:
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2, name
    assert metrics["test"], f"{name}: no test set was evaluated"
    for test_name, result in metrics["test"].items():
        assert math.isfinite(result["rel_l2"]) and result["rel_l2"] > 0, (name, test_name, result)
    assert (out / "checkpoint.pt").is_file()


@pytest.mark.parametrize("config", CONFIGS, ids=_ids(CONFIGS))
def test_every_config_trains_under_torchrun(config, one_launch):
    missing = _missing_files(_raw(config).get("data", {}))
    if missing:
        pytest.skip(f"{Path(config).name}: data files not found: {missing}")
    results, proc, root = one_launch
    name = Path(config).stem
    assert name in results, f"{name}: not reached (an earlier config failed, or the launch died):\n" \
                            f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    rc, seconds = results[name]
    print(f"{name}: {seconds:.1f} s inside the shared launch")
    assert rc == 0, f"{name}: rc {rc}\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}"
    _check_run(root / name, name)


def test_readme_command_trains_the_first_config(tmp_path, cache):
    """``torchrun --nproc-per-node 2 -m sciattn.train.cli train CONFIG``, the README's command."""
    runnable = [c for c in CONFIGS if not _missing_files(_raw(c).get("data", {}))]
    if not runnable:
        pytest.skip("no config has its data files")
    _train_and_check(runnable[0], tmp_path, cache, tiny=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=_ids(CONFIGS))
def test_every_config_trains_under_its_own_torchrun(config, tmp_path, cache):
    _train_and_check(config, tmp_path, cache, tiny=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=_ids(CONFIGS))
def test_every_config_trains_under_torchrun_at_full_size(config, tmp_path, cache):
    _train_and_check(config, tmp_path, cache, tiny=False, timeout=3600)
