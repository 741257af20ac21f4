# Shared by scripts/gpu/<library>.sh (sourced). Big wheels cross to the GPU machine in parts, one
# device call each (64 MiB per call), while the machine stays warm (~30 s between calls):
#
#   here:   bash scripts/gpu/pack.sh LIBRARY     # splits .whl/LIBRARY/* into .gpu/LIBRARY-1, -2 (≤ 50 MiB)
#   call 1: carry .gpu/LIBRARY-1 (+ code); run: bash scripts/gpu/LIBRARY.sh stage 1
#   call 2: carry .gpu/LIBRARY-2 (+ code); run: bash scripts/gpu/LIBRARY.sh run 2
#
# `stage N` copies part N to /tmp/jitwatch-wheels; `run N` adds part N, joins the split wheels,
# installs them with pip --no-index --no-deps --target /tmp/site, and runs the library's GPU test.
set -u
STASH=/tmp/jitwatch-wheels
OUT="${OUT:-$PWD/gpu-dsl-out}"
mkdir -p "$STASH" "$OUT"
PY="${PYTHON:-python3}"

stage_part() { # stage_part LIBRARY N
  cp -r ".gpu/$1-$2/." "$STASH/"
  echo "staged $(ls "$STASH" | wc -l) files, $(du -sh "$STASH" | cut -f1) in $STASH"
}

install_wheels() {
  # join split wheels (NAME.whl.part-aa, -ab, ...)
  for first in "$STASH"/*.whl.part-aa; do
    [ -e "$first" ] || continue
    whl="${first%.part-aa}"
    cat "$whl".part-* >"$whl" && rm -f "$whl".part-*
  done
  ls -la "$STASH"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$STASH"/*.whl \
    || { echo "wheel install failed"; exit 3; }
  export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  export JITWATCH_TEST_DSL_SITE=/tmp/site JITWATCH_TEST_DSL_REQUIRED=1 JITWATCH_GPU_OUT="$OUT"
  export PYTHONUNBUFFERED=1 OTEL_SDK_DISABLED=true
  { date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
    "$PY" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.version.cuda)"
    "$PY" -m pip list 2>/dev/null | grep -iE "cutlass|tilelang|tvm|flashinfer|deep.gemm|cuda-bindings|cuda-python|pydantic" ; } >"$OUT/env.txt" 2>&1
  cat "$OUT/env.txt"
}

run_test() { # run_test PYTEST_K LIMIT_S
  timeout "$2" "$PY" -m pytest tests/gpu/test_dsl_gpu.py -k "$1" -v -p no:cacheprovider -rA --timeout "$2" 2>&1 | tee "$OUT/pytest.log" | tail -60
  return "${PIPESTATUS[0]}"
}
