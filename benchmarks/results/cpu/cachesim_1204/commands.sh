# CPU VM (2-vCPU AMD EPYC, Python 3.11.7, Triton 3.9.0 compile-only), 2026-12-04 19:40-19:58 UTC, main 0e92bb4.
# The ablation tree A: this tree with the Triton pre-hook's frame watch taken out.
mkdir -p /tmp/abl/A && git archive HEAD jitwatch | tar -x -C /tmp/abl/A
sed -i '0,/        watch = self.watching is None/s//        watch = False/' /tmp/abl/A/jitwatch/backends/triton/backend.py
cd benchmarks && python callgrind_compiling_thread.py --cases tight,hooks --cache-sim --before /tmp/abl/A \
  --n 600 --compiles 24 --bursts 3 --out results/cpu/cachesim_1204/callgrind_cachesim.json
# The other ablations (each a copy of the tree, run the same way as --before; figures in docs/benchmarks.md section 9):
#   warn-once:      core/monitor.py end(): `if token[_T_PHASE] is _SERVING:` -> `if False:`
#   submit:         core/monitor.py end(): the `queued = ... self._sink.submit(...)` expression -> `queued = True`
#   request/parent: core/monitor.py begin_watched(): `_current_request.get()` and `current_parent() if _marks else None` -> None
#   async check:    backends/triton/backend.py _make_pre(): `async_get = ...` -> `async_get = None`
# The H200 call (host P, 19:32 UTC), BEFORE = tree A copied to .bench-before-A:
#   run(carry=[".whl", ".bench-before-A"], command="WHL=.whl BEFORE=$PWD/.bench-before-A OUT=$OUT/abl LIMIT_S=420 bash scripts/gpu/bench.sh --sections compile --no-launch --two-slot-floor --reps 6 --rounds 2 --inproc-rounds 40")
