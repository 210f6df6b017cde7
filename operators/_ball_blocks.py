"""The pieces the ball-tree operators share (:class:`~.erwin.Erwin`, :class:`~.bsa.BSATransformer`): the ball modes,
the rotation argument, the pointwise embedding, the geometry of a tree-ordered level (and its rotated tree) and the
pre-norm block around a ball attention.

Shapes: features ``(B, P, C)`` in tree order, positions ``(B, P, d)``, mask and weights ``(B, P)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sciattn._checks import check_choice
from sciattn.balltree import build_ball_tree, rotation_matrix

from ._geometry import LevelGeometry

__all__ = ["BALL_MODES", "PointBlock", "SwiGLU", "level_geometry", "point_embedding", "resolve_ball_mode",
           "rotation_of"]


BALL_MODES = ("multiscale", "physical", "points")


def resolve_ball_mode(ball_mode: str | None, counts_given: bool, modes: tuple[str, ...] = BALL_MODES,
                      default: str = "multiscale") -> str:
    """One of ``modes``. ``None`` infers it: ``"points"`` when point counts (``ball_sizes`` / ``ball_size``) are given,
    else ``default``. (Checkpoints store every constructor key; one stored before a default changed is migrated by
    :meth:`Erwin.migrate_config <sciattn.operators.erwin.Erwin.migrate_config>`, so it rebuilds the model it was saved with.)"""
    if ball_mode is None:
        return "points" if counts_given else default
    return check_choice("ball_mode", ball_mode, modes)


def rotation_of(module: nn.Module, d: int):
    """The ``rotate`` argument of :func:`build_ball_tree` for ``module.rotate`` degrees in ``d`` dimensions."""
    if module.rotate and d == 3 and module.plane_rotation:
        return rotation_matrix(module.rotate, 3, torch.float64, plane=True)
    return module.rotate


# Bytes of the largest intermediate of one run of the pointwise MLP on the CPU: below glibc's 32 MiB ceiling on the
# sizes whose freed blocks it keeps for reuse. A larger block is a fresh mmap at every call, faulted in page by page
# again (at 256² points the (B, N, 2·hidden) features of one MLP are 84 MiB: the step's page faults, not its
# arithmetic, then grew faster than N).
MLP_CHUNK_BYTES = 8 << 20


def _mlp_rows(h: torch.Tensor, width: int) -> int | None:
    """Tokens per run of a pointwise MLP whose widest layer has ``width`` features, or None for one run (on an
    accelerator, whose caching allocator reuses blocks of any size; under tracing, which would pin the token
    count; or when one run is already small)."""
    if h.device.type != "cpu" or h.dim() < 2 or torch.compiler.is_compiling() or torch.jit.is_tracing():
        return None
    per_token = h[..., 0, 0].numel() * width * h.element_size()
    if per_token * h.shape[-2] <= MLP_CHUNK_BYTES:
        return None
    return max(1, MLP_CHUNK_BYTES // per_token)


class SwiGLU(nn.Module):
    """``w3(silu(a) ⊙ b)`` with ``(a, b) = w12(h)``, token by token; on the CPU in runs of tokens whose
    intermediates stay below :data:`MLP_CHUNK_BYTES` (the same sums per token; only the weight gradients' sums over
    tokens are split into runs)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w12 = nn.Linear(dim, 2 * hidden)
        self.w3 = nn.Linear(hidden, dim)

    def _run(self, h: torch.Tensor) -> torch.Tensor:
        a, b = self.w12(h).chunk(2, dim=-1)
        return self.w3(F.silu(a) * b)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        rows = _mlp_rows(h, self.w12.out_features)
        if rows is None:
            return self._run(h)
        return torch.cat([self._run(part) for part in h.split(rows, dim=-2)], dim=-2)


def point_embedding(c_in: int, d: int, width: int) -> nn.Sequential:
    """Pointwise ``MLP([features, position]) -> width``."""
    return nn.Sequential(nn.Linear(c_in + d, width), nn.GELU(), nn.Linear(width, width))


def level_geometry(pos, mask, weights, ball: int, rotate, sizes: tuple[int, ...] | None = None) -> LevelGeometry:
    """Geometry of a tree-ordered level ``(B, P, ·)``; with ``rotate`` (degrees or a matrix) also its rotated tree."""
    geo = LevelGeometry(pos, mask, weights, sizes=sizes)
    if rotate is not None and (isinstance(rotate, torch.Tensor) or rotate):
        rt = build_ball_tree(pos, mask, min(ball, pos.shape[1]), rotate, padded_size=pos.shape[1], check=False)
        geo.rot_index, geo.rot_inverse = rt.perm, rt.inverse
        geo.rot_pos, geo.rot_mask, geo.rot_weights = rt.pos, rt.mask, weights.gather(1, rt.perm)
    return geo


class PointBlock(nn.Module):
    """``h + Attn(RMSNorm h)``, ``h + SwiGLU(RMSNorm h)`` in tree order; padding rows are reset to 0."""

    def __init__(self, dim: int, attn: nn.Module, mlp_ratio: int, rotated: bool) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attn = attn
        self.mlp = SwiGLU(dim, mlp_ratio * dim)
        self.rotated = rotated

    def _run(self, h, pos, mask, weights, sizes, centres=None, far=None):
        extra = {} if far is None else {"far": far}
        h = h + self.attn.attend(self.norm1(h), pos, mask, weights, sizes=sizes, centres=centres, **extra)
        h = h + self.mlp(self.norm2(h))
        return torch.where(mask[..., None], h, torch.zeros((), dtype=h.dtype, device=h.device))

    def forward(self, h: torch.Tensor, geo: LevelGeometry) -> torch.Tensor:
        if self.rotated and geo.rot_exchange is not None:  # domain parallel: the rotated layout's ranks and back
            hr = self._run(geo.rot_exchange.forward(h), geo.rot_pos, geo.rot_mask, geo.rot_weights,
                           geo.sizes if geo.rot_sizes is None else geo.rot_sizes, geo.rot_centres, geo.rot_far)
            return geo.rot_exchange.back(hr)
        if not (self.rotated and geo.rot_index is not None):
            return self._run(h, geo.pos, geo.mask, geo.weights, geo.sizes, geo.centres, geo.far)
        c, p, pr = h.shape[-1], h.shape[1], geo.rot_index.shape[1]
        src = F.pad(h, (0, 0, 0, pr - p)) if pr > p else h  # a rotated cell layout may hold more slots
        hr = src.gather(1, geo.rot_index[..., None].expand(-1, -1, c))
        hr = self._run(hr, geo.rot_pos, geo.rot_mask, geo.rot_weights,
                       geo.sizes if geo.rot_sizes is None else geo.rot_sizes, geo.rot_centres, geo.rot_far)
        out = hr.gather(1, geo.rot_inverse[..., None].expand(-1, -1, c))
        if pr > p:  # padding slots of this level may map to real rotated slots: reset them
            out = torch.where(geo.mask[..., None], out, torch.zeros((), dtype=out.dtype, device=out.device))
        return out
