"""The flat module paths of ``sciattn.train`` from before it was grouped by job still import, as the same module
objects as the new paths (``train/_aliases.py``), so a monkeypatch through an old path patches the code that runs."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sciattn.train
from sciattn.train import _aliases

#: every module that sat flat in train/ before the grouping, with the module that holds its code now
OLD_PATHS = {
    "area_metrics": "analysis.area_metrics", "batching": "training.batching", "checkpoint": "training.checkpoint",
    "data": "datasets.data", "data_stats": "datasets.data_stats", "distributed": "training.distributed",
    "evaluation": "training.evaluation", "export": "deployment.export", "loggers": "training.loggers",
    "losses": "training.losses", "plots": "analysis.plots", "precision": "training.precision",
    "rollout": "analysis.rollout", "run": "training.run", "run_metadata": "datasets.run_metadata",
    "sources": "datasets.sources", "surrogate": "deployment.surrogate", "sweep": "analysis.sweep",
    "sweep_data": "analysis.sweep_data", "train_state": "training.train_state", "trainer": "training.trainer",
}


REPO = Path(__file__).resolve().parents[2]


def test_the_alias_table_covers_every_old_path():
    assert _aliases.MOVED == OLD_PATHS


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_old_path_is_the_same_module_object(old):
    new = importlib.import_module(f"sciattn.train.{OLD_PATHS[old]}")
    assert importlib.import_module(f"sciattn.train.{old}") is new
    assert getattr(sciattn.train, old) is new
    assert sys.modules[f"sciattn.train.{old}"] is new
    # the module keeps its own name and spec: one name per module for pickling, `-m` and the docs
    assert new.__name__ == new.__spec__.name == f"sciattn.train.{OLD_PATHS[old]}"


def test_old_paths_in_a_fresh_interpreter():
    """Attribute access after only ``import sciattn.train``, ``from ... import`` and ``import ... as`` all give the
    module of the new path, and the alias loads nothing a plain import of the new path does not."""
    code = (
        "import json, sys, sciattn.train as t\n"
        "a = t.trainer\n"
        "from sciattn.train import export as e\n"
        "import sciattn.train.sweep_data as s\n"
        "from sciattn.train.run_metadata import read_data_meta\n"
        "print(json.dumps([a is sys.modules['sciattn.train.training.trainer'],"
        " e is sys.modules['sciattn.train.deployment.export'],"
        " s is sys.modules['sciattn.train.analysis.sweep_data'],"
        " read_data_meta is t.read_data_meta]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, True, True, True]


def test_monkeypatch_through_an_old_path_patches_the_caller(monkeypatch):
    from sciattn.train.training import run as run_module

    sentinel = object()
    monkeypatch.setattr("sciattn.train.run.build_datasets", sentinel)
    assert run_module.build_datasets is sentinel


def test_unknown_names_are_still_refused():
    with pytest.raises(AttributeError, match="has no attribute 'trainers'"):
        sciattn.train.trainers  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sciattn.train.trainers")


def test_the_package_benchmarks_and_gallery_use_the_new_paths():
    """The old paths are for users' code: the package (bar the alias table and the package docstring that explain
    them), the benchmarks and the gallery name each module by its new path."""
    old = re.compile(r"sciattn\.train\.(" + "|".join(OLD_PATHS) + r")\b")
    files = [p for p in (REPO / "train").rglob("*.py") if p.parent.name != "train" or p.name not in
             ("__init__.py", "_aliases.py")]
    files += sorted((REPO / "benchmarks").glob("*.py")) + sorted((REPO / "examples").rglob("*.py"))
    assert len(files) > 30
    found = [f"{p.relative_to(REPO)}:{i}: {m.group(0)}" for p in files
             for i, line in enumerate(p.read_text().splitlines(), 1) for m in old.finditer(line)]
    assert not found, "old module paths (use the new ones, train/_aliases.py):\n" + "\n".join(found)
