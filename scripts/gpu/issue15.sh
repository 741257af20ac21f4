#!/usr/bin/env bash
# Issue 15's H200 figures from ONE device call, on one host (ratios from one run):
#   1. compile: disk-cache-hit compiles with Triton's CUDA backend and no launch (--no-launch),
#      jitwatch's hook layouts alternated inside one process (added CPU vs the three- and
#      two-slot no-op floors, with a 90 % bootstrap interval; the compiling thread net of a timed
#      no-op; the tight loop), the tree in $BEFORE side by side;
#   2. journal: µs and bytes per event, every layout, $JOURNAL_ROUNDS processes per tree;
#   3. journal, paired: this journal.py against $PAIRED_BEFORE's, batch by batch in one process,
#      and the A/A check;
#   4. the host: its CPU flags and how fast it runs the journal's primitives (bench_host_probe.py,
#      at the start and at the end), and where the journal's CPU per event goes on it
#      (bench_journal_split.py), so figures from different hosts can be compared;
#   5. with SIDECAR_BEFORE=DIR (a `git archive <commit> jitwatch` tree, e.g. 4a3985f, the sidecar
#      before item 3): /metrics and /jit p50/p99 at 1 and 4 clients on the 100k-event / 500-kernel /
#      8-rank journal while a writer appends 193 events/s, that tree's sidecar and prometheus_client's
#      own exposition of the same families in the same run (bench_sidecar.py), and the series count
#      of that journal (bench_series.py, which builds it). Needs the sidecar's wheels (FastAPI, uvicorn, …) in
#      $WHL/side (benchmarks/README.md).
# From the session's checkout, with the wheels the GPU image lacks (benchmarks/README.md):
#   run(carry=[".whl", ".bench-before", ".bench-before-j"], command="PACK=1 WHL=.whl OUT=$OUT/i15 bash scripts/gpu/issue15.sh")
# ~6-8 minutes on an H200 host; each step has its own limit. Results in $OUT.
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-issue15-out}"
WHL="${WHL:-.whl/base}"
BEFORE="${BEFORE:-$PWD/.bench-before}"
PAIRED_BEFORE="${PAIRED_BEFORE:-$PWD/.bench-before-j/jitwatch/store/journal.py}"
INPROC_ROUNDS="${INPROC_ROUNDS:-240}"
JOURNAL_ROUNDS="${JOURNAL_ROUNDS:-7}"
mkdir -p "$OUT/journal"
status=0
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl \
  && PYTHONPATH="$PWD:/tmp/site" OTEL_SDK_DISABLED=true timeout 60 python3 benchmarks/bench_host_probe.py \
    --out "$OUT/journal/probe_start.json" 2>&1 | tr -d '\n ' | head -c 600; echo
WHL="$WHL" BEFORE="$BEFORE" OUT="$OUT/compile" LIMIT_S="${COMPILE_LIMIT_S:-440}" bash scripts/gpu/bench.sh \
  --sections compile --no-launch --two-slot-floor --reps 4 --rounds 1 --inproc-rounds "$INPROC_ROUNDS" || status=1
echo "compile: $((SECONDS - t0)) s"
t1=$SECONDS
WHL="$WHL" BEFORE="$BEFORE" OUT="$OUT/journal" LIMIT_S="${JOURNAL_LIMIT_S:-100}" bash scripts/gpu/bench.sh \
  --sections journal --journal-rounds "$JOURNAL_ROUNDS" || status=1
echo "journal: $((SECONDS - t1)) s"
t2=$SECONDS
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 OTEL_SDK_DISABLED=true
if [ -f "$PAIRED_BEFORE" ]; then
  timeout "${PAIRED_LIMIT_S:-90}" python3 benchmarks/bench_journal_paired.py --before "$PAIRED_BEFORE" \
    --cases fleet_per_rank,fleet --reps 4 --out "$OUT/journal/paired.json" 2>&1 | tail -4 || status=1
  timeout "${PAIRED_LIMIT_S:-90}" python3 benchmarks/bench_journal_paired.py --before jitwatch/store/journal.py \
    --cases fleet_per_rank --reps 2 --out "$OUT/journal/paired_aa.json" 2>&1 | tail -3 || status=1
else
  echo "no $PAIRED_BEFORE: paired journal skipped"
fi
echo "paired: $((SECONDS - t2)) s"
timeout 60 python3 benchmarks/bench_journal_split.py --rounds 5 --out "$OUT/journal/split.json" 2>&1 | tail -1 || status=1
timeout 60 python3 benchmarks/bench_host_probe.py --out "$OUT/journal/probe_end.json" >/dev/null 2>&1 || status=1
if [ -n "${SIDECAR_BEFORE:-}" ]; then
  t3=$SECONDS
  mkdir -p "$OUT/sidecar"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-side \
    "$WHL"/side/*.whl || status=1
  # bench_series.py builds the journal (bench_sidecar.build_journal); bench_sidecar.py reuses it
  PYTHONPATH="$PWD:/tmp/site-side:/tmp/site" timeout 240 python3 benchmarks/bench_series.py \
    --journal "$OUT/sidecar/journal" --out "$OUT/sidecar/series.json" 2>&1 | tail -3 || status=1
  PYTHONPATH="$PWD:/tmp/site-side:/tmp/site" timeout "${SIDECAR_LIMIT_S:-200}" python3 benchmarks/bench_sidecar.py \
    --before "$SIDECAR_BEFORE" --before-label "$(basename "$SIDECAR_BEFORE")" --writer-rate 193 \
    --duration "${SIDECAR_DURATION_S:-3}" --journal "$OUT/sidecar/journal" --out "$OUT/sidecar/sidecar.json" \
    2>&1 | tail -25 || status=1
  rm -rf "$OUT/sidecar/journal"
  echo "sidecar: $((SECONDS - t3)) s"
fi
echo "total $((SECONDS - t0)) s"
# PACK=1: everything in one $OUT.tgz, $OUT removed (the device tool returns at most 8 files)
if [ "${PACK:-0}" = 1 ]; then
  tar czf "$OUT.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")" && rm -rf "$OUT"
fi
exit $status
