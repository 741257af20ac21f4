#!/usr/bin/env bash
# Issue 11 on the GPU machine in one device-tool call: the torch.compile scenario (two processes,
# cold then warm Inductor cache, mode="reduce-overhead") and the compiled-call hot-path benchmark.
#
#   bash scripts/gpu/torch_compile.sh          # from the repository root, carry: [".whl"]
#
# Missing pure-Python deps (pydantic, ...) travel as wheels in .whl/ (see scripts/gpu-tier.sh);
# from a worktree (.wt/<name>) the main checkout's ../../.whl is used. Writes under $OUT (default
# ./gpu-tc-out): env.txt, pytest.log, torch_compile_cold.json, torch_compile_warm.json,
# torch_compile_summary.txt, bench_torch_compile.json, bench.log. About 3 minutes on an H200.
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-tc-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1 OTEL_SDK_DISABLED=true
if ! "$PY" -c "import pydantic" 2>/dev/null; then
  WHL=.whl; [ -d "$WHL" ] || WHL=../../.whl
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl \
    || { echo "wheel install failed"; exit 3; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
  "$PY" -c "import torch, triton, platform; print('python', platform.python_version(), 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
  nproc
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
status=0
JITWATCH_GPU_OUT="$OUT" timeout 420 "$PY" -m pytest tests/gpu/test_torch_compile_gpu.py -s -v -p no:cacheprovider \
  --timeout 400 >"$OUT/pytest.log" 2>&1 || status=1
grep -E "^\[|^  req|PASSED|FAILED|Error|assert" "$OUT/pytest.log" | tail -40
timeout 90 "$PY" benchmarks/bench_torch_compile.py --out "$OUT/bench_torch_compile.json" >"$OUT/bench.log" 2>&1 || status=1
tail -3 "$OUT/bench.log"
exit $status
