#!/usr/bin/env bash
# DeepGEMM on the GPU machine, one device call (source 2.7 MiB + wheels for pydantic & co):
#   here:  bash scripts/gpu/deepgemm-src.sh (once) -> .whl/deepgemm-src/dg-src.tar.gz; .whl/base/*.whl
#   call:  carry .whl/deepgemm-src and .whl/base; run: bash scripts/gpu/deepgemm.sh probe (the library alone)
#          or: bash scripts/gpu/deepgemm.sh run (jitwatch's GPU test, tests/gpu/test_deepgemm_gpu.py)
cd "$(dirname "$0")/../.."
set -u
OUT="${OUT:-$PWD/gpu-dsl-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
if ls .whl/base/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/base/*.whl \
    || { echo "wheel install failed"; exit 3; }
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
  "$PY" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.version.cuda)"
  which nvcc; echo "CUDA_HOME=${CUDA_HOME:-}"; } >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
bash scripts/gpu/deepgemm-build.sh 2>&1 | tail -30 | tee "$OUT/build.log" || { echo "build failed"; exit 4; }
cp /tmp/dg-build/dg/deep_gemm/_C.so "$OUT/_C.so" 2>/dev/null || true
export PYTHONPATH="$PWD:/tmp/dg-build/dg:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OTEL_SDK_DISABLED=true
case "$1" in
  probe)
    export DG_JIT_CACHE_DIR=/tmp/dg-cache DG_JIT_DEBUG=1
    rm -rf /tmp/dg-cache
    timeout 200 "$PY" scripts/gpu/deepgemm_probe.py --role compile >"$OUT/probe-compile.log" 2>&1; echo "compile rc=$?"
    timeout 100 "$PY" scripts/gpu/deepgemm_probe.py --role load >"$OUT/probe-load.log" 2>&1; echo "load rc=$?"
    grep -h "PROBE" "$OUT"/probe-*.log | grep -v '"entry"' | cut -c1-400 | head -80
    grep -vh "PROBE" "$OUT"/probe-*.log | cut -c1-300 | head -40
    ;;
  run)
    export JITWATCH_GPU_OUT="$OUT" JITWATCH_TEST_DSL_REQUIRED=1 JITWATCH_TEST_DSL_SITE=/tmp/dg-build/dg
    timeout 400 "$PY" -m pytest tests/gpu/test_deepgemm_gpu.py -v -p no:cacheprovider -rA 2>&1 | tee "$OUT/pytest.log" | tail -60
    ;;
esac
