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
    pats = [re.compile(re.escape(h) + r"(?=/|\b|$)") for h in sorted(homes, key=len, reverse=True)]
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
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(user) + r"(?![A-Za-z0-9])")


def redact(text: str) -> str:
    """Replace home directories with ``~`` and the current user name with ``<user>``.

    ``/home/alice/.venv/lib/libdevice.10.bc`` becomes ``~/.venv/lib/libdevice.10.bc``. The user
    name is only replaced as a whole word (``root`` and names under 3 characters are left alone:
    they would match unrelated words). Never raises.
    """
    if not text:
        return text
    out = text
    for pat in _patterns():
        out = pat.sub(REDACTED_HOME, out)
    user = _user_pattern()
    if user is not None:
        out = user.sub(REDACTED_USER, out)
    return out
