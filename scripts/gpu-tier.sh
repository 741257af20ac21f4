#!/usr/bin/env bash
# The whole GPU tier in one go: the `gpu` tests, then GPU benchmarks 1-4, then a short table.
#
# Meant for ONE call of the device tool (nvidia-h200; python3 there has torch + Triton +
# prometheus-client but not pydantic), from the repository root:
#
#   bash scripts/gpu-tier.sh            # with `carry: [".whl"]`, see benchmarks/README.md
#
# Missing deps travel as wheels in .whl/ (pydantic, pydantic-core, annotated-types,
# typing-inspection, typing-extensions, orjson; python 3.12 manylinux) and are installed into
# /tmp/site. Without the orjson wheel jitwatch still runs (the journal's stdlib JSON encoder, slower).
# Writes at most 8 files under $OUT (default ./gpu-tier-out): env.txt, pytest-gpu.log, bench.log,
# recompiles.json, hot_path.json, compile_cost.json, first_request.json, summary.txt.
# Every step has its own time limit; the whole run stays under ~7 minutes on an H200.
# QUICK=1 shortens the benchmarks (smoke run). On a machine without CUDA the tests skip and the
# benchmarks run their CPU variants (first_request is skipped).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-tier-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1 OTEL_SDK_DISABLED=true
export JITWATCH_DIR="${JITWATCH_DIR:-$(mktemp -d)}"

if ! "$PY" -c "import pydantic" 2>/dev/null; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "wheel install failed"; exit 3; }
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "pydantic missing and no .whl/ folder carried"; exit 3
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 || true
  "$PY" - <<'EOF'
import platform, sys
print("python", platform.python_version())
for m in ("torch", "triton", "pydantic", "orjson", "prometheus_client", "jitwatch"):
    try:
        mod = __import__(m)
        print(m, getattr(mod, "__version__", "?"))
    except Exception as exc:  # noqa: BLE001
        print(m, "MISSING", exc)
import torch
print("cuda", torch.cuda.is_available(), torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
EOF
  nproc
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

status=0
step() { # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s)" | tee -a "$OUT/bench.log"
  timeout "$limit" "$@" >>"$OUT/bench.log" 2>&1
  local rc=$?
  echo "=== $name rc=$rc in $((SECONDS - t0))s" | tee -a "$OUT/bench.log"
  [ $rc -eq 0 ] || status=1
}

t0=$SECONDS
# the torch.compile scenario (two processes, ~50 s) has its own call: scripts/gpu/torch_compile.sh
timeout 120 "$PY" -m pytest tests/gpu -m gpu -v -p no:cacheprovider --timeout 60 \
  --ignore=tests/gpu/test_torch_compile_gpu.py >"$OUT/pytest-gpu.log" 2>&1
prc=$?
echo "=== pytest tests/gpu rc=$prc in $((SECONDS - t0))s"
[ $prc -eq 0 ] || status=1

Q=()
CQ=()
HQ=()
if [ "${QUICK:-0}" = 1 ]; then Q=(--reps 2 --requests 100); CQ=(--quick); HQ=(--reps 4 --launches 2000); fi
step recompiles 50 "$PY" benchmarks/bench_recompiles.py --out "$OUT/recompiles.json"
step hot_path 50 "$PY" benchmarks/bench_hot_path.py --out "$OUT/hot_path.json" ${HQ[@]+"${HQ[@]}"}
step compile_cost 110 "$PY" benchmarks/bench_compile_cost.py --out "$OUT/compile_cost.json" ${CQ[@]+"${CQ[@]}"}
step first_request 210 "$PY" benchmarks/bench_first_request.py --out "$OUT/first_request.json" ${Q[@]+"${Q[@]}"}

echo
echo "================ GPU tier summary ================"
"$PY" benchmarks/summarize.py "$OUT" --pytest-log "$OUT/pytest-gpu.log" | tee "$OUT/summary.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest-gpu.log" | tail -15
exit $status
