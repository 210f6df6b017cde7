"""Analysis of a trained run: how its errors behave across resolutions and time.

:mod:`.sweep` (the resolution-invariance report of ``sciattn evaluate --resolutions``), :mod:`.sweep_data` (its
evaluation data, drawn from the run's own training distribution), :mod:`.rollout` (autoregressive rollout error
and the stability verdict), :mod:`.area_metrics` (area-weighted errors on sphere grids) and :mod:`.plots`
(matplotlib figures).
"""
