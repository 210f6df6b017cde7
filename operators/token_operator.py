"""The base of the token operators (Transolver, LinearNO, GNOT, ONO): grid and point-set input plumbing, the
staged form of :mod:`.point_parts` (whole, in chunks of points, domain-parallel), the published initialisation and
the constructor checks they share.

Shapes: grid input ``x`` ``(B, C_in, *spatial)`` -> ``(B, C_out, *spatial)``; point input ``x`` ``(B, N, C_in)``
with ``pos`` ``(B, N, d)``, optional ``weights`` ``(B, N)`` and ``mask`` ``(B, N)`` -> ``(B, N, C_out)``.
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn._checks import check_positive_int

from ._token_inputs import grid_tokens, point_tokens, to_grid, zero_padding
from .contract import Operator
from .point_parts import PointPlan, run_stages, split_points

__all__ = ["TokenOperator", "check_heads", "check_nonnegative_float", "check_sizes", "check_spatial_dims",
           "init_published"]


def check_nonnegative_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name}: expected a non-negative number, got {value!r}")
    return float(value)


def check_sizes(**sizes: object) -> None:
    for name, value in sizes.items():
        check_positive_int(name, value)


def check_heads(width: int, n_heads: int) -> None:
    if width % n_heads:
        raise ValueError(f"n_heads: expected a divisor of width={width}, got {n_heads}")


def check_spatial_dims(spatial_dims: object) -> None:
    if spatial_dims not in (1, 2, 3) or isinstance(spatial_dims, bool):
        raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")


def init_published(module: nn.Module) -> None:
    """The Transolver / LinearNO / ONO model-level init: Linear ``trunc_normal(0.02)``, zero bias; LayerNorm 1, 0."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class TokenOperator(Operator):
    """Input plumbing shared by the token operators (Transolver, LinearNO, GNOT, ONO), and their staged form.

    A subclass sets ``in_channels``, ``out_channels``, ``spatial_dims`` and defines ``lift_state(a (B, N, C_in),
    pos (B, N, d)) -> state`` (a tuple of ``(B, N, ·)`` tensors), ``stages() -> list[Stage]`` (each a sum over the
    points, then a pointwise map: :mod:`sciattn.operators.point_parts`) and ``readout(state) -> (B, N, C_out)``.
    :meth:`encode` runs them with quadrature weights ``w`` summing to one per sample and zero on padding, whole,
    in chunks of points or domain-parallel as :attr:`point_plan` says. On a grid the tokens are the nodes in C
    order, ``pos`` the nodes of :class:`sciattn.domain.Grid` and ``w`` its cell volumes, normalised.
    """

    input_kind = "grid"
    display_name = "the operator"
    supports_domain_parallel = True
    supports_chunked_points = True
    weights_in_pos_dtype = False
    point_plan = PointPlan()

    def _set_sizes(self, spatial_dims: object, **sizes: object) -> None:
        """Checks the constructor's sizes: each of ``sizes`` a positive int (in the order given; it holds
        ``in_channels``, ``out_channels``, ``width`` and ``n_heads``), ``spatial_dims`` 1, 2 or 3, ``n_heads`` a
        divisor of ``width``; stores ``in_channels``, ``out_channels`` and ``spatial_dims``."""
        check_sizes(**sizes)
        check_spatial_dims(spatial_dims)
        check_heads(sizes["width"], sizes["n_heads"])
        self.in_channels, self.out_channels, self.spatial_dims = sizes["in_channels"], sizes["out_channels"], spatial_dims

    def encode(self, a: torch.Tensor, pos: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Tokens ``(B, N, C_in)``, positions ``(B, N, d)``, weights ``(B, N)`` summing to one -> ``(B, N, C_out)``."""
        return run_stages(self, a, pos, w, self.point_plan)

    def split_points(self, batch: dict, part: int, parts: int) -> dict:
        """This part's points of a padded batch (any split serves: the outputs do not depend on the point order)."""
        return split_points(batch, part, parts)

    def forward(self, x, pos=None, weights=None, mask=None, *, y=None):
        """``y`` is accepted and ignored (neuraloperator's ``Trainer`` calls ``model(**sample)``)."""
        del y
        if pos is None:
            if weights is not None or mask is not None:
                raise ValueError("pos: weights and mask are for point sets and need pos (B, N, d); a grid input "
                                 "(B, C, *spatial) takes its weights from the grid, got pos=None")
            if self.point_plan.group is not None:
                raise ValueError("pos: a domain-parallel operator takes its rank's part of a point set (x (B, N, C), "
                                 "pos (B, N, d)); expected pos, got a grid input without it")
            return self._forward_grid(x)
        return self._forward_points(x, pos, weights, mask)

    def _forward_grid(self, x):
        a, pos, w, grid = grid_tokens(self, x, self.display_name)
        return to_grid(self.encode(a, pos, w), self, grid)

    def _forward_points(self, x, pos, weights, mask):
        x, pos, w, keep = point_tokens(self, x, pos, weights, mask, weights_in_pos_dtype=self.weights_in_pos_dtype,
                                       group=self.point_plan.group)
        return zero_padding(self.encode(x, pos, w), keep)
