"""Warmup manifests: the compiles a worker needed, written down so the next start can precompile them.

A manifest is one JSON document (UTF-8, ``.json``), versioned, documented in ``docs/manifests.md``::

    {
      "format": "jitwatch.manifest",
      "version": 2,
      "created_ts": 1764500000.0,            # Unix seconds
      "jitwatch_version": "0.2.0",
      "triton_version": "3.9.0",             # of the worker that compiled, when the journal knows it
      "phases": ["serving"],                 # which compile phases were recorded
      "entries": [ManifestEntry, ...]
    }

Each :class:`ManifestEntry` names the backend that replays it (``"triton"``; version-1 manifests,
which predate backends, read as Triton) and is one Triton specialization of one ``@triton.jit`` kernel: its module
and qualified name (how replay finds it, by import name only), the kernel's source hash
(``JITFunction.cache_key``, a SHA-256 of its source and dependencies, so a changed kernel is not
replayed blindly), Triton's in-memory cache key, the signature, constexpr values, per-argument
specialization, compile options and target, and Triton's own ``specialization_data`` JSON (what
``JITFunction.preload`` takes back, Triton 3.0+). The data comes from the ``compile`` events the
monitor journals (``attrs.specialization_data``, from ``knobs.runtime.jit_post_compile_hook``,
Triton 3.4+), so a manifest never holds more than the journal already does (home paths redacted).

Loading validates everything before anything is imported: :func:`load` raises
:class:`ManifestError` (or :class:`ManifestVersionError`) for a file that is not JSON, truncated, of
another format, of a newer version, or has module/qualified names that are not plain dotted Python
identifiers (a path, ``..``, spaces, ``<locals>``) — and imports nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from jitwatch._version import __version__
from jitwatch.backends.triton.backend import jsonable
from jitwatch.backends.triton.explain import is_listener_only
from jitwatch.backends.triton.keys import parse_key
from jitwatch.backends.triton.resolve import DOTTED_NAME, resolve_kernel
from jitwatch.backends.triton.specialization import check_options, split_key
from jitwatch.config import JITWATCH_MANIFEST_KEY
from jitwatch.core.events import BYTES_LIKE, EventKind, Phase, as_member
from jitwatch.errors import KernelNotResolved, ManifestEntryRefused, ManifestError, ManifestVersionError
from jitwatch.store.journal import Journal
from jitwatch.text import plural

FORMAT: Literal["jitwatch.manifest"] = "jitwatch.manifest"
VERSION = 2
"""Manifest format version this jitwatch writes and the newest it reads (1 and 2; version 2 added
each entry's ``backend``, which version-1 entries lack and read as ``"triton"``)."""

MAX_MANIFEST_BYTES = 64 * 1024 * 1024
"""Larger files are refused unread (a manifest of 10 000 specializations is ~30 MB)."""

MAX_ENTRIES = 100_000


class ManifestEntry(BaseModel):
    """One specialization of one kernel to precompile.

    ``specialization`` maps each argument to Triton's ``[type, spec]`` pair from the cache key
    (see :func:`parse_key`); ``options`` are ``num_warps``, ``num_stages``, ``num_ctas``, …;
    ``target`` is Triton's ``GPUTarget`` (``{"backend": "cuda", "arch": 90, "warp_size": 32}``).
    ``specialization_data`` is Triton's JSON as the compile hooks gave it (home paths redacted).
    """

    backend: str = Field(
        default="triton",
        pattern=r"^[a-z][a-z0-9_]{0,63}$",
        description="The backend that replays this entry (the journal event's backend).",
    )
    module: str = Field(description="Import name of the module defining the kernel, e.g. 'vllm.v1.worker.x'.")
    qualname: str = Field(description="Qualified name inside the module (Triton's fn.name).")
    source_hash: str | None = Field(
        default=None, description="JITFunction.cache_key when recorded; replay skips the entry if it differs."
    )
    key: str = Field(description="Triton's in-memory specialization key (str(specialization) + str(options)).")
    signature: dict[str, str] = Field(default_factory=dict, description="Argument → Triton type ('*fp32', 'i32').")
    constexprs: dict[str, Any] = Field(default_factory=dict, description="Constexpr argument → value.")
    specialization: dict[str, list[Any]] = Field(default_factory=dict, description="Argument → [type, spec].")
    options: dict[str, Any] = Field(default_factory=dict)
    target: dict[str, Any] = Field(default_factory=dict)
    specialization_data: str = Field(description="Triton's serialize_specialization_data JSON (for preload).")
    phases: list[str] = Field(default_factory=list, description="Phases this key compiled in.")
    ranks: list[int] = Field(default_factory=list)
    count: int = Field(default=1, ge=0, description="Compile events merged into this entry.")
    hosts: int = Field(
        default=1, ge=0, description="Hosts (recorded manifests) that compiled this key; summed by `warmup merge`."
    )
    cache_key: str | None = Field(
        default=None,
        description="Triton's persistent-cache hash of the compile (sha256 hex; the cache directory is its base32), "
        "when recorded: what `jitwatch cache check` looks up.",
    )
    first_seen_ts: float | None = None

    @field_validator("module", "qualname")
    @classmethod
    def _dotted(cls, value: str) -> str:
        if len(value) > 512 or not DOTTED_NAME.match(value):
            raise ValueError(f"{value[:80]!r} is not a dotted Python name (paths and <locals> are refused)")
        return value

    @field_validator("source_hash", "cache_key")
    @classmethod
    def _hash(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-fA-F]{16,128}", value):
            raise ValueError("must be hexadecimal (16-128 digits)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ManifestEntry:
        try:
            data = json.loads(self.specialization_data)
        except json.JSONDecodeError as exc:
            raise ValueError(f"specialization_data is not JSON: {exc}") from None
        except RecursionError:  # not a ValueError: pydantic would let it out of load()
            raise ValueError("specialization_data is nested too deeply to read") from None
        if not isinstance(data, dict):
            raise ValueError("specialization_data is not a JSON object")
        missing = {"name", "signature", "constant_keys", "constant_vals", "attrs_keys", "attrs_vals", "key"} - set(data)
        if missing:
            raise ValueError(f"specialization_data lacks {sorted(missing)}")
        if data["name"] != f"{self.module}.{self.qualname}":
            raise ValueError(
                f"specialization_data is for {str(data['name'])[:120]!r}, entry is {self.module}.{self.qualname}"
            )
        if data["key"] != self.key:
            raise ValueError("specialization_data.key differs from the entry's key")
        return self

    @property
    def kernel(self) -> str:
        """``module.qualname``."""
        return f"{self.module}.{self.qualname}"

    def identity(self) -> tuple[str, str, str, str, str]:
        return (self.backend, self.module, self.qualname, self.key, json.dumps(self.target, sort_keys=True))


class Integrity(BaseModel):
    """What the exporter vouches for: digests of the manifest's canonical bytes (see :func:`canonical_bytes`)."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the canonical bytes (detects damage).")
    hmac_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="HMAC-SHA256 of the canonical bytes with JITWATCH_MANIFEST_KEY (detects edits by anyone "
        "without the key); absent when the exporter had no key.",
    )


class Manifest(BaseModel):
    """A warmup manifest (format :data:`FORMAT`, version :data:`VERSION`)."""

    format: Literal["jitwatch.manifest"] = FORMAT
    version: int = VERSION
    created_ts: float = Field(default_factory=time.time, description="Unix seconds.")
    jitwatch_version: str | None = None
    triton_version: str | None = None
    phases: list[str] = Field(default_factory=lambda: [Phase.SERVING.value])
    entries: list[ManifestEntry] = Field(default_factory=list, max_length=MAX_ENTRIES)
    integrity: Integrity | None = Field(
        default=None, description="Digest (and HMAC) written by the exporter; checked by load (see docs/security.md)."
    )

    def kernels(self) -> list[str]:
        """Distinct ``module.qualname`` values, in entry order."""
        return list(dict.fromkeys(e.kernel for e in self.entries))


def _dedupe(entries: Iterable[ManifestEntry]) -> list[ManifestEntry]:
    out: dict[tuple[str, str, str, str, str], ManifestEntry] = {}
    for e in entries:
        ident = e.identity()
        prev = out.get(ident)
        if prev is None:
            out[ident] = e.model_copy(deep=True)
            continue
        prev.count += e.count
        prev.phases = sorted(set(prev.phases) | set(e.phases))
        prev.ranks = sorted(set(prev.ranks) | set(e.ranks))
        prev.source_hash = prev.source_hash or e.source_hash
        prev.cache_key = prev.cache_key or e.cache_key
        if e.first_seen_ts is not None and (prev.first_seen_ts is None or e.first_seen_ts < prev.first_seen_ts):
            prev.first_seen_ts = e.first_seen_ts
    return list(out.values())


# ---------------------------------------------------------------------------------------- record
def _target_from_options(options: dict[str, Any]) -> dict[str, Any]:
    """Triton < 3.9 leaves ``target`` out of ``specialization_data``; rebuild Triton's
    ``GPUTarget.__dict__`` from the options (``backend_name``, ``arch`` ``"sm90"``, ``warp_size``)."""
    backend, arch, warp = options.get("backend_name"), options.get("arch"), options.get("warp_size")
    if not isinstance(backend, str) or arch is None:
        return {}
    if isinstance(arch, str) and arch.startswith("sm") and arch[2:].isdigit():
        arch = int(arch[2:])
    return {"backend": backend, "arch": arch, "warp_size": warp if isinstance(warp, int) else 32}


def entry_from_event_attrs(
    *,
    kernel: str,
    key: str,
    attrs: dict[str, Any],
    phase: str,
    rank: int,
    ts: float | None,
) -> ManifestEntry | None:
    """Build an entry from one journaled ``compile`` event; ``None`` if it cannot be replayed.

    Events without ``specialization_data`` (compiles seen only by ``knobs.compilation.listener``:
    Inductor, direct ``triton.compile``) or without a module cannot be replayed by import name.
    """
    spec = attrs.get("specialization_data")
    module = attrs.get("module")
    if not isinstance(spec, str) or not isinstance(module, str):
        return None
    try:
        data = json.loads(spec)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    data_key = data.get("key")
    key = data_key if isinstance(data_key, str) else key
    raw_sig = data.get("signature")
    signature: dict[str, Any] = raw_sig if isinstance(raw_sig, dict) else {}
    parsed = parse_key(key) or []
    names = list(signature)
    specialization = {names[i]: jsonable(list(t)) for i, t in enumerate(parsed) if i < len(names)}
    raw_opts = attrs.get("options")
    options: dict[str, Any] = dict(raw_opts) if isinstance(raw_opts, dict) else {}
    raw_data_opts = data.get("options")
    data_opts: dict[str, Any] = raw_data_opts if isinstance(raw_data_opts, dict) else {}
    for k in ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion"):
        if k in data_opts and k not in options:
            options[k] = data_opts[k]
    source_hash = attrs.get("source_hash")
    cache_key = attrs.get("cache_key")
    try:
        return ManifestEntry(
            module=module,
            qualname=kernel,
            source_hash=source_hash if isinstance(source_hash, str) else None,
            cache_key=cache_key if isinstance(cache_key, str) else None,
            key=key,
            signature={str(k): str(v) for k, v in signature.items()},
            constexprs=dict(attrs.get("constexprs") or {}),
            specialization=specialization,
            options={k: jsonable(v) for k, v in options.items()},
            target=dict(data.get("target") or _target_from_options(data_opts)),
            specialization_data=spec,
            phases=[phase],
            ranks=[rank],
            first_seen_ts=ts,
        )
    except ValidationError:
        return None


@dataclass
class LeftOut:
    """The Triton ``compile`` events :func:`record_from_journal` read (in the phases, rank and time
    asked for) but could not make entries of, by kernel name."""

    listener_only: dict[str, dict[str, int]] = field(default_factory=dict)
    """kernel → {key (Triton's cache hash): compile events}: compiles Triton reported only through
    ``knobs.compilation.listener`` (a direct ``triton.compile``, as Inductor compiles its kernels;
    ``attrs.source = "compilation_listener"``). They carry no ``specialization_data``: no manifest
    can replay them."""
    unreplayable: dict[str, int] = field(default_factory=dict)
    """kernel → compile events without a usable ``specialization_data`` or ``module`` (an event
    whose capture failed, a journal of an older jitwatch)."""

    def compiles(self) -> int:
        """Every compile event left out."""
        return sum(sum(k.values()) for k in self.listener_only.values()) + sum(self.unreplayable.values())


def record_from_journal(
    journal: Journal,
    *,
    phases: Phase | str | Sequence[Phase | str] | None = (Phase.SERVING,),
    since: float | None = None,
    rank: int | None = None,
    limit: int = 10_000_000,
    left_out: LeftOut | None = None,
) -> Manifest:
    """Collect the journal's ``compile`` events into a manifest.

    Args:
        journal: an open journal (read-only is fine).
        phases: which phases to record (:class:`Phase` members or their values, or one of
            them); default serving only (the compiles warmup missed); ``None`` records every
            phase (startup, warmup and serving). Another value raises ``ConfigError``.
        since: only events after this Unix time (seconds).
        rank: only this rank's events.
        left_out: if given, the Triton compile events that make no entry are counted into it
            (:class:`LeftOut`: listener-only compiles, and events without specialization data).

    Same kernel + key + target is one entry (``count`` says how many compile events merged).
    Entries carry ``source_hash`` only if the journaled event had one; see :func:`resolve_sources`.
    """
    # One phase (a Phase is a str too) is not its characters; bytes are one (refused) value.
    given: Iterable[Any] | None = (phases,) if isinstance(phases, (str, *BYTES_LIKE)) else phases
    wanted = None if given is None else {as_member(Phase, p, "phases") for p in given}
    triton_version: str | None = None
    for w in journal.workers():
        v = w.attrs.get("triton_version")
        if isinstance(v, str):
            triton_version = v
    entries: list[ManifestEntry] = []
    for ev in journal.events(
        kind=EventKind.COMPILE, backend="triton", since=since, rank=rank, limit=limit, newest_first=False
    ):
        if wanted is not None and ev.phase not in wanted:
            continue
        entry = entry_from_event_attrs(
            kernel=ev.kernel or "", key=ev.key or "", attrs=ev.attrs, phase=ev.phase.value, rank=ev.rank, ts=ev.ts
        )
        if entry is not None:
            entries.append(entry)
        elif left_out is not None:
            kernel = ev.kernel or "<unknown>"
            if is_listener_only(ev.attrs):
                keys = left_out.listener_only.setdefault(kernel, {})
                keys[ev.key or ""] = keys.get(ev.key or "", 0) + 1
            else:
                left_out.unreplayable[kernel] = left_out.unreplayable.get(kernel, 0) + 1
    return Manifest(
        jitwatch_version=__version__,
        triton_version=triton_version,
        phases=[p.value for p in Phase] if wanted is None else sorted(p.value for p in wanted),
        entries=_dedupe(entries),
    )


def resolve_sources(manifest: Manifest, allow: Sequence[str]) -> dict[str, str]:
    """Fill in missing ``source_hash`` values by importing each kernel's module (allowed ones only).

    Uses :func:`jitwatch.warmup.replay.resolve_kernel` (the same allow-list rules as replay: dotted names
    only, module under one of the ``allow`` prefixes, never ``exec``); the hash is Triton's
    ``JITFunction.cache_key``. Returns ``{module.qualname: reason}`` for kernels left without a hash.
    """
    problems: dict[str, str] = {}
    hashes: dict[str, str] = {}
    for entry in manifest.entries:
        if entry.source_hash is not None:
            continue
        name = entry.kernel
        if name not in hashes and name not in problems:
            try:
                fn = resolve_kernel(entry.module, entry.qualname, allow=allow)
                hashes[name] = str(fn.cache_key)
            except KernelNotResolved as exc:
                problems[name] = str(exc)
        if name in hashes:
            entry.source_hash = hashes[name]
    return problems


def screen(manifest: Manifest) -> dict[str, str]:
    """Remove the entries replay would refuse or could never resolve; return ``{"kernel key": why}``.

    Left out: an entry whose recorded options or key options are refused
    (:func:`jitwatch.backends.triton.specialization.check_options`: ``ir_override``, ``ptx_options``,
    non-libdevice ``extern_libs``, unknown names) and an entry of a kernel defined in ``__main__``
    (a script run as ``python script.py``: no import name another process can resolve).
    """
    kept: list[ManifestEntry] = []
    problems: dict[str, str] = {}
    mains: dict[str, int] = {}
    for e in manifest.entries:
        if e.module == "__main__" or e.module.startswith("__main__."):
            mains[e.kernel] = mains.get(e.kernel, 0) + 1
            continue
        try:
            data = json.loads(e.specialization_data)
            opts = data.get("options")
            check_options(opts if isinstance(opts, dict) else {})
            check_options(split_key(e.key)[1])
        except ManifestEntryRefused as exc:
            problems[f"{e.kernel} {e.key[:60]}"] = f"left out: {exc}"
            continue
        kept.append(e)
    for kernel, n in mains.items():
        problems[kernel] = (
            f"left out ({plural(n, 'specialization')}): defined in __main__, which no other process can import; "
            "move the kernel into an importable module"
        )
    manifest.entries = kept
    return problems


# ---------------------------------------------------------------------------------------- files
def canonical_bytes(manifest: Manifest) -> bytes:
    """The bytes a manifest's digest and HMAC cover: every field but ``integrity``, as JSON with sorted
    keys, no whitespace, ASCII escapes (``json.dumps(..., sort_keys=True, separators=(",", ":"))``)."""
    body = manifest.model_dump(mode="json", exclude={"integrity"})
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def seal(manifest: Manifest, key: bytes | None = None) -> Manifest:
    """Set ``manifest.integrity``: the SHA-256 of :func:`canonical_bytes`, plus its HMAC-SHA256
    (:mod:`hmac`, stdlib) when ``key`` is given. Returns ``manifest``."""
    data = canonical_bytes(manifest)
    manifest.integrity = Integrity(
        sha256=hashlib.sha256(data).hexdigest(),
        hmac_sha256=hmac.new(key, data, hashlib.sha256).hexdigest() if key else None,
    )
    return manifest


def verify(manifest: Manifest, key: bytes | None = None, *, source: str = "<manifest>") -> None:
    """Check ``manifest.integrity``.

    Without ``key``: a recorded digest must match (damage or a careless edit is caught; a writer who
    recomputes the digest is not). With ``key`` (``JITWATCH_MANIFEST_KEY``): a valid HMAC is required.

    Raises:
        ManifestError: digest or HMAC mismatch, or ``key`` given and the manifest is not signed.
    """
    data = canonical_bytes(manifest)
    seal_ = manifest.integrity
    if seal_ is not None and not hmac.compare_digest(seal_.sha256, hashlib.sha256(data).hexdigest()):
        raise ManifestError(f"{source}: SHA-256 digest mismatch: the manifest was changed after export")
    if key is None:
        return
    if seal_ is None or seal_.hmac_sha256 is None:
        raise ManifestError(
            f"{source}: not signed, and {JITWATCH_MANIFEST_KEY} is set: export it with the same key "
            f"({JITWATCH_MANIFEST_KEY}=... jitwatch manifest export)"
        )
    if not hmac.compare_digest(seal_.hmac_sha256, hmac.new(key, data, hashlib.sha256).hexdigest()):
        raise ManifestError(
            f"{source}: HMAC mismatch: edited after export, or signed with another {JITWATCH_MANIFEST_KEY}"
        )


def dumps(manifest: Manifest) -> str:
    """The manifest as JSON text (sorted entries are not guaranteed: order is first-seen)."""
    return manifest.model_dump_json(indent=1)


def save(manifest: Manifest, path: str | os.PathLike[str], *, key: bytes | None = None) -> Path:
    """Seal (:func:`seal`: digest, and HMAC with ``key``) and write atomically (temporary file in
    the same directory, then ``os.replace``); mode 0644."""
    seal(manifest, key)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dumps(manifest))
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


class _NotJSON(ValueError):
    pass


def _not_json(name: str) -> Any:
    """``json.loads``' ``parse_constant``: Python reads ``NaN``, ``Infinity`` and ``-Infinity``, which
    are not JSON; a manifest holding one loaded, and :func:`save` wrote it as ``null``, which the
    manifest's float fields refuse (``created_ts``: the file written no longer loaded)."""
    raise _NotJSON(f"{name} is not a JSON number")


def loads(text: str | bytes, *, source: str = "<manifest>", key: bytes | None = None) -> Manifest:
    """Parse and validate manifest text, then check its integrity (:func:`verify`, with ``key``).

    Raises:
        ManifestVersionError: ``version`` is newer than :data:`VERSION`.
        ManifestError: not JSON (truncated: the message gives line and column), not an object,
            another ``format``, or an invalid entry (each problem listed, entry index first).
    """
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{source}: {len(text)} bytes is over the {MAX_MANIFEST_BYTES}-byte limit")
    try:
        raw = json.loads(text, parse_constant=_not_json)
    except _NotJSON as exc:
        raise ManifestError(f"{source}: not valid JSON: {exc} (save() could not write it back)") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"{source}: not valid JSON (truncated or corrupt?): {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ManifestError(f"{source}: not valid JSON: {type(exc).__name__}") from None
    except ValueError as exc:  # an integer of over 4,300 digits (Python's int_max_str_digits)
        raise ManifestError(f"{source}: not valid JSON: {exc}"[:300]) from None
    if not isinstance(raw, dict):
        raise ManifestError(f"{source}: a manifest is a JSON object, got {type(raw).__name__}")
    fmt = raw.get("format")
    if "format" not in raw:  # `{}`, a /jit document, another tool's JSON
        raise ManifestError(
            f'{source}: not a jitwatch manifest: it has no "format" field ("{FORMAT}" in the files'
            " `jitwatch manifest export` writes)"
        )
    if fmt != FORMAT:
        raise ManifestError(f"{source}: format is {str(fmt)[:60]!r}, expected {FORMAT!r}")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ManifestError(f"{source}: version must be a positive integer, got {str(version)[:30]!r}")
    if version > VERSION:
        raise ManifestVersionError(
            f"{source}: manifest format version {version} was written by a newer jitwatch; "
            f"this jitwatch reads versions up to {VERSION} (upgrade jitwatch or re-export the manifest)"
        )
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors(include_url=False)[:10]
        )
        more = f" (+{exc.error_count() - 10} more)" if exc.error_count() > 10 else ""
        raise ManifestError(f"{source}: invalid manifest: {problems}{more}") from None
    except RecursionError:
        raise ManifestError(f"{source}: invalid manifest: a value is nested too deeply to read") from None
    try:
        verify(manifest, key, source=source)
    except ManifestError:
        raise
    except (ValueError, RecursionError) as exc:  # pydantic's "Maximum serialization depth exceeded"
        raise ManifestError(
            f"{source}: invalid manifest: a value is nested too deeply to check its digest ({exc})"[:300]
        ) from None
    return manifest


def load(path: str | os.PathLike[str], *, key: bytes | None = None) -> Manifest:
    """Read and validate a manifest file (see :func:`loads` for the errors; ``OSError`` → ManifestError)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_MANIFEST_BYTES:
            raise ManifestError(f"{p}: {size} bytes is over the {MAX_MANIFEST_BYTES}-byte limit")
        with p.open("rb") as f:
            # st_size is 0 for a device, a pipe or a /proc file: read at most one byte over the limit
            # (/dev/zero was read until memory ran out), and loads refuses that
            data = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise ManifestError(f"{p}: cannot read manifest: {exc.strerror or exc}") from None
    return loads(data, source=str(p), key=key)


def export(
    journal_dir: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    all_phases: bool = False,
    allow: Sequence[str] = (),
    rank: int | None = None,
    key: bytes | None = None,
) -> tuple[Manifest, dict[str, str]]:
    """``jitwatch manifest export``: journal → manifest file.

    Records serving-phase compiles (every phase with ``all_phases``), leaves out what replay would
    refuse (:func:`screen`: refused compile options, ``__main__`` kernels) and what it could not
    replay (other backends' compiles; listener-only Triton compiles, :class:`LeftOut`), fills missing source
    hashes by importing kernels under ``allow`` (:func:`resolve_sources`), seals it (digest, and
    HMAC with ``key``) and writes ``output`` atomically. Returns the manifest and
    ``{kernel (and key, for a left-out entry): why}``.

    Raises:
        FileNotFoundError: no journal in ``journal_dir``.
        jitwatch.store.journal.JournalCorruptError: the journal is unreadable.
    """
    manifest, problems = build(journal_dir, all_phases=all_phases, allow=allow, rank=rank)
    save(manifest, output, key=key)
    return manifest, problems


def build(
    journal_dir: str | os.PathLike[str],
    *,
    all_phases: bool = False,
    allow: Sequence[str] = (),
    rank: int | None = None,
) -> tuple[Manifest, dict[str, str]]:
    """:func:`export` without the file: the manifest (screened, see :func:`screen`) and
    ``{kernel (and key, for a left-out entry): why}`` (what ``jitwatch manifest export`` writes to a
    directory or Redis store). Same errors."""
    left = LeftOut()
    with Journal(journal_dir, readonly=True) as journal:
        manifest = record_from_journal(
            journal, phases=None if all_phases else (Phase.SERVING,), rank=rank, left_out=left
        )
        others: dict[str, int] = {}
        for row in journal.stats():  # compiles of backends a manifest cannot replay, by backend
            if row.kind == EventKind.COMPILE.value and row.backend != "triton" and (rank is None or row.rank == rank):
                if all_phases or row.phase == Phase.SERVING:
                    others[row.backend] = others.get(row.backend, 0) + row.count
    problems = screen(manifest)
    for backend, n in sorted(others.items()):
        problems[f"{backend} compiles"] = (
            f"left out ({n}): manifests record and replay Triton kernels only; "
            f"docs/backends/ says how to warm {backend}"
        )
    for kernel, keys in sorted(left.listener_only.items()):
        problems[f"{kernel} (listener-only)"] = (
            f"left out ({plural(sum(keys.values()), 'compile')}, {plural(len(keys), 'key')}): Triton reported "
            "it only through its compilation listener (a direct triton.compile, as Inductor compiles its "
            "kernels), without a specialization a manifest can replay; warm it by running that code path in warmup "
            "(the torch.compile'd model, the triton.compile call)"
        )
    for kernel, n in sorted(left.unreplayable.items()):
        problems[f"{kernel} (no specialization data)"] = (
            f"left out ({plural(n, 'compile')}): the journaled events carry no replayable specialization_data"
        )
    for kernel, why in (resolve_sources(manifest, allow) if allow else {}).items():
        problems[kernel] = f"no source hash: {why}"
    return manifest, problems
