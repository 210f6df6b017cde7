"""Ball-tree attention on point clouds: batched ball trees, Erwin ball attention, BSA's sparse branches, and
physical balls (cell layouts; multiscale: a pooled far field and an exact near field, at linear cost)."""

from .build import BallTreeCache, build_ball_tree, rotate_points, rotation_matrix
from .functional import ball_attention
from .module import BallAttention, dense_points_from_pyg, pyg_from_dense
from .multiscale import multiscale_layout
from .multiscale_attention import MultiscaleBallAttention
from .sparse import BallSparseAttention
from .tree import BallTree, ball_centers, mixing_index

__all__ = [
    "BallAttention",
    "BallSparseAttention",
    "BallTree",
    "BallTreeCache",
    "MultiscaleBallAttention",
    "ball_attention",
    "ball_centers",
    "build_ball_tree",
    "dense_points_from_pyg",
    "mixing_index",
    "multiscale_layout",
    "pyg_from_dense",
    "rotate_points",
    "rotation_matrix",
]
