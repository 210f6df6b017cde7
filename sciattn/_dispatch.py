"""Backend dispatch: backends declare what they support as data; the dispatcher explains refusals.

Each attention operation (``"galerkin"``, ...) has a list of :class:`Backend` objects sorted by
priority. :func:`select_backend` returns the first one with no reason against the inputs. A
forced backend that does not fit raises :class:`BackendError` listing every backend and why it
was refused, e.g.::

    BackendError: backend 'triton' cannot run op 'galerkin' on these inputs:
      - triton: device cpu not in ('cuda',); triton is not installed
      - reference: ok

:func:`available_backends` prints the registry as a table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ._capabilities import has_triton, triton_interpreter_enabled

__all__ = ["Backend", "BackendError", "register_backend", "triton_backend", "select_backend", "available_backends", "backends_for"]


class BackendError(ValueError):
    """No backend (or not the requested one) can run an operation on the given inputs."""


@dataclass
class Backend:
    """One implementation of one operation, with its capabilities declared as data.

    Attributes:
        op: operation name, e.g. ``"galerkin"``.
        name: backend name, e.g. ``"reference"``.
        fn: the implementation, called with the functional's arguments.
        priority: higher runs first when ``backend=None``.
        devices: device types it runs on (``None``: any).
        dtypes: input dtypes it accepts (``None``: any floating dtype).
        max_head_dim: largest head size (``None``: unbounded).
        supports_mask / supports_weights: whether padding masks / quadrature weights are handled.
        backward_devices: device types where it can also differentiate (``None``: wherever it runs).
        interpreter_devices: extra device types it runs on through Triton's interpreter while
            ``TRITON_INTERPRET=1`` is set (for testing kernels on CPU tensors). The automatic choice
            never lands on an interpreted backend; it must be forced by name.
        available: a zero-argument probe (e.g. "is triton installed"); returns a reason string
            when unavailable, or ``None``.
        rtol / atol: tolerances against the float64 reference, per dtype, used by the tests.
    """

    op: str
    name: str
    fn: Callable
    priority: int = 0
    devices: tuple[str, ...] | None = None
    dtypes: tuple[torch.dtype, ...] | None = None
    max_head_dim: int | None = None
    supports_mask: bool = True
    supports_weights: bool = True
    backward_devices: tuple[str, ...] | None = None
    interpreter_devices: tuple[str, ...] | None = None
    available: Callable[[], str | None] = field(default=lambda: None)
    tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)

    def interpreted_on(self, device: torch.device) -> bool:
        """Whether on ``device`` this backend would run only through Triton's interpreter."""
        return (
            self.interpreter_devices is not None
            and self.devices is not None
            and device.type not in self.devices
            and device.type in self.interpreter_devices
        )

    def reasons_against(
        self,
        *,
        device: torch.device,
        dtype: torch.dtype,
        head_dim: int,
        has_mask: bool,
        has_weights: bool,
        requires_grad: bool = False,
    ) -> list[str]:
        """Why this backend cannot run on inputs with these properties (empty list: it can)."""
        reasons = []
        why = self.available()
        if why:
            reasons.append(why)
        interpreted = self.interpreted_on(device) and triton_interpreter_enabled()
        if self.devices is not None and device.type not in self.devices and not interpreted:
            reasons.append(f"device {device.type} not in {self.devices}")
        if self.dtypes is not None and dtype not in self.dtypes:
            reasons.append(f"dtype {dtype} not in {tuple(str(d) for d in self.dtypes)}")
        if self.max_head_dim is not None and head_dim > self.max_head_dim:
            reasons.append(f"head dim {head_dim} > {self.max_head_dim}")
        if has_mask and not self.supports_mask:
            reasons.append("masks not supported")
        if has_weights and not self.supports_weights:
            reasons.append("quadrature weights not supported")
        if requires_grad and self.backward_devices is not None and device.type not in self.backward_devices:
            reasons.append(f"no backward on {device.type} (only on {self.backward_devices})")
        return reasons


_REGISTRY: dict[str, list[Backend]] = {}

TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def triton_backend(
    op: str, fn: Callable, *, priority: int, tolerances: dict[torch.dtype, tuple[float, float]]
) -> Backend:
    """The declaration shared by the Triton kernels: CUDA (plus CPU tensors under the interpreter,
    when forced by name), fp32/fp16/bf16 with fp32 accumulation, head dims up to 128, and a probe
    that reports a missing ``triton`` without importing it."""
    missing = None if has_triton() else "triton is not installed (pip install sciattn[kernels])"
    return Backend(
        op=op,
        name="triton",
        fn=fn,
        priority=priority,
        devices=("cuda",),
        interpreter_devices=("cpu",),
        dtypes=TRITON_DTYPES,
        max_head_dim=128,
        available=lambda: missing,
        tolerances=tolerances,
    )


def register_backend(backend: Backend) -> Backend:
    """Add ``backend`` to the registry of its op (replacing one of the same name)."""
    entries = [b for b in _REGISTRY.get(backend.op, []) if b.name != backend.name]
    entries.append(backend)
    entries.sort(key=lambda b: -b.priority)
    _REGISTRY[backend.op] = entries
    return backend


def backends_for(op: str) -> list[Backend]:
    """Registered backends of ``op``, highest priority first."""
    if op not in _REGISTRY:
        raise ValueError(f"op: expected one of {sorted(_REGISTRY)}, got {op!r}")
    return list(_REGISTRY[op])


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

    Returns one dict per backend; with ``print_table`` also prints a Markdown table.
    """
    from . import balltree, codomain, galerkin, multipole, neighborhood, weighted_softmax  # noqa: F401  (registers their backends)

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
