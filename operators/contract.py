"""The operator contract: what every registered operator declares on itself, so that training, checkpoints,
sweeps and export read the operator instead of tables of operator names.

A registered operator (``@register_operator("name")``) is a subclass of :class:`Operator`, an ``nn.Module`` whose
class attributes and hooks are the contract:

* ``input_kind``: ``"grid"`` (fields ``(B, C, *spatial)``; operators of this kind may also take point sets
  ``(B, N, C)`` with ``pos``), ``"points"`` (point sets only: ``forward(x (B, N, C), pos (B, N, d), mask=,
  weights=)``) or ``"sphere"`` (fields ``(B, C, nlat, nlon)`` on a latitude-longitude grid; such an operator has
  ``shape`` and ``inner_shape`` and ``on_grid(nlat, nlon)``, the same weights on another grid).
* ``export_policy``: an :class:`ExportPolicy`, the reasons ``sciattn export`` reports (refused, one grid per
  program, in-graph padding of point sets, sizes as multiples). The per-model numbers are instance hooks:
  ``export_unsupported_reason``, ``export_size_multiple`` (an int or one per axis: traced sizes are multiples of
  it), ``export_size_range`` (``[(min, max or None), ...]`` per axis) and ``export_fixed_reason`` (why a model
  declares no multiple); all ``None`` by default.
* ``config_version`` and :meth:`Operator.migrate_config`: a checkpoint stores the constructor arguments
  (``model.config``, every parameter with its default, set by :func:`~.registry.create_operator`) and the class's
  ``config_version``; loading passes the stored config through ``migrate_config``, which returns the arguments
  that rebuild the stored model under today's defaults. The default fills ``legacy_defaults`` (a key absent from
  an old config takes the value it had then, e.g. ``variant="sciattn_v1"``); override it for anything else.
  :meth:`Operator.renamed_to` says that a stored config of this name is built by another registered operator now
  (MANO's configs written before ``mano_extended`` existed); :func:`~.registry.migrate_stored` applies both.
* ``in_channels``, ``out_channels`` and ``spatial_dims`` as attributes (CoDA-NO: ``variables``).

``migrate_config`` must be idempotent (a current config passes unchanged), and a migration is decided by what the
stored config holds (key absence), or by ``version`` (the stored ``config_version``; ``None`` for checkpoints
written before versions were stored), never by the date.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import nn

__all__ = ["ExportPolicy", "INPUT_KINDS", "Operator"]

#: What an operator takes (see the module docstring).
INPUT_KINDS = ("grid", "points", "sphere")


@dataclass(frozen=True)
class ExportPolicy:
    """How ``sciattn export`` (:func:`sciattn.train.export_run`) treats an operator class.

    Attributes:
        supported: ``False``: every model of the class is refused, naming ``reason``.
        reason: why export is refused (with ``supported=False``).
        fixed_grid: why a program holds one grid (sphere operators: geometry built in Python for one
            ``nlat x nlon``); the program is exported at one resolution, once per grid.
        padded_points: why a point-set program pads the cloud in the graph to a capacity and fixes its batch
            (instead of a dynamic ``N`` and batch).
        multiple: why the traced spatial sizes are multiples of the model's ``export_size_multiple``.
        specialised: why a model that declares no multiple is traced at one resolution.
    """

    supported: bool = True
    reason: str | None = None
    fixed_grid: str | None = None
    padded_points: str | None = None
    multiple: str | None = None
    specialised: str | None = None


class Operator(nn.Module):
    """Base class of the registered operators: the contract of the module docstring, with its defaults."""

    operator_name: ClassVar[str]  # set by register_operator
    input_kind: ClassVar[str] = "grid"
    export_policy: ClassVar[ExportPolicy] = ExportPolicy()
    config_version: ClassVar[int] = 1
    legacy_defaults: ClassVar[Mapping[str, Any]] = {}
    export_size_multiple: int | tuple[int, ...] | None = None
    export_size_range: list[tuple[int, int | None]] | None = None
    export_fixed_reason: str | None = None
    config: dict[str, Any]  # the constructor arguments as stored (create_operator sets it)

    @property
    def export_unsupported_reason(self) -> str | None:
        """Why this model cannot be exported, or ``None``; by default the class's ``export_policy``."""
        policy = self.export_policy
        return None if policy.supported else (policy.reason or "its export policy says it is not supported")

    @classmethod
    def migrate_config(cls, config: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        """The constructor arguments that rebuild a model stored with ``config`` (written at ``config_version``
        ``version``; ``None``: before versions were stored): by default ``legacy_defaults`` filled in where a key is
        absent (a config that holds the key, ``None`` included, is kept)."""
        absent = {k: v for k, v in cls.legacy_defaults.items() if k not in config}
        return {**config, **absent} if absent else config

    @classmethod
    def renamed_to(cls, config: dict[str, Any]) -> str | None:
        """The registered name that builds a config stored under this operator's name, when that is another
        operator now (``None``: this one). Read on the stored config, before :meth:`migrate_config`."""
        del config
        return None
