"""Two workers share Triton's Redis remote cache; `jitwatch cache check` before and after.

Everything real: Debian's redis-server on a free 127.0.0.1 port, worker processes compiling with
Triton's compile-only driver (the full pipeline to a cubin, nothing launched), Triton's
``RemoteCacheManager`` with jitwatch's Redis backend (Triton's own cannot start: see
test_remote_cache.py), the jitwatch CLI in subprocesses.

1. production host: a worker with a local cache only compiles four slot-mapping keys in serving
   and its manifest goes to Redis (``jitwatch manifest export -o redis://…``);
2. ``jitwatch cache check`` of that manifest against the Redis cache: all four missing, exit 1;
3. worker A (remote cache) replays the manifest: compiles (cache misses) and fills Redis;
4. ``cache check``: complete, exit 0;
5. worker B (remote cache, its own empty local directory) replays the manifest: zero compiles,
   every key a cache load, nothing missed in Redis; its journal counts four remote-cache hits
   (``jitwatch_remote_cache_lookups_total``), worker A's four misses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jitwatch.store.journal import Journal
from tests._paths import ROOT

from .conftest import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

WORKER = Path(__file__).resolve().parent / "fleet_worker.py"
KEYS = 4  # the slot-mapping field case's serving compiles


def _env(tmp: Path, name: str, redis: RedisServer | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "JITWATCH_", "TRITON_"))}
    env.update(
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        OTEL_SDK_DISABLED="true",
        TRITON_CACHE_DIR=str(tmp / f"{name}-triton-cache"),
        TRITON_DEFAULT_FP_FUSION="1",
    )
    if redis is not None:
        env.update(
            TRITON_CACHE_MANAGER="triton.runtime.cache:RemoteCacheManager",
            TRITON_REMOTE_CACHE_BACKEND="jitwatch.backends.triton.remote_cache:RedisRemoteCacheBackend",
            TRITON_REDIS_HOST=redis.host,
            TRITON_REDIS_PORT=str(redis.port),
        )
    return env


def _worker(tmp: Path, name: str, redis: RedisServer | None, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(WORKER), args[0], str(tmp / f"{name}-journal"), *args[1:]],
        env=_env(tmp, name, redis),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jitwatch", *args],
        env=_env(tmp, "cli", None),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_second_worker_loads_everything_from_the_shared_redis_cache(tmp_path: Path, redis_server: RedisServer) -> None:
    url = redis_server.url
    prod = _worker(tmp_path, "prod", None, "record")
    assert [c["phase"] for c in prod["compiles"]] == ["serving"] * KEYS
    export = _cli(tmp_path, "manifest", "export", "--journal-dir", str(tmp_path / "prod-journal"), "-o", f"{url}/prod")
    assert export.returncode == 0, export.stderr
    assert f"{KEYS} specializations" in export.stdout
    location = f"{url}/prod"

    before = _cli(tmp_path, "cache", "check", location, "--redis", url, "--json")
    assert before.returncode == 1, before.stderr
    report = json.loads(before.stdout)
    assert report["missing"] == KEYS and report["ok"] == 0 and not report["complete"]

    a = _worker(tmp_path, "a", redis_server, "replay", location)
    assert a["replay"]["compiled"] == KEYS and a["replay"]["failed"] == 0
    assert [c["cache_hit"] for c in a["compiles"]] == [False] * KEYS  # compiled, uploaded
    assert a["remote_stats"]["puts"] > 0 and a["remote_stats"]["get_errors"] == 0

    after = _cli(tmp_path, "cache", "check", location, "--redis", url)
    assert after.returncode == 0, after.stdout + after.stderr
    assert f"complete: {KEYS} keys, {KEYS} would load, 0 would compile" in after.stdout

    b = _worker(tmp_path, "b", redis_server, "replay", location)
    assert b["replay"]["failed"] == 0 and b["replay"]["skipped"] == 0
    assert (b["replay"]["compiled"], b["replay"]["on_disk"]) == (0, KEYS)  # replay's report says so too
    assert len(b["compiles"]) == KEYS
    assert [c["cache_hit"] for c in b["compiles"]] == [True] * KEYS  # zero compiles: every key a load
    assert b["remote_stats"]["get_misses"] == 0 and b["remote_stats"]["puts"] == 0
    with Journal(tmp_path / "b-journal", readonly=True) as j:  # jitwatch_remote_cache_lookups_total
        assert j.backend_counter("remote_cache_hits") == {("triton", 0): float(KEYS)}
        assert j.backend_counter("remote_cache_misses") == {}
    with Journal(tmp_path / "a-journal", readonly=True) as j:
        assert j.backend_counter("remote_cache_misses") == {("triton", 0): float(KEYS)}
