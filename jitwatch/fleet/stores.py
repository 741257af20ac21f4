"""Manifests in storage a fleet already has: a plain directory (NFS-style) or a Redis server.

A *location* is one string, so every command takes the same thing:

* ``redis://[user:password@]HOST[:PORT][/DB][/NAME][?prefix=P]`` — a Redis server (redis-py,
  ``redis.Redis.from_url``; ``rediss://`` for TLS). Each manifest is one string value under the key
  ``P + NAME`` (``P`` defaults to :data:`REDIS_PREFIX`). Without ``NAME`` the location is the whole
  store: every key under the prefix.
* anything else is a filesystem path: a ``.json`` file is one manifest; a directory is a store of
  ``NAME.json`` files (written atomically: temporary file in the same directory, then
  ``os.replace``, which NFS performs on the server).

Reading is the validated parse of :func:`jitwatch.warmup.manifest.loads` (size-limited, schema
checked, nothing imported); a Redis value is measured (``STRLEN``) before it is fetched. Names are
``[A-Za-z0-9][A-Za-z0-9._-]{0,127}`` (a host name fits; no path separators); a host's export is
named by :func:`host_record_name`. Errors reaching or
reading the storage raise :class:`~jitwatch.errors.StoreError` with the location (password
removed); an invalid manifest raises :class:`~jitwatch.errors.ManifestError`.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import SplitResult, parse_qs, parse_qsl, urlsplit, urlunsplit

from jitwatch.errors import ManifestError, StoreError
from jitwatch.warmup.manifest import MAX_MANIFEST_BYTES, Manifest, dumps, loads, save, seal

REDIS_PREFIX = "jitwatch:manifest:"
"""Default key prefix of manifests in Redis."""

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_NAMES = 10_000
"""Most manifests one store lists (a fleet of 1,000 hosts records one each)."""

REDIS_TIMEOUT_S = 5.0

SHARED_HOST_NAMES = frozenset({"", "localhost", "localhost.localdomain", "localhost6", "localhost6.localdomain6"})
"""Host names many hosts have (a container or VM whose name was never set): no default record name."""


def host_record_name(host: str) -> str:
    """The manifest name ``jitwatch manifest export`` gives this host's record in a store: the full
    host name (``node-1.dc1``, never only ``node-1``: hosts of two domains kept one record and
    overwrote each other's), as it is when it is a valid name; else its characters outside
    ``[A-Za-z0-9._-]`` replaced by ``-``, cut to fit and ended by ``-`` and 8 hex digits of the host
    name's SHA-256, so two host names that clean up alike still get two records. Only the host
    name goes in (no user name, no path)."""
    if NAME.fullmatch(host):
        return host
    tag = hashlib.sha256(host.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", host).lstrip("._-")
    return f"{clean[:119]}-{tag}" if clean else f"host-{tag}"


def check_name(name: str) -> str:
    """``name`` if it is a valid manifest name, else :class:`StoreError`."""
    if not NAME.fullmatch(name):
        raise StoreError(f"manifest name {name[:80]!r} is not [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}")
    return name


def _readable(location: str) -> SplitResult | None:
    """``location`` split, or ``None`` when its host part cannot be read: a port that is not a
    number in 0-65535, a broken IPv6 host (``[::1``), or an ``@`` after the host part (a password
    holding an unencoded ``/``, ``?`` or ``#`` ends the host part early, so the rest of the
    password lands in the path)."""
    try:
        parts = urlsplit(location)
        parts.port  # noqa: B018 - raises ValueError for a port that is not 0-65535
    except ValueError:
        return None
    after_host = location[len(parts.scheme) + 3 + len(parts.netloc) :]
    return None if "@" in after_host else parts


def safe_location(location: str) -> str:
    """``location`` without a Redis password (for messages and reports). Never raises: a URL
    whose host part cannot be read is shown without everything up to its last ``@``."""
    if not location.startswith(("redis://", "rediss://")):
        return location
    parts = _readable(location)
    if parts is None:
        scheme, _, rest = location.partition("://")
        return f"{scheme}://***@{rest.rpartition('@')[2]}" if "@" in rest else location
    query = "&".join(
        f"{k}=***" if k.lower() in ("password", "pass", "auth") else f"{k}={v}"
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    if parts.password is None:
        return urlunsplit(parts._replace(query=query)) if parts.query else location
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def check_redis_url(location: str) -> SplitResult:
    """``location`` (``redis://`` or ``rediss://``) split, once its host part is known to be
    readable (:func:`_readable`); else :class:`StoreError`, naming the location without its
    password, instead of the ``ValueError`` :mod:`urllib.parse` or redis-py would raise later (a
    traceback, exit 1) or a connection to another server."""
    parts = _readable(location)
    if parts is None:
        raise StoreError(
            f"{safe_location(location)}: not a valid redis:// URL (the port must be a number 0-65535, an IPv6"
            " host goes in [brackets], and a password holding / ? or # must be percent-encoded)"
        )
    return parts


class ManifestStore(Protocol):
    """Named manifests in shared storage."""

    @property
    def description(self) -> str: ...

    def names(self) -> list[str]: ...

    def get(self, name: str, *, key: bytes | None = None) -> Manifest: ...

    def put(self, name: str, manifest: Manifest, *, key: bytes | None = None) -> str: ...


@dataclass
class DirectoryStore:
    """``NAME.json`` files in ``path`` (a local or network-mounted directory)."""

    path: Path

    @property
    def description(self) -> str:
        return str(self.path)

    def names(self) -> list[str]:
        try:
            found = sorted(p.stem for p in self.path.glob("*.json") if p.is_file() and NAME.fullmatch(p.stem))
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot list manifests: {exc.strerror or exc}") from None
        return found[:MAX_NAMES]

    def get(self, name: str, *, key: bytes | None = None) -> Manifest:
        from jitwatch.warmup.manifest import load

        return load(self.path / f"{check_name(name)}.json", key=key)

    def put(self, name: str, manifest: Manifest, *, key: bytes | None = None) -> str:
        target = self.path / f"{check_name(name)}.json"
        try:
            save(manifest, target, key=key)
        except OSError as exc:
            raise StoreError(f"{target}: cannot write manifest: {exc.strerror or exc}") from None
        return str(target)


def unexpected_answer(exc: BaseException) -> str:
    """The reason for an error redis-py raised that is no ``RedisError``: it read an answer no
    Redis server gives (a server that is no Redis, or a hostile one)."""
    return f"unexpected answer from the server ({type(exc).__name__}): is it a Redis server?"


def bounded_get(client: Any, key: Any, limit: int) -> bytes:
    """The value of ``key``, at most ``limit + 1`` bytes of it (``GETRANGE``, not ``GET``): a value
    rewritten larger between its ``STRLEN`` and this read is not fetched whole. ``b""`` for a
    missing key. A server that lies can still send more: redis-py reads what it is sent.

    Raises:
        TypeError: the answer is no byte string.
    """
    data = client.getrange(key, 0, limit)
    if not isinstance(data, bytes):
        raise TypeError(f"GETRANGE answered {type(data).__name__}")
    return data


class RedisStore:
    """Manifests as string values under ``prefix + NAME`` in a Redis server (redis-py).

    Args:
        url: ``redis://HOST:PORT/DB`` (what ``redis.Redis.from_url`` takes).
        prefix: key prefix, default :data:`REDIS_PREFIX`.
        client: an existing ``redis.Redis`` (tests); ``url`` is then only the description.
    """

    def __init__(self, url: str, prefix: str = REDIS_PREFIX, client: Any | None = None) -> None:
        self.url = url
        self.prefix = prefix
        if client is None:
            try:
                import redis
            except ImportError:
                raise StoreError("a redis:// location needs redis-py: pip install 'jitwatch[fleet]'") from None
            client = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
        self.client = client

    @property
    def description(self) -> str:
        return f"{safe_location(self.url)} (prefix {self.prefix!r})"

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        import redis

        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise StoreError(f"{self.description}: cannot {what}: {type(exc).__name__}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - redis-py reading an answer no Redis gives
            raise StoreError(f"{self.description}: cannot {what}: {unexpected_answer(exc)}") from None

    def names(self) -> list[str]:
        out: list[str] = []
        for raw in self._call(
            "list manifests", lambda: list(self.client.scan_iter(match=self.prefix + "*", count=1000))
        ):
            key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            name = key[len(self.prefix) :]
            if NAME.fullmatch(name):
                out.append(name)
        return sorted(out)[:MAX_NAMES]

    def get(self, name: str, *, key: bytes | None = None) -> Manifest:
        secret, rkey = key, self.prefix + check_name(name)
        size = self._call(f"read {rkey}", self.client.strlen, rkey)
        if not size:
            raise ManifestError(f"{self.description}: no manifest {name!r} (key {rkey!r} is missing or empty)")
        if size > MAX_MANIFEST_BYTES:
            raise ManifestError(f"{rkey}: {size} bytes is over the {MAX_MANIFEST_BYTES}-byte limit")
        data = self._call(f"read {rkey}", bounded_get, self.client, rkey, MAX_MANIFEST_BYTES)
        if not data:
            raise ManifestError(f"{self.description}: manifest {name!r} vanished while being read")
        if len(data) > MAX_MANIFEST_BYTES:  # rewritten larger since STRLEN
            raise ManifestError(f"{rkey}: over the {MAX_MANIFEST_BYTES}-byte limit (grew while being read)")
        return loads(data, source=f"redis {rkey}", key=secret)

    def put(self, name: str, manifest: Manifest, *, key: bytes | None = None) -> str:
        seal(manifest, key)
        key_name = self.prefix + check_name(name)
        self._call(f"write {key_name}", self.client.set, key_name, dumps(manifest).encode("utf-8"))
        return f"{safe_location(self.url)} {key_name}"


@dataclass
class Location:
    """A parsed location: the store, and the one manifest's name in it (``None``: the whole store);
    ``file`` is set instead for a single ``.json`` file."""

    store: ManifestStore | None
    name: str | None = None
    file: Path | None = None


def parse_location(location: str, *, client: Any | None = None) -> Location:
    """Parse a location string (see the module docstring); connects to nothing yet.

    Raises:
        StoreError: a malformed ``redis://`` location or name.
    """
    if location.startswith("unix://"):
        raise StoreError("unix:// Redis sockets are not supported: use redis://HOST:PORT[/DB][/NAME]")
    if location.startswith(("redis://", "rediss://")):
        parts = check_redis_url(location)
        segs = [s for s in parts.path.split("/") if s]
        db = "0"
        if segs and segs[0].isdigit():
            db = segs.pop(0)
        if len(segs) > 1:
            raise StoreError(f"{safe_location(location)}: expected redis://HOST:PORT[/DB][/NAME]")
        name = check_name(segs[0]) if segs else None
        query = parse_qs(parts.query)
        unknown = sorted(set(query) - {"prefix"})
        if unknown:  # a ?password= would otherwise be dropped silently (and printed)
            raise StoreError(
                f"{safe_location(location)}: only ?prefix= is understood, not {', '.join(unknown)}"
                " (a password goes in the URL: redis://:PASSWORD@HOST:PORT)"
            )
        prefix = query.get("prefix", [REDIS_PREFIX])[0]
        url = urlunsplit((parts.scheme, parts.netloc, f"/{db}", "", ""))
        return Location(RedisStore(url, prefix, client=client), name)
    path = Path(location).expanduser()
    if path.suffix == ".json" or path.is_file():
        return Location(None, None, file=path)
    return Location(DirectoryStore(path))


def _redis_identity(store: RedisStore) -> tuple[Any, ...]:
    """Which Redis keys a store names: server (host, port, default 6379), database and prefix."""
    parts = urlsplit(store.url)
    db = parts.path.strip("/") or "0"
    return ((parts.hostname or "localhost").lower(), parts.port or 6379, db, store.prefix)


def own_output_name(location: str, output: str, name: str) -> str | None:
    """The name, in the store at ``location`` (an input of ``warmup merge``), of the manifest that
    writing the merge to ``output`` (``--name name``) replaces: that manifest is the merge's earlier
    result, not a host's record. ``None`` when ``location`` is no whole store or ``output`` writes
    elsewhere. The store is compared by what it is, not how it is spelt: a directory by its real
    path (``-o STORE/fleet.json``, a relative path or ``STORE/.`` name the same directory), a Redis
    store by server, database and prefix. Never raises."""
    try:
        src, dst = parse_location(location), parse_location(output)
    except (StoreError, ValueError, OSError):
        return None
    if src.name is not None:
        return None
    if isinstance(src.store, DirectoryStore):
        if dst.file is not None:
            target_dir, target = dst.file.parent, dst.file.stem if dst.file.suffix == ".json" else None
        elif isinstance(dst.store, DirectoryStore):
            target_dir, target = dst.store.path, dst.name or name
        else:
            return None
        try:
            same = os.path.realpath(src.store.path) == os.path.realpath(target_dir)
        except (OSError, ValueError):
            return None
        return target if same and target else None
    if isinstance(src.store, RedisStore) and isinstance(dst.store, RedisStore):
        return dst.name or name if _redis_identity(src.store) == _redis_identity(dst.store) else None
    return None


def read_manifests(location: str, *, client: Any | None = None, key: bytes | None = None) -> list[tuple[str, Manifest]]:
    """Every manifest at ``location`` as ``(source, manifest)`` pairs (source: file path or store name).

    Raises:
        StoreError: the storage cannot be reached or listed (or holds no manifest).
        ManifestError: a manifest there is invalid (its source named).
    """
    loc = parse_location(location, client=client)
    if loc.file is not None:
        from jitwatch.warmup.manifest import load

        return [(str(loc.file), load(loc.file, key=key))]
    assert loc.store is not None
    if loc.name is not None:
        return [(loc.name, loc.store.get(loc.name, key=key))]
    if isinstance(loc.store, DirectoryStore) and not loc.store.path.is_dir():
        raise StoreError(f"{loc.store.path}: no such manifest file or directory")
    names = loc.store.names()
    if not names:
        raise StoreError(f"{loc.store.description}: holds no manifest")
    return [(n, loc.store.get(n, key=key)) for n in names]


def read_one(location: str, *, client: Any | None = None, key: bytes | None = None) -> Manifest:
    """The single manifest at ``location`` (a file, or a store location with a ``NAME``); with
    ``key`` (``JITWATCH_MANIFEST_KEY``) a valid HMAC is required."""
    loc = parse_location(location, client=client)
    if loc.file is not None:
        from jitwatch.warmup.manifest import load

        return load(loc.file, key=key)
    if loc.name is None and isinstance(loc.store, DirectoryStore):  # a directory has no /NAME form
        if not loc.store.path.exists():  # `warmup` for `warmup.json`: no directory was meant
            raise StoreError(f"{location}: no such manifest file or directory")
        names = loc.store.names()
        files = ", ".join(str(loc.store.path / f"{n}.json") for n in names[:3]) + (", …" if len(names) > 3 else "")
        hint = f"pass one of its files: {files}" if names else "it holds none"
        raise StoreError(f"{location} is a directory of manifests (NAME.json), not one manifest: {hint}")
    if loc.name is None:
        raise StoreError(f"{safe_location(location)} is a store, not one manifest: add /NAME")
    assert loc.store is not None
    return loc.store.get(loc.name, key=key)


def write_manifest(
    location: str,
    manifest: Manifest,
    *,
    client: Any | None = None,
    name: str | None = None,
    key: bytes | None = None,
) -> str:
    """Write ``manifest`` to ``location`` (a ``.json`` file, ``DIR`` + ``name``, or a Redis location
    with a ``NAME`` or ``name``), sealed (digest, and HMAC with ``key``); returns where it went.

    Raises:
        StoreError: no name for a store location, or the storage refused the write.
    """
    loc = parse_location(location, client=client)
    if loc.file is not None:
        try:
            return str(save(manifest, loc.file, key=key))
        except OSError as exc:
            raise StoreError(f"{loc.file}: cannot write manifest: {exc.strerror or exc}") from None
    target = loc.name or name
    if target is None:
        raise StoreError(f"{safe_location(location)} is a store: name the manifest (…/NAME, or a .json file)")
    assert loc.store is not None
    if isinstance(loc.store, DirectoryStore):
        try:
            os.makedirs(loc.store.path, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{loc.store.path}: {exc.strerror or exc}") from None
    return loc.store.put(target, manifest, key=key)


__all__ = [
    "REDIS_PREFIX",
    "DirectoryStore",
    "Location",
    "ManifestStore",
    "RedisStore",
    "check_redis_url",
    "host_record_name",
    "own_output_name",
    "parse_location",
    "read_manifests",
    "read_one",
    "safe_location",
    "write_manifest",
]
