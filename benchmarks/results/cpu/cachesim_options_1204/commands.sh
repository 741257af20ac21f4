# CPU VM (2-vCPU AMD EPYC, Python 3.11.7, Triton 3.9.0 compile-only), 2026-12-04 22:21-22:40 UTC.
# Before: main a707c69 (the evening's closing main). Loaded machine (helpers running tests): callgrind
# counts instructions and simulated cache misses, not time, so load does not change them.
mkdir -p /tmp/abl/B && git archive a707c69 jitwatch | tar -x -C /tmp/abl/B
# Option 1 alone (frame watch off the compiling thread, 05bce27, before the EventLane):
mkdir -p /tmp/abl/Fx && git archive 05bce27 | tar -x -C /tmp/abl/Fx
(cd /tmp/abl/Fx/benchmarks && python callgrind_compiling_thread.py --cases hooks --cache-sim --before /tmp/abl/B \
  --n 600 --compiles 24 --bursts 3 --out callgrind_cachesim_framewatch_only.json)
# Both (main 55c92c7: EventLane + frame watch off the compiling thread):
mkdir -p /tmp/abl/Mx && git archive 55c92c7 | tar -x -C /tmp/abl/Mx
(cd /tmp/abl/Mx/benchmarks && python callgrind_compiling_thread.py --cases tight,hooks --cache-sim --before /tmp/abl/B \
  --n 600 --compiles 24 --bursts 3 --out callgrind_cachesim.json)
# jitwatch's part per real compile (hooks case), before -> after:
#   option 1 alone: 15,245 -> 13,646 instructions (-10.5 %); L1 misses 1,044 -> 911 (-12.7 %)
#   both:           15,249 -> 12,590 instructions (-17.4 %); L1 misses 1,046 ->  845 (-19.2 %)
#   tight loop:     17,649 -> 12,510 instructions (-29.1 %, incl. the old 8-frame walk); L1 misses 977 -> 572
