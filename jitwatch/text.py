"""Words for counts in the messages jitwatch prints (``1 kernel``, ``2 kernels``), and file names
made printable."""

from __future__ import annotations

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


__all__ = ["UNDECODABLE", "plural", "shown_name"]
