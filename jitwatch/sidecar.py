"""The jitwatch sidecar: a small FastAPI service over the journal.

Routes (see ``docs/sidecar.md``):

* ``GET /jit`` — :class:`~jitwatch.views.status.JitStatus`: ranks, kernels, recent serving compiles.
* ``GET /jit/events`` — the event log, filtered (``phase``, ``kind``, ``backend``, ``kernel``,
  ``rank``, ``since``, ``limit``), newest first.
* ``GET /metrics`` — Prometheus text 0.0.4 or OpenMetrics 1.0 (``Accept``), see
  :mod:`jitwatch.views.metrics`. A plain route: mounting ``make_asgi_app()`` would answer
  ``/metrics`` with a 307 redirect to ``/metrics/``.
* ``GET /livez`` — always 200 while the process runs (``async``: answered on the event loop,
  never waits for the journal or a thread).
* ``GET /readyz`` — 200 once ≥ 1 rank registered and every rank's latest worker completed
  warmup and is neither stopped (a clean stop it recorded), exited (its process seen gone on this
  machine without a stop, or an exit on an unhandled Python exception it recorded) nor stale
  (stopped heartbeating for ``stale_after`` seconds); 503 otherwise, with the reason (exited and
  stale ranks first).

``/metrics`` and ``/jit`` are answered from an in-memory copy of the journal's aggregates, refreshed
incrementally on each request through one long-lived read-only connection
(:mod:`jitwatch.views.live`); ``/readyz`` from each rank's latest worker kept over a second
long-lived connection (:meth:`~jitwatch.views.live.LiveJournal.readiness`), opening the journal
only to say why it cannot be followed; ``/jit/events`` opens the journal read-only
(``Journal(..., readonly=True)``) per request and closes it again. Both long-lived connections
re-read page 1 and the small tables at most every 2 s, so a journal damaged or copied over in place
is noticed without a commit. The sidecar never writes.
With a token (``JITWATCH_TOKEN`` / ``--token``) every route except ``/livez`` and ``/readyz``
needs ``Authorization: Bearer <token>`` (401 otherwise).

Fail-safe serving (:mod:`jitwatch.httpguard`): every journal read runs on a daemon thread with a
deadline (``JITWATCH_READ_TIMEOUT_SECONDS``, 5 s; at most :data:`READ_THREADS` at once for ``/jit``
and ``/jit/events``, :data:`SCRAPE_THREADS` more for ``/metrics``, which never queues behind event
queries, and :data:`PROBE_THREADS` more for ``/readyz``, which never queues behind scrapes) and the
endpoint answers 503 when it passes, so a hung filesystem or a held lock never blocks ``/livez``,
the other endpoints or SIGTERM. :func:`run` adds a request-head timeout and a connection cap to
uvicorn's h11 protocol, rate-limits ``EMFILE`` log lines, bounds the graceful shutdown, and (without
a token) refuses DNS names in ``Host`` other than ``localhost``, the bind address and
``JITWATCH_ALLOWED_HOSTS`` (421). ``/metrics/`` is a 404, not a redirect (no ``Location`` is ever
built from the ``Host`` header).
"""

from __future__ import annotations

import hmac
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from jitwatch._version import __version__
from jitwatch.backends.base import BACKEND_NAME_MAX_LENGTH, BACKEND_NAME_PATTERN, backend_name_problem
from jitwatch.config import Settings
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.errors import ConfigError, JournalCorruptError, JournalVersionError, PortUnavailableError
from jitwatch.httpguard import (
    BlockingCalls,
    CallTimeout,
    HostCheckMiddleware,
    effective_max_connections,
    guarded_h11_protocol,
    install_accept_error_filter,
)
from jitwatch.redact import redact
from jitwatch.store.journal import Journal
from jitwatch.text import logger
from jitwatch.views.live import live
from jitwatch.views.status import (
    DEFAULT_KERNELS_LIMIT,
    NO_JOURNAL_REASON,
    JitStatus,
    Readiness,
    build_status,
    readiness,
)

log = logger(__name__)

ALL_INTERFACES = frozenset({"0.0.0.0", "::", "[::]", ""})
MAX_EVENTS_LIMIT = 1000
READ_THREADS = 8
"""Most ``/jit`` and ``/jit/events`` reads running at once."""
SCRAPE_THREADS = 8
"""Most ``/metrics`` reads running at once, apart from those of ``/jit`` and ``/jit/events``: event
queries (each opens the journal and may scan the event log) cannot take the scrapes' threads."""
PROBE_THREADS = 4
"""Most ``/readyz`` reads running at once, apart from those of the other endpoints."""
MAX_RANK = 2**31 - 1
"""Upper bound of the ``rank`` filter: larger integers do not fit SQLite's INTEGER (would be a 500)."""

BACKENDS_HEADER = "X-Jitwatch-Backends-In-Journal"
"""``/jit/events``: set when ``?backend=`` names no backend the journal has (its answer is ``[]``):
the backends it has, comma-separated, at most :data:`BACKENDS_HEADER_MAX_NAMES` of them
(:func:`backends_header_value`; ``/jit`` lists them all in ``backends_in_journal``)."""

BACKENDS_HEADER_MAX_NAMES = 16
"""Most backend names in :data:`BACKENDS_HEADER`: with names of at most
:data:`~jitwatch.backends.base.BACKEND_NAME_MAX_LENGTH` characters the header stays near 1 KiB,
under what proxies accept for a response head (nginx: 4-8 KiB, ``upstream sent too big header``)."""


def backends_header_value(names: list[str]) -> str:
    """:data:`BACKENDS_HEADER`'s value: ``names`` (sorted, valid backend names) comma-separated,
    the first :data:`BACKENDS_HEADER_MAX_NAMES`, then ``, ... (N more: /jit backends_in_journal)``;
    ``(none)`` for none. Never raises."""
    shown = ", ".join(names[:BACKENDS_HEADER_MAX_NAMES]) or "(none)"
    more = len(names) - BACKENDS_HEADER_MAX_NAMES
    return shown + (f", ... ({more} more: /jit backends_in_journal)" if more > 0 else "")


def backend_filter(
    backend: Annotated[
        str | None,
        Query(
            description="Only this JIT backend (e.g. triton, torch_compile).",
            # the rule, in the schema; checked below, so that a 422 says it in words, not as a regex
            json_schema_extra={"pattern": BACKEND_NAME_PATTERN, "maxLength": BACKEND_NAME_MAX_LENGTH},
        ),
    ] = None,
) -> str | None:
    """The ``?backend=`` filter, checked by :func:`~jitwatch.backends.base.backend_name_problem`:
    a value that cannot be a backend's name is a 422 in FastAPI's shape (``detail``: a list of one
    error at ``["query", "backend"]``) whose ``msg`` is a sentence suggesting the lower-case name
    (``?backend='Triton' is not a backend name: ...; did you mean ?backend=triton?``), not
    pydantic's ``String should match pattern '^[a-z][a-z0-9_]*$'``."""
    problem = None if backend is None else backend_name_problem(backend, "?backend={}")
    if problem is not None:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("query", "backend"), "msg": problem, "input": backend}]
        )
    return backend


class PrettyJSONResponse(JSONResponse):
    """JSON indented by two spaces, so ``curl localhost:9400/jit`` is readable as is. A byte of a
    path that is not UTF-8 (a journal directory named ``jw-\\xff``: ``\\udcff`` once decoded) is
    written as the JSON escape ``\\udcff``, as ``json.dumps`` writes it by default; reading the
    JSON back gives the path as Python names it."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, indent=2) + "\n"
        return text.encode("utf-8", "backslashreplace")  # lone surrogates only occur inside strings


class ErrorDetail(BaseModel):
    detail: str


class Alive(BaseModel):
    status: str = "alive"


_UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {
        "model": ErrorDetail,
        "description": "Missing or wrong bearer token (only when the sidecar runs with a token).",
        "headers": {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}},
    }
}


_bearer = HTTPBearer(auto_error=False, description="JITWATCH_TOKEN, sent as `Authorization: Bearer <token>`.")


def _header_bytes(value: str) -> bytes:
    """The raw bytes of a header value: Starlette decodes header bytes as Latin-1, so encoding back
    to Latin-1 gives exactly what the client sent (a UTF-8 token's bytes included)."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:  # not from the wire (a test client handing str through)
        return value.encode("utf-8", "surrogateescape")


def _token_dependency(token: str) -> Callable[..., None]:
    expected = token.encode("utf-8")

    def require_token(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
        given = _header_bytes(credentials.credentials) if credentials is not None else b""
        if credentials is None or not hmac.compare_digest(given, expected):
            raise HTTPException(
                status_code=401,
                detail="missing or invalid bearer token",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return require_token


def _open_readonly(directory: Path) -> tuple[Journal | None, str | None]:
    """``(the journal opened read-only, None)``, or ``(None, why not)``.

    The reason is served (``/readyz``'s ``reason`` without the token, ``/jit``'s
    ``journal_error``, ``/jit/events``' 503 ``detail``), so it passes through
    :func:`~jitwatch.redact.redact`: with the default ``JITWATCH_DIR`` the directory it may name
    is under the home directory (``~/.local/state/jitwatch``), which holds the user name. The log
    line keeps the full path (it stays on the host). Never raises for a journal problem.
    """
    if not directory.is_dir() and (directory.exists() or directory.parent.is_file()):
        return None, redact(f"journal directory {directory} is not a directory")
    try:
        return Journal(directory, readonly=True), None
    except FileNotFoundError:
        return None, f"{NO_JOURNAL_REASON} (no worker has written to it)"
    except NotADirectoryError:
        return None, redact(f"journal directory {directory} is not a directory")
    except JournalVersionError as exc:  # names the file and both schema revisions
        log.warning("jitwatch: %s", exc)
        return None, redact(f"journal unreadable: {exc}")
    except (OSError, JournalCorruptError, sqlite3.Error) as exc:
        log.warning("jitwatch: cannot open journal in %s: %s", directory, exc)
        return None, f"journal unreadable: {type(exc).__name__}"


def create_app(
    journal_dir: Path | None = None,
    *,
    token: str | None = None,
    settings: Settings | None = None,
    stale_after: float | None = None,
) -> FastAPI:
    """Build the sidecar's FastAPI app.

    Args:
        journal_dir: journal directory; default ``settings.journal_dir`` (``JITWATCH_DIR``).
        token: bearer token; default ``settings.token`` (``JITWATCH_TOKEN``); ``None`` and no
            setting → no authentication.
        settings: default :meth:`Settings.from_env` (raises :class:`~jitwatch.config.ConfigError`).
        stale_after: seconds without a worker heartbeat after which its rank is ``stale`` and not
            ready; default ``settings.stale_seconds`` (``JITWATCH_STALE_SECONDS``, 60); 0: off.

    Returns:
        The app; nothing is read until the first request.
    """
    settings = settings or Settings.from_env()
    directory = Path(journal_dir) if journal_dir is not None else settings.journal_dir
    token = token if token is not None else settings.token
    if token is not None and not token.strip():
        raise ConfigError("the bearer token is empty: pass a real token, or none to serve without one")
    stale = settings.stale_seconds if stale_after is None else stale_after
    protected: list[Any] = [Depends(_token_dependency(token))] if token else []
    auth_responses = _UNAUTHORIZED if token else {}

    app = FastAPI(
        title="jitwatch sidecar",
        version=__version__,
        description="Triton JIT compilation status, events and Prometheus metrics, read from the jitwatch journal.",
        # With a token, the schema is served behind it (below) and the HTML docs are off: only
        # /livez and /readyz answer without the token.
        openapi_url=None if token else "/openapi.json",
        docs_url=None if token else "/docs",
        redoc_url=None if token else "/redoc",
        # A redirect from /metrics/ to /metrics would build its Location from the Host header.
        redirect_slashes=False,
    )
    app.state.journal_dir = directory
    # /jit names it (jitwatch status prints it); a home directory as ~, like every path it serves
    shown_dir = redact(str(directory.absolute()))
    reads = BlockingCalls(settings.read_timeout_seconds, max_in_flight=READ_THREADS)
    app.state.journal_reads = reads
    # /metrics has threads of its own: clients polling /jit/events (a journal open and a scan each)
    # or /jit cannot hold every thread and make Prometheus's scrapes fail at once.
    scrapes = BlockingCalls(settings.read_timeout_seconds, max_in_flight=SCRAPE_THREADS)
    app.state.scrape_reads = scrapes
    # /readyz has threads of its own: scrapes waiting for a slow refresh never starve the probes.
    probes = BlockingCalls(settings.read_timeout_seconds, max_in_flight=PROBE_THREADS)
    app.state.probe_reads = probes

    def timed_out(exc: CallTimeout) -> str:
        log.warning("jitwatch: %s; answering 503", exc)
        return f"journal read timed out ({exc})"

    if token:

        @app.get("/openapi.json", include_in_schema=False, dependencies=protected)
        def openapi_json() -> JSONResponse:
            return JSONResponse(app.openapi())

    @contextmanager
    def open_journal() -> Iterator[tuple[Journal | None, str | None]]:
        journal, error = _open_readonly(directory)
        if journal is None:
            yield None, error
            return
        try:
            yield journal, None
        finally:
            journal.close()

    @app.get(
        "/jit",
        response_model=JitStatus,
        response_class=PrettyJSONResponse,
        dependencies=protected,
        responses=auth_responses,
        summary="JIT compilation status of every rank",
    )
    async def get_status(
        kernels: Annotated[
            int,
            Query(ge=1, le=10_000, description="Most kernels listed (most serving compiles first)."),
        ] = DEFAULT_KERNELS_LIMIT,
        backend: Annotated[str | None, Depends(backend_filter)] = None,
    ) -> Any:
        def document() -> JitStatus:
            try:  # from the live in-memory aggregates (jitwatch.views.live)
                doc = live(directory).status(kernels_limit=kernels, stale_after=stale, backend=backend)
            except sqlite3.Error as exc:
                log.warning("jitwatch: journal read failed: %s", exc)
                return build_status(None, error=f"journal unreadable: {type(exc).__name__}")
            if doc is not None:
                return doc
            with open_journal() as (journal, error):
                try:
                    return build_status(journal, error=error, kernels_limit=kernels, stale_after=stale, backend=backend)
                except sqlite3.Error as exc:
                    log.warning("jitwatch: journal read failed: %s", exc)
                    return build_status(None, error=f"journal unreadable: {type(exc).__name__}")

        def read() -> PrettyJSONResponse:
            doc = document()
            doc.journal_dir = shown_dir  # a new document each time (build_status)
            # Built and encoded here, on the read's thread, and returned finished (the route's
            # response_model documents it; FastAPI does not validate a returned Response again).
            # FastAPI builds a returned model on the event loop: a large document (coverage of 500
            # kernels at ?kernels=10000: 14 MB) held the loop, /livez and /readyz with it, for
            # up to 2.5 s under 8 such requests.
            return PrettyJSONResponse(doc.model_dump(mode="json"))

        try:
            return await reads.call(read)
        except CallTimeout as exc:
            doc = build_status(None, error=timed_out(exc))
            doc.journal_dir = shown_dir
            return PrettyJSONResponse(doc.model_dump(mode="json"), status_code=503)

    @app.get(
        "/jit/events",
        response_model=list[Event],
        response_class=PrettyJSONResponse,
        dependencies=protected,
        responses={
            **auth_responses,
            503: {"model": ErrorDetail, "description": "The journal is unreadable."},
        },
        summary="Journal events, newest first",
    )
    async def get_events(
        phase: Annotated[Phase | None, Query(description="Only events in this phase.")] = None,
        kind: Annotated[EventKind | None, Query(description="Only events of this kind.")] = None,
        kernel: Annotated[str | None, Query(max_length=512, description="Exact kernel name.")] = None,
        backend: Annotated[str | None, Depends(backend_filter)] = None,
        rank: Annotated[int | None, Query(ge=0, le=MAX_RANK, description="Global rank.")] = None,
        since: Annotated[
            float | None, Query(ge=0, allow_inf_nan=False, description="Only events after this Unix time (s).")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_EVENTS_LIMIT, description="Most events returned.")] = 100,
    ) -> Any:
        def read() -> PrettyJSONResponse:
            headers: dict[str, str] = {}
            found = events(headers)
            # built and encoded on the read's thread, as /jit's document (see there)
            return PrettyJSONResponse([e.model_dump(mode="json") for e in found], headers=headers)

        def events(headers: dict[str, str]) -> list[Event]:
            with open_journal() as (journal, error):
                if journal is None:
                    if error and error.startswith(NO_JOURNAL_REASON):
                        return []
                    raise HTTPException(status_code=503, detail=error or "journal unreadable")
                try:
                    found = journal.events(
                        kind=kind, phase=phase, kernel=kernel, rank=rank, since=since, limit=limit, backend=backend
                    )
                    if not found and backend is not None:  # a misspelt name finds nothing: say what there is
                        # names only (a header value): a hand-edited journal's odd backend is left out
                        names = {row.backend for row in journal.stats()}
                        present = sorted(n for n in names if backend_name_problem(n) is None)
                        if backend not in names:
                            headers[BACKENDS_HEADER] = backends_header_value(present)
                    return found
                except sqlite3.Error as exc:
                    raise HTTPException(status_code=503, detail=f"journal unreadable: {type(exc).__name__}") from exc

        try:
            return await reads.call(read)
        except CallTimeout as exc:
            raise HTTPException(status_code=503, detail=timed_out(exc)) from None

    @app.get(
        "/metrics",
        response_class=Response,
        dependencies=protected,
        responses={
            **auth_responses,
            200: {
                "description": "Prometheus text format 0.0.4, or OpenMetrics 1.0 when the Accept header asks.",
                "content": {
                    "text/plain": {"schema": {"type": "string"}},
                    "application/openmetrics-text": {"schema": {"type": "string"}},
                },
            },
        },
        summary="Prometheus metrics (see docs/metrics.md)",
    )
    async def get_metrics(request: Request) -> Response:
        accept = request.headers.get("accept")
        try:
            body, content_type = await scrapes.call(lambda: live(directory).render(accept, stale))
        except CallTimeout as exc:
            return Response(content=timed_out(exc) + "\n", status_code=503, media_type="text/plain")
        return Response(content=body, media_type=None, headers={"Content-Type": content_type})

    @app.get("/livez", response_model=Alive, summary="Liveness: 200 while the process runs")
    async def livez() -> Alive:
        return Alive()

    def probe_options() -> Response:
        return Response(status_code=204, headers={"Allow": "GET, HEAD, OPTIONS"})

    @app.get(
        "/readyz",
        response_model=Readiness,
        responses={
            503: {
                "model": Readiness,
                "description": "Some rank has not completed warmup, stopped, exited (its process seen gone, or it "
                "recorded an exit on an unhandled Python exception) or is "
                "stale (no heartbeat), or none registered.",
            }
        },
        summary="Readiness: every rank's latest worker has completed warmup and is alive",
    )
    async def readyz() -> JSONResponse:
        def read() -> Readiness:
            ready = live(directory).readiness(stale_after=stale)  # the probes' own connection
            if ready is not None:
                return ready
            with open_journal() as (journal, error):  # cannot follow the journal: say why
                try:
                    ready = readiness(journal.latest_workers() if journal is not None else {}, stale_after=stale)
                except sqlite3.Error as exc:
                    ready = Readiness(
                        status="not ready", ready=False, reason=f"journal unreadable: {type(exc).__name__}"
                    )
            if journal is None and error and not error.startswith(NO_JOURNAL_REASON):
                ready.reason = error  # unreadable: whether workers registered is unknown
            return ready

        try:
            ready = await probes.call(read)
        except CallTimeout as exc:
            ready = Readiness(status="not ready", ready=False, reason=timed_out(exc))
        return JSONResponse(ready.model_dump(mode="json"), status_code=200 if ready.ready else 503)

    # Load balancers probe with HEAD (or OPTIONS): same status as GET (uvicorn sends no body for HEAD).
    for path, probe in (("/livez", livez), ("/readyz", readyz)):
        app.add_api_route(path, probe, methods=["HEAD"], include_in_schema=False)
        app.add_api_route(path, probe_options, methods=["OPTIONS"], include_in_schema=False)

    return app


def is_all_interfaces(host: str) -> bool:
    return host.strip() in ALL_INTERFACES


def local_url_host(host: str) -> str:
    """Where a client on this machine reaches a sidecar bound to ``host``, as a URL's host part
    (``jitwatch status`` without ``--url``): ``[::1]`` for ``::`` (uvicorn's listener there is
    IPv6-only: asyncio sets ``IPV6_V6ONLY``, so ``127.0.0.1`` is refused), ``127.0.0.1`` for
    ``0.0.0.0`` or an empty host (IPv4, or every family), another IPv6 address in brackets, else
    ``host`` itself."""
    h = host.strip()
    if h in ("::", "[::]"):
        return "[::1]"
    if is_all_interfaces(h):
        return "127.0.0.1"
    return f"[{h}]" if ":" in h and not h.startswith("[") else h


def check_bind(host: str, port: int) -> int:
    """Bind (and close) a test socket on ``host:port`` the way uvicorn binds its listener; return
    the port bound: ``port``, or for port 0 the free port the OS picked (which :func:`run` then
    serves on, so the line it prints names the real port; another process taking that port in
    the moment between is uvicorn's bind error).

    ``SO_REUSEADDR`` is set as uvicorn sets it, so a port whose previous listener is gone and only
    left ``TIME_WAIT`` connections (a server just stopped with Ctrl-C) counts as free, while a port
    with a live listener does not.

    Raises:
        PortUnavailableError: the bind failed; the message names the address and the OS reason.
    """
    import socket

    bind_host = host.strip("[]") or "0.0.0.0"
    fam = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind_host, port))
        except OSError as exc:
            raise PortUnavailableError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None
        return int(s.getsockname()[1])


def startup_line(host: str, port: int, journal_dir: Path, token: str | None) -> str:
    """The one line ``jitwatch serve`` prints before serving: URL, journal dir, token or not."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host or "0.0.0.0"
    auth = "bearer token required (except /livez, /readyz)" if token else "no token"
    return f"jitwatch sidecar on http://{shown}:{port} (journal {journal_dir}; {auth})"


def warn_all_interfaces(host: str, token: str | None) -> None:
    """Log a WARNING when ``host`` binds every interface (``0.0.0.0``, ``::``, empty): the
    endpoints expose kernel names and specialization keys (``jitwatch serve`` and ``jitwatch demo``)."""
    if is_all_interfaces(host):
        log.warning(
            "jitwatch sidecar bound to all interfaces (%s)%s; bind 127.0.0.1 unless remote scrapes need it",
            host or "0.0.0.0",
            "" if token else " WITHOUT a token (JITWATCH_TOKEN)",
        )


def run(
    host: str | None = None,
    port: int | None = None,
    journal_dir: Path | None = None,
    token: str | None = None,
    *,
    settings: Settings | None = None,
    stale_after: float | None = None,
    log_level: str = "info",
    access_log: bool = True,
) -> None:
    """Serve the sidecar with uvicorn until interrupted (blocking).

    Defaults come from ``settings`` (``JITWATCH_HOST``/``JITWATCH_PORT``/``JITWATCH_DIR``/
    ``JITWATCH_TOKEN``): ``127.0.0.1:9400``; port 0 serves on a free port the OS picks. Binding
    every interface logs a warning (and a louder one without a token): the endpoints expose kernel
    names and specialization keys. Prints :func:`startup_line`, with the port served, to stderr
    before uvicorn starts.

    Raises:
        PortUnavailableError: ``host:port`` cannot be bound (checked before uvicorn starts).
    """
    import sys

    import uvicorn

    settings = settings or Settings.from_env()
    host = host if host is not None else settings.host
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # "[::1]", as in a URL: uvicorn takes the bare address (it failed to resolve it)
    port = port if port is not None else settings.port
    token = token if token is not None else settings.token
    app = create_app(journal_dir, token=token, settings=settings, stale_after=stale_after)
    warn_all_interfaces(host, token)
    port = check_bind(host, port)
    print(startup_line(host, port, app.state.journal_dir, token), file=sys.stderr, flush=True)
    served, options = server_options(app, host, port, token, settings, log_level=log_level, access_log=access_log)
    uvicorn.run(served, **options)


SHUTDOWN_GRACE_S = 3
"""Seconds uvicorn waits for open requests after SIGTERM/SIGINT (``timeout_graceful_shutdown``)."""


def server_options(
    app: FastAPI,
    host: str,
    port: int,
    token: str | None,
    settings: Settings,
    *,
    log_level: str = "info",
    access_log: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """The ASGI app and the ``uvicorn.run`` options :func:`run` serves with: the h11 protocol with a
    request-head timeout, a send timeout and a connection cap
    (:func:`jitwatch.httpguard.guarded_h11_protocol`),
    uvicorn's own ``limit_concurrency`` (503 past it) and ``backlog`` (the listen queue, and the most
    sockets asyncio accepts per loop tick) set to the same cap, ``timeout_keep_alive`` 5 s,
    ``timeout_graceful_shutdown`` :data:`SHUTDOWN_GRACE_S`, and without a token the ``Host``
    check (:class:`~jitwatch.httpguard.HostCheckMiddleware`: IP literals, ``localhost``, ``host``
    and ``settings.allowed_hosts``). Also rate-limits asyncio's ``EMFILE`` log lines."""
    install_accept_error_filter()
    max_conn = effective_max_connections(settings.max_connections)
    served: Any = app
    if not token:
        served = HostCheckMiddleware(app, (host.strip("[]"), *settings.allowed_hosts))
    return served, {
        "host": host,
        "port": port,
        "log_level": log_level,
        "access_log": access_log,
        "http": guarded_h11_protocol(
            header_timeout=settings.header_timeout_seconds,
            max_connections=max_conn,
            send_timeout=settings.send_timeout_seconds,
        ),
        "limit_concurrency": max_conn,
        # Also the most sockets asyncio accepts in one loop tick, before any can be refused.
        "backlog": max_conn,
        "timeout_keep_alive": 5,
        "timeout_graceful_shutdown": SHUTDOWN_GRACE_S,
    }
