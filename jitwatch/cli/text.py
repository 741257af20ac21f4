"""Journal and manifest text made safe to print on a terminal."""

from __future__ import annotations

import time

from jitwatch.text import plain

__all__ = ["plain", "utc_time"]


def utc_time(ts: float) -> str:
    """Unix time ``ts`` (seconds) as the CLI's text shows every time: ``2026-12-03 01:07:56 UTC``
    (date, seconds, UTC whatever the local zone: one reading across a fleet)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


__all__ = ["plain", "utc_time"]
