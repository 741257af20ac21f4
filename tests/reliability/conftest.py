"""Shared helpers for the reliability and security tests (issue 7).

Everything here is real: worker processes are ``subprocess`` children writing through
:class:`jitwatch.store.writer.JournalWriter`, the sidecar is uvicorn serving
:func:`jitwatch.sidecar.create_app` on an ephemeral 127.0.0.1 port in its own process, storage
faults are real filesystems (a tmpfs mounted with a size limit, a tmpfs remounted read-only).
Tests that need ``mount`` skip with the reason when the kernel refuses it (unprivileged CI).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jitwatch.testing import free_port

HERE = Path(__file__).resolve().parent
WRITER_SCRIPT = HERE / "_writer.py"
SIDECAR_SCRIPT = HERE / "_sidecar.py"
PY = sys.executable


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB, from ``/proc/<pid>/status`` (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


class Sidecar:
    """The real sidecar (uvicorn + ``create_app``) in a child process on 127.0.0.1."""

    def __init__(
        self,
        journal_dir: Path,
        *,
        token: str | None = None,
        port: int | None = None,
        env: dict[str, str] | None = None,
        nofile: int | None = None,
    ) -> None:
        self.journal_dir = journal_dir
        self.token = token
        self.port = port or free_port()
        self.env = env
        self.nofile = nofile
        """``RLIMIT_NOFILE`` (soft and hard) for the sidecar process, if given."""
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def start(self, timeout: float = 30.0) -> Sidecar:
        cmd = [PY, str(SIDECAR_SCRIPT), str(self.journal_dir), str(self.port)]
        if self.token:
            cmd.append(self.token)
        nofile = self.nofile

        def limit_fds() -> None:
            if nofile is not None:
                import resource

                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        env = {**os.environ, **self.env} if self.env else None
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, preexec_fn=limit_fds if nofile else None
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"sidecar exited {self.proc.returncode}: {err[-2000:]}")
            try:
                if httpx.get(self.url + "/livez", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("sidecar did not come up")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def sidecar_factory(tmp_path: Path) -> Iterator[object]:
    started: list[Sidecar] = []

    def make(journal_dir: Path, **kwargs: object) -> Sidecar:
        sc = Sidecar(journal_dir, **kwargs)  # type: ignore[arg-type]
        started.append(sc)
        return sc.start()

    yield make
    for sc in started:
        sc.stop()


def run_writer(journal_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``_writer.py`` (see its docstring) as a child process, stdout piped as text."""
    return subprocess.Popen(
        [PY, str(WRITER_SCRIPT), str(journal_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _mount(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@contextlib.contextmanager
def tmpfs(mountpoint: Path, size: str) -> Iterator[Path]:
    """A real size-limited tmpfs at ``mountpoint`` (skips the test when mounting is refused).

    ``chmod 0500`` does not stop root, and these tests run as root in CI; a filesystem that is
    really full, or really mounted read-only, stops everyone.
    """
    mountpoint.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    res = _mount(["-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mountpoint)])
    if res.returncode != 0:
        pytest.skip(f"mount -t tmpfs refused here: {res.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def remount(mountpoint: Path, mode: str) -> None:
    """Remount ``mountpoint`` ``ro`` or ``rw`` (raises if the kernel refuses)."""
    res = _mount(["-o", f"remount,{mode}", str(mountpoint)])
    if res.returncode != 0:
        raise RuntimeError(f"remount,{mode} failed: {res.stderr}")


def fill_disk(path: Path) -> Path:
    """Write zeros to ``path`` until the filesystem says ENOSPC; returns the filler file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    chunk = b"\0" * 4096
    try:
        while True:
            os.write(fd, chunk)
    except OSError as exc:
        if exc.errno != 28:
            raise
    finally:
        os.close(fd)
    return path
