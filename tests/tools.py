"""Tests that need an external tool (Prometheus, promtool, redis-server, the Grafana SDK).

``make test-core`` (what CI runs, after ``make tools`` installed them) sets
``JITWATCH_TEST_TOOLS_REQUIRED=1``: a missing tool then *fails* the test instead of skipping it,
so an install step that silently produced nothing cannot turn a tier green. Run by hand without
the variable, such tests skip with the install hint. A module that needs a tool's Python package
at import time uses :func:`tool_module` (``pytest.importorskip`` would skip the whole module
whatever the variable says).
"""

from __future__ import annotations

import importlib
import os
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
