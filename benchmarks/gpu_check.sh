#!/usr/bin/env bash
# The GPU check of issue #34 in one call: the GPU tests, then the GPU benchmark (Ember beside
# PyTorch eager on the same card), then the whole operator table on the GPU against the CPU.
#
#   bash benchmarks/gpu_check.sh [all|tests|bench|table]      (default all)
#
# Made for the lent H100/H200 machine (no network there): it installs nothing and uses the
# machine's python3, which has CuPy (cupy-cuda12x or -cuda13x), a CUDA build of PyTorch and
# the nvidia cuDNN wheel. Each phase has its own time limit, so one that hangs cannot take the
# others' time, and the whole run stays under $BUDGET seconds (default 560: the table gets what
# is left); everything is logged under $OUT (or ./gpu_check_out) and the summary that the
# closing note needs is printed last. Run it through the device tool with timeout_s=590.
set -uo pipefail
cd "$(dirname "$0")/.."
PHASE=${1:-all}
OUT_DIR=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/ember-cupy-cache}
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
START=$(date +%s)
BUDGET=${BUDGET:-560}

note() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - START )); }

# phase NAME LIMIT_S LOG COMMAND...: runs COMMAND under a time limit, logs it, notes the result
phase() {
  local name=$1 limit=$2 log=$3; shift 3
  echo "== $name (limit ${limit}s, at $(elapsed)s) =="
  timeout --kill-after=10 "$limit" "$@" > "$OUT_DIR/$log" 2>&1
  local rc=$?
  tail -n 25 "$OUT_DIR/$log"
  case $rc in
    0) note "$name: ok ($(elapsed)s)";;
    124|137) note "$name: TIMED OUT after ${limit}s (see $log)";;
    *) note "$name: FAILED, exit $rc (see $log)";;
  esac
  return 0
}

env_report() {
  nvidia-smi -L 2>&1 | head -4
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
  "$PY" - <<'EOF'
import platform, sys
print('python', platform.python_version(), sys.executable)
try:
    import cupy
    print('cupy', cupy.__version__, 'CUDA runtime', cupy.cuda.runtime.runtimeGetVersion(),
          'driver', cupy.cuda.runtime.driverGetVersion())
except Exception as exc:
    print('cupy: NOT USABLE:', exc)
try:
    import torch
    print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available',
          torch.cuda.is_available())
except Exception as exc:
    print('torch: NOT USABLE:', exc)
import ember as mx
from ember import backend
from ember.backend import cudnn
print('ember sees', mx.context.num_gpus(), 'GPU(s);', cudnn.status())
if mx.context.num_gpus():
    be = backend.for_device(mx.gpu(0))
    print('gpu(0):', be.name(), 'compute capability', be.compute_capability(),
          'free/total bytes', mx.context.gpu_memory_info(0))
    print('library warnings:', backend.gpu.check_libraries(be.xp) or 'none')
    x = mx.nd.array([[1, 2], [3, 4]], ctx=mx.gpu(0))
    print('smoke test:', (x * 2 + 1).sum().asscalar(), '(expect 26.0)')
EOF
}

export -f env_report
export PY

tests() {
  phase "environment" 60 env.txt bash -c env_report
  grep -q "ember sees [1-9]" "$OUT_DIR/env.txt" || { note "no GPU visible to Ember: stopping"; return 1; }
  phase "GPU tests (backend, streams, fusion, networks)" 150 tests.log \
    "$PY" -m pytest -p no:cacheprovider -q -rfEs --no-header -o addopts= \
      tests/test_gpu.py tests/test_gpu_logic.py tests/test_fusion_cuda.py \
      -k "not operator_table_row"
}

bench() {
  phase "ember bench score --device gpu (resnet-50)" 90 bench_score.txt \
    "$PY" -m ember bench score --device gpu --network resnet-50 --batch-size 1,32,128 \
      --warmup 3 --batches 10
  phase "compare.py --device gpu (resnet50_v1 inference 1/32/128, training 64)" 220 \
    compare.txt "$PY" benchmarks/compare.py --device gpu --torch-python "$PY" \
      --frameworks ember,torch --cells resnet50_v1:1,resnet50_v1:32,resnet50_v1:128 \
      --train --train-batch 64 --repeats 1 --warmup 2 --batches 10 --min-seconds 1 \
      --quiet-wait 0 --busy-retries 0 --timeout 90 --json "$OUT_DIR/compare.json"
  sed -n '/^| network/,$p' "$OUT_DIR/compare.txt" | tee -a "$SUMMARY"
}

table() {
  local left=$(( BUDGET - $(elapsed) ))
  if [ "$left" -lt 60 ]; then
    note "operator table: not run, ${left}s left (run: bash $0 table)"
    return 0
  fi
  phase "operator table on gpu(0) against the CPU" "$left" table.log \
    "$PY" -m pytest -p no:cacheprovider -q -rfE --no-header -o addopts= tests/test_gpu.py \
      -k "operator_table_row"
}

case $PHASE in
  tests) tests;;
  bench) bench;;
  table) table;;
  all) tests && bench && table;;
  *) echo "usage: $0 [all|tests|bench|table]" >&2; exit 2;;
esac

echo
echo "===== summary ($(elapsed)s) ====="
cat "$SUMMARY"
grep -hE "passed|failed|error" "$OUT_DIR"/tests.log "$OUT_DIR"/table.log 2>/dev/null | tail -n 4
! grep -qE "FAILED|TIMED OUT|stopping" "$SUMMARY"
