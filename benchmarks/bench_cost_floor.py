"""Benchmark 7: jitwatch's cost at the floor, side by side in one run.

Three figures, each against its baseline measured in the same run:

* **compile** — a burst of Triton *disk-cache-hit* compiles (the cheapest compile Triton does, so
  jitwatch's largest fraction) in three kinds of process, interleaved round by round:

  - ``none``: no jitwatch, Triton's hook slots empty;
  - ``noop``: no-op callables in Triton's three slots (``knobs.runtime.jit_cache_hook``,
    ``knobs.runtime.jit_post_compile_hook``, ``knobs.compilation.listener``) — the *floor*: what
    Triton itself adds to a compile once anything is hooked (it builds ``repr`` and serializes
    specialization data for every hooked compile);
  - ``noop2`` (``--two-slot-floor``): no-op callables in ``jit_cache_hook`` and the listener
    only — the slots jitwatch occupies outside ``error`` mode, whose compilation listener ends
    the compile (``jit_post_compile_hook`` left empty): the floor of that layout;
  - ``jitwatch``: ``jitwatch.create_monitor(...).install()`` with its journal writer, phase
    ``serving`` (``warn`` mode; the post-warmup warning is logged once per key).

  Per compile: **CPU** of the whole process (``time.process_time``: every thread, so the journal
  writer thread is included; the burst ends with ``flush()``) and **wall**. Added cost is
  ``variant - none``; the ratio ``(jitwatch - none) / (noop - none)`` says how far jitwatch is from
  the floor (``..._ratio_to_two_slot_floor`` against ``noop2``). Separately, in the ``jitwatch``
  process, a second burst with the installed callables (two or three) wrapped by a timer gives
  **µs on the compiling thread** inside jitwatch's own hooks, and the same callables called back
  to back with one real compile's keywords (``--tight`` times per rep) give the compiling
  thread's CPU per compile with warm caches (the *tight loop*);
  a pass of bursts gives the journal writer's thread CPU per compile (its CPU clock) and the
  part of it spent building the events (``JournalWriter._materialize``); a last pass, where
  jitwatch left ``jit_post_compile_hook`` empty, alternates bursts with that slot empty and holding
  a no-op: what an occupied post-compile slot costs, paired within one process
  (``post_slot_price_us``). The timed callables are also net of a timed no-op in the same slots,
  bursts alternated (``compiling_thread_net_us``: the timer's cost between Triton's stages cancels).
  **In one process** (``in_process``, ``--inproc-rounds``): the ``jitwatch`` process also
  alternates every layout of the slots — empty, three no-ops, two no-ops, jitwatch's own callables
  untouched — burst by burst, the order rotating each round and reversed every other one, and
  pairs them within each round:
  added CPU and its ratio to each floor with no process-to-process spread, and the compiling
  thread's CPU (``time.thread_time``) with jitwatch minus with no-ops in the same slots, no timer
  anywhere (``compiling_thread_own_us``; also the difference of the layouts' p10s, which other
  tenants' interference cannot raise).
* **journal** — ``Journal.write`` of real compile events (a template from a real compile, keys
  varied) in batches of 256 (what the writer does), writer-thread CPU per event
  (``time.thread_time``), minor page faults per event (``getrusage``: zlib state allocated and
  freed per record used to fault its pages in every time) and bytes per event (database pages
  after a WAL checkpoint, divided by the events), with each specialization compiled on
  ``--ranks`` ranks — their events mixed in one writer's batches (``fleet``), or written by one
  journal connection per rank, each batch one rank's as a worker's writer thread does
  (``fleet_per_rank``, the realistic layout) — and all distinct (the worst case). One process per tree
  (this one, ``--before``) and round, the trees' order alternating round by round
  (``--journal-rounds``); CPU is summarised over every batch of every round, and each round's
  median is kept (on a shared machine they show the spread).

Each journal round and the compile section also record how fast the host ran at that moment
(``bench_host_probe.reference``: µs per SQLite event row and per pure-Python loop step): an H200
host's speed drifted ~1.7x within minutes (docs/benchmarks.md §9), more than the changes measured.

``/metrics`` and ``/jit`` latency are measured by ``bench_sidecar.py``.

Run: ``python benchmarks/bench_cost_floor.py --out results/cost_floor.json`` (``--device cuda`` on
a GPU machine, where compiles are real launches — add ``--no-launch`` to compile there with
``kernel.warmup`` instead: Triton's CUDA backend, no launch and no module load, whose burst-to-burst
spread is far smaller; ``--smoke`` for a seconds-long CI run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_dir, summary, write_result

HERE = Path(__file__).resolve()
VARIANTS = ("none", "noop", "jitwatch")
BATCH = 256
"""Events per ``Journal.write`` in the journal section (the writer thread's ``HIGH_WATER``)."""
TWO_SLOT = "noop2"
"""No-op callables in ``jit_cache_hook`` and ``compilation.listener`` only (``--two-slot-floor``)."""
BEFORE = "jitwatch_before"
"""The ``jitwatch`` variant run with an older jitwatch tree (``--before DIR``), in the same run."""


# --------------------------------------------------------------------------- worker process
def _worker(cfg: dict[str, Any]) -> dict[str, Any]:
    """One process of one variant: prime, then ``reps`` timed bursts of disk-cache-hit compiles."""
    if cfg.get("tree"):
        sys.path.insert(0, cfg["tree"])  # an older jitwatch (--before), ahead of this checkout
    if cfg.get("kind") == "journal":
        from bench_host_probe import reference  # the host's speed at this round's start and end

        before = reference()
        out = bench_journal(cfg["events"], cfg["ranks"], 500, Path(cfg["tmp"]))
        after = reference()
        out["host_reference"] = {k: (before[k] + after[k]) / 2 for k in before}
        return out
    device = cfg["device"]
    launch = device == "cuda" and not cfg.get("no_launch")
    if device == "cpu":
        from jitwatch.backends.triton.compile_only import activate

        activate()
    import _kernels
    import triton

    plan = _kernels.compile_plan(cfg["n"])
    run = _kernels.make_launcher(device)
    variant = cfg["variant"]
    mon = None
    if variant in ("noop", "noop2"):

        def noop(*args: Any, **kwargs: Any) -> None:
            return None

        triton.knobs.runtime.jit_cache_hook = noop
        if variant == "noop":
            triton.knobs.runtime.jit_post_compile_hook = noop
        triton.knobs.compilation.listener = noop
    elif variant in ("jitwatch", BEFORE):
        import dataclasses
        import logging

        from jitwatch import WorkerIdentity, create_monitor
        from jitwatch.config import Settings

        logging.getLogger("jitwatch").setLevel(logging.ERROR)  # the warn-once lines are not measured
        settings = dataclasses.replace(Settings.from_env(), journal_dir=Path(cfg["journal_dir"]))
        mon = create_monitor(settings, mode="warn", identity=WorkerIdentity(rank=0), tracer_provider=False)
        mon.install()
        mon.begin_warmup()
        mon.activate()

    def burst() -> tuple[float, float]:
        _kernels.clear_memory_caches()
        c0, w0 = time.process_time(), time.perf_counter()
        for name, block, warps in plan:
            run(name, block, warps, launch)
        if launch:
            import torch

            torch.cuda.synchronize()
        if mon is not None:
            mon.flush()  # the writer's work for this burst is inside the measurement
        return time.process_time() - c0, time.perf_counter() - w0

    burst()  # warm Python paths and the OS page cache
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(cfg["reps"]):
        c, w = burst()
        cpu.append(c / len(plan))
        wall.append(w / len(plan))
    out: dict[str, Any] = {"variant": variant, "cpu_s": cpu, "wall_s": wall}
    if mon is not None:
        cost = _thread_cost(mon, burst, triton, cfg["reps"], len(plan))
        out["thread_s"], out["thread_mean_s"], out["thread_net_s"] = cost["median"], cost["mean"], cost["net"]
        out["tight_cpu_s"] = _tight_loop(burst, triton, cfg.get("tight", 2000), cfg["reps"])
        out["writer_s"], out["build_s"] = _writer_cost(mon, burst, cfg["reps"], len(plan))
        out["post_slot_s"] = _post_slot_price(burst, triton, cfg.get("ab_pairs", 12), len(plan))
        out["in_process"] = _in_process(burst, triton, cfg.get("inproc_rounds", 16), len(plan), mon.sink)
        out["dropped"] = getattr(mon.sink, "dropped_total", None)
        mon.uninstall()
    return out


def _thread_cost(mon: Any, burst: Any, triton: Any, reps: int, n: int) -> dict[str, list[float]]:
    """Seconds per compile inside jitwatch's installed callables (compiling thread), each call
    timed by a wrapper (``time.perf_counter``):

    * ``median`` sums each callable's median call minus the timer's own overhead, read from a warm
      loop of a wrapped ``lambda: None`` (robust to the GIL hand-offs and preemptions a shared
      machine adds to single calls; the figure quoted since the first pass);
    * ``mean`` is the burst total divided by its compiles (those included), minus the same;
    * ``net`` sums, per slot, jitwatch's median call minus the median call of a wrapped no-op
      with the same signature in the same slot, in bursts alternated with jitwatch's (which goes
      first alternating rep by rep): the timer's
      cost *between Triton's stages* (forwarding Triton's keywords through ``*args, **kwargs``
      with cold caches, which the warm ``lambda: None`` probe does not see) cancels, and what is
      left is jitwatch's own callable in that place."""
    perf = time.perf_counter
    calls: list[list[float]] = [[], [], []]
    floor_calls: list[list[float]] = [[], [], []]

    def wrap(fn: Any, acc: list[float]) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = perf()
            try:
                return fn(*args, **kwargs)
            finally:
                acc.append(perf() - t0)

        return timed

    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    slots = [(triton.knobs.runtime, "jit_cache_hook"), (triton.knobs.runtime, "jit_post_compile_hook")]
    slots.append((triton.knobs.compilation, "listener"))
    saved = [(h, a, getattr(h, a)) for h, a in slots]
    used = sum(fn is not None for _, _, fn in saved)
    probe_acc: list[float] = []
    probe = wrap(lambda: None, probe_acc)
    for _ in range(10_000):
        probe()
    overhead = statistics.median(probe_acc)
    out: dict[str, list[float]] = {"median": [], "mean": [], "net": []}
    try:
        for rep in range(reps):
            for acc in (*calls, *floor_calls):
                acc.clear()
            # jitwatch's burst first in even reps, the no-op's in odd ones: neither always follows the other
            for floor in (False, True) if rep % 2 == 0 else (True, False):
                for (h, a, fn), acc, floor_acc in zip(saved, calls, floor_calls, strict=True):
                    if fn is None:  # an empty slot stays empty (jitwatch leaves the post-compile hook out)
                        continue
                    # a no-op, timed the same way, in each slot jitwatch holds; or jitwatch's own
                    setattr(h, a, wrap(noop, floor_acc) if floor else wrap(fn, acc))
                burst()
            out["median"].append(max(0.0, sum(statistics.median(acc) - overhead for acc in calls if acc)))
            out["mean"].append(max(0.0, sum(sum(acc) for acc in calls) / n - used * overhead))
            out["net"].append(
                sum(
                    statistics.median(acc) - statistics.median(floor)
                    for acc, floor in zip(calls, floor_calls, strict=True)
                    if acc and floor
                )
            )
    finally:
        for h, a, fn in saved:
            setattr(h, a, fn)
    return out


def _writer_cost(mon: Any, burst: Any, reps: int, n: int) -> tuple[list[float], list[float]]:
    """CPU seconds per compile of the journal writer's thread (its CPU clock,
    ``time.pthread_getcpuclockid``: everything it does — building the events, the journal write,
    its wake-ups) and the part of it inside ``JournalWriter._materialize`` (building the events:
    the backend's decoding, the ``Event``, the reason), in ``reps`` bursts after the timed ones
    (the per-batch timer is not in the headline figures)."""
    writer = mon.sink
    thread, materialize = getattr(writer, "_thread", None), getattr(writer, "_materialize", None)
    if thread is None or materialize is None or not hasattr(time, "pthread_getcpuclockid"):
        return [], []
    clock = time.pthread_getcpuclockid(thread.ident)
    spent = [0.0]

    def timed(batch: Any) -> Any:
        t0 = time.thread_time()
        try:
            return materialize(batch)
        finally:
            spent[0] += time.thread_time() - t0

    writer._materialize = timed
    whole: list[float] = []
    build: list[float] = []
    try:
        for _ in range(reps):
            spent[0] = 0.0
            w0 = time.clock_gettime(clock)
            burst()
            whole.append((time.clock_gettime(clock) - w0) / n)
            build.append(spent[0] / n)
    finally:
        del writer._materialize  # the class's method again
    return whole, build


def _tight_loop(burst: Any, triton: Any, n: int, reps: int) -> list[float]:
    """CPU seconds of the compiling thread (``time.thread_time``: the writer thread's work and
    time spent waiting for a core are not in it) per compile when jitwatch's three installed
    callables are called back to back, ``n`` times per rep, with the keywords Triton passed them
    in a real disk-hit compile: the hooks' own work with warm caches and no Triton in between."""
    import _kernels

    saved, (kp, kl, kq) = _kernels.hook_keywords(burst)
    pre, listener, post = saved
    if post is None:  # two slots: the listener ends the compile
        post, kq = (lambda **kw: None), {}
    out: list[float] = []
    for _ in range(max(1, reps)):
        c0 = time.thread_time()
        for _ in range(n):
            pre(**kp)
            listener(**kl)
            post(**kq)
        out.append((time.thread_time() - c0) / n)
        burst()  # the writer drains what the loop queued (its flush), outside the measurement
    return out


def _post_slot_price(burst: Any, triton: Any, pairs: int, n: int) -> list[float]:
    """CPU seconds per compile (whole process) that a no-op ``jit_post_compile_hook`` adds when
    jitwatch left that slot empty: ``pairs`` pairs of bursts in this one process, the slot empty
    in one and holding a no-op in the other (order alternating), each pair's difference. Paired
    within a process, so a host whose speed drifts between processes cancels out. ``[]`` where
    the slot is not empty (an older jitwatch, or ``error`` mode)."""
    rt = triton.knobs.runtime
    if rt.jit_post_compile_hook is not None:
        return []

    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    diffs: list[float] = []
    try:
        for i in range(pairs):
            got: dict[bool, float] = {}
            for occupied in (False, True) if i % 2 == 0 else (True, False):
                rt.jit_post_compile_hook = noop if occupied else None
                got[occupied] = burst()[0]
            diffs.append((got[True] - got[False]) / n)
    finally:
        rt.jit_post_compile_hook = None
    return diffs


IN_PROCESS = ("none", "noop", TWO_SLOT, "jitwatch")
"""The hook layouts :func:`_in_process` alternates inside one process."""
HELD = "jitwatch_held"
"""jitwatch's callables with the journal writer held until the burst's ``flush()``."""


def _hold_writer(sink: Any, hold: bool, interval: float) -> None:
    """Make the journal writer thread wait for ``flush()`` (``hold``) or wake every ``interval``
    seconds again: its ``interval_s`` is read before each wait, and a wake-up starts a new one."""
    sink.interval_s = 1e6 if hold else interval
    sink._wake.set()
    time.sleep(0.02)


def _in_process(burst: Any, triton: Any, rounds: int, n: int, sink: Any = None) -> dict[str, list[float]]:
    """Every layout of Triton's three slots (:data:`IN_PROCESS`) alternated burst by burst in this
    one process, ``rounds`` times (the order rotating every round, and reversed every other round,
    so that no layout always follows the same one): per round and layout, seconds
    per compile of the process's CPU (``time.process_time``: every thread, the journal writer's
    included, as each burst ends with ``flush()``), of the compiling thread's CPU
    (``time.thread_time``) and of wall. ``none`` empties the slots; ``noop``/``noop2`` put no-op
    callables in three/two of them; ``jitwatch`` puts back the callables jitwatch installed (two
    or three), untouched: no timer or wrapper around them. Differences taken within a round cancel
    a host whose speed drifts from process to process (the H200's did by 1.1-2.0 ms per compile),
    and the compiling thread's difference against the floor of the same slots is jitwatch's own
    work there, cache misses it causes included, with nothing of a timer's.

    ``jitwatch_held`` (where ``sink`` is a journal writer with ``interval_s``): jitwatch's
    callables with the writer thread held until the burst's ``flush()``, so it never runs while
    the compiling thread compiles: the difference to ``jitwatch`` is what the writer running
    concurrently costs the compiling thread (GIL hand-offs: ``sqlite3`` releases the GIL around
    each call, Triton around its file reads) and the process."""
    slots = [(triton.knobs.runtime, "jit_cache_hook"), (triton.knobs.runtime, "jit_post_compile_hook")]
    slots.append((triton.knobs.compilation, "listener"))
    mine = [getattr(h, a) for h, a in slots]

    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    layouts = {
        "none": [None, None, None],
        "noop": [noop, noop, noop],
        TWO_SLOT: [noop, None, noop],
        "jitwatch": mine,
    }
    interval = getattr(sink, "interval_s", None)
    names = IN_PROCESS if interval is None else (*IN_PROCESS, HELD)
    layouts[HELD] = mine
    out: dict[str, list[float]] = {f"{v}_{k}": [] for v in names for k in ("cpu_s", "thread_s", "wall_s")}
    try:
        for r in range(rounds):
            for i in range(len(names)):
                # Rotating, and reversed every other round: each layout follows each of its two
                # neighbours in the cycle equally often (a fixed cycle would put jitwatch_held
                # after jitwatch in every round, jitwatch after noop2: a first-order carry-over).
                v = names[(r + i) % len(names)] if r % 2 == 0 else names[(r - i) % len(names)]
                for (h, a), fn in zip(slots, layouts[v], strict=True):
                    setattr(h, a, fn)
                if interval is not None:
                    _hold_writer(sink, v == HELD, interval)
                t0 = time.thread_time()
                c, w = burst()
                out[f"{v}_thread_s"].append((time.thread_time() - t0) / n)
                out[f"{v}_cpu_s"].append(c / n)
                out[f"{v}_wall_s"].append(w / n)
    finally:
        for (h, a), fn in zip(slots, mine, strict=True):
            setattr(h, a, fn)
        if interval is not None:
            _hold_writer(sink, False, interval)
    out["jitwatch_slots"] = [float(sum(fn is not None for fn in mine))]
    return out


def _in_process_summary(results: list[dict[str, list[float]]]) -> dict[str, Any]:
    """Round-paired differences, in µs per compile, over every round of every process:
    ``added_cpu`` (jitwatch - none, all threads), the ``noop``/``noop2`` floors (minus none), the
    ratio of their medians, and ``compiling_thread_own`` — the compiling thread's CPU with
    jitwatch minus with no-ops in the same slots (two outside ``error`` mode, else three)."""
    rows = [r for r in results if r and r.get("none_cpu_s")]
    if not rows:
        return {}

    def diffs(a: str, b: str, k: str) -> list[float]:
        return [(x - y) * 1e6 for r in rows for x, y in zip(r[f"{a}_{k}"], r[f"{b}_{k}"], strict=True)]

    floor_of = TWO_SLOT if all(r["jitwatch_slots"][0] == 2 for r in rows) else "noop"
    out: dict[str, Any] = {"rounds": sum(len(r["none_cpu_s"]) for r in rows), "processes": len(rows)}
    for k, name in (("cpu_s", "cpu"), ("wall_s", "wall")):
        added, floor, floor2 = diffs("jitwatch", "none", k), diffs("noop", "none", k), diffs(TWO_SLOT, "none", k)
        out[f"added_{name}_us"] = summary(added)
        out[f"noop_floor_{name}_us"] = summary(floor)
        out[f"noop2_floor_{name}_us"] = summary(floor2)
        f, f2 = statistics.median(floor), statistics.median(floor2)
        out[f"added_{name}_ratio_to_floor"] = statistics.median(added) / f if f > 0 else None
        out[f"added_{name}_ratio_to_floor_ci90"] = _ratio_ci90(added, floor)
        out[f"added_{name}_ratio_to_two_slot_floor"] = statistics.median(added) / f2 if f2 > 0 else None
    out["compiling_thread_own_us"] = summary(diffs("jitwatch", floor_of, "thread_s"))
    out["compiling_thread_own_floor"] = floor_of
    out["compiling_thread_vs_none_us"] = summary(diffs("jitwatch", "none", "thread_s"))
    if all(r.get(f"{HELD}_cpu_s") for r in rows):
        out["writer_held"] = {
            "compiling_thread_own_us": summary(diffs(HELD, floor_of, "thread_s")),
            "added_cpu_us": summary(diffs(HELD, "none", "cpu_s")),
            "added_wall_us": summary(diffs(HELD, "none", "wall_s")),
        }
    # Interference from other tenants only ever adds time: the low tail of each layout is its
    # quietest bursts, and the difference of the layouts' p10s is a second, noise-resistant estimate.
    out["layouts_us"] = {
        v: {k: summary([x * 1e6 for r in rows for x in r[f"{v}_{k}_s"]]) for k in ("cpu", "thread")}
        for v in (*IN_PROCESS, HELD)
        if rows[0].get(f"{v}_cpu_s")
    }
    lay = out["layouts_us"]
    out["compiling_thread_own_p10_us"] = lay["jitwatch"]["thread"]["p10"] - lay[floor_of]["thread"]["p10"]
    out["added_cpu_p10_us"] = lay["jitwatch"]["cpu"]["p10"] - lay["none"]["cpu"]["p10"]
    out["noop_floor_cpu_p10_us"] = lay["noop"]["cpu"]["p10"] - lay["none"]["cpu"]["p10"]
    return out


def _ratio_ci90(added: list[float], floor: list[float], resamples: int = 2000) -> list[float] | None:
    """A 90 % bootstrap interval of ``median(added) / median(floor)``: the rounds (each a pair of
    differences measured together) resampled with replacement, ``resamples`` times, seeded, so a
    run's interval is reproducible from its rounds. ``None`` under 10 rounds or where a resample's
    floor is not positive in at least 95 % of them (the ratio is then not defined)."""
    import random

    n = len(added)
    if n < 10 or len(floor) != n:
        return None
    rng = random.Random(0)
    ratios: list[float] = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        f = statistics.median(floor[i] for i in idx)
        if f > 0:
            ratios.append(statistics.median(added[i] for i in idx) / f)
    if len(ratios) < 0.95 * resamples:
        return None
    ratios.sort()
    return [ratios[int(0.05 * len(ratios))], ratios[int(0.95 * len(ratios)) - 1]]


def _spawn(cfg: dict[str, Any], tmp: Path, cache_dir: Path) -> dict[str, Any]:
    tag = f"{cfg['variant']}-{cfg.get('round', 0)}"
    cfg_path, out_path, err_path = tmp / f"{tag}.json", tmp / f"{tag}.out.json", tmp / f"{tag}.err"
    cfg_path.write_text(json.dumps(cfg))
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache_dir)}
    with open(err_path, "w") as err:
        rc = subprocess.call([sys.executable, str(HERE), "--worker", str(cfg_path), str(out_path)], env=env, stderr=err)
    if rc != 0:
        raise RuntimeError(f"{tag} failed ({rc}): {err_path.read_text()[-3000:]}")
    return dict(json.loads(out_path.read_text()))


def bench_compiles(
    device: str,
    n: int,
    reps: int,
    rounds: int,
    tmp: Path,
    before: str | None,
    tight: int = 2000,
    two_slot_floor: bool = False,
    inproc_rounds: int = 16,
    no_launch: bool = False,
) -> dict[str, Any]:
    cache = tmp / "triton-cache"
    base = {"device": device, "n": n, "no_launch": no_launch}
    _spawn({**base, "variant": "none", "reps": 0, "round": -1}, tmp, cache)  # fill the disk cache
    variants = (*VARIANTS, BEFORE) if before else VARIANTS
    if two_slot_floor:
        variants = (*variants, TWO_SLOT)
    keys = ("cpu_s", "wall_s", "thread_s", "thread_mean_s", "thread_net_s", "tight_cpu_s", "writer_s", "build_s")
    keys = (*keys, "post_slot_s")
    per: dict[str, dict[str, list[float]]] = {v: {k: [] for k in keys} for v in variants}
    by_round: dict[str, list[float]] = {v: [] for v in variants}  # each process's median CPU per compile
    in_process: dict[str, list[dict[str, list[float]]]] = {v: [] for v in _measured(variants)}
    dropped = 0
    for r in range(rounds):
        order = variants if r % 2 == 0 else tuple(reversed(variants))
        for v in order:
            cfg: dict[str, Any] = {**base, "variant": v, "reps": reps, "round": r, "tight": tight}
            cfg["inproc_rounds"] = inproc_rounds
            cfg["journal_dir"] = str(tmp / f"journal-{v}-{r}")
            if v == BEFORE:
                cfg["tree"] = before
            res = _spawn(cfg, tmp, cache)
            for k in keys:
                per[v][k] += res.get(k, [])
            if res.get("cpu_s"):
                by_round[v].append(statistics.median(res["cpu_s"]))
            dropped += int(res.get("dropped") or 0)
            if v in in_process:
                in_process[v].append(res.get("in_process") or {})
    med = {v: {k: statistics.median(xs) * 1e6 for k, xs in d.items() if xs} for v, d in per.items()}
    out: dict[str, Any] = {
        "launch": device == "cuda" and not no_launch,
        "compiles_per_burst": n,
        "bursts_per_variant": rounds * reps,
        "per_compile_us": {v: {k: summary(xs, 1e6) for k, xs in d.items() if xs} for v, d in per.items()},
        "median_us": med,
        "dropped": dropped,
    }
    none, noop = med["none"], med["noop"]
    for k in ("cpu_s", "wall_s"):
        floor = noop[k] - none[k]
        out[f"added_{k[:-2]}_us"] = {"noop_floor": floor}
        for v in _measured(variants):
            added = med[v][k] - none[k]
            out[f"added_{k[:-2]}_us"][v] = added
            out[f"added_{k[:-2]}_ratio_to_floor" + ("" if v == "jitwatch" else "_before")] = (
                added / floor if floor > 0 else None
            )
            if TWO_SLOT in med:
                floor2 = med[TWO_SLOT][k] - none[k]
                out[f"added_{k[:-2]}_us"]["noop2_floor"] = floor2
                out[f"added_{k[:-2]}_ratio_to_two_slot_floor" + ("" if v == "jitwatch" else "_before")] = (
                    added / floor2 if floor2 > 0 else None
                )
    out["paired_by_round"] = _paired(by_round, variants)
    out["in_process"] = _in_process_summary(in_process["jitwatch"])
    if before:
        out["in_process_before"] = _in_process_summary(in_process[BEFORE])
    out["compiling_thread_us"] = med["jitwatch"].get("thread_s")
    out["compiling_thread_mean_us"] = med["jitwatch"].get("thread_mean_s")
    out["compiling_thread_net_us"] = med["jitwatch"].get("thread_net_s")
    out["compiling_thread_tight_cpu_us"] = med["jitwatch"].get("tight_cpu_s")
    out["writer_thread_us"] = med["jitwatch"].get("writer_s")
    out["writer_event_build_us"] = med["jitwatch"].get("build_s")
    if per["jitwatch"]["post_slot_s"]:
        out["post_slot_price_us"] = summary(per["jitwatch"]["post_slot_s"], 1e6)
    if before:
        out["writer_thread_us_before"] = med[BEFORE].get("writer_s")
        out["writer_event_build_us_before"] = med[BEFORE].get("build_s")
        out["compiling_thread_us_before"] = med[BEFORE].get("thread_s")
        out["compiling_thread_mean_us_before"] = med[BEFORE].get("thread_mean_s")
        out["compiling_thread_net_us_before"] = med[BEFORE].get("thread_net_s")
        out["compiling_thread_tight_cpu_us_before"] = med[BEFORE].get("tight_cpu_s")
    return out


def _paired(by_round: dict[str, list[float]], variants: tuple[str, ...]) -> dict[str, Any]:
    """Added CPU paired round by round: in each round every variant ran one process back to back,
    so ``variant_r - none_r`` and ``noop_r - none_r`` share that round's machine state (a host
    whose speed drifts between rounds, as the H200's did: ``none`` per compile ranged 1.1-1.8 ms
    across processes). Medians over rounds, in µs per compile, and each round's ratio."""
    none, noop = by_round["none"], by_round["noop"]
    rounds = min(len(xs) for xs in by_round.values())
    if rounds == 0:
        return {}
    floors = [(noop[r] - none[r]) * 1e6 for r in range(rounds)]
    out: dict[str, Any] = {"rounds": rounds, "noop_floor_us": statistics.median(floors), "floor_by_round_us": floors}
    floors2 = [(by_round[TWO_SLOT][r] - none[r]) * 1e6 for r in range(rounds)] if TWO_SLOT in by_round else []
    if floors2:
        out["noop2_floor_us"], out["noop2_floor_by_round_us"] = statistics.median(floors2), floors2
    for v in _measured(variants):
        added = [(by_round[v][r] - none[r]) * 1e6 for r in range(rounds)]
        floor = statistics.median(floors)
        out[f"{v}_added_us"] = statistics.median(added)
        out[f"{v}_ratio_to_floor"] = statistics.median(added) / floor if floor > 0 else None
        out[f"{v}_ratio_by_round"] = [a / f if f > 0 else None for a, f in zip(added, floors, strict=True)]
        if floors2:
            floor2 = statistics.median(floors2)
            out[f"{v}_ratio_to_two_slot_floor"] = statistics.median(added) / floor2 if floor2 > 0 else None
            out[f"{v}_ratio_to_two_slot_floor_by_round"] = [
                a / f if f > 0 else None for a, f in zip(added, floors2, strict=True)
            ]
    return out


def _measured(variants: tuple[str, ...]) -> tuple[str, ...]:
    """The jitwatch variants (``jitwatch``, ``jitwatch_before``): not a baseline or a floor."""
    return tuple(v for v in variants if v not in ("none", "noop", TWO_SLOT))


# --------------------------------------------------------------------------- journal
def _template_event() -> Any:
    """A compile event shaped like a real Triton 3.x disk-hit compile of a small kernel in warmup
    (where nearly every journaled compile is): the attrs jitwatch's Triton backend writes, with
    ``cache_key`` (Triton's ``metadata["hash"]``) and ``cache`` as the compilation listener gives
    them. A serving compile also carries its reason and fixes (~600 more characters); those are
    not in this template."""
    from jitwatch.core.events import Event, EventKind, Phase

    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    spec = json.dumps(
        {
            "name": "bench_add_kernel",
            "signature": sig,
            "constant_keys": [[4]],
            "constant_vals": [256],
            "attrs_keys": [[0], [1], [2]],
            "attrs_vals": [[["tt.divisibility", 16]], [["tt.divisibility", 16]], [["tt.divisibility", 16]]],
            "options": {
                "num_warps": 4,
                "num_ctas": 1,
                "num_stages": 3,
                "enable_fp_fusion": True,
                "launch_cooperative_grid": False,
                "supported_fp8_dtypes": ["fp8e4b15", "fp8e4nv", "fp8e5"],
                "deprecated_fp8_dot_operand_dtypes": [],
                "default_dot_input_precision": "tf32",
                "allowed_dot_input_precisions": ["tf32", "tf32x3", "ieee"],
                "max_num_imprecise_acc_default": 0,
                "extern_libs": [["libdevice", "/opt/venv/lib/python3.12/site-packages/triton/libdevice.10.bc"]],
                "debug": False,
                "backend_name": "cuda",
                "sanitize_overflow": True,
                "arch": "sm90",
            },
            "key": "[('*fp32', 'D'), ('*fp32', 'D'), ('*fp32', 'D'), ('i32', 'D'), 256]{'num_warps': 4}",
        }
    )
    attrs = {
        "module": "benchmarks._kernels",
        "stages": {"ir_initialization": 0.0002, "ttir": 0.0, "ttgir": 0.0, "llir": 0.0, "ptx": 0.0, "cubin": 0.0},
        "signature": sig,
        "constexprs": {"BLOCK": 256},
        "declared_constexprs": ["BLOCK"],
        "options": {"num_warps": 4, "num_ctas": 1, "num_stages": 3, "enable_fp_fusion": True},
        "is_warmup_call": False,
        "specialization_data": spec,
        "source_hash": "9f2b6c1e0a4d7f3b8e5c2a1d6f9b0e3c7a4d1f8b2e5c9a0d3f6b1e4c7a2d5f8b",
        "cache_key": _cache_key(256),
        "cache": "local",
        "rank": 0,
        "tp_rank": 0,
        "pp_rank": 0,
        "dp_rank": 0,
    }
    return Event(
        kind=EventKind.COMPILE,
        ts=time.time(),
        start_ts=time.time() - 0.0015,
        duration_s=0.0015,
        phase=Phase.WARMUP,
        backend="triton",
        kernel="bench_add_kernel",
        key="[('*fp32', 'D'), ('*fp32', 'D'), ('*fp32', 'D'), ('i32', 'D'), 256]{'num_warps': 4, 'debug': False}",
        cache_hit=True,
        attrs=attrs,
    )


def _cache_key(spec: int) -> str:
    """Specialization ``spec``'s Triton cache hash in the template (64 hex digits, one per spec)."""
    return hashlib.sha256(f"bench {spec}".encode()).hexdigest()


def _db_bytes(directory: Path) -> int:
    conn = sqlite3.connect(directory / "journal.db")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)
    finally:
        conn.close()


def _journal_events(template: Any, n: int, per_spec: int, kernels: int, rank_of: Any, spec_of: Any) -> list[Any]:
    """``n`` compile events from ``template``: event ``i`` of rank ``rank_of(i)`` and
    specialization ``spec_of(i)``, kernel ``bench_kernel_<spec % kernels>``, 1 ms apart."""
    evs = []
    for i in range(n):
        spec, rank = spec_of(i), rank_of(i)
        attrs = dict(template.attrs)
        attrs["rank"] = attrs["tp_rank"] = rank
        attrs["constexprs"] = {"BLOCK": spec}
        attrs["specialization_data"] = template.attrs["specialization_data"].replace("256", str(spec))
        attrs["cache_key"] = _cache_key(spec)
        evs.append(
            template.model_copy(
                update={
                    "kernel": f"bench_kernel_{spec % kernels}",
                    "rank": rank,
                    "key": template.key.replace("256", str(spec)),
                    "ts": template.ts + i * 1e-3,
                    "attrs": attrs,
                }
            )
        )
    return evs


JOURNAL_CASES = ("fleet", "fleet_per_rank", "fleet_per_rank_home", "all_distinct")
"""The journal section's layouts (see :func:`bench_journal`)."""


def bench_journal(events: int, ranks: int, kernels: int, tmp: Path) -> dict[str, Any]:
    """Writer-thread CPU, page faults and bytes per compile event for three layouts of the same
    kind of events (batches of :data:`BATCH`):

    * ``fleet`` (mixed ranks): one journal connection writes every event; each specialization
      compiles on ``ranks`` ranks and its ``ranks`` events sit next to each other in one batch, so
      a batch mixes every rank (and each event is its own (kernel, rank) aggregate row);
    * ``fleet_per_rank`` (what a fleet of workers does): ``ranks`` journal connections to one file,
      one per rank as each worker process has its own ``JournalWriter``; each writes only its own
      rank's events, ``events / ranks`` of them, one per specialization, and the writers' batches
      interleave (batch ``b`` of every rank, the rank that writes first rotating), so the first
      writer of a batch stores its specializations and the others find them stored;
    * ``fleet_per_rank_home``: the same with Triton installed under the home directory (the
      libdevice path in every ``specialization_data`` under ``$HOME``, as in a venv there), so
      every new specialization is redacted before it is stored and identified;
    * ``all_distinct``: one connection, every event its own specialization (the worst case).
    """
    from jitwatch.store.journal import Journal

    plain = _template_event()
    home_attrs = dict(plain.attrs)
    home_attrs["specialization_data"] = plain.attrs["specialization_data"].replace("/opt/venv", f"{Path.home()}/venv")
    at_home = plain.model_copy(update={"attrs": home_attrs})
    out: dict[str, Any] = {"events": events, "batch": BATCH}
    for case in JOURNAL_CASES:
        template = at_home if case.endswith("_home") else plain
        d = tmp / f"journal-bench-{case}"
        shutil.rmtree(d, ignore_errors=True)
        per_rank_case = case.startswith("fleet_per_rank")
        writers = [Journal(d) for _ in range(ranks if per_rank_case else 1)]
        try:
            writers[0].write([])
            base = _db_bytes(d)
            plan: list[tuple[Any, list[Any]]] = []  # (journal, batch) in write order
            if per_rank_case:
                per_rank = events // ranks
                evs = [
                    _journal_events(template, per_rank, 1, kernels, lambda i, r=r: r, lambda i: i) for r in range(ranks)
                ]
                for b, k in enumerate(range(0, per_rank, BATCH)):
                    for r in [(b + i) % ranks for i in range(ranks)]:
                        plan.append((writers[r], evs[r][k : k + BATCH]))
                per_spec = ranks
            else:
                per_spec = ranks if case == "fleet" else 1
                flat = _journal_events(
                    template, events, per_spec, kernels, lambda i, n=per_spec: i % n, lambda i, n=per_spec: i // n
                )
                plan = [(writers[0], flat[k : k + BATCH]) for k in range(0, events, BATCH)]
            cpu: list[float] = []
            faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for journal, batch in plan:
                c0 = time.thread_time()
                journal.write(batch)
                cpu.append((time.thread_time() - c0) / len(batch))
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
        finally:
            for journal in writers:
                journal.close()
        written = sum(len(batch) for _, batch in plan)
        total = _db_bytes(d) - base
        out[case] = {
            "events_per_specialization": per_spec,
            "writers": len(writers),
            "cpu_us_per_event": summary(cpu, 1e6),
            "cpu_us_per_batch_event": [c * 1e6 for c in cpu],
            "bytes_per_event": total / written,
            "minor_page_faults_per_event": faults / written,
        }
    return out


def merge_journal_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One journal result from several processes (rounds) of one tree: CPU per event summarised
    over every batch of every round, the median of each round's median kept per round; bytes
    from the first round (they are the same every round: same events, same schema)."""
    out: dict[str, Any] = {k: v for k, v in rounds[0].items() if k not in JOURNAL_CASES}
    out["rounds"] = len(rounds)
    for case in JOURNAL_CASES:
        if case not in rounds[0]:
            continue
        per = [r[case] for r in rounds]
        batches = [c for r in per for c in r.get("cpu_us_per_batch_event", [])]
        out[case] = {
            "events_per_specialization": per[0]["events_per_specialization"],
            "writers": per[0].get("writers", 1),
            "cpu_us_per_event": summary(batches) if batches else per[0]["cpu_us_per_event"],
            "cpu_us_round_medians": [r["cpu_us_per_event"]["median"] for r in per],
            "bytes_per_event": per[0]["bytes_per_event"],
            "minor_page_faults_per_event": statistics.median(r.get("minor_page_faults_per_event", 0.0) for r in per),
        }
    refs = [r["host_reference"] for r in rounds if "host_reference" in r]
    if refs:  # bench_host_probe.reference() per round: how fast the host ran while that round did
        out["host_reference_rounds"] = {k: [ref[k] for ref in refs] for k in refs[0]}
    return out


# --------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="result JSON path")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--compiles", type=int, default=48, help="distinct disk-hit compiles per burst (≤ 72)")
    ap.add_argument("--reps", type=int, default=4, help="timed bursts per process")
    ap.add_argument("--rounds", type=int, default=3, help="processes per variant, interleaved")
    ap.add_argument("--journal-events", type=int, default=8192)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--tight", type=int, default=2000, help="back-to-back hook calls per rep (tight loop)")
    ap.add_argument(
        "--inproc-rounds",
        type=int,
        default=16,
        help="rounds of the hook layouts alternated inside each jitwatch process",
    )
    ap.add_argument(
        "--journal-rounds", type=int, default=3, help="journal processes per tree, interleaved (before/after)"
    )
    ap.add_argument("--smoke", action="store_true", help="seconds-long run for CI (figures meaningless)")
    ap.add_argument("--before", help="an older jitwatch source tree to run side by side (e.g. a git archive)")
    ap.add_argument("--sections", default="compile,journal", help="which parts to run (compile, journal)")
    ap.add_argument(
        "--two-slot-floor",
        action="store_true",
        help="also measure the floor with no-op callables in jit_cache_hook and the listener only",
    )
    ap.add_argument(
        "--no-launch",
        action="store_true",
        help="on cuda, compile with kernel.warmup (Triton's CUDA backend, no launch, no module load)",
    )
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        cfg = json.loads(Path(args.worker[0]).read_text())
        Path(args.worker[1]).write_text(json.dumps(_worker(cfg)))
        return
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.smoke:
        args.compiles, args.reps, args.rounds, args.journal_events, args.journal_rounds = 3, 1, 1, 512, 1
        args.inproc_rounds = 2
    tmp = scratch_dir("jw-bench-floor-")
    try:
        sections = set(args.sections.split(","))
        result: dict[str, Any] = {"device": device, "smoke": args.smoke, "before": bool(args.before)}
        if "compile" in sections:
            from bench_host_probe import reference

            start = reference()
            result["compile"] = bench_compiles(
                device,
                args.compiles,
                args.reps,
                args.rounds,
                tmp,
                args.before,
                50 if args.smoke else args.tight,
                args.two_slot_floor,
                args.inproc_rounds,
                args.no_launch,
            )
            result["compile"]["host_reference"] = {"start": start, "end": reference()}
        if "journal" in sections:
            trees = {"journal": None, "journal_before": args.before} if args.before else {"journal": None}
            per_tree: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
            for r in range(args.journal_rounds):  # one process per tree and round, order alternating
                for name in trees if r % 2 == 0 else tuple(reversed(trees)):
                    cfg = {"kind": "journal", "variant": name, "events": args.journal_events, "ranks": args.ranks}
                    cfg.update(tmp=str(tmp / f"{name}-{r}"), tree=trees[name], round=r)
                    (tmp / f"{name}-{r}").mkdir()
                    per_tree[name].append(_spawn(cfg, tmp, tmp / "unused-cache"))
            for name, rounds in per_tree.items():
                result[name] = merge_journal_rounds(rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    doc = write_result(args.out, "cost_floor", result)
    _print(doc)


def _print(doc: dict[str, Any]) -> None:
    c = doc.get("compile")
    if c:
        med = c["median_us"]
        print(f"disk-hit compiles: {c['compiles_per_burst']} per burst, {c['bursts_per_variant']} bursts per variant")
        for v, m in med.items():
            print(f"  {v:15s} CPU {m['cpu_s']:8.1f} us   wall {m['wall_s']:8.1f} us per compile")
        for k in ("cpu", "wall"):
            a = dict(c[f"added_{k}_us"])
            floor = a.pop("noop_floor")
            floor2 = a.pop("noop2_floor", None)
            if floor2 is not None:
                print(f"  added {k}: two-slot noop floor {floor2:.1f} us")
            shown = ", ".join(f"{v} {x:.1f} us ({x / floor:.2f}x)" for v, x in a.items()) if floor > 0 else str(a)
            print(f"  added {k}: noop floor {floor:.1f} us; {shown}")
        pr = c.get("paired_by_round") or {}
        if pr:
            shown = ", ".join(
                f"{v} {pr[f'{v}_added_us']:.1f} us ({pr[f'{v}_ratio_to_floor'] or float('nan'):.2f}x)"
                for v in med
                if f"{v}_added_us" in pr
            )
            print(
                f"  added cpu, paired by round ({pr['rounds']} rounds): "
                f"noop floor {pr['noop_floor_us']:.1f} us; {shown}"
            )
            if pr.get("noop2_floor_us") is not None:
                shown2 = ", ".join(
                    f"{v} {pr[f'{v}_ratio_to_two_slot_floor'] or float('nan'):.2f}x"
                    for v in med
                    if f"{v}_ratio_to_two_slot_floor" in pr
                )
                print(f"  two-slot noop floor, paired: {pr['noop2_floor_us']:.1f} us; {shown2}")
        print(
            f"  compiling thread inside jitwatch: {c['compiling_thread_us']:.1f} us per compile (median calls)", end=""
        )
        print(f", {c['compiling_thread_mean_us']:.1f} us (mean)", end="")
        if c.get("compiling_thread_us_before") is not None:
            print(
                f"; before: {c['compiling_thread_us_before']:.1f} / {c['compiling_thread_mean_us_before']:.1f} us",
                end="",
            )
        print(f"; dropped {c['dropped']}")
        if c.get("compiling_thread_net_us") is not None:
            print(
                f"  compiling thread, net of a timed no-op in the same slots (alternated bursts): "
                f"{c['compiling_thread_net_us']:.1f} us per compile",
                end="",
            )
            if c.get("compiling_thread_net_us_before") is not None:
                print(f"; before: {c['compiling_thread_net_us_before']:.1f} us", end="")
            print()
        for tag in ("in_process", "in_process_before"):
            ip = c.get(tag)
            if not ip:
                continue
            a, f, f2 = ip["added_cpu_us"], ip["noop_floor_cpu_us"], ip["noop2_floor_cpu_us"]
            r1, r2 = ip["added_cpu_ratio_to_floor"], ip["added_cpu_ratio_to_two_slot_floor"]
            own = ip["compiling_thread_own_us"]
            print(
                f"  {tag} ({ip['rounds']} rounds in {ip['processes']} processes, round-paired medians): "
                f"added CPU {a['median']:.1f} us; floors noop {f['median']:.1f} / noop2 {f2['median']:.1f} us; "
                f"ratio {r1 if r1 is None else round(r1, 2)}x (90% bootstrap "
                f"{[round(x, 2) for x in ip.get('added_cpu_ratio_to_floor_ci90') or []]}) / "
                f"{r2 if r2 is None else round(r2, 2)}x; "
                f"compiling thread vs {ip['compiling_thread_own_floor']} {own['median']:.1f} us "
                f"(p10 {own['p10']:.1f}, p90 {own['p90']:.1f}); difference of the layouts' p10s: "
                f"compiling thread {ip['compiling_thread_own_p10_us']:.1f} us, added CPU {ip['added_cpu_p10_us']:.1f} "
                f"us vs noop floor {ip['noop_floor_cpu_p10_us']:.1f} us"
            )
            held = ip.get("writer_held")
            if held:
                print(
                    f"    writer held until flush(): compiling thread vs {ip['compiling_thread_own_floor']} "
                    f"{held['compiling_thread_own_us']['median']:.1f} us, "
                    f"added CPU {held['added_cpu_us']['median']:.1f} us"
                )
        price = c.get("post_slot_price_us")
        if price:
            print(
                f"  a no-op in the empty jit_post_compile_hook slot, paired bursts in the jitwatch process: "
                f"+{price['median']:.1f} us CPU per compile (p10 {price['p10']:.1f}, p90 {price['p90']:.1f})"
            )
        tight = c.get("compiling_thread_tight_cpu_us")
        if tight is not None:
            print(f"  the three hooks back to back (compiling thread CPU): {tight:.1f} us per compile", end="")
            if c.get("compiling_thread_tight_cpu_us_before") is not None:
                print(f"; before: {c['compiling_thread_tight_cpu_us_before']:.1f} us", end="")
            print()
        ref = c.get("host_reference")
        if ref:
            a, b = ref["start"], ref["end"]
            print(
                f"  the host (bench_host_probe.reference), at the start / end: sqlite row {a['sqlite_row_us']:.2f} / "
                f"{b['sqlite_row_us']:.2f} us, python loop {a['python_loop_us'] * 1000:.0f} / "
                f"{b['python_loop_us'] * 1000:.0f} ns"
            )
        if c.get("writer_thread_us") is not None:
            print(
                f"  journal writer's thread: {c['writer_thread_us']:.1f} us per compile, of which building the events "
                f"{c['writer_event_build_us']:.1f} us",
                end="",
            )
            if c.get("writer_thread_us_before") is not None:
                print(
                    f"; before: {c['writer_thread_us_before']:.1f} / {c['writer_event_build_us_before']:.1f} us", end=""
                )
            print()
    for name in ("journal", "journal_before"):
        j = doc.get(name)
        for case in [c for c in JOURNAL_CASES if c in j] if j else ():
            r = j[case]
            rounds = ", ".join(f"{m:.1f}" for m in r.get("cpu_us_round_medians", []))
            print(
                f"{name} ({case}, {r['events_per_specialization']} events/specialization): "
                f"{r['cpu_us_per_event']['median']:.1f} us CPU and {r['bytes_per_event']:.0f} B per event, "
                f"{r.get('minor_page_faults_per_event', 0):.2f} minor page faults per event"
                + (f" (round medians {rounds})" if rounds else "")
            )
        refs = (j or {}).get("host_reference_rounds")
        if refs:
            print(
                f"{name}: the host per round, sqlite row "
                + ", ".join(f"{x:.2f}" for x in refs["sqlite_row_us"])
                + " us; python loop "
                + ", ".join(f"{x * 1000:.0f}" for x in refs["python_loop_us"])
                + " ns (bench_host_probe.reference)"
            )


if __name__ == "__main__":
    main()
