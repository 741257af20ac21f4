set -u
cd /work/main
D=/tmp/cpu15
export PYTHONPATH=$PWD OTEL_SDK_DISABLED=true PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
PY=.venv/bin/python
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
$PY benchmarks/bench_host_probe.py --out $D/journal/probe_start.json > /dev/null 2>&1
$PY benchmarks/bench_cost_floor.py --device cpu --sections compile --two-slot-floor --reps 4 --rounds 1 --inproc-rounds 60 --before .bench-before --out $D/compile/cost_floor.json > $D/compile/cost_floor.log 2>&1
echo "compile done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
$PY benchmarks/bench_cost_floor.py --device cpu --sections journal --journal-rounds 7 --before .bench-before --out $D/journal/cost_floor.json > $D/journal/cost_floor.log 2>&1
echo "journal done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
$PY benchmarks/bench_journal_split.py --rounds 5 --out $D/journal/split.json > $D/journal/split.log 2>&1
$PY benchmarks/bench_host_probe.py --out $D/journal/probe_end.json > /dev/null 2>&1
$PY benchmarks/bench_series.py --journal $D/sidecar/journal --out $D/sidecar/series.json > $D/sidecar/series.log 2>&1
$PY benchmarks/bench_sidecar.py --before .bench-before-s --before-label 4a3985f --writer-rate 193 --duration 3 --journal $D/sidecar/journal --out $D/sidecar/sidecar.json > $D/sidecar/sidecar.log 2>&1
rm -rf $D/sidecar/journal
echo "all done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
