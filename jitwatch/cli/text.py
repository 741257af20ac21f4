"""Journal and manifest text made safe to print on a terminal (:mod:`jitwatch.text`'s, for the CLI)."""

from __future__ import annotations

from jitwatch.text import plain, utc_time

__all__ = ["plain", "utc_time"]
