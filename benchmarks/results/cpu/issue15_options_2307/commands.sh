# CPU VM (2-vCPU AMD EPYC, Python 3.11.7, Triton 3.9.0 compile-only, SQLite 3.40.1), 2026-12-04.
# After: main with issue 15's options 1 (frame watch off the compiling thread) and 2 (EventLane),
# 2bdeee7 (run 1, 23:07 UTC, a vLLM test started in its last minute) and 5bc702b (run 2, 23:36 UTC, quiet:
# load 0.7; the commits between change nothing on the compiling thread).
# Before: a707c69 (main before the two options), side by side in the same runs.
mkdir .bench-before-A && git archive a707c69 jitwatch | tar -x -C .bench-before-A
PYTHONPATH=$PWD OTEL_SDK_DISABLED=true .venv/bin/python benchmarks/bench_cost_floor.py --device cpu \
  --sections compile --two-slot-floor --reps 4 --rounds 1 --inproc-rounds 60 --before .bench-before-A \
  --out cost_floor_run1.json   # run 1
PYTHONPATH=$PWD OTEL_SDK_DISABLED=true .venv/bin/python benchmarks/bench_cost_floor.py --device cpu \
  --sections compile --two-slot-floor --reps 4 --rounds 1 --inproc-rounds 120 --before .bench-before-A \
  --out cost_floor_run2.json   # run 2
# compiling thread, net of a timed no-op in the same slots: run 1 6.6 us (before 8.5), run 2 6.6 us (before 8.6)
# compiling thread, median calls: 8.1 (10.0), 8.1 (10.1); the three hooks back to back: 3.1 (3.1), 3.1 (3.2)
# added CPU in one process vs the three-slot no-op floor [90 % bootstrap]: run 1 1.58x [1.36-1.91] (before 1.38x
#   [1.21-1.56]); run 2 1.21x [1.05-1.33] (before 1.39x [1.31-1.57]): within this VM's run-to-run spread
