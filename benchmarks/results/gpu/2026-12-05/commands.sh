# H200 (device tool, kind nvidia-h200; torch 2.11.0+cu130, Triton 3.6.0, Python 3.12.3), 2026-12-05.
# Main at c8e96d3 (issue 15's options 1 and 2 in: the frame watch on the writer thread, the EventLane);
# before = a707c69 (main before the two options), side by side in the same calls.
# Host Q: three calls back to back on one machine (02:25, 02:30, 02:34 UTC; uptime 0, 5, 9 min);
# host R: a fresh machine after give_back (02:40 UTC, uptime 0 min); host S: another fresh one (03:06 UTC,
# main at c69b485, INPROC_ROUNDS=120 COMPILE_LIMIT_S=230 JOURNAL_LIMIT_S=70). Raw: issue15_{0225,0230,0234,0240,0306}/.
mkdir .bench-before-A && git archive a707c69 jitwatch | tar -x -C .bench-before-A
# wheels as in benchmarks/README.md ("Rerun on the GPU"), in .whl/; each call:
#   run(carry=[".whl", ".bench-before-A"], command=
PACK=1 BEFORE=$PWD/.bench-before-A PAIRED_BEFORE=/nonexistent INPROC_ROUNDS=160 COMPILE_LIMIT_S=330 \
  JOURNAL_LIMIT_S=100 WHL=.whl OUT=$OUT/i15 bash scripts/gpu/issue15.sh
# compiling thread, net of a timed no-op in the same slots (after / before):
#   Q 12.7 / 12.7, 14.2 / 12.0, 11.3 / 23.2 us; R 6.5 / 7.9 us; S 16.3 / 12.5 us
# added CPU in one process vs the three-slot no-op floor [90 % bootstrap] (after / before):
#   Q 1.17x [1.05-1.36] / 1.24x, 1.18x [1.03-1.31] / 1.15x, 1.31x [1.17-1.48] / 1.25x; R 1.17x [1.09-1.22] / 1.08x;
#   S 1.28x [1.08-1.50] / 1.10x
# journal, one writer per rank (after / before): Q 22.8 / 23.9, 21.2 / 25.6, 25.6 / 25.3 us; R 10.4 / 10.4 us; S 18.5 / 24.0 us
# journal, mixed ranks: Q 22.8, 19.3, 23.8 us; R 10.2 us; S 17.6 us; 457 B per event (655 B all distinct)
# host probe, SQLite row: Q 2.20-3.86 us, R 1.52 us, S 2.10-3.15 us (bench_host_probe.reference)
