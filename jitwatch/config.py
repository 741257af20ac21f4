"""Every ``JITWATCH_*`` environment variable, in one place, parsed once into :class:`Settings`.

Each name is a module-level constant so that code, tests and docs refer to the same string
(the pattern of ``opentelemetry.sdk.environment_variables``). Values are read when a
:class:`Settings` is built (:meth:`Settings.from_env`, once per entry point: ``jitwatch.install``,
the vLLM plugin, the sidecar, each CLI command), never at import time, so tests and vLLM worker
processes that set the environment late still see them. No other module reads a ``JITWATCH_*``
variable. The README's configuration table mirrors this file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TypeVar

from jitwatch.errors import ConfigError

T = TypeVar("T")

JITWATCH_DIR = "JITWATCH_DIR"
"""Journal directory shared by workers and the sidecar. Default: ``$XDG_STATE_HOME/jitwatch``
or ``~/.local/state/jitwatch``."""

JITWATCH_MODE = "JITWATCH_MODE"
"""``off`` / ``warn`` / ``error``: what a serving-phase compile does. Default ``warn``."""

JITWATCH_RANK = "JITWATCH_RANK"
"""Offset added to the worker's global rank, everywhere: the rank is ``JITWATCH_RANK`` plus the
host's own (vLLM's global rank in the plugin; else ``RANK``, else ``LOCAL_RANK``, else 0). With no
host rank it is the rank itself; with one it keeps independent jobs (two vLLM engines) that share a
journal apart. Default 0."""

JITWATCH_TP_RANK = "JITWATCH_TP_RANK"
JITWATCH_PP_RANK = "JITWATCH_PP_RANK"
JITWATCH_DP_RANK = "JITWATCH_DP_RANK"
"""Tensor-, pipeline- and data-parallel ranks, when the host framework does not pass them."""

JITWATCH_HOST = "JITWATCH_HOST"
"""Sidecar bind address. Default ``127.0.0.1``."""

JITWATCH_PORT = "JITWATCH_PORT"
"""Sidecar port. Default ``9400``."""

JITWATCH_TOKEN = "JITWATCH_TOKEN"
"""Optional bearer token for every sidecar endpoint except ``/livez`` and ``/readyz``."""

JITWATCH_RETENTION_EVENTS = "JITWATCH_RETENTION_EVENTS"
"""Most events kept in the journal's event log (oldest retired first). Default 100000."""

JITWATCH_RETENTION_SECONDS = "JITWATCH_RETENTION_SECONDS"
"""Oldest event age kept, in seconds. Default 604800 (7 days)."""

JITWATCH_MAX_KERNELS = "JITWATCH_MAX_KERNELS"
"""Most distinct ``kernel`` label values in metrics; later kernels are folded into
``kernel="_other"``. Default 500."""

JITWATCH_QUEUE_SIZE = "JITWATCH_QUEUE_SIZE"
"""Events buffered in a worker before the journal writer drops (and counts) new ones. Default 10000."""

JITWATCH_TARGET_ARCH = "JITWATCH_TARGET_ARCH"
"""CUDA compute capability for compile-only mode, e.g. ``90`` for sm_90 (H100/H200). Default 90."""

JITWATCH_MANIFEST = "JITWATCH_MANIFEST"
"""Warmup manifest replayed during warmup (vLLM plugin)."""

JITWATCH_SLOT_MAPPING_WARMUP = "JITWATCH_SLOT_MAPPING_WARMUP"
"""``auto`` / ``on`` / ``off``: the vLLM plugin's slot-mapping warmup. Default ``auto``."""

JITWATCH_MANIFEST_ALLOW = "JITWATCH_MANIFEST_ALLOW"
"""Comma-separated module prefixes manifest replay may import (e.g. ``vllm,my_kernels``). Unset: only
kernels whose modules are already imported are replayed."""

JITWATCH_MANIFEST_KEY = "JITWATCH_MANIFEST_KEY"
"""Secret (at least 16 bytes of UTF-8) for manifest HMACs: ``manifest export`` signs with it, and
replay (CLI and ``JITWATCH_MANIFEST``) then refuses a manifest without a valid HMAC. Unset: manifests
carry a SHA-256 digest only (see docs/security.md)."""

JITWATCH_REPLAY_PARALLEL = "JITWATCH_REPLAY_PARALLEL"
"""``auto`` / ``serial`` / ``threads`` / ``processes``: how replay compiles. Default ``auto`` (threads)."""

JITWATCH_REPLAY_WORKERS = "JITWATCH_REPLAY_WORKERS"
"""Replay pool size. Default: the CPU count (at most 8)."""

JITWATCH_HEARTBEAT_SECONDS = "JITWATCH_HEARTBEAT_SECONDS"
"""Seconds between a worker's liveness heartbeats (its journal writer thread updates the worker
row's ``last_ts``). ``0`` turns the heartbeat off (the sidecar then never reports that worker
stale); compiles in flight are journaled all the same. Default 10."""

JITWATCH_BACKENDS = "JITWATCH_BACKENDS"
"""Comma-separated JIT backends to watch (``triton``, or a third-party backend's entry-point name),
``all`` (every available backend: the default) or ``none`` (phases and requests only). A backend
whose library is not installed is skipped at no cost; an unknown name is an error."""

JITWATCH_STALE_SECONDS = "JITWATCH_STALE_SECONDS"
"""Sidecar: a rank whose latest worker heartbeats but was last seen longer ago than this is
``stale`` and not ready. ``0`` turns the check off. Default 60 (6 times the default heartbeat)."""

JITWATCH_EVENTS_EXPORTER = "JITWATCH_EVENTS_EXPORTER"
"""``otlp`` / ``none``: export every journal event as an OpenTelemetry log record (OTLP/HTTP, from
the journal writer thread; endpoint, headers and timeout from the standard ``OTEL_EXPORTER_OTLP_*``
variables). Default ``none``: opt in, since a fleet's event stream is sized separately from its
traces (docs/fleet.md)."""

JITWATCH_ALLOWED_HOSTS = "JITWATCH_ALLOWED_HOSTS"
"""Sidecar without a token: extra ``Host`` header names accepted, comma-separated (``*``: any).
IP literals, ``localhost`` and the bind address are always accepted; other DNS names get 421
(a DNS-rebinding guard). Ignored when a token is set."""

JITWATCH_READ_TIMEOUT_SECONDS = "JITWATCH_READ_TIMEOUT_SECONDS"
"""Sidecar: longest a journal read may take before the endpoint answers 503. Default 5."""

JITWATCH_HEADER_TIMEOUT_SECONDS = "JITWATCH_HEADER_TIMEOUT_SECONDS"
"""Sidecar: longest a client may take to send a request's headers before the connection is
closed (``0``: no limit). Default 10."""

JITWATCH_SEND_TIMEOUT_SECONDS = "JITWATCH_SEND_TIMEOUT_SECONDS"
"""Sidecar: longest a client may leave a response it asked for unread (no byte of it taken) before
the connection is aborted and the unsent bytes freed (``0``: no limit). Default 30."""

JITWATCH_MAX_CONNECTIONS = "JITWATCH_MAX_CONNECTIONS"
"""Sidecar: most open client connections (more are closed at once; capped below the open-file
limit). Default 256."""

JITWATCH_COLLECTIVE_DEADLINE_S = "JITWATCH_COLLECTIVE_DEADLINE_S"
"""Seconds a rank may spend in one compile before its peers, waiting in a collective, hit their
deadline (exported as ``jitwatch_collective_deadline_seconds``; the
``JitwatchCompileNearCollectiveDeadline`` alert fires at half of it). Default: the smallest of
``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` (vLLM's execute-model RPC deadline) and
``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` (PyTorch's NCCL watchdog) that is set, else 300 when vLLM is
the host (``VLLM_*`` variables present), else 600 (NCCL's default process-group timeout)."""

COLLECTIVE_DEADLINE_SOURCES = ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC")
"""Other frameworks' variables the collective deadline defaults from (read here only)."""
DEFAULT_COLLECTIVE_DEADLINE_S = 600.0
DEFAULT_VLLM_COLLECTIVE_DEADLINE_S = 300.0

ALL_VARIABLES = (
    JITWATCH_ALLOWED_HOSTS,
    JITWATCH_READ_TIMEOUT_SECONDS,
    JITWATCH_HEADER_TIMEOUT_SECONDS,
    JITWATCH_SEND_TIMEOUT_SECONDS,
    JITWATCH_MAX_CONNECTIONS,
    JITWATCH_DIR,
    JITWATCH_MODE,
    JITWATCH_RANK,
    JITWATCH_TP_RANK,
    JITWATCH_PP_RANK,
    JITWATCH_DP_RANK,
    JITWATCH_HOST,
    JITWATCH_PORT,
    JITWATCH_TOKEN,
    JITWATCH_RETENTION_EVENTS,
    JITWATCH_RETENTION_SECONDS,
    JITWATCH_MAX_KERNELS,
    JITWATCH_QUEUE_SIZE,
    JITWATCH_TARGET_ARCH,
    JITWATCH_MANIFEST,
    JITWATCH_MANIFEST_ALLOW,
    JITWATCH_MANIFEST_KEY,
    JITWATCH_REPLAY_PARALLEL,
    JITWATCH_REPLAY_WORKERS,
    JITWATCH_SLOT_MAPPING_WARMUP,
    JITWATCH_HEARTBEAT_SECONDS,
    JITWATCH_STALE_SECONDS,
    JITWATCH_BACKENDS,
    JITWATCH_EVENTS_EXPORTER,
    JITWATCH_COLLECTIVE_DEADLINE_S,
)

SIDECAR_ONLY_VARIABLES = (
    JITWATCH_HOST,
    JITWATCH_PORT,
    JITWATCH_TOKEN,
    JITWATCH_STALE_SECONDS,
    JITWATCH_ALLOWED_HOSTS,
    JITWATCH_READ_TIMEOUT_SECONDS,
    JITWATCH_HEADER_TIMEOUT_SECONDS,
    JITWATCH_SEND_TIMEOUT_SECONDS,
    JITWATCH_MAX_CONNECTIONS,
)
"""Read by the sidecar and ``jitwatch status`` only: a worker (``install()``, the vLLM plugin) does
not stop for a bad value of one of these."""

WORKER_VARIABLES = (*(v for v in ALL_VARIABLES if v not in SIDECAR_ONLY_VARIABLES), "RANK", "LOCAL_RANK")
"""What a worker reads (see :meth:`Settings.for_worker`)."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9400
DEFAULT_RETENTION_EVENTS = 100_000
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600
DEFAULT_MAX_KERNELS = 500
DEFAULT_QUEUE_SIZE = 10_000
DEFAULT_TARGET_ARCH = 90
DEFAULT_HEARTBEAT_SECONDS = 10.0
DEFAULT_STALE_SECONDS = 60.0
DEFAULT_READ_TIMEOUT_SECONDS = 5.0
DEFAULT_HEADER_TIMEOUT_SECONDS = 10.0
DEFAULT_SEND_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_CONNECTIONS = 256


class Mode(str, Enum):
    """What a serving-phase compile does.

    ``off``: nothing is installed or recorded. ``warn``: recorded, and logged once per kernel and
    specialization key. ``error``: recorded, then ``RuntimeError`` is raised from Triton's
    ``jit_post_compile_hook`` (the same point vLLM's own ``--jit-monitor-mode error`` uses).
    """

    OFF = "off"
    WARN = "warn"
    ERROR = "error"


REPLAY_PARALLEL_CHOICES = ("auto", "serial", "threads", "processes")
SLOT_MAPPING_WARMUP_CHOICES = ("auto", "on", "off")
EVENTS_EXPORTER_CHOICES = ("none", "otlp")


def _int(
    env: dict[str, str] | os._Environ[str], name: str, default: int, minimum: int = 0, maximum: int | None = None
) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigError(f"{name}={value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}={value} is above the maximum {maximum}")
    return value


def _float(env: dict[str, str] | os._Environ[str], name: str, default: float, minimum: float = 0.0) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value < minimum:
        raise ConfigError(f"{name}={raw!r}: expected a finite number >= {minimum:g}")
    return value


def _given(env: dict[str, str] | os._Environ[str], name: str) -> bool:
    """Whether ``name`` is set to something other than blank: an empty value or only whitespace
    counts as unset, as for every other variable (the numbers, the choices, ``JITWATCH_MANIFEST``)."""
    return bool((env.get(name) or "").strip())


def journal_dir_value(raw: str | None, name: str = JITWATCH_DIR) -> Path | None:
    """A journal directory as written in ``JITWATCH_DIR`` or the CLI's ``--journal-dir``, read the
    same way for both: without the whitespace around it, ``~`` expanded; ``None`` (unset: the next
    source decides) for ``None``, empty or only whitespace.

    Raises:
        ConfigError: a ``~`` that cannot be expanded (``~nosuchuser/x``, or ``~`` with no home
            directory), naming ``name`` (``JITWATCH_DIR`` or ``--journal-dir``) and the value.
    """
    text = (raw or "").strip()
    return expand_home(text, name) if text else None


def expand_home(text: str, name: str) -> Path:
    """``Path(text).expanduser()``, its ``RuntimeError`` (no such user, no home directory) turned
    into :class:`ConfigError` naming ``name`` and ``text``: one line for the CLI, the
    :class:`ConfigError` ``install()`` raises for any unusable variable, not a traceback."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        user = text.split("/", 1)[0]
        raise ConfigError(
            f"{name}={text!r}: cannot expand {user}: "
            + (f"no user {user[1:]!r}" if user != "~" else "no home directory (HOME unset, no passwd entry)")
        ) from None


def default_journal_dir(env: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """``$JITWATCH_DIR``, else ``$XDG_STATE_HOME/jitwatch``, else ``~/.local/state/jitwatch``
    (``JITWATCH_DIR`` is read without the whitespace around it, as ``JITWATCH_MANIFEST`` is: empty or
    only spaces counts as unset; so is ``XDG_STATE_HOME``, and a relative one is ignored, as the XDG
    spec says: never a journal relative to a worker's working directory).

    With no home directory (some containers): ``$XDG_RUNTIME_DIR/jitwatch`` (a per-user 0700
    directory by the XDG spec), else ``<tempdir>/jitwatch-<uid>``. That last name is predictable,
    so the journal writer creates it with ``os.mkdir(..., 0o700)`` and refuses it when it already
    exists owned by someone else or as a replaceable symlink
    (:func:`jitwatch.store.safety.prepare_writer_dir`): another user can at worst stop jitwatch
    writing there (it says so), never read or redirect the journal.

    Raises :class:`ConfigError` for a ``JITWATCH_DIR`` whose ``~`` cannot be expanded
    (:func:`journal_dir_value`)."""
    env = os.environ if env is None else env
    given = journal_dir_value(env.get(JITWATCH_DIR))
    if given is not None:
        return given
    state = (env.get("XDG_STATE_HOME") or "").strip()
    if not Path(state).is_absolute():  # blank or relative: invalid by the XDG spec, ignored
        try:
            state = str(Path.home() / ".local" / "state")
        except RuntimeError:  # no home directory (some containers)
            runtime = env.get("XDG_RUNTIME_DIR")
            if runtime and Path(runtime).is_absolute():
                return Path(runtime) / "jitwatch"
            import tempfile

            return Path(tempfile.gettempdir()) / f"jitwatch-{os.getuid() if hasattr(os, 'getuid') else 0}"
    return Path(state) / "jitwatch"


def parse_mode(raw: str | Mode | None) -> Mode:
    """Parse ``off``/``warn``/``error`` (case-insensitive). Raises :class:`ConfigError` otherwise."""
    if isinstance(raw, Mode):
        return raw
    if raw is None or raw.strip() == "":
        return Mode.WARN
    try:
        return Mode(raw.strip().lower())
    except ValueError:
        raise ConfigError(f"{JITWATCH_MODE}={raw!r}: expected one of off, warn, error") from None


def mode_from_env(env: dict[str, str] | os._Environ[str] | None = None) -> Mode | None:
    """``JITWATCH_MODE`` alone, or ``None`` when it is unusable: for a caller that must decide
    whether to raise while reporting that *another* variable is unusable."""
    env = os.environ if env is None else env
    try:
        return parse_mode(env.get(JITWATCH_MODE))
    except ConfigError:
        return None


def _optional_int(env: dict[str, str] | os._Environ[str], name: str, *, minimum: int | None = 0) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} is negative" if minimum == 0 else f"{name}={value} is below {minimum}")
    if value > MAX_RANK:
        raise ConfigError(f"{name}={value} is above the maximum {MAX_RANK}")
    return value


def _choice(env: dict[str, str] | os._Environ[str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw not in choices:
        raise ConfigError(f"{name}={env.get(name)!r}: expected one of {', '.join(choices)}")
    return raw


def _names(env: dict[str, str] | os._Environ[str], name: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.strip() for p in (env.get(name) or "").split(",") if p.strip()))


MIN_MANIFEST_KEY_BYTES = 16


def _secret(env: dict[str, str] | os._Environ[str], name: str) -> bytes | None:
    raw = env.get(name)
    if not raw:
        return None
    data = raw.encode("utf-8", "surrogateescape")
    if len(data) < MIN_MANIFEST_KEY_BYTES:
        raise ConfigError(f"{name} is {len(data)} bytes long: use at least {MIN_MANIFEST_KEY_BYTES} random bytes")
    return data


BACKEND_NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
"""What a backend's name looks like (its ``Backend.name``, a metric label value): the one rule for
``JITWATCH_BACKENDS`` and the filters by backend, the sidecar's ``?backend=`` and ``jitwatch why
--backend``, which refuse anything else (422, exit 2). Case-sensitive: ``Triton`` is refused
everywhere, with ``triton`` suggested. Re-exported by :mod:`jitwatch.backends.base`."""
BACKEND_NAME_MAX_LENGTH = 64
"""Longest backend name accepted."""


def backend_name_ok(name: str) -> bool:
    """Whether ``name`` follows :data:`BACKEND_NAME_PATTERN` and :data:`BACKEND_NAME_MAX_LENGTH`."""
    import re

    return len(name) <= BACKEND_NAME_MAX_LENGTH and re.fullmatch(BACKEND_NAME_PATTERN, name) is not None


def parse_backends(raw: str | None) -> tuple[str, ...] | None:
    """``JITWATCH_BACKENDS`` → backend names, ``None`` for ``all`` (or unset), ``()`` for ``none``.

    The words ``all`` and ``none`` are case-insensitive (like every choice variable's words);
    backend names are not: they must be spelled as ``/jit`` and the filters spell them
    (:data:`BACKEND_NAME_PATTERN`).

    Raises:
        ConfigError: a value of only commas (``,``: no name; ``none`` is the word for none), or
            a name that is not a backend name (``Triton``, ``my-dsl``); the message
            suggests the lower-case value when that one would be accepted. Whether a well-formed
            name is a *known* backend is the registry's to say (:func:`jitwatch.backends.check_names`).
    """
    text = (raw or "").strip()
    if text.lower() in ("", "all"):
        return None
    if text.lower() == "none":
        return ()
    names = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not names:  # "," or " , ": was () (none) silently, e.g. a template "${A},${B}" whose names were empty
        raise ConfigError(
            f"{JITWATCH_BACKENDS}={raw!r} names no backend: give names (triton,torch_compile), none to watch"
            " none, or all (or leave it unset) for every installed one"
        )
    for n in names:
        if not backend_name_ok(n):
            lower = tuple(dict.fromkeys(m.lower() for m in names))
            hint = f"; did you mean {JITWATCH_BACKENDS}={','.join(lower)}?" if all(map(backend_name_ok, lower)) else ""
            raise ConfigError(
                f"{JITWATCH_BACKENDS}={raw!r}: {n!r} is not a backend name: lower-case letters, digits and _,"
                f" starting with a letter, at most {BACKEND_NAME_MAX_LENGTH} characters (e.g. triton,"
                f" torch_compile){hint}"
            )
    return names


MAX_RANK = 2**31 - 1
"""Largest rank accepted (ranks are stored as SQLite integers and Prometheus label values)."""


def collective_deadline(env: dict[str, str] | os._Environ[str]) -> tuple[float, str]:
    """``(seconds, source)`` of the collective deadline (see :data:`JITWATCH_COLLECTIVE_DEADLINE_S`).

    Raises :class:`ConfigError` for a value that is not a positive number."""
    if (env.get(JITWATCH_COLLECTIVE_DEADLINE_S) or "").strip():
        value = _float(env, JITWATCH_COLLECTIVE_DEADLINE_S, DEFAULT_COLLECTIVE_DEADLINE_S)
        if value <= 0:
            raise ConfigError(f"{JITWATCH_COLLECTIVE_DEADLINE_S} must be > 0 seconds, got {value}")
        return value, JITWATCH_COLLECTIVE_DEADLINE_S
    found: list[tuple[float, str]] = []
    for name in COLLECTIVE_DEADLINE_SOURCES:
        if (env.get(name) or "").strip():
            value = _float(env, name, 0.0)
            if value > 0:
                found.append((value, name))
    if found:
        return min(found)
    if any(k.startswith("VLLM_") for k in env):
        return DEFAULT_VLLM_COLLECTIVE_DEADLINE_S, "default (vLLM)"
    return DEFAULT_COLLECTIVE_DEADLINE_S, "default"


@dataclass(frozen=True)
class Settings:
    """jitwatch's configuration, read from the environment by :meth:`from_env`.

    Every field maps to one variable (see the module constants); ``rank_offset`` is
    ``JITWATCH_RANK``; ``env_rank`` and ``local_rank`` are the launcher's ``RANK`` and
    ``LOCAL_RANK``, read here too so that nothing else parses the environment.
    """

    journal_dir: Path
    mode: Mode = Mode.WARN
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = None
    retention_events: int = DEFAULT_RETENTION_EVENTS
    retention_seconds: int = DEFAULT_RETENTION_SECONDS
    max_kernels: int = DEFAULT_MAX_KERNELS
    queue_size: int = DEFAULT_QUEUE_SIZE
    target_arch: int = DEFAULT_TARGET_ARCH
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    stale_seconds: float = DEFAULT_STALE_SECONDS
    backends: tuple[str, ...] | None = None
    """``None``: every available backend; ``()``: none."""
    rank_offset: int = 0
    env_rank: int | None = None
    local_rank: int | None = None
    tp_rank: int | None = None
    pp_rank: int | None = None
    dp_rank: int | None = None
    manifest: Path | None = None
    manifest_allow: tuple[str, ...] = ()
    manifest_key: bytes | None = None
    """``JITWATCH_MANIFEST_KEY`` as UTF-8 bytes."""
    replay_parallel: str = "auto"
    replay_workers: int | None = None
    slot_mapping_warmup: str = "auto"
    events_exporter: str = "none"
    """``JITWATCH_EVENTS_EXPORTER``: ``none`` or ``otlp``."""
    errors: tuple[tuple[str, str], ...] = ()
    """``(variable, message)`` for each unusable variable, only with ``from_env(strict=False)``."""
    journal_dir_source: str = "unset"
    """How ``JITWATCH_DIR`` gave :attr:`journal_dir`: ``set`` (its value), ``empty`` (set to ``""``
    or only whitespace: the default, as when ``unset``) or ``unset``; the CLI says which journal it
    read from this."""
    collective_deadline_s: float = DEFAULT_COLLECTIVE_DEADLINE_S
    collective_deadline_source: str = "default"
    """Where :attr:`collective_deadline_s` came from: a variable's name or ``default``."""
    allowed_hosts: tuple[str, ...] = ()
    read_timeout_seconds: float = DEFAULT_READ_TIMEOUT_SECONDS
    header_timeout_seconds: float = DEFAULT_HEADER_TIMEOUT_SECONDS
    send_timeout_seconds: float = DEFAULT_SEND_TIMEOUT_SECONDS
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str] | None = None, *, strict: bool = True) -> Settings:
        """Build settings from ``env`` (default ``os.environ``).

        ``strict`` (the default: ``install()``, the vLLM plugin, the sidecar): raises
        :class:`ConfigError` naming the first variable whose value cannot be used. ``strict=False``
        (the CLI): an unusable variable takes its default and its error is kept in :attr:`errors`,
        raised by :meth:`require` only for a command that uses that variable — so
        ``JITWATCH_MODE=loud`` does not stop ``jitwatch status``, which never reads the mode.
        """
        env = os.environ if env is None else env
        errors: dict[str, str] = {}

        def get(name: str, parse: Callable[[], T], default: T) -> T:
            try:
                return parse()
            except ConfigError as exc:
                if strict:
                    raise
                errors.setdefault(name, str(exc))
                return default

        manifest = (env.get(JITWATCH_MANIFEST) or "").strip()
        deadline, deadline_source = get(
            JITWATCH_COLLECTIVE_DEADLINE_S,
            lambda: collective_deadline(env),
            (DEFAULT_COLLECTIVE_DEADLINE_S, "default"),
        )
        return cls(
            # An unusable JITWATCH_DIR (~nosuchuser/x) reads as unset when not strict; require() says why.
            journal_dir=get(
                JITWATCH_DIR,
                lambda: default_journal_dir(env),
                default_journal_dir({k: v for k, v in env.items() if k != JITWATCH_DIR}),
            ),
            journal_dir_source="set"
            if _given(env, JITWATCH_DIR)
            else "unset"
            if env.get(JITWATCH_DIR) is None
            else "empty",
            mode=get(JITWATCH_MODE, lambda: parse_mode(env.get(JITWATCH_MODE)), Mode.WARN),
            host=(env.get(JITWATCH_HOST) or "").strip() or DEFAULT_HOST,  # as JITWATCH_DIR: stripped, blank = unset
            port=get(
                JITWATCH_PORT, lambda: _int(env, JITWATCH_PORT, DEFAULT_PORT, minimum=0, maximum=65535), DEFAULT_PORT
            ),
            token=env.get(JITWATCH_TOKEN) or None,
            retention_events=get(
                JITWATCH_RETENTION_EVENTS,
                lambda: _int(env, JITWATCH_RETENTION_EVENTS, DEFAULT_RETENTION_EVENTS, 1),
                DEFAULT_RETENTION_EVENTS,
            ),
            retention_seconds=get(
                JITWATCH_RETENTION_SECONDS,
                lambda: _int(env, JITWATCH_RETENTION_SECONDS, DEFAULT_RETENTION_SECONDS, 1),
                DEFAULT_RETENTION_SECONDS,
            ),
            max_kernels=get(
                JITWATCH_MAX_KERNELS,
                lambda: _int(env, JITWATCH_MAX_KERNELS, DEFAULT_MAX_KERNELS, 1),
                DEFAULT_MAX_KERNELS,
            ),
            queue_size=get(
                JITWATCH_QUEUE_SIZE, lambda: _int(env, JITWATCH_QUEUE_SIZE, DEFAULT_QUEUE_SIZE, 1), DEFAULT_QUEUE_SIZE
            ),
            target_arch=get(
                JITWATCH_TARGET_ARCH,
                lambda: _int(env, JITWATCH_TARGET_ARCH, DEFAULT_TARGET_ARCH, 1),
                DEFAULT_TARGET_ARCH,
            ),
            heartbeat_seconds=get(
                JITWATCH_HEARTBEAT_SECONDS,
                lambda: _float(env, JITWATCH_HEARTBEAT_SECONDS, DEFAULT_HEARTBEAT_SECONDS),
                DEFAULT_HEARTBEAT_SECONDS,
            ),
            stale_seconds=get(
                JITWATCH_STALE_SECONDS,
                lambda: _float(env, JITWATCH_STALE_SECONDS, DEFAULT_STALE_SECONDS),
                DEFAULT_STALE_SECONDS,
            ),
            backends=get(JITWATCH_BACKENDS, lambda: parse_backends(env.get(JITWATCH_BACKENDS)), None),
            rank_offset=get(JITWATCH_RANK, lambda: _optional_int(env, JITWATCH_RANK) or 0, 0),
            env_rank=get("RANK", lambda: _optional_int(env, "RANK"), None),
            local_rank=get("LOCAL_RANK", lambda: _optional_int(env, "LOCAL_RANK"), None),
            tp_rank=get(JITWATCH_TP_RANK, lambda: _optional_int(env, JITWATCH_TP_RANK), None),
            pp_rank=get(JITWATCH_PP_RANK, lambda: _optional_int(env, JITWATCH_PP_RANK), None),
            dp_rank=get(JITWATCH_DP_RANK, lambda: _optional_int(env, JITWATCH_DP_RANK), None),
            manifest=get(JITWATCH_MANIFEST, lambda: expand_home(manifest, JITWATCH_MANIFEST), None)
            if manifest
            else None,
            manifest_allow=_names(env, JITWATCH_MANIFEST_ALLOW),
            manifest_key=get(JITWATCH_MANIFEST_KEY, lambda: _secret(env, JITWATCH_MANIFEST_KEY), None),
            replay_parallel=get(
                JITWATCH_REPLAY_PARALLEL,
                lambda: _choice(env, JITWATCH_REPLAY_PARALLEL, REPLAY_PARALLEL_CHOICES, "auto"),
                "auto",
            ),
            replay_workers=get(
                JITWATCH_REPLAY_WORKERS, lambda: _optional_int(env, JITWATCH_REPLAY_WORKERS, minimum=1), None
            ),
            slot_mapping_warmup=get(
                JITWATCH_SLOT_MAPPING_WARMUP,
                lambda: _choice(env, JITWATCH_SLOT_MAPPING_WARMUP, SLOT_MAPPING_WARMUP_CHOICES, "auto"),
                "auto",
            ),
            events_exporter=get(
                JITWATCH_EVENTS_EXPORTER,
                lambda: _choice(env, JITWATCH_EVENTS_EXPORTER, EVENTS_EXPORTER_CHOICES, "none"),
                "none",
            ),
            collective_deadline_s=deadline,
            collective_deadline_source=deadline_source,
            allowed_hosts=_names(env, JITWATCH_ALLOWED_HOSTS),
            read_timeout_seconds=get(
                JITWATCH_READ_TIMEOUT_SECONDS,
                lambda: _float(env, JITWATCH_READ_TIMEOUT_SECONDS, DEFAULT_READ_TIMEOUT_SECONDS, 0.001),
                DEFAULT_READ_TIMEOUT_SECONDS,
            ),
            header_timeout_seconds=get(
                JITWATCH_HEADER_TIMEOUT_SECONDS,
                lambda: _float(env, JITWATCH_HEADER_TIMEOUT_SECONDS, DEFAULT_HEADER_TIMEOUT_SECONDS),
                DEFAULT_HEADER_TIMEOUT_SECONDS,
            ),
            send_timeout_seconds=get(
                JITWATCH_SEND_TIMEOUT_SECONDS,
                lambda: _float(env, JITWATCH_SEND_TIMEOUT_SECONDS, DEFAULT_SEND_TIMEOUT_SECONDS),
                DEFAULT_SEND_TIMEOUT_SECONDS,
            ),
            max_connections=get(
                JITWATCH_MAX_CONNECTIONS,
                lambda: _int(env, JITWATCH_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS, 1),
                DEFAULT_MAX_CONNECTIONS,
            ),
            errors=tuple(errors.items()),
        )

    @classmethod
    def for_worker(cls, env: dict[str, str] | os._Environ[str] | None = None) -> Settings:
        """:meth:`from_env` for a worker: raises :class:`ConfigError` only for a variable a worker
        reads (:data:`WORKER_VARIABLES`); a bad sidecar-only value (``JITWATCH_PORT=abc``) is left
        to the sidecar to report."""
        return cls.from_env(env, strict=False).require(*WORKER_VARIABLES)

    def require(self, *variables: str) -> Settings:
        """Raise :class:`ConfigError` for the first unusable variable among ``variables`` (all of
        them when none are named) recorded by ``from_env(strict=False)``; return ``self`` otherwise."""
        for name, message in self.errors:
            if not variables or name in variables:
                raise ConfigError(message)
        return self

    def require_all_but(self, *replaced: str) -> Settings:
        """:meth:`require` for every variable except ``replaced``: those an explicit option or
        argument replaces (``jitwatch demo --port`` replaces ``JITWATCH_PORT``), which are not read,
        so a bad value of one is no error. Raises :class:`ConfigError` for the first other unusable
        variable recorded by ``from_env(strict=False)``; returns ``self`` otherwise."""
        for name, message in self.errors:
            if name not in replaced:
                raise ConfigError(message)
        return self

    def rank(self, host_rank: int | None = None) -> int:
        """The global rank: :attr:`rank_offset` (``JITWATCH_RANK``) plus ``host_rank`` (what the
        host framework says, e.g. vLLM's global rank), else ``RANK``, else ``LOCAL_RANK``, else 0.

        Raises :class:`ConfigError` when the sum passes :data:`MAX_RANK` or is negative."""
        base = host_rank if host_rank is not None else self.env_rank if self.env_rank is not None else self.local_rank
        value = self.rank_offset + (base or 0)
        if not 0 <= value <= MAX_RANK:
            raise ConfigError(f"rank {value} ({JITWATCH_RANK}={self.rank_offset} + host rank {base}) is out of range")
        return value
