"""Deployment: a trained run outside the training code.

:mod:`.export` (``sciattn export``: a ``torch.export`` or ONNX program that runs without sciattn, and
:func:`~.export.load_program` to load and check one) and :mod:`.surrogate` (:class:`~.surrogate.Surrogate`, the
operator as a component of a simulation pipeline).
"""
