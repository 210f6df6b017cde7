#!/usr/bin/env bash
# One prepared check of sciattn on a lent GPU machine (at most about 9 minutes: every step has a limit,
# and together they fit one 10-minute device call).
#
#   bash benchmarks/gpu_check.sh            # results under $OUT (default ./gpu_out)
#   STEPS="gpu_targets pytest" bash benchmarks/gpu_check.sh      # only some steps
#   TUNE=1 bash benchmarks/gpu_check.sh     # also the launch-configuration sweep (about 90 s more)
#
# Steps, each with its own time limit so that a hang in one still leaves the others' output:
# 1. versions: nvidia-smi, python, torch (+ CUDA), triton                   -> versions.txt
# 2. benchmarks/gpu_targets.py: the kernel targets (Galerkin bandwidth and speed-up, weighted
#    softmax against flash SDPA, spherical neighbourhood attention at 1°), each checked against
#    its reference first                                                    -> gpu_targets.{json,md}
# 3. benchmarks/kernels.py --device cuda: scaling of every backend, 2^14 .. 2^20 -> kernels_cuda.*
# 4. benchmarks/multipole_scaling.py --device cuda: one multipole layer, 64² .. 1024², dense to 512²
# 5. benchmarks/balltree_gpu.py: host-sync check, tree build and ball attention scaling
# 6. benchmarks/gpu_tuning.py (only with TUNE=1): launch-configuration sweep of the Triton kernels
# 7. pytest of the Triton kernel tests with compiled kernels (TRITON_INTERPRET=0), one process per
#    file, so that a kernel fault (which poisons the CUDA context) stays inside its file
# First run (2026-11-30, H200): steps 1-5 took 311 s with the limits then in force; the sweep about 90 s.
# Results are collected in $OUT/results.tgz (re-packed after every step) and the step log in
# $OUT/steps.txt, so that a run stopped part-way still returns what it measured.
set -u -o pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu_out}"
mkdir -p "$OUT"
RES="${RES:-/tmp/sciattn_gpu_results}"
mkdir -p "$RES"
PY="${PYTHON:-python3}"
export TRITON_INTERPRET=0           # compiled kernels (the tests interpret only when this is unset or 1)
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # the working tree, without installing anything
START=$(date +%s)
stamp() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/steps.txt"; }
pack() { tar -czf "$OUT/results.tgz" -C "$RES" . 2>/dev/null; }
STEPS="${STEPS:-gpu_targets kernels multipole_scaling balltree_gpu pytest}"
[ "${TUNE:-0}" = 1 ] && STEPS="$STEPS gpu_tuning"
want() { local key=$1; [[ $key == pytest_* ]] && key=pytest; [[ " $STEPS " == *" $key "* ]]; }
step() {  # step NAME LIMIT_SECONDS COMMAND...   (skipped unless NAME, or "pytest" for pytest_*, is in STEPS)
    local name=$1 limit=$2; shift 2
    want "$name" || { stamp "skip $name"; return; }
    stamp "start $name (limit ${limit}s)"
    timeout "$limit" "$@" > "$RES/$name.log" 2>&1
    local rc=$?
    stamp "end $name: exit $rc"
    tail -n 45 "$RES/$name.log"
    pack
}

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
} > "$RES/versions.txt" 2>&1
cat "$RES/versions.txt"
pack

step gpu_targets 130 "$PY" benchmarks/gpu_targets.py --out "$RES"
step kernels 90 "$PY" benchmarks/kernels.py --device cuda --dtype bfloat16 --heads 8 --head-dim 64 \
    --ops galerkin neighborhood weighted_softmax --backends triton reference sparse sdpa dense_sdpa \
    --min-n 16384 --max-n 1048576 --dense-max-n 262144 --series-budget 12 --reps 5 --out "$RES"
step multipole_scaling 40 "$PY" benchmarks/multipole_scaling.py --device cuda --sizes 64 128 256 512 1024 \
    --dense-max 256 --reps 5 --results "$RES"
step balltree_gpu 60 "$PY" benchmarks/balltree_gpu.py --reps 5 --results "$RES"
step gpu_tuning 150 "$PY" benchmarks/gpu_tuning.py --timeout 50 --out "$RES"
for f in galerkin_triton softmax_triton neighborhood_triton backend_equivalence; do
    step "pytest_$f" 45 "$PY" -m pytest -q -p no:cacheprovider -rs "tests/sciattn/test_$f.py"
done
stamp "done"
ls -la "$RES"
