"""Shared fixtures: compile-only Triton driver, temporary journal, fresh Triton cache per test,
and a guard that every test leaves Triton's hook slots and the process-wide monitor as it found
them."""

from __future__ import annotations

import ast
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jitwatch
from jitwatch.testing import MonitorHarness, compile_only_driver, monitored

_SLOTS = (
    ("runtime", "jit_cache_hook"),
    ("runtime", "jit_post_compile_hook"),
    ("runtime", "launch_enter_hook"),
    ("runtime", "launch_exit_hook"),
    ("compilation", "listener"),
    ("autotuning", "listener"),
)


def _snapshot() -> dict[tuple[str, str], Any]:
    try:
        import triton
    except ImportError:
        return {}
    knobs = getattr(triton, "knobs", None)
    out = {}
    for group, attr in _SLOTS:
        holder = getattr(knobs, group, None)
        if holder is not None and hasattr(holder, attr):
            out[(group, attr)] = getattr(holder, attr)
    return out


@pytest.fixture(autouse=True)
def _isolated_process_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Reset the process-wide monitor and check Triton's hook slots are restored after each test.
    Each test starts with no backend notice logged yet (they are logged once per process)."""
    from jitwatch.core.monitor import _forget_notices

    _forget_notices()
    for var in ("JITWATCH_RANK", "RANK", "LOCAL_RANK", "JITWATCH_TP_RANK", "JITWATCH_PP_RANK", "JITWATCH_DP_RANK"):
        monkeypatch.delenv(var, raising=False)
    before = _snapshot()
    yield
    jitwatch.uninstall()
    after = _snapshot()
    leaked = {k: (before.get(k), v) for k, v in after.items() if v is not before.get(k)}
    if leaked:
        # restore so one failing test does not cascade, then fail this one
        import triton

        for (group, attr), (old, _new) in leaked.items():
            setattr(getattr(triton.knobs, group), attr, old)
        pytest.fail(f"test left Triton hook slots changed: {sorted(leaked)}")


@pytest.fixture
def triton_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty ``TRITON_CACHE_DIR`` for this test."""
    path = tmp_path / "triton-cache"
    path.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(path))
    return path


@pytest.fixture
def journal_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary journal directory, also exported as ``JITWATCH_DIR``."""
    path = tmp_path / "journal"
    monkeypatch.setenv("JITWATCH_DIR", str(path))
    return path


@pytest.fixture
def compile_only() -> Iterator[Any]:
    """The compile-only driver (sm_90) active for this test; kernels compile but never launch."""
    with compile_only_driver(int(os.environ.get("JITWATCH_TARGET_ARCH", "90"))) as drv:
        yield drv


@pytest.fixture
def serial_ast_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ast.parse`` under one lock for this test. CPython 3.11 can raise ``SystemError: AST
    constructor recursion depth mismatch`` when two threads parse at once (gh-106905, fixed in
    3.12); Triton's frontend parses every kernel it compiles (``JITFunction.parse``). For tests
    that compile on two threads at once to check jitwatch, not that interpreter bug (the product
    copes with it where it compiles in threads itself: ``jitwatch.warmup.replay``)."""
    lock = threading.Lock()
    real = ast.parse

    def parse(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return real(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse)


@pytest.fixture
def harness(tmp_path: Path, triton_cache: Path) -> Iterator[MonitorHarness]:
    """A fresh installed Monitor (warn mode, rank 0) + compile-only driver + fresh Triton cache."""
    with monitored("warn", journal_dir=tmp_path / "journal", triton_cache_dir=triton_cache) as h:
        yield h
