"""The dataset catalogue: one :class:`Record` per dataset, and everything else reads it.

A record says, in one place, what the package knows about a dataset:

- how to read or make it: ``loader(root, split, resolution, **options)`` for a name :func:`~.registry.load`
  accepts; ``open(path, probe, split, resolution, split_rule, **options)`` and ``detect(probe)`` for a file
  format (``load(path)`` and the trainer's ``[data] train = PATH`` pick the first format whose ``detect`` says
  yes); ``writer`` for ``sciattn data generate``; ``target()`` the function whose keywords are the accepted
  options, and ``options()`` the solver options a generator takes;
- its defaults: ``defaults = {"n_train", "n_test", "resolution"}`` of a built-in generator, and its
  ``presets``, the published protocols as its parameters (:mod:`.presets`);
- where it is published: ``downloads``, ``{group: (RemoteFile, ...)}`` with their checksums
  (``sciattn data fetch GROUP``; :mod:`.fetch`);
- its metadata: channel ``variables`` and ``periodic`` (``True``/``False``; ``None`` when unknown) of the domain
  (``dt`` and the grid follow the options, so the reader or generator records them with each dataset's ``meta``);
- the table row of ``sciattn data list``: ``source``, ``files``, ``split``, ``shapes``, ``resolutions``.

Readers of the catalogue: :func:`~.registry.load` (named datasets and file detection), :mod:`.generate`,
:mod:`.fetch`, :mod:`.presets`, and ``sciattn.train``, which only maps a ``[data] train`` string to a record.
A new reader or generator is one :func:`register` call; nothing else needs to change.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

__all__ = ["Record", "Probe", "register", "extend", "unregister", "get", "records", "formats", "detect", "catalogue_view",
           "lazy"]

XARRAY_SUFFIXES = (".nc", ".nc4", ".zarr", ".cdf")


@dataclass(frozen=True)
class Record:
    """One dataset of the catalogue (module docstring). The first seven fields are the ``sciattn data list`` row
    (and the older ``Benchmark`` record's fields, in its order)."""

    name: str
    source: str = ""
    files: str = ""
    split: str = ""
    shapes: str = ""
    loader: Callable[..., Any] | None = None
    resolutions: str = "as stored"
    kind: str = "benchmark"  # "benchmark" (named files), "generator" (built-in solver), "format" (a file reader)
    detect: Callable[[Probe], bool] | None = None
    open: Callable[..., Any] | None = None
    target: Callable[[], Callable[..., Any]] | None = None
    own_split: bool = False  # a format with a train/test division of its own
    subsamples: bool = False  # a format that subsamples to ``resolution`` itself
    options: Callable[[], set[str]] | None = None
    defaults: Mapping[str, int] = field(default_factory=dict)
    writer: Callable[..., Any] | None = None
    downloads: Mapping[str, tuple] = field(default_factory=dict)
    variables: Mapping[str, list[str]] | None = None
    periodic: bool | None = None
    points: bool = False  # a generator whose resolution is a number of points per sample
    presets: tuple = ()  # the papers' protocols as parameters of this generator (:class:`~.presets.Preset`)
    time_series: bool = False  # a generator whose inputs and outputs are consecutive time steps of one field
    single_grid: bool = False  # a generator that solves on one grid (no restriction to other resolutions)
    matched_to: str | None = None  # a generator fitted to the files named here (sweeps draw it as "matched")


_RECORDS: dict[str, Record] = {}


def register(record: Record) -> Record:
    """Add ``record`` to the catalogue; a second record of the same name is refused."""
    if record.name in _RECORDS:
        raise ValueError(f"name: dataset {record.name!r} is already in the catalogue")
    _RECORDS[record.name] = record
    return record


def extend(name: str, **fields: Any) -> Record:
    """Give the record ``name`` more fields (a named dataset that is also a file format); it moves to the end of
    the catalogue's order, which is the order of detection."""
    record = dataclasses.replace(_RECORDS.pop(name), **fields)
    _RECORDS[name] = record
    return record


def unregister(name: str) -> None:
    """Remove the record ``name`` (tests that add a record of their own take it out again)."""
    _RECORDS.pop(name, None)


def get(name: str) -> Record | None:
    return _RECORDS.get(name)


def records(predicate: Callable[[Record], bool] = lambda r: True) -> list[Record]:
    """The records for which ``predicate`` holds, in registration order."""
    return [r for r in _RECORDS.values() if predicate(r)]


def formats() -> list[Record]:
    """The file formats, in detection order."""
    return records(lambda r: r.detect is not None)


class catalogue_view(Mapping):  # noqa: N801 (reads like the dict it replaces)
    """A live, read-only ``{name: value}`` of the records that ``predicate`` selects (``value(record)``,
    default the record): the older tables (``BENCHMARKS``, ``READERS``, ``SOURCES``, ...) as views."""

    def __init__(self, predicate: Callable[[Record], bool], value: Callable[[Record], Any] = lambda r: r):
        self._predicate, self._value = predicate, value

    def __getitem__(self, name: str):
        r = _RECORDS.get(name) if isinstance(name, str) else None
        if r is None or not self._predicate(r):
            raise KeyError(name)
        return self._value(r)

    def __iter__(self) -> Iterator[str]:
        return iter([r.name for r in _RECORDS.values() if self._predicate(r)])

    def __len__(self) -> int:
        return sum(1 for r in _RECORDS.values() if self._predicate(r))

    def __repr__(self) -> str:
        return f"catalogue_view({list(self)})"


def lazy(module: str, name: str) -> Callable[[], Any]:
    """``() -> sciattn.pde_data.<module>.<name>``, imported on call (records name functions of modules that
    import heavy libraries, or that import the catalogue themselves)."""

    def get_attr():
        return getattr(importlib.import_module(f"sciattn.pde_data.{module}"), name)

    get_attr.__qualname__ = f"lazy({module}.{name})"
    return get_attr


class Probe:
    """What detection reads of a file, each read at most once: the first 8 bytes, a MAT-file's variables, an
    HDF5 file's root attributes and groups, a ``.pt`` file's object. ``unreadable(what, lib, err)`` turns a
    library's failure into the caller's error (``load`` and the trainer word them differently)."""

    def __init__(self, path: Path, unreadable: Callable[[str, str, BaseException], Exception]):
        self.path, self._unreadable = path, unreadable

    @cached_property
    def head(self) -> bytes:
        with open(self.path, "rb") as fh:
            return fh.read(8)

    @cached_property
    def mat_keys(self) -> dict[str, tuple[int, ...] | None]:
        from .readers.fno_mat import mat_variables

        return mat_variables(self.path) if self.head.startswith(b"MATLAB") else {}

    @cached_property
    def hdf5(self) -> tuple[set[str], set[str]] | None:
        """``(root attribute names, root group names)`` of an HDF5 file, else ``None``."""
        if not self.head.startswith(b"\x89HDF"):
            return None
        import h5py

        try:
            with h5py.File(self.path, "r") as fh:
                return set(fh.attrs), set(fh)
        except OSError as err:  # h5py: truncated or damaged superblock, no path in its message
            raise self._unreadable("an HDF5 file", "HDF5", err) from None

    @cached_property
    def torch_object(self) -> Any:
        import torch

        try:
            return torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises several types for corrupt files
            raise self._unreadable("a torch .pt file", "torch", err) from None

    @property
    def is_torch(self) -> bool:
        return self.path.suffix == ".pt" or self.head.startswith(b"PK")


def detect(probe: Probe, arg: str) -> Record | None:
    """The first format whose ``detect`` accepts the file (``None``: none does). A MAT-file no FNO format
    matches is an error naming ``arg``."""
    for record in formats():
        if record.detect(probe):
            return record
    if probe.path.is_file() and probe.head.startswith(b"MATLAB"):
        keys = probe.mat_keys
        raise ValueError(f"{arg}: {str(probe.path)!r} is a MAT-file with keys {sorted(keys)}, which match no FNO "
                         "benchmark (Darcy coeff/sol, Burgers a/u, Navier-Stokes u (N, X, Y, T))")
    return None
