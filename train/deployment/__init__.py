"""Deployment: a trained run outside the training code.

:mod:`.export` (``sciattn export``: a ``torch.export`` or ONNX program that runs without sciattn), :mod:`.program`
(:func:`~.program.load_program`: a ``.pt2`` with sciattn's one-line input checks in front; also importable from
:mod:`.export`) and :mod:`.surrogate` (:class:`~.surrogate.Surrogate`, the operator as a component of a simulation
pipeline).
"""
