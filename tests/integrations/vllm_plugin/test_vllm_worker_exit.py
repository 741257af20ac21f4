"""A vLLM worker whose engine step raises a Python exception reads ``exited`` with the type.

vLLM 0.32's ``WorkerProc`` catches the exception of each RPC (``_execute_worker_rpc``), logs it and
answers FAILURE; the engine core dies on it and shuts its executor down, which ends the worker
through a normal exit (``worker_main`` returns, or ``SystemExit`` from its SIGTERM handler): Python
never sees the exception unhandled. The plugin notes the exception raised out of the worker's
``execute_model`` and the exit handler records it (``exit_exception``, the type, never the message).
A clean ``LLM`` run still reads ``stopped`` (``test_vllm_offline.py``, ``test_vllm_ranks.py``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from jitwatch.sidecar import create_app

from .vllm_engine import run_engine

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(400)]

TYPE = "vllm_testprocs.InjectedFault"


def test_worker_step_raising_reads_exited_with_the_type(tiny_model: Path, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    result, out = run_engine(tmp_path, tiny_model, journal, "--fail-in-request", check=False)
    assert result is None  # the engine died: no request finished
    assert "InjectedFault" in out and "WorkerProc hit an exception" in out, out[-4000:]
    client = TestClient(create_app(journal_dir=journal, token=None))
    jit = client.get("/jit").json()
    assert [(r["rank"], r["state"], r["exit_exception"]) for r in jit["ranks"]] == [(0, "exited", TYPE)], out[-4000:]
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["exited_ranks"] == [0] and TYPE in ready.json()["reason"]
    metrics = client.get("/metrics").text
    assert 'state="exited"' in metrics
    # The type only: the exception's message stays out of the journal.
    with sqlite3.connect(journal / "journal.db") as db:
        dump = "\n".join(db.iterdump())
    assert "must not reach the journal" not in dump
