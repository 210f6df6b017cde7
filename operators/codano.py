"""CoDA-NO: Codomain Attention Neural Operator (Rahman et al., NeurIPS 2024, arXiv 2403.12553).

Each physical variable ``a`` (velocity, pressure, temperature, ...) is one token, a function on
the domain. For scalar fields ``f_a`` with variable names ``n_a``::

    h_a^0 = Lift([f_a, PE_{n_a}])                         shared pointwise MLP, 1 + P -> width
    h^l   = h^{l-1} + CodomainAttention(h^{l-1})          attention between variables (pre-norm)
    h^l   = h^l + FFN(Norm(h^l))                          shared MLP per variable (mixer="pointwise")
    h^l   = h^l + FFN(z + K z),  z = Norm(h^l)            the same after a shared integral operator
                                                          K z = ∫ κ(x - y) z(y) dy (mixer="spectral")
    u_a   = Proj(Norm(h_a^L))                             shared pointwise MLP, width -> 1

``PE_n`` is a learned, resolution-independent Fourier field per variable name
(:class:`~sciattn.codomain.VariableEncoding`); Norm is the quadrature instance norm over the
domain. All other weights are shared across variables, so the operator maps ``V`` variables to
``V`` variables for any ``V``, is equivariant to permuting them (together with their names),
runs at any resolution, and takes an unseen variable after :meth:`CoDANO.add_variable`, which
adds only an encoding.

Self-supervised pretraining (:meth:`CoDANO.masked_reconstruction_loss`) hides random variables
behind a learned mask field and reconstructs them from the others.

neuraloperator's ``Trainer`` calls ``model(**sample)``; ``forward`` therefore accepts ``y=``
and ignores it.

Shapes: ``x`` ``(B, V, *spatial)`` -> ``(B, V, *spatial)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from sciattn._checks import (
    check_choice,
    check_dim,
    check_finite,
    check_input_dtype,
    check_min_grid,
    check_per_axis_ints,
    check_positive_int,
    check_rank,
    check_tensor,
    values_checkable,
)
from sciattn.codomain.module import (
    CodomainAttention,
    QuadratureInstanceNorm,
    grid_weights,
    per_token_spectral_conv,
)
from sciattn.codomain.positional import FourierField, VariableEncoding, evaluate_fields

from .contract import Operator
from .registry import register_operator

__all__ = ["CoDANO"]


def _mlp(c_in: int, hidden: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(c_in, hidden), nn.GELU(), nn.Linear(hidden, c_out))


def _channels_last(mlp: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """Apply a channel MLP to ``(B, V, C, N)``."""
    return mlp(h.transpose(-1, -2)).transpose(-1, -2)


MIXERS = ("pointwise", "spectral")


class _Block(nn.Module):
    def __init__(self, width, n_heads, spatial_dims, mlp_ratio, attn_kwargs, mixer_modes=None):
        super().__init__()
        self.attn = CodomainAttention(width, n_heads, spatial_dims, **attn_kwargs)
        self.norm = QuadratureInstanceNorm(width)
        self.ffn = _mlp(width, mlp_ratio * width, width)
        self.spectral = None
        if mixer_modes is not None:  # one FNO layer per token, shared by all variables (CoDA-NO's mixer)
            from neuralop.layers.spectral_convolution import SpectralConv  # slow to import: only when used

            self.spectral = SpectralConv(width, width, n_modes=mixer_modes)

    def forward(self, h, w):  # h: (B, V, C, *spatial); w: (B, N)
        shape = h.shape
        h = h + self.attn(h, weights=w.reshape(shape[0], *shape[3:]))
        flat = h.flatten(3)
        z = self.norm(flat, w)
        if self.spectral is not None:
            z = z + per_token_spectral_conv(self.spectral, z, shape[3:])
        return (flat + _channels_last(self.ffn, z)).reshape(shape)


def _check_names(name: str, value: object) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{name}: expected a non-empty list of variable names, got {value!r}")
    if not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name}: expected strings, got {[type(v).__name__ for v in value]}")
    dup = sorted({v for v in value if list(value).count(v) > 1})
    if dup:
        raise ValueError(f"{name}: expected distinct variable names, got duplicates {dup} in {list(value)}")
    return list(value)


@register_operator("codano")
class CoDANO(Operator):
    """Codomain attention neural operator: one token per physical variable.

    Args:
        variables: names of the variables, in the channel order of ``x`` by default.
        extra_variables: further known variables that are not in the default order (filled in
            by :meth:`add_variable` so a checkpoint's config rebuilds every encoding).
        width: channels of each variable token.
        n_layers: codomain attention blocks.
        n_heads: attention heads.
        head_channels: channels per head of the query/key/value functions (default ``width``).
        n_modes: Fourier modes per axis of the spectral Q/K/V operators (neuraloperator convention).
        spatial_dims: 1, 2 or 3.
        qkv: ``"spectral"`` or ``"pointwise"`` query/key/value operators.
        pos_channels: channels of each variable's positional encoding.
        pos_modes: highest frequency per axis of the encodings and of the mask field.
        mlp_ratio: hidden width of the lifting, feed-forward and projection MLPs, times ``width``.
        mixer: what each block applies to every token after the attention: ``"pointwise"`` (an
            MLP) or ``"spectral"`` (the MLP after ``z + SpectralConv(z)``, one FNO layer shared by
            all variables, as in CoDA-NO's permutation-equivariant mixer).
        mixer_modes: Fourier modes per axis of the ``"spectral"`` mixer (default ``n_modes``).
        temperature: attention temperature (default ``sqrt(head_channels)``).
        learn_temperature: learn a temperature per head and layer.
        rule: quadrature rule of the grid (``"uniform"``, ``"midpoint"``, ``"trapezoid"``).
        in_channels, out_channels: optional; if given they must equal ``len(variables)`` (one
            scalar field per variable in and out). They let generic configs state channel counts.
    """

    def __init__(
        self,
        *,
        variables: list[str],
        extra_variables: list[str] | None = None,
        width: int = 32,
        n_layers: int = 4,
        n_heads: int = 2,
        head_channels: int | None = None,
        n_modes: int | list[int] = 8,
        spatial_dims: int = 2,
        qkv: str = "spectral",
        pos_channels: int = 4,
        pos_modes: int | list[int] = 4,
        mlp_ratio: int = 2,
        mixer: str = "pointwise",
        mixer_modes: int | list[int] | None = None,
        temperature: float | None = None,
        learn_temperature: bool = False,
        rule: str = "uniform",
        in_channels: int | None = None,
        out_channels: int | None = None,
    ) -> None:
        super().__init__()
        self.variables = _check_names("variables", variables)
        self.extra_variables = [] if extra_variables is None else _check_names("extra_variables", extra_variables)
        clash = sorted(set(self.variables) & set(self.extra_variables))
        if clash:
            raise ValueError(f"extra_variables: expected names not in variables, got {clash}")
        for name, value in [("width", width), ("n_layers", n_layers), ("n_heads", n_heads),
                            ("pos_channels", pos_channels), ("mlp_ratio", mlp_ratio)]:
            check_positive_int(name, value)
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels)]:
            if value is not None and value != len(self.variables):
                raise ValueError(f"{name}: expected len(variables)={len(self.variables)} (one field per variable "
                                 f"{self.variables}), got {value!r}")
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        self.spatial_dims, self.width, self.rule = spatial_dims, width, rule
        self.encoding = VariableEncoding(self.variables + self.extra_variables, pos_channels, spatial_dims, pos_modes)
        self.mask_field = FourierField(1, spatial_dims, pos_modes)
        self.lift = _mlp(1 + pos_channels, mlp_ratio * width, width)
        attn_kwargs = dict(head_channels=head_channels, qkv=qkv, n_modes=n_modes, temperature=temperature,
                           learn_temperature=learn_temperature, rule=rule)
        check_choice("mixer", mixer, MIXERS)
        if mixer == "spectral":
            mixer_modes = list(check_per_axis_ints("mixer_modes", n_modes if mixer_modes is None else mixer_modes,
                                                   spatial_dims))
        elif mixer_modes is not None:
            raise ValueError(f"mixer_modes: expected None with mixer='pointwise' (it sets the spectral mixer's "
                             f"modes), got {mixer_modes!r}")
        self.blocks = nn.ModuleList(_Block(width, n_heads, spatial_dims, mlp_ratio, attn_kwargs, mixer_modes)
                                    for _ in range(n_layers))
        self.norm = QuadratureInstanceNorm(width)
        self.proj = _mlp(width, mlp_ratio * width, 1)

    # ----------------------------------------------------------------------------- variables
    @property
    def known_variables(self) -> list[str]:
        return self.encoding.names

    def add_variable(self, name: str, like: str | None = None) -> list[nn.Parameter]:
        """Make ``name`` usable in ``forward(..., variables=[...])``: adds only its positional
        encoding (nothing shared changes), a copy of known variable ``like``'s when given (the
        model starts by treating the new field as that analogue), else a fresh one. Returns the
        new parameters, e.g. for an optimiser that fine-tunes them; ``model.config["extra_variables"]``
        is updated when present."""
        params = self.encoding.add_variable(name, like=like)
        self.extra_variables.append(name)
        config = getattr(self, "config", None)
        if isinstance(config, dict):
            config["extra_variables"] = list(self.extra_variables)
        return params

    def _resolve(self, x: torch.Tensor, variables) -> list[str]:
        names = self.variables if variables is None else _check_names("variables", variables)
        unknown = [n for n in names if n not in self.known_variables]
        if unknown:
            raise ValueError(f"variables: expected names from {self.known_variables} (use add_variable for new "
                             f"ones), got unknown {unknown}")
        d = self.spatial_dims
        check_rank("x", x, 2 + d, f"(B, V={len(names)}, {d} spatial axes)")
        check_dim("x", x, 1, len(names), f"one field per variable in {names}")
        check_input_dtype("x", x, self, "operator")
        check_min_grid("x", x, "CoDANO", "its instance norms and quadratures over the grid need a spread of points")
        return names

    @property
    def ddp_find_unused_parameters(self) -> bool:
        """True when a plain ``forward(x)`` skips parameters: the encodings of ``extra_variables``
        (variables known to the model but absent from its default order) enter only a forward that
        names them, so ``DistributedDataParallel`` must look for unused parameters then
        (:func:`sciattn.train.training.distributed.wrap_ddp`). Every other parameter is always used."""
        return bool(self.extra_variables)

    # ----------------------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor, variables: Sequence[str] | None = None, y: torch.Tensor | None = None,
                masked: torch.Tensor | None = None) -> torch.Tensor:
        """Predict every variable's field.

        Args:
            x: ``(B, V, *spatial)`` one scalar field per variable.
            variables: names of the ``V`` fields in order (default: the constructor's list).
            y: ignored (accepted so ``model(**{"x": ..., "y": ...})`` works with trainers).
            masked: ``(B, V)`` bool, True where the field is hidden and replaced by the mask field.
        """
        names = self._resolve(x, variables)
        b, nv, *grid = x.shape
        fields = [self.encoding.field(n) for n in names] + [self.mask_field]
        enc = evaluate_fields(fields, grid, rule=self.rule, dtype=x.dtype, device=x.device)
        pe, mask_value = enc[:-1].reshape(nv, -1, *grid), enc[-1]
        if masked is None:  # the mask field still enters the graph (zero gradient), as DDP expects
            masked = torch.zeros(b, nv, dtype=torch.bool, device=x.device)
        else:
            check_tensor("masked", masked)
            if tuple(masked.shape) != (b, nv) or masked.dtype != torch.bool:
                raise ValueError(f"masked: expected a bool tensor of shape {(b, nv)}, got {masked.dtype} "
                                 f"{tuple(masked.shape)}")
            if values_checkable(masked) and bool(masked.all(dim=1).any()):
                s = int(masked.all(dim=1).nonzero()[0, 0])
                raise ValueError(f"masked: expected at least one unmasked (visible) variable per sample, got all "
                                 f"{nv} variables masked in sample {s}: there is nothing to predict from")
        keep = ~masked[(...,) + (None,) * self.spatial_dims]
        check_finite("x", x, keep)
        x = torch.where(keep, x, mask_value)
        tokens = torch.cat([x.unsqueeze(2), pe.unsqueeze(0).expand(b, *pe.shape)], dim=2).flatten(3)
        h = _channels_last(self.lift, tokens)  # (B, V, width, N)
        w = grid_weights(x, self.spatial_dims, self.rule)
        h = h.reshape(b, nv, self.width, *grid)
        for block in self.blocks:
            h = block(h, w)
        out = _channels_last(self.proj, self.norm(h.flatten(3), w))
        return out.reshape(b, nv, *grid)

    # ----------------------------------------------------------------------------- pretraining
    @staticmethod
    def sample_mask(batch: int, n_variables: int, mask_ratio: float = 0.5,
                    generator: torch.Generator | None = None, device=None) -> torch.Tensor:
        """``(batch, n_variables)`` bool, True for hidden variables: in every row exactly
        ``clamp(round(mask_ratio·V), 1, V-1)`` uniformly chosen entries, so at least one is kept."""
        if not isinstance(mask_ratio, (int, float)) or isinstance(mask_ratio, bool) or not 0 < mask_ratio < 1:
            raise ValueError(f"mask_ratio: expected a float in (0, 1), got {mask_ratio!r}")
        if n_variables < 2:
            raise ValueError(f"x: expected at least 2 variables for masked reconstruction (one is always kept), "
                             f"got {n_variables}")
        n_mask = min(n_variables - 1, max(1, math.floor(mask_ratio * n_variables + 0.5)))
        source = generator.device if generator is not None else device
        order = torch.rand(batch, n_variables, generator=generator, device=source).argsort(dim=1).to(device)
        masked = torch.zeros(batch, n_variables, dtype=torch.bool, device=device)
        return masked.scatter_(1, order[:, :n_mask], True)

    def masked_reconstruction_loss(self, x: torch.Tensor, variables: Sequence[str] | None = None,
                                   mask_ratio: float = 0.5, generator: torch.Generator | None = None,
                                   eps: float = 1e-8) -> torch.Tensor:
        """Masked-variable self-supervised loss.

        In each sample ``m = clamp(round(mask_ratio·V), 1, V-1)`` randomly chosen variables
        (:meth:`sample_mask`; at least one is kept) are replaced by the learned mask field, and the
        mean over the masked variables of the relative L2 error ``‖u_a - f_a‖_w / ‖f_a‖_w`` is
        returned, with ``‖g‖_w² = Σ_x w_x g(x)²`` the grid's quadrature.

        Shapes:
            x: ``(B, V, *spatial)`` with ``V >= 2``; returns a scalar.
        """
        names = self._resolve(x, variables)
        masked = self.sample_mask(x.shape[0], x.shape[1], mask_ratio, generator, x.device)
        pred = self(x, names, masked=masked)
        w = grid_weights(x, self.spatial_dims, self.rule)[:, None, :]
        err = ((pred - x).flatten(2).square() * w).sum(-1).sqrt()
        ref = (x.flatten(2).square() * w).sum(-1).sqrt()
        return (err / ref.clamp_min(eps))[masked].mean()
