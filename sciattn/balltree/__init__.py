"""Ball-tree attention on point clouds: batched ball trees, Erwin ball attention and BSA's sparse branches."""

from .functional import ball_attention
from .module import BallAttention, dense_points_from_pyg, pyg_from_dense
from .sparse import BallSparseAttention
from .tree import BallTree, BallTreeCache, ball_centers, build_ball_tree, mixing_index, rotation_matrix

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
    "rotation_matrix",
]
