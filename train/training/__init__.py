"""Training: fit an operator and keep its run directory.

:mod:`.run` (end-to-end runs: :func:`~.run.train_run`, :func:`~.run.evaluate_run`, run directories, resume checks),
:mod:`.trainer` (the keyword-only :class:`~.trainer.Trainer`), :mod:`.train_state` (what a checkpoint holds for an
exact resume), :mod:`.checkpoint` (atomic checkpoints, :func:`~.checkpoint.load_model`), :mod:`.evaluation`
(mean per-sample errors on a data set, sharded over ranks), :mod:`.losses`, :mod:`.precision`, :mod:`.batching`,
:mod:`.distributed` (``torch.distributed``: data and domain parallel) and :mod:`.loggers` (``metrics.csv``,
TensorBoard, Weights & Biases).
"""
