"""Journal directory safety (issue 14): symlinks, FIFOs, other users' files and directories,
group/world-writable directories and the no-HOME fallback.

Real writer processes (``_writer.py`` through :class:`~jitwatch.store.writer.JournalWriter`), real
SQLite, real files. "Another user" is uid 65534 (``nobody``): files and links are given to it
with ``os.lchown``/``os.chown``, which needs root (the CI runs as root); those tests skip otherwise.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from jitwatch.errors import JournalUnsafeError
from jitwatch.store.journal import Journal
from tests.reliability.conftest import run_writer

OTHER_UID = 65534
as_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")


def _write(directory: Path, count: int = 20, timeout: float = 60) -> tuple[int, str, str]:
    proc = run_writer(directory, "0", str(count))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out, err


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_planted_journal_symlink_is_not_followed(tmp_path: Path) -> None:
    """A ``journal.db`` symlink planted in a world-writable journal directory: before the fix
    the worker created and wrote the link's target elsewhere (mode 0644); now nothing is written
    through the link, the events are counted as dropped, and the log says why."""
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    elsewhere = tmp_path / "victim"
    elsewhere.mkdir()
    target = elsewhere / "target.db"
    os.symlink(target, d / "journal.db")
    rc, out, err = _write(d)
    assert not target.exists(), "the worker wrote through a planted symlink"
    assert rc == 2 and out.strip().endswith("0 21"), (rc, out, err)  # 20 compiles + worker_start dropped
    assert "is a symlink" in err and err.count("cannot write its journal") == 1
    assert _mode(d) == 0o700  # the directory was made owner-only as well


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_planted_wal_or_shm_symlink_is_refused(tmp_path: Path, suffix: str) -> None:
    d = tmp_path / "j"
    d.mkdir(mode=0o700)
    target = tmp_path / f"target{suffix}"
    os.symlink(target, d / f"journal.db{suffix}")
    rc, out, err = _write(d)
    assert not target.exists()
    assert rc == 2 and "is a symlink" in err, (rc, out, err)


def test_fifo_journal_does_not_hang_the_writer(tmp_path: Path) -> None:
    """A FIFO named ``journal.db``: SQLite's read of the header would block forever (and the
    worker's exit with it). Now it is refused at once and the writer process exits."""
    d = tmp_path / "j"
    d.mkdir(mode=0o700)
    os.mkfifo(d / "journal.db", 0o600)
    t0 = time.monotonic()
    try:
        rc, out, err = _write(d, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the writer hung on a FIFO journal")
    assert rc == 2 and "is a FIFO" in err, (rc, out, err)
    assert time.monotonic() - t0 < 30


def test_world_writable_directory_is_made_owner_only(tmp_path: Path) -> None:
    d = tmp_path / "j"
    d.mkdir()
    os.chmod(d, 0o1777)
    rc, _, err = _write(d)
    assert rc == 0, err
    assert _mode(d) == 0o700
    assert "was writable by others (mode 1777); made it owner-only" in err
    for sfx in ("", "-wal", "-shm"):
        p = Path(f"{d / 'journal.db'}{sfx}")
        if p.exists():
            assert _mode(p) == 0o600


def test_group_readable_journal_files_are_made_owner_only(tmp_path: Path) -> None:
    d = tmp_path / "j"
    Journal(d).close()
    os.chmod(d / "journal.db", 0o664)
    rc, _, err = _write(d)
    assert rc == 0, err
    assert _mode(d / "journal.db") == 0o600


@as_root
def test_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, OTHER_UID, OTHER_UID)
    rc, out, err = _write(d)
    assert rc == 2 and f"owned by uid {OTHER_UID}" in err and "JITWATCH_DIR" in err, (rc, out, err)
    assert not (d / "journal.db").exists()


@as_root
def test_journal_file_of_another_user_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "j"
    Journal(d).close()
    os.chown(d / "journal.db", OTHER_UID, OTHER_UID)
    rc, out, err = _write(d)
    assert rc == 2 and f"owned by uid {OTHER_UID}" in err, (rc, out, err)


@as_root
def test_symlinked_directory_another_user_can_repoint_is_refused(tmp_path: Path) -> None:
    """``/tmp/jitwatch-<uid>`` pre-created by another user as a symlink to a directory of ours
    (e.g. ``~/.ssh``): refused, because its owner can repoint it at any time."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    ours = tmp_path / "private"
    ours.mkdir(mode=0o700)
    link = tmp / "jitwatch-0"
    os.symlink(ours, link)
    os.lchown(link, OTHER_UID, OTHER_UID)
    rc, out, err = _write(link)
    assert rc == 2 and "symlink another user can replace" in err, (rc, out, err)
    assert not (ours / "journal.db").exists()


def _no_home_dir(env: dict[str, str]) -> Path:
    """``default_journal_dir`` in a child process without HOME and without a passwd entry."""
    code = (
        "import pathlib, sys\n"
        "from jitwatch.config import default_journal_dir\n"
        "def no_home(): raise RuntimeError('no home')\n"
        "pathlib.Path.home = staticmethod(no_home)\n"
        "print(default_journal_dir())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return Path(out.strip())


def test_no_home_prefers_xdg_runtime_dir(tmp_path: Path) -> None:
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_STATE_HOME", "JITWATCH_DIR")}
    env["XDG_RUNTIME_DIR"] = str(runtime)
    assert _no_home_dir(env) == runtime / "jitwatch"


@as_root
def test_no_home_fallback_precreated_by_another_user_is_refused(tmp_path: Path) -> None:
    """No HOME and no XDG_RUNTIME_DIR: the fallback ``<tmp>/jitwatch-<uid>`` is predictable, so
    another user may create it first. Before the fix the worker used their directory silently;
    now it refuses it with a message naming the owner and JITWATCH_DIR."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    env = {
        k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_STATE_HOME", "JITWATCH_DIR", "XDG_RUNTIME_DIR")
    }
    env["TMPDIR"] = str(tmp)
    d = _no_home_dir(env)
    assert d == tmp / f"jitwatch-{os.getuid()}"
    d.mkdir(mode=0o777)
    os.chmod(d, 0o777)
    os.chown(d, OTHER_UID, OTHER_UID)
    rc, out, err = _write(d)
    assert rc == 2 and f"owned by uid {OTHER_UID}" in err, (rc, out, err)
    assert not (d / "journal.db").exists()


def test_fresh_fallback_directory_is_created_0700(tmp_path: Path) -> None:
    d = tmp_path / "tmp" / "jitwatch-x"
    rc, _, err = _write(d)
    assert rc == 0, err
    assert _mode(d) == 0o700 and _mode(d / "journal.db") == 0o600


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_every_directory_the_writer_creates_is_0700(tmp_path: Path, umask: int) -> None:
    """README: the journal directory is owner-only (0700). Its missing parents were created by
    ``Path.mkdir(parents=True)``, 0777 minus the umask (0755, or 0777 under umask 0): a
    ``JITWATCH_DIR=~/.local/state/jitwatch`` on a fresh host left ``~/.local/state`` 0755. Now every
    directory jitwatch creates is 0700 whatever the umask (the XDG spec asks 0700 for the base
    directories it creates); one that already exists keeps its mode."""
    (tmp_path / "exists").mkdir(mode=0o755)
    os.chmod(tmp_path / "exists", 0o755)
    d = tmp_path / "exists" / "state" / "deeper" / "jitwatch"
    old = os.umask(umask)
    try:
        Journal(d).close()
    finally:
        os.umask(old)
    for path in (d, d.parent, d.parent.parent):
        assert _mode(path) == 0o700, (path, oct(_mode(path)))
    assert _mode(tmp_path / "exists") == 0o755


def test_reader_refuses_symlink_and_fifo(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """The sidecar never follows a symlinked journal file and never blocks on a FIFO: it answers
    at once that the journal is unreadable."""
    real = tmp_path / "real"
    Journal(real).close()
    d = tmp_path / "j"
    d.mkdir(mode=0o700)
    os.symlink(real / "journal.db", d / "journal.db")
    with pytest.raises(JournalUnsafeError, match="is a symlink"):
        Journal(d, readonly=True)
    f = tmp_path / "f"
    f.mkdir(mode=0o700)
    os.mkfifo(f / "journal.db", 0o600)
    with pytest.raises(JournalUnsafeError, match="is a FIFO"):
        Journal(f, readonly=True)
    sc = sidecar_factory(f)
    t0 = time.monotonic()
    r = httpx.get(sc.url + "/readyz", timeout=20)
    assert r.status_code == 503 and "unreadable" in r.json()["reason"]
    assert httpx.get(sc.url + "/jit/events", timeout=20).status_code == 503
    assert time.monotonic() - t0 < 20
