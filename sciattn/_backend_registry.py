"""The backend registry: a leaf module that every family registers into and that imports no family.

Each attention operation (``"galerkin"``, ``"multipole"``, ...) has a list of :class:`Backend`
objects sorted by priority. A family's ``functional.py`` calls :func:`register_backend` at import
time; ``import sciattn`` imports every family, so the registry is complete whatever was imported
first. Selection and the printed table live in :mod:`sciattn._dispatch`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ._capabilities import has_flex_attention, has_triton, triton_interpreter_enabled

__all__ = [
    "Backend",
    "BackendError",
    "register_backend",
    "torch_backend",
    "cpu_kernel_backend",
    "sdpa_backend",
    "triton_backend",
    "standard_tolerances",
    "flex_unavailable",
    "FLOAT_DTYPES",
    "backends_for",
    "registered_ops",
    "canonical_op",
]

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
        probe_last: run ``available`` only for inputs the other capabilities fit (a costly probe: the fused CPU
            kernels' builds its library on first call, which CUDA or half-precision inputs must not pay for).
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
    probe_last: bool = False
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
        why = None if self.probe_last else self.available()
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
        if self.probe_last and not reasons:
            why = self.available()
            if why:
                reasons.append(why)
        return reasons


_REGISTRY: dict[str, list[Backend]] = {}

TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# (rtol, atol) against the float64 reference of a backend that computes in the input's dtype with PyTorch's
# own kernels (matmul, SDPA); the tests generated from the registry read them per backend.
_STANDARD_TOLERANCES = {
    torch.float64: (1e-12, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (2e-2, 2e-3),
    torch.bfloat16: (5e-2, 1e-2),
}


def standard_tolerances(*dtypes: torch.dtype) -> dict[torch.dtype, tuple[float, float]]:
    """The standard ``(rtol, atol)`` of each of ``dtypes`` (no dtypes: all four, float64 first)."""
    return {d: _STANDARD_TOLERANCES[d] for d in dtypes or _STANDARD_TOLERANCES}


def flex_unavailable() -> str | None:
    """The availability probe of the ``flex`` backends: why ``flex_attention`` cannot run here, or None."""
    return None if has_flex_attention() else "torch.nn.attention.flex_attention is not available"


def torch_backend(
    op: str,
    name: str,
    fn: Callable,
    *,
    priority: int = 0,
    tolerances: dict[torch.dtype, tuple[float, float]] | None = None,
    **capabilities,
) -> Backend:
    """A backend written in PyTorch (a reference, a chunked or an SDPA/flex path): any device and floating dtype
    unless ``capabilities`` (the other fields of :class:`Backend`) narrow them; ``tolerances`` default to the
    standard float64 and float32 ones."""
    if tolerances is None:
        tolerances = standard_tolerances(torch.float64, torch.float32)
    return Backend(op=op, name=name, fn=fn, priority=priority, tolerances=tolerances, **capabilities)


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


def cpu_kernel_backend(
    op: str, fn: Callable, *, priority: int, probe: Callable[[], str | None],
    tolerances: dict[torch.dtype, tuple[float, float]] | None = None,
) -> Backend:
    """The declaration shared by the fused C++ CPU kernels (built on first use, :mod:`sciattn._cpu_build`): backend
    ``cpu``, CPU tensors in float32 and float64, with ``probe`` (the family's extension's ``why_not``) run only for
    inputs that fit the rest (``probe_last``)."""
    return torch_backend(op, "cpu", fn, priority=priority, devices=("cpu",), dtypes=(torch.float32, torch.float64),
                         available=probe, probe_last=True, tolerances=tolerances)


def sdpa_backend(op: str, fn: Callable, *, priority: int = 10) -> Backend:
    """The declaration shared by the backends that run PyTorch's fused ``scaled_dot_product_attention`` over
    blocks (balls, windows; :mod:`sciattn._blocked_sdpa`): any device, every floating dtype, standard tolerances."""
    return torch_backend(op, "sdpa", fn, priority=priority, dtypes=FLOAT_DTYPES, tolerances=standard_tolerances())


def register_backend(backend: Backend) -> Backend:
    """Add ``backend`` to the registry of its op (replacing one of the same name)."""
    entries = [b for b in _REGISTRY.get(backend.op, []) if b.name != backend.name]
    entries.append(backend)
    entries.sort(key=lambda b: -b.priority)
    _REGISTRY[backend.op] = entries
    return backend


# Former op names still accepted (with a DeprecationWarning) by every lookup.
_DEPRECATED_OPS = {"window": "multipole"}


def canonical_op(op: str) -> str:
    """``op`` with a deprecated alias replaced by the family's name (``"window"`` -> ``"multipole"``)."""
    if op in _DEPRECATED_OPS and op not in _REGISTRY:
        new = _DEPRECATED_OPS[op]
        warnings.warn(f"op {op!r} is deprecated, use {new!r}", DeprecationWarning, stacklevel=3)
        return new
    return op


def registered_ops() -> list[str]:
    """Names of the ops with at least one registered backend, sorted."""
    return sorted(_REGISTRY)


def backends_for(op: str) -> list[Backend]:
    """Registered backends of ``op``, highest priority first."""
    op = canonical_op(op)
    if op not in _REGISTRY:
        raise ValueError(f"op: expected one of {sorted(_REGISTRY)}, got {op!r}")
    return list(_REGISTRY[op])
