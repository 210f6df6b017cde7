"""The plumbing shared by the ball-tree point operators (:class:`~sciattn.operators.Erwin`,
:class:`~sciattn.operators.BSATransformer`): input checks, tree building, padding, embedding, the
torch_geometric wrapper and the state-dict version of the rotated trees.

A subclass calls ``_set_io`` (channels, ``spatial_dims``, ``rotate``), sets ``ball_mode``, ``embed``, ``norm``
and ``head``, and defines ``build_trees(pos, mask, weights) -> ErwinGeometry`` and ``_trunk(h, geo)``: the
blocks between the embedding and the head, on features in tree order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from sciattn._checks import check_finite, check_input_dtype
from sciattn.balltree.module import check_point_inputs, dense_points_from_pyg, pyg_from_dense
from sciattn.balltree.physical import PHYSICAL_EXPORT_REASON

if TYPE_CHECKING:
    from .erwin import ErwinGeometry

__all__ = ["BallTreeOperator", "legacy_rotation"]


def legacy_rotation(module: nn.Module, local_metadata: dict) -> None:
    """A state dict saved before Erwin's 3-D rotation (module version 1) rotated only the first two axes:
    keep that rotation, so old checkpoints reproduce their outputs (newer state dicts: Euler rotation)."""
    version = local_metadata.get("version")
    if version is not None:
        module.plane_rotation = version < 2


class BallTreeOperator(nn.Module):
    """Point-set input, ball trees, embedding and head shared by Erwin and the BSA transformer."""

    input_kind = "points"
    _version = 2  # 2: 3-D rotated trees turn about all three axes (state dicts of version 1: first two only)

    @property
    def export_unsupported_reason(self) -> str | None:
        """Why this model cannot be exported (``sciattn.train.export_run`` refuses it with this), or None."""
        return PHYSICAL_EXPORT_REASON if self.ball_mode == "physical" else None

    def _set_io(self, in_channels: int, out_channels: int, spatial_dims: int, rotate: float | None) -> None:
        """Checks ``rotate`` against ``spatial_dims`` and stores the channels, dimension and rotation."""
        if rotate and spatial_dims < 2:
            raise ValueError(f"rotate: expected 0 or None for spatial_dims={spatial_dims} (rotations need d >= 2), got {rotate}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.rotate = float(rotate) if rotate else None
        self.plane_rotation = False  # True only for a version-1 state dict (see legacy_rotation)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        legacy_rotation(self, local_metadata)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
        trees: ErwinGeometry | None = None,
    ) -> torch.Tensor:
        check_point_inputs(x, pos, mask, weights, self.in_channels, self.spatial_dims)
        check_input_dtype("x", x, self, "operator")
        check_finite("x", x, None if mask is None else mask[..., None])
        geo = self.build_trees(pos, mask, weights) if trees is None else trees
        tree = geo.tree
        if tree.perm.shape[0] != x.shape[0] or tree.n_points != x.shape[1]:
            raise ValueError(f"trees: expected geometry of {x.shape[0]} clouds of {x.shape[1]} points, got "
                             f"{tree.perm.shape[0]} clouds of {tree.n_points}")
        if mask is not None:
            x = torch.where(mask[..., None], x, torch.zeros((), dtype=x.dtype, device=x.device))
            pos = torch.where(mask[..., None], pos, torch.zeros((), dtype=pos.dtype, device=pos.device))
        h = tree.to_tree(self.embed(torch.cat([x, pos.to(x.dtype)], dim=-1)))
        h = self._trunk(h, geo)
        return tree.from_tree(self.head(self.norm(h)))

    def forward_pyg(self, data) -> torch.Tensor:
        """torch_geometric ``Data``/``Batch`` (``x``, ``pos``, ``batch``, optional ``weights``) -> ``(N_total, C_out)``."""
        dense = dense_points_from_pyg(data)
        out = self.forward(dense["x"], dense["pos"], dense["mask"], dense.get("weights"))
        return pyg_from_dense(out, dense["mask"])
