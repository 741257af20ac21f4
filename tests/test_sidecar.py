"""jitwatch.sidecar: routes over ASGI, then real uvicorn processes on 127.0.0.1 with real workers."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from jitwatch.config import Settings
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.sidecar import MAX_EVENTS_LIMIT, PortUnavailableError, check_bind, create_app, run
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.testing import free_port, make_event
from jitwatch.views.contract import exposed_series_names
from jitwatch.views.status import NO_WORKER_REASON, JitStatus

T0 = 1_700_000_000.0
ev = make_event
TOKEN = "test-token-123"
NO_ENV = Settings(journal_dir=Path("/nonexistent/jitwatch-test"))  # never JITWATCH_* from the environment


def worker_started(directory: Path, rank: int = 0) -> None:
    with Journal(directory) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, rank=rank, pid=100 + rank, attrs={"mode": "warn"}),
                ev(EventKind.WARMUP_START, T0 + 1, rank=rank, pid=100 + rank, phase=Phase.WARMUP),
                ev(
                    EventKind.COMPILE,
                    T0 + 2,
                    rank=rank,
                    pid=100 + rank,
                    phase=Phase.WARMUP,
                    kernel="add",
                    key="k16",
                    duration_s=0.3,
                ),
            ]
        )


def warmup_done(directory: Path, rank: int = 0) -> None:
    with Journal(directory) as j:
        j.write(
            [
                ev(EventKind.WARMUP_COMPLETE, T0 + 3, rank=rank, pid=100 + rank, phase=Phase.SERVING, duration_s=2.0),
                ev(
                    EventKind.COMPILE,
                    T0 + 4,
                    rank=rank,
                    pid=100 + rank,
                    phase=Phase.SERVING,
                    kernel="mul",
                    key="k32",
                    duration_s=0.2,
                ),
            ]
        )


def call(app: Any, method: str, url: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
            return await client.request(method, url, **kwargs)

    return asyncio.run(go())


def get(app: Any, url: str, **kwargs: Any) -> httpx.Response:
    return call(app, "GET", url, **kwargs)


# --------------------------------------------------------------------------------- no journal yet
def test_missing_journal_answers_without_500_and_creates_nothing(tmp_path: Path) -> None:
    jdir = tmp_path / "journal"
    app = create_app(jdir, settings=NO_ENV)
    r = get(app, "/jit")
    assert r.status_code == 200
    st = JitStatus.model_validate(r.json())
    assert st.ranks == [] and st.journal_up is False and st.ready is False
    r = get(app, "/readyz")
    assert r.status_code == 503 and r.json()["reason"] == NO_WORKER_REASON
    assert get(app, "/livez").json() == {"status": "alive"}
    r = get(app, "/metrics")
    assert r.status_code == 200 and "jitwatch_journal_up 0.0" in r.text
    assert get(app, "/jit/events").json() == []
    assert not jdir.exists()


def test_corrupt_journal(tmp_path: Path) -> None:
    (tmp_path / JOURNAL_FILE).write_bytes(b"garbage" * 1000)
    app = create_app(tmp_path, settings=NO_ENV)
    r = get(app, "/jit")
    assert r.status_code == 200 and r.json()["journal_up"] is False
    assert "unreadable" in r.json()["journal_error"]
    assert get(app, "/readyz").status_code == 503
    assert get(app, "/jit/events").status_code == 503
    assert (tmp_path / JOURNAL_FILE).read_bytes() == b"garbage" * 1000


def test_an_unreadable_journal_is_not_reported_as_no_worker(tmp_path: Path) -> None:
    """A journal that cannot be read says why, not "no worker has registered": /readyz answered
    "no worker has registered; journal unreadable: …" and /jit's ``not_ready_reason`` "no worker
    has registered" while the workers of a damaged journal were running. A missing journal keeps
    the "no worker" reason."""
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / JOURNAL_FILE).write_bytes(b"garbage" * 1000)
    (tmp_path / "file").write_text("not a directory")
    for jdir, why in ((tmp_path / "damaged", "journal unreadable"), (tmp_path / "file", "not a directory")):
        app = create_app(jdir, settings=NO_ENV)
        doc = get(app, "/jit").json()
        assert doc["journal_up"] is False and why in doc["not_ready_reason"], doc
        assert NO_WORKER_REASON not in doc["not_ready_reason"]
        r = get(app, "/readyz")
        assert r.status_code == 503 and why in r.json()["reason"], r.json()
        assert NO_WORKER_REASON not in r.json()["reason"]
    app = create_app(tmp_path / "missing", settings=NO_ENV)
    assert get(app, "/jit").json()["not_ready_reason"] == NO_WORKER_REASON
    assert get(app, "/readyz").json()["reason"] == NO_WORKER_REASON


# ----------------------------------------------------------------------------------- readiness
def test_readyz_flips_when_warmup_completes(tmp_path: Path) -> None:
    app = create_app(tmp_path, settings=NO_ENV)
    worker_started(tmp_path, rank=0)
    worker_started(tmp_path, rank=1)
    r = get(app, "/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["ready"] is False and body["not_ready_ranks"] == [0, 1]
    assert "warmup not complete" in body["reason"]
    warmup_done(tmp_path, rank=0)
    r = get(app, "/readyz")
    assert r.status_code == 503 and r.json()["not_ready_ranks"] == [1]
    warmup_done(tmp_path, rank=1)
    r = get(app, "/readyz")
    assert r.status_code == 200
    assert r.json() == {
        "status": "ready",
        "ready": True,
        "reason": None,
        "ranks": {"0": "serving", "1": "serving"},
        "not_ready_ranks": [],
        "stale_ranks": [],
        "exited_ranks": [],
    }


# ------------------------------------------------------------------------------------- /jit
def test_jit_status_is_pretty_json(tmp_path: Path) -> None:
    worker_started(tmp_path)
    warmup_done(tmp_path)
    r = get(get_app := create_app(tmp_path, settings=NO_ENV), "/jit")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.text.startswith('{\n  "generated_ts"')  # indented for curl
    st = JitStatus.model_validate(r.json())
    assert st.ready and [x.rank for x in st.ranks] == [0]
    assert {k.name for k in st.kernels} == {"add", "mul"}
    assert [c.key for c in st.recent_serving_compiles] == ["k32"]
    assert get_app.state.journal_dir == tmp_path


def test_journal_dir_defaults_to_settings(tmp_path: Path) -> None:
    worker_started(tmp_path)
    app = create_app(settings=Settings(journal_dir=tmp_path))
    assert [r["rank"] for r in get(app, "/jit").json()["ranks"]] == [0]


# ------------------------------------------------------------------------------ /jit/events
def test_events_filters(tmp_path: Path) -> None:
    worker_started(tmp_path, rank=0)
    worker_started(tmp_path, rank=1)
    warmup_done(tmp_path, rank=1)
    app = create_app(tmp_path, settings=NO_ENV)
    everything = get(app, "/jit/events").json()
    assert len(everything) == 8
    assert [e["id"] for e in everything] == sorted((e["id"] for e in everything), reverse=True)
    assert {e["phase"] for e in get(app, "/jit/events", params={"phase": "serving"}).json()} == {"serving"}
    compiles = get(app, "/jit/events", params={"kind": "compile"}).json()
    assert len(compiles) == 3 and {e["kind"] for e in compiles} == {"compile"}
    assert [e["key"] for e in get(app, "/jit/events", params={"kernel": "mul"}).json()] == ["k32"]
    assert {e["rank"] for e in get(app, "/jit/events", params={"rank": 1}).json()} == {1}
    assert all(e["ts"] > T0 + 2 for e in get(app, "/jit/events", params={"since": T0 + 2}).json())
    assert len(get(app, "/jit/events", params={"limit": 2}).json()) == 2
    Event.model_validate(everything[0])


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"phase": "lunch"}, "phase"),
        ({"kind": "nope"}, "kind"),
        ({"rank": -1}, "rank"),
        ({"rank": "zero"}, "rank"),
        ({"rank": 2**64}, "rank"),  # would overflow SQLite's INTEGER
        ({"since": -5}, "since"),
        ({"since": "nan"}, "since"),
        ({"limit": 0}, "limit"),
        ({"limit": MAX_EVENTS_LIMIT + 1}, "limit"),
        ({"kernel": "k" * 513}, "kernel"),
    ],
)
def test_events_bad_query_is_422_naming_the_field(tmp_path: Path, params: dict[str, Any], field: str) -> None:
    worker_started(tmp_path)
    r = get(create_app(tmp_path, settings=NO_ENV), "/jit/events", params=params)
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert [d["loc"] for d in detail] == [["query", field]]
    assert detail[0]["msg"]


def test_events_limit_bounds_accepted(tmp_path: Path) -> None:
    worker_started(tmp_path)
    app = create_app(tmp_path, settings=NO_ENV)
    assert get(app, "/jit/events", params={"limit": MAX_EVENTS_LIMIT, "kernel": "k" * 512}).status_code == 200
    assert get(app, "/jit/events", params={"limit": 1}).status_code == 200


# ------------------------------------------------------------------------------------ /metrics
def test_metrics_route_is_plain_and_negotiates(tmp_path: Path) -> None:
    worker_started(tmp_path)
    app = create_app(tmp_path, settings=NO_ENV)
    r = get(app, "/metrics")
    assert r.status_code == 200  # no 307 to /metrics/
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    names = {s.name for f in parse_text(r.text) for s in f.samples}
    assert "jitwatch_journal_up" in names and names <= exposed_series_names()
    r = get(app, "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"})
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n")


# --------------------------------------------------------------------------------------- token
def test_token_protects_everything_but_probes(tmp_path: Path) -> None:
    worker_started(tmp_path)
    app = create_app(tmp_path, token=TOKEN, settings=NO_ENV)
    for path in ("/jit", "/jit/events", "/metrics"):
        r = get(app, path)
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"] == "Bearer"
        assert get(app, path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert get(app, path, headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
        assert get(app, path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert get(app, "/livez").status_code == 200
    assert get(app, "/readyz").status_code == 503  # readiness answers without a token


def test_token_from_settings(tmp_path: Path) -> None:
    app = create_app(tmp_path, settings=Settings(journal_dir=tmp_path, token=TOKEN))
    assert get(app, "/jit").status_code == 401
    assert get(app, "/jit", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


# ------------------------------------------------------------------------------------- OpenAPI
def test_openapi_documents_models_and_errors(tmp_path: Path) -> None:
    protected = create_app(tmp_path, token=TOKEN, settings=NO_ENV)
    assert get(protected, "/openapi.json").status_code == 401  # with a token, only the probes are open
    assert get(protected, "/docs").status_code == 404
    spec = get(protected, "/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    paths = spec["paths"]
    ok = paths["/jit"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/JitStatus"}
    assert "401" in paths["/jit"]["get"]["responses"]
    events = paths["/jit/events"]["get"]
    assert {"401", "422", "503"} <= set(events["responses"])
    assert events["responses"]["200"]["content"]["application/json"]["schema"]["items"] == {
        "$ref": "#/components/schemas/Event"
    }
    params = {p["name"]: p["schema"] for p in events["parameters"]}
    assert params["limit"]["maximum"] == MAX_EVENTS_LIMIT and params["limit"]["minimum"] == 1
    assert params["rank"]["anyOf"][0]["minimum"] == 0
    metrics = paths["/metrics"]["get"]["responses"]["200"]["content"]
    assert set(metrics) == {"text/plain", "application/openmetrics-text"}
    assert set(paths["/readyz"]["get"]["responses"]) == {"200", "503"}
    assert "401" not in paths["/readyz"]["get"]["responses"] and "401" not in paths["/livez"]["get"]["responses"]
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    plain = get(create_app(tmp_path, settings=NO_ENV), "/openapi.json").json()
    assert "401" not in plain["paths"]["/jit"]["get"]["responses"]  # documented only when enforced


# -------------------------------------------------------------------------------- never writes
def test_sidecar_never_writes_the_journal(tmp_path: Path) -> None:
    worker_started(tmp_path)
    warmup_done(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name == JOURNAL_FILE}
    app = create_app(tmp_path, settings=NO_ENV)
    for path in ("/jit", "/jit/events", "/metrics", "/readyz"):
        assert get(app, path).status_code == 200
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name == JOURNAL_FILE}
    assert before == after
    with Journal(tmp_path, readonly=True) as j:
        assert j.count_events() == 5


# ------------------------------------------------------------------------------ bind address
def test_run_warns_on_all_interfaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import uvicorn

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw, app=app))
    monkeypatch.setattr("jitwatch.sidecar.check_bind", lambda host, port: port)  # 9400 may be busy here
    with caplog.at_level(logging.WARNING, logger="jitwatch.sidecar"):
        run("0.0.0.0", 9999, tmp_path, None, settings=NO_ENV)
    assert seen["host"] == "0.0.0.0" and seen["port"] == 9999
    assert any("all interfaces" in r.message and "WITHOUT a token" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jitwatch.sidecar"):
        run(None, None, tmp_path, None, settings=NO_ENV)
    assert (seen["host"], seen["port"]) == ("127.0.0.1", 9400)
    assert not caplog.records


def test_run_prints_startup_line_and_checks_the_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    port = free_port()
    run("127.0.0.1", port, tmp_path, "secret", settings=NO_ENV)
    err = capsys.readouterr().err
    assert f"http://127.0.0.1:{port}" in err and str(tmp_path) in err and "token required" in err
    run("127.0.0.1", port, tmp_path, None, settings=NO_ENV)
    assert "no token" in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        with pytest.raises(PortUnavailableError, match=f"127.0.0.1:{busy}"):
            run("127.0.0.1", busy, tmp_path, None, settings=NO_ENV)
    assert f":{busy}" not in capsys.readouterr().err  # nothing printed: it never started


def test_port_0_serves_on_the_port_it_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve --port 0` printed `http://127.0.0.1:0` while uvicorn served elsewhere: the free port
    the OS picks is now the one printed and the one uvicorn is given."""
    import uvicorn

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    run("127.0.0.1", 0, tmp_path, None, settings=NO_ENV)
    assert seen["port"] > 0
    assert f"http://127.0.0.1:{seen['port']} " in capsys.readouterr().err
    # "[::1]" as in a URL: uvicorn is given the bare address (it failed to resolve "[::1]");
    # an empty host (every interface) is printed as 0.0.0.0, not "http://:PORT"
    for given, served, shown in [("[::1]", "::1", "[::1]"), ("", "", "0.0.0.0")]:
        if given and not socket.has_ipv6:
            continue
        run(given, 0, tmp_path, "t", settings=NO_ENV)
        assert seen["host"] == served, seen
        assert f"http://{shown}:{seen['port']} " in capsys.readouterr().err


def test_check_bind_accepts_a_port_left_in_time_wait() -> None:
    """A server just stopped leaves TIME_WAIT connections on its port: SO_REUSEADDR (as uvicorn
    binds) makes it free; a plain bind would fail with EADDRINUSE."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's listener (Linux needs both)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = listener.accept()
    conn.close()  # the server side closes first: its end of the connection goes to TIME_WAIT
    listener.close()
    time.sleep(0.05)
    client.close()
    time.sleep(0.05)
    plain = socket.socket()
    try:
        plain.bind(("127.0.0.1", port))
        pytest.skip("this kernel let a plain bind through; no TIME_WAIT to test against")
    except OSError:
        pass
    finally:
        plain.close()
    check_bind("127.0.0.1", port)  # must not raise


def test_journal_dir_that_is_a_file(tmp_path: Path) -> None:
    a_file = tmp_path / "jitwatch"
    a_file.write_text("x")
    for directory in (a_file, a_file / "sub"):
        app = create_app(directory, settings=NO_ENV)
        st = JitStatus.model_validate(get(app, "/jit").json())
        assert st.journal_up is False and "not a directory" in (st.journal_error or "")
        r = get(app, "/readyz")
        assert r.status_code == 503 and "not a directory" in r.json()["reason"]
        assert get(app, "/jit/events").status_code == 503


# ------------------------------------------------------------------------ real uvicorn process


@contextmanager
def serve(journal_dir: Path, tmp_path: Path, token: str | None = None, *extra: str) -> Iterator[str]:
    """``jitwatch serve`` in a subprocess on a free 127.0.0.1 port; yields its base URL."""
    port = free_port()
    args = [sys.executable, "-m", "jitwatch.cli", "serve", "--port", str(port), "--journal-dir", str(journal_dir)]
    if token:
        args += ["--token", token]
    args += extra
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    log_path = tmp_path / f"sidecar-{port}.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(args, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"sidecar exited {proc.returncode}: {log_path.read_text()}")
            try:
                if httpx.get(base + "/livez", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"sidecar did not come up: {log_path.read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_real_uvicorn_with_token(tmp_path: Path) -> None:
    jdir = tmp_path / "journal"
    with serve(jdir, tmp_path, token=TOKEN) as base:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(base + "/readyz").json()["reason"] == NO_WORKER_REASON
        worker_started(jdir)
        assert httpx.get(base + "/jit").status_code == 401
        r = httpx.get(base + "/jit", headers=auth)
        assert r.status_code == 200 and r.json()["ranks"][0]["state"] == "warmup"
        assert httpx.get(base + "/readyz").status_code == 503
        warmup_done(jdir)
        assert httpx.get(base + "/readyz").status_code == 200
        r = httpx.get(base + "/metrics", headers=auth)
        assert r.status_code == 200
        assert 'jitwatch_compiles_total{backend="triton",phase="serving"} 1.0' in r.text
        assert 'jitwatch_serving_compiles_total{backend="triton",kernel="mul",rank="0"} 1.0' in r.text


def test_real_uvicorn_counts_listener_only_serving_compiles_in_coverage_before_and_after_a_restart(
    tmp_path: Path,
) -> None:
    """Real compile-only compiles of one kernel: a JIT and a direct ``triton.compile`` in warmup,
    direct ones in serving (the warmed cache hash again, and a new one). ``/jit``'s coverage entry
    counts the new listener-only hash as a serving key, missing, and its ``kernels`` row the two
    serving compiles; ``/metrics``'s ratio is the report's; ``jitwatch coverage --json`` says the
    same; a restarted sidecar (a new process, its aggregates rebuilt from the journal) answers the
    same. (They said ``serving_keys: 0``, ``missing: []`` and a ratio of 1.0 for a kernel
    compiled only this way.)"""
    from typer.testing import CliRunner

    from jitwatch.cli import app
    from tests.views.listener_only_kernels import journal_of

    hashes = journal_of(tmp_path, jit_warm=[64], warm=[64], serve=[64, 128])
    jdir = tmp_path / "j"
    cli = CliRunner().invoke(app, ["coverage", "--json", "--journal-dir", str(jdir)])
    (want,) = [k for k in json.loads(cli.stdout)["kernels"] if k["kernel"] == "add_one"]
    assert [m["key"] for m in want["missing"]] == [hashes[128]] and want["serving_keys"] == 1

    def answers(base: str) -> tuple[dict[str, Any], int, float]:
        doc = httpx.get(base + "/jit").json()
        (cov,) = [k for k in doc["coverage"] if k["kernel"] == "add_one"]
        (row,) = [k for k in doc["kernels"] if k["name"] == "add_one"]
        ratio = [
            s.value
            for f in parse_text(httpx.get(base + "/metrics").text)
            if f.name == "jitwatch_specialization_coverage_ratio"
            for s in f.samples
            if s.labels["kernel"] == "add_one"
        ]
        return cov, row["compiles_serving"], ratio[0]

    with serve(jdir, tmp_path) as base:
        first = answers(base)
    with serve(jdir, tmp_path) as base:
        again = answers(base)
    assert first == again == (want, 2, pytest.approx(want["ratio"]))
    assert 0 < want["ratio"] < 1


# ---------------------------------------------------------------------- two real worker processes
def _worker(rank: int, journal_dir: str, cache_dir: str, warmed: Any, go: Any) -> None:
    """A worker process: jitwatch.install with its own JITWATCH_RANK, one real compile-only compile."""
    os.environ.update(
        {
            "JITWATCH_RANK": str(rank),
            "JITWATCH_TP_RANK": str(rank),
            "JITWATCH_DIR": journal_dir,
            "TRITON_CACHE_DIR": cache_dir,
            "OTEL_SDK_DISABLED": "true",
        }
    )
    import torch
    import triton
    import triton.language as tl

    import jitwatch
    from jitwatch.backends.triton.compile_only import activate

    if rank == 0:

        @triton.jit
        def rank0_add(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)

        kernel = rank0_add
    else:

        @triton.jit
        def rank1_mul(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3, mask=mask)

        kernel = rank1_mul

    activate()
    mon = jitwatch.install(mode="warn", tracer_provider=False)
    with mon.warmup():
        kernel.warmup(torch.zeros(32), 32, BLOCK=32, grid=(1,))
        mon.flush()
        warmed.set()
        if not go.wait(120):
            raise RuntimeError("test never released the warmup")
    with mon.request():
        pass
    jitwatch.uninstall()


@pytest.mark.slow  # two spawned processes each import torch + Triton and compile: 9-17 s on 2 cores
def test_two_worker_processes_and_readiness(tmp_path: Path) -> None:
    jdir = tmp_path / "journal"
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    warmed = [ctx.Event(), ctx.Event()]
    with serve(jdir, tmp_path) as base:
        assert httpx.get(base + "/readyz").status_code == 503
        procs = [
            ctx.Process(target=_worker, args=(rank, str(jdir), str(tmp_path / f"cache{rank}"), warmed[rank], go))
            for rank in (0, 1)
        ]
        for p in procs:
            p.start()
        try:
            for rank, e in enumerate(warmed):
                assert e.wait(180), f"rank {rank} did not reach warmup"
            r = httpx.get(base + "/readyz")
            assert r.status_code == 503
            assert r.json()["not_ready_ranks"] == [0, 1]
            st = JitStatus.model_validate(httpx.get(base + "/jit").json())
            assert [(x.rank, x.state, x.tp_rank) for x in st.ranks] == [(0, Phase.WARMUP, 0), (1, Phase.WARMUP, 1)]
            go.set()
            for p in procs:
                p.join(120)
            assert [p.exitcode for p in procs] == [0, 0]
        finally:
            go.set()
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join(10)

        # Both workers served (warmup complete, a request) and then uninstalled and exited: their
        # ranks are stopped, not ready (they were "serving", ready, until the stale window passed).
        r = httpx.get(base + "/readyz")
        assert r.status_code == 503 and r.json()["ranks"] == {"0": "stopped", "1": "stopped"}, r.text
        assert r.json()["reason"].startswith("ranks 0, 1 stopped (clean exits at ")
        st = JitStatus.model_validate(httpx.get(base + "/jit").json())
        assert not st.ready and [(x.rank, x.state, x.warmup_compiles) for x in st.ranks] == [
            (0, "stopped", 1),
            (1, "stopped", 1),
        ]
        assert all(x.first_request_latency_s is not None for x in st.ranks)
        by_name = {k.name.rsplit(".", 1)[-1]: k for k in st.kernels}
        assert by_name["rank0_add"].ranks == [0] and by_name["rank0_add"].compiles_warmup == 1
        assert by_name["rank1_mul"].ranks == [1] and by_name["rank1_mul"].compiles_warmup == 1
        assert st.totals.compiles_serving == 0
        metrics = httpx.get(base + "/metrics").text
        complete = {
            s.labels["rank"]: s.value
            for f in parse_text(metrics)
            for s in f.samples
            if s.name == "jitwatch_warmup_complete"
        }
        assert complete == {"0": 1.0, "1": 1.0}


# ---------------------------------------------------------------------- schema conformance
def test_responses_conform_to_openapi_schema(tmp_path: Path) -> None:
    """Schemathesis: generated requests to every operation; responses must match the schema."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error

    worker_started(tmp_path, rank=0)
    worker_started(tmp_path, rank=1)
    warmup_done(tmp_path, rank=1)
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(tmp_path, settings=NO_ENV))
    checked = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(case: Any) -> None:
            # /readyz answers 503 by design (documented); every other check stays on.
            case.call_and_validate(excluded_checks=[not_a_server_error])

        check()
        checked.append(operation.label)
    assert len(checked) == 5, checked


# ---------------------------------------------------------------------- liveness: heartbeat, kill -9
HEARTBEAT_WORKER = """
import sys, time
from dataclasses import replace
from pathlib import Path
from jitwatch.config import Settings
from jitwatch.worker import create_monitor
settings = replace(Settings.from_env(), journal_dir=Path(sys.argv[1]), heartbeat_seconds=0.2)
mon = create_monitor(settings, mode="warn", tracer_provider=False)
mon.install()
with mon.warmup():
    pass
mon.flush()
print("serving", flush=True)
time.sleep(600)
"""


def _last_ts(journal_dir: Path, pid: int) -> float:
    with Journal(journal_dir, readonly=True) as j:
        (w,) = [w for w in j.workers() if w.pid == pid]
        return w.last_ts


def _as_if_on_another_machine(journal_dir: Path, pid: int) -> None:
    """Rewrite the worker row's process marker as another machine's (its ``boot_id``): the sidecar
    can then not see the process and judges it by its heartbeat alone, as for a remote worker."""
    con = sqlite3.connect(journal_dir / "journal.db", timeout=30)
    try:
        with con:
            (raw,) = con.execute("SELECT attrs FROM workers WHERE pid = ?", (pid,)).fetchone()
            attrs = json.loads(raw)
            assert attrs["process"]["boot_id"], attrs  # a Linux worker records its process
            attrs["process"]["boot_id"] = "another-machine"
            con.execute("UPDATE workers SET attrs = ? WHERE pid = ?", (json.dumps(attrs), pid))
    finally:
        con.close()


def test_heartbeat_then_kill_9_makes_the_rank_stale(tmp_path: Path) -> None:
    """A real worker heartbeats every 0.2 s (last_ts advances while it serves without events);
    after kill -9 the sidecar (--stale-after 1) reports the rank stale: /readyz 503 naming it. The
    worker's row says it runs on another machine, so only its heartbeat tells (the exit of a process
    on the sidecar's own machine is seen at once: the next test)."""
    jdir = tmp_path / "journal"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update({"JITWATCH_RANK": "3", "OTEL_SDK_DISABLED": "true", "TRITON_CACHE_DIR": str(tmp_path / "tc")})
    worker = subprocess.Popen(
        [sys.executable, "-c", HEARTBEAT_WORKER, str(jdir)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "serving"
        _as_if_on_another_machine(jdir, worker.pid)
        with serve(jdir, tmp_path, None, "--stale-after", "1") as base:
            first = _last_ts(jdir, worker.pid)
            deadline = time.monotonic() + 30
            while _last_ts(jdir, worker.pid) <= first:
                assert time.monotonic() < deadline, "last_ts never advanced: no heartbeat"
                time.sleep(0.1)
            time.sleep(1.5)  # longer than the stale window: only the heartbeat keeps it ready
            r = httpx.get(base + "/readyz")
            assert r.status_code == 200, r.text
            worker.kill()  # SIGKILL: no atexit, no flush, no goodbye
            worker.wait(10)
            deadline = time.monotonic() + 30
            while (r := httpx.get(base + "/readyz")).status_code == 200:
                assert time.monotonic() < deadline, "still ready long after the worker died"
                time.sleep(0.2)
            body = r.json()
            assert r.status_code == 503 and body["stale_ranks"] == [3] and body["not_ready_ranks"] == [3]
            assert "rank 3 (last seen" in body["reason"]
            st = JitStatus.model_validate(httpx.get(base + "/jit").json())
            (rank,) = st.ranks
            assert rank.stale and not rank.ready and not st.ready and rank.state is Phase.SERVING
            metrics = httpx.get(base + "/metrics").text
            seen = [
                s.value
                for f in parse_text(metrics)
                for s in f.samples
                if s.name == "jitwatch_worker_last_seen_timestamp_seconds" and s.labels == {"rank": "3"}
            ]
            assert seen == [pytest.approx(rank.last_seen_ts)]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)


# ------------------------------------------------------------------ liveness: clean stop, restart
STOPPING_WORKER = """
import sys, time
from dataclasses import replace
from pathlib import Path
from jitwatch.config import Settings
from jitwatch.worker import create_monitor
settings = replace(Settings.from_env(), journal_dir=Path(sys.argv[1]), heartbeat_seconds=0.2)
mon = create_monitor(settings, mode="warn", tracer_provider=False)
mon.install()
with mon.warmup():
    pass
mon.flush()
print("serving", flush=True)
sys.stdin.readline()  # the test's word to stop
if sys.argv[2] == "uninstall":
    mon.uninstall()
    print("uninstalled", flush=True)
    time.sleep(600)  # the process lives on: uninstall alone says the rank stopped serving
if sys.argv[2] == "raise":  # an unhandled exception: Python still runs the exit handlers
    raise MemoryError("user prompt: secret-token-123")
# "exit": a normal return, no uninstall: the monitor's atexit handler closes the journal writer
"""


def start_stopping_worker(jdir: Path, tmp_path: Path, how: str, rank: int = 3) -> subprocess.Popen[str]:
    """:data:`STOPPING_WORKER` as a real process of ``rank``, once it serves (warmup journaled)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update({"JITWATCH_RANK": str(rank), "OTEL_SDK_DISABLED": "true", "TRITON_CACHE_DIR": str(tmp_path / "tc")})
    worker = subprocess.Popen(
        [sys.executable, "-c", STOPPING_WORKER, str(jdir), how],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None and worker.stdout.readline().strip() == "serving"
    return worker


def wait_readyz(base: str, status: int, within_s: float) -> tuple[httpx.Response, float]:
    """Poll ``/readyz`` until it answers ``status``; the response and the seconds it took."""
    t0 = time.monotonic()
    while (r := httpx.get(base + "/readyz")).status_code != status:
        assert time.monotonic() - t0 < within_s, f"/readyz still {r.status_code} after {within_s}s: {r.text}"
        time.sleep(0.05)
    return r, time.monotonic() - t0


@pytest.mark.parametrize("how", ["exit", "uninstall"])
def test_clean_stop_is_not_ready_at_once_and_a_restart_is_ready_again(tmp_path: Path, how: str) -> None:
    """A worker that shuts down cleanly (a normal exit: the monitor's atexit handler; or
    ``uninstall()`` in a process that lives on) records its stop: the sidecar answers 503 within
    a second or two, long before the stale window (10 s), naming the rank stopped and when, and
    ``/jit`` shows the rank ``stopped``. A new worker for the same rank (new pid) is ready again
    after its warmup. Before the stop record existed the rank stayed ready for the whole window."""
    jdir = tmp_path / "journal"
    worker = start_stopping_worker(jdir, tmp_path, how)
    restarted: subprocess.Popen[str] | None = None
    try:
        with serve(jdir, tmp_path, None, "--stale-after", "10") as base:
            wait_readyz(base, 200, 30)
            assert worker.stdin is not None and worker.stdout is not None
            before = time.time()
            worker.stdin.write("stop\n")
            worker.stdin.flush()
            if how == "exit":
                assert worker.wait(10) == 0
            else:
                assert worker.stdout.readline().strip() == "uninstalled" and worker.poll() is None
            r, took = wait_readyz(base, 503, 2.5)
            print(f"clean {how}: /readyz 503 {took:.2f}s after the word to stop")
            body = r.json()
            assert body["ranks"] == {"3": "stopped"} and body["not_ready_ranks"] == [3], body
            assert body["stale_ranks"] == [], body  # stopped, not presumed dead
            assert body["reason"].startswith("rank 3 stopped (clean exit at 20") and body["reason"].endswith(" UTC)")
            st = JitStatus.model_validate(httpx.get(base + "/jit").json())
            (rank,) = st.ranks
            assert rank.state == "stopped" and not rank.ready and not rank.stale and not st.ready
            assert rank.stopped_ts is not None and before - 1 <= rank.stopped_ts <= time.time()
            assert rank.pid == worker.pid and rank.inflight == []
            cli = status_cli(base)
            assert cli.returncode == 3, cli.stdout + cli.stderr  # NOT READY
            assert "rank 3 stopped (clean exit at 20" in cli.stdout and "│ stopped (20" in cli.stdout, cli.stdout
            info = [
                s.labels
                for f in parse_text(httpx.get(base + "/metrics").text)
                for s in f.samples
                if s.name == "jitwatch_worker_info"
            ]
            assert [i["state"] for i in info] == ["stopped"], info
            time.sleep(1.0)  # still 503, and still "stopped" (no flapping back to serving)
            assert httpx.get(base + "/readyz").json()["ranks"] == {"3": "stopped"}

            restarted = start_stopping_worker(jdir, tmp_path, how)  # same rank, new pid
            r, _ = wait_readyz(base, 200, 10)
            assert r.json()["ranks"] == {"3": "serving"}
            st = JitStatus.model_validate(httpx.get(base + "/jit").json())
            (rank,) = st.ranks
            assert rank.pid == restarted.pid and rank.state is Phase.SERVING and rank.ready and rank.stopped_ts is None
    finally:
        for proc in (worker, restarted):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_kill_9_records_no_stop_and_the_sidecar_sees_the_exit_at_once(tmp_path: Path) -> None:
    """``kill -9`` runs no exit handler: nothing is recorded and the row stays ``serving``. The
    sidecar shares the worker's machine and PID namespace, so it sees the process gone
    (``jitwatch.core.process``): 503 at once, naming the pid, far inside the heartbeat window
    (60 s here); before, it stayed ready until the window passed. The rank is ``exited`` (known
    gone) in ``/readyz``, ``/jit`` and ``/metrics`` alike, listed in ``exited_ranks``, not in
    ``stale_ranks`` (until 2026-12-03: ``stale_ranks`` with state ``serving``, and ``/metrics`` kept
    ``jitwatch_worker_info{state="serving"}``). Waiting out the window changes nothing."""
    jdir = tmp_path / "journal"
    worker = start_stopping_worker(jdir, tmp_path, "exit")
    try:
        with serve(jdir, tmp_path, None, "--stale-after", "60") as base:
            wait_readyz(base, 200, 30)
            assert worker_info_states(base) == {"3": "serving"}  # the scrape before the kill
            pid = worker.pid
            worker.kill()
            worker.wait(10)
            t0 = time.monotonic()
            r = httpx.get(base + "/readyz")
            assert time.monotonic() - t0 < 5 and r.status_code == 503, r.text
            body = r.json()
            assert body["ranks"] == {"3": "exited"} and body["exited_ranks"] == [3], body
            assert body["stale_ranks"] == [] and body["not_ready_ranks"] == [3], body  # known gone, not presumed
            assert body["reason"] == (
                f"the worker process of rank 3 (pid {pid}) exited without recording a stop (killed or crashed)"
            ), body
            st = JitStatus.model_validate(httpx.get(base + "/jit").json())
            (rank,) = st.ranks
            assert rank.state == "exited" and not rank.stale and not rank.ready and rank.pid == pid
            assert st.not_ready_reason == body["reason"] and st.totals.ranks_ready == 0
            assert worker_info_states(base) == {"3": "exited"}  # the next scrape, not after the window
            with Journal(jdir, readonly=True) as j:
                (w,) = j.workers()
                assert w.stopped_ts is None and w.state is Phase.SERVING
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)


def test_a_worker_dying_on_an_unhandled_exception_reads_exited_first(tmp_path: Path) -> None:
    """A real worker that dies on an unhandled ``MemoryError`` (Python runs jitwatch's exit handler
    after printing it) reads ``exited``, not ``stopped``: ``/readyz`` 503 names it first, with the
    exception's type and never its message, before the rank that stopped cleanly; ``/jit`` gives
    ``exit_exception``; ``/metrics`` ``jitwatch_worker_info{state="exited"}``. Until 2026-12-03 it
    read ``stopped (clean exit at …)`` and no alert fired."""
    jdir = tmp_path / "journal"
    crashing = start_stopping_worker(jdir, tmp_path, "raise", rank=3)
    stopping = start_stopping_worker(jdir, tmp_path, "exit", rank=0)
    try:
        with serve(jdir, tmp_path, None, "--stale-after", "60") as base:
            wait_readyz(base, 200, 30)
            for worker in (stopping, crashing):  # the clean stop first: the reason still lists it last
                assert worker.stdin is not None
                worker.stdin.write("stop\n")
                worker.stdin.flush()
                assert worker.wait(30) == (1 if worker is crashing else 0)
            r, _ = wait_readyz(base, 503, 10)
            deadline = time.monotonic() + 10
            while r.json()["ranks"] != {"0": "stopped", "3": "exited"} and time.monotonic() < deadline:
                time.sleep(0.05)
                r = httpx.get(base + "/readyz")
            body = r.json()
            assert body["ranks"] == {"0": "stopped", "3": "exited"}, body
            assert body["exited_ranks"] == [3] and body["stale_ranks"] == [] and body["not_ready_ranks"] == [0, 3]
            reason = body["reason"]
            assert reason.startswith(
                f"the worker process of rank 3 (pid {crashing.pid}, MemoryError) exited on an unhandled exception; "
                "rank 0 stopped (clean exit at 20"
            ), reason
            assert "secret-token" not in r.text
            st = JitStatus.model_validate(httpx.get(base + "/jit").json())
            by_rank = {rank.rank: rank for rank in st.ranks}
            assert by_rank[3].state == "exited" and by_rank[3].exit_exception == "MemoryError"
            assert by_rank[0].state == "stopped" and by_rank[0].exit_exception is None
            assert worker_info_states(base) == {"0": "stopped", "3": "exited"}
            cli = status_cli(base)
            assert cli.returncode == 3, cli.stdout + cli.stderr  # NOT READY
            # when it exited: its recorded exit time (last_ts advanced to it), as a stopped rank shows its stop
            assert "│ exited (MemoryError) (last seen 20" in cli.stdout, cli.stdout
            assert "│ stopped (20" in cli.stdout, cli.stdout
    finally:
        for worker in (crashing, stopping):
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)


def status_cli(base: str) -> subprocess.CompletedProcess[str]:
    """``jitwatch status --url base`` in a real process (no ``JITWATCH_*`` of this one, 200 columns)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")} | {"COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "jitwatch.cli", "status", "--url", base],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def worker_info_states(base: str) -> dict[str, str]:
    """``{rank: state}`` of ``jitwatch_worker_info`` in one scrape of the sidecar at ``base``."""
    return {
        s.labels["rank"]: s.labels["state"]
        for f in parse_text(httpx.get(base + "/metrics").text)
        for s in f.samples
        if s.name == "jitwatch_worker_info"
    }


# ------------------------------------------------------------------ readiness from memory, damage
def ready_fleet(directory: Path, ranks: int) -> None:
    """``ranks`` workers that completed warmup, written in one go (the writer closes: no -wal left)."""
    for rank in range(ranks):
        worker_started(directory, rank=rank)
        warmup_done(directory, rank=rank)


def count_opens(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every ``Journal`` opened from now on (the real constructor runs; its directory is recorded)."""
    opened: list[Path] = []
    original = Journal.__init__

    def counting(self: Journal, directory: Any, **kwargs: Any) -> None:
        opened.append(Path(directory))
        original(self, directory, **kwargs)

    monkeypatch.setattr(Journal, "__init__", counting)
    return opened


def test_readyz_answers_from_memory_without_opening_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe used to open the journal (a SQLite connection, schema read and revision check) every
    time: 1.7-3.3 ms with 64 ranks. Now probes share one long-lived read-only connection and read
    the workers table only when something was committed; the answer follows every commit."""
    ready_fleet(tmp_path, 64)
    app = create_app(tmp_path, settings=NO_ENV, stale_after=0)
    opened = count_opens(monkeypatch)
    for _ in range(20):
        assert get(app, "/readyz").status_code == 200
    assert len(opened) <= 1, opened
    worker_started(tmp_path, rank=64)  # a new rank registers: not ready until its warmup completes
    r = get(app, "/readyz")
    assert r.status_code == 503 and r.json()["not_ready_ranks"] == [64]
    warmup_done(tmp_path, rank=64)
    assert get(app, "/readyz").status_code == 200
    assert len(opened) <= 1 + 2, opened  # the two writes above opened their own Journal


def test_readyz_does_not_wait_behind_scrapes(tmp_path: Path) -> None:
    """A restarted sidecar's first scrape computes its first specialization-coverage report inline
    (seconds on a large journal) holding the live copy's lock, and Prometheus's retries pile up behind it
    until they hold all 8 journal-read threads: /readyz then answered 503 for a ready fleet. Probes
    now have their own connection and 4 threads of their own. (The lock is held here by the test,
    as such a scrape holds it.)"""
    from jitwatch.views.live import live

    ready_fleet(tmp_path, 2)
    app = create_app(tmp_path, settings=NO_ENV, stale_after=0)

    async def go() -> tuple[int, float, list[int]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sidecar", timeout=30) as client:
            lock = live(tmp_path)._lock
            lock.acquire()
            try:
                scrapes = [asyncio.create_task(client.get("/metrics")) for _ in range(8)]
                await asyncio.sleep(0.3)
                t0 = time.monotonic()
                probe = await client.get("/readyz")
                took = time.monotonic() - t0
            finally:
                lock.release()
            return probe.status_code, took, [r.status_code for r in await asyncio.gather(*scrapes)]

    status, took, scraped = asyncio.run(go())
    assert status == 200 and took < 2.0, (status, took)
    assert scraped == [200] * 8


def test_metrics_does_not_wait_behind_event_queries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``/metrics`` shared the 8 journal-read threads of ``/jit`` and ``/jit/events``: clients
    polling ``/jit/events`` (a journal open and a scan each; 16 of them against a real sidecar on a
    100k-event journal) held all 8, and scrapes were answered 503 ("8 journal reads still running")
    at once. Scrapes now have threads of their own. (The 8 threads are held here by event-log reads
    the test blocks, as slow ones hold them.)"""
    ready_fleet(tmp_path, 2)
    app = create_app(tmp_path, settings=NO_ENV, stale_after=0)
    release = threading.Event()

    def slow_events() -> list[Event]:
        release.wait(20)
        return []

    async def go() -> tuple[list[int], str, list[int]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sidecar", timeout=30) as client:
            try:
                queries = [asyncio.create_task(client.get("/jit/events?kernel=nope")) for _ in range(8)]
                await asyncio.sleep(0.5)  # the 8 event reads are running
                scraped = [await client.get("/metrics") for _ in range(3)]
                one_more = await client.get("/jit/events?kernel=nope")  # the event queries' bound holds
            finally:
                release.set()
            return (
                [r.status_code for r in scraped],
                scraped[0].text,
                [r.status_code for r in await asyncio.gather(*queries)] + [one_more.status_code],
            )

    real_events = Journal.events
    # only the event queries block: the scrape's coverage report reads events too
    monkeypatch.setattr(
        Journal, "events", lambda self, **kw: slow_events() if kw.get("kernel") == "nope" else real_events(self, **kw)
    )
    statuses, text, events = asyncio.run(go())
    assert statuses == [200, 200, 200], (statuses, text[:200])
    assert "jitwatch_journal_up 1.0" in text
    assert events == [200] * 8 + [503]


def test_jit_and_events_are_encoded_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``/jit`` and ``/jit/events`` returned a model that FastAPI built and encoded on the event
    loop: a large document (``/jit?kernels=10000``, coverage of 500 kernels: 14 MB against a real
    sidecar) held the loop, so ``/livez`` took up to 2.5 s under 8 such requests (a liveness probe's
    default timeout is 1 s). Both are now encoded on the journal read's thread; the bodies and the
    ``X-Jitwatch-Backends-In-Journal`` header are unchanged."""
    import jitwatch.sidecar as sidecar

    ready_fleet(tmp_path, 2)
    app = create_app(tmp_path, settings=NO_ENV, stale_after=0)
    threads: list[str] = []
    real_render = sidecar.PrettyJSONResponse.render

    def render(self: Any, content: Any) -> bytes:
        threads.append(threading.current_thread().name)
        return real_render(self, content)

    monkeypatch.setattr(sidecar.PrettyJSONResponse, "render", render)
    loop_thread = threading.current_thread().name  # httpx's ASGITransport runs the app on this loop
    jit = get(app, "/jit?kernels=10000")
    assert jit.status_code == 200 and JitStatus.model_validate(jit.json()).totals.ranks == 2
    events = get(app, "/jit/events?limit=1000")
    assert events.status_code == 200 and [Event.model_validate(e) for e in events.json()]
    missing = get(app, "/jit/events?backend=trtion")
    assert missing.json() == [] and missing.headers["X-Jitwatch-Backends-In-Journal"] == "triton"
    assert len(threads) == 3 and loop_thread not in threads, (loop_thread, threads)


def damage_header(path: Path) -> None:
    """Page 1's header (the magic string, page size, schema cookie) overwritten in place."""
    with open(path, "r+b") as f:
        f.write(b"\x00" * 100)


def damage_workers_pages(path: Path) -> None:
    """The workers table's root page overwritten with garbage in place (same inode, no SQLite)."""
    with Journal(path.parent, readonly=True) as j:
        root = j._conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'workers'").fetchone()[0]
        page_size = j._conn.execute("PRAGMA page_size").fetchone()[0]
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xa5" * page_size)


@pytest.mark.parametrize("damage", [damage_header, damage_workers_pages], ids=["header", "workers-pages"])
def test_a_journal_damaged_in_place_is_noticed_by_every_endpoint(tmp_path: Path, damage: Any) -> None:
    """Pages overwritten in place under a running sidecar: the long-lived connections behind
    /metrics and /jit kept answering from SQLite's page cache (no commit, so nothing told them),
    ``jitwatch_journal_up 1`` for ever. Every endpoint now notices within the re-read interval (2 s).
    (The journal is checkpointed, as the writer closed last: damage to a page whose newest copy
    is still in the -wal file is not seen by SQLite, whoever reads.)"""
    ready_fleet(tmp_path, 2)
    app = create_app(tmp_path, settings=NO_ENV, stale_after=0)
    assert "jitwatch_journal_up 1.0" in get(app, "/metrics").text
    assert get(app, "/jit").json()["journal_up"] is True
    assert get(app, "/readyz").status_code == 200
    ino = (tmp_path / JOURNAL_FILE).stat().st_ino
    damage(tmp_path / JOURNAL_FILE)
    assert (tmp_path / JOURNAL_FILE).stat().st_ino == ino
    time.sleep(2.1)
    assert "jitwatch_journal_up 0.0" in get(app, "/metrics").text
    doc = get(app, "/jit").json()
    assert doc["journal_up"] is False and "unreadable" in doc["journal_error"]
    r = get(app, "/readyz")
    assert r.status_code == 503 and "unreadable" in r.json()["reason"]


def test_a_journal_copied_over_in_place_is_noticed(tmp_path: Path) -> None:
    """``cp backup.db journal.db`` (restoring a backup: same inode, written without SQLite, so no
    commit any connection sees) left /metrics and /jit on the overwritten contents. The periodic
    re-read compares a digest of the small tables and the event watermark: a difference with no
    commit in between rebuilds the copy from the file."""
    backup = tmp_path / "backup.db"
    jdir = tmp_path / "j"
    worker_started(jdir, rank=0)
    worker_started(jdir, rank=1)
    (jdir / JOURNAL_FILE).rename(backup)  # the writer closed last: a complete file, no -wal
    (jdir / JOURNAL_FILE).write_bytes(backup.read_bytes())
    warmup_done(jdir, rank=0)
    warmup_done(jdir, rank=1)
    app = create_app(jdir, settings=NO_ENV, stale_after=0)
    assert get(app, "/readyz").status_code == 200
    assert 'jitwatch_serving_compiles_total{backend="triton",kernel="mul"' in get(app, "/metrics").text
    assert [r["state"] for r in get(app, "/jit").json()["ranks"]] == ["serving", "serving"]
    ino = (jdir / JOURNAL_FILE).stat().st_ino
    with open(jdir / JOURNAL_FILE, "r+b") as f:  # what cp does: same file, truncated and rewritten
        f.truncate(0)
        f.write(backup.read_bytes())
    assert (jdir / JOURNAL_FILE).stat().st_ino == ino
    time.sleep(2.1)
    r = get(app, "/readyz")
    assert r.status_code == 503 and r.json()["not_ready_ranks"] == [0, 1]
    # (specialization coverage follows from its background recomputation, a scrape or two later)
    lines = get(app, "/metrics").text.splitlines()
    assert [x for x in lines if 'kernel="mul"' in x and not x.startswith("jitwatch_specialization_coverage")] == []
    assert [r["state"] for r in get(app, "/jit").json()["ranks"]] == ["warmup", "warmup"]


def test_readyz_follows_a_deleted_replaced_or_unsafe_journal(tmp_path: Path) -> None:
    """The probes' long-lived connection follows the path, not the file it opened: a deleted
    journal is "no worker has registered", a new file (another inode) is read at once, a symlink
    put in its place is refused as unreadable, and a second sidecar's own connections (another
    LiveJournal, as in another process) agree."""
    from jitwatch.views.live import LiveJournal

    jdir = tmp_path / "j"
    ready_fleet(jdir, 2)
    app, second = create_app(jdir, settings=NO_ENV, stale_after=0), LiveJournal(jdir)
    assert get(app, "/readyz").status_code == 200
    assert (ready := second.readiness(stale_after=0)) is not None and ready.ready
    for suffix in ("", "-wal", "-shm"):
        Path(f"{jdir / JOURNAL_FILE}{suffix}").unlink(missing_ok=True)
    r = get(app, "/readyz")
    assert r.status_code == 503 and r.json()["reason"] == NO_WORKER_REASON
    other = tmp_path / "other"
    worker_started(other, rank=0)
    (other / JOURNAL_FILE).rename(jdir / JOURNAL_FILE)
    r = get(app, "/readyz")
    assert r.status_code == 503 and r.json()["not_ready_ranks"] == [0]
    warmup_done(jdir, rank=0)
    assert get(app, "/readyz").status_code == 200
    assert (ready := second.readiness(stale_after=0)) is not None and ready.ready and list(ready.ranks) == ["0"]
    second.close()
    (jdir / JOURNAL_FILE).rename(tmp_path / "moved.db")
    os.symlink(tmp_path / "moved.db", jdir / JOURNAL_FILE)
    r = get(app, "/readyz")
    assert r.status_code == 503 and "unreadable" in r.json()["reason"]


def test_jit_fixes_grow_by_at_most_the_journal_path_per_compile(tmp_path: Path) -> None:
    """``/jit`` shows a serving compile's fixes with their manifest commands naming the journal
    (``runnable_fix``): each occurrence of the stored record command became two paths, so a fixes
    list holding it many times (up to the journal's 64 Ki characters of attrs) in a journal with a
    long directory made ``/jit`` many times the journal's text (0.9 MB more per compile, 18 MB for
    twenty, with a 380-character path). Only the commands of one fix per compile are shown for the
    journal, each once: the document grows by at most three paths per compile."""
    from jitwatch.backends.explain import MANIFEST_EXPORT, MANIFEST_REPLAY, shell_path
    from jitwatch.store.journal import MAX_ATTRS_CHARS
    from tests.test_cli import TOKEN as CLI_TOKEN
    from tests.test_cli import serving

    journal_dir = tmp_path.joinpath(*["d" * 100] * 3)  # SQLite opens paths of up to 512 bytes
    stored = [MANIFEST_EXPORT + " " + MANIFEST_REPLAY] * (MAX_ATTRS_CHARS // 80)
    with Journal(journal_dir) as j:
        j.write([make_event(EventKind.WORKER_START, 1.0, attrs={"mode": "warn"})])
        j.write(
            [
                make_event(
                    EventKind.COMPILE,
                    2.0 + i,
                    phase=Phase.SERVING,
                    kernel=f"k{i}",
                    key="k",
                    attrs={"reason": "never warmed", "reason_kind": "never_warmed", "fixes": stored},
                )
                for i in range(20)
            ]
        )
    with serving(journal_dir) as base:
        doc = httpx.get(base + "/jit", headers={"Authorization": f"Bearer {CLI_TOKEN}"}, timeout=60).json()
    recent = doc["recent_serving_compiles"]
    assert len(recent) == 20 and all(len(c["fixes"]) == len(stored) for c in recent), len(recent)
    path = len(shell_path(journal_dir / "manifest.json"))
    for c in recent:
        grown = sum(map(len, c["fixes"])) - sum(map(len, stored))
        assert 0 < grown <= 3 * path, grown


def serving_compiles(base: str) -> dict[str, float]:
    """``jitwatch_serving_compiles_total`` by kernel and ``compile_seconds_total`` by kernel, as
    ``{"count:K": n, "seconds:K": s}``, from a real scrape."""
    out: dict[str, float] = {}
    for fam in parse_text(httpx.get(base + "/metrics", timeout=30).text):
        for s in fam.samples:
            if s.name == "jitwatch_serving_compiles_total":
                out[f"count:{s.labels['kernel']}"] = s.value
            elif s.name == "jitwatch_compile_seconds_total":
                out[f"seconds:{s.labels['kernel']}"] = s.value
    return out


def test_a_compile_timed_across_a_clock_step_back_keeps_its_count(tmp_path: Path) -> None:
    """Triton times a compile by ``time.time()`` deltas (``CompileTimes``): a wall-clock step back
    during one (NTP stepping the clock after boot, a VM resumed) gives a negative duration. The
    journal added it to the aggregate's seconds, which went below 0, and readers skipped that whole
    row as nonsense: a sidecar started afterwards showed none of the kernel's serving compiles (the
    post-warmup-compile alert's series gone, /jit without the kernel) while one already running kept
    the old count. The duration is now stored as 0, and a row already below 0 reads with seconds 0
    and its count. Real writer thread, real sidecars before and after a restart."""
    from jitwatch.store.writer import JournalWriter

    jdir = tmp_path / "journal"
    w = JournalWriter(jdir, heartbeat_s=0)
    w.submit(Event.now(EventKind.WORKER_START, rank=0, attrs={"mode": "warn"}))
    for _ in range(3):
        w.submit(Event.now(EventKind.COMPILE, rank=0, phase=Phase.SERVING, kernel="k", key="a", duration_s=0.2))
    assert w.flush(30)
    with serve(jdir, tmp_path) as base:
        assert serving_compiles(base) == {"count:k": 3.0, "seconds:k": pytest.approx(0.6)}
        w.submit(Event.now(EventKind.COMPILE, rank=0, phase=Phase.SERVING, kernel="k", key="b", duration_s=-1.0))
        assert w.flush(30)
        assert serving_compiles(base) == {"count:k": 4.0, "seconds:k": pytest.approx(0.6)}
    w.close()
    with serve(jdir, tmp_path) as base:  # restarted: reads the aggregates from the file
        assert serving_compiles(base) == {"count:k": 4.0, "seconds:k": pytest.approx(0.6)}
        assert [k["name"] for k in httpx.get(base + "/jit", timeout=30).json()["kernels"]] == ["k"]
    with sqlite3.connect(jdir / JOURNAL_FILE) as db:  # as an earlier version left it: seconds below 0
        db.execute("UPDATE compile_stats SET seconds = -0.4")
    with serve(jdir, tmp_path) as base:
        assert serving_compiles(base) == {"count:k": 4.0, "seconds:k": 0.0}
