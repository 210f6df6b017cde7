"""Learned fields given by a few Fourier modes: variable-specific positional encodings (VSPE).

A :class:`FourierField` with ``C`` channels is the trigonometric polynomial

    f_c(x) = Σ_{k ∈ K} a_{c,k} cos(2π k·x̂) + b_{c,k} sin(2π k·x̂),   x̂ = (x - lo) / (hi - lo),

over the frequency vectors ``K = {k ∈ Z^d : |k_i| ≤ m_i}`` modulo ``k ~ -k`` (one of each
pair). It is a function on the box, not a grid array, so it is evaluated on any grid size or
point set: sampling the same encoding at 32² and 256² gives the same function, which is what
makes the encoding resolution-independent. (CoDA-NO stores the same object as an rFFT
half-spectrum and realises it with an inverse FFT; evaluating the series at the nodes also
works on non-uniform rules and point clouds.)

:class:`VariableEncoding` holds one such field per variable name and grows at run time with
:meth:`VariableEncoding.add_variable`, so an unseen variable can be fine-tuned without
rebuilding the model.

Shapes:
    positions ``(N, d)`` -> ``(C, N)``; on a grid of shape ``n`` -> ``(C, *n)``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

from .._checks import check_positive_int, check_rank
from ..domain import Grid
from ..quadrature import interval_rule

__all__ = ["FourierField", "VariableEncoding", "evaluate_fields", "half_frequencies"]

_PREFIX = "var_"  # ModuleDict keys: a variable may be called "keys" or "training" without clashing


def half_frequencies(modes: Sequence[int]) -> torch.Tensor:
    """Integer frequency vectors ``(K, d)``: one of each pair ``±k`` with ``|k_i| ≤ modes[i]``,
    ``k = 0`` included; ``K = (Π(2 m_i + 1) + 1) / 2``."""
    out = []
    for k in itertools.product(*[range(-m, m + 1) for m in modes]):
        first = next((c for c in k if c != 0), 0)
        if first >= 0:  # keep k = 0 and the vectors whose first non-zero entry is positive
            out.append(k)
    return torch.tensor(out, dtype=torch.float64)


def _normalize_modes(modes: int | Sequence[int], spatial_dims: int) -> tuple[int, ...]:
    m = (modes,) * spatial_dims if isinstance(modes, int) else tuple(modes)
    if len(m) != spatial_dims or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in m):
        raise ValueError(f"modes: expected a non-negative int or {spatial_dims} such ints, got {modes!r}")
    return m


def grid_positions(shape: Sequence[int], bounds=None, rule: str = "uniform", dtype=torch.float32, device=None):
    """Nodes of ``Grid(shape, bounds, rule)`` mapped to the unit box, ``(N, d)`` in C order."""
    grid = Grid(tuple(shape), bounds, rule)
    nodes, _ = grid.nodes_and_weights(torch.float64, device)
    lo = torch.tensor([a for a, _ in grid.bounds], dtype=torch.float64, device=device)
    hi = torch.tensor([b for _, b in grid.bounds], dtype=torch.float64, device=device)
    return ((nodes - lo) / (hi - lo)).to(dtype)


class FourierField(nn.Module):
    """A learned ``C``-channel field with Fourier modes ``|k_i| ≤ modes_i`` (see the module doc).

    Args:
        channels: ``C``.
        spatial_dims: ``d``.
        modes: highest frequency per axis (int or ``d`` ints).
        init_std: standard deviation of the initial coefficients; default ``1/sqrt(2K)``, so the
            field has values of order one.
    """

    def __init__(self, channels: int, spatial_dims: int, modes: int | Sequence[int] = 4,
                 init_std: float | None = None) -> None:
        super().__init__()
        check_positive_int("channels", channels)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        self.channels, self.spatial_dims = channels, spatial_dims
        self.modes = _normalize_modes(modes, spatial_dims)
        freqs = half_frequencies(self.modes)
        self.register_buffer("freqs", freqs.float(), persistent=False)
        std = init_std if init_std is not None else 1.0 / math.sqrt(2 * len(freqs))
        self.cos = nn.Parameter(std * torch.randn(channels, len(freqs)))
        self.sin = nn.Parameter(std * torch.randn(channels, len(freqs)))

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """Evaluate at ``positions`` ``(N, d)`` in unit-box coordinates; returns ``(C, N)``."""
        check_rank("positions", positions, 2, f"(N, d={self.spatial_dims})")
        if positions.shape[1] != self.spatial_dims:
            raise ValueError(f"positions: expected {self.spatial_dims} coordinates per point, got {positions.shape[1]}")
        phase = 2 * math.pi * positions @ self.freqs.to(positions).T  # (N, K)
        return self.cos.to(positions.dtype) @ torch.cos(phase).T + self.sin.to(positions.dtype) @ torch.sin(phase).T

    def forward(self, shape: Sequence[int], bounds=None, rule: str = "uniform",
                dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
        """Evaluate on the nodes of ``Grid(shape, bounds, rule)``; returns ``(C, *shape)``."""
        return evaluate_fields([self], shape, bounds, rule, dtype, device)


class VariableEncoding(nn.Module):
    """One :class:`FourierField` per variable name (variable-specific positional encoding).

    Args:
        names: initial variable names (non-empty strings without ``.``, unique).
        channels: encoding channels per variable.
        spatial_dims: ``d``.
        modes: highest frequency per axis.

    Shapes:
        ``forward(names, shape)`` -> ``(len(names), channels, *shape)``.
    """

    def __init__(self, names: Sequence[str], channels: int, spatial_dims: int,
                 modes: int | Sequence[int] = 4) -> None:
        super().__init__()
        check_positive_int("channels", channels)
        self.channels, self.spatial_dims = channels, spatial_dims
        self.modes = _normalize_modes(modes, spatial_dims)
        self.fields = nn.ModuleDict()
        for name in names:
            self.add_variable(name)

    @property
    def names(self) -> list[str]:
        return [key[len(_PREFIX):] for key in self.fields.keys()]

    def field(self, name: str) -> FourierField:
        """The encoding of variable ``name``."""
        if _PREFIX + str(name) not in self.fields:
            raise ValueError(f"variables: expected names from {self.names}, got unknown {[name]}")
        return self.fields[_PREFIX + name]

    def add_variable(self, name: str, like: str | None = None) -> list[nn.Parameter]:
        """Add an encoding for a new variable; returns its parameters (to give to an optimiser).

        ``like``: an existing variable whose encoding the new one starts from (a copy, trained
        apart from then on), so the model first treats the new field as that analogue, e.g. a
        new advected tracer ``like="vorticity"``; ``None`` draws a fresh encoding.
        """
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"name: expected a non-empty string without '.', got {name!r}")
        if _PREFIX + name in self.fields:
            raise ValueError(f"name: expected a new variable, got {name!r} which is already one of {self.names}")
        if like is not None and _PREFIX + str(like) not in self.fields:
            raise ValueError(f"like: expected None or a known variable from {self.names}, got {like!r}")
        field = FourierField(self.channels, self.spatial_dims, self.modes)
        if len(self.fields):  # follow the device and dtype of the existing encodings
            ref = next(iter(self.fields.values())).cos
            field = field.to(device=ref.device, dtype=ref.dtype)
        if like is not None:
            field.load_state_dict(self.fields[_PREFIX + like].state_dict())
        self.fields[_PREFIX + name] = field
        return list(field.parameters())

    def forward(self, names: Sequence[str], shape: Sequence[int], bounds=None, rule: str = "uniform",
                dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
        fields = [self.field(n) for n in names]
        return evaluate_fields(fields, shape, bounds, rule, dtype, device).reshape(len(names), self.channels, *shape)


def evaluate_fields(fields: Sequence[FourierField], shape: Sequence[int], bounds=None, rule: str = "uniform",
                    dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """Evaluate several fields with the same modes on the nodes of ``Grid(shape, bounds, rule)``;
    returns ``(Σ C_i, *shape)``.

    The series is summed one axis at a time, ``f(x) = Re Σ_{k_1} e^{2πi k_1 x̂_1} … Σ_{k_d}
    e^{2πi k_d x̂_d} c_{k_1…k_d}`` with ``c_k = a_k - i b_k`` on the box of frequencies (zero off the
    half set), which costs about ``C N (2m+1)`` instead of the ``C N K`` of :meth:`FourierField.at`:
    a 64³ grid with 4 modes per axis needs no ``(N, K)`` table. Every field enters the
    autograd graph, so a field that is multiplied away later still gets a (zero) gradient rather
    than none (what ``DistributedDataParallel`` expects).
    """
    if not fields:
        raise ValueError("fields: expected at least one FourierField, got none")
    first = fields[0]
    if any(f.modes != first.modes or f.spatial_dims != first.spatial_dims for f in fields):
        raise ValueError(f"fields: expected equal modes, got {[f.modes for f in fields]}")
    shape = tuple(n if isinstance(n, torch.SymInt) else int(n) for n in shape)  # symbolic under torch.export
    if len(shape) != first.spatial_dims:
        raise ValueError(f"shape: expected {first.spatial_dims} grid sizes, got {shape}")
    device = device if device is not None else first.cos.device
    grid = Grid(shape, bounds, rule)
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    rdtype = torch.float64 if dtype == torch.float64 else torch.float32
    coef = torch.complex(torch.cat([f.cos for f in fields]).to(rdtype), -torch.cat([f.sin for f in fields]).to(rdtype))
    modes = first.modes
    index = (first.freqs.long() + torch.tensor(modes, device=first.freqs.device)).T.to(device)  # (d, K)
    dense = coef.new_zeros(coef.shape[0], *[2 * m + 1 for m in modes])
    dense = _scatter_modes(dense, index, coef)
    out = dense
    for axis, (n, (lo, hi)) in enumerate(zip(shape, grid.bounds)):
        x = (interval_rule(n, lo, hi, rule)[0].to(device) - lo) / (hi - lo)  # unit-interval nodes, float64
        k = torch.arange(-modes[axis], modes[axis] + 1, device=device, dtype=torch.float64)
        basis = torch.exp(2j * math.pi * x[:, None] * k[None, :]).to(cdtype)  # (n, 2m+1)
        out = torch.tensordot(out, basis, dims=([1], [1]))  # contracted axis moves to the end
    return out.real.to(dtype)


def _scatter_modes(dense: torch.Tensor, index: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
    """``dense[:, k_1, …, k_d] = coef[:, j]`` for the frequency indices ``index[:, j]`` (autograd-safe)."""
    flat = dense.reshape(dense.shape[0], -1)
    strides = torch.tensor(dense.stride()[1:], device=index.device)
    lin = (index * strides[:, None]).sum(0)
    return flat.index_copy(1, lin, coef).reshape(dense.shape)
