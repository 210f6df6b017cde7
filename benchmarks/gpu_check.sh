#!/usr/bin/env bash
# One prepared check of sciattn on a lent GPU machine (at most about 9 minutes: every step has a limit,
# and together they fit one 10-minute device call).
#
#   bash benchmarks/gpu_check.sh            # rows under $RES, packed into $OUT/results.tgz (default ./gpu_out)
#   STEPS="gpu_targets pytest" bash benchmarks/gpu_check.sh      # only some steps
#   TUNE=1 bash benchmarks/gpu_check.sh     # also the launch-configuration sweep (about 90 s more)
#   STEPS=pointcloud_scale bash benchmarks/gpu_check.sh   # a second device call: every point-set operator at
#                                           # 2^20 and 2^22 points on the GPU (at most 300 s; not in the default)
#
# Steps, each with its own time limit so that a hang in one still leaves the others' output. Every benchmark
# runs through the harness (python -m benchmarks run NAME --out $RES) and appends its rows to $RES/NAME.jsonl;
# the rows carry the date, the hardware (GPU name), the versions (Python, torch, the sciattn commit, Triton
# where the benchmark uses it) and the command; gpu_targets' first row records the device's SMs, compute
# capability, memory, CUDA build and driver. Append the returned rows to benchmarks/results/NAME.jsonl.
# 1. versions: nvidia-smi, python, torch (+ CUDA), triton, available backends   -> $OUT/steps.txt (log only)
# 2. gpu_targets: the kernel targets (Galerkin bandwidth and speed-up, weighted softmax against flash SDPA,
#    spherical neighbourhood attention at 1°), each checked against its reference first
# 3. kernels --set device="cuda": scaling of every backend, 2^14 .. 2^20
# 4. multipole_scaling --set device="cuda": one multipole layer, 64² .. 1024², dense to 256²; the default
#    physical pyramid through SDPA and through flex attention (its GPU path, checked in step 7 first)
# 5. balltree_gpu --set device="cuda": host-sync check, tree build and ball attention scaling
# 6. gpu_tuning (only with TUNE=1): launch-configuration sweep of the Triton kernels
# 6b. pointcloud_scale (only when named in STEPS): forward at 2^20 and 2^22 points, forward+backward at 2^20,
#    time and peak GPU memory per point-set operator (never run yet: no device since it was written)
# 7. pytest of the Triton kernel tests and of the multipole flex path (outputs and gradients against the SDPA
#    path on the GPU) with compiled kernels (TRITON_INTERPRET=0), one process per
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
} 2>&1 | tee -a "$OUT/steps.txt"
pack

step gpu_targets 130 "$PY" -m benchmarks run gpu_targets --out "$RES"
step kernels 90 "$PY" -m benchmarks run kernels --out "$RES" --set device='"cuda"' --set dtype='"bfloat16"' \
    --set heads=8 --set head_dim=64 --set ops='["galerkin", "neighborhood", "weighted_softmax"]' \
    --set backends='["triton", "reference", "sparse", "sdpa", "dense_sdpa"]' \
    --set min_n=16384 --set max_n=1048576 --set dense_max_n=262144 --set series_budget=12 --set reps=5
step multipole_scaling 70 "$PY" -m benchmarks run multipole_scaling --out "$RES" --set device='"cuda"' \
    --set sizes='[64, 128, 256, 512, 1024]' --set dense_max=256 --set reps=5 \
    --set methods='["multipole", "multipole_flex", "multipole_cells8", "galerkin", "dense_sdpa"]' 
step balltree_gpu 60 "$PY" -m benchmarks run balltree_gpu --out "$RES" --set device='"cuda"' --set reps=5
step gpu_tuning 150 "$PY" -m benchmarks run gpu_tuning --out "$RES" --set timeout=50
step pointcloud_scale 300 "$PY" -m benchmarks run pointcloud_scale --out "$RES" --set device='"cuda"' \
    --set sizes='[1048576, 4194304]' --set backward_max=1048576 --set reps=3 --set max_seconds=60 \
    --set memory_limit_mb=65536
for f in galerkin_triton softmax_triton neighborhood_triton backend_equivalence multipole_flex_gpu; do
    step "pytest_$f" 45 "$PY" -m pytest -q -p no:cacheprovider -rs "tests/sciattn/test_$f.py"
done
stamp "done"
ls -la "$RES"
