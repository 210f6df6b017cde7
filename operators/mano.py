"""MANO: Multipole Attention Neural Operator, as published (Colagrande et al., 2025, arXiv 2507.02748).

Architecture, for an input ``a`` on a grid with coordinates ``x`` (the MANO code's Darcy model,
``/work/shared/reference/multipole_codomain.md`` §1.2)::

    h_0 = P [a, x]                                        pointwise linear lift
    h_l = h_{l-1} + MultipoleAttention(Norm(h_{l-1}))     multiscale windowed softmax attention
    h_l = h_l + FFN(Norm(h_l))                            pointwise MLP, W_2 GELU(W_1 h)
    u   = Q_2 tanh(Q_1 Norm(h_L))                         pointwise projection

Norm is a LayerNorm over channels at each point. The attention layer is
:class:`~sciattn.multipole.MultipoleAttention` at its default: every block approximates the
integral ``∫ softmax_y(q(x)·k(y)) v(y) dy`` over the whole domain by a near field at full
resolution plus far fields on coarser key grids of fixed physical size (see its docstring), so the
operator is discretisation-convergent and costs O(N) per layer. ``window=w`` (cells) selects the
MANO code's cell-counted windows instead: then the number of levels grows with the grid and the
operator depends on the resolution (kept as an explicit option).

The extended architecture benchmarked in ``examples/configs/darcy64_mano.toml`` (stencil lift,
relative-position bias, gate, QK-norm, GLU, spectral head) is :class:`~sciattn.operators.mano_extended.MANOExtended`,
registered as ``mano_extended``; it shares this file's building blocks.

Differences from the published method that remain, with their effect measured at initialisation on a smooth
input (``python -m benchmarks run mano_fidelity``, table in ``docs/fidelity.md`` section "Multipole (MANO)"; e_n is
the max difference from the 256² output at the nodes shared with n², relative to its max; the default gives
e_64 = 2.5%, e_128 = 1.0%):

* levels: key grids of fixed physical size chosen at run time, queries at full resolution against clamped
  tapered windows sliding with the query, instead of ``log_s(image_size)`` levels in cells fixed at construction with
  pooled queries and upsampling. The MANO code's cell-counted, non-overlapping windows (``window=8``) give
  e_64 = 20.6%, e_128 = 8.3%. The layer's earlier input pyramid (``pyramid="input"``) gives 2.1% and 0.7%, at a
  per-query cost that grows with the grid. Either one changes the 64² output by 15.4% (relative L2).
  The code's overlapping stride-1 Unfold/Fold windows are not implemented;
* block artefacts: the layer's windows are tapered (``window_taper="linear"``: the two edge key cells weighted by
  the query's position between key-cell centres), so on a smooth 1-D input one layer jumps as much across
  key-cell edges as inside (0.089 / 0.089, ratio 1.0 at 256 and 512 cells) and a shift by the stride changes it by
  0.6%; hard windows (``window_taper="none"``) jump 7x (13x at 512 cells) and change by 4.0%. With ``window=8``
  cells it jumps 2.09 against 0.008 (250x) and changes by 29% under a shift by one window
  (``tests/sciattn/test_multipole_artefacts.py``);
* learned per-head level weights initialised to 1, instead of the code's fixed ``1/(j+1)`` damping (which
  changes the 64² output by 31.5%; e_n 3.9% / 1.8%);
* a 3-cell local near-field term (without it: output change 8.9%, e_n 1.8% / 0.6%);
* quadrature-weighted keys (identical to unweighted keys on grids that are multiples of 64);
* the lift reads the grid coordinates ``x`` besides ``a`` (the sources we could read do not say whether the
  official Darcy script concatenates them; without them: output change 18.7%, e_n 2.4% / 1.1%);
* no dropout (the MANO demo uses ``att_dropout = emb_dropout = 0.1``; no effect in eval mode, the training
  effect is not measured);
* defaults ``width=64, n_layers=4, n_heads=4, mlp_ratio=2`` (the paper's hyperparameters were not available
  to us; the MANO demo uses ``dim=128, depth=8, heads=4, mlp_dim=128``).

Shapes: ``x`` ``(B, C_in, *spatial)`` -> ``(B, C_out, *spatial)``; optional quadrature ``weights``
``(*spatial)`` or ``(B, *spatial)`` for the key points of every level.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from sciattn.multipole.spec import DEFAULTS

from .contract import ExportPolicy
from .multipole_operator import (  # noqa: F401 - MultipoleOperatorBase and its parts lived here; kept importable
    MultipoleOperatorBase,
    _Block,
    _ChannelNorm,
    _PointwiseLinear,
    _PointwiseMLP,
    check_common,
    layer_kwargs,
)
from .registry import register_operator

__all__ = ["MANO"]


@register_operator("mano")
class MANO(MultipoleOperatorBase):
    """Multipole attention neural operator, the published architecture (module docstring).

    Args:
        in_channels, out_channels: channels of the input and output fields.
        spatial_dims: 1, 2 or 3.
        width: channels of the latent field.
        n_layers: multipole blocks.
        n_heads: attention heads.
        mlp_ratio: hidden width of the feed-forward networks, as a multiple of ``width``.
        window_fraction, coarse_cells, local_window: the layer's physical sizes (window as a fraction of
            the domain, cells per window on every key level, local near-field window in input cells, ``0``:
            none); the defaults are the layer's (:data:`sciattn.multipole.spec.DEFAULTS`: 1/8, 8, 3), stored
            with the operator's config as values.
        window: window size in cells (int or one per axis), the MANO code's resolution-dependent
            windows (the layer's input pyramid); when given, ``window_fraction``, ``coarse_cells``,
            ``local_window`` and ``pyramid`` are not used.
        pool_factor: coarsening factor per axis between levels.
        pool: ``"avg"`` or ``"conv"``; unpool: ``"nearest"``, ``"linear"`` or ``"transposed"``
            (see the layer for which mode takes which).
        max_levels: cap on the number of levels (``None``: until one window covers the domain).
        pyramid: the layer's mode, ``None`` (physical pyramid, or the input pyramid when ``window`` is given),
            ``"physical"`` or ``"input"`` (the earlier levels pooled from the input grid; a checkpoint stored
            before this key existed loads with ``"input"``, see :meth:`migrate_config`); with ``"input"`` and
            ``window_fraction`` the layer's earlier fraction modes (``local_window`` is not used).
        window_taper: the physical pyramid's windows, ``None`` (the layer's default, ``"linear"``: tapered,
            continuous in the query position) or ``"none"`` (hard windows; a checkpoint stored before this key
            existed loads with ``"none"``, see :meth:`migrate_config`). Not used by the input pyramid.
    """

    export_policy = ExportPolicy(
        multiple="on multiples of it the multipole pyramid is the one at the multiple scaled (same level count, exact "
                 "pooling, windows tiling every level; with coarse_cells the coarse levels keep their fixed sizes, "
                 "reached by exact bins), a lift_spacing stencil shifts by whole cells and a head_grid is an exact "
                 "restriction; eager mode pads or interpolates other sizes",
        specialised="MANO's pyramid (level count, sizes, windows) is computed in Python from the grid size",
    )

    @classmethod
    def renamed_to(cls, config: dict[str, Any]) -> str | None:
        """``"mano_extended"`` for a config written before ``mano`` became the published architecture (configs
        store every constructor key, so an old one holds ``head``, ``gate``, ...): the same modules and weights."""
        from .mano_extended import EXTENDED_KEYS

        return "mano_extended" if any(k in config for k in EXTENDED_KEYS) else None

    @classmethod
    def migrate_config(cls, config: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        """A config of the pre-split ``mano`` (:meth:`renamed_to`) stored ``window`` (8 by default) beside
        ``window_fraction``, and the fraction took precedence: ``window`` is cleared when a fraction is set. Then
        the layer's later keys (:attr:`MultipoleOperatorBase.legacy_defaults`)."""
        if cls.renamed_to(config) and config.get("window_fraction") is not None:
            config = {**config, "window": None}
        return super().migrate_config(config, version)

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        width: int = 64,
        n_layers: int = 4,
        n_heads: int = 4,
        mlp_ratio: int = 2,
        window_fraction: float | list[float] | None = DEFAULTS["window_fraction"],
        coarse_cells: int | list[int] | None = DEFAULTS["coarse_cells"],
        local_window: int | list[int] | None = DEFAULTS["local_window"],
        window: int | list[int] | None = None,
        pool_factor: int = 2,
        pool: str = "avg",
        unpool: str = "nearest",
        max_levels: int | None = None,
        pyramid: str | None = None,
        window_taper: str | None = None,
    ) -> None:
        super().__init__()
        check_common(in_channels, out_channels, spatial_dims, width, n_layers, mlp_ratio)
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        attn = layer_kwargs(spatial_dims=spatial_dims, window=window, window_fraction=window_fraction, coarse_cells=coarse_cells,
                            local_window=local_window, pool_factor=pool_factor, pool=pool, unpool=unpool,
                            max_levels=max_levels, pyramid=pyramid, window_taper=window_taper)
        self.lift = _PointwiseLinear(in_channels + spatial_dims, width)
        self.blocks = nn.ModuleList(
            _Block(width, n_heads, spatial_dims, _PointwiseMLP(width, mlp_ratio * width, width), attn)
            for _ in range(n_layers))
        self.norm = _ChannelNorm(width)
        self.proj = _PointwiseMLP(width, width, out_channels, activation="tanh")
