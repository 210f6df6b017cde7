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

from torch import nn

__all__ = ["register_operator", "create_operator", "list_operators", "operator_class", "operator_kind", "INPUT_KINDS"]

# What an operator takes: fields on a regular grid ``(B, C, *n)``, point sets ``(B, N, C)`` with positions
# ``(B, N, d)``, or fields on a latitude-longitude grid ``(B, C, nlat, nlon)``. A class states it as ``input_kind``.
INPUT_KINDS = ("grid", "points", "sphere")

_OPERATORS: dict[str, type[nn.Module]] = {}


def register_operator(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator registering an operator under ``name``."""

    def deco(cls: type[nn.Module]) -> type[nn.Module]:
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
    """``"grid"``, ``"points"`` or ``"sphere"``: the class attribute ``input_kind`` (``"grid"`` if unset), which
    registry-wide tests use to feed every operator the input it takes."""
    kind = getattr(operator_class(name), "input_kind", "grid")
    if kind not in INPUT_KINDS:
        raise ValueError(f"input_kind: expected one of {INPUT_KINDS} on operator {name!r}, got {kind!r}")
    return kind


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
