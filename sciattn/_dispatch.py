"""Backend dispatch: backends declare what they support as data; the dispatcher explains refusals.

Backends live in the leaf registry :mod:`sciattn._backend_registry` (one list per op, sorted by
priority; this module imports no family). :func:`select_backend` returns the first one with no reason against the inputs. A
forced backend that does not fit raises :class:`BackendError` listing every backend and why it
was refused, e.g.::

    BackendError: backend 'triton' cannot run op 'galerkin' on these inputs:
      - triton: device cpu not in ('cuda',); triton is not installed
      - reference: ok

:func:`available_backends` prints the registry as a table.
"""

from __future__ import annotations

import torch

from ._backend_registry import (
    _REGISTRY,
    Backend,
    BackendError,
    backends_for,
    canonical_op,
    register_backend,
    triton_backend,
)

__all__ = ["Backend", "BackendError", "register_backend", "triton_backend", "select_backend", "available_backends", "backends_for"]


def select_backend(
    op: str,
    backend: str | None,
    *,
    device: torch.device,
    dtype: torch.dtype,
    head_dim: int,
    has_mask: bool,
    has_weights: bool,
    requires_grad: bool = False,
) -> Backend:
    """Pick the backend for ``op``: the forced one if it fits, else the first that fits."""
    op = canonical_op(op)
    candidates = backends_for(op)
    names = [b.name for b in candidates]
    if backend is not None and backend not in names:
        raise BackendError(f"backend: expected one of {names} for op {op!r}, got {backend!r}")
    props = dict(
        device=device, dtype=dtype, head_dim=head_dim, has_mask=has_mask, has_weights=has_weights,
        requires_grad=requires_grad,
    )
    report = []
    for b in candidates:
        reasons = b.reasons_against(**props)
        if backend is None and not reasons and b.interpreted_on(device):
            reasons = ["runs here only through the Triton interpreter (force it by name)"]
        if not reasons and (backend is None or b.name == backend):
            return b
        report.append(f"  - {b.name}: {'; '.join(reasons) if reasons else 'ok'}")
    wanted = f"backend {backend!r} cannot" if backend else "no backend can"
    raise BackendError(
        f"{wanted} run op {op!r} on inputs (device={device.type}, dtype={dtype}, head_dim={head_dim}, "
        f"mask={has_mask}, weights={has_weights}):\n" + "\n".join(report)
    )


def available_backends(print_table: bool = True) -> list[dict[str, object]]:
    """List every registered backend with its capabilities and availability here.

    Returns one dict per backend; with ``print_table`` also prints a Markdown table. Every family
    registers when ``sciattn`` is imported, so the list does not depend on what was imported before.
    """

    rows = []
    for op in sorted(_REGISTRY):
        for b in _REGISTRY[op]:
            why = b.available()
            rows.append(
                {
                    "op": op,
                    "backend": b.name,
                    "priority": b.priority,
                    "devices": ",".join(b.devices) if b.devices else "any",
                    "dtypes": ",".join(str(d).replace("torch.", "") for d in b.dtypes) if b.dtypes else "any",
                    "max_head_dim": b.max_head_dim or "any",
                    "mask": b.supports_mask,
                    "weights": b.supports_weights,
                    "backward": ",".join(b.backward_devices) if b.backward_devices else "yes",
                    "available": "yes" if not why else f"no ({why})",
                }
            )
    if print_table and rows:
        keys = list(rows[0])
        print("| " + " | ".join(keys) + " |")
        print("|" + "---|" * len(keys))
        for r in rows:
            print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    return rows
