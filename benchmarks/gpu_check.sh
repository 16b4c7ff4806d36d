#!/usr/bin/env bash
# The GPU check of issue #34 in one call: set up, the GPU tests, the GPU benchmark (Ember beside
# PyTorch eager on the same card), then the whole operator table on the GPU against the CPU.
#
#   bash benchmarks/gpu_check.sh [all|setup|tests|bench|table]      (default all)
#
# Made for a lent H100/H200 machine. Setup first installs, with pip into $SITE (default
# /tmp/ember-site), what the run needs and the machine lacks: the `gpu` extra of pyproject.toml
# (CuPy and cuDNN) when CuPy does not import, pytest, and Ember's own requirements. The wheels
# come from .whl/ when it holds some (the device tool's way to carry them to a machine without
# network), else from the package index; the lent H200 has CuPy (cupy-cuda13x), cuDNN, PyTorch
# and pytest already, so there it installs nothing. Setup then builds Ember's optional C modules
# for the machine's Python (where that fails, Ember runs its Python paths). Each phase has its
# own time limit, so one that hangs cannot take the others' time, and the whole run stays under
# $BUDGET seconds (default 480: the table gets what is left). Logs go to $OUT (or
# /tmp/ember-gpu-check), eight files at most; the summary the closing note needs is printed last.
# Run it through the device tool with timeout_s=510.
set -uo pipefail
cd "$(dirname "$0")/.."
PHASE=${1:-all}
OUT_DIR=${OUT:-/tmp/ember-gpu-check}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/ember-site}
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/ember-cupy-cache}
SUMMARY="$OUT_DIR/summary.txt"
START=$(date +%s)
BUDGET=${BUDGET:-480}

note() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - START )); }

# phase NAME LIMIT_S LOG COMMAND...: runs COMMAND under a time limit (cut to what is left of
# $BUDGET), appends its output to LOG, notes the result
phase() {
  local name=$1 limit=$2 log=$3; shift 3
  local left=$(( BUDGET - $(elapsed) ))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    note "$name: NOT RUN, ${left}s of the budget left (run: bash $0 with its phase)"
    return 1
  fi
  echo "== $name (limit ${limit}s, at $(elapsed)s) =="
  local before
  before=$(cat "$OUT_DIR/$log" 2>/dev/null | wc -l)
  timeout --kill-after=10 "$limit" "$@" >> "$OUT_DIR/$log" 2>&1
  local rc=$?
  tail -n "+$(( before + 1 ))" "$OUT_DIR/$log" | tail -n 25
  case $rc in
    0) note "$name: ok ($(elapsed)s)";;
    124|137) note "$name: TIMED OUT after ${limit}s (see $log)";;
    *) note "$name: FAILED, exit $rc (see $log)";;
  esac
  return $rc
}

# The requirements this run needs that do not import here, one a line
missing_requirements() {
  "$PY" - <<'EOF'
import importlib.util, tomllib
with open('pyproject.toml', 'rb') as file:
    project = tomllib.load(file)['project']
wanted = {'numpy': ['numpy>=2.1'], 'ml_dtypes': ['ml_dtypes>=0.4'],
          'threadpoolctl': ['threadpoolctl>=3.1'], 'pytest': ['pytest>=7'],
          'cupy': project['optional-dependencies']['gpu']}
for module, requirements in wanted.items():
    if importlib.util.find_spec(module) is None:
        print('\n'.join(requirements))
EOF
}

install_missing() {
  local missing
  mapfile -t missing < <(missing_requirements)
  if [ ${#missing[@]} -eq 0 ]; then
    echo "every requirement imports already"
    return 0
  fi
  echo "installing into $SITE: ${missing[*]}"
  local source=()
  if compgen -G ".whl/*.whl" > /dev/null; then
    source=(--no-index --find-links .whl)
  fi
  "$PY" -m pip install -q --disable-pip-version-check --no-cache-dir --target "$SITE" \
    "${source[@]}" "${missing[@]}"
}

setup() {
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  phase "setup: install what is missing" 90 env.txt bash -c install_missing || return 1
  # optional modules: a failed build leaves Ember on its Python paths, and fails nothing
  if timeout 150 "$PY" setup.py -q build_ext --inplace -j 8 >> "$OUT_DIR/env.txt" 2>&1; then
    note "setup: compiled modules built ($(elapsed)s)"
  else
    note "setup: compiled modules not built, Ember runs its Python paths (see env.txt)"
  fi
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
from ember import accel, backend
from ember.backend import cudnn
print('ember sees', mx.context.num_gpus(), 'GPU(s);', cudnn.status(), '; shape code:',
      accel.BACKEND)
if mx.context.num_gpus():
    be = backend.for_device(mx.gpu(0))
    print('gpu(0):', be.name(), 'compute capability', be.compute_capability(),
          'free/total bytes', mx.context.gpu_memory_info(0))
    print('library warnings:', backend.gpu.check_libraries(be.xp) or 'none')
    x = mx.nd.array([[1, 2], [3, 4]], ctx=mx.gpu(0))
    print('smoke test:', (x * 2 + 1).sum().asscalar(), '(expect 26.0)')
EOF
}

export -f env_report missing_requirements install_missing
export PY SITE

tests() {
  phase "environment" 45 env.txt bash -c env_report
  grep -q "ember sees [1-9]" "$OUT_DIR/env.txt" || { note "no GPU visible to Ember: stopping"; return 1; }
  phase "GPU tests (backend, streams, fusion, networks)" 150 tests.log \
    "$PY" -m pytest -p no:cacheprovider -q -rfEs --no-header -o addopts= \
      tests/test_gpu.py tests/test_gpu_logic.py tests/test_fusion_cuda.py \
      -k "not operator_table_row"
  return 0
}

bench() {
  phase "ember bench score --device gpu (resnet-50, float32)" 75 bench_score.txt \
    "$PY" -m ember bench score --device gpu --network resnet-50 --batch-size 1,32,128 \
      --warmup 3 --batches 10
  phase "ember bench score --device gpu (resnet-50, float16)" 45 bench_score_fp16.txt \
    "$PY" -m ember bench score --device gpu --network resnet-50 --batch-size 32,128 \
      --warmup 3 --batches 10 --dtype float16
  phase "compare.py --device gpu (resnet50_v1 inference 1/32/128, training 64)" 180 \
    compare.txt "$PY" benchmarks/compare.py --device gpu --torch-python "$PY" \
      --frameworks ember,torch --cells resnet50_v1:1,resnet50_v1:32,resnet50_v1:128 \
      --train --train-batch 64 --repeats 1 --warmup 2 --batches 10 --min-seconds 1 \
      --quiet-wait 0 --busy-retries 0 --timeout 80 --json "$OUT_DIR/compare.json"
  sed -n '/^| network/,$p' "$OUT_DIR/compare.txt" | tee -a "$SUMMARY"
  return 0
}

table() {
  phase "operator table on gpu(0) against the CPU" "$BUDGET" table.log \
    "$PY" -m pytest -p no:cacheprovider -q -rfE --no-header -o addopts= tests/test_gpu.py \
      -k "operator_table_row"
  return 0
}

case $PHASE in
  setup|tests|bench|table|all) ;;
  *) echo "usage: $0 [all|setup|tests|bench|table]" >&2; exit 2;;
esac
rm -f "$OUT_DIR"/*.txt "$OUT_DIR"/*.log "$OUT_DIR"/*.json
case $PHASE in
  setup) setup;;
  tests) setup && tests;;
  bench) setup && bench;;
  table) setup && table;;
  all) setup && tests && bench && table;;
esac

echo
echo "===== summary ($(elapsed)s) ====="
cat "$SUMMARY"
grep -hE "passed|failed|error" "$OUT_DIR"/tests.log "$OUT_DIR"/table.log 2>/dev/null | tail -n 4
! grep -qE "FAILED|TIMED OUT|NOT RUN|stopping" "$SUMMARY"
