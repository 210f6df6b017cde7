"""The per-channel Gaussian normaliser, a subclass of neuraloperator's ``UnitGaussianNormalizer``.

A module of its own so that neuraloperator (slow to import) is imported only when a Gaussian
normaliser is built or loaded: :mod:`sciattn.pde_data.normalizers` imports this module lazily.
"""

from __future__ import annotations

from typing import Any

import torch
from neuralop.data.transforms.normalizers import UnitGaussianNormalizer as _NeuralopUnitGaussian
from torch import nn

from sciattn._checks import check_dim, check_finite, check_rank, check_tensor

__all__ = ["UnitGaussianNormalizer"]

_MAX_RANK = 8  # (N, C) plus up to 6 spatial axes


def _check_grid(name: str, t: object) -> torch.Tensor:
    t = check_rank(name, t, range(3, _MAX_RANK + 1), "(N, C, *spatial)")
    if t.is_complex():
        raise TypeError(f"{name}: expected a real or bool tensor, got dtype {t.dtype}")
    return t


class UnitGaussianNormalizer(_NeuralopUnitGaussian):
    """``encode(x) = (x - mean) / (std + eps)`` with per-channel ``mean``/``std`` of shape (1, C, 1, ..., 1).

    Subclass of neuraloperator 2.0's ``UnitGaussianNormalizer`` (same buffers ``mean``/``std``,
    same unbiased ``torch.std``, same ``eps = 1e-7``, same ``transform``/``inverse_transform``),
    reused for the arithmetic. What this subclass adds or changes:

    * ``fit(data)`` with ``data`` (N, C, *spatial) picks the channel-wise reduction dims
      ``[0, 2, 3, ...]`` itself and returns ``self``; bool/integer data is cast to float32.
    * ``encode``/``decode`` check rank and channel count (the parent broadcasts silently).
    * ``to``/``cuda``/``cpu`` are plain ``nn.Module`` ones (the parent's ``to(device)`` rejects
      ``dtype=``/keyword arguments).
    * ``load_state_dict`` works on an unfitted instance (the parent's ``None`` buffers make it
      reject the ``mean``/``std`` keys).
    * ``partial_fit``/``from_dataset`` are disabled: the parent's incremental std multiplies the
      std (not the variance) by n/(n-1). Fit once on the whole training tensor instead
      (:func:`fit_normalizers`).

    A channel that is constant in the training data has std 0 and is divided by ``eps`` only, as in
    neuraloperator.
    """

    def __init__(self, mean: torch.Tensor | None = None, std: torch.Tensor | None = None, eps: float = 1e-7):
        if (mean is None) != (std is None):
            raise ValueError("mean, std: expected both or neither, got only one of them")
        if mean is not None:
            mean = check_rank("mean", mean, range(3, _MAX_RANK + 1), "(1, C, 1, ..., 1)")
            std = check_tensor("std", std)
            if mean.shape != std.shape or mean.shape[0] != 1 or any(s != 1 for s in mean.shape[2:]):
                raise ValueError(
                    f"mean, std: expected equal shapes (1, C, 1, ..., 1), got {tuple(mean.shape)} and {tuple(std.shape)}"
                )
        super().__init__(mean=mean, std=std, eps=float(eps), dim=None, mask=None)

    @property
    def fitted(self) -> bool:
        return self.mean is not None

    def fit(self, data: torch.Tensor) -> UnitGaussianNormalizer:
        """Fit per-channel mean and (unbiased) std of ``data`` (N, C, *spatial); returns ``self``."""
        data = _check_grid("data", data).to(torch.float32)
        check_finite("data", data)
        if data.numel() // data.shape[1] < 2:
            raise ValueError(f"data: expected at least 2 values per channel, got shape {tuple(data.shape)}")
        self.dim = [0, *range(2, data.dim())]
        super().fit(data)
        return self

    def _check_input(self, name: str, x: torch.Tensor) -> torch.Tensor:
        if not self.fitted:
            raise RuntimeError("UnitGaussianNormalizer: not fitted; call fit(data) or load a state first")
        check_rank(name, x, self.mean.dim(), "(B, C, *spatial)")
        check_dim(name, x, 1, self.mean.shape[1], "channels")
        return x

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` (B, C, *spatial), any spatial size."""
        return self.transform(self._check_input("x", x))

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """Undo :meth:`encode` on ``x`` (B, C, *spatial)."""
        return self.inverse_transform(self._check_input("x", x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode(x)

    def partial_fit(self, data_batch, batch_size=1):
        raise TypeError("UnitGaussianNormalizer.partial_fit: not supported (the parent's incremental std is "
                        "biased); use fit(data) on the whole training tensor")

    @classmethod
    def from_dataset(cls, dataset, dim=None, keys=None, mask=None):
        raise TypeError("UnitGaussianNormalizer.from_dataset: not supported; use fit_normalizers(train_dataset)")

    def to(self, *args: Any, **kwargs: Any) -> UnitGaussianNormalizer:
        return nn.Module.to(self, *args, **kwargs)

    def cuda(self, device: Any = None) -> UnitGaussianNormalizer:
        return nn.Module.cuda(self, device)

    def cpu(self) -> UnitGaussianNormalizer:
        return nn.Module.cpu(self)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for key in ("mean", "std"):
            if self._buffers.get(key) is None and prefix + key in state_dict:
                self._buffers[key] = torch.empty_like(state_dict[prefix + key])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        shape = tuple(self.mean.shape) if self.fitted else None
        return f"shape={shape}, eps={self.eps}"
