"""Words for counts in the messages jitwatch prints (``1 kernel``, ``2 kernels``), file names
made printable, and jitwatch's loggers, whose every record is one line (:func:`logger`)."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable

# Lone surrogates: a byte that is not UTF-8 in a file name (os.fsdecode's surrogateescape: 0xFF is
# U+DCFF) as that byte, \xff; any other as \udXXX. Written as is, they are an encode error.
UNDECODABLE = {c: f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}" for c in range(0xD800, 0xE000)}
"""A :meth:`str.translate` table: each lone surrogate as the escape :func:`shown_name` prints."""


def shown_name(name: object) -> str:
    """``str(name)`` (a path, e.g.) with each byte that is not UTF-8 shown as ``\\xNN``: a
    directory made by ``mkdir $'jw-\\xff'`` is ``jw-\\udcff`` once decoded (``os.fsdecode``), which
    no UTF-8 output can write; it is shown ``jw-\\xff``. Any other lone surrogate is shown
    ``\\udXXX``. Text without one is returned as is."""
    return str(name).translate(UNDECODABLE)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``"<count> <noun>"``, the noun plural unless ``count`` is 1: ``plural(1, "key")`` is
    ``"1 key"``, ``plural(0, "key")`` is ``"0 keys"``, ``plural(2, "entry", "entries")`` is
    ``"2 entries"``.

    Args:
        count: how many.
        noun: the singular noun.
        nouns: the plural when it is not ``noun + "s"``.
    """
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def jitwatch_command(show_path: Callable[[str], str] = shlex.quote) -> str:
    """The ``jitwatch`` command, runnable in another terminal as printed: ``jitwatch`` when the
    ``jitwatch`` found on ``PATH`` is this interpreter's; else the path of this interpreter's
    ``jitwatch`` script (``make demo`` installs it into ``.venv/bin``, which is not on ``PATH``
    unless the environment is activated); else ``<python> -m jitwatch``. Every command jitwatch
    prints for this machine follows this rule (the demo's summary, the CLI's hints, the fixes of
    ``jitwatch why`` and ``coverage``, the worker's warn line); the sidecar's ``/jit``, read on
    other machines, shows a bare ``jitwatch``.

    Args:
        show_path: how a path is shown, as one shell word (default :func:`shlex.quote`; the
            journal's fixes pass :func:`jitwatch.backends.explain.shell_path`: home as ``~``).

    Only ``shutil.which`` and ``os.path.samefile``, nothing is run. Never raises (an error of
    ``show_path`` aside)."""
    ours = shutil.which("jitwatch", path=os.path.dirname(sys.executable))
    found = shutil.which("jitwatch")
    if ours is None:
        return f"{show_path(sys.executable)} -m jitwatch"
    try:
        if found is not None and os.path.samefile(found, ours):
            return "jitwatch"
    except OSError:
        pass
    return show_path(os.path.abspath(ours))


__all__ = ["UNDECODABLE", "jitwatch_command", "plain", "plural", "shown_name", "utc_time"]


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}
_CONTROL.update(UNDECODABLE)  # a byte of a file name that is not UTF-8 as \xNN too (shown_name)


def plain(text: object) -> str:
    """``str(text)`` with terminal control characters (ESC, other C0/C1 controls, DEL; not tab)
    shown as ``\\xNN``: journal text is data and never drives the terminal. A byte of a path that
    is not UTF-8 (a lone surrogate from ``os.fsdecode``) is shown as ``\\xNN`` too, so the text
    always encodes as UTF-8."""
    return str(text).translate(_CONTROL)


MAX_LOG_LINE = 8000
"""Most characters of one jitwatch log message (:func:`one_line`); a longer one is cut, saying so."""


def one_line(text: object, limit: int = MAX_LOG_LINE) -> str:
    """``str(text)`` as one line of at most ``limit`` characters, for a log message: its lines
    (:meth:`str.splitlines`: ``\\n``, ``\\r``, ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``,
    ``\\x85``, U+2028, U+2029) stripped and joined by ``"; "`` (by a space after a line ending
    in ``:``), blank ones dropped; other control characters shown as ``\\xNN`` (:func:`plain`, tab
    kept); a longer text cut, ending in ``… (N more characters)``. Text from outside (a Dynamo
    guard-failure reason, a kernel name, a key) then cannot split a record into lines or forge
    one that reads as another record."""
    s = str(text)
    if len(s) <= limit and s.isprintable():
        return s
    joined = ""
    for part in s.splitlines():
        part = part.strip()
        if part and joined:
            joined += (" " if joined.endswith(":") else "; ") + part
        elif part:
            joined = part
    s = joined.translate(_CONTROL)
    if len(s) > limit:
        more = f"… ({len(s) - limit + 40} more characters)"
        s = s[: limit - 40] + more
    return s


class OneLineFilter(logging.Filter):
    """Makes a record's message :func:`one_line` (formatted with its arguments); never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format: logging's own handleError reports it
            return True
        line = one_line(msg)
        if line != msg:
            record.msg, record.args = line, None
        return True


_ONE_LINE = OneLineFilter()


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with :class:`OneLineFilter`: every jitwatch module logs through
    one, so each record it writes is one line (line-based log shippers read one record as one)."""
    log = logging.getLogger(name)
    if not any(isinstance(f, OneLineFilter) for f in log.filters):
        log.addFilter(_ONE_LINE)
    return log


def utc_time(ts: float) -> str:
    """Unix time ``ts`` (seconds) as jitwatch's text shows every time: ``2026-12-03 01:07:56 UTC``
    (date, seconds, UTC whatever the local zone: one reading across a fleet)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
