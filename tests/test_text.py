"""jitwatch.text: counts read right in messages ("1 kernel", not "1 kernels")."""

from __future__ import annotations

import pytest

from jitwatch.text import plural


@pytest.mark.parametrize(
    ("count", "noun", "nouns", "expected"),
    [
        (1, "kernel", None, "1 kernel"),
        (0, "kernel", None, "0 kernels"),
        (2, "specialization", None, "2 specializations"),
        (1, "entry", "entries", "1 entry"),
        (12, "entry", "entries", "12 entries"),
        (-1, "key", None, "-1 keys"),
    ],
)
def test_plural(count: int, noun: str, nouns: str | None, expected: str) -> None:
    assert plural(count, noun, nouns) == expected
