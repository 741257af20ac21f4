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
