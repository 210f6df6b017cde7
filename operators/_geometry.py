"""The geometry the ball-tree operators (Erwin, BSA) compute from the positions: every level's points in their
layout order and the map to the rotated layout (:class:`LevelGeometry`), and the whole U-Net's (:class:`ErwinGeometry`),
which ``trees=`` passes to reuse static geometry.

Shapes: a level's slots ``(B, P, ·)``; ``rot_*`` the same level in the rotated layout ``(B, P_r, ·)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sciattn.balltree import BallTree

__all__ = ["ErwinGeometry", "LevelGeometry"]


@dataclass
class LevelGeometry:
    """Points of one level in tree order and the map to its rotated tree (``rot_*`` None: no rotation)."""

    pos: torch.Tensor
    mask: torch.Tensor
    weights: torch.Tensor
    rot_index: torch.Tensor | None = None
    rot_inverse: torch.Tensor | None = None
    rot_pos: torch.Tensor | None = None
    rot_mask: torch.Tensor | None = None
    rot_weights: torch.Tensor | None = None
    sizes: tuple[int, ...] | None = None  # physical mode: node sizes (ball, ...) chosen from the geometry
    rot_sizes: tuple[int, ...] | None = None  # physical mode: the same in the rotated layout
    centres: torch.Tensor | None = None  # physical mode: (B, P, d) geometric centre of each slot's ball
    rot_centres: torch.Tensor | None = None
    stride: int | None = None  # physical mode: slots of the finer level pooled into one token of this level
    far: object | None = None  # multiscale mode: the layout's FarField (and in the rotated layout)
    rot_far: object | None = None
    tokens: BallTree | None = None  # multiscale mode: the map from the level's tokens (compact cells) to its slots
    pool_index: torch.Tensor | None = None  # multiscale mode: (B, P) pool cell of every slot (n_pool: none)
    n_pool: int = 0
    pool_base: torch.Tensor | None = None  # domain parallelism: (B,) the global id of the rank's first pool cell
    rot_exchange: object | None = None  # domain parallelism: the Exchange to and from the rotated layout's ranks


@dataclass
class ErwinGeometry:
    """Everything an Erwin forward needs from the geometry: the tree and every level (cacheable)."""

    tree: BallTree
    levels: list[LevelGeometry]
