"""Write the API reference's pages from the packages' ``__all__`` (called by ``conf.py`` on every
build, so a name added to an ``__all__`` is documented without touching the docs).

One page per module in :data:`GROUPS`: that module's ``__all__`` in an autosummary table, then each
name's autodoc entry on the same page (one page per module keeps the build fast and reads as a unit), the public
layers first, then the functionals, then the rest. A class or function re-exported by several modules is
documented once, on its family's page if a family lists it (else where it is first listed); the other pages list
it in a table of summaries linking there.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

# (caption, modules); a trailing ".*" adds the public sub-modules that define __all__.
GROUPS = [
    ("sciattn: attention layers and functionals", ["sciattn"]),
    ("Attention families", ["sciattn.galerkin", "sciattn.multipole", "sciattn.codomain", "sciattn.balltree",
                            "sciattn.spherical", "sciattn.weighted_softmax", "sciattn.neighborhood"]),
    ("Domains and quadrature", ["sciattn.domain", "sciattn.quadrature", "sciattn.partial_sums"]),
    ("sciattn.operators: neural operators", ["sciattn.operators", "sciattn.operators.point_parts"]),
    ("sciattn.pde_data: readers and generators", ["sciattn.pde_data", "sciattn.pde_data.*", "sciattn.pde_data.readers.*",
                                                  "sciattn.pde_data.solvers.*", "sciattn.pde_data.transforms.*"]),
    ("sciattn.train: its public names, the run config", ["sciattn.train", "sciattn.train.*"]),
    ("sciattn.train.training: trainer, runs, checkpoints", ["sciattn.train.training.*"]),
    ("sciattn.train.datasets: a run's data and its record", ["sciattn.train.datasets.*"]),
    ("sciattn.train.analysis: sweeps, rollouts, figures", ["sciattn.train.analysis.*"]),
    ("sciattn.train.deployment: export and surrogate", ["sciattn.train.deployment.*"]),
]

SKIP_SUBMODULES = {"sciattn.train.cli"}  # the command line has its own page (cli.md)


def _expand(names: list[str]) -> list[str]:
    out = []
    for name in names:
        if not name.endswith(".*"):
            out.append(name)
            continue
        pkg = importlib.import_module(name[:-2])
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            full = f"{pkg.__name__}.{info.name}"
            if info.name.startswith("_") or full in SKIP_SUBMODULES:
                continue
            if getattr(importlib.import_module(full), "__all__", None):
                out.append(full)
    return out


def _public(modname: str) -> list[str]:
    mod = importlib.import_module(modname)
    names = getattr(mod, "__all__", None)
    if names is None:
        raise RuntimeError(f"{modname} has no __all__; the API reference is generated from it")
    return [n for n in names if not n.startswith("__")]


def _underline(text: str, ch: str = "=") -> str:
    return f"{text}\n{ch * len(text)}\n"


def resolve(qualified: str):
    """The object a dotted ``sciattn...`` name refers to, or ``None``."""
    module, _, name = qualified.rpartition(".")
    for mod_name, attr in ((qualified, None), (module, name)):
        try:
            mod = importlib.import_module(mod_name)
        except (ImportError, ValueError):
            continue
        return mod if attr is None else getattr(mod, attr, None)
    # A method or attribute: resolve the class first.
    owner = resolve(module) if module else None
    return getattr(owner, name, None) if owner is not None else None


def is_module(obj) -> bool:
    return inspect.ismodule(obj)


#: groups whose pages own (document) a name they share with an earlier group: a family's layer and functional are
#: documented on the family's page, where its other names are, and the top-level ``sciattn`` page links there
OWNER_FIRST = ("Attention families",)


def _rank(obj) -> int:
    """Order of a module page's entries: the public layers first, then the functionals, then the rest
    (NamedTuples of internals, constants)."""
    if inspect.isclass(obj) and _is_module_class(obj):
        return 0
    if inspect.isroutine(obj):
        return 1
    return 2


def write_api_pages(out: Path) -> dict[int, str]:
    """Write ``out/<module>.rst`` for every module of :data:`GROUPS` and ``out/toc.rst.inc`` (the
    grouped toctrees that ``api/index.rst`` includes). Files are rewritten only when they change, so
    an incremental build stays incremental; pages of modules no longer listed are removed. Returns ``{id(object): qualified name}`` of every class
    and function documented (where its entry is): a name shared by several modules is documented once, on the
    page of a family module (:data:`OWNER_FIRST`) if one lists it, else on the first page that lists it."""
    out.mkdir(parents=True, exist_ok=True)
    documented: dict[int, str] = {}  # id(object) -> qualified name where it is documented
    groups = [(caption, _expand(names)) for caption, names in GROUPS]
    for _caption, mods in sorted(groups, key=lambda g: g[0] not in OWNER_FIRST):  # ownership pass
        for modname in mods:
            mod = importlib.import_module(modname)
            for n in _public(modname):
                obj = getattr(mod, n)
                if (inspect.isclass(obj) or inspect.isroutine(obj)) and id(obj) not in documented:
                    documented[id(obj)] = f"{modname}.{n}"
    toc = []
    for caption, mods in groups:
        toc += [".. toctree::", f"   :caption: {caption}", "   :maxdepth: 1", ""]
        toc += [f"   _auto/{m}" for m in mods] + [""]
        for modname in mods:
            mod = importlib.import_module(modname)
            own, elsewhere = [], []
            for n in _public(modname):
                obj = getattr(mod, n)
                key = id(obj) if (inspect.isclass(obj) or inspect.isroutine(obj)) else None
                if key is not None and documented[key] != f"{modname}.{n}":
                    elsewhere.append(documented[key])
                    continue
                own.append(n)
            own.sort(key=lambda n: _rank(getattr(mod, n)))  # stable: the __all__ order within a rank
            lines = [_underline(modname), f".. automodule:: {modname}", "   :no-members:", "",
                     f".. currentmodule:: {modname}", ""]
            if own:
                lines += [".. autosummary::", "   :nosignatures:", ""]
                lines += [f"   {n}" for n in own] + [""]
                for n in own:
                    lines += [_directive(getattr(mod, n), n), ""]
            if elsewhere:  # a table with their summaries, linking to where they are documented
                lines += ["Also exported here, each documented on the page of the module that first lists it:", "",
                          ".. autosummary::", "   :nosignatures:", ""]
                # relative to the page's module where it is a prefix (autosummary refuses the current module's name)
                lines += [f"   ~{q[len(modname) + 1:] if q.startswith(modname + '.') else q}" for q in elsewhere] + [""]
            _write(out / f"{modname}.rst", "\n".join(lines))
    _write(out / "toc.rst.inc", "\n".join(toc))
    # a page of a module that is no longer listed (moved or removed) would still be built, with duplicate targets
    pages = {f"{m}.rst" for _caption, mods in groups for m in mods}
    for stale in out.glob("*.rst"):
        if stale.name not in pages:
            stale.unlink()
    return documented


def _is_module_class(obj) -> bool:
    return any(c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module" for c in inspect.getmro(obj))


def _directive(obj, name: str) -> str:
    """The autodoc directive documenting ``name`` on its module's page."""
    if inspect.isclass(obj):
        # modules also list what they inherit from a shared base of ours (e.g. forward), not torch.nn.Module's
        inherited = "\n   :inherited-members: Module" if _is_module_class(obj) else ""
        return f".. autoclass:: {name}\n   :members:{inherited}\n   :show-inheritance:"
    if inspect.isroutine(obj):
        return f".. autofunction:: {name}"
    return f".. autodata:: {name}\n   :no-value:" if not isinstance(obj, (int, float, str, tuple)) else f".. autodata:: {name}"


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
