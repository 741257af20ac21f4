"""`jitwatch warmup merge` and manifests in shared storage (a directory, a real Redis server).

The manifests come from real compile-only compiles journaled by a real monitor; the "other hosts"
are copies of that record with what differs between hosts changed (ranks, an extra key, a kernel
built from other source)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.errors import ManifestError, StoreError
from jitwatch.fleet.merge import merge
from jitwatch.fleet.stores import (
    DirectoryStore,
    RedisStore,
    parse_location,
    read_manifests,
    read_one,
    safe_location,
    write_manifest,
)
from jitwatch.store.journal import Journal
from jitwatch.testing import MonitorHarness, fresh_kernel_cache
from jitwatch.warmup.manifest import Manifest, load, record_from_journal, save
from tests._paths import TRITON_TESTS

from .conftest import RedisServer

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf

runner = CliRunner()


@pytest.fixture
def host_a(harness: MonitorHarness) -> Manifest:
    """One host's record: two serving compiles of scale_copy (aligned and offset destination)."""
    fresh_kernel_cache(kf.scale_copy)
    src, dst = torch.zeros(1024), torch.empty(1024)
    with harness.monitor.warmup():
        pass
    kf.scale_copy.warmup(src, dst, 1000, BLOCK=256, grid=(1,))
    kf.scale_copy.warmup(src, dst[1:], 1000, BLOCK=256, grid=(1,))
    harness.monitor.flush()
    with Journal(harness.journal_dir, readonly=True) as j:
        m = record_from_journal(j)
    assert len(m.entries) == 2
    return m


def _host_b(a: Manifest) -> Manifest:
    """Another host: the same first key (rank 1) only."""
    b = a.model_copy(deep=True)
    b.entries = b.entries[:1]
    b.entries[0].ranks = [1]
    return b


def test_recorded_entries_carry_tritons_cache_key(host_a: Manifest, triton_cache: Path) -> None:
    """The compile event records the persistent-cache hash (listener metadata): it names the
    TRITON_CACHE_DIR entry that `cache check` looks up."""
    import base64

    for e in host_a.entries:
        assert e.cache_key is not None and len(e.cache_key) == 64
        entry = base64.b32encode(bytes.fromhex(e.cache_key)).decode().rstrip("=")
        assert (triton_cache / entry).is_dir()


def test_merge_dedups_and_counts_hosts(host_a: Manifest) -> None:
    b = _host_b(host_a)
    merged, report = merge([("a", host_a), ("b", b)])
    assert report.entries_in == 3 and report.entries_out == 2 and not report.conflicts
    first, second = merged.entries
    assert first.hosts == 2 and first.count == 2 and first.ranks == [0, 1]
    assert second.hosts == 1
    assert first.key == host_a.entries[0].key  # most hosts first
    # merging the merge with a third host keeps counting hosts
    again, _ = merge([("fleet", merged), ("c", _host_b(host_a))])
    assert again.entries[0].hosts == 3


def test_merge_refuses_kernels_whose_source_differs(host_a: Manifest) -> None:
    b = _host_b(host_a)
    b.entries[0].source_hash = "ab" * 32  # host b ran other code for scale_copy
    merged, report = merge([("host-a", host_a), ("host-b", b)])
    assert merged.entries == []
    (conflict,) = report.conflicts
    assert conflict.kernel == "kernels_fieldcases.scale_copy" and conflict.entries_refused == 3
    assert conflict.hashes == {host_a.entries[0].source_hash: ["host-a"], "ab" * 32: ["host-b"]}
    text = conflict.describe()
    assert "source differs" in text and "host-a" in text and "host-b" in text


def test_directory_store_round_trip(host_a: Manifest, tmp_path: Path) -> None:
    store_dir = tmp_path / "nfs" / "manifests"
    where = write_manifest(str(store_dir), host_a, name="gpu-node-1")
    assert where == str(store_dir / "gpu-node-1.json")
    write_manifest(str(store_dir), _host_b(host_a), name="gpu-node-2")
    (store_dir / "notes.txt").write_text("not a manifest")
    found = read_manifests(str(store_dir))
    assert [s for s, _ in found] == ["gpu-node-1", "gpu-node-2"]
    assert found[0][1] == host_a
    assert DirectoryStore(store_dir).names() == ["gpu-node-1", "gpu-node-2"]
    with pytest.raises(StoreError, match="not"):
        write_manifest(str(store_dir), host_a, name="../escape")
    # one manifest wanted (replay, cache check, coverage --manifest): a directory answered "is a
    # store, not one manifest: add /NAME", and DIR/NAME answered the same; it names a file that works
    with pytest.raises(StoreError, match=r"is a directory of manifests \(NAME.json\), not one manifest: pass one"):
        read_one(str(store_dir))
    with pytest.raises(StoreError, match=str(store_dir / "gpu-node-1.json")):
        read_one(str(store_dir))
    # a path that is not there (a manifest named without its .json): no such file, not "a store"
    with pytest.raises(StoreError, match=r"no such manifest file or directory"):
        read_one(str(tmp_path / "warmup"))


def test_redis_store_round_trip(host_a: Manifest, redis_server: RedisServer) -> None:
    url = redis_server.url
    assert write_manifest(f"{url}/gpu-node-1", host_a).endswith("jitwatch:manifest:gpu-node-1")
    write_manifest(url, _host_b(host_a), name="gpu-node-2")
    assert read_one(f"{url}/gpu-node-1") == host_a
    assert [s for s, _ in read_manifests(url)] == ["gpu-node-1", "gpu-node-2"]
    # another prefix is another store
    assert isinstance(parse_location(f"{url}?prefix=other:").store, RedisStore)
    with pytest.raises(StoreError, match="holds no manifest"):
        read_manifests(f"{url}?prefix=other:")


def test_redis_values_are_validated_data(host_a: Manifest, redis_server: RedisServer) -> None:
    """What Redis holds is parsed, never run: a non-manifest value, a truncated one and a module
    name that is a path are refused with the key named."""
    client = redis_server.client()
    client.set("jitwatch:manifest:junk", b"import os; os.system('true')")
    with pytest.raises(ManifestError, match="redis jitwatch:manifest:junk: not valid JSON"):
        read_one(f"{redis_server.url}/junk")
    text = host_a.model_dump_json()
    client.set("jitwatch:manifest:cut", text[: len(text) // 2].encode())
    with pytest.raises(ManifestError, match="truncated"):
        read_one(f"{redis_server.url}/cut")
    evil = json.loads(text)
    evil["entries"][0]["module"] = "../../tmp/evil"
    client.set("jitwatch:manifest:evil", json.dumps(evil).encode())
    with pytest.raises(ManifestError, match="not a dotted Python name"):
        read_one(f"{redis_server.url}/evil")
    with pytest.raises(ManifestError, match="missing"):
        read_one(f"{redis_server.url}/absent")


def test_redis_down_is_a_clean_store_error(redis_server: RedisServer) -> None:
    url = redis_server.url
    redis_server.stop()
    with pytest.raises(StoreError, match="cannot list manifests: ConnectionError"):
        read_manifests(url)


def test_location_password_is_never_printed() -> None:
    assert safe_location("redis://user:s3cret@cache.internal:6380/2/x") == "redis://user:***@cache.internal:6380/2/x"


def test_cli_merge_from_redis_and_directory(host_a: Manifest, redis_server: RedisServer, tmp_path: Path) -> None:
    """Two hosts pushed to Redis, a third on an NFS-style directory: one merged file; exit 0."""
    write_manifest(redis_server.url, host_a, name="node-1")
    write_manifest(redis_server.url, _host_b(host_a), name="node-2")
    nfs = tmp_path / "nfs"
    write_manifest(str(nfs), _host_b(host_a), name="node-3")
    out = tmp_path / "fleet.json"
    res = runner.invoke(app, ["warmup", "merge", redis_server.url, str(nfs), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["entries_in"] == 4 and report["entries_out"] == 2 and report["refused"] == 0
    assert len(report["inputs"]) == 3
    merged = load(out)
    assert [e.hosts for e in merged.entries] == [3, 1]
    # and back into Redis, for the fleet to replay
    res = runner.invoke(app, ["warmup", "merge", str(out), "-o", redis_server.url, "--name", "fleet"])
    assert res.exit_code == 0, res.output
    assert read_one(f"{redis_server.url}/fleet").entries[0].hosts == 3


def test_cli_merge_conflict_exits_1_with_report(host_a: Manifest, tmp_path: Path) -> None:
    b = _host_b(host_a)
    b.entries[0].source_hash = "cd" * 32
    save(host_a, tmp_path / "a.json")
    save(b, tmp_path / "b.json")
    res = runner.invoke(
        app, ["warmup", "merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", str(tmp_path / "m.json")]
    )
    assert res.exit_code == 1
    assert "refused: triton kernel kernels_fieldcases.scale_copy: source differs" in res.stderr
    assert load(tmp_path / "m.json").entries == []


def test_cli_merge_bad_input_exits_2(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{")
    res = runner.invoke(app, ["warmup", "merge", str(tmp_path / "x.json"), "-o", str(tmp_path / "m.json")])
    assert res.exit_code == 2 and "not valid JSON" in res.stderr


def test_cli_merge_into_its_own_store_again_does_not_recount_hosts(host_a: Manifest, tmp_path: Path) -> None:
    """The docs' pipeline merges a store into itself (``merge STORE -o STORE --name fleet``) on
    every deploy: the earlier ``fleet`` result is not an input, so host counts stay put."""
    store = tmp_path / "store"
    write_manifest(str(store), host_a, name="host-a")
    write_manifest(str(store), _host_b(host_a), name="host-b")
    for _ in range(3):
        res = runner.invoke(app, ["warmup", "merge", str(store), "-o", str(store), "--name", "fleet", "--json"])
        assert res.exit_code == 0, res.output
        assert sorted(json.loads(res.stdout)["inputs"]) == [f"{store}:host-a", f"{store}:host-b"]
    once, _ = merge([("a", host_a), ("b", _host_b(host_a))])
    assert [e.hosts for e in load(store / "fleet.json").entries] == [e.hosts for e in once.entries] == [2, 1]


@pytest.mark.parametrize("spelling", ["file in the store", "relative path", "dot", "trailing slash"])
def test_merge_into_its_own_store_spelt_otherwise_does_not_recount_hosts(
    host_a: Manifest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """The guard against merging the merge's own earlier result compared the location strings:
    the same directory given as ``-o STORE/fleet.json``, a relative path or ``STORE/.`` was read
    back as a host's record on every run (hosts [2, 1] → [4, 2] → [6, 3])."""
    store = tmp_path / "store"
    write_manifest(str(store), host_a, name="host-a")
    write_manifest(str(store), _host_b(host_a), name="host-b")
    monkeypatch.chdir(tmp_path)
    out = {
        "file in the store": [str(store / "fleet.json")],
        "relative path": ["store", "--name", "fleet"],
        "dot": [f"{store}/.", "--name", "fleet"],
        "trailing slash": [f"{store}/", "--name", "fleet"],
    }[spelling]
    for _ in range(3):
        res = runner.invoke(app, ["warmup", "merge", str(store), "-o", *out, "--json"])
        assert res.exit_code == 0, res.output
        assert sorted(json.loads(res.stdout)["inputs"]) == [f"{store}:host-a", f"{store}:host-b"]
    assert [e.hosts for e in load(store / "fleet.json").entries] == [2, 1]


def test_merge_into_its_own_redis_store_spelt_otherwise_does_not_recount_hosts(
    host_a: Manifest, redis_server: RedisServer
) -> None:
    """The same for Redis: ``redis://H:P/0`` read, ``redis://H:P/fleet`` (database 0 by default) or
    ``redis://H:P/0/fleet`` written."""
    url = redis_server.url
    write_manifest(url, host_a, name="host-a")
    write_manifest(url, _host_b(host_a), name="host-b")
    base = url.rsplit("/", 1)[0]
    for out in [f"{base}/fleet", f"{url}/fleet", f"{base}/fleet"]:
        res = runner.invoke(app, ["warmup", "merge", url, "-o", out, "--json"])
        assert res.exit_code == 0, res.output
        assert sorted(json.loads(res.stdout)["inputs"]) == [f"{url}:host-a", f"{url}:host-b"]
    assert [e.hosts for e in read_one(f"{url}/fleet").entries] == [2, 1]


def test_a_redis_value_rewritten_larger_after_strlen_is_not_fetched_whole(redis_server: RedisServer) -> None:
    """``get`` measured a value (``STRLEN``) and then fetched it with ``GET``: a value rewritten
    larger in between (or a server answering ``STRLEN`` low) was read whole, past the 64 MiB limit
    (a peer answering ``STRLEN`` 10 and a 1 GiB ``GET``: 3.2 GB resident, then refused). The read is
    now ``GETRANGE 0 limit``. (The rewrite is simulated by a client whose ``STRLEN`` answers 10.)"""
    import redis

    from jitwatch.fleet.stores import RedisStore
    from jitwatch.warmup.manifest import MAX_MANIFEST_BYTES

    class Measured(redis.Redis):  # type: ignore[type-arg]
        fetched = 0

        def strlen(self, name: Any) -> int:
            return 10

        def execute_command(self, *args: Any, **options: Any) -> Any:
            out = super().execute_command(*args, **options)
            if isinstance(out, bytes):
                Measured.fetched = max(Measured.fetched, len(out))
            return out

    big = b"{" + b" " * (MAX_MANIFEST_BYTES + 4096)
    redis_server.client().set("jitwatch:manifest:grown", big)
    client = Measured(host=redis_server.host, port=redis_server.port, socket_timeout=5)
    with pytest.raises(ManifestError, match="grew while being read"):
        RedisStore(redis_server.url, client=client).get("grown")
    assert Measured.fetched == MAX_MANIFEST_BYTES + 1


def test_a_peer_that_is_no_redis_is_one_line_exit_2(tmp_path: Path) -> None:
    """redis-py reading an answer no Redis gives (a peer answering ``+OK`` to everything, so its
    connection handshake) raised ``AttributeError``, not a ``RedisError``: a traceback, exit 1, out
    of ``warmup merge`` and ``cache check --redis``. Now one line, exit 2."""
    import subprocess

    from jitwatch.warmup.manifest import Manifest
    from tests.tools import not_redis_peer

    manifest = tmp_path / "m.json"
    save(Manifest(entries=[]), manifest)
    with not_redis_peer() as port:
        url = f"redis://127.0.0.1:{port}/0"
        for args in (
            ["warmup", "merge", url, "-o", str(tmp_path / "out.json")],
            ["cache", "check", str(manifest), "--redis", url, "--all"],
        ):
            res = subprocess.run(
                [sys.executable, "-m", "jitwatch.cli", *args], capture_output=True, text=True, timeout=120
            )
            assert res.returncode == 2, (args, res.stdout + res.stderr)
            assert "is it a Redis server?" in res.stderr and res.stderr.count("\n") == 1, res.stderr[-2000:]


def test_redis_location_query_password_and_unix_sockets_are_refused_clearly() -> None:
    """``?password=`` used to be dropped silently (the connection went without it) and printed
    verbatim; ``unix://`` was accepted and then always failed. Both are clear errors now, and
    the message never shows the password."""
    with pytest.raises(StoreError) as err:
        parse_location("redis://127.0.0.1:1/0/a?password=hunter2")
    assert "hunter2" not in str(err.value) and "password=***" in str(err.value)
    assert "redis://:PASSWORD@HOST:PORT" in str(err.value)
    with pytest.raises(StoreError, match="unix:// Redis sockets are not supported"):
        parse_location("unix:///var/run/redis.sock")
    assert safe_location("redis://h:1/0/a?prefix=p&password=x") == "redis://h:1/0/a?prefix=p&password=***"
    res = runner.invoke(app, ["warmup", "merge", "redis://127.0.0.1:1/0/a/b?password=hunter2", "-o", "x.json"])
    assert res.exit_code == 2 and "hunter2" not in res.output


def test_merge_summary_counts_are_words() -> None:
    """``merged 1 manifest: 1 entry in`` (it said ``1 manifests: 1 entries in``)."""
    from jitwatch.fleet.merge import MergeReport, SourceConflict

    conflict = SourceConflict("triton", "k", {"a" * 16: ["x"], "b" * 16: ["y"]}, entries_refused=1)
    one = MergeReport(inputs=["x"], entries_in=2, entries_out=0, conflicts=[conflict])
    assert (
        one.summary() == "merged 1 manifest: 2 entries in, 0 out (1 duplicate folded, 1 refused for 1 source conflict)"
    )
    assert conflict.describe().endswith("; 1 entry refused")
    two = MergeReport(inputs=["x", "y"], entries_in=1, entries_out=1)
    assert (
        two.summary() == "merged 2 manifests: 1 entry in, 1 out (0 duplicates folded, 0 refused for 0 source conflicts)"
    )


@pytest.mark.parametrize(
    "url",
    [
        "redis://u:hunter2@127.0.0.1:abc/0",  # a port that is not a number
        "redis://:hunter2@127.0.0.1:99999/0",  # out of range
        "redis://:hunter2@[::1/0",  # a broken IPv6 host
        "redis://u:hun/ter2@127.0.0.1:6379/0",  # an unencoded / in the password ends the host part
    ],
)
def test_an_unreadable_redis_url_is_one_line_exit_2_without_the_password(url: str, tmp_path: Path) -> None:
    """A redis:// location whose host part urllib cannot read raised ``ValueError`` out of
    ``parse_location`` (and out of ``safe_location``, which the error lines use): a traceback and
    exit 1, which for ``warmup merge`` / ``warmup replay`` / ``cache check`` is the exit of a
    finished run that refused or missed something. Now one line naming the URL without the
    password, exit 2, for every command reading a location, and ``--redis`` of ``cache check``
    (merge's output keeps the exit 1 of a store it cannot write, as one line)."""
    from jitwatch.warmup.manifest import Manifest

    manifest = tmp_path / "m.json"
    save(Manifest(entries=[]), manifest)
    commands = [
        (["warmup", "merge", url, "-o", str(tmp_path / "out.json")], 2),
        (["warmup", "merge", str(manifest), "-o", url + "/fleet"], 1),
        (["warmup", "replay", url + "/x"], 2),
        (["cache", "check", str(manifest), "--redis", url], 2),
    ]
    for args, code in commands:
        res = subprocess.run([sys.executable, "-m", "jitwatch.cli", *args], capture_output=True, text=True, timeout=120)
        out = res.stdout + res.stderr
        assert res.returncode == code, (args, out)
        assert "Traceback" not in out and "hunter2" not in out and "ter2" not in out, (args, out)
        assert "not a valid redis:// URL" in out and out.count("\n") == 1, (args, out)
    assert "hunter2" not in safe_location(url) and "ter2" not in safe_location(url)
