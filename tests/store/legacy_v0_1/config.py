"""Every ``JITWATCH_*`` environment variable, in one place.

Each name is a module-level constant so that code, tests and docs refer to the same string
(the pattern of ``opentelemetry.sdk.environment_variables``). Values are read when a
:class:`Settings` is built, never at import time, so tests and vLLM worker processes that set
the environment late still see them. The table in ``docs/configuration.md`` mirrors this file.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

JITWATCH_DIR = "JITWATCH_DIR"
"""Journal directory shared by workers and the sidecar. Default: ``$XDG_STATE_HOME/jitwatch``
or ``~/.local/state/jitwatch``."""

JITWATCH_MODE = "JITWATCH_MODE"
"""``off`` / ``warn`` / ``error``: what a serving-phase compile does. Default ``warn``."""

JITWATCH_RANK = "JITWATCH_RANK"
"""Explicit global rank of this worker; overrides ``RANK`` and ``LOCAL_RANK``."""

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

JITWATCH_REPLAY_PARALLEL = "JITWATCH_REPLAY_PARALLEL"
"""``auto`` / ``serial`` / ``threads`` / ``processes``: how replay compiles. Default ``auto`` (threads)."""

JITWATCH_REPLAY_WORKERS = "JITWATCH_REPLAY_WORKERS"
"""Replay pool size. Default: the CPU count (at most 8)."""

JITWATCH_HEARTBEAT_SECONDS = "JITWATCH_HEARTBEAT_SECONDS"
"""Seconds between a worker's liveness heartbeats (its journal writer thread updates the worker
row's ``last_ts``). ``0`` turns the heartbeat off (the sidecar then never reports that worker
stale). Default 10."""

JITWATCH_STALE_SECONDS = "JITWATCH_STALE_SECONDS"
"""Sidecar: a rank whose latest worker heartbeats but was last seen longer ago than this is
``stale`` and not ready. ``0`` turns the check off. Default 60 (6 times the default heartbeat)."""

ALL_VARIABLES = (
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
    JITWATCH_REPLAY_PARALLEL,
    JITWATCH_REPLAY_WORKERS,
    JITWATCH_SLOT_MAPPING_WARMUP,
    JITWATCH_HEARTBEAT_SECONDS,
    JITWATCH_STALE_SECONDS,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9400
DEFAULT_RETENTION_EVENTS = 100_000
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600
DEFAULT_MAX_KERNELS = 500
DEFAULT_QUEUE_SIZE = 10_000
DEFAULT_TARGET_ARCH = 90
DEFAULT_HEARTBEAT_SECONDS = 10.0
DEFAULT_STALE_SECONDS = 60.0


class Mode(str, Enum):
    """What a serving-phase compile does.

    ``off``: nothing is installed or recorded. ``warn``: recorded, and logged once per kernel and
    specialization key. ``error``: recorded, then ``RuntimeError`` is raised from Triton's
    ``jit_post_compile_hook`` (the same point vLLM's own ``--jit-monitor-mode error`` uses).
    """

    OFF = "off"
    WARN = "warn"
    ERROR = "error"


class ConfigError(ValueError):
    """A ``JITWATCH_*`` variable holds a value jitwatch cannot use; the message names it."""


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


def default_journal_dir(env: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """``$JITWATCH_DIR``, else ``$XDG_STATE_HOME/jitwatch``, else ``~/.local/state/jitwatch``."""
    env = os.environ if env is None else env
    if env.get(JITWATCH_DIR):
        return Path(env[JITWATCH_DIR]).expanduser()
    state = env.get("XDG_STATE_HOME")
    if not state:
        try:
            state = str(Path.home() / ".local" / "state")
        except RuntimeError:  # no home directory (some containers): fall back to the temp dir
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


def _optional_int(env: dict[str, str] | os._Environ[str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None


def detect_rank(env: dict[str, str] | os._Environ[str] | None = None) -> int:
    """Global rank: ``JITWATCH_RANK``, else ``RANK`` (torchrun), else ``LOCAL_RANK``, else 0."""
    env = os.environ if env is None else env
    for name in (JITWATCH_RANK, "RANK", "LOCAL_RANK"):
        value = _optional_int(env, name)
        if value is not None:
            if value < 0:
                raise ConfigError(f"{name}={value} is negative")
            return value
    return 0


def detect_parallel_ranks(env: dict[str, str] | os._Environ[str] | None = None) -> dict[str, int | None]:
    """``{"tp_rank", "pp_rank", "dp_rank", "local_rank"}`` from ``JITWATCH_TP_RANK``,
    ``JITWATCH_PP_RANK``, ``JITWATCH_DP_RANK`` and ``LOCAL_RANK`` (``None`` where unset).

    Raises :class:`ConfigError` for a non-integer or negative value.
    """
    env = os.environ if env is None else env
    out: dict[str, int | None] = {}
    for field_name, var in (
        ("tp_rank", JITWATCH_TP_RANK),
        ("pp_rank", JITWATCH_PP_RANK),
        ("dp_rank", JITWATCH_DP_RANK),
        ("local_rank", "LOCAL_RANK"),
    ):
        value = _optional_int(env, var)
        if value is not None and value < 0:
            raise ConfigError(f"{var}={value} is negative")
        out[field_name] = value
    return out


@dataclass(frozen=True)
class Settings:
    """jitwatch's configuration, read from the environment by :meth:`from_env`."""

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

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str] | None = None) -> Settings:
        """Build settings from ``env`` (default ``os.environ``). Raises :class:`ConfigError`."""
        env = os.environ if env is None else env
        return cls(
            journal_dir=default_journal_dir(env),
            mode=parse_mode(env.get(JITWATCH_MODE)),
            host=env.get(JITWATCH_HOST) or DEFAULT_HOST,
            port=_int(env, JITWATCH_PORT, DEFAULT_PORT, minimum=0, maximum=65535),
            token=env.get(JITWATCH_TOKEN) or None,
            retention_events=_int(env, JITWATCH_RETENTION_EVENTS, DEFAULT_RETENTION_EVENTS, 1),
            retention_seconds=_int(env, JITWATCH_RETENTION_SECONDS, DEFAULT_RETENTION_SECONDS, 1),
            max_kernels=_int(env, JITWATCH_MAX_KERNELS, DEFAULT_MAX_KERNELS, 1),
            queue_size=_int(env, JITWATCH_QUEUE_SIZE, DEFAULT_QUEUE_SIZE, 1),
            target_arch=_int(env, JITWATCH_TARGET_ARCH, DEFAULT_TARGET_ARCH, 1),
            heartbeat_seconds=_float(env, JITWATCH_HEARTBEAT_SECONDS, DEFAULT_HEARTBEAT_SECONDS),
            stale_seconds=_float(env, JITWATCH_STALE_SECONDS, DEFAULT_STALE_SECONDS),
        )
