"""How fast this host runs the primitives jitwatch's journal and hooks are made of, next to its CPU
flags: a reference for comparing per-event and per-compile figures taken on different hosts.

Issue 15's absolute figures (µs per compile event, µs per compile on the compiling thread) move
with the host: fresh H200 hosts of one kind measured 1.5-1.9x apart. This script says, for the host
it runs on, what the CPU offers (``sha_ni``, ``avx2``, ``avx512f`` in ``/proc/cpuinfo``) and the
median µs of:

* ``sha256`` / ``blake2b``: one specialization identity digest's input (~1.5 KB, the
  ``specialization_data`` of ``bench_cost_floor.py``'s template event), :mod:`hashlib`;
* ``zlib_record``: one specialization record compressed as the journal stores it
  (:func:`jitwatch.store.specs.compress`);
* ``orjson_attrs``: one compile event's attrs encoded (:func:`orjson.dumps`, if installed);
* ``sqlite_row``: one 14-column event row inserted by a multi-row ``INSERT`` of 64 rows into an
  in-memory SQLite table with the journal's two event indexes, per row;
* ``python_loop``: a fixed pure-Python loop (dict and attribute work, no C calls), per iteration.

Nothing is asserted. Run: ``python benchmarks/bench_host_probe.py --out probe.json`` (a few seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

import _common
from _common import write_result

FLAGS = ("sha_ni", "avx2", "avx512f", "aes", "bmi2")
REFERENCE_ATTRS = (
    '{"stages":{"ir_initialization":0.0002,"ttir":0.0,"ttgir":0.0,"llir":0.0,"ptx":0.0,"cubin":0.0},'
    '"is_warmup_call":false,"rank":0,"tp_rank":0,"pp_rank":0,"dp_rank":0}'
)
"""A compile event's attrs as the journal stores them beside its specialization: the reference row's text."""


def _cpu() -> dict[str, Any]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    model, flags = None, set()
    for line in text.splitlines():
        if line.startswith("model name") and model is None:
            model = line.split(":", 1)[1].strip()
        elif line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    return {"model": model, **{f: f in flags for f in FLAGS}}


def _median_us(fn: Any, n: int, reps: int = 7) -> float:
    """Median over ``reps`` of the µs per call of ``fn(i)`` called ``n`` times (``time.perf_counter``)."""
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        out.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(out)


def sqlite_row_us(batches: int, attrs_json: str = REFERENCE_ATTRS) -> float:
    """µs per event row inserted by ``batches`` multi-row ``INSERT`` statements of 64 rows each (one
    transaction each) into an in-memory SQLite table shaped like the journal's ``events`` table,
    with its two indexes: the median over 7 reps."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(
        "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL, start_ts REAL, duration_s REAL,"
        " kind TEXT, rank INTEGER, pid INTEGER, host TEXT, phase TEXT, backend TEXT, kernel TEXT, key TEXT,"
        " cache_hit INTEGER, attrs TEXT, spec_id INTEGER)"
    )
    conn.execute("CREATE INDEX events_ts ON events(ts)")
    conn.execute("CREATE INDEX events_phase_kind ON events(phase, kind)")
    cols = "ts, start_ts, duration_s, kind, rank, pid, host, phase, backend, kernel, key, cache_hit, attrs, spec_id"
    sql = f"INSERT INTO events({cols}) VALUES " + ",".join(["(" + ",".join("?" * 14) + ")"] * 64)
    t = [time.time()]

    def rows(_: int) -> None:
        t[0] += 1.0
        params: list[Any] = []
        for k in range(64):
            params += [t[0] + k * 1e-3, t[0], 0.0015, "compile", 0, 1234, "host", "serving", "triton"]
            params += [f"kernel_{k}", None, 1, attrs_json, k]
        conn.execute("BEGIN")
        conn.execute(sql, params)
        conn.execute("COMMIT")

    try:
        return _median_us(rows, batches) / 64
    finally:
        conn.close()


def python_loop_us(n: int) -> float:
    """µs per iteration of a fixed pure-Python loop body (an attribute store and a dict lookup, no C
    call), ``n`` calls of 100 iterations: the median over 7 reps."""

    class Box:
        __slots__ = ("a", "b")

        def __init__(self) -> None:
            self.a, self.b = 0, 1

    box, table = Box(), {f"k{i}": i for i in range(64)}

    def loop(i: int) -> None:
        for j in range(100):
            box.a = box.b + table["k7"]
            box.b = j if j & 1 else box.a

    return _median_us(loop, n) / 100


def reference(batches: int = 8, attrs_json: str = REFERENCE_ATTRS) -> dict[str, float]:
    """This host's speed right now, in two figures that take ~0.1 s together: ``sqlite_row_us``
    (:func:`sqlite_row_us`) and ``python_loop_us`` (:func:`python_loop_us`). A host's speed drifts
    by more than jitwatch's changes within minutes (docs/benchmarks.md §9), so a benchmark records
    this next to each figure it takes."""
    return {"sqlite_row_us": sqlite_row_us(batches, attrs_json), "python_loop_us": python_loop_us(batches * 25)}


def probe(n: int) -> dict[str, Any]:
    from bench_cost_floor import _template_event

    from jitwatch.store import specs

    ev = _template_event()
    data = ev.attrs["specialization_data"]
    inputs = [(ev.key + data.replace("256", str(i))).encode() for i in range(n)]
    rest, spec = specs.split(dict(ev.attrs), ev.key)
    record = json.dumps({**(spec or {}), "specialization_data": data}, separators=(",", ":"))
    records = [record.replace("256", str(i)) for i in range(n)]
    out: dict[str, Any] = {"input_bytes": len(inputs[0]), "record_chars": len(record)}
    out["sha256_us"] = _median_us(lambda i: hashlib.sha256(inputs[i]).digest(), n)
    out["blake2b_us"] = _median_us(lambda i: hashlib.blake2b(inputs[i], digest_size=16).digest(), n)
    out["zlib_record_us"] = _median_us(lambda i: specs.compress(records[i]), n)
    try:
        import orjson

        attrs = dict(ev.attrs)
        out["orjson_attrs_us"] = _median_us(lambda i: orjson.dumps(attrs), n)
    except ImportError:
        out["orjson_attrs_us"] = None
    out.update(reference(max(1, n // 64), json.dumps(rest, separators=(",", ":"))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="result JSON path")
    ap.add_argument("-n", type=int, default=2000, help="calls per rep")
    args = ap.parse_args()
    result = {"cpu": _cpu(), **probe(args.n)}
    print(json.dumps(result, indent=1))
    write_result(args.out, "host_probe", result)


_ = _common
if __name__ == "__main__":
    main()
