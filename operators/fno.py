"""FNO baseline: a thin adapter over neuraloperator's :class:`neuralop.models.FNO` (Li et al., ICLR 2021).

Registered as ``fno`` so every benchmark and example can train it side by side with the attention operators,
under the same trainer, checkpoints (a JSON-plain config) and export path. The network is neuraloperator's,
unchanged: lift (channel MLP on ``[a, x]`` with the grid embedding), ``n_layers`` Fourier blocks

    v <- σ( W v + F⁻¹( R · (F v)|_{modes} ) )        (plus neuraloperator's channel MLP and skips)

and a projection. ``F`` is the DFT normalised by the point count (``norm="forward"``), i.e. the quadrature
``∫ v(x) e^{-2πi k·x} dx ≈ (1/N) Σ_j v(x_j) e^{-2πi k·x_j}`` on the uniform grid ``x_j = j/n``, so the layer is
discretisation-convergent on grids (the spectral kernel is band-limited to ``n_modes``). The grid embedding
is neuraloperator's (coordinates ``j/n`` on ``[0, 1)``, the layout of :class:`sciattn.domain.Grid`), appended by
the adapter so that ``torch.export`` can trace it at symbolic sizes (see :meth:`FNO._coordinates`).

neuraloperator is imported when the model is built, not when ``sciattn`` is imported (issue 22).

Shapes: ``x`` ``(B, C_in, *spatial)`` with ``len(n_modes)`` spatial axes -> ``(B, C_out, *spatial)``.
"""

from __future__ import annotations

import torch

from sciattn._checks import (
    check_choice,
    check_dim,
    check_finite,
    check_input_dtype,
    check_min_grid,
    check_positive_int,
    check_rank,
)

from .contract import Operator
from .registry import register_operator

__all__ = ["FNO"]


def _modes(n_modes, spatial_dims) -> list[int]:
    modes = [n_modes] * spatial_dims if isinstance(n_modes, int) and not isinstance(n_modes, bool) else n_modes
    if not isinstance(modes, (list, tuple)) or len(modes) != spatial_dims or not all(
            isinstance(m, int) and not isinstance(m, bool) and m > 0 for m in modes):
        raise ValueError(f"n_modes: expected a positive int or {spatial_dims} positive ints (one per axis), "
                         f"got {n_modes!r}")
    return list(modes)


@register_operator("fno")
class FNO(Operator):
    """neuraloperator's FNO behind the registry.

    Args:
        in_channels, out_channels: channels of the input and output fields.
        spatial_dims: number of spatial axes (1, 2 or 3).
        n_modes: Fourier modes kept per axis (an int for every axis, or a list).
        hidden_channels: width of the Fourier blocks.
        n_layers: Fourier blocks.
        lifting_channel_ratio, projection_channel_ratio: hidden widths of the lifting / projection MLPs
            as multiples of ``hidden_channels``.
        positional_embedding: ``"grid"`` (append the coordinates, neuraloperator's default) or ``None``.
        norm: ``None``, ``"group_norm"`` or ``"instance_norm"``.
        use_channel_mlp, channel_mlp_expansion, channel_mlp_skip, fno_skip: neuraloperator's block options.
        domain_padding: ``None`` or a fraction of each axis to zero-pad before the FFT (non-periodic data).
        factorization, rank: tensorised spectral weights (``None``: dense), as in neuraloperator.
        separable, preactivation: neuraloperator's block options.
    """

    input_kind = "grid"

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        n_modes: int | list[int] = 12,
        hidden_channels: int = 32,
        n_layers: int = 4,
        lifting_channel_ratio: float = 2,
        projection_channel_ratio: float = 2,
        positional_embedding: str | None = "grid",
        norm: str | None = None,
        use_channel_mlp: bool = True,
        channel_mlp_expansion: float = 0.5,
        channel_mlp_skip: str = "soft-gating",
        fno_skip: str = "linear",
        domain_padding: float | None = None,
        factorization: str | None = None,
        rank: float = 1.0,
        separable: bool = False,
        preactivation: bool = False,
    ) -> None:
        super().__init__()
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels),
                            ("hidden_channels", hidden_channels), ("n_layers", n_layers)]:
            check_positive_int(name, value)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        if positional_embedding is not None:
            check_choice("positional_embedding", positional_embedding, ("grid",))
        if norm is not None:
            check_choice("norm", norm, ("group_norm", "instance_norm"))
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.fno_kwargs = dict(
            n_modes=tuple(_modes(n_modes, spatial_dims)), in_channels=in_channels, out_channels=out_channels,
            hidden_channels=hidden_channels, n_layers=n_layers, lifting_channel_ratio=lifting_channel_ratio,
            projection_channel_ratio=projection_channel_ratio, positional_embedding=positional_embedding, norm=norm,
            use_channel_mlp=use_channel_mlp, channel_mlp_expansion=channel_mlp_expansion,
            channel_mlp_skip=channel_mlp_skip, fno_skip=fno_skip, domain_padding=domain_padding,
            factorization=factorization, rank=rank, separable=separable, preactivation=preactivation,
        )
        # lazy: `import sciattn` does not import neuraloperator
        from neuralop.models import FNO as _NeuralopFNO

        self.net = _NeuralopFNO(**self.fno_kwargs)
        # neuraloperator's grid embedding builds its coordinates with ``linspace(0, 1, n + 1)``, which torch.export
        # cannot trace at a symbolic n; the adapter appends the same coordinates itself (neuraloperator's own
        # function in eager mode, bit for bit; ``arange(n) / n`` while tracing), so the program is resolution-free.
        self._grid_embedding = positional_embedding == "grid"
        if self._grid_embedding:
            self.net.positional_embedding = None

    def state_dict(self, *args, **kwargs):
        """The weights only: neuraloperator adds its constructor arguments under ``_metadata`` (functions among
        them), which a checkpoint loaded with ``weights_only=True`` cannot hold; ``config`` rebuilds the model."""
        state = super().state_dict(*args, **kwargs)
        state.pop("_metadata", None)
        return state

    def forward(self, x, *, y=None):
        """``y`` is accepted and ignored (neuraloperator's ``Trainer`` calls ``model(**sample)``)."""
        del y
        d = self.spatial_dims
        check_rank("x", x, 2 + d, f"(B, C_in={self.in_channels}, {d} spatial axes)")
        check_dim("x", x, 1, self.in_channels, "input channels")
        check_input_dtype("x", x, self, "operator")
        check_min_grid("x", x, "FNO", "one node per axis has no spacing: the grid embedding is undefined")
        check_finite("x", x)
        if self._grid_embedding:
            x = torch.cat([x, *self._coordinates(x)], dim=1)
        return self.net(x)

    @staticmethod
    def _coordinates(x: torch.Tensor) -> list[torch.Tensor]:
        """One channel per axis holding ``j / n`` on ``[0, 1)``, ``(B, 1, *spatial)`` each."""
        shape = x.shape[2:]
        if torch.compiler.is_compiling():
            axes = [torch.arange(n, device=x.device, dtype=torch.float32) / n for n in shape]
            grids = torch.meshgrid(*axes, indexing="ij")
        else:
            from neuralop.layers.embeddings import regular_grid_nd

            grids = regular_grid_nd(list(shape), grid_boundaries=[[0, 1]] * len(shape))
        return [g.to(x.device).to(x.dtype)[None, None].expand(x.shape[0], 1, *shape) for g in grids]
