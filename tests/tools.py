"""Tests that need an external tool (Prometheus, promtool, redis-server, the Grafana SDK).

``make test-core`` (what CI runs, after ``make tools`` installed them) sets
``JITWATCH_TEST_TOOLS_REQUIRED=1``: a missing tool then *fails* the test instead of skipping it,
so an install step that silently produced nothing cannot turn a tier green. Run by hand without
the variable, such tests skip with the install hint.
"""

from __future__ import annotations

import os

import pytest

REQUIRED_ENV = "JITWATCH_TEST_TOOLS_REQUIRED"


def tool_missing(reason: str) -> None:
    """Skip the test for ``reason``, or fail it when ``JITWATCH_TEST_TOOLS_REQUIRED=1``. Never returns."""
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRED_ENV}=1: make test-core needs every tool)", pytrace=False)
    pytest.skip(reason)
