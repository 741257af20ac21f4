"""A Redis backend for Triton's remote compile cache that works and never fails a compile.

Triton's ``RemoteCacheManager`` (``TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager``)
stores compiled kernels through the class that ``TRITON_REMOTE_CACHE_BACKEND`` names. Its own
``triton.runtime.cache:RedisRemoteCacheBackend`` (Triton 3.4-3.9, read from the wheels here):

* reads ``knobs.cache.redis.host``/``port``/``key_format``, but the Redis knobs are ``knobs.redis``
  (``TRITON_REDIS_HOST``, ``TRITON_REDIS_PORT``, ``TRITON_REDIS_KEY_FORMAT``): ``knobs.cache`` has
  no ``redis``, so **every compile raises** ``AttributeError: 'cache_knobs' object has no attribute
  'redis'`` (``tests/fleet/test_remote_cache.py`` shows it);
* and, with that attribute supplied by hand, lets any ``redis.RedisError`` escape ``triton.compile``:
  **a Redis outage fails every compile in the host** (no timeouts either: a hung server hangs it).

:class:`RedisRemoteCacheBackend` here is a subclass of Triton's with the same key layout
(``key_format.format(key=<base32 hash>, filename=...)``), so workers using either share one cache,
and:

* reads ``knobs.redis`` (or ``knobs.cache.redis`` where a Triton has it);
* uses one ``redis.Redis`` client (connection pool) per host/port for the process instead of one
  per compile, with 2 s connect / 5 s socket timeouts and no client-side retries (redis-py 8
  retries each call three times with backoff by default: seconds per cache file during an outage);
* turns a Redis error — or any error reading the peer's answer (a peer that is no Redis server:
  redis-py raises ``AttributeError`` there) — into a cache miss on ``get`` (Triton compiles
  locally) and a skipped upload on ``put``, counted in :data:`stats` and logged once per outage
  (again when it recovers);
* after an error, skips Redis for :data:`RETRY_AFTER_S` seconds (a compile during an outage then
  costs no network wait at all; ``stats["skipped"]`` counts those calls).

Use it with::

    TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager
    TRITON_REMOTE_CACHE_BACKEND=jitwatch.backends.triton.remote_cache:RedisRemoteCacheBackend
    TRITON_REDIS_HOST=redis.internal TRITON_REDIS_PORT=6379

This module is imported by Triton (``knobs.cache.remote_manager_class``), never by jitwatch's
hooks; it imports Triton and redis-py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from triton import knobs
from triton.runtime.cache import RedisRemoteCacheBackend as _TritonRedisBackend

from jitwatch.text import logger

log = logger(__name__)

CONNECT_TIMEOUT_S = 2.0
SOCKET_TIMEOUT_S = 5.0
RETRY_AFTER_S = 5.0
"""After a Redis error, calls skip Redis (miss / no upload) for this many seconds."""

stats: dict[str, int] = {"get_hits": 0, "get_misses": 0, "get_errors": 0, "put_errors": 0, "puts": 0, "skipped": 0}
"""Process-wide counters: files found/not found, Redis errors on get/put, uploads."""

_lock = threading.Lock()
_clients: dict[tuple[str, int], Any] = {}
_failing = False
_down_until = 0.0


def _settings() -> Any:
    legacy = getattr(knobs.cache, "redis", None)
    return legacy if legacy is not None else knobs.redis


def _client(host: str, port: int) -> Any:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    with _lock:
        client = _clients.get((host, port))
        if client is None:
            client = redis.Redis(
                host=host,
                port=port,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=SOCKET_TIMEOUT_S,
                retry=Retry(NoBackoff(), 0),
            )
            _clients[(host, port)] = client
        return client


def _skip() -> bool:
    """Inside the back-off window after an error: count and skip Redis."""
    with _lock:
        if time.monotonic() < _down_until:
            stats["skipped"] += 1
            return True
        return False


def _outage(what: str, exc: Exception) -> None:
    global _failing, _down_until
    with _lock:
        stats[f"{what}_errors"] += 1
        _down_until = time.monotonic() + RETRY_AFTER_S
        first = not _failing
        _failing = True
    if first:
        log.warning(
            "jitwatch: Triton's Redis remote cache failed (%s: %s: %s); compiling locally until it answers again",
            what,
            type(exc).__name__,
            exc,
        )


def _ok() -> None:
    global _failing
    if _failing:
        with _lock:
            _failing = False
        log.warning("jitwatch: Triton's Redis remote cache answers again")


class RedisRemoteCacheBackend(_TritonRedisBackend):
    """Triton's ``RedisRemoteCacheBackend`` with working knobs, shared clients, timeouts, and
    Redis errors degraded to cache misses (see the module docstring)."""

    def __init__(self, key: str) -> None:  # Triton's __init__ reads the missing knobs: not called
        settings = _settings()
        self._key = key
        self._key_fmt = settings.key_format
        self._redis = _client(str(settings.host), int(settings.port))

    def get(self, filenames: list[str]) -> dict[str, bytes]:
        import redis

        if _skip():
            return {}
        try:
            found: dict[str, bytes] = super().get(filenames)
        except redis.RedisError as exc:
            _outage("get", exc)
            return {}
        except Exception as exc:  # noqa: BLE001 - an answer no Redis gives (redis-py raises e.g. AttributeError)
            _outage("get", exc)  # a peer that is no Redis server: a miss, never an error in the host's compile
            return {}
        _ok()
        with _lock:
            stats["get_hits"] += len(found)
            stats["get_misses"] += len(filenames) - len(found)
        return found

    def put(self, filename: str, data: bytes) -> None:
        import redis

        if _skip():
            return
        try:
            super().put(filename, data)
        except redis.RedisError as exc:
            _outage("put", exc)
            return
        except Exception as exc:  # noqa: BLE001 - as in get
            _outage("put", exc)
            return
        _ok()
        with _lock:
            stats["puts"] += 1


__all__ = ["RedisRemoteCacheBackend", "stats"]
