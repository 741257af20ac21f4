# CPU VM (2-vCPU AMD EPYC, Python 3.11.7, Triton 3.9.0 compile-only), 2026-12-04 22:40-22:55 UTC.
# After: branch `lane` (the monitor appends to the journal writer's EventLane); before: main a707c69.
mkdir -p /tmp/abl/M && git archive a707c69 jitwatch | tar -x -C /tmp/abl/M
cd benchmarks && python callgrind_compiling_thread.py --cases hooks --cache-sim --before /tmp/abl/M \
  --n 600 --compiles 24 --bursts 3 --out /tmp/cg_lane.json
# jitwatch's part per real compile: 15,260 -> 14,191 instructions (-7.0 %);
# L1 misses I/Dr/Dw 544/384/126 -> 509/347/119 (1,054 -> 975, -7.5 %).
