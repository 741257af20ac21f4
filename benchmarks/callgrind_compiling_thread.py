"""Instructions jitwatch executes on the compiling thread per Triton compile, under callgrind.

Timings on a shared 2-core VM drift by 1.4x within an hour; instruction counts do not. This
script runs ``valgrind --tool=callgrind`` on itself, one process per (tree, layout, case), and
counts only what the main (compiling) thread executes inside one C function that wraps the
measured loop (``functools.reduce``, which neither Triton nor jitwatch calls there:
``--collect-atstart=no --toggle-collect=functools_reduce``), so imports, set-up and the journal
writer's thread are not counted. Three cases, each per compile:

* ``tight``: jitwatch's installed callables called back to back ``--n`` times with the keywords
  Triton passed them in one real disk-cache-hit compile (``bench_cost_floor.py``'s tight loop);
* ``compile`` (``--cases tight,compile``): ``--bursts`` bursts of real compile-only
  disk-cache-hit compiles (``_kernels.compile_plan(--compiles)``, in-memory caches cleared before
  each burst). Not a usable measure of jitwatch's part: Triton's own ~4.4M instructions per
  compile differ from process to process by more than jitwatch's ~18k (``--opcodes`` counts
  jitwatch's bytecodes in real compiles instead);
* ``hooks`` (``--cases hooks``): the same real compiles, counting only what runs inside the hook
  slots: each callable sits behind a forwarding callable written in C (:data:`_SHIM`, built here
  with ``cc`` and Python's headers), and ``--toggle-collect=jw_shim_call`` counts from the call
  into the hook to its return. No Python frame is added (the stack the writer thread walks for a
  compile's ``_do_compile`` frame is as without the shim), so this is jitwatch's work in the place
  it runs, between Triton's stages.

``--cache-sim`` adds callgrind's cache simulation (``--cache-sim=yes``: L1 instruction and data
caches and the last level, sized as this host's): misses per compile by kind (``I1mr``, ``D1mr``,
``D1mw``, ``ILmr``, ``DLmr``, ``DLmw``). With ``hooks`` it says how much of jitwatch's code and
data a real compile finds outside L1 — what ``bench_cost_floor.py``'s real-compile figure pays
beyond the tight loop, once Triton's own work between the hooks has evicted L2 as well.

Layouts: ``jitwatch`` (``create_monitor(mode="warn")``, phase ``serving``, as in
``bench_cost_floor.py``) and ``noop`` (no-op callables in the slots jitwatch holds). jitwatch's
part is ``jitwatch - noop`` of the same tree and case. ``--before DIR`` (a ``git archive <commit>
jitwatch`` tree) adds that tree's ``jitwatch`` layout. The journal writer is held (``interval_s``
raised) while the loop runs; it drains at the ``flush()`` after it, outside the count.

Run: ``python benchmarks/callgrind_compiling_thread.py --before /tmp/before --out r.json``
(a few minutes: torch and Triton import under callgrind); ``--cases tight,hooks --cache-sim`` for
the misses. ``--before`` also takes a copy of this tree with one part of the hooks changed (an
ablation: docs/benchmarks.md section 9). Needs valgrind.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def _inner(cfg: dict[str, Any]) -> None:
    """The process callgrind runs: set up one layout, then the counted loop inside ``reduce``."""
    sys.path.insert(0, str(HERE.parent))
    import _common  # noqa: F401 - sys.path for this checkout, environment defaults

    if cfg.get("tree"):
        sys.path.insert(0, cfg["tree"])  # ahead of this checkout
    from jitwatch.backends.triton.compile_only import activate

    activate()
    import _kernels

    plan = _kernels.compile_plan(cfg["compiles"])
    run = _kernels.make_launcher("cpu")
    slots = _kernels.hook_slots()
    mon = None
    import dataclasses
    import logging

    from jitwatch import WorkerIdentity, create_monitor
    from jitwatch.config import Settings

    logging.getLogger("jitwatch").setLevel(logging.ERROR)
    settings = dataclasses.replace(Settings.from_env(), journal_dir=Path(cfg["journal_dir"]))
    mon = create_monitor(settings, mode="warn", identity=WorkerIdentity(rank=0), tracer_provider=False)
    mon.install()
    mon.begin_warmup()
    mon.activate()
    mine = [getattr(h, a) for h, a in slots]

    def burst() -> None:
        _kernels.clear_memory_caches()
        for name, block, warps in plan:
            run(name, block, warps, False)

    _, seen = _kernels.hook_keywords(burst)  # the disk cache filled, Python's paths warm
    burst()
    mon.flush()

    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    if cfg["layout"] == "noop":
        hooks = [noop if fn is not None else None for fn in mine]
        for (h, a), fn in zip(slots, hooks, strict=True):
            setattr(h, a, fn)
    else:
        hooks = mine
    pre, listener, post = hooks
    kp, kl, kq = (k or {} for k in seen)
    if post is None:  # two slots: the listener ends the compile
        post, kq = (lambda **kw: None), {}
    sink = mon.sink
    if cfg.get("helper"):  # instrument from here on only: the imports above ran at valgrind's plain speed
        import ctypes

        ctypes.CDLL(cfg["helper"]).jw_instrument(1)
    import gc

    gc.collect()
    gc.disable()  # collections start when any thread's allocations cross a threshold: not deterministic
    sink.interval_s = 1e6  # held: the writer wakes at the flush (or the high-water mark)
    sink._wake.set()
    time.sleep(0.05)
    if cfg.get("opcodes"):  # executed bytecodes per function in one call of the three hooks
        import collections

        counts: collections.Counter[str] = collections.Counter()

        def tracer(frame: Any, event: str, arg: Any) -> Any:
            frame.f_trace_opcodes = True
            if event == "opcode":
                counts[f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_qualname}"] += 1
            return tracer

        for _ in range(3):
            counts.clear()
            sys.settrace(tracer)
            pre(**kp)
            listener(**kl)
            post(**kq)
            sys.settrace(None)
            mon.flush()
        tight = dict(counts.most_common())
        counts.clear()  # and in real compiles: jitwatch's files only, per compile
        sys.settrace(tracer)
        burst()
        sys.settrace(None)
        mine = {k: v / len(plan) for k, v in counts.items() if k.split(":")[0] in _JITWATCH_FILES}
        Path(cfg["out"]).write_text(json.dumps({"tight": tight, "compile": mine}))
        mon.uninstall()
        return
    if cfg["case"] == "hooks":  # real compiles; only the calls into the hook slots are counted
        _shim_slots(slots, hooks, cfg["shim"])
        for _ in range(cfg["bursts"]):
            burst()
            mon.flush()
        per = cfg["bursts"] * len(plan)
    elif cfg["case"] == "tight":

        def step(acc: None, _: int) -> None:
            pre(**kp)
            listener(**kl)
            post(**kq)

        # flush every 200 calls (below the writer's high-water mark) outside the count
        for _ in range(cfg["n"] // 200):
            functools.reduce(step, range(200), None)
            mon.flush()
        per = cfg["n"] // 200 * 200
    else:

        def one(acc: None, _: int) -> None:
            burst()

        for _ in range(cfg["bursts"]):
            functools.reduce(one, range(1), None)
            mon.flush()
        per = cfg["bursts"] * len(plan)
    gc.enable()
    Path(cfg["out"]).write_text(json.dumps({"per": per, "dropped": getattr(sink, "dropped_total", None)}))
    mon.uninstall()


_SHIM = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
/* A callable that forwards every call to the callable it holds, from C: no Python frame between
   Triton's _call_hook and the hook (the stack the sweep walks is as without it), and
   callgrind's --toggle-collect=jw_shim_call counts the hook's work only. */
typedef struct { PyObject_HEAD PyObject *fn; } Shim;
__attribute__((noinline)) PyObject *jw_shim_call(PyObject *fn, PyObject *args, PyObject *kwargs) {
    return PyObject_Call(fn, args, kwargs);
}
static PyObject *shim_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    return jw_shim_call(((Shim *)self)->fn, args, kwargs);
}
static void shim_dealloc(PyObject *self) { Py_XDECREF(((Shim *)self)->fn); Py_TYPE(self)->tp_free(self); }
static PyObject *shim_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *fn;
    if (!PyArg_ParseTuple(args, "O", &fn)) return NULL;
    Shim *self = (Shim *)type->tp_alloc(type, 0);
    if (self) { Py_INCREF(fn); self->fn = fn; }
    return (PyObject *)self;
}
static PyTypeObject ShimType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jw_cg_shim.Shim", .tp_basicsize = sizeof(Shim), .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = shim_new, .tp_call = shim_call, .tp_dealloc = shim_dealloc,
};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "jw_cg_shim", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_jw_cg_shim(void) {
    if (PyType_Ready(&ShimType) < 0) return NULL;
    PyObject *m = PyModule_Create(&mod);
    if (m) { Py_INCREF(&ShimType); PyModule_AddObject(m, "Shim", (PyObject *)&ShimType); }
    return m;
}
"""


def _build_shim(tmp: Path) -> str | None:
    """Build :data:`_SHIM` as an extension module in ``tmp`` (``cc`` and Python's headers); the
    path of the module's directory, ``None`` where it cannot be built."""
    import sysconfig

    src, lib = tmp / "jw_cg_shim.c", tmp / f"jw_cg_shim{sysconfig.get_config_var('EXT_SUFFIX')}"
    src.write_text(_SHIM)
    cmd = ["cc", "-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}", "-o", str(lib), str(src)]
    try:
        rc = subprocess.call(cmd, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    return str(tmp) if rc == 0 else None


def _shim_slots(slots: list[tuple[Any, str]], hooks: list[Any], where: str) -> None:
    """Put each of ``hooks`` into its slot behind :data:`_SHIM`'s forwarding callable (imported
    from ``where``), so ``--toggle-collect=jw_shim_call`` counts the hooks' own work in real
    compiles and nothing of Triton's; the same shim wraps the no-ops."""
    sys.path.insert(0, where)
    from jw_cg_shim import Shim  # type: ignore[import-not-found]

    for (h, a), fn in zip(slots, hooks, strict=True):
        if fn is not None:
            setattr(h, a, Shim(fn))


_HELPER = r"""
#include <valgrind/callgrind.h>
void jw_instrument(int on) { if (on) { CALLGRIND_START_INSTRUMENTATION; } else { CALLGRIND_STOP_INSTRUMENTATION; } }
"""


def _helper(tmp: Path) -> str | None:
    """A tiny shared library whose ``jw_instrument(1)`` turns callgrind's instrumentation on
    (``callgrind.h``'s client request), built here with ``cc``; ``None`` without a compiler or the
    header (then everything is instrumented: the same counts, several times slower)."""
    src, lib = tmp / "jw_cg.c", tmp / "jw_cg.so"
    src.write_text(_HELPER)
    try:
        rc = subprocess.call(["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], stderr=subprocess.DEVNULL)
    except OSError:
        return None
    return str(lib) if rc == 0 else None


_JITWATCH_FILES = ("backend.py", "monitor.py", "writer.py", "hooks.py", "base.py")
"""Files whose bytecodes ``--opcodes`` counts in real compiles (Triton's own are not)."""

_TOTAL = re.compile(r"^(?:summary|totals):\s*([\d ]+)$", re.M)
_EVENTS = re.compile(r"^events:\s*(.+)$", re.M)


def _count(tmp: Path, cfg: dict[str, Any], tag: str) -> dict[str, Any]:
    cfg = {**cfg, "out": str(tmp / f"{tag}.json"), "journal_dir": str(tmp / f"journal-{tag}")}
    cfg_path = tmp / f"{tag}.cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    prefix = tmp / f"cg-{tag}"
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        f"--instr-atstart={'no' if cfg.get('helper') else 'yes'}",
        f"--toggle-collect={'jw_shim_call' if cfg['case'] == 'hooks' else 'functools_reduce'}",
        "--separate-threads=yes",
        *(["--cache-sim=yes"] if cfg.get("cache_sim") else []),
        f"--callgrind-out-file={prefix}.%p",
        sys.executable,
        str(HERE),
        "--inner",
        str(cfg_path),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0", "TRITON_CACHE_DIR": str(tmp / "triton-cache")}
    err = tmp / f"{tag}.err"
    with open(err, "w") as fh:
        rc = subprocess.call(cmd, env=env, stderr=fh, stdout=fh)
    if rc != 0:
        raise RuntimeError(f"{tag} failed ({rc}): {err.read_text()[-3000:]}")
    per_thread = {}
    events: dict[str, int] = {}
    for f in sorted(tmp.glob(f"cg-{tag}.*")):
        text = f.read_text(errors="replace")
        m, names = _TOTAL.search(text), _EVENTS.search(text)
        counts = [int(x) for x in m.group(1).split()] if m else [0]
        per_thread[f.name.rsplit("-", 1)[-1]] = counts[0]
        for name, count in zip(names.group(1).split() if names else ["Ir"], counts, strict=False):
            events[name] = events.get(name, 0) + count
    res = json.loads(Path(cfg["out"]).read_text())
    total = sum(per_thread.values())
    per_event = {name: count / res["per"] for name, count in events.items()}
    return {
        "instructions": total,
        "per_thread": per_thread,
        "per_compile": total / res["per"],
        "events": per_event,
        **res,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    ap.add_argument("--before", help="an older jitwatch tree (holding jitwatch/), counted in the same run")
    ap.add_argument("--cases", default="tight", help="tight and/or compile (see the docstring)")
    ap.add_argument("--n", type=int, default=2000, help="tight-loop calls of the three hooks")
    ap.add_argument("--compiles", type=int, default=24, help="compiles per burst (compile case)")
    ap.add_argument("--bursts", type=int, default=2)
    ap.add_argument("--out", help="JSON result file")
    ap.add_argument(
        "--cache-sim",
        action="store_true",
        help="also simulate the caches (callgrind --cache-sim=yes): L1 and last-level misses per compile",
    )
    ap.add_argument(
        "--opcodes", action="store_true", help="count executed bytecodes per function instead (no valgrind)"
    )
    args = ap.parse_args()
    if args.inner:
        _inner(json.loads(Path(args.inner).read_text()))
        return
    if args.opcodes:
        with tempfile.TemporaryDirectory(prefix="jw-op-") as d:
            for tree in (None, args.before):
                cfg = {"case": "tight", "opcodes": True, "compiles": 4, "tree": tree, "layout": "jitwatch"}
                cfg |= {"out": f"{d}/out.json", "journal_dir": f"{d}/j-{tree is None}"}
                Path(d, "cfg.json").write_text(json.dumps(cfg))
                env = {**os.environ, "TRITON_CACHE_DIR": f"{d}/tc"}
                subprocess.check_call([sys.executable, str(HERE), "--inner", f"{d}/cfg.json"], env=env)
                got = json.loads(Path(d, "out.json").read_text())
                for case, counts in got.items():
                    total = sum(counts.values())
                    print(f"{tree or 'this tree'} {case}: {total:.0f} bytecodes per compile", counts)
                if not args.before:
                    break
        return
    trees = {"after": None, **({"before": str(Path(args.before).resolve())} if args.before else {})}
    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "trees": trees}
    with tempfile.TemporaryDirectory(prefix="jw-cg-") as d:
        tmp = Path(d)
        helper = _helper(tmp)
        shim = _build_shim(tmp) if "hooks" in args.cases.split(",") else None
        if "hooks" in args.cases.split(",") and shim is None:
            raise SystemExit("the hooks case needs cc and Python's headers (its C shim)")
        for case in args.cases.split(","):
            base = {"case": case, "helper": helper, "n": args.n, "compiles": args.compiles, "bursts": args.bursts}
            base["cache_sim"], base["shim"] = args.cache_sim, shim
            got: dict[str, Any] = {}
            for tree, path in trees.items():
                for layout in ("jitwatch", "noop"):
                    if layout == "noop" and tree != "after":
                        continue  # the no-op floor does not depend on the tree (no jitwatch code runs)
                    tag = f"{case}-{tree}-{layout}"
                    got[tag] = _count(tmp, {**base, "tree": path, "layout": layout}, tag)
                    print(f"{tag}: {got[tag]['per_compile']:.0f} instructions per compile", flush=True)
                    if args.cache_sim:
                        print("   ", {k: round(v, 1) for k, v in got[tag]["events"].items()}, flush=True)
            floor = got[f"{case}-after-noop"]["per_compile"]
            for tree in trees:
                got[f"{case}-{tree}-net"] = got[f"{case}-{tree}-jitwatch"]["per_compile"] - floor
                if args.cache_sim:
                    mine, noop = got[f"{case}-{tree}-jitwatch"]["events"], got[f"{case}-after-noop"]["events"]
                    got[f"{case}-{tree}-net_events"] = net = {k: mine[k] - noop.get(k, 0.0) for k in mine}
                    print(f"{case} {tree}: jitwatch's part", {k: round(v, 1) for k, v in net.items()})
                print(f"{case} {tree}: jitwatch's part {got[f'{case}-{tree}-net']:.0f} instructions per compile")
            out[case] = got
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
