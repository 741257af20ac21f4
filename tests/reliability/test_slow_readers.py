"""Clients that ask for a big response and then read it very slowly or never: the sidecar writes
a body in one piece (``/jit?kernels=10000`` is megabytes); what the kernel does not take waits in
the transport's buffer. Before, uvicorn held that buffer and the connection forever (its keep-alive
close waits for the buffer to drain), so such clients piled up to the connection cap. Now a
connection whose client took no byte for ``JITWATCH_SEND_TIMEOUT_SECONDS`` is aborted (its buffer
freed), a slow client that keeps reading is served to the end, and ``/livez`` and other clients
are answered meanwhile. Real sockets on 127.0.0.1 against the real sidecar (a child process)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import httpx
import pytest

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal

from .conftest import Sidecar

N_KERNELS = 4000  # /jit?kernels=10000 is about 8 MB: more than the kernel's socket buffers hold


def _journal(d: Path) -> Path:
    t = time.time()
    with Journal(d) as j:
        j.write(
            [Event(kind=EventKind.WORKER_START, ts=t, rank=0, attrs={"mode": "warn"})]
            + [
                Event(
                    kind=EventKind.COMPILE,
                    ts=t + i * 1e-4,
                    rank=0,
                    phase=Phase.SERVING,
                    backend="triton",
                    kernel=f"kernel_number_{i:05d}",
                    key=f"key{i}",
                    duration_s=0.01,
                )
                for i in range(N_KERNELS)
            ]
        )
    return d


def _stalled_client(port: int) -> socket.socket:
    """Asks for the big document with a 1 KiB receive window and never reads."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /jit?kernels=10000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return s


def _client_sockets(pid: int) -> int:
    """The sidecar's TCP sockets (the listener included)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def test_clients_that_do_not_read_are_cut_and_others_served(tmp_path: Path) -> None:
    sc = Sidecar(_journal(tmp_path / "j"), env={"JITWATCH_SEND_TIMEOUT_SECONDS": "2"}).start()
    assert sc.proc is not None
    pid = sc.proc.pid
    stalled: list[socket.socket] = []
    try:
        size = len(httpx.get(sc.url + "/jit?kernels=10000", timeout=60).content)
        assert size > 6_000_000
        base = _client_sockets(pid)
        for _wave in range(4):  # a few at a time: the journal reads are limited to 8 at once
            stalled += [_stalled_client(sc.port) for _ in range(4)]
            time.sleep(0.8)
        held = _client_sockets(pid) - base
        assert held >= 8, held  # their responses are written (200) and wait in the buffers
        t0 = time.monotonic()
        assert httpx.get(sc.url + "/livez", timeout=5).status_code == 200  # meanwhile
        # a slow reader that keeps taking bytes (pauses under the timeout) gets the whole body
        with socket.create_connection(("127.0.0.1", sc.port)) as slow:
            slow.sendall(b"GET /jit?kernels=10000 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            got = 0
            slow.settimeout(10)
            while chunk := slow.recv(1 << 20):
                got += len(chunk)
                time.sleep(0.5)
            assert got > size
        # every stalled connection aborted by the server (before: held for good)
        deadline = t0 + 20
        while time.monotonic() < deadline and _client_sockets(pid) > base:
            time.sleep(0.2)
        assert _client_sockets(pid) <= base, "connections of clients that never read were held"
        for s in stalled:  # the client sees the reset once it reads
            s.settimeout(5)
            try:
                while s.recv(1 << 20):
                    pass
            except ConnectionResetError:
                pass
        assert httpx.get(sc.url + "/livez", timeout=5).status_code == 200
    finally:
        for s in stalled:
            s.close()
        sc.stop()


def _send_queue(port: int, client_port: int) -> int:
    """Bytes the kernel holds unsent on the sidecar's end of one connection (``tx_queue`` in
    ``/proc/net/tcp``)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, queues = fields[1], fields[2], fields[4]
        if int(local.split(":")[1], 16) == port and int(remote.split(":")[1], 16) == client_port:
            return int(queues.split(":")[0], 16)
    raise AssertionError(f"no connection {port} <- {client_port} in /proc/net/tcp")


REQUESTS = {
    "keep-alive": "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    # uvicorn closes the connection itself after the response (its close() waits for the buffer)
    "close": "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    "http/1.0": "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n",
    "then a bad request": "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nNOT-HTTP\r\n\r\n",
}


@pytest.mark.parametrize("request_form", list(REQUESTS))
def test_a_client_that_never_reads_a_small_remainder_is_cut(tmp_path: Path, request_form: str) -> None:
    """The send timeout was armed only when asyncio paused writing (its buffer above 64 KiB), and
    never once uvicorn was closing the connection: a client that never read, its response leaving
    1 byte to 64 KiB in the transport's buffer once the kernel's socket buffers were full, was held
    forever (uvicorn's close waits for the buffer), and so was any such client that asked with
    ``Connection: close``, HTTP/1.0 or a bad request after its request. Bodies sized to leave
    ~8-56 KB there: every connection is now reset (the client sees the cut)."""
    sc = Sidecar(_journal(tmp_path / "j"), env={"JITWATCH_SEND_TIMEOUT_SECONDS": "2"}).start()
    assert sc.proc is not None
    pid = sc.proc.pid
    clients: list[socket.socket] = []
    try:
        sizes = {k: len(httpx.get(f"{sc.url}/jit?kernels={k}", timeout=60).content) for k in (1000, 3000)}
        per_kernel = (sizes[3000] - sizes[1000]) / 2000
        probe = _stalled_client(sc.port)  # what the kernel takes of a response for such a client
        time.sleep(1.5)
        capacity = _send_queue(sc.port, probe.getsockname()[1])
        probe.close()
        assert 0 < capacity < sizes[3000], (capacity, sizes)
        time.sleep(1)
        base = _client_sockets(pid)
        for extra in (8_000, 24_000, 40_000, 56_000):
            k = int(1000 + (capacity + extra - sizes[1000]) / per_kernel)
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            s.connect(("127.0.0.1", sc.port))
            s.sendall(REQUESTS[request_form].format(path=f"/jit?kernels={k}").encode())
            clients.append(s)
            time.sleep(0.3)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _client_sockets(pid) > base:
            time.sleep(0.2)
        assert _client_sockets(pid) <= base, "a client that never read a small remainder was held"
        assert httpx.get(sc.url + "/livez", timeout=5).status_code == 200
        for s in clients:  # a reset, not a clean end of a cut body
            s.settimeout(5)
            with pytest.raises(ConnectionResetError):
                while s.recv(1 << 20):
                    pass
    finally:
        for s in clients:
            s.close()
        sc.stop()


@pytest.mark.slow
def test_a_steady_slow_reader_is_not_cut(tmp_path: Path) -> None:
    """A client reading 30 KB every 0.1 s (300 KB/s) of the 8 MB document, send timeout 2 s. The
    kernel's send buffer, full, takes more from the transport's buffer only once about a third of
    it is drained (~1.3 MB: 4 s at this pace), so the transport saw no progress for longer than the
    timeout: the client was cut after ~3.9 MB, with a clean end of stream. Progress now counts the
    bytes the client acknowledged (the kernel's unacknowledged queue, TIOCOUTQ): served whole."""
    sc = Sidecar(_journal(tmp_path / "j"), env={"JITWATCH_SEND_TIMEOUT_SECONDS": "2"}).start()
    try:
        with socket.create_connection(("127.0.0.1", sc.port)) as s:
            s.settimeout(10)
            s.sendall(b"GET /jit?kernels=10000 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            data = bytearray()
            while chunk := s.recv(30_000):
                data += chunk
                time.sleep(0.1)
        head, _, body = bytes(data).partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        assert length > 6_000_000 and len(body) == length, (len(body), length)
    finally:
        sc.stop()
