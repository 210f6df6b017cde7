"""Operator registry: ``@register_operator("name")`` and ``create_operator(name, **config)``.

Constructors take explicit keyword arguments. ``create_operator`` checks the config keys
against the constructor's signature and raises a ``ValueError`` naming any unknown key, then
stores the config on the instance (``model.config``: every constructor parameter, defaults
included) as plain JSON-serialisable data so a checkpoint can rebuild the same model without
pickling Python objects, even after a default changes.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from torch import nn

# What an operator takes: fields on a regular grid ``(B, C, *n)``, point sets ``(B, N, C)`` with positions
# ``(B, N, d)``, or fields on a latitude-longitude grid ``(B, C, nlat, nlon)``. A class states it as ``input_kind``.
from .contract import INPUT_KINDS, Operator

__all__ = ["register_operator", "create_operator", "list_operators", "migrate_stored", "operator_class",
           "operator_kind", "INPUT_KINDS"]

_OPERATORS: dict[str, type[nn.Module]] = {}


def register_operator(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator registering an operator under ``name``: a subclass of
    :class:`~sciattn.operators.contract.Operator` (the contract train/ reads) with a valid ``input_kind``."""

    def deco(cls: type[nn.Module]) -> type[nn.Module]:
        if not (isinstance(cls, type) and issubclass(cls, Operator)):
            raise TypeError(f"cls: expected a subclass of sciattn.operators.Operator (the operator contract) to "
                            f"register as {name!r}, got {getattr(cls, '__name__', cls)!r}")
        if cls.input_kind not in INPUT_KINDS:
            raise ValueError(f"input_kind: expected one of {INPUT_KINDS} on operator {name!r}, got "
                             f"{cls.input_kind!r}")
        if name in _OPERATORS and _OPERATORS[name] is not cls:
            raise ValueError(f"name: operator {name!r} is already registered to {_OPERATORS[name].__name__}")
        _OPERATORS[name] = cls
        cls.operator_name = name  # type: ignore[attr-defined]
        return cls

    return deco


def list_operators() -> list[str]:
    return sorted(_OPERATORS)


def operator_class(name: str) -> type[nn.Module]:
    if name not in _OPERATORS:
        raise ValueError(f"name: expected a registered operator, one of {list_operators()}, got {name!r}")
    return _OPERATORS[name]


def operator_kind(name: str) -> str:
    """``"grid"``, ``"points"`` or ``"sphere"``: the class attribute ``input_kind`` (checked at registration), which
    registry-wide tests, the trainer and export use to feed every operator the input it takes."""
    return operator_class(name).input_kind


def migrate_stored(name: str, config: dict[str, Any], version: int | None = None) -> tuple[str, dict[str, Any]]:
    """``(name, config)`` that rebuild an operator stored as ``name`` with ``config`` (a checkpoint's
    ``operator`` and ``operator_config``; ``version``: its stored ``config_version``, ``None`` if it has none).

    The stored name's class may hand the config to another registered operator
    (:meth:`~.contract.Operator.renamed_to`, decided on the stored config); each class on the way applies its
    :meth:`~.contract.Operator.migrate_config`. A name this version does not register is returned unchanged
    (:func:`create_operator` then names the registered ones)."""
    seen: set[str] = set()
    while name in _OPERATORS and name not in seen:
        seen.add(name)
        cls = _OPERATORS[name]
        target = cls.renamed_to(config)
        config = cls.migrate_config(config, version)
        if target is None or target == name:
            break
        name, version = target, None  # the new class's own versions do not apply to another class's config
    return name, config


def operator_parameters(name: str) -> dict[str, inspect.Parameter]:
    sig = inspect.signature(operator_class(name).__init__)
    return {k: p for k, p in sig.parameters.items() if k != "self"}


def create_operator(name: str, **config) -> nn.Module:
    """Build the operator registered as ``name`` from keyword arguments.

    Raises ``ValueError`` for an unknown name, an unknown config key, or a config that is
    not plain JSON data.
    """
    params = operator_parameters(name)
    unknown = sorted(set(config) - set(params))
    if unknown:
        raise ValueError(
            f"config: unknown key(s) {unknown} for operator {name!r}; expected keys from {sorted(params)}"
        )
    missing = sorted(k for k, p in params.items() if p.default is inspect.Parameter.empty and k not in config)
    if missing:
        raise ValueError(f"config: missing required key(s) {missing} for operator {name!r}")
    # Every parameter, defaults included: a checkpoint rebuilds the same model even if a default changes later,
    # so the defaults must be plain JSON too (checked here, together with the given values).
    defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
    stored = {**defaults, **config}
    try:
        json.dumps(stored)
    except TypeError as err:
        raise ValueError(f"config: expected plain JSON values (numbers, strings, lists), got {err}") from None
    model = operator_class(name)(**config)
    model.config = stored  # type: ignore[assignment]
    return model
