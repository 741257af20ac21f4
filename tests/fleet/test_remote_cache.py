"""Triton's Redis remote cache, as shipped and through jitwatch's backend, with a real Redis server
and real compile-only compiles in this process (a monitor installed, as in a worker).

What Triton 3.9 does (checked here, documented in docs/fleet.md): its ``RedisRemoteCacheBackend``
reads ``knobs.cache.redis``, which does not exist, so every compile raises ``AttributeError``; with
that attribute supplied it works, and a Redis outage then raises ``redis.ConnectionError`` out of
the compile, into the host. jitwatch's backend compiles locally instead, counting the errors."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import torch

from jitwatch.backends.triton import remote_cache
from jitwatch.fleet.cache_check import cache_dir_name
from jitwatch.store.journal import Journal
from jitwatch.testing import MonitorHarness, fresh_kernel_cache
from tests._paths import TRITON_TESTS

from .conftest import RedisServer

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf

redis = pytest.importorskip("redis")
triton = pytest.importorskip("triton")

TRITON_BACKEND = "triton.runtime.cache:RedisRemoteCacheBackend"
JITWATCH_BACKEND = "jitwatch.backends.triton.remote_cache:RedisRemoteCacheBackend"


@pytest.fixture(autouse=True)
def _fresh_outage_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """No back-off window or outage left over from another test in this process."""
    monkeypatch.setattr(remote_cache, "_down_until", 0.0)
    monkeypatch.setattr(remote_cache, "_failing", False)


def _remote(monkeypatch: pytest.MonkeyPatch, backend: str, server: RedisServer) -> None:
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "triton.runtime.cache:RemoteCacheManager")
    monkeypatch.setenv("TRITON_REMOTE_CACHE_BACKEND", backend)
    monkeypatch.setenv("TRITON_REDIS_HOST", server.host)
    monkeypatch.setenv("TRITON_REDIS_PORT", str(server.port))


def _compile() -> None:
    fresh_kernel_cache(kf.scale_copy)
    kf.scale_copy.warmup(torch.zeros(1024), torch.empty(1024), 1000, BLOCK=256, grid=(1,))


def test_tritons_own_backend_cannot_start(
    harness: MonitorHarness, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not hasattr(triton.knobs.cache, "redis") and hasattr(triton.knobs, "redis")
    _remote(monkeypatch, TRITON_BACKEND, redis_server)
    with pytest.raises(AttributeError, match="'cache_knobs' object has no attribute 'redis'"):
        _compile()


def test_tritons_own_backend_fails_the_compile_when_redis_is_down(
    harness: MonitorHarness, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(triton.knobs.cache, "redis", triton.knobs.redis, raising=False)
    _remote(monkeypatch, TRITON_BACKEND, redis_server)
    _compile()  # works while Redis answers
    assert redis_server.client().keys("triton:*")
    redis_server.stop()
    with pytest.raises(redis.ConnectionError):
        _compile()  # the outage reaches the host: Triton's behaviour, not jitwatch's


def test_jitwatch_backend_shares_tritons_layout(
    harness: MonitorHarness, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _remote(monkeypatch, JITWATCH_BACKEND, redis_server)
    puts = remote_cache.stats["puts"]
    _compile()
    (event,) = harness.compiles()
    assert event.cache_hit is False and event.attrs.get("cache_key")
    key = cache_dir_name(event.attrs["cache_key"])
    assert redis_server.client().get(f"triton:{key}:__grp__scale_copy.json")
    assert remote_cache.stats["puts"] > puts
    _compile()  # a new process-level compile of the same key: loaded from Redis
    compiles = harness.compiles()
    assert [e.cache_hit for e in compiles] == [False, True]
    assert {e.attrs.get("cache") for e in compiles} == {"remote"}
    with Journal(harness.journal_dir, readonly=True) as j:  # jitwatch_remote_cache_lookups_total
        assert j.backend_counter("remote_cache_hits") == {("triton", 0): 1.0}
        assert j.backend_counter("remote_cache_misses") == {("triton", 0): 1.0}


def test_jitwatch_backend_compiles_locally_when_redis_is_down(
    harness: MonitorHarness,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    _remote(monkeypatch, JITWATCH_BACKEND, redis_server)
    redis_server.stop()
    errors, skipped = remote_cache.stats["get_errors"], remote_cache.stats["skipped"]
    with caplog.at_level(logging.WARNING, logger="jitwatch.backends.triton.remote_cache"):
        _compile()
        _compile()
    assert [e.cache_hit for e in harness.compiles()] == [False, False]  # compiled, not crashed
    # one failed call opens the back-off window; every later call in it skips Redis (no waiting)
    assert remote_cache.stats["get_errors"] == errors + 1
    assert remote_cache.stats["skipped"] > skipped
    outage = [r for r in caplog.records if "compiling locally" in r.getMessage()]
    assert len(outage) == 1  # logged once per outage


def test_jitwatch_backend_compiles_locally_when_the_peer_is_no_redis(
    harness: MonitorHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer at TRITON_REDIS_HOST:PORT that is no Redis server (a port taken by another service,
    a hostile peer) answering ``+OK`` to everything: redis-py raised ``AttributeError`` reading
    its connection handshake, no ``RedisError``, so it went through the backend into Triton's
    compile and the host's kernel launch raised. It is a cache miss now, as an outage is."""
    from tests.tools import not_redis_peer

    with not_redis_peer() as port:
        peer = RedisServer("127.0.0.1", port, proc=None)  # type: ignore[arg-type]
        _remote(monkeypatch, JITWATCH_BACKEND, peer)
        errors = remote_cache.stats["get_errors"]
        _compile()
    assert [e.cache_hit for e in harness.compiles()] == [False]  # compiled, not crashed
    assert remote_cache.stats["get_errors"] == errors + 1
