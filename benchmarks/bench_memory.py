"""Benchmark 6: memory — worker RSS growth and sidecar RSS after 100k compile events, 10k kernels.

Worker side: a process installs a :class:`jitwatch.Monitor` and then drives *Triton's hook slots*
(``knobs.runtime.jit_cache_hook`` / ``knobs.compilation.listener``, which ends the compile in
``warn`` mode, and ``jit_post_compile_hook`` where jitwatch occupies it; Triton ≥ 3.4) the way Triton calls
them, ``--events`` times over ``--kernels`` distinct kernel names, every call with a distinct
specialization key. The keyword arguments are copied from a real compile captured in the same
process (compile-only driver), with the kernel object, name and key replaced. Real compiles are
not used for the 100k events: at 0.1-0.5 s each they would take hours; the monitor, writer and
journal code that runs is the same. The journal writer is flushed every 1000 events, as compile
spacing would allow in a real worker, so nothing is dropped. RSS (``/proc/self/status`` VmRSS) is
sampled every 10k events. Two processes: all events in phase ``warmup``, and all in ``serving``
(where the monitor also remembers each warned (kernel, key) pair and logs it once).

Sidecar side: the sidecar (uvicorn) is started on the serving run's journal (100k events, 10k
kernel names; the metric label cap folds kernels past 500 into ``_other``); RSS is read idle and
after 20 requests to each of ``/jit``, ``/jit/events?limit=1000`` and ``/metrics``.

Run: ``python benchmarks/bench_memory.py --out results/memory.json``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import rss_bytes, scratch_dir, write_result

HERE = Path(__file__).resolve()


def _capture_real_kwargs() -> dict[str, dict[str, Any]]:
    """Compile the slot-mapping kernel once (compile-only) and keep what Triton passed its hooks."""
    import torch
    import triton

    from jitwatch.backends.triton.compile_only import activate
    from jitwatch.kernels.slot_mapping import compute_slot_mapping, new_slot_mapping_kernel

    activate()
    seen: dict[str, dict[str, Any]] = {}
    rt, comp = triton.knobs.runtime, triton.knobs.compilation
    old = (rt.jit_cache_hook, rt.jit_post_compile_hook, comp.listener)

    def pre(*a: Any, **kw: Any) -> None:
        seen["pre"] = kw

    def post(*a: Any, **kw: Any) -> None:
        seen["post"] = kw

    def listener(*a: Any, **kw: Any) -> None:
        seen["listener"] = kw

    rt.jit_cache_hook, rt.jit_post_compile_hook, comp.listener = pre, post, listener
    try:
        table = torch.zeros(4, 8, dtype=torch.int32)
        compute_slot_mapping(
            torch.tensor([0, 3], dtype=torch.int32),
            torch.zeros(3, dtype=torch.int64),
            table,
            16,
            torch.empty(64, dtype=torch.int64),
            kernel=new_slot_mapping_kernel(),
        )
    finally:
        rt.jit_cache_hook, rt.jit_post_compile_hook, comp.listener = old
    return seen


def _worker(cfg: dict[str, Any]) -> dict[str, Any]:
    import triton

    from jitwatch import WorkerIdentity, create_monitor

    real = _capture_real_kwargs()
    rss0 = rss_bytes()
    mon = create_monitor(mode="warn", identity=WorkerIdentity(rank=0), tracer_provider=False).install()
    if cfg["phase"] == "serving":
        mon.activate()
    else:
        mon.begin_warmup()
    mon.flush()
    rss_installed = rss_bytes()
    rt = triton.knobs.runtime
    # warn mode: jitwatch's compilation listener ends each compile (the post-compile slot is empty)
    pre, listener, post = rt.jit_cache_hook, triton.knobs.compilation.listener, rt.jit_post_compile_hook
    signature = real["pre"]["compile"]["signature"]
    base_key = str(real["pre"]["key"])
    fns = []
    for k in range(cfg["kernels"]):
        fn = types.SimpleNamespace(
            name=f"bench_kernel_{k:05d}", module="bench.kernels", jit_function=types.SimpleNamespace()
        )
        fns.append(fn)
    samples = []
    t0 = time.perf_counter()
    for i in range(cfg["events"]):
        fn = fns[i % len(fns)]
        key = f"{base_key}#{i}"
        kw_pre = dict(real["pre"], fn=fn, key=key)
        pre(**kw_pre)
        listener(**dict(real["listener"], src=types.SimpleNamespace(signature=signature, fn=fn.jit_function)))
        if post is not None:
            post(**dict(real["post"], fn=fn, key=key))
        if (i + 1) % 1000 == 0:
            mon.flush(60)
        if (i + 1) % 10_000 == 0 or i + 1 == cfg["events"]:
            samples.append({"events": i + 1, "rss_mib": rss_bytes() / 2**20})
    elapsed = time.perf_counter() - t0
    mon.flush(120)
    out = {
        "phase": cfg["phase"],
        "rss_before_install_mib": rss0 / 2**20,
        "rss_installed_mib": rss_installed / 2**20,
        "samples": samples,
        "rss_growth_mib": samples[-1]["rss_mib"] - rss_installed / 2**20,
        "events_per_s": cfg["events"] / elapsed,
        "warned_pairs": len(getattr(mon, "_warned", ())),
        "pending": len(getattr(mon, "_pending", ())),
        "dropped": mon.sink.dropped_total if mon.sink else None,
        "written": mon.sink.written_total if mon.sink else None,
    }
    mon.uninstall()
    return out


def _sidecar_rss(journal_dir: Path) -> dict[str, Any]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bench_sidecar = HERE.parent / "bench_sidecar.py"
    proc = subprocess.Popen(
        [sys.executable, str(bench_sidecar), "--serve-sidecar", str(journal_dir), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 60
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/livez")
                c.getresponse().read()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        idle = rss_bytes(proc.pid)
        per_path: dict[str, Any] = {}
        for path in ("/jit", "/jit/events?limit=1000", "/metrics"):
            t0 = time.perf_counter()
            size = 0
            for _ in range(20):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                c.request("GET", path)
                r = c.getresponse()
                size = len(r.read())
                assert r.status == 200, (path, r.status)
            per_path[path] = {
                "rss_after_mib": rss_bytes(proc.pid) / 2**20,
                "bytes": size,
                "s_per_request": (time.perf_counter() - t0) / 20,
            }
        return {"rss_idle_mib": idle / 2**20, "after": per_path, "rss_final_mib": rss_bytes(proc.pid) / 2**20}
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--kernels", type=int, default=10_000)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        cfg = json.loads(Path(args.worker[0]).read_text())
        Path(args.worker[1]).write_text(json.dumps(_worker(cfg)))
        return
    tmp = scratch_dir("jw-bench-mem-")
    runs = {}
    for phase in ("warmup", "serving"):
        jdir = tmp / f"j-{phase}"
        cfg_p, out_p = tmp / f"cfg-{phase}.json", tmp / f"out-{phase}.json"
        cfg_p.write_text(json.dumps({"phase": phase, "events": args.events, "kernels": args.kernels}))
        env = dict(os.environ, JITWATCH_DIR=str(jdir), TRITON_CACHE_DIR=str(tmp / f"cache-{phase}"))
        p = subprocess.run(
            [sys.executable, str(HERE), "--worker", str(cfg_p), str(out_p)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if p.returncode:
            raise RuntimeError(p.stderr[-3000:])
        runs[phase] = json.loads(out_p.read_text())
        runs[phase]["journal_bytes"] = sum(f.stat().st_size for f in jdir.iterdir() if f.is_file())
        r = runs[phase]
        print(
            f"worker ({phase}): RSS {r['rss_installed_mib']:.1f} MiB installed -> "
            f"{r['samples'][-1]['rss_mib']:.1f} MiB after {args.events} events ({r['rss_growth_mib']:+.1f} MiB); "
            f"samples {[round(s['rss_mib'], 1) for s in r['samples']]}; warned pairs {r['warned_pairs']}, "
            f"dropped {r['dropped']}, journal {r['journal_bytes'] / 2**20:.1f} MiB, {r['events_per_s']:.0f} events/s"
        )
    side = _sidecar_rss(tmp / "j-serving")
    print(
        f"sidecar on the serving journal: RSS idle {side['rss_idle_mib']:.1f} MiB, after requests "
        f"{side['rss_final_mib']:.1f} MiB; "
        + ", ".join(f"{p} {v['rss_after_mib']:.1f} MiB ({v['bytes']} B)" for p, v in side["after"].items())
    )
    write_result(args.out, "memory", {"events": args.events, "kernels": args.kernels, "worker": runs, "sidecar": side})


if __name__ == "__main__":
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    main()
