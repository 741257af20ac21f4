"""`jitwatch manifest export -o STORE` names each host's record by its full host name.

Two hosts ``node-1.dc1`` and ``node-1.dc2`` (real host names: each export runs in its own UTS
namespace, ``unshare -Uru``, with ``hostname`` set there) export to one directory store and one
Redis store (a real ``redis-server``). Before the fix both were named ``node-1`` (the short name),
the second export silently replaced the first, and ``warmup merge`` counted one host.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jitwatch.fleet.stores import host_record_name, read_manifests
from jitwatch.testing import fresh_kernel_cache, monitored
from jitwatch.warmup.manifest import Manifest, save
from tests._paths import ROOT
from tests.views import source_kernels_v1 as v1

from .conftest import RedisServer


def _can_set_host_name() -> bool:
    if shutil.which("unshare") is None:
        return False
    res = subprocess.run(["unshare", "-Uru", "hostname", "node-x.test"], capture_output=True, timeout=30)
    return res.returncode == 0


needs_uts = pytest.mark.skipif(not _can_set_host_name(), reason="cannot set a host name (unshare -Uru)")


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A journal with one serving-phase compile of ``scale`` (compile-only driver)."""
    tmp = tmp_path_factory.mktemp("host-names")
    fresh_kernel_cache(v1.scale)
    x, y = torch.zeros(64), torch.zeros(64)
    with monitored(journal_dir=tmp / "journal", triton_cache_dir=tmp / "triton-cache") as h:
        with h.monitor.warmup():
            pass
        with h.monitor.request("r"):
            v1.scale.warmup(x, y, 1, BLOCK=64, grid=(1,))
    return tmp / "journal"


def _export_as(host: str, journal: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``jitwatch manifest export ARGS`` in a process whose host name is ``host``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env["PYTHONPATH"] = str(ROOT)
    cli = shlex.join([sys.executable, "-m", "jitwatch.cli", "manifest", "export", "--journal-dir", str(journal), *args])
    return subprocess.run(
        ["unshare", "-Uru", "sh", "-c", f"hostname {shlex.quote(host)} && exec {cli}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs_uts
def test_two_hosts_of_one_short_name_keep_two_records_in_a_directory(journal: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    for host in ("node-1.dc1", "node-1.dc2"):
        res = _export_as(host, journal, "-o", str(store))
        assert res.returncode == 0, res.stderr
        assert f"wrote {store / host}.json" in res.stdout, res.stdout
    assert sorted(p.name for p in store.iterdir()) == ["node-1.dc1.json", "node-1.dc2.json"]
    merged = subprocess.run(
        [sys.executable, "-m", "jitwatch.cli", "warmup", "merge", str(store), "-o", str(tmp_path / "fleet.json")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert merged.returncode == 0, merged.stderr
    entries = json.loads((tmp_path / "fleet.json").read_text())["entries"]
    assert [e["hosts"] for e in entries] == [2]


@needs_uts
def test_two_hosts_of_one_short_name_keep_two_records_in_redis(journal: Path, redis_server: RedisServer) -> None:
    for host in ("node-1.dc1", "node-1.dc2"):
        res = _export_as(host, journal, "-o", redis_server.url)
        assert res.returncode == 0, res.stderr
        assert f"jitwatch:manifest:{host}:" in res.stdout, res.stdout
    found = read_manifests(redis_server.url)
    assert [name for name, _ in found] == ["node-1.dc1", "node-1.dc2"]


@needs_uts
def test_a_host_named_localhost_must_name_its_record(journal: Path, tmp_path: Path) -> None:
    """Many hosts are named ``localhost``: one line, exit 1, nothing written; ``--name`` writes."""
    store = tmp_path / "store"
    res = _export_as("localhost", journal, "-o", str(store))
    assert res.returncode == 1, res.stderr
    assert res.stderr.count("\n") == 1 and "--name" in res.stderr and "wrote nothing" in res.stderr, res.stderr
    assert not store.exists() or not list(store.iterdir())
    res = _export_as("localhost", journal, "-o", str(store), "--name", "gpu-7")
    assert res.returncode == 0, res.stderr
    assert [p.name for p in store.iterdir()] == ["gpu-7.json"]
    # a .json file or a /NAME location needs no host name
    assert _export_as("localhost", journal, "-o", str(tmp_path / "m.json")).returncode == 0


def test_a_host_name_that_is_no_valid_name_is_cleaned_and_tagged() -> None:
    assert host_record_name("node-1.dc1") == "node-1.dc1"
    a, b = host_record_name("nöde-1"), host_record_name("näde-1")
    assert a != b and a.startswith("n-de-1-") and b.startswith("n-de-1-")
    long = host_record_name("x" * 200 + "_")
    assert len(long) == 128 and long.startswith("x" * 119 + "-")
    assert host_record_name("_").startswith("host-")


def test_a_record_an_older_version_named_by_the_short_name_is_still_merged(tmp_path: Path) -> None:
    """An older jitwatch's record (``node-1.json``) stays readable beside the new full names."""
    store = tmp_path / "store"
    store.mkdir()
    save(Manifest(), store / "node-1.json")
    save(Manifest(), store / "node-2.dc1.json")
    assert [n for n, _ in read_manifests(str(store))] == ["node-1", "node-2.dc1"]


@needs_uts
def test_a_record_under_this_host_s_short_name_is_pointed_out(journal: Path, tmp_path: Path) -> None:
    """After an upgrade the older record (short name) stays beside the new one: one line says so."""
    store = tmp_path / "store"
    store.mkdir()
    save(Manifest(), store / "node-1.json")
    res = _export_as("node-1.dc1", journal, "-o", str(store))
    assert res.returncode == 0, res.stderr
    assert (
        res.stderr.count("\n") == 1 and "also holds 'node-1'" in res.stderr and "counts this host twice" in res.stderr
    )
    assert sorted(p.name for p in store.iterdir()) == ["node-1.dc1.json", "node-1.json"]
    assert "also holds" not in _export_as("node-2.dc1", journal, "-o", str(store)).stderr
