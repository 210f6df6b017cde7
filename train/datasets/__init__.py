"""Datasets: the data a run trains and is evaluated on.

:mod:`.sources` (what a ``[data] train`` string names: a record of :mod:`sciattn.pde_data.catalogue`),
:mod:`.data` (the train and test sets a :class:`~sciattn.train.config.DataConfig` describes, and one data set at
several resolutions), :mod:`.data_stats` (per-channel statistics and the out-of-distribution rule) and
:mod:`.run_metadata` (what a run records about its training data, read back by the later steps).
"""
