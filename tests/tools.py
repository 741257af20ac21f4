"""Tests that need an external tool (Prometheus, promtool, redis-server, the Grafana SDK).

``make test-core`` (what CI runs, after ``make tools`` installed them) sets
``JITWATCH_TEST_TOOLS_REQUIRED=1``: a missing tool then *fails* the test instead of skipping it,
so an install step that silently produced nothing cannot turn a tier green. Run by hand without
the variable, such tests skip with the install hint. A module that needs a tool's Python package
at import time uses :func:`tool_module` (``pytest.importorskip`` would skip the whole module
whatever the variable says).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import threading
from collections.abc import Iterator
from types import ModuleType

import pytest

REQUIRED_ENV = "JITWATCH_TEST_TOOLS_REQUIRED"


def tool_missing(reason: str) -> None:
    """Skip the test for ``reason``, or fail it when ``JITWATCH_TEST_TOOLS_REQUIRED=1``. Never returns."""
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRED_ENV}=1: make test-core needs every tool)", pytrace=False)
    pytest.skip(reason)


def tool_module(name: str, reason: str) -> ModuleType:
    """``import name`` for a module-level need (the Grafana SDK): the module, or — when it is not
    installed (``ModuleNotFoundError``) — the whole test module skipped for ``reason``, or failed
    at collection when ``JITWATCH_TEST_TOOLS_REQUIRED=1``."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        why = f"{reason}: {exc}"
        if os.environ.get(REQUIRED_ENV) == "1":
            pytest.fail(f"{why} ({REQUIRED_ENV}=1: make test-core needs every tool)", pytrace=False)
        pytest.skip(why, allow_module_level=True)


@contextlib.contextmanager
def not_redis_peer() -> Iterator[int]:
    """A real TCP server on 127.0.0.1 that is no Redis server: it answers ``+OK`` to whatever it
    reads (so redis-py's connection handshake reads an answer no Redis gives). Yields its port;
    closed on exit."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer_ok() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                while conn.recv(65536):
                    conn.sendall(b"+OK\r\n")

    threading.Thread(target=answer_ok, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
