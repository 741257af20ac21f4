#!/usr/bin/env bash
# jitwatch's cost-at-the-floor benchmark (benchmarks/bench_cost_floor.py) on the GPU machine, in one
# device call of about 2 minutes: disk-cache-hit compiles with real launches (no jitwatch / no-op hooks /
# jitwatch / the jitwatch of --before), journal µs and bytes per event. Results in $OUT.
#
# From the session's checkout (/work/main), with this worktree and the wheels the GPU image lacks
# (pydantic & co and orjson, see benchmarks/README.md) carried:
#   run(carry=[".wt/perf", ".whl"], command="cd .wt/perf && WHL=../../.whl bash scripts/gpu/bench.sh", timeout_s=240)
# BEFORE (default .bench-before, a `git archive <commit> jitwatch` tree, git-ignored) is measured side by side.
set -u
cd "$(dirname "$0")/../.."
WHL="${WHL:-.whl}"
OUT="${OUT:-$PWD/gpu-bench-out}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl \
  || { echo "wheel install failed"; exit 3; }
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 OTEL_SDK_DISABLED=true TRITON_DEFAULT_FP_FUSION=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  grep -m1 "model name" /proc/cpuinfo; uptime
  python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"; } \
  >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
# PRETOUCH_GIB=N: write N GiB once and free it before measuring. A fresh VM backs guest memory on
# first touch, so the first processes of a call run slower than later ones (the journal's
# per-round medians fell from 37.8 to 19.9 us over one call); a long-running server's memory is warm.
if [ -n "${PRETOUCH_GIB:-}" ]; then
  python3 -c "import sys, time; t = time.time(); b = bytearray(b'\x01') * (int(sys.argv[1]) << 30); del b; print(f'pre-touched {sys.argv[1]} GiB in {time.time() - t:.1f} s')" "$PRETOUCH_GIB"
fi
BEFORE="${BEFORE:-$PWD/.bench-before}"
args=(--device cuda --out "$OUT/cost_floor.json")
[ -d "$BEFORE/jitwatch" ] && args+=(--before "$BEFORE")
timeout "${LIMIT_S:-200}" python3 benchmarks/bench_cost_floor.py "${args[@]}" "$@" 2>&1 | tee "$OUT/cost_floor.log"
exit "${PIPESTATUS[0]}"
