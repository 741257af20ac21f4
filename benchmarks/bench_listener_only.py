"""Benchmark 9b: the compiling thread's CPU per *listener-only* Triton compile, side by side.

A listener-only compile is one Triton reports only through ``knobs.compilation.listener``: a
direct ``triton.compile`` (what Inductor does for its kernels), or any compile on a Triton without
the JIT hooks. jitwatch's share of it runs on the compiling thread, inside Triton's call of the
listener. Three figures per jitwatch tree, each process in phase ``serving`` (``warn`` mode: the
first compile of a key warns, the rest take warn-once's lookup), every compile a Triton
*disk-cache hit* (the cheapest compile, so jitwatch's largest fraction):

* ``listener_us`` — CPU (``time.thread_time_ns``) of the compiling thread inside jitwatch's
  installed listener, per call, during real ``triton.compile`` calls (the listener wrapped by a
  timer; the wrapper's own cost is in every tree alike);
* ``tight_us`` — the same listener called back to back with one real call's keywords (warm
  caches, no Triton in between), ``time.thread_time`` around ``--tight`` calls, per call;
* ``compile_us`` — ``time.thread_time`` around each whole ``triton.compile`` call (Triton's
  work on this thread plus jitwatch's); ``added_us`` is that minus the ``none`` variant's (the
  compile-only driver, no jitwatch): across processes, so a drifting host moves it by more than
  the listener costs;
* ``paired_added_us`` — inside one process, bursts of ``--burst`` compiles alternating
  (``--pairs`` pairs) between jitwatch's listener and a no-op callable in the listener slot: the
  compiling thread's CPU jitwatch adds to a whole compile (cache misses after Triton's work
  included), each pair's difference of burst medians.

Variants: ``none`` (no jitwatch), ``after`` (this tree), ``before`` (an older tree:
``--before DIR`` or ``--before-ref REF``, which runs ``git archive REF jitwatch`` into the
scratch directory), one process each per round, their order rotating round by round. Medians are
over every call of every round; ``by_round`` keeps each round's medians (on a shared machine they
show the spread). The journal writer's thread (where the ``after`` tree decodes the stage times
and builds the event) is not measured here: ``bench_cost_floor.py`` does that for JIT compiles.

Run: ``python benchmarks/bench_listener_only.py --before-ref main --out /tmp/listener_only.json``
(``--smoke``: seconds, for ``make bench-smoke``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton
import triton.language as tl
from _common import REPO, machine_info, scratch_dir, summary, write_result

HERE = Path(__file__).resolve()
SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


@triton.jit
def listener_only_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


# --------------------------------------------------------------------------- worker process
def _worker(cfg: dict[str, Any]) -> dict[str, Any]:
    """One process of one variant: prime Triton's disk cache, then the three measurements."""
    tree = cfg["tree"]
    sys.path.insert(0, tree)
    import jitwatch
    from jitwatch.testing import compile_only_driver, fresh_triton_cache, monitored

    where = str(Path(jitwatch.__file__).resolve().parent.parent)
    assert where == str(Path(tree).resolve()), (where, tree)
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", 90, 32)
    knobs = triton.knobs.compilation
    scratch = Path(cfg["scratch"])

    def compile_once() -> Any:
        return triton.compile(ASTSource(fn=listener_only_add, signature=SIG, constexprs={(4,): 64}), target=target)

    out: dict[str, Any] = {"variant": cfg["variant"]}
    with ExitStack() as stack:
        monitor = None
        if cfg["variant"] == "none":
            stack.enter_context(fresh_triton_cache(scratch / "cache"))
            stack.enter_context(compile_only_driver(90))
        else:
            h = stack.enter_context(
                monitored("warn", journal_dir=scratch / "journal", triton_cache_dir=scratch / "cache")
            )
            monitor = h.monitor
            monitor.activate()
        for _ in range(1 + cfg["warm"]):  # the first misses and fills the disk cache
            compile_once()
        per: list[float] = []
        for _ in range(cfg["compiles"]):
            t0 = time.thread_time()
            compile_once()
            per.append(time.thread_time() - t0)
        out["compile_s"] = per
        if monitor is None:
            return out
        inner = knobs.listener
        inside: list[int] = []
        seen: list[dict[str, Any]] = []

        def timed(**kw: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return inner(**kw)
            finally:
                inside.append(time.thread_time_ns() - t0)
                seen[:] = [kw]

        knobs.listener = timed
        try:
            for _ in range(cfg["compiles"]):
                compile_once()
        finally:
            knobs.listener = inner
        monitor.flush()
        out["listener_ns"] = inside
        kw = seen[0]
        assert kw.get("cache_hit") is True, "not a disk-cache hit"
        tight: list[float] = []
        n = cfg["tight"]
        for _ in range(cfg["tight_reps"]):
            t0 = time.thread_time()
            for _ in range(n):
                inner(**kw)
            tight.append((time.thread_time() - t0) / n)
            monitor.flush()  # the writer drains between reps, outside the timed loop
        out["tight_s"] = tight

        def noop(**kw: Any) -> None:
            return None

        diffs: list[float] = []  # per pair: median compile with jitwatch's listener - with a no-op one
        for i in range(cfg["pairs"]):
            medians = {}
            for which in ("jitwatch", "noop") if i % 2 == 0 else ("noop", "jitwatch"):
                knobs.listener = inner if which == "jitwatch" else noop
                burst = []
                for _ in range(cfg["burst"]):
                    t0 = time.thread_time()
                    compile_once()
                    burst.append(time.thread_time() - t0)
                medians[which] = statistics.median(burst)
            knobs.listener = inner
            diffs.append(medians["jitwatch"] - medians["noop"])
            monitor.flush()
        out["paired_added_s"] = diffs
        out["hook_errors"] = monitor.hook_errors
    return out


# --------------------------------------------------------------------------- parent
def _run_worker(variant: str, tree: str, args: argparse.Namespace, scratch: Path, i: int) -> dict[str, Any]:
    cfg = {
        "variant": variant,
        "tree": tree,
        "scratch": str(scratch / f"{variant}-{i}"),
        "warm": args.warm,
        "compiles": args.compiles,
        "tight": args.tight,
        "tight_reps": args.tight_reps,
        "pairs": args.pairs,
        "burst": args.burst,
    }
    env = dict(os.environ, PYTHONPATH=tree)
    proc = subprocess.run(
        [sys.executable, str(HERE), "--worker", json.dumps(cfg)], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} worker failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out")
    ap.add_argument("--before", help="an older jitwatch tree (a directory holding jitwatch/)")
    ap.add_argument("--before-ref", help="git ref: `git archive REF jitwatch` into the scratch dir, as --before")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--compiles", type=int, default=200, help="disk-cache-hit compiles per measurement")
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--tight", type=int, default=500, help="listener calls per tight-loop rep")
    ap.add_argument("--tight-reps", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=12, help="paired bursts: jitwatch's listener vs a no-op one")
    ap.add_argument("--burst", type=int, default=20, help="compiles per paired burst")
    ap.add_argument("--smoke", action="store_true", help="seconds: for make bench-smoke")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return
    if args.smoke:
        args.rounds, args.compiles, args.warm, args.tight, args.tight_reps, args.pairs, args.burst = (
            1,
            10,
            2,
            20,
            2,
            2,
            3,
        )
    scratch = scratch_dir("jw-bench-listener-")
    trees = {"after": str(REPO)}
    before = args.before
    if args.before_ref:
        before = str(scratch / "before")
        os.makedirs(before)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.before_ref, "jitwatch"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", before], input=archive.stdout, check=True)
    if before:
        trees["before"] = str(Path(before).resolve())
    variants = ["none", *trees]
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for r in range(args.rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for v in order:
            runs[v].append(_run_worker(v, trees.get(v, str(REPO)), args, scratch, r))
    none_median = statistics.median(x for w in runs["none"] for x in w["compile_s"])
    figures: dict[str, Any] = {}
    for v in variants:
        compile_all = [x for w in runs[v] for x in w["compile_s"]]
        fig: dict[str, Any] = {"compile_us": summary(compile_all, 1e6)}
        if v != "none":
            fig["added_us"] = (statistics.median(compile_all) - none_median) * 1e6
            fig["listener_us"] = summary([x for w in runs[v] for x in w["listener_ns"]], 1e-3)
            fig["tight_us"] = summary([x for w in runs[v] for x in w["tight_s"]], 1e6)
            fig["paired_added_us"] = summary([x for w in runs[v] for x in w["paired_added_s"]], 1e6)
            fig["hook_errors"] = sum(w["hook_errors"] for w in runs[v])
            fig["by_round"] = [
                {
                    "listener_us": statistics.median(w["listener_ns"]) / 1e3,
                    "tight_us": statistics.median(w["tight_s"]) * 1e6,
                    "compile_us": statistics.median(w["compile_s"]) * 1e6,
                    "paired_added_us": statistics.median(w["paired_added_s"]) * 1e6,
                }
                for w in runs[v]
            ]
        else:
            fig["by_round"] = [{"compile_us": statistics.median(w["compile_s"]) * 1e6} for w in runs[v]]
        figures[v] = fig
    if "before" in figures:
        figures["after_over_before"] = {
            k: figures["after"][k]["median"] / figures["before"][k]["median"]
            for k in ("listener_us", "tight_us", "paired_added_us")
        }
    payload = {
        "benchmark": "listener_only",
        "config": {
            k: getattr(args, k)
            for k in ("rounds", "compiles", "warm", "tight", "tight_reps", "pairs", "burst", "before_ref")
        },
        "before": args.before_ref or before,  # the ref, not the scratch path, when archived
        "figures": figures,
        "machine": machine_info(),
    }
    write_result(args.out, "listener_only", payload)
    for v in variants:
        f = figures[v]
        line = f"{v:>7}: compile {f['compile_us']['median']:.1f} µs"
        if v != "none":
            line += (
                f" (added {f['added_us']:.1f}); inside the listener {f['listener_us']['median']:.2f} µs;"
                f" tight loop {f['tight_us']['median']:.2f} µs; whole compile, jitwatch's listener - a no-op one"
                f" (paired bursts) {f['paired_added_us']['median']:.1f} µs; hook errors {f['hook_errors']}"
            )
        print(line)
    if "after_over_before" in figures:
        print("after / before:", {k: round(x, 3) for k, x in figures["after_over_before"].items()})
    print("load average:", payload["machine"].get("loadavg_1_5_15"))


if __name__ == "__main__":
    main()
