"""``benchmarks/bench_journal_split.py``'s SQL split: a statement's CPU is counted whole, its rows'
stepping included (a real SQLite connection)."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import sys
import time
from collections import defaultdict
from types import ModuleType
from typing import Any

import pytest

from tests._paths import ROOT


@pytest.fixture(scope="module")
def split() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))  # it imports its siblings _common and bench_cost_floor
    saved = os.environ.copy()  # _common sets OTEL_SDK_DISABLED for benchmark runs: not for later tests
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_journal_split", ROOT / "benchmarks" / "bench_journal_split.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        os.environ.clear()
        os.environ.update(saved)


ROWS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000) SELECT i FROM n"


def _executed(cur: Any, sql: str) -> Any:
    cur.execute(sql)
    return cur


def _extend(cur: Any, sql: str) -> int:
    rows: list[object] = []
    rows += cur.execute(sql)
    return len(rows)


def test_a_select_s_rows_count_toward_its_statement(split: ModuleType) -> None:
    """sqlite3's ``execute`` steps a ``SELECT`` to its first row only; the rest are stepped by
    ``fetchall``/``fetchone``/iteration, which the timed connection passed through untimed: the
    journal's digest and kernel-label lookups (``SELECT … IN``, up to a batch of rows) were counted
    at about half their CPU. Each way the journal reads rows (``fetchall``, iteration, ``rows +=
    cur.execute(...)``), on the connection and on a cursor, now counts toward the statement:
    nearly all of the thread's CPU around it."""
    conn = sqlite3.connect(":memory:")
    reads = {  # each returns how many rows it read
        "conn.execute().fetchall()": lambda c: len(c.execute(ROWS).fetchall()),
        "for row in conn.execute()": lambda c: sum(1 for _ in c.execute(ROWS)),
        "cursor.execute(); fetchall()": lambda c: len(_executed(c.cursor(), ROWS).fetchall()),
        "rows += cursor.execute() (the journal's lookups)": lambda c: _extend(c.cursor(), ROWS),
    }
    for name, read in reads.items():
        spent: defaultdict[str, float] = defaultdict(float)
        timed = split._TimedConnection(conn, spent)
        t0 = time.thread_time()
        assert read(timed) == 300_000, name
        total = time.thread_time() - t0
        (statement,) = spent
        assert statement.startswith("WITH RECURSIVE"), spent
        assert spent[statement] >= 0.8 * total, (name, spent, total)
