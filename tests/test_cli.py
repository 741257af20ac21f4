"""jitwatch.cli: the typer app (`serve`, `status`) against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.config import Settings
from jitwatch.events import Event, EventKind, Phase
from jitwatch.journal import Journal
from jitwatch.sidecar import create_app

T0 = 1_700_000_000.0
TOKEN = "cli-token"
runner = CliRunner()


def ev(kind: EventKind, ts: float, **fields: object) -> Event:
    return Event(kind=kind, ts=ts, rank=0, pid=100, host="node-a", **fields)  # type: ignore[arg-type]


def fill(directory: Path) -> None:
    with Journal(directory) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn", "tp_rank": 0}),
                ev(EventKind.WARMUP_START, T0 + 1, phase=Phase.WARMUP),
                ev(EventKind.COMPILE, T0 + 2, phase=Phase.WARMUP, kernel="fused_add", key="k16", duration_s=0.3),
                ev(EventKind.WARMUP_COMPLETE, T0 + 3, phase=Phase.SERVING, duration_s=2.0),
                ev(EventKind.COMPILE, T0 + 4, phase=Phase.SERVING, kernel="late_mul", key="k32", duration_s=0.2),
            ]
        )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """The sidecar (token-protected) served by a real uvicorn on a free 127.0.0.1 port, in a thread."""
    fill(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        create_app(tmp_path, token=TOKEN, settings=Settings(journal_dir=tmp_path)),
        host="127.0.0.1",
        port=port,
        log_level="warning",
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield base
    finally:
        srv.should_exit = True
        thread.join(10)


def test_help_lists_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "serve" in result.output and "status" in result.output


def test_status_prints_tables(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    result = runner.invoke(app, ["status", "--url", server, "--token", TOKEN])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "READY" in out and "NOT READY" not in out
    assert "fused_add" in out and "late_mul" in out and "k32" in out
    assert "Recent serving-phase compiles" in out


def test_status_json_and_token_from_env(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITWATCH_TOKEN", TOKEN)
    result = runner.invoke(app, ["status", "--url", server, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["ready"] is True and doc["totals"]["compiles_serving"] == 1


def test_status_url_defaults_to_settings(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    port = server.rsplit(":", 1)[1]
    monkeypatch.setenv("JITWATCH_HOST", "0.0.0.0")  # a bind-all server is queried on 127.0.0.1
    monkeypatch.setenv("JITWATCH_PORT", port)
    monkeypatch.setenv("JITWATCH_TOKEN", TOKEN)
    result = runner.invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output


def test_status_without_token_fails_clearly(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JITWATCH_TOKEN", raising=False)
    result = runner.invoke(app, ["status", "--url", server])
    assert result.exit_code == 1
    assert "401" in result.output
    assert httpx.get(server + "/livez").status_code == 200


def test_status_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    result = runner.invoke(app, ["status", "--url", f"http://127.0.0.1:{port}", "--timeout", "2"])
    assert result.exit_code == 1
    assert "cannot reach" in result.output


def test_bad_environment_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITWATCH_PORT", "not-a-port")
    for command in (["serve"], ["status"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2
        assert "JITWATCH_PORT" in result.output


def test_serve_rejects_bad_port() -> None:
    result = runner.invoke(app, ["serve", "--port", "70000"])
    assert result.exit_code == 2
