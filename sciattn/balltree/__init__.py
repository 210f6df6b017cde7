"""Ball-tree attention on point clouds: batched ball trees, Erwin ball attention and BSA's sparse branches."""

from .build import BallTreeCache, build_ball_tree, rotate_points, rotation_matrix
from .functional import ball_attention
from .module import BallAttention, dense_points_from_pyg, pyg_from_dense
from .sparse import BallSparseAttention
from .tree import BallTree, ball_centers, mixing_index

__all__ = [
    "BallAttention",
    "BallSparseAttention",
    "BallTree",
    "BallTreeCache",
    "ball_attention",
    "ball_centers",
    "build_ball_tree",
    "dense_points_from_pyg",
    "mixing_index",
    "pyg_from_dense",
    "rotate_points",
    "rotation_matrix",
]
