"""Remove home directories and user names from strings that leave the process.

Triton specialization keys and ``repr`` strings can hold file paths (``extern_libs`` points at
libdevice inside site-packages, which often lives under a home directory). Anything jitwatch
exports (journal keys, metric labels, span attributes, manifests) goes through :func:`redact`.
"""

from __future__ import annotations

import getpass
import json
import os
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

REDACTED_HOME = "~"
REDACTED_USER = "<user>"


def _forms(text: str) -> tuple[str, ...]:
    """``text`` and, when it differs, its form inside a JSON string written by ``json.dumps``'s
    default ``ensure_ascii=True`` (non-ASCII as ``\\uXXXX``): Triton's ``specialization_data`` is
    such JSON, so a home ``/data/josé`` appears in it as ``/data/jos\\u00e9``."""
    escaped = json.dumps(text)[1:-1]
    return (text,) if escaped == text else (text, escaped)


def _homes() -> set[str]:
    """The home directory as ``Path.home()`` and ``$HOME`` name it, and where each resolves to
    (``os.path.realpath``: a home that is a symlink, e.g. into an NFS directory, is named by its
    real path in resolved paths), each also in its :func:`_forms`."""
    homes: set[str] = set()
    try:
        homes.add(str(Path.home()))
    except RuntimeError:  # no home directory
        pass
    if os.environ.get("HOME"):
        homes.add(os.environ["HOME"].rstrip("/"))
    homes.discard("")
    homes.discard("/")
    for h in [h for h in homes if os.path.isabs(h)]:  # a relative $HOME would resolve to the cwd
        try:
            homes.add(os.path.realpath(h))
        except (OSError, ValueError):  # a loop of links, a NUL in $HOME
            pass
    homes.discard("/")
    return {form for h in homes for form in _forms(h)}


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern[str], ...]:
    homes = _homes()
    # A home directory only as a whole path component: HOME=/root must not touch /rootfs or /root-old.
    # Each pattern starts with its literal and checks the character before it with a lookbehind
    # placed after the literal (same matches as a leading ``(?<![\w.\-])``): a pattern that starts
    # with a literal lets ``re`` jump from one occurrence of it to the next instead of trying every
    # position (~100 µs → a few µs on a 1.5 KB specialization holding a home path, 2-core VM).
    pats = [
        re.compile(re.escape(h) + r"(?<![\w.\-]" + re.escape(h) + r")(?![^/\s'\",)\]}:;])")
        for h in sorted(homes, key=len, reverse=True)
    ]
    # Any /home/<name> or /Users/<name> prefix, whoever's it is.
    pats.append(re.compile(r"/(?<![\w.]/)(?:home|Users)/[^/\s'\",)\]}]+"))
    return tuple(pats)


def _user() -> str | None:
    """The current user name when it is redacted: ``None`` for ``root``, a name under 3
    characters, or no passwd entry (some containers)."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return None
    return user if user and user != "root" and len(user) >= 3 else None


@lru_cache(maxsize=1)
def _user_pattern() -> re.Pattern[str] | None:
    user = _user()
    if user is None:
        return None
    # Only as a whole path component (``/scratch/alice/...``): a user called ``vllm`` or ``triton``
    # must not rename modules and kernels.
    return re.compile("|".join(re.escape(u) + r"(?<=/" + re.escape(u) + r")(?![^/\s'\",)\]}:;])" for u in _forms(user)))


_needles_cache: tuple[object, tuple[str, ...], bool, re.Pattern[str]] | None = None


def _needles() -> tuple[str, ...]:
    """Substrings at least one of which is in any text the regexes would change, or in the
    JSON text of a value holding such a text.

    Recomputed whenever ``_patterns``' cache is (tests clear it after changing ``HOME``).
    """
    global _needles_cache
    pats = _patterns()
    if _needles_cache is not None and _needles_cache[0] is pats:
        return _needles_cache[1]
    out = {"/home/", "/Users/", *_homes()}
    user = _user()
    if user is not None:
        out.update("/" + form for form in _forms(user))
    # Callers also test JSON text (``ensure_ascii=False``) of values: a backslash in a value (the
    # ``\\u00e9`` of an ASCII-escaped form) is doubled there, a quote escaped.
    out.update([json.dumps(n, ensure_ascii=False)[1:-1] for n in out])
    needles = tuple(sorted(out))
    search = re.compile("|".join(re.escape(n) for n in needles))  # one pass instead of one per needle
    _needles_cache = (pats, needles, all(n.startswith("/") for n in out), search)
    return _needles_cache[1]


def may_need_redaction(text: str) -> bool:
    """Whether :func:`redact` could change ``text`` or any part of it (``text`` may also be the
    JSON text of values, ``ensure_ascii=False``, as the journal checks it): ``False`` means no home
    directory, ``/home/``, ``/Users/`` or ``/<user>`` substring occurs in it at all (a cheap
    substring test; ``True`` may be a false alarm)."""
    _needles()
    cache = _needles_cache
    assert cache is not None  # set by _needles()
    if cache[2] and "/" not in text:
        return False  # every needle is an absolute path: no "/" at all, nothing to redact (~0.1 µs)
    return cache[3].search(text) is not None  # ~0.8 µs on 1.5 KB, ~2.5 µs for one `in` per needle


def redaction_precheck() -> tuple[bool, Callable[[str], object]]:
    """``(slash_only, search)``: :func:`may_need_redaction` taken apart for a caller that checks
    many texts in a row (the journal's write loop), without two Python calls per text: ``text``
    may need redaction exactly when ``not (slash_only and "/" not in text) and search(text) is not
    None``. For the current patterns: ask again for the next run of texts (``HOME`` may change
    between them)."""
    _needles()
    cache = _needles_cache
    assert cache is not None  # set by _needles()
    return cache[2], cache[3].search


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
    if not may_need_redaction(text):
        return text  # fast path: most keys hold no path at all (the regexes cost ~70 µs on 2 KB)
    out = text
    for pat in _patterns():
        out = pat.sub(REDACTED_HOME, out)
    user = _user_pattern()
    if user is not None:
        out = user.sub(REDACTED_USER, out)
    return out
