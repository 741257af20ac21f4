"""Guards that keep the sidecar's HTTP server answering under slow clients and hung storage.

What uvicorn 0.54 offers, and what is added here (the smallest pieces that uvicorn lacks):

* **Connection limit** — uvicorn's ``limit_concurrency`` answers 503 once that many connections or
  tasks exist, but only when a connection *completes a request*: connections that never finish
  their headers are accepted and held. :func:`guarded_h11_protocol` therefore also closes (aborts)
  any connection accepted beyond ``max_connections`` at once, and ``max_connections`` is capped
  below the process's open-file limit (``RLIMIT_NOFILE`` soft limit minus :data:`FD_RESERVE`), so
  client sockets alone can never exhaust the descriptors (``EMFILE``).
* **Header timeout** — uvicorn has ``timeout_keep_alive`` (idle time *between* requests; default
  5 s) and ``h11_max_incomplete_event_size`` (bytes of an incomplete head; default 16 KiB), but no
  time limit on receiving a request: a client that sends one byte every few seconds, or nothing at
  all after connecting ("slowloris"), was held forever. The protocol class here arms a timer
  (``header_timeout`` seconds, not reset by data) whenever the connection waits for a request head
  or for the rest of a request's body, and closes the connection when it fires. The body counts
  too: a request head announcing a body (``Content-Length: 1000000``) is answered without the
  body being read (no endpoint takes one), uvicorn then arms its keep-alive timer, and one more
  body byte cancels that timer for good (``data_received`` → ``_unset_keepalive_if_required``),
  so such a connection was held idle forever, credentials or not.
* **Send timeout** — a response is written to the socket in one piece (Starlette sends a body in
  one message: ``/jit?kernels=10000`` can be 14 MB); what the kernel does not take waits in the
  transport's buffer, and uvicorn waits for it without a deadline. A client that asks and never
  reads (or reads a byte now and then) held that buffer and its connection forever, even after
  uvicorn's keep-alive timer closed it (``close()`` waits for the buffer to drain), until the
  connection cap was full and every client, ``/livez`` included, was refused. The protocol here
  arms a timer (``send_timeout`` seconds) whenever bytes wait in the transport's buffer with no
  write to come soon — writing paused (the buffer above its high-water mark, 64 KiB), writing
  resumed with bytes left, or a response complete with bytes left (below the high-water mark, so
  asyncio never pauses: a client that never reads with 1 byte to 64 KiB left in the buffer was held
  as well; also once uvicorn is closing the connection, after ``Connection: close``, HTTP/1.0 or a
  bad request, since its ``close()`` waits for the buffer too) — and aborts the connection when
  the client took no byte for that long. What the client took is bytes written, minus bytes in the
  transport's buffer, minus bytes the kernel still holds unacknowledged (``TIOCOUTQ``, Linux): a
  slow client that keeps reading is not cut (a timeout between two reads of the client, like
  nginx's ``send_timeout``), even while the kernel's send buffer, full, takes no more from the
  transport for longer than the timeout (it takes more only once about a third is drained). The
  abort sets ``SO_LINGER`` to 0, so the client sees a reset, not a clean end of a cut body, and the
  kernel frees the unsent bytes at once.
* **EMFILE log flood** — when ``accept()`` fails for lack of descriptors, asyncio's selector loop
  logs ``socket.accept() out of system resource`` with a traceback on every retry (each second).
  :class:`AcceptErrorFilter` on the ``asyncio`` logger lets the first through and then one line
  per :data:`ACCEPT_LOG_INTERVAL_S` with the count suppressed.
* **Graceful shutdown** — uvicorn's ``timeout_graceful_shutdown`` bounds the wait for open
  requests after SIGTERM (otherwise unbounded).
* **Blocking reads with a deadline** — :class:`BlockingCalls` runs a blocking function (a journal
  read) on a *daemon* thread and waits at most ``timeout`` seconds; at most ``max_in_flight`` such
  threads exist, further calls fail at once. A read stuck in the kernel (a FIFO, a hung network
  filesystem, a held lock) then costs one thread, never the event loop, never ``/livez``, and
  never the process's exit (daemon threads are not joined).
* **Host check** — :class:`HostCheckMiddleware` refuses (421) requests whose ``Host`` is a DNS
  name not in the allowed list: a DNS-rebinding page in a browser can only reach the sidecar
  through a name the attacker controls. IP literals (no DNS involved), ``localhost`` and the
  configured names are accepted.

Only uvicorn's pure-Python ``h11`` protocol is guarded (the one installed here; ``httptools`` is
not a dependency): :func:`guarded_h11_protocol` subclasses ``uvicorn.protocols.http.h11_impl.H11Protocol``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from jitwatch.text import logger, plural

log = logger(__name__)

T = TypeVar("T")

FD_RESERVE = 64
"""Descriptors kept free for everything but client sockets (the journal, logs, the listener)."""
ACCEPT_LOG_INTERVAL_S = 60.0
"""At most one ``accept()`` resource error is logged per this many seconds."""


def effective_max_connections(requested: int) -> int:
    """``requested``, capped at the ``RLIMIT_NOFILE`` soft limit minus :data:`FD_RESERVE` (at
    least 8). Uses :mod:`resource` (POSIX); elsewhere ``requested``."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return requested
    if soft == resource.RLIM_INFINITY:
        return requested
    return max(8, min(requested, int(soft) - FD_RESERVE))


def guarded_h11_protocol(
    *, header_timeout: float, max_connections: int, send_timeout: float = 0.0
) -> type[asyncio.Protocol]:
    """A subclass of uvicorn's ``H11Protocol`` with a request-head timeout, a send timeout
    (``0``: none) and a hard connection cap (see the module docstring). Pass it as
    ``uvicorn.Config(http=...)``."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    waiting = (h11.IDLE, h11.SEND_BODY)  # their_state while a request head or body is incomplete

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _send_timer: asyncio.TimerHandle | None = None
        _taken_at_check = 0
        _counted: _CountingTransport | None = None
        _lost = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if send_timeout > 0:
                self._counted = _CountingTransport(transport)
                self._counted.on_close = self._arm_send_timer
                super().connection_made(self._counted)  # type: ignore[arg-type]
            else:
                super().connection_made(transport)
            if len(self.connections) > max_connections:
                _refused.note()
                transport.abort()
                return
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state in waiting and not self.transport.is_closing():
                self._arm_head_timer()  # (still) waiting for a complete request head or body
            else:
                self._cancel_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._lost = True
            self._cancel_head_timer()
            self._cancel_send_timer()
            super().connection_lost(exc)

        def pause_writing(self) -> None:
            super().pause_writing()
            self._arm_send_timer()

        def resume_writing(self) -> None:
            super().resume_writing()
            # the client took bytes; what is left below the low-water mark may never be taken
            self._cancel_send_timer()
            self._arm_send_timer()

        def _arm_send_timer(self) -> None:
            """Start watching the client's progress, if bytes wait in the buffer (also while
            uvicorn closes the connection: its ``close()`` waits for them)."""
            counted = self._counted
            if self._send_timer is not None or counted is None or self._lost:
                return
            if counted.get_write_buffer_size() > 0:
                self._taken_at_check = counted.taken()
                self._send_timer = self.loop.call_later(send_timeout, self._send_check)

        def _cancel_send_timer(self) -> None:
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def _send_check(self) -> None:
            """``send_timeout`` seconds after the timer was armed, or after the previous check."""
            self._send_timer = None
            counted = self._counted
            if counted is None:
                return
            left = counted.get_write_buffer_size()
            if left == 0 or self._lost:
                return  # all handed to the kernel: nothing held here
            taken = counted.taken()
            if taken <= self._taken_at_check:  # the client took nothing since: free the buffer
                _stalled.note(left)
                counted.reset()
                return
            self._taken_at_check = taken
            self._send_timer = self.loop.call_later(send_timeout, self._send_check)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # Between requests uvicorn's keep-alive timer limits the idle time; ours restarts
            # when the next request's first bytes arrive (data_received), or stays while the
            # request's body is still incomplete (answered without reading it: no endpoint takes
            # one; a body byte would cancel uvicorn's keep-alive timer for good).
            if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
                self._arm_head_timer()
            else:
                self._cancel_head_timer()
            self._arm_send_timer()  # bytes of this response left in the buffer

        def _arm_head_timer(self) -> None:
            if self._head_timer is None and header_timeout > 0:
                self._head_timer = self.loop.call_later(header_timeout, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.conn.their_state in waiting and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol


class _CountingTransport:
    """The connection's transport, counting the bytes written to it (``written``) for the send
    timeout's measure of the client's progress (:meth:`taken`). Every other attribute is the
    transport's own."""

    __slots__ = ("_transport", "on_close", "written")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.written = 0
        self.on_close: Callable[[], None] | None = None
        """Called after :meth:`close` (uvicorn closing the connection: its ``close()`` waits for
        the buffer, so the send timer must watch it; a 400 to a bad request closes without
        completing a response)."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data.nbytes if isinstance(data, memoryview) else len(data)
        self._transport.write(data)

    def writelines(self, lines: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in lines:
            self.write(data)

    def close(self) -> None:
        self._transport.close()
        if self.on_close is not None:
            self.on_close()

    def taken(self) -> int:
        """Bytes the client took: written, minus those in the transport's buffer, minus those the
        kernel holds unacknowledged (``ioctl(TIOCOUTQ)``, Linux; elsewhere counted as taken)."""
        return self.written - self._transport.get_write_buffer_size() - _unacked(self._transport)

    def reset(self) -> None:
        """Abort with ``SO_LINGER`` 0: the peer gets a reset and the kernel drops unsent bytes."""
        try:
            sock = self._transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except (OSError, AttributeError, ValueError):
            pass
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _unacked(transport: asyncio.Transport) -> int:
    """Bytes the kernel holds in the connection's send queue, unsent or not yet acknowledged
    (``ioctl(fd, TIOCOUTQ)``, which is ``SIOCOUTQ`` for a TCP socket on Linux); 0 where unknown."""
    try:
        import fcntl
        import termios

        sock = transport.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
        if fd < 0:
            return 0
        (value,) = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"))
        return max(0, int(value))
    except (ImportError, OSError, AttributeError, ValueError, struct.error):
        return 0


class _Throttled:
    """Counts an event; logs ``message`` (with the count since the last line and the caller's
    ``*args``) one line a minute at most."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.total = 0
        self._last_log = -ACCEPT_LOG_INTERVAL_S
        self._since_log = 0

    def note(self, *args: Any) -> None:
        self.total += 1
        self._since_log += 1
        now = time.monotonic()
        if now - self._last_log >= ACCEPT_LOG_INTERVAL_S:
            log.warning(self.message, plural(self._since_log, "connection"), *args)
            self._last_log, self._since_log = now, 0


_refused = _Throttled("jitwatch sidecar: connection limit reached; closed %s since the last message")
"""Connections closed for being over the cap."""
_stalled = _Throttled(
    "jitwatch sidecar: a client read nothing of its response for the send timeout; aborted %s"
    " since the last message (this one with %d bytes unsent)"
)
"""Connections reset by the send timeout."""


class AcceptErrorFilter(logging.Filter):
    """Rate-limits asyncio's ``socket.accept() out of system resource`` records: the first
    passes, then one per ``interval`` seconds with the number suppressed in between."""

    def __init__(self, interval: float = ACCEPT_LOG_INTERVAL_S) -> None:
        super().__init__()
        self.interval = interval
        self.suppressed = 0
        self._last = -interval

    def filter(self, record: logging.LogRecord) -> bool:
        if "out of system resource" not in str(record.msg):
            return True
        now = time.monotonic()
        if now - self._last < self.interval:
            self.suppressed += 1
            return False
        if self.suppressed:
            record.msg = f"{record.msg} ({self.suppressed} more in the last {self.interval:g} s not logged)"
        self._last, self.suppressed = now, 0
        return True


def install_accept_error_filter() -> AcceptErrorFilter:
    """Add one :class:`AcceptErrorFilter` to the ``asyncio`` logger (idempotent) and return it."""
    logger = logging.getLogger("asyncio")
    for f in logger.filters:
        if isinstance(f, AcceptErrorFilter):
            return f
    f = AcceptErrorFilter()
    logger.addFilter(f)
    return f


class CallTimeout(Exception):
    """A :class:`BlockingCalls` call did not finish in time, or too many were already running."""


class BlockingCalls:
    """Run blocking functions on daemon threads with a deadline.

    Args:
        timeout: seconds :meth:`call` waits for a result.
        max_in_flight: most threads running at once (calls still running after their deadline
            count until they return).
    """

    def __init__(self, timeout: float, max_in_flight: int = 8) -> None:
        self.timeout = timeout
        self.max_in_flight = max_in_flight
        self._in_flight = 0
        self._lock = threading.Lock()

    async def call(self, fn: Callable[[], T]) -> T:
        """``fn()``'s result, or its exception.

        Raises:
            CallTimeout: not finished within ``timeout`` seconds (the thread keeps running and is
                abandoned), or ``max_in_flight`` calls are already running.
        """
        with self._lock:
            if self._in_flight >= self.max_in_flight:
                raise CallTimeout(f"{self._in_flight} journal reads still running")
            self._in_flight += 1
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if future.done():
                return
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

        def run() -> None:
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                _post(loop, settle, False, exc)
            else:
                _post(loop, settle, True, result)
            finally:
                with self._lock:
                    self._in_flight -= 1

        threading.Thread(target=run, name="jitwatch-journal-read", daemon=True).start()
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout)
        except asyncio.TimeoutError:
            raise CallTimeout(f"journal read took longer than {self.timeout:g} s") from None


def _post(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop closed while the call ran (shutdown): nobody is waiting
        pass


LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


def host_allowed(host_header: str | None, allowed: Iterable[str]) -> bool:
    """Whether a request's ``Host`` header is acceptable without a token: an IP literal (v4 or
    bracketed v6), ``localhost``, or a name in ``allowed`` (case-insensitive; ``*`` allows all).
    A missing or malformed header is refused."""
    if not host_header:
        return False
    names = {a.strip().lower().strip("[]") for a in allowed}
    if "*" in names:
        return True
    try:
        hostname = urlsplit("//" + host_header.strip()).hostname
    except ValueError:
        return False
    if not hostname:
        return False
    hostname = hostname.lower()
    try:
        ipaddress.ip_address(hostname)
        return True
    except ValueError:
        pass
    return hostname in LOOPBACK_NAMES or hostname in names


class HostCheckMiddleware:
    """ASGI middleware: answer 421 (Misdirected Request) when :func:`host_allowed` refuses the
    ``Host`` header. Applies to HTTP requests only."""

    def __init__(self, app: Any, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed_hosts = tuple(allowed_hosts)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = None
            for name, value in scope.get("headers", ()):
                if name == b"host":
                    host = value.decode("latin-1")
                    break
            if not host_allowed(host, self.allowed_hosts):
                body = b'{"detail":"Host header not allowed (DNS rebinding guard); see JITWATCH_ALLOWED_HOSTS"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 421,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
