"""What DeepGEMM's JIT does on the GPU machine, observed from outside (no jitwatch involved).

Run by ``scripts/gpu/deepgemm.sh probe``. Prints, as JSON lines: the import, a first GEMM per
configuration (compile) and a second (in-memory hit) with wall times, what a poller thread saw while
it ran (entries under the JIT cache's ``tmp/`` and ``cache/``, child processes of every thread of
this process with their command lines), and the cache directory afterwards (file names, sizes,
mtimes, ``meta.json``, the head of ``kernel.cu``). ``--role load`` runs the same GEMMs in a second
process against the same cache (disk-cache hits).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time


def emit(**kw: object) -> None:
    print("PROBE " + json.dumps(kw, default=str), flush=True)


def children() -> list[tuple[int, int, str]]:
    out = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids = f.read().split()
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:400]
            except OSError:
                cmd = "?"
            out.append((int(tid), int(pid), cmd))
    return out


def poller(root: str, stop: threading.Event) -> None:
    seen: set[str] = set()
    while not stop.is_set():
        now = time.time()
        for sub in ("tmp", "cache"):
            try:
                names = os.listdir(os.path.join(root, sub))
            except OSError:
                names = []
            for n in names:
                k = f"{sub}/{n}"
                if k not in seen:
                    seen.add(k)
                    emit(event="appeared", path=k, t=now)
        for key in [k for k in seen if k.startswith("tmp/")]:
            if not os.path.exists(os.path.join(root, key)):
                seen.discard(key)
                emit(event="vanished", path=key, t=now)
        for tid, pid, cmd in children():
            k = f"child/{pid}"
            if k not in seen:
                seen.add(k)
                emit(event="child", tid=tid, pid=pid, cmd=cmd, t=now, main_tid=threading.main_thread().native_id)
        stop.wait(0.02)


def dump(root: str) -> None:
    for sub in ("cache", "tmp"):
        d = os.path.join(root, sub)
        if not os.path.isdir(d):
            continue
        for entry in sorted(os.listdir(d)):
            p = os.path.join(d, entry)
            files = {}
            if os.path.isdir(p):
                for f in sorted(os.listdir(p)):
                    st = os.stat(os.path.join(p, f))
                    files[f] = {"size": st.st_size, "mtime": st.st_mtime}
            meta = None
            if os.path.exists(os.path.join(p, "meta.json")):
                with open(os.path.join(p, "meta.json")) as f:
                    meta = json.load(f)
            src = None
            if os.path.exists(os.path.join(p, "kernel.cu")):
                with open(os.path.join(p, "kernel.cu")) as f:
                    src = f.read()[:3000]
            emit(event="entry", sub=sub, name=entry, files=files, meta=meta, source=src)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="compile")
    args = ap.parse_args()
    root = os.environ["DG_JIT_CACHE_DIR"]
    stop = threading.Event()
    th = threading.Thread(target=poller, args=(root, stop), daemon=True)
    th.start()
    t0 = time.perf_counter()
    try:
        import deep_gemm
        import torch
    except Exception as exc:  # noqa: BLE001 - a probe reports whatever happens
        emit(event="import_failed", error=f"{type(exc).__name__}: {exc}")
        stop.set()
        sys.exit(3)
    emit(
        event="imported",
        seconds=time.perf_counter() - t0,
        version=getattr(deep_gemm, "__version__", "?"),
        torch=torch.__version__,
        file=deep_gemm.__file__,
    )
    from deep_gemm.utils.math import per_block_cast_to_fp8, per_token_cast_to_fp8

    def bf16(m: int, n: int, k: int) -> None:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        deep_gemm.bf16_gemm_nt(a, b, d)
        torch.cuda.synchronize()
        ref = a.float() @ b.float().t()
        err = ((d.float() - ref).abs().max() / ref.abs().max()).item()
        emit(event="check", kind="bf16", m=m, n=n, k=k, rel_err=err)

    def fp8(m: int, n: int, k: int) -> None:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        a8 = per_token_cast_to_fp8(a, use_ue8m0=False)
        b8 = per_block_cast_to_fp8(b, use_ue8m0=False)
        deep_gemm.fp8_gemm_nt(a8, b8, d)
        torch.cuda.synchronize()

    cases = [
        ("bf16", bf16, (128, 4096, 7168)),
        ("bf16", bf16, (4096, 4096, 7168)),
        ("bf16", bf16, (128, 2048, 7168)),
        ("fp8", fp8, (128, 4096, 7168)),
    ]
    for kind, fn, shape in cases:
        for attempt in (1, 2):
            t = time.perf_counter()
            try:
                fn(*shape)
                emit(
                    event="gemm",
                    role=args.role,
                    kind=kind,
                    shape=shape,
                    attempt=attempt,
                    seconds=time.perf_counter() - t,
                    t_end=time.time(),
                )
            except Exception as exc:  # noqa: BLE001
                emit(event="gemm_failed", kind=kind, shape=shape, error=f"{type(exc).__name__}: {str(exc)[:800]}")
                break
    time.sleep(0.1)
    stop.set()
    th.join()
    dump(root)


if __name__ == "__main__":
    main()
