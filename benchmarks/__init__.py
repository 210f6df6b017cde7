"""sciattn's benchmarks: one harness (:mod:`benchmarks.harness`), results as rows in ``benchmarks/results``.

    python -m benchmarks list
    python -m benchmarks run NAME [--quick] [--out DIR] [--set KEY=JSON ...]
    python -m benchmarks table NAME [--results DIR] [--run RUN_ID]
    python -m benchmarks plot NAME [--results DIR] [--out PNG]
"""
