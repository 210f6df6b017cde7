#!/usr/bin/env bash
# One prepared check of the Triton attention kernels on a lent GPU machine (about 8 minutes).
#
#   bash benchmarks/gpu_check.sh            # writes everything under $OUT (default ./gpu_out)
#
# 1. versions: nvidia-smi, torch (+ CUDA), triton                       -> $OUT/versions.txt
# 2. kernel tests on CUDA: the Triton test files with compiled kernels   -> $OUT/pytest.txt
#    (TRITON_INTERPRET=0, so the CPU-interpreter variants skip and the CUDA variants run)
# 3. benchmarks/kernels.py --device cuda, bf16, 8 heads x 64, N up to 2^20
#                                         -> $OUT/kernels_cuda.{json,md,png} and $OUT/bench.log
# Each step has its own time limit, so a hang in one still leaves the others' output.
set -u -o pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python}"
export TRITON_INTERPRET=0           # compiled kernels (the tests interpret only when this is unset or 1)
export TRITON_DEFAULT_FP_FUSION=1   # silence triton 3.9's default-change warning; keep FMA fusion
export PYTHONUNBUFFERED=1
START=$(date +%s)
stamp() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/steps.txt"; }

# sciattn must be importable; install the working tree without touching dependencies if needed.
if ! "$PY" -c "import sciattn" 2>/dev/null; then
    stamp "sciattn not importable: pip install -e . --no-deps --no-build-isolation"
    "$PY" -m pip install -q -e . --no-deps --no-build-isolation > "$OUT/pip.txt" 2>&1 \
        || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

stamp "versions"
{
    nvidia-smi || echo "nvidia-smi failed"
    "$PY" - <<'EOF'
import platform, torch
print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, f"sm_{p.major}{p.minor}", p.multi_processor_count, "SMs", round(p.total_memory / 2**30, 1), "GiB")
try:
    import triton
    print("triton", triton.__version__)
except ImportError as err:
    print("triton missing:", err)
import sciattn
sciattn.available_backends()
EOF
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

stamp "pytest (CUDA variants of the Triton tests)"
timeout 210 "$PY" -m pytest -q -p no:cacheprovider -rs --durations=15 \
    tests/sciattn/test_galerkin_triton.py tests/sciattn/test_backend_equivalence.py \
    > "$OUT/pytest.txt" 2>&1
echo "pytest exit code $?" >> "$OUT/pytest.txt"
tail -n 40 "$OUT/pytest.txt"

stamp "benchmarks/kernels.py --device cuda"
timeout 270 "$PY" benchmarks/kernels.py --device cuda --dtype bfloat16 --heads 8 --head-dim 64 \
    --min-n 4096 --max-n 1048576 --series-budget 45 --reps 10 --out "$OUT" > "$OUT/bench.log" 2>&1
echo "kernels.py exit code $?" >> "$OUT/bench.log"
tail -n 60 "$OUT/bench.log"

stamp "done"
ls -la "$OUT"
