#!/usr/bin/env bash
# `make bench-smoke`: every benchmark, briefly, so none of them rots. Figures are meaningless at this
# size and nothing is asserted on them; a benchmark that crashes fails the target. ~5 min on 2 idle cores.
# bench_first_request.py and diag_first_request.py need a GPU (scripts/gpu/, benchmarks/README.md): not here.
# bench_install_import.py needs .venv-dsl: `make test-dsl` runs it briefly. callgrind_compiling_thread.py
# needs valgrind, which a fresh machine lacks: not run in CI.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
DEST="$(mktemp -d)"
export TRITON_DEFAULT_FP_FUSION=1 OTEL_SDK_DISABLED=true PYTHONUNBUFFERED=1 JITWATCH_DIR="$DEST/jitwatch"
status=0
run_script() { # run_script NAME SCRIPT ARGS...: one benchmark, its log kept for a failure
  local name=$1 script=$2; shift 2
  local t0=$SECONDS
  if timeout 300 "$PY" "$script" "$@" >"$DEST/$name.log" 2>&1; then
    echo "bench-smoke: $name ok ($((SECONDS - t0)) s)"
  else
    echo "bench-smoke: $name FAILED ($((SECONDS - t0)) s)"; tail -30 "$DEST/$name.log"; status=1
  fi
}
run() { # run NAME ARGS...: benchmarks/bench_NAME.py --out DEST/NAME.json ARGS...
  local name=$1; shift
  run_script "$name" "benchmarks/bench_$name.py" --out "$DEST/$name.json" "$@"
}
run cost_floor --smoke --device cpu
if git rev-parse -q --verify HEAD >/dev/null 2>&1; then  # the side-by-side path too, where git is
  run listener_only --smoke --before-ref HEAD
else
  run listener_only --smoke
fi
run sidecar --events 1000 --kernels 20 --ranks 2 --duration 0.3 --concurrency 1,2 --writer-rate 50
run series --events 1000 --kernels 20 --ranks 2 --journal "$DEST/series-journal"
run compile_cost --quick --device cpu --procs 2
run recompiles --device cpu --sizes 1,2,3,7,16,17,32,33
run hot_path --device cpu --launches 200 --reps 2
run memory --events 2000 --kernels 200
run journal_paired --before jitwatch/store/journal.py --cases fleet_per_rank,fleet --reps 1 --events 512
run journal_split --rounds 1 --events 512
run host_probe -n 64
run live_memory --kernels 50 --ranks 2
run fleet --smoke
run torch_compile --device cpu --calls 100 --reps 2
run deepgemm_watcher --seconds 0.5 --entries 200
run_script parallel_warmup benchmarks/parallel_warmup.py --variants 2 --repeats 1 --workers 2 --json "$DEST/parallel_warmup.json"
rm -rf "$DEST"
exit $status
