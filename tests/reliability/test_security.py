"""Security defaults: loopback bind, bearer token, owner-only files, redaction, inert data.

* ``jitwatch serve`` binds 127.0.0.1 unless told otherwise (checked in ``/proc/net/tcp``, and a
  connection to the host's other address is refused), and warns when bound to all interfaces.
* With a token every route except ``/livez`` and ``/readyz`` answers 401 without it.
* The journal directory is 0700 and ``journal.db``/``-wal``/``-shm`` are 0600 even under
  ``umask 0``, and opening the journal leaves the process umask alone.
* Keys and labels are redacted of home directories and the user name (as a path component) —
  through a real Triton compile whose specialization key holds such paths (a ``tl.constexpr``
  string); the journal redacts again on write, so attrs (``constexprs``) are covered too.
* Hostile kernel names, keys and attrs (code, template syntax, exposition-format injection, a
  module name whose import would leave a mark) are stored and served as inert data.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jitwatch.config import DEFAULT_HOST, Settings
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.store.writer import JournalWriter

from .conftest import HERE, PY, Sidecar, free_port

JITWATCH_BIN = Path(sys.executable).parent / "jitwatch"


def listening_addresses(port: int) -> list[str]:
    """Local addresses (hex, as in /proc/net/tcp{,6}) in LISTEN state on ``port``."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            addr, hexport = fields[1].split(":")
            if int(hexport, 16) == port and fields[3] == "0A":
                out.append(addr)
    return out


def other_address() -> str | None:
    """A non-loopback IPv4 address of this host, if any."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def serve(args: list[str], journal_dir: Path) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    proc = subprocess.Popen(
        [str(JITWATCH_BIN), "serve", "--port", str(port), "--journal-dir", str(journal_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not listening_addresses(port):
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.05)
    return proc, port


def stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    out, _ = proc.communicate(timeout=15)
    return out


def test_default_bind_is_loopback(tmp_path: Path) -> None:
    assert Settings.from_env({}).host == DEFAULT_HOST == "127.0.0.1"
    proc, port = serve([], tmp_path)
    try:
        assert listening_addresses(port) == ["0100007F"]  # 127.0.0.1, nothing else
        assert httpx.get(f"http://127.0.0.1:{port}/livez", timeout=5).status_code == 200
        other = other_address()
        if other:
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"http://{other}:{port}/livez", timeout=5)
    finally:
        out = stop(proc)
    assert "all interfaces" not in out


def test_all_interfaces_warns(tmp_path: Path) -> None:
    proc, port = serve(["--host", "0.0.0.0"], tmp_path)
    try:
        assert listening_addresses(port) == ["00000000"]
    finally:
        out = stop(proc)
    assert "all interfaces" in out and "WITHOUT a token" in out, out[-2000:]
    proc, port = serve(["--host", "0.0.0.0", "--token", "t0ken"], tmp_path)
    out = stop(proc)
    assert "all interfaces" in out and "WITHOUT a token" not in out, out[-2000:]


def test_token_protects_everything_but_health(tmp_path: Path) -> None:
    d = tmp_path / "j"
    w = JournalWriter(d)
    w.submit(Event.now(EventKind.WORKER_START, attrs={"mode": "warn"}))
    w.close()
    sc = Sidecar(d, token="s3cret-token").start()
    try:
        good = {"Authorization": "Bearer s3cret-token"}
        schema = httpx.get(sc.url + "/openapi.json", headers=good, timeout=10).json()
        paths = set(schema["paths"]) | {"/openapi.json", "/docs", "/redoc"}
        open_paths = {"/livez", "/readyz"}
        assert open_paths <= paths and {"/jit", "/jit/events", "/metrics"} <= paths
        for path in sorted(paths):
            bad = [
                httpx.get(sc.url + path, timeout=10),
                httpx.get(sc.url + path, headers={"Authorization": "Bearer wrong"}, timeout=10),
                httpx.get(sc.url + path, headers={"Authorization": "Basic czNjcmV0LXRva2Vu"}, timeout=10),
                httpx.get(sc.url + path, headers={"Authorization": "Bearer s3cret-token-and-more"}, timeout=10),
            ]
            if path in open_paths:
                assert all(r.status_code in (200, 503) for r in bad), path
                continue
            for r in bad:
                assert r.status_code in (401, 404), (path, r.status_code)  # 404: docs switched off
                if r.status_code == 401:
                    assert r.json()["detail"] and r.headers.get("www-authenticate") == "Bearer"
            ok = httpx.get(sc.url + path, headers=good, timeout=10)
            assert ok.status_code in (200, 404), (path, ok.status_code)
            if path in {"/jit", "/jit/events", "/metrics", "/openapi.json"}:
                assert ok.status_code == 200, path
    finally:
        sc.stop()


def test_owner_only_files_under_umask_0(tmp_path: Path) -> None:
    """In a child with ``umask 0`` (the worst case), while a writer and a reader hold it open."""
    d = tmp_path / "fresh" / "journal"
    code = f"""
import os, json
os.umask(0)
from jitwatch.store.journal import Journal
from jitwatch.core.events import Event, EventKind
j = Journal({str(d)!r})
j.write([Event.now(EventKind.COMPILE, kernel="k")])
r = Journal({str(d)!r}, readonly=True)
r.count_events()
modes = {{n: oct(os.stat(os.path.join({str(d)!r}, n)).st_mode & 0o777) for n in os.listdir({str(d)!r})}}
modes["<dir>"] = oct(os.stat({str(d)!r}).st_mode & 0o777)
umask = os.umask(0)
print(json.dumps({{"modes": modes, "umask": umask}}))
"""
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout
    res = json.loads(out)
    modes = res["modes"]
    assert modes.pop("<dir>") == "0o700"
    assert set(modes) == {JOURNAL_FILE, JOURNAL_FILE + "-wal", JOURNAL_FILE + "-shm"}
    assert set(modes.values()) == {"0o600"}, modes
    assert res["umask"] == 0, "opening the journal changed the process umask"


def test_keys_and_labels_redacted_real_compile(tmp_path: Path) -> None:
    """A real Triton compile (compile-only driver) whose specialization key holds a home path and
    the user name: the journal (raw bytes, WAL included) and every sidecar answer carry ``~`` and
    ``<user>`` instead."""
    user = "jdoe4711"
    home = tmp_path / "users" / user
    home.mkdir(parents=True)
    tag = f"{home}/models/llama.safetensors|/scratch/{user}/ckpt|/home/bob/.cache/x"
    d = tmp_path / "journal"
    env = {
        **os.environ,
        "HOME": str(home),
        "USER": user,
        "LOGNAME": user,
        "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"),
        "TRITON_DEFAULT_FP_FUSION": "1",
    }
    res = subprocess.run(
        [PY, str(HERE / "_compile_worker.py"), str(d), tag], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    with Journal(d, readonly=True) as j:
        compiles = j.events(kind=EventKind.COMPILE, limit=10)
        assert len(compiles) == 2
        for ev in compiles:
            assert ev.key is not None
            assert "~/models/llama.safetensors|/scratch/<user>/ckpt|~/.cache/x" in ev.key, ev.key
    raw = b"".join(p.read_bytes() for p in d.iterdir())
    for secret in (user.encode(), str(home).encode(), b"/home/bob"):
        assert secret not in raw, secret
    sc = Sidecar(d).start()
    try:
        for path in ("/jit", "/jit/events?limit=1000", "/metrics"):
            body = httpx.get(sc.url + path, timeout=10).text
            assert user not in body and "/home/bob" not in body and str(home) not in body, path
        assert "~/models" in httpx.get(sc.url + "/jit/events", timeout=10).text
    finally:
        sc.stop()


HOSTILE = [
    "__import__('os').system('touch CANARY')",
    "{{ 7*7 }}${7*7}#{7*7}",
    'k"} 1\nevil_metric{x="',
    'k\\"\n# TYPE evil counter\nevil_total 1',
    "jw_canary_module",
    "<script>alert(1)</script>",
    "a" * 10_000,
    "\x00\x01\x7f\u202e",
]


def test_hostile_journal_content_stays_inert(tmp_path: Path) -> None:
    canary_dir = tmp_path / "pkg"
    canary_dir.mkdir()
    mark = tmp_path / "IMPORTED"
    (canary_dir / "jw_canary_module.py").write_text(f"open({str(mark)!r}, 'w').write('x')\n")
    d = tmp_path / "j"
    w = JournalWriter(d)
    w.submit(Event.now(EventKind.WORKER_START, attrs={"mode": "warn", "module": "jw_canary_module"}))
    for i, name in enumerate(HOSTILE):
        w.submit(
            Event.now(
                EventKind.COMPILE,
                phase=Phase.SERVING,
                kernel=name,
                key=name.replace("CANARY", str(tmp_path / "CANARY")),
                duration_s=float("nan") if i == 0 else float("inf") if i == 1 else 0.01,
                attrs={
                    "module": "jw_canary_module",
                    "repr": "jw_canary_module.evil()",
                    "__class__": {"__reduce__": ["os.system", "touch CANARY"]},
                    "nan": float("nan"),
                    "deep": {"a": [[[[[name]]]]]},
                    "expr": name,
                },
            )
        )
    w.close()
    assert w.dropped_total == 0, w.fault
    env = {**os.environ, "PYTHONPATH": f"{canary_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    sc = Sidecar(d)
    sc.proc = subprocess.Popen(
        [PY, str(HERE / "_sidecar.py"), str(d), str(sc.port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(sc.url + "/livez", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        events = httpx.get(sc.url + "/jit/events", params={"limit": 1000}, timeout=10)
        assert events.status_code == 200, events.text[:500]
        kernels = {e["kernel"] for e in events.json() if e["kind"] == "compile"}
        assert kernels == set(HOSTILE)  # served verbatim, as data
        status = httpx.get(sc.url + "/jit", timeout=10)
        assert status.status_code == 200
        metrics = httpx.get(sc.url + "/metrics", timeout=10)
        assert metrics.status_code == 200
        fams = list(text_string_to_metric_families(metrics.text))  # still well-formed
        names = {f.name for f in fams}
        assert not any(n.startswith("evil") for n in names), names
        for name in HOSTILE[:4]:
            r = httpx.get(sc.url + "/jit/events", params={"kernel": name[:512]}, timeout=10)
            assert r.status_code in (200, 422), r.text[:300]
    finally:
        sc.stop()
    assert not mark.exists(), "a module named in the journal was imported"
    assert not list(tmp_path.rglob("CANARY*")), "a string from the journal was executed"


# ------------------------------------------------------------------ homes, as the redaction sees them
HOME_KINDS = ("plain", "non_ascii", "symlinked")
HOME_USER = "jdoe4711"


def _fake_home(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """Make this process's home directory one of ``HOME_KINDS`` (``$HOME`` and ``Path.home()``)
    and its user :data:`HOME_USER` (``getpass.getuser()`` reads ``USER``/``LOGNAME``), as
    ``tests/test_redact.py`` does. Returns (the directory paths name it by, every form of it and
    of the user name that must never be exported: the paths, their ``json.dumps`` ASCII forms,
    the user name as a path component)."""
    from jitwatch import redact as redact_mod

    users = tmp_path / "users"
    users.mkdir()
    if kind == "symlinked":  # HOME=/users/jdoe4711 → an NFS-like directory; resolved paths name the latter
        real = tmp_path / "nfs" / "u12345"
        real.mkdir(parents=True)
        home = users / HOME_USER
        home.symlink_to(real)
        named, forms = real, [str(home), str(real)]
    else:
        home = users / (HOME_USER if kind == "plain" else "Jöse-Ünïcødé")
        home.mkdir()
        named, forms = home, [str(home)]
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USER", HOME_USER)
    monkeypatch.setenv("LOGNAME", HOME_USER)
    monkeypatch.setattr(redact_mod.Path, "home", staticmethod(lambda: redact_mod.Path(str(home))))
    monkeypatch.setattr(redact_mod.getpass, "getuser", lambda: HOME_USER)
    redact_mod._patterns.cache_clear()
    redact_mod._user_pattern.cache_clear()
    secrets = [*forms, *(json.dumps(f)[1:-1] for f in forms), f"/{HOME_USER}"]
    return named, sorted(set(secrets))


@pytest.fixture
def _redaction_caches() -> Iterator[None]:
    from jitwatch import redact as redact_mod

    yield
    redact_mod._patterns.cache_clear()
    redact_mod._user_pattern.cache_clear()


def _assert_not_exported(secrets: list[str], where: str, text: str | bytes) -> None:
    blob = text if isinstance(text, bytes) else text.encode("utf-8")
    leaked = [secret for secret in secrets if secret.encode("utf-8") in blob]
    assert not leaked, f"{leaked} in {where}"


@pytest.mark.parametrize("kind", HOME_KINDS)
def test_worker_rows_are_redacted_like_events(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _redaction_caches: None
) -> None:
    """The worker row's in-flight compiles (``Journal.set_inflight``) and backends
    (``backend_ready``) are stored through the events' storing path: a kernel in flight named
    ``fn at $HOME/model.py`` and a backend hook under the home directory reach neither the raw
    journal bytes (``-wal`` included) nor the real sidecar's ``/jit``, ``/jit/events`` and
    ``/metrics`` — with a plain, a non-ASCII and a symlinked home (paths through the link's
    target)."""
    from jitwatch.backends.base import BackendStatus
    from jitwatch.core.identity import WorkerIdentity
    from jitwatch.worker import create_monitor

    named, secrets = _fake_home(kind, tmp_path, monkeypatch)
    d = tmp_path / "journal"
    kernel = f"fn at {named}/model.py"

    class Hold:
        name, label = "hold", "held kernel"

        def available(self) -> bool:
            return True

        def version(self) -> str | None:
            return "1"

        def install(self, sink: Any) -> BackendStatus:
            self.sink = sink
            return BackendStatus(self.name, "active", "1", (f"{named}/hold.py:compile",))

        def uninstall(self) -> None:
            pass

    backend = Hold()
    settings = Settings(journal_dir=d, heartbeat_seconds=10.0)
    mon = create_monitor(settings, identity=WorkerIdentity(rank=0), backends=[backend], tracer_provider=False)
    mon.install()
    mon.activate()
    token = backend.sink.begin("hold", kernel)  # in flight until the end of the test
    try:
        mon.backend_ready(BackendStatus("late", "active", "2", (f"{named}/late.py:compile",), f"{named}/x missing"))
        mon.flush(10)

        def row_complete() -> bool:
            with Journal(d, readonly=True) as j:
                (w,) = j.workers()
                return bool(w.attrs.get("inflight")) and "late" in (w.attrs.get("backends") or {})

        deadline = time.monotonic() + 15
        while not row_complete():
            assert time.monotonic() < deadline, "in-flight compile or backend_ready never journaled"
            time.sleep(0.05)
        raw = b"".join(p.read_bytes() for p in d.iterdir() if p.is_file())
        _assert_not_exported(secrets, "the journal's bytes", raw)
        sc = Sidecar(d).start()
        try:
            status = httpx.get(sc.url + "/jit", timeout=10)
            assert status.status_code == 200
            (rank,) = status.json()["ranks"]
            assert [c["kernel"] for c in rank["inflight"]] == ["fn at ~/model.py"]
            for path in ("/jit", "/jit/events?limit=1000", "/metrics"):
                body = httpx.get(sc.url + path, timeout=10)
                assert body.status_code == 200, path
                _assert_not_exported(secrets, path, body.text)
        finally:
            sc.stop()
    finally:
        backend.sink.cancel(token)
        mon.uninstall()


@pytest.mark.parametrize("kind", HOME_KINDS)
def test_journal_errors_do_not_name_the_home_directory(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _redaction_caches: None
) -> None:
    """With the default ``JITWATCH_DIR`` the journal directory is under the home directory, so
    an error naming it names the home directory and the user: the real sidecar's ``/readyz``
    reason (served without the token), ``/jit``'s ``journal_error`` and ``/jit/events``' 503
    detail name it redacted (``~/.local/state/...``) — for a journal path that is a file and for a
    journal of a newer schema revision, with a plain, a non-ASCII and a symlinked home (the
    sidecar given the link's target)."""
    import sqlite3

    named, secrets = _fake_home(kind, tmp_path, monkeypatch)
    state = named / ".local" / "state"
    state.mkdir(parents=True)
    a_file = state / "jitwatch"
    a_file.write_text("x")
    newer = state / "jitwatch-newer"
    Journal(newer).close()
    with sqlite3.connect(newer / JOURNAL_FILE) as con:
        con.executemany("INSERT OR REPLACE INTO meta(k, v) VALUES (?, ?)", [("revision", "99"), ("min_reader", "99")])
    con.close()
    auth = {"Authorization": "Bearer s3cret-token-for-the-test"}
    for directory, words, shown in (
        (a_file, "is not a directory", "~/.local/state/jitwatch is not a directory"),
        (newer, "schema revision 99", "journal ~/.local/state/jitwatch-newer/journal.db has schema revision 99"),
    ):
        sc = Sidecar(directory, token=auth["Authorization"].split()[1]).start()  # env: this fake home
        try:
            ready = httpx.get(sc.url + "/readyz", timeout=10)  # no token
            assert ready.status_code == 503 and words in ready.json()["reason"], ready.text
            assert shown in ready.json()["reason"]
            _assert_not_exported(secrets, "/readyz", ready.text)
            status = httpx.get(sc.url + "/jit", headers=auth, timeout=10)
            assert status.status_code == 200 and shown in status.json()["journal_error"], status.text
            _assert_not_exported(secrets, "/jit", status.text)
            events = httpx.get(sc.url + "/jit/events", headers=auth, timeout=10)
            assert events.status_code == 503 and shown in events.json()["detail"], events.text
            _assert_not_exported(secrets, "/jit/events", events.text)
            metrics = httpx.get(sc.url + "/metrics", headers=auth, timeout=10)
            assert metrics.status_code == 200
            _assert_not_exported(secrets, "/metrics", metrics.text)
        finally:
            sc.stop()
