"""Journal directory safety: owner-only, no symlinks, no files planted by another user.

The journal directory is where a worker creates ``journal.db`` and SQLite creates its ``-wal``
and ``-shm`` files. Anyone who can create entries in that directory can plant a symlink there
(``journal.db`` → a file elsewhere: SQLite follows it and writes that file, with the worker's
rights) or a FIFO (the open never returns). So before SQLite opens anything:

* **Writers** (:func:`prepare_writer_dir`): the directory is created with mode 0700 (``os.mkdir``
  is atomic: it either creates a new directory or fails), and so is each missing parent
  (:func:`make_private_dirs`: 0700 whatever the umask), then checked with ``os.lstat``: it must
  be a directory owned by this process's effective uid. If others may write it (mode & 0o022,
  e.g. a pre-existing 0777 directory or a tmpfs root 1777), it is made owner-only (0700,
  ``os.chmod``) and a warning says so; if that fails, the journal is refused. A directory owned
  by another user is refused (it is theirs to change under us). Then each of ``journal.db``,
  ``journal.db-wal`` and ``journal.db-shm`` that exists must be a regular file (``lstat``: not a
  symlink, FIFO, socket or device) owned by this uid; group/other permission bits are removed.
  ``journal.db`` is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` mode 0600. Once the directory
  is owner-only, only this uid (and root) can add or swap entries, so the checks cannot be
  raced by another user between the check and SQLite's ``open``.
* **Readers** (the sidecar, :func:`check_reader_files`): each journal file that exists must be a
  regular file, not a symlink (a FIFO would block the open forever). Readers may run as another
  uid (root), so ownership is not required of them.

A refusal raises :class:`~jitwatch.errors.JournalUnsafeError` (a ``PermissionError``): a worker's
journal writer counts its events as dropped and logs the message once; the sidecar answers
"journal unreadable". Parent directories are not checked: ``JITWATCH_DIR=/shared/jitwatch`` on a
world-writable volume is fine, because jitwatch creates (or verifies) ``jitwatch`` itself.

Mechanism: POSIX ``lstat``/``mkdir``/``open(O_NOFOLLOW)`` through :mod:`os` (Python 3.11); on a
platform without ``os.getuid`` (Windows) only the symlink and file-type checks apply.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from jitwatch.errors import JournalUnsafeError
from jitwatch.text import logger

log = logger(__name__)

JOURNAL_SUFFIXES = ("", "-wal", "-shm")
"""``journal.db`` and the two files SQLite's WAL mode keeps beside it."""

_WARNED: set[str] = set()


def _euid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _warn_once(key: str, message: str, *args: object) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(message, *args)


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and each missing parent owner-only: mode 0700 whatever the umask
    (``os.mkdir(..., 0o700)``, then ``fchmod`` through an ``O_NOFOLLOW`` descriptor of the directory
    just made). Directories that already exist keep their mode. (``Path.mkdir(parents=True)`` made
    the parents 0777 minus the umask: ``~/.local/state``, or ``JITWATCH_DIR`` itself under the
    demo's ``demo-<port>``, 0755.)

    Raises:
        OSError: a directory cannot be created (``NotADirectoryError``: a file is in the way).
    """
    missing: list[Path] = []
    path = directory
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # made meanwhile by another process: not ours to change
            continue
        _owner_only(path)


def _owner_only(directory: Path) -> None:
    """``fchmod`` 0700 the directory just created at ``directory``, through an ``O_NOFOLLOW``
    descriptor (a symlink swapped in meanwhile is not followed: ``OSError``); ``os.mkdir``'s mode
    is cut by the umask, which could remove the owner's own bits."""
    if not hasattr(os, "fchmod"):
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def prepare_writer_dir(directory: Path) -> None:
    """Create ``directory`` (0700, and its missing parents: :func:`make_private_dirs`) if missing
    and make sure only this uid can change it.

    Raises:
        JournalUnsafeError: ``directory`` is a symlink to, or is, a directory owned by another
            user; or it is group/world-writable and cannot be made owner-only.
        NotADirectoryError: a non-directory is in the way (the writer counts it as a storage
            fault, like an unwritable path).
        OSError: the directory cannot be created.
    """
    if not directory.parent.exists():
        make_private_dirs(directory.parent)
    try:
        os.mkdir(directory, 0o700)  # atomic: a new directory is ours, with no entries
        _owner_only(directory)  # whatever the umask
        return
    except FileExistsError:
        pass
    _check_dir_link(directory)
    st = os.stat(directory)  # a symlinked directory is followed, then judged by its target
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"journal directory {directory} is not a directory")
    euid = _euid()
    if euid is not None and st.st_uid != euid:
        raise JournalUnsafeError(
            f"journal directory {directory} is owned by uid {st.st_uid}, not by this process (uid {euid});"
            " another user could replace its files: point JITWATCH_DIR at a directory you own"
        )
    if st.st_mode & 0o022:
        try:
            os.chmod(directory, stat.S_IMODE(st.st_mode) & 0o700)
        except OSError as exc:
            raise JournalUnsafeError(
                f"journal directory {directory} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
                f" and could not be made owner-only: {exc.strerror or exc};"
                " chmod 700 it or point JITWATCH_DIR elsewhere"
            ) from None
        _warn_once(
            f"chmod:{directory}",
            "jitwatch journal directory %s was writable by others (mode %04o); made it owner-only (0700)",
            directory,
            stat.S_IMODE(st.st_mode),
        )


def _check_dir_link(directory: Path) -> None:
    """A symlink as the journal directory is allowed only when nobody else can repoint it: the
    link is owned by this uid or root, and its parent is not writable by others (or is sticky,
    like ``/tmp``, where only the link's owner may replace it)."""
    lst = os.lstat(directory)
    if not stat.S_ISLNK(lst.st_mode):
        return
    euid = _euid()
    parent = os.stat(directory.parent)
    owner_ok = euid is None or lst.st_uid in (euid, 0)
    parent_ok = not (parent.st_mode & 0o022) or bool(parent.st_mode & stat.S_ISVTX)
    if not (owner_ok and parent_ok):
        raise JournalUnsafeError(
            f"journal directory {directory} is a symlink another user can replace (link owner uid"
            f" {lst.st_uid}); point JITWATCH_DIR at the real directory"
        )


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def check_writer_files(db_path: Path) -> None:
    """Every existing ``journal.db``/``-wal``/``-shm`` is a regular file owned by this uid and
    not readable or writable by others (extra permission bits are removed).

    Raises:
        JournalUnsafeError: one of them is a symlink, FIFO, socket, device or directory, or is
            owned by another user.
    """
    euid = _euid()
    for suffix in JOURNAL_SUFFIXES:
        path = Path(f"{db_path}{suffix}")
        st = _lstat(path)
        if st is None:
            continue
        if not stat.S_ISREG(st.st_mode):
            raise JournalUnsafeError(f"{path} is {_kind(st.st_mode)}; refusing to open it (remove it)")
        if euid is not None and st.st_uid != euid:
            raise JournalUnsafeError(
                f"{path} is owned by uid {st.st_uid}, not by this process (uid {euid}); refusing to write it"
            )
        if st.st_mode & 0o077:
            os.chmod(path, stat.S_IMODE(st.st_mode) & 0o600)


def check_reader_files(db_path: Path) -> None:
    """Every existing ``journal.db``/``-wal``/``-shm`` is a regular file (not a symlink or FIFO).

    Raises:
        JournalUnsafeError: one of them is not.
    """
    for suffix in JOURNAL_SUFFIXES:
        path = Path(f"{db_path}{suffix}")
        st = _lstat(path)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise JournalUnsafeError(f"{path} is {_kind(st.st_mode)}; refusing to read it")


def create_owner_only(path: Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist, never through a symlink
    (``O_CREAT | O_EXCL | O_NOFOLLOW``; SQLite then gives its ``-wal`` and ``-shm`` files the
    same mode). ``os.open`` with a mode rather than ``os.umask``: the umask is process-wide and
    the host's other threads may be creating files at the same time."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def file_identity(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path`` (following no symlink), or ``None`` when it is missing:
    a writer compares it with what it opened to notice a journal deleted or replaced under it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)
