"""The flat module paths of ``sciattn.pde_data`` from before it was grouped by job, kept working as aliases.

Every module used to sit directly in ``pde_data/`` (``sciattn.pde_data.darcy``, ``sciattn.pde_data.fno_mat``,
...). The readers, solvers and transforms now live in sub-packages (``readers/``, ``solvers/``, ``transforms/``),
and :data:`MOVED` maps each old name to its new module. Importing an old name gives the **same module object** as
the new one::

    import sciattn.pde_data.darcy, sciattn.pde_data.solvers.darcy
    assert sciattn.pde_data.darcy is sciattn.pde_data.solvers.darcy

so ``from sciattn.pde_data.darcy import generate_darcy`` returns the same function, and
``monkeypatch.setattr("sciattn.pde_data.darcy.generate_darcy", ...)`` patches the module the package's code calls;
pickles that name an old path still load.

How: :class:`AliasFinder`, a meta-path finder installed by ``sciattn.pde_data/__init__.py``, answers only for the
names in :data:`MOVED`. Its loader imports the new module and hands that module to the import system, which then
stores it under the old name too (``sys.modules`` and the parent's attribute). Nothing is imported until an old
name is asked for, so ``import sciattn.pde_data`` stays as light as it was.

Why a finder and not one-line alias files (``darcy.py`` holding ``sys.modules[__name__] = solvers.darcy``): 21
such files would keep the flat folder that the grouping removes, and the API reference, generated from the
modules it finds, would document every module twice. The table below is the whole mechanism's data.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

__all__: list[str] = []

#: old module name (under ``sciattn.pde_data``) -> its module now (under ``sciattn.pde_data``)
MOVED: dict[str, str] = {
    # readers: one file format or published benchmark layout per file
    "fno_mat": "readers.fno_mat",
    "geofno": "readers.geofno",
    "neuralop_pt": "readers.neuralop_pt",
    "pdebench": "readers.pdebench",
    "shapenet_car": "readers.shapenet_car",
    "the_well": "readers.the_well",
    "xarray_data": "readers.xarray_data",
    # solvers: PDE solvers that generate data, one per file
    "burgers": "solvers.burgers",
    "burgers_neuralop": "solvers.burgers_neuralop",
    "coupled_navier_stokes": "solvers.coupled_navier_stokes",
    "darcy": "solvers.darcy",
    "darcy_neuralop": "solvers.darcy_neuralop",
    "irregular": "solvers.irregular",
    "navier_stokes": "solvers.navier_stokes",
    "shallow_water": "solvers.shallow_water",
    "shallow_water_data": "solvers.shallow_water.data",
    "sht": "solvers.sht",
    # transforms: what is applied to a dataset (normalisers, splits, grid -> point sets)
    "normalizers": "transforms.normalizers",
    "point_sets": "transforms.point_sets",
    "splits": "transforms.splits",
    "unit_gaussian": "transforms.unit_gaussian",
}


class AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``<package>.<old>`` as the already-importable module ``<package>.<MOVED[old]>``."""

    def __init__(self, package: str, moved: dict[str, str]):
        self.package, self.moved = package, moved
        self._specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def target(self, fullname: str) -> str | None:
        parent, _, name = fullname.rpartition(".")
        new = self.moved.get(name) if parent == self.package else None
        return f"{self.package}.{new}" if new else None

    def find_spec(self, fullname, path=None, target=None):
        new = self.target(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, self, loader_state=new)

    def create_module(self, spec):
        module = importlib.import_module(spec.loader_state)
        self._specs[module.__name__] = module.__spec__  # the import system overwrites __spec__; exec_module restores it
        return module

    def exec_module(self, module):
        module.__spec__ = self._specs.pop(module.__name__)  # relative imports inside it keep their own package


def install(package: str) -> AliasFinder:
    """Put one :class:`AliasFinder` for ``package`` on ``sys.meta_path`` (idempotent: a reload replaces it)."""
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not (type(f).__name__ == "AliasFinder" and getattr(f, "package", None) == package)]
    finder = AliasFinder(package, MOVED)
    sys.meta_path.append(finder)
    return finder
