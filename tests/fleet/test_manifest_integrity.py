"""Manifests in shared stores keep their integrity: sealed on write, checked on read (real redis-server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jitwatch.errors import ManifestError
from jitwatch.fleet.stores import read_manifests, read_one, write_manifest
from jitwatch.warmup.manifest import Manifest, ManifestEntry

KEY = b"fleet-manifest-key-0123456789"


def _manifest() -> Manifest:
    data = (
        '{"name": "m.k", "signature": {"x": "i32"}, "constant_keys": [], "constant_vals": [], '
        '"attrs_keys": [], "attrs_vals": [], "key": "[(\'i32\', \'\')]{}"}'
    )
    return Manifest(entries=[ManifestEntry(module="m", qualname="k", key="[('i32', '')]{}", specialization_data=data)])


def test_directory_store_seals_and_verifies(tmp_path: Path) -> None:
    where = write_manifest(str(tmp_path / "store"), _manifest(), name="host-a", key=KEY)
    assert read_one(f"{tmp_path / 'store'}/host-a.json", key=KEY).entries == _manifest().entries
    write_manifest(str(tmp_path / "store"), _manifest(), name="host-b")  # unsigned
    with pytest.raises(ManifestError, match="not signed"):
        read_manifests(str(tmp_path / "store"), key=KEY)
    assert Path(where).exists()


def test_redis_store_seals_and_verifies(redis_server: Any) -> None:
    url = f"{redis_server.url}/signed"
    write_manifest(url, _manifest(), key=KEY)
    assert read_one(url, key=KEY).entries == _manifest().entries
    client = redis_server.client()
    (name,) = [k for k in client.keys("*") if k.endswith(b"signed")]
    client.set(name, client.get(name).replace(b'"count": 1', b'"count": 7'))
    with pytest.raises(ManifestError, match="digest mismatch"):
        read_one(url)
