"""Remove home directories and user names from strings that leave the process.

Triton specialization keys and ``repr`` strings can hold file paths (``extern_libs`` points at
libdevice inside site-packages, which often lives under a home directory). Anything jitwatch
exports (journal keys, metric labels, span attributes, manifests) goes through :func:`redact`.
"""

from __future__ import annotations

import getpass
import os
import re
from functools import lru_cache
from pathlib import Path

REDACTED_HOME = "~"
REDACTED_USER = "<user>"


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern[str], ...]:
    homes: set[str] = set()
    try:
        homes.add(str(Path.home()))
    except RuntimeError:  # no home directory
        pass
    if os.environ.get("HOME"):
        homes.add(os.environ["HOME"].rstrip("/"))
    homes.discard("")
    homes.discard("/")
    # A home directory only as a whole path component: HOME=/root must not touch /rootfs or /root-old.
    pats = [
        re.compile(r"(?<![\w.\-])" + re.escape(h) + r"(?![^/\s'\",)\]}:;])")
        for h in sorted(homes, key=len, reverse=True)
    ]
    # Any /home/<name> or /Users/<name> prefix, whoever's it is.
    pats.append(re.compile(r"(?<![\w.])/(?:home|Users)/[^/\s'\",)\]}]+"))
    return tuple(pats)


@lru_cache(maxsize=1)
def _user_pattern() -> re.Pattern[str] | None:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return None
    if not user or user == "root" or len(user) < 3:
        return None
    # Only as a whole path component (``/scratch/alice/...``): a user called ``vllm`` or ``triton``
    # must not rename modules and kernels.
    return re.compile(r"(?<=/)" + re.escape(user) + r"(?![^/\s'\",)\]}:;])")


_needles_cache: tuple[object, tuple[str, ...]] | None = None


def _needles() -> tuple[str, ...]:
    """Substrings at least one of which is in any text the regexes would change.

    Recomputed whenever ``_patterns``' cache is (tests clear it after changing ``HOME``).
    """
    global _needles_cache
    pats = _patterns()
    if _needles_cache is not None and _needles_cache[0] is pats:
        return _needles_cache[1]
    homes: set[str] = set()
    try:
        homes.add(str(Path.home()))
    except RuntimeError:
        pass
    if os.environ.get("HOME"):
        homes.add(os.environ["HOME"].rstrip("/"))
    homes.discard("")
    homes.discard("/")
    out = {"/home/", "/Users/", *homes}
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001
        user = ""
    if user and user != "root" and len(user) >= 3:
        out.add("/" + user)
    _needles_cache = (pats, tuple(out))
    return _needles_cache[1]


def _may_need_redaction(text: str) -> bool:
    return any(n in text for n in _needles())


def may_need_redaction(text: str) -> bool:
    """Whether :func:`redact` could change ``text`` or any part of it: ``False`` means no home
    directory, ``/home/``, ``/Users/`` or ``/<user>`` substring occurs in it at all (a cheap
    substring test; ``True`` may be a false alarm)."""
    return _may_need_redaction(text)


def redact(text: str) -> str:
    """Replace home directories with ``~`` and the current user name with ``<user>``.

    ``/home/alice/.venv/lib/libdevice.10.bc`` becomes ``~/.venv/lib/libdevice.10.bc`` (the
    current ``$HOME`` and any ``/home/<name>`` or ``/Users/<name>``, as whole path components).
    The current user name is replaced only as a whole path component
    (``/scratch/alice/x`` → ``/scratch/<user>/x``): kernel and module names that happen to equal
    a user name (``vllm``) stay. ``root`` and names under 3 characters are never replaced.
    Never raises.
    """
    if not text:
        return text
    if not isinstance(text, str):
        text = str(text)
    if not _may_need_redaction(text):
        return text  # fast path: most keys hold no path at all (the regexes cost ~70 µs on 2 KB)
    out = text
    for pat in _patterns():
        out = pat.sub(REDACTED_HOME, out)
    user = _user_pattern()
    if user is not None:
        out = user.sub(REDACTED_USER, out)
    return out
