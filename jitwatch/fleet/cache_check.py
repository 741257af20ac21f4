"""``jitwatch cache check``: does a Triton cache hold the keys production needs?

Input: a manifest (the keys production compiled, each entry's ``cache_key`` being Triton's
persistent-cache hash of that compile, recorded from ``knobs.compilation.listener`` metadata) and a
Triton cache — a local ``TRITON_CACHE_DIR`` (:class:`LocalCache`) or Triton's Redis remote cache
(:class:`RedisCache`, the layout of ``triton.runtime.cache.RemoteCacheManager`` with
``RedisRemoteCacheBackend``, Triton 3.4-3.9). For every entry it answers what Triton itself would do
at ``triton.compile`` (``fn_cache_manager.get_group``):

* ``ok`` — the group file and every file it lists are there and sound: Triton loads;
* ``missing`` — no group file, or a listed file is absent: Triton compiles (silently);
* ``corrupt`` — present but unsound: a group file that is not JSON, a metadata JSON that does not
  parse or names another hash, an empty file, a cubin/hsaco that is not an ELF object or is
  truncated (its section table or a section lies past the end of the file), a group that lists
  files outside the cache directory (a cache copied from another path: Triton records absolute
  paths, so the copy loads the original's files or compiles);
* ``unknown`` — the entry has no ``cache_key`` (recorded before jitwatch 0.2 or by a listener-less
  Triton): cannot be checked.

For a local directory it also reports the filesystem the directory sits on (from
``/proc/self/mountinfo``) and warns when it is a network filesystem known to race
(:data:`NETWORK_FS`). Everything is read, nothing is executed or written.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from jitwatch.errors import StoreError
from jitwatch.fleet.stores import bounded_get, check_redis_url, safe_location, unexpected_answer
from jitwatch.text import plural
from jitwatch.warmup.manifest import Manifest

Status = Literal["ok", "missing", "corrupt", "unknown"]

MAX_FILE_BYTES = 256 * 1024 * 1024
"""Cache files larger than this are reported corrupt unread (a cubin is KBs to a few MB)."""
MAX_GROUP_BYTES = 1024 * 1024

_NFS = "NFS: close-to-open consistency and attribute caching let other hosts read an entry before it is complete"
NETWORK_FS = {
    "nfs": _NFS,
    "nfs4": _NFS,
    "lustre": "Lustre: concurrent writers of one cache have produced stale kernels (silent all-NaN output)",
    "cifs": "SMB/CIFS: rename and caching semantics differ from POSIX; concurrent writers race",
    "smb3": "SMB/CIFS: rename and caching semantics differ from POSIX; concurrent writers race",
    "ceph": "CephFS: client caching lets hosts see partial entries under concurrent writes",
    "glusterfs": "GlusterFS: rename is not atomic across bricks under concurrent writers",
    "gpfs": "GPFS/Spectrum Scale: shared by many hosts; concurrent writers of one entry race",
    "beegfs": "BeeGFS: shared by many hosts; concurrent writers of one entry race",
    "9p": "9p: no cross-client coherence guarantees",
    "afs": "AFS: whole-file caching; other hosts see updates late",
}
"""Filesystem types (``/proc/self/mountinfo``) on which a shared Triton cache is known to race;
``fuse.*`` (gcsfuse, s3fs, juicefs, …) is flagged too."""


@dataclass
class EntryCheck:
    """One manifest entry against the cache."""

    backend: str
    kernel: str
    key: str
    cache_key: str | None
    status: Status
    reason: str | None = None
    files: int = 0
    bytes: int = 0


@dataclass
class Filesystem:
    """Where a local cache directory lives: mount point, type, and the race warning if any."""

    mount_point: str
    fstype: str
    source: str
    network: bool
    note: str | None = None


@dataclass
class CacheReport:
    """Outcome of :func:`check`; ``complete`` when no entry is missing or corrupt and at least one
    entry could be checked."""

    cache: str
    results: list[EntryCheck] = field(default_factory=list)
    filesystem: Filesystem | None = None
    scanned: int | None = None
    """Entries of the whole cache looked at by :func:`scan` (``None``: not scanned)."""
    corrupt_entries: list[tuple[str, str]] = field(default_factory=list)
    """``(cache key, reason)`` of every corrupt entry :func:`scan` found, manifest or not."""

    def count(self, status: Status) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def complete(self) -> bool:
        return (
            self.count("missing") == 0
            and self.count("corrupt") == 0
            and self.count("ok") > 0
            and not self.corrupt_entries
        )

    def summary(self) -> str:
        verdict = "complete" if self.complete else "INCOMPLETE"
        return (
            f"{self.cache}: {verdict}: {plural(len(self.results), 'key')}, {self.count('ok')} would load, "
            f"{self.count('missing')} would compile (missing), {self.count('corrupt')} corrupt, "
            f"{self.count('unknown')} unknown (no cache key recorded)"
            + (
                f"; whole cache: {plural(self.scanned, 'entry', 'entries')} scanned,"
                f" {len(self.corrupt_entries)} corrupt"
                if self.scanned is not None
                else ""
            )
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "cache": self.cache,
            "complete": self.complete,
            "ok": self.count("ok"),
            "missing": self.count("missing"),
            "corrupt": self.count("corrupt"),
            "unknown": self.count("unknown"),
            "filesystem": None if self.filesystem is None else self.filesystem.__dict__,
            "results": [r.__dict__ for r in self.results],
            "scanned": self.scanned,
            "corrupt_entries": [{"cache_key": k, "reason": why} for k, why in self.corrupt_entries],
        }


# ------------------------------------------------------------------------------------ contents
def cache_dir_name(cache_key: str) -> str:
    """Triton's directory / Redis ``{key}`` for a cache hash: base32 of the SHA-256 bytes, no
    padding (``triton.runtime.cache._base32``)."""
    return base64.b32encode(bytes.fromhex(cache_key)).decode("ascii").rstrip("=")


def elf_problem(data: bytes) -> str | None:
    """Why ``data`` is not a complete ELF object (cubin, hsaco), or ``None``.

    Checks the magic, the class and that the section header table and every section with file
    contents (``sh_type != SHT_NOBITS``) end inside the data: a truncated copy fails here.
    """
    if len(data) < 52 or data[:4] != b"\x7fELF":
        return "not an ELF object"
    ei_class, ei_data = data[4], data[5]
    if ei_class not in (1, 2) or ei_data not in (1, 2):
        return "ELF header has an invalid class or byte order"
    end = "<" if ei_data == 1 else ">"
    try:
        if ei_class == 2:
            (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        else:
            (shoff,) = struct.unpack_from(end + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        if shnum == 0:
            return None
        if shoff + shentsize * shnum > len(data):
            return f"truncated: section table ends at byte {shoff + shentsize * shnum}, file has {len(data)}"
        for i in range(shnum):
            base = shoff + i * shentsize
            if ei_class == 2:
                (sh_type,) = struct.unpack_from(end + "I", data, base + 4)
                sh_offset, sh_size = struct.unpack_from(end + "QQ", data, base + 0x18)
            else:
                (sh_type,) = struct.unpack_from(end + "I", data, base + 4)
                sh_offset, sh_size = struct.unpack_from(end + "II", data, base + 0x10)
            if sh_type != 8 and sh_size and sh_offset + sh_size > len(data):  # 8: SHT_NOBITS
                return f"truncated: section {i} ends at byte {sh_offset + sh_size}, file has {len(data)}"
    except struct.error:
        return "truncated ELF header"
    return None


def content_problem(filename: str, data: bytes, cache_key: str) -> str | None:
    """Why one cache file is unsound, or ``None`` (see the module docstring)."""
    if not data:
        return f"{filename} is empty"
    if filename.endswith((".cubin", ".hsaco")):
        why = elf_problem(data)
        return f"{filename}: {why}" if why else None
    if filename.endswith(".json") and not filename.startswith("__grp__"):
        try:
            meta = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return f"{filename}: metadata is not JSON (truncated?)"
        if not isinstance(meta, dict):
            return f"{filename}: metadata is not a JSON object"
        recorded = meta.get("hash")
        if isinstance(recorded, str) and recorded.lower() != cache_key.lower():
            return f"{filename}: metadata names hash {recorded[:16]}…, the entry is {cache_key[:16]}…"
    return None


# ------------------------------------------------------------------------------------ caches
class TritonCache(Protocol):
    """A Triton cache that can look up one compile by its cache hash."""

    description: str

    def keys(self, limit: int) -> list[str]:
        """Cache hashes of the entries present (at most ``limit``)."""
        ...

    def lookup(self, cache_key: str) -> tuple[Status, str | None, int, int]:
        """``(status, reason, files, bytes)`` for one cache hash."""
        ...


def cache_key_of(name: str) -> str | None:
    """The SHA-256 hex of a cache directory / Redis ``{key}`` (inverse of :func:`cache_dir_name`),
    ``None`` for anything that is not one."""
    if not re.fullmatch(r"[A-Z2-7]{52}", name):
        return None
    try:
        raw = base64.b32decode(name + "=" * (-len(name) % 8))
    except (ValueError, TypeError):
        return None
    return raw.hex() if len(raw) == 32 else None


class LocalCache:
    """A ``TRITON_CACHE_DIR`` (``triton.runtime.cache.FileCacheManager``'s layout)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        if not self.path.is_dir():
            raise StoreError(f"{self.path}: no such Triton cache directory")
        self.description = str(self.path)

    def keys(self, limit: int) -> list[str]:
        """Cache hashes of the entries in the directory (at most ``limit``)."""
        out: list[str] = []
        try:
            for p in self.path.iterdir():
                key = cache_key_of(p.name) if p.is_dir() else None
                if key is not None:
                    out.append(key)
                    if len(out) >= limit:
                        break
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot list: {exc.strerror or exc}") from None
        return out

    def lookup(self, cache_key: str) -> tuple[Status, str | None, int, int]:
        entry = self.path / cache_dir_name(cache_key)
        try:
            groups = sorted(p for p in entry.glob("__grp__*.json") if p.is_file())
        except OSError as exc:
            return "corrupt", f"{entry.name}: unreadable: {exc.strerror or exc}", 0, 0
        if not groups:
            return "missing", None, 0, 0
        files = size = 0
        root = os.path.realpath(self.path)
        for grp in groups:
            try:
                if grp.stat().st_size > MAX_GROUP_BYTES:
                    return "corrupt", f"{grp.name} is over {MAX_GROUP_BYTES} bytes", files, size
                child_paths = json.loads(grp.read_bytes()).get("child_paths")
            except (OSError, ValueError, UnicodeDecodeError, AttributeError):
                return "corrupt", f"{grp.name} is not a Triton group file (truncated?)", files, size
            if not isinstance(child_paths, dict) or not child_paths:
                return "corrupt", f"{grp.name} lists no files", files, size
            for name, recorded in child_paths.items():
                if not isinstance(name, str) or not isinstance(recorded, str):
                    return "corrupt", f"{grp.name} has a non-string entry", files, size
                if not os.path.exists(recorded):
                    return (
                        "missing",
                        f"{grp.name} lists {name} at {recorded}, which does not exist (Triton then compiles; "
                        "a cache copied from another path keeps the old absolute paths)",
                        files,
                        size,
                    )
                real = os.path.realpath(recorded)
                if os.path.commonpath([root, real]) != root:
                    return "corrupt", f"{grp.name} lists {name} outside this cache: {recorded}", files, size
                try:
                    st = os.stat(real)
                    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or never end
                        return "corrupt", f"{name} is not a regular file", files, size
                    if st.st_size > MAX_FILE_BYTES:
                        return "corrupt", f"{name} is over {MAX_FILE_BYTES} bytes", files, size
                    with open(real, "rb") as f:
                        data = f.read()
                except OSError as exc:
                    return "corrupt", f"{name}: unreadable: {exc.strerror or exc}", files, size
                files += 1
                size += len(data)
                why = content_problem(name, data, cache_key)
                if why:
                    return "corrupt", why, files, size
        return "ok", None, files, size


class RedisCache:
    """Triton's Redis remote cache: ``RemoteCacheManager`` + ``RedisRemoteCacheBackend`` store each
    file under ``key_format.format(key=<base32 hash>, filename=...)`` and a group as
    ``__grp__<name>.json`` = ``{"child_paths": [filename, ...]}``.

    Args:
        url: ``redis://HOST:PORT[/DB]`` (redis-py ``from_url``).
        key_format: Triton's ``TRITON_REDIS_KEY_FORMAT`` (default ``triton:{key}:{filename}``).
    """

    def __init__(self, url: str, key_format: str = "triton:{key}:{filename}", client: Any | None = None) -> None:
        if "{key}" not in key_format or "{filename}" not in key_format:
            raise StoreError(f"key format {key_format!r} needs {{key}} and {{filename}}")
        self.key_format = key_format
        self.description = f"{safe_location(url)} ({key_format})"
        if client is None:
            check_redis_url(url)
            try:
                import redis
            except ImportError:
                raise StoreError("a Redis cache check needs redis-py: pip install 'jitwatch[fleet]'") from None
            client = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self.client = client

    def _call(self, fn: Any, *args: Any) -> Any:
        import redis

        try:
            return fn(*args)
        except redis.RedisError as exc:
            raise StoreError(f"{self.description}: {type(exc).__name__}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - redis-py reading an answer no Redis gives
            raise StoreError(f"{self.description}: {unexpected_answer(exc)}") from None

    def _length(self, key: Any) -> int:
        """``STRLEN key``; :class:`StoreError` for an answer that is no count."""
        n = self._call(self.client.strlen, key)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise StoreError(f"{self.description}: {unexpected_answer(TypeError(f'STRLEN answered {n!r:.40}'))}")
        return n

    def keys(self, limit: int) -> list[str]:
        """Cache hashes that have a group value in Redis (at most ``limit``; SCAN, never KEYS)."""
        head, _, tail = self.key_format.partition("{key}")
        sep = tail.split("{filename}")[0]
        pattern = self.key_format.format(key="*", filename="__grp__*")
        out: dict[str, None] = {}  # insertion-ordered set: the first `limit` distinct hashes

        def collect() -> None:
            for raw in self.client.scan_iter(match=pattern, count=1000):
                name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                if not name.startswith(head):
                    continue
                middle = name[len(head) :]
                key = cache_key_of(middle.split(sep)[0] if sep else middle[:52])
                if key is not None:
                    out[key] = None
                    if len(out) >= limit:
                        return

        self._call(collect)
        return list(out)

    def lookup(self, cache_key: str) -> tuple[Status, str | None, int, int]:
        key = cache_dir_name(cache_key)
        pattern = self.key_format.format(key=key, filename="__grp__*")
        groups = sorted(self._call(lambda: list(self.client.scan_iter(match=pattern, count=1000))))
        if not groups:
            return "missing", None, 0, 0
        files = size = 0
        for grp_key in groups:
            grp_name = grp_key.decode("utf-8", "replace") if isinstance(grp_key, bytes) else str(grp_key)
            length = self._length(grp_key)
            if length > MAX_GROUP_BYTES:
                return "corrupt", f"{grp_name} is over {MAX_GROUP_BYTES} bytes", files, size
            raw = self._call(bounded_get, self.client, grp_key, MAX_GROUP_BYTES)
            if len(raw) > MAX_GROUP_BYTES:  # rewritten larger since STRLEN
                return "corrupt", f"{grp_name} is over {MAX_GROUP_BYTES} bytes", files, size
            try:
                child_paths = json.loads(raw).get("child_paths")
            except (TypeError, ValueError, UnicodeDecodeError, AttributeError):
                return "corrupt", f"{grp_name} is not a Triton group value (truncated?)", files, size
            if not isinstance(child_paths, list) or not child_paths or not all(isinstance(c, str) for c in child_paths):
                return "corrupt", f"{grp_name} lists no files", files, size
            keys = [self.key_format.format(key=key, filename=c) for c in child_paths]
            lengths = [self._length(k) for k in keys]
            for name, n in zip(child_paths, lengths, strict=True):
                if not n:
                    return "missing", f"{name} is listed by the group but absent (Triton then compiles)", files, size
                if n > MAX_FILE_BYTES:
                    return "corrupt", f"{name} is over {MAX_FILE_BYTES} bytes", files, size
            for name, k in zip(child_paths, keys, strict=True):
                data = self._call(bounded_get, self.client, k, MAX_FILE_BYTES)
                if not data:
                    return "missing", f"{name} vanished while being read", files, size
                if len(data) > MAX_FILE_BYTES:  # rewritten larger since STRLEN
                    return "corrupt", f"{name} is over {MAX_FILE_BYTES} bytes", files, size
                files += 1
                size += len(data)
                why = content_problem(name, data, cache_key)
                if why:
                    return "corrupt", why, files, size
        return "ok", None, files, size


# ------------------------------------------------------------------------------------ filesystem
def _unescape(field_: str) -> str:
    return field_.encode().decode("unicode_escape") if "\\" in field_ else field_


def filesystem_of(path: str | os.PathLike[str], mountinfo: Iterable[str] | None = None) -> Filesystem | None:
    """The mount holding ``path`` (longest mount-point prefix in ``/proc/self/mountinfo``), with the
    race warning for :data:`NETWORK_FS` and ``fuse.*`` types; ``None`` where mountinfo is absent."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
                mountinfo = f.read().splitlines()
        except OSError:
            return None
    real = os.path.realpath(path)
    best: tuple[str, str, str] | None = None
    for line in mountinfo:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        parts, rparts = left.split(), right.split()
        if len(parts) < 5 or len(rparts) < 2:
            continue
        mount = _unescape(parts[4])
        if (real == mount or real.startswith(mount.rstrip("/") + "/")) and (best is None or len(mount) >= len(best[0])):
            best = (mount, rparts[0], rparts[1])
    if best is None:
        return None
    mount, fstype, source = best
    note = NETWORK_FS.get(fstype)
    if note is None and fstype.startswith("fuse."):
        note = f"{fstype}: a FUSE filesystem (object-store mounts such as gcsfuse or s3fs) has no atomic rename"
    return Filesystem(mount, fstype, source, network=note is not None, note=note)


# ------------------------------------------------------------------------------------ check
def check(manifest: Manifest, cache: TritonCache, *, backends: Sequence[str] = ("triton",)) -> CacheReport:
    """Look every ``backends`` entry of ``manifest`` up in ``cache`` (see the module docstring).

    Raises:
        StoreError: the cache (Redis) cannot be reached.
    """
    report = CacheReport(cache=cache.description)
    if isinstance(cache, LocalCache):
        report.filesystem = filesystem_of(cache.path)
    for e in manifest.entries:
        if e.backend not in backends:
            continue
        if e.cache_key is None:
            report.results.append(EntryCheck(e.backend, e.kernel, e.key, None, "unknown", "no cache_key recorded"))
            continue
        status, reason, files, size = cache.lookup(e.cache_key)
        report.results.append(EntryCheck(e.backend, e.kernel, e.key, e.cache_key, status, reason, files, size))
    return report


MAX_SCAN = 100_000
"""Most cache entries :func:`scan` looks at."""


def scan(report: CacheReport, cache: TritonCache, *, limit: int = MAX_SCAN) -> CacheReport:
    """Check every entry of ``cache`` (not only the manifest's): fills ``report.scanned`` and
    ``report.corrupt_entries`` (a corrupt entry anywhere makes the report incomplete: some host's
    key loads it). Entries already checked for the manifest are not read twice."""
    done = {r.cache_key: r for r in report.results if r.cache_key is not None}
    keys = cache.keys(limit)
    report.scanned = len(keys)
    for key in keys:
        prev = done.get(key)
        status, reason = (prev.status, prev.reason) if prev is not None else cache.lookup(key)[:2]
        if status == "corrupt":
            report.corrupt_entries.append((key, reason or "corrupt"))
    return report


__all__ = [
    "NETWORK_FS",
    "CacheReport",
    "EntryCheck",
    "Filesystem",
    "LocalCache",
    "RedisCache",
    "cache_dir_name",
    "check",
    "elf_problem",
    "filesystem_of",
    "scan",
]
