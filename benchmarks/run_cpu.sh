#!/usr/bin/env bash
# Every benchmark that runs on a CPU machine, results as JSON under $1 (default
# benchmarks/results/cpu), a log in run.log there, and a short table at the end.
# About 10 minutes on 2 cores. Uses .venv/bin/python unless PYTHON is set.
set -u
cd "$(dirname "$0")/.."
DEST="${1:-benchmarks/results/cpu}"
PY="${PYTHON:-.venv/bin/python}"
mkdir -p "$DEST"
export TRITON_DEFAULT_FP_FUSION=1 OTEL_SDK_DISABLED=true PYTHONUNBUFFERED=1
export JITWATCH_DIR="${JITWATCH_DIR:-$(mktemp -d)}"
status=0
for b in recompiles hot_path compile_cost sidecar memory fleet torch_compile cost_floor; do
  echo "=== $b $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$DEST/run.log"
  "$PY" "benchmarks/bench_$b.py" --out "$DEST/$b.json" >>"$DEST/run.log" 2>&1 || { echo "=== $b FAILED"; status=1; }
done
"$PY" benchmarks/summarize.py "$DEST"
exit $status
