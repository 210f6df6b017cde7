"""Mixed precision: ``fp32``, ``bf16`` autocast, or ``fp16`` autocast with a gradient scaler.

Under autocast the operator's forward pass runs its matrix products in the low-precision dtype;
the output is cast back to float32 before the output normaliser's ``decode`` and the loss, so
the relative errors (ratios of norms over the whole grid) are accumulated in float32.

``fp16`` has 5 exponent bits: small gradients underflow. It trains with loss scaling — the
loss is multiplied by ``S`` before ``backward``, the gradients are divided by ``S`` before
clipping and the step, and a step whose gradients hold Inf/NaN is skipped and ``S`` halved
(``torch.amp.GradScaler``). torch implements that on CUDA, so ``fp16`` is a CUDA option; on the
CPU use ``bf16`` (8 exponent bits, the range of float32; no scaling needed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from sciattn._checks import check_choice

__all__ = ["PRECISIONS", "Precision"]

PRECISIONS = ("fp32", "bf16", "fp16")
_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    """Autocast context and (for ``fp16``) gradient scaling for one device.

    Args:
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (``fp16`` needs a CUDA device).
        device: the training device.
    """

    def __init__(self, precision: str, device: torch.device) -> None:
        check_choice("train.precision", precision, PRECISIONS)
        if precision == "fp16" and device.type != "cuda":
            raise ValueError(
                f"train.precision: 'fp16' trains with a GradScaler, which needs a CUDA device; use 'bf16' on the "
                f"CPU, got device {str(device)!r}"
            )
        self.name = precision
        self.device = device
        self.dtype = _DTYPES[precision]
        self.scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.dtype is None:
            yield
        else:
            with torch.autocast(self.device.type, dtype=self.dtype):
                yield

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the loss scale (before clipping)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()

    def state_dict(self) -> dict[str, Any] | None:
        return self.scaler.state_dict() if self.scaler is not None else None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
