"""Reading values back from the journal defensively.

The journal is a file other processes (and people, and other jitwatch versions) can write. SQLite
columns have affinities, not types: a ``REAL`` column can hold ``'slow'``, ``9e999`` (inf) or
``-3``; a ``phase`` column can hold ``'bogus'``. Every reader in :class:`~jitwatch.store.journal.Journal`
passes such values through these helpers: a value that does not make sense makes its *row*
skipped (counted in ``Journal.skipped_rows`` and the process's ``jitwatch_journal_skipped_rows_total``,
logged once per connection), never a 500 from the
sidecar, never a metric sample the Prometheus/OpenMetrics parsers reject (negative or non-finite
counters), never a crash of ``jitwatch status``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from jitwatch.core.events import EventKind, Phase

INT64_MAX = 2**63 - 1
MAX_RANK = 2**31 - 1


def count(v: Any) -> int | None:
    """A non-negative integer (an integral finite float is accepted), else ``None``."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if 0 <= v <= INT64_MAX else None
    if isinstance(v, float) and math.isfinite(v) and v >= 0 and v.is_integer():
        return int(v)
    return None


def seconds(v: Any, *, negative: float | None = None) -> float | None:
    """A finite, non-negative number of seconds, else ``None``; a finite negative one is
    ``negative`` (default ``None``)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        f = float(v)
        if not math.isfinite(f):
            return None
        return f if f >= 0 else negative
    return None


def timestamp(v: Any) -> float | None:
    """A finite Unix time (seconds, ≥ 0), else ``None``."""
    return seconds(v)


def rank(v: Any, *, allow_journal_wide: bool = False) -> int | None:
    """A rank in ``0 … 2**31-1`` (``-1`` too where the journal uses it for journal-wide rows)."""
    if isinstance(v, int) and not isinstance(v, bool):
        lo = -1 if allow_journal_wide else 0
        return v if lo <= v <= MAX_RANK else None
    return None


def phase(v: Any) -> Phase | None:
    try:
        return Phase(v)
    except ValueError:
        return None


def kind(v: Any) -> EventKind | None:
    try:
        return EventKind(v)
    except ValueError:
        return None


def text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def json_object(v: Any) -> dict[str, Any]:
    """``v`` parsed as a JSON object (NaN/Infinity refused), else ``{}``."""
    if not isinstance(v, str):
        return {}
    try:
        out = json.loads(v, parse_constant=_refuse)
    except (ValueError, RecursionError):
        return {}
    return out if isinstance(out, dict) else {}


def _refuse(name: str) -> Any:
    raise ValueError(name)
