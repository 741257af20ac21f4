"""A make-believe JIT library for the out-of-tree backend example: ``compile`` takes a few
milliseconds the first time a (name, shape) is asked for, then hits its in-memory cache."""

from __future__ import annotations

import time

CACHE: dict[tuple[str, tuple[int, ...]], str] = {}


def compile(name: str, shape: tuple[int, ...]) -> str:
    key = (name, tuple(shape))
    if key not in CACHE:
        time.sleep(0.005)  # "code generation"
        CACHE[key] = f"{name}:{'x'.join(map(str, shape))}"
    return CACHE[key]
