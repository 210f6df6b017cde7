"""The plumbing shared by the ball-tree point operators (:class:`~sciattn.operators.Erwin`,
:class:`~sciattn.operators.BSATransformer`): input checks, tree building, padding, embedding, the
torch_geometric wrapper and the state-dict version of the rotated trees.

A subclass calls ``_set_io`` (channels, ``spatial_dims``, ``rotate``), sets ``ball_mode``, ``embed``, ``norm``
and ``head``, and defines ``_build_geometry(pos, mask, weights) -> ErwinGeometry`` and ``_trunk(h, geo)``: the
blocks between the embedding and the head, on features in tree order.

Batch independence. In the modes of ``per_cloud_modes`` (``"physical"``: cells padded to a common capacity,
whose cost grows with the most crowded cell of the batch) a batch of several clouds, or a padded one, runs
one cloud at a time on its real points only (:class:`PerCloudGeometry`), so a cloud's output and gradients
are those it has alone, whatever the rest of the batch; the other modes lay out every cloud on its own
(ball trees, multiscale cells) and run batched.

Domain parallelism (the protocol of :mod:`.point_parts`). With a process group in ``point_plan`` (set by
:func:`~.point_parts.set_domain_group`) each rank holds the part of every cloud that :meth:`split_points` gives
it — whole units of the layout — and its forward runs on that rank's slots of the whole mesh's layout
(:mod:`._domain_geometry`): the positions are all-gathered to build the layout, the rotated blocks exchange
their tokens (:class:`~._domain_slots.Exchange`), and nothing else is communicated. The gradient: the exchanges
are permutations of rows across the ranks, whose backward returns every cotangent to the rank and slot that
made the token, and everything else is local, so a rank's parameter gradient is its own points' share of every
path, and the shares of a loss add up over the ranks to the gradient of one process. The trainer's loss is the
whole clouds' on every rank (its sums over the points all-reduced); each rank backpropagates it, the backward of
that all-reduce adds the ``D`` equal cotangents, so the domain ranks' gradients sum to ``D ∇L`` and DDP's
average over the ``W = P·D`` ranks gives the single-process gradient (:mod:`sciattn.train.training.distributed`).
A mode that cannot split exactly is refused by :meth:`domain_parallel_refusal`, naming the option.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from sciattn._checks import check_finite, check_input_dtype
from sciattn.balltree.module import check_point_inputs, dense_points_from_pyg, pyg_from_dense
from sciattn.balltree.physical import PHYSICAL_EXPORT_REASON
from sciattn.partial_sums import raise_together

from ._domain_geometry import LocalTree, domain_geometry, split_batch
from .contract import ExportPolicy, Operator
from .point_parts import PointPlan, check_supports

if TYPE_CHECKING:
    from ._geometry import ErwinGeometry

__all__ = ["BallTreeOperator", "PerCloudGeometry", "legacy_rotation"]


@dataclass
class PerCloudGeometry:
    """The geometry of a batch laid out one cloud at a time: ``rows[b] = (index, geometry)``, ``index`` ``(n_b,)``
    the real points of cloud ``b`` (None: all ``n_points``) and ``geometry`` that of those points alone."""

    rows: list[tuple[torch.Tensor | None, ErwinGeometry]]
    n_points: int


def legacy_rotation(module: nn.Module, local_metadata: dict) -> None:
    """A state dict saved before Erwin's 3-D rotation (module version 1) rotated only the first two axes:
    keep that rotation, so old checkpoints reproduce their outputs (newer state dicts: Euler rotation)."""
    version = local_metadata.get("version")
    if version is not None:
        module.plane_rotation = version < 2


class BallTreeOperator(Operator):
    """Point-set input, ball trees, embedding and head shared by Erwin and the BSA transformer."""

    input_kind = "points"
    export_policy = ExportPolicy(
        padded_points="its ball tree has a depth that depends on N and sciattn.balltree uses torch.gather(out=), "
                      "which torch.export cannot trace with symbolic sizes")
    supports_domain_parallel = True  # in the modes domain_parallel_refusal() accepts
    point_plan = PointPlan()
    _version = 2  # 2: 3-D rotated trees turn about all three axes (state dicts of version 1: first two only)
    per_cloud_modes: tuple[str, ...] = ("physical",)  # modes run one cloud at a time (see the module docstring)

    @property
    def export_unsupported_reason(self) -> str | None:
        """Why this model cannot be exported (``sciattn.train.export_run`` refuses it with this), or None."""
        if self.ball_mode in ("physical", "multiscale"):
            return PHYSICAL_EXPORT_REASON.format(mode=self.ball_mode)
        return None

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

    def domain_parallel_refusal(self) -> str | None:
        """Why this model cannot run domain-parallel (a sentence naming the option), or None."""
        return None

    def split_points(self, batch: dict, part: int, parts: int) -> dict:
        """Part ``part`` of ``parts`` of a padded point batch for domain parallelism: per cloud, the points of whole
        units of its layout (:func:`~._domain_geometry.split_batch`), padded and masked."""
        check_supports(self)
        if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
            raise ValueError(f"parts: expected a positive int, got {parts!r}")
        if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < parts:
            raise ValueError(f"part: expected an int in [0, {parts}), got {part!r}")
        return split_batch(self, batch, part, parts)

    def build_trees(
        self, pos: torch.Tensor, mask: torch.Tensor | None = None, weights: torch.Tensor | None = None
    ) -> ErwinGeometry | PerCloudGeometry:
        """The geometry of ``pos`` ``(B, N, d)``; pass it as ``trees=`` to reuse static geometry. In the modes of
        ``per_cloud_modes`` a batch of several clouds or a padded one gives a :class:`PerCloudGeometry`. With a
        domain-parallel group, this rank's part of the whole mesh's geometry (collective: every rank calls it)."""
        if self.point_plan.group is not None:
            if mask is None:
                mask = torch.ones(pos.shape[:2], dtype=torch.bool, device=pos.device)
            return domain_geometry(self, pos, mask, weights, self.point_plan.group)
        if self.ball_mode not in self.per_cloud_modes or (pos.shape[0] == 1 and mask is None):
            return self._build_geometry(pos, mask, weights)
        rows = []
        for b in range(pos.shape[0]):
            idx = None if mask is None else mask[b].nonzero()[:, 0]
            p_b, w_b = pos[b:b + 1], None if weights is None else weights[b:b + 1]
            if idx is not None:
                p_b, w_b = p_b[:, idx], None if w_b is None else w_b[:, idx]
            rows.append((idx, self._build_geometry(p_b, None, w_b)))
        return PerCloudGeometry(rows, pos.shape[1])

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
        trees: ErwinGeometry | PerCloudGeometry | None = None,
    ) -> torch.Tensor:
        if self.point_plan.group is not None:
            return self._forward_domain(x, pos, mask, weights, trees)
        self._check_inputs(x, pos, mask, weights)
        geo = self.build_trees(pos, mask, weights) if trees is None else trees
        if isinstance(geo, PerCloudGeometry):
            return self._forward_per_cloud(x, pos, geo)
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

    def _check_inputs(self, x, pos, mask, weights) -> None:
        check_point_inputs(x, pos, mask, weights, self.in_channels, self.spatial_dims)
        check_input_dtype("x", x, self, "operator")
        check_finite("x", x, None if mask is None else mask[..., None])

    def _forward_domain(self, x, pos, mask, weights, trees) -> torch.Tensor:
        """This rank's part of the clouds (module docstring); the checks agree over the group."""
        group = self.point_plan.group
        raise_together(group, [lambda: self._check_inputs(x, pos, mask, weights), self._refuse_domain])
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        geo = self.build_trees(pos, mask, weights) if trees is None else trees
        tree = geo.tree
        if not isinstance(tree, LocalTree):
            raise ValueError(f"trees: expected this rank's geometry (model.build_trees with the domain-parallel group "
                             f"set), got the geometry of one process ({type(tree).__name__})")
        if tree.perm.shape[0] != x.shape[0] or tree.n_points != x.shape[1]:
            raise ValueError(f"trees: expected this rank's geometry of {x.shape[0]} clouds of {x.shape[1]} points, got "
                             f"{tree.perm.shape[0]} clouds of {tree.n_points}")
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        x, pos = torch.where(mask[..., None], x, zero), torch.where(mask[..., None], pos, zero.to(pos.dtype))
        h = self._trunk(tree.to_tree(self.embed(torch.cat([x, pos.to(x.dtype)], dim=-1))), geo)
        # a padding point reads the zero row appended, as it reads a padding slot in one process
        return tree.from_tree(self.head(self.norm(F.pad(h, (0, 0, 0, 1)))))

    def _refuse_domain(self) -> None:
        check_supports(self, key="model")

    def _forward_per_cloud(self, x: torch.Tensor, pos: torch.Tensor, geo: PerCloudGeometry) -> torch.Tensor:
        """Every cloud alone on its real points (``geo.rows``); padding rows of the output are zero."""
        if len(geo.rows) != x.shape[0] or geo.n_points != x.shape[1]:
            raise ValueError(f"trees: expected geometry of {x.shape[0]} clouds of {x.shape[1]} points, got "
                             f"{len(geo.rows)} clouds of {geo.n_points}")
        rows = []
        for b, (idx, g) in enumerate(geo.rows):
            if idx is None:
                rows.append(self.forward(x[b:b + 1], pos[b:b + 1], trees=g)[0])
                continue
            y = self.forward(x[b:b + 1, idx], pos[b:b + 1, idx], trees=g)[0]
            rows.append(y.new_zeros(x.shape[1], y.shape[-1]).index_copy(0, idx, y))
        return torch.stack(rows)

    def forward_pyg(self, data) -> torch.Tensor:
        """torch_geometric ``Data``/``Batch`` (``x``, ``pos``, ``batch``, optional ``weights``) -> ``(N_total, C_out)``."""
        dense = dense_points_from_pyg(data)
        out = self.forward(dense["x"], dense["pos"], dense["mask"], dense.get("weights"))
        return pyg_from_dense(out, dense["mask"])
