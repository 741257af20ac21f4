"""Fleet fixtures: a real ``redis-server`` (Debian's, unpacked by ``scripts/install-redis.sh``) on a
free 127.0.0.1 port with a temporary directory, stopped after the test."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jitwatch.testing import free_port
from tests._paths import ROOT
from tests.tools import tool_missing

redis = pytest.importorskip("redis")


def find_redis_server() -> str | None:
    """``redis-server`` from the repo's ``.tools/redis`` (install-redis.sh), else on PATH."""
    local = ROOT / ".tools" / "redis" / "bin" / "redis-server"
    if local.is_file():
        return str(local)
    return shutil.which("redis-server")


@dataclass
class RedisServer:
    host: str
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, socket_timeout=5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_redis(tmp: Path) -> RedisServer:
    exe = find_redis_server()
    if exe is None:
        tool_missing("redis-server not installed (run scripts/install-redis.sh, `make tools`)")
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = open(tmp / "redis.log", "wb")  # kept open for the server's life
    proc = subprocess.Popen(
        [
            exe,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(tmp),
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "yes",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    server = RedisServer("127.0.0.1", port, proc)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"redis-server exited {proc.returncode}: {(tmp / 'redis.log').read_text()[-2000:]}")
        try:
            if server.client().ping():
                return server
        except redis.RedisError:
            time.sleep(0.05)
    server.stop()
    pytest.fail("redis-server did not answer PING within 20 s")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real Redis server for this test (127.0.0.1, free port, no persistence)."""
    server = start_redis(tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()
