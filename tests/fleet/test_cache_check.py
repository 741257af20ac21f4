"""`jitwatch cache check` against a real local TRITON_CACHE_DIR filled by real compile-only compiles,
then damaged the ways caches are damaged in the field (a truncated cubin, a file that vanished, a
metadata file of another kernel, a cache copied to another path), and against a real Redis."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.errors import StoreError
from jitwatch.fleet.cache_check import LocalCache, RedisCache, cache_dir_name, check, elf_problem, filesystem_of
from jitwatch.store.journal import Journal
from jitwatch.testing import MonitorHarness, fresh_kernel_cache
from jitwatch.warmup.manifest import Manifest, record_from_journal, save
from tests._paths import TRITON_TESTS

from .conftest import RedisServer

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf

runner = CliRunner()


@pytest.fixture
def recorded(harness: MonitorHarness) -> Manifest:
    """Two serving compiles of scale_copy into the harness's fresh TRITON_CACHE_DIR."""
    fresh_kernel_cache(kf.scale_copy)
    src, dst = torch.zeros(1024), torch.empty(1024)
    with harness.monitor.warmup():
        pass
    kf.scale_copy.warmup(src, dst, 1000, BLOCK=256, grid=(1,))
    kf.scale_copy.warmup(src, dst[1:], 1000, BLOCK=256, grid=(1,))
    harness.monitor.flush()
    with Journal(harness.journal_dir, readonly=True) as j:
        return record_from_journal(j)


def _entry_dir(cache: Path, m: Manifest, i: int = 0) -> Path:
    key = m.entries[i].cache_key
    assert key is not None
    return cache / cache_dir_name(key)


def test_complete_cache(recorded: Manifest, triton_cache: Path) -> None:
    report = check(recorded, LocalCache(triton_cache))
    assert report.complete and report.count("ok") == 2
    assert all(r.files >= 6 and r.bytes > 1000 for r in report.results)  # source … cubin, metadata
    assert report.filesystem is not None and report.filesystem.network is False


def test_truncated_cubin_is_corrupt(recorded: Manifest, triton_cache: Path) -> None:
    cubin = next(_entry_dir(triton_cache, recorded).glob("*.cubin"))
    data = cubin.read_bytes()
    assert elf_problem(data) is None
    cubin.write_bytes(data[: len(data) // 2])
    report = check(recorded, LocalCache(triton_cache))
    bad = report.results[0]
    assert bad.status == "corrupt" and "truncated" in (bad.reason or "")
    assert not report.complete


def test_vanished_file_is_a_miss(recorded: Manifest, triton_cache: Path) -> None:
    next(_entry_dir(triton_cache, recorded, 1).glob("*.ptx")).unlink()
    report = check(recorded, LocalCache(triton_cache))
    assert [r.status for r in report.results] == ["ok", "missing"]
    assert "does not exist" in (report.results[1].reason or "")


def test_metadata_of_another_compile_is_corrupt(recorded: Manifest, triton_cache: Path) -> None:
    first, second = _entry_dir(triton_cache, recorded, 0), _entry_dir(triton_cache, recorded, 1)
    shutil.copy(next(second.glob("scale_copy.json")), next(first.glob("scale_copy.json")))
    result = check(recorded, LocalCache(triton_cache)).results[0]
    assert result.status == "corrupt" and "metadata names hash" in (result.reason or "")


def test_cache_copied_to_another_path(recorded: Manifest, triton_cache: Path, tmp_path: Path) -> None:
    """Triton's group files hold absolute paths: a copy points at the original's files while
    they exist, and misses (compiles) once they are gone."""
    copy = tmp_path / "image-layer" / "triton-cache"
    shutil.copytree(triton_cache, copy)
    first = check(recorded, LocalCache(copy)).results[0]
    assert first.status == "corrupt" and "outside this cache" in (first.reason or "")
    shutil.rmtree(triton_cache)
    gone = check(recorded, LocalCache(copy)).results[0]
    assert gone.status == "missing" and "copied from another path" in (gone.reason or "")


def test_entries_without_cache_key_are_unknown(recorded: Manifest, triton_cache: Path) -> None:
    for e in recorded.entries:
        e.cache_key = None
    report = check(recorded, LocalCache(triton_cache))
    assert report.count("unknown") == 2 and not report.complete  # nothing could be checked


def test_network_filesystems_are_flagged() -> None:
    mountinfo = [
        "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
        "40 22 0:35 / /mnt/cache rw,relatime shared:2 - nfs4 fs.internal:/export/cache rw,vers=4.2",
        "41 22 0:36 / /mnt/bucket rw shared:3 - fuse.gcsfuse my-bucket rw",
        "42 22 0:37 / /lustre rw shared:4 - lustre 10.0.0.1@tcp:/scratch rw",
    ]
    nfs = filesystem_of("/mnt/cache/triton", mountinfo)
    assert nfs is not None and nfs.network and nfs.fstype == "nfs4" and nfs.mount_point == "/mnt/cache"
    assert "NFS" in (nfs.note or "")
    bucket = filesystem_of("/mnt/bucket/x", mountinfo)
    assert bucket is not None and bucket.network and "FUSE" in (bucket.note or "")
    lustre = filesystem_of("/lustre/triton", mountinfo)
    assert lustre is not None and "all-NaN" in (lustre.note or "")
    local = filesystem_of("/home/x/.triton/cache", mountinfo)
    assert local is not None and not local.network and local.fstype == "ext4"


def test_cli_exit_codes(recorded: Manifest, triton_cache: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "prod.json"
    save(recorded, manifest)
    ok = runner.invoke(app, ["cache", "check", str(manifest), "--cache-dir", str(triton_cache)])
    assert ok.exit_code == 0, ok.output
    assert "complete: 2 keys, 2 would load, 0 would compile (missing), 0 corrupt" in ok.stdout
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    bad = runner.invoke(app, ["cache", "check", str(manifest), "--cache-dir", str(empty), "--json"])
    assert bad.exit_code == 1
    assert json.loads(bad.stdout)["missing"] == 2
    usage = runner.invoke(app, ["cache", "check", str(manifest), "--cache-dir", str(empty), "--redis", "redis://x:1"])
    assert usage.exit_code == 2 and "not both" in usage.stderr
    # neither: Triton's own cache, as the worker would use it (TRITON_CACHE_DIR here)
    default = runner.invoke(app, ["cache", "check", str(manifest)], env={"TRITON_CACHE_DIR": str(triton_cache)})
    assert default.exit_code == 0, default.output
    assert f"cache: {triton_cache}" in default.stderr and "complete: 2 keys" in default.stdout
    home = runner.invoke(
        app, ["cache", "check", str(manifest)], env={"TRITON_CACHE_DIR": "", "TRITON_HOME": str(tmp_path)}
    )
    assert home.exit_code == 2 and f"{tmp_path}/.triton/cache" in home.output
    nodir = runner.invoke(app, ["cache", "check", str(manifest), "--cache-dir", str(tmp_path / "nope")])
    assert nodir.exit_code == 2 and "no such Triton cache directory" in nodir.stderr


def test_redis_cache_corrupt_and_missing_values(
    recorded: Manifest, triton_cache: Path, redis_server: RedisServer
) -> None:
    """Triton's Redis layout written by hand from the local entries (the two-worker test fills it
    through Triton itself): a truncated cubin value is corrupt, a missing child a miss; a server
    that is down is a StoreError (the CLI exits 2)."""
    client = redis_server.client()
    for e in recorded.entries:
        assert e.cache_key is not None
        key = cache_dir_name(e.cache_key)
        entry = triton_cache / key
        children = sorted(p.name for p in entry.iterdir() if not p.name.startswith("__grp__"))
        for name in children:
            client.set(f"triton:{key}:{name}", (entry / name).read_bytes())
        client.set(f"triton:{key}:__grp__scale_copy.json", json.dumps({"child_paths": children}))
    cache = RedisCache(redis_server.url, client=client)
    assert check(recorded, cache).complete
    k0 = cache_dir_name(recorded.entries[0].cache_key or "")
    client.set(f"triton:{k0}:scale_copy.cubin", (triton_cache / k0 / "scale_copy.cubin").read_bytes()[:100])
    k1 = cache_dir_name(recorded.entries[1].cache_key or "")
    client.delete(f"triton:{k1}:scale_copy.ptx")
    report = check(recorded, cache)
    assert [r.status for r in report.results] == ["corrupt", "missing"]
    from jitwatch.fleet.cache_check import scan

    assert sorted(cache.keys(10)) == sorted(e.cache_key for e in recorded.entries)
    assert [k for k, _ in scan(report, cache).corrupt_entries] == [recorded.entries[0].cache_key]
    redis_server.stop()
    with pytest.raises(StoreError, match="ConnectionError"):
        check(recorded, RedisCache(redis_server.url))


def test_scan_finds_corrupt_entries_outside_the_manifest(
    recorded: Manifest, triton_cache: Path, tmp_path: Path
) -> None:
    """--all: an entry no manifest names (another host's key) with a truncated cubin fails the
    check too; without --all only the manifest's keys are read."""
    only_first = recorded.model_copy(deep=True)
    only_first.entries = only_first.entries[:1]
    cubin = next(_entry_dir(triton_cache, recorded, 1).glob("*.cubin"))
    cubin.write_bytes(cubin.read_bytes()[:200])
    save(only_first, tmp_path / "one.json")
    plain = runner.invoke(app, ["cache", "check", str(tmp_path / "one.json"), "--cache-dir", str(triton_cache)])
    assert plain.exit_code == 0, plain.output
    full = runner.invoke(app, ["cache", "check", str(tmp_path / "one.json"), "--cache-dir", str(triton_cache), "--all"])
    assert full.exit_code == 1
    assert "whole cache: 2 entries scanned, 1 corrupt" in full.stdout
    assert f"corrupt entry {recorded.entries[1].cache_key[:16]}" in full.stdout  # type: ignore[index]


def test_fifo_in_the_cache_is_corrupt_not_a_hang(recorded: Manifest, triton_cache: Path) -> None:
    """A FIFO planted where a cache file should be made `cache check` block forever on open():
    now any file that is not a regular file is reported corrupt without being opened."""
    import threading

    ptx = next(_entry_dir(triton_cache, recorded, 1).glob("*.ptx"))
    ptx.unlink()
    os.mkfifo(ptx)
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(check(recorded, LocalCache(triton_cache))), daemon=True)
    t.start()
    t.join(20)
    assert out, "cache check blocked on a FIFO"
    bad = out[0].results[1]
    assert bad.status == "corrupt" and "not a regular file" in (bad.reason or "")


def test_summary_counts_are_words() -> None:
    """One key, one scanned entry: ``1 key`` and ``1 entry scanned`` (it said ``1 keys``, ``1 entries``)."""
    from jitwatch.fleet.cache_check import CacheReport, EntryCheck

    one = CacheReport("c", [EntryCheck("triton", "k", "key", None, "unknown")], scanned=1)
    assert one.summary().startswith("c: INCOMPLETE: 1 key, 0 would load, ")
    assert one.summary().endswith("; whole cache: 1 entry scanned, 0 corrupt")
    two = CacheReport("c", [EntryCheck("triton", "k", f"key{i}", None, "unknown") for i in range(2)], scanned=2)
    assert "INCOMPLETE: 2 keys, " in two.summary() and "2 entries scanned" in two.summary()
