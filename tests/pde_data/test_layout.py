"""The layout of pde_data/ by job: the old flat module paths are aliases of the moved modules (the same objects),
the modules' import graph has no circle, and every sub-package is packaged (pyproject's explicit list)."""

from __future__ import annotations

import ast
import importlib
import pickle
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import sciattn.pde_data as pde_data
from sciattn.pde_data._aliases import MOVED

ROOT = Path(__file__).resolve().parents[2]
PDE_DATA = ROOT / "pde_data"


def _dotted(path: Path) -> str:
    parts = path.relative_to(PDE_DATA).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(("sciattn.pde_data", *parts))


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_is_the_moved_module(old):
    new = importlib.import_module(f"sciattn.pde_data.{MOVED[old]}")
    assert importlib.import_module(f"sciattn.pde_data.{old}") is new
    assert getattr(pde_data, old) is new
    assert new.__spec__.name == new.__name__ == f"sciattn.pde_data.{MOVED[old]}"  # its own spec, not the alias's
    assert (PDE_DATA / f"{old}.py").exists() is False  # an alias, not a file left behind


def test_old_paths_work_in_a_fresh_interpreter_before_anything_imports_them():
    code = ("import sys, warnings; warnings.simplefilter('error'); import sciattn.pde_data as p; "
            "from sciattn.pde_data.darcy import generate_darcy; "
            "from sciattn.pde_data import shallow_water_data as swd; "
            "assert p.splits is sys.modules['sciattn.pde_data.transforms.splits']; "
            "assert generate_darcy is sys.modules['sciattn.pde_data.solvers.darcy'].generate_darcy; "
            "assert swd is p.solvers.shallow_water.data; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_pickle_that_names_an_old_path_loads_the_same_object():
    from sciattn.pde_data.solvers.darcy import generate_darcy

    assert pickle.loads(b"csciattn.pde_data.darcy\ngenerate_darcy\n.") is generate_darcy  # protocol 0 GLOBAL
    assert pickle.loads(pickle.dumps(generate_darcy)) is generate_darcy


def test_patching_an_old_path_patches_what_the_package_calls(monkeypatch, tmp_path):
    calls = []

    def fake(*args, **kwargs):
        calls.append(args)
        raise RuntimeError("patched")

    monkeypatch.setattr("sciattn.pde_data.darcy.load_or_generate_darcy", fake)
    with pytest.raises(RuntimeError, match="patched"):
        pde_data.load("darcy", split="train", resolution=8, root=tmp_path, n_train=2, n_test=1, progress=False)
    assert len(calls) == 1


def test_unknown_names_still_raise_attribute_and_import_errors():
    with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
        pde_data.nonexistent  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sciattn.pde_data.nonexistent")


def _module_level_imports(path: Path) -> set[str]:
    """The pde_data modules ``path`` imports at module level (top-level statements only, not inside functions)."""
    name = _dotted(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                for cand in (f"{base}.{alias.name}", base):
                    if (_module_path(cand)) is not None:
                        out.add(cand)
                        break
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if _module_path(a.name) is not None}
    return out - {name}


def _module_path(dotted: str) -> Path | None:
    if not dotted.startswith("sciattn.pde_data"):
        return None
    rel = Path(*dotted.split(".")[2:]) if dotted != "sciattn.pde_data" else Path()
    for cand in (PDE_DATA / rel.with_suffix(".py") if rel.parts else None, PDE_DATA / rel / "__init__.py"):
        if cand is not None and cand.is_file():
            return cand
    return None


def test_module_level_imports_have_no_circle():
    graph = {_dotted(p): _module_level_imports(p) for p in PDE_DATA.rglob("*.py")}
    # a package's __init__ is imported before its modules; an edge to a package's __init__ from inside it is fine
    state: dict[str, int] = {}
    cycles = []

    def visit(node, stack):
        state[node] = 1
        for nxt in graph.get(node, ()):
            if node.startswith(nxt + "."):  # a module reaching up to its own package's __init__
                continue
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []
    # and no module papers over one with a module __getattr__: the only two are the package's alias hook and the
    # normalisers' lazy import of neuraloperator (slow to import), neither of which resolves a circle
    getattrs = {_dotted(p) for p in PDE_DATA.rglob("*.py")
                if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in ast.parse(p.read_text()).body)}
    assert getattrs == {"sciattn.pde_data", "sciattn.pde_data.transforms.normalizers"}


def test_every_sub_package_is_listed_in_pyproject():
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {_dotted(p) for p in PDE_DATA.rglob("__init__.py")}
    assert found <= packages, sorted(found - packages)
