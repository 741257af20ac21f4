"""Bad HTTP input: schemathesis against the sidecar's own OpenAPI schema, plus explicit
oversized and malformed query values.

Schemathesis (``schemathesis.openapi.from_asgi``) generates positive and negative requests for
every operation from ``/openapi.json`` and calls the real ASGI app (in process, over a real
journal with events of every kind). Every response must conform to the schema (status codes,
content types, bodies), no response may be a 5xx, and every 4xx must carry a readable ``detail``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.sidecar import MAX_EVENTS_LIMIT, create_app
from jitwatch.store.journal import Journal

CASES: Counter[str] = Counter()
MAX_EXAMPLES = int(os.environ.get("JITWATCH_FUZZ_EXAMPLES", "60"))
"""Hypothesis examples per operation and mode; raise it for a deeper run (docs/reliability.md)."""


def populate(d: Path) -> None:
    with Journal(d) as j:
        j.write(
            [
                Event.now(EventKind.WORKER_START, rank=0, attrs={"mode": "warn"}),
                Event.now(EventKind.WARMUP_START, rank=0, phase=Phase.WARMUP),
                Event.now(EventKind.COMPILE, rank=0, phase=Phase.WARMUP, kernel="matmul", key="k1", duration_s=0.2),
                Event.now(EventKind.WARMUP_COMPLETE, rank=0, phase=Phase.SERVING, duration_s=1.0),
                Event.now(EventKind.COMPILE, rank=0, phase=Phase.SERVING, kernel="matmul", key="k2", duration_s=0.3),
                Event.now(EventKind.AUTOTUNE, rank=0, phase=Phase.SERVING, kernel="matmul", duration_s=0.5),
                Event.now(EventKind.FIRST_REQUEST, rank=0, phase=Phase.SERVING, duration_s=0.05),
                Event.now(EventKind.HOOK_ERROR, rank=0, attrs={"hook": "x"}),
                Event.now(EventKind.DROPPED, rank=0, attrs={"count": 3}),
            ]
        )


# Schemathesis collects one test per operation at import time, so the app (and the journal it
# reads) is built then; ``schemathesis.pytest.from_fixture`` does not work with this pytest.
_FUZZ_DIR = Path(tempfile.mkdtemp(prefix="jitwatch-fuzz-")) / "journal"
# Removed at exit too: a run that deselects every test here still imports (and populates) it.
atexit.register(shutil.rmtree, _FUZZ_DIR.parent, ignore_errors=True)
populate(_FUZZ_DIR)
APP = create_app(journal_dir=_FUZZ_DIR)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=MAX_EXAMPLES)


@pytest.fixture(scope="module")
def app() -> Iterator[object]:
    yield APP
    print("FIGURES fuzz", json.dumps({"cases": sum(CASES.values()), "by_operation": dict(CASES)}))


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    shutil.rmtree(_FUZZ_DIR.parent, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_schema_fuzz(app: object, case) -> None:  # type: ignore[no-untyped-def]
    CASES[f"{case.method} {case.path}"] += 1
    response = case.call()
    assert response.status_code < 500, (case.as_curl_command(), response.text[:500])
    if 400 <= response.status_code < 500:
        body = response.json()
        assert body.get("detail"), body
        if isinstance(body["detail"], list):  # FastAPI validation errors: say where and why
            assert all(e.get("loc") and e.get("msg") for e in body["detail"]), body
    case.validate_response(response)


BAD_QUERIES = [
    ({"limit": "0"}, "limit"),
    ({"limit": str(MAX_EVENTS_LIMIT + 1)}, "limit"),
    ({"limit": "9" * 400}, "limit"),
    ({"limit": "-1"}, "limit"),
    ({"limit": "1e3"}, "limit"),
    ({"limit": "abc"}, "limit"),
    ({"rank": "-5"}, "rank"),
    ({"rank": "0x10"}, "rank"),
    ({"since": "nan"}, "since"),
    ({"since": "inf"}, "since"),
    ({"since": "-1"}, "since"),
    ({"since": "1" * 400}, "since"),
    ({"phase": "production"}, "phase"),
    ({"kind": "compile'; DROP TABLE events;--"}, "kind"),
    ({"kernel": "k" * 513}, "kernel"),
    ({"kernel": "k" * 60_000}, "kernel"),
]


@pytest.mark.parametrize(("params", "field"), BAD_QUERIES, ids=[f"{k}-{i}" for i, (p, k) in enumerate(BAD_QUERIES)])
def test_oversized_and_malformed_queries_rejected(app: object, params: dict[str, str], field: str) -> None:
    from fastapi.testclient import TestClient

    with TestClient(app) as client:  # type: ignore[arg-type]
        r = client.get("/jit/events", params=params)
    assert r.status_code == 422, (params, r.status_code, r.text[:300])
    detail = r.json()["detail"]
    assert any(field in e["loc"] and e["msg"] for e in detail), detail
    CASES["explicit bad query"] += 1


def test_injection_in_valid_values_is_data(app: object, tmp_path: Path) -> None:
    """A valid-but-hostile ``kernel`` value is a bound SQL parameter, not SQL."""
    from fastapi.testclient import TestClient

    with TestClient(app) as client:  # type: ignore[arg-type]
        for value in ("matmul' OR '1'='1", "x); DROP TABLE events; --", "%", "_", "*"):
            r = client.get("/jit/events", params={"kernel": value, "limit": 1000})
            assert r.status_code == 200 and r.json() == [], value
        assert len(client.get("/jit/events", params={"kernel": "matmul"}).json()) == 3
    d = app.state.journal_dir  # type: ignore[attr-defined]
    con = sqlite3.connect(f"file:{d / 'journal.db'}?mode=ro", uri=True)
    assert con.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 9
    con.close()


def test_oversized_request_over_the_wire(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """A 256 KiB request line and 256 KiB of headers sent to the real server (uvicorn/h11 on
    127.0.0.1): refused with a 4xx or a closed connection, and the sidecar keeps serving."""
    import socket

    d = tmp_path / "journal"
    populate(d)
    sc = sidecar_factory(d)
    requests = [
        b"GET /jit/events?kernel=" + b"k" * (256 * 1024) + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /jit HTTP/1.1\r\nHost: x\r\nX-Big: " + b"v" * (256 * 1024) + b"\r\n\r\n",
        b"GARBAGE\x00\xff / HTTP/9.9\r\n\r\n",
    ]
    for raw in requests:
        with socket.create_connection(("127.0.0.1", sc.port), timeout=10) as s:
            try:
                s.sendall(raw)
                reply = s.recv(4096)
            except (ConnectionResetError, BrokenPipeError):
                reply = b""
        if reply:
            status = int(reply.split(b" ", 2)[1])
            assert 400 <= status < 500, reply[:200]
        CASES["raw oversized/malformed"] += 1
    import httpx

    assert httpx.get(sc.url + "/livez", timeout=10).status_code == 200
    assert httpx.get(sc.url + "/jit/events", timeout=10).status_code == 200
