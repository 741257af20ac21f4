"""Words for counts in the messages jitwatch prints (``1 kernel``, ``2 kernels``)."""

from __future__ import annotations


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


__all__ = ["plural"]
