"""Journal and manifest text made safe to print on a terminal."""

from __future__ import annotations

import time

from jitwatch.text import UNDECODABLE

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}
_CONTROL.update(UNDECODABLE)  # a byte of a file name that is not UTF-8 as \xNN too (jitwatch.text.shown_name)


def plain(text: object) -> str:
    """``str(text)`` with terminal control characters (ESC, other C0/C1 controls, DEL; not tab)
    shown as ``\\xNN``: journal text is data and never drives the terminal. A byte of a path that
    is not UTF-8 (a lone surrogate from ``os.fsdecode``) is shown as ``\\xNN`` too, so the text
    always encodes as UTF-8."""
    return str(text).translate(_CONTROL)


def utc_time(ts: float) -> str:
    """Unix time ``ts`` (seconds) as the CLI's text shows every time: ``2026-12-03 01:07:56 UTC``
    (date, seconds, UTC whatever the local zone: one reading across a fleet)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


__all__ = ["plain", "utc_time"]
