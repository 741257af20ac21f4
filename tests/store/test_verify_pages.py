"""Journal.verify_pages: what a long-lived reader's page cache hides (pages changed in the file
without a commit) is read from the file again, and SQLite's own limit (a page whose newest copy is
in the -wal file) holds as documented. Real SQLite files, damaged with plain file writes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from jitwatch.core.events import Phase
from jitwatch.store.journal import JOURNAL_FILE, Journal, is_corruption
from jitwatch.testing import JournalBuilder


def overwrite_page(path: Path, page: int, page_size: int) -> None:
    with open(path, "r+b") as f:
        f.seek((page - 1) * page_size)
        f.write(b"\xa5" * page_size)


def workers_root(j: Journal) -> tuple[int, int]:
    root = j._conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'workers'").fetchone()[0]
    return int(root), int(j._conn.execute("PRAGMA page_size").fetchone()[0])


def test_digest_is_stable_and_follows_commits(tmp_path: Path) -> None:
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    with Journal(tmp_path, readonly=True) as j:
        first = j.verify_pages()
        assert j.verify_pages() == first
        with Journal(tmp_path) as w:
            assert w.heartbeat(b.host, 100, 0, b.t0 + 5)
        version, digest = j.verify_pages()
        assert version != first[0] and digest != first[1]


def test_a_page_overwritten_in_place_is_seen_only_after_verify_pages(tmp_path: Path) -> None:
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)  # the writer closed last: checkpointed, no -wal
    with Journal(tmp_path, readonly=True) as j:
        assert len(j.latest_workers()) == 1
        root, page_size = workers_root(j)
        overwrite_page(tmp_path / JOURNAL_FILE, root, page_size)
        assert len(j.latest_workers()) == 1  # SQLite's page cache: no commit, so nothing re-read
        with pytest.raises(sqlite3.DatabaseError) as caught:
            j.verify_pages()
        assert is_corruption(caught.value)


def test_a_file_copied_over_in_place_changes_the_digest_not_the_data_version(tmp_path: Path) -> None:
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    backup = (tmp_path / JOURNAL_FILE).read_bytes()
    b.compile("add", phase=Phase.SERVING)
    with Journal(tmp_path, readonly=True) as j:
        version, digest = j.verify_pages()
        with open(tmp_path / JOURNAL_FILE, "r+b") as f:  # cp backup.db journal.db
            f.truncate(0)
            f.write(backup)
        assert j.data_version() == version and j.event_watermark() == 2  # still the cached pages
        after = j.verify_pages()
        assert after[0] == version and after[1] != digest and j.event_watermark() == 1


def test_damage_under_a_newer_wal_copy_is_not_seen_by_sqlite(tmp_path: Path) -> None:
    """SQLite reads a page's newest copy from the -wal file when there is one: damage to the
    database file's older copy is invisible to every reader (this one, a new connection) until a
    checkpoint writes the WAL copy over it. Tests of damage therefore checkpoint first."""
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    with Journal(tmp_path) as w:  # kept open: its commits stay in the -wal file
        w._conn.execute("PRAGMA wal_autocheckpoint=0")
        assert w.heartbeat(b.host, 100, 0, b.t0 + 5)  # the workers page now has a copy in the WAL
        with Journal(tmp_path, readonly=True) as j:
            root, page_size = workers_root(j)
            overwrite_page(tmp_path / JOURNAL_FILE, root, page_size)
            j.verify_pages()  # no error: the WAL copy is read
            assert j.latest_workers()[0].last_ts == b.t0 + 5
        w._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the WAL copy overwrites the damage
        with Journal(tmp_path, readonly=True) as j:
            assert j.integrity_ok() and j.latest_workers()[0].last_ts == b.t0 + 5
