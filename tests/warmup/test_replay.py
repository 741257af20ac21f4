"""Replaying warmup manifests with real compiles: zero serving compiles after replay, and hostile
or stale entries skipped with a reason while importing nothing they should not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from jitwatch.backends.triton.resolve import module_allowed, resolve_kernel
from jitwatch.config import JITWATCH_MANIFEST, JITWATCH_MANIFEST_ALLOW, Settings
from jitwatch.core.events import Phase
from jitwatch.store.journal import Journal
from jitwatch.testing import MonitorHarness, fresh_kernel_cache, monitored
from jitwatch.warmup.manifest import Manifest, ManifestEntry, export, load, record_from_journal, resolve_sources, save
from jitwatch.warmup.replay import replay, replay_from_env
from tests._paths import TRITON_TESTS

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf  # noqa: E402

ALLOW = ["kernels_fieldcases"]


def _offset_view_manifest(h: MonitorHarness) -> Manifest:
    """Record field case 4 (warmup aligned, serving ``dst[1:]``) and return its serving manifest."""
    fresh_kernel_cache(kf.scale_copy)
    with h.monitor.warmup():
        kf.CASES["offset_view"]["warmup"][0]()
    for call in kf.CASES["offset_view"]["serving"]:
        call()
    h.monitor.flush()
    with Journal(h.journal_dir, readonly=True) as j:
        m = record_from_journal(j)
    assert resolve_sources(m, ALLOW) == {}
    assert len(m.entries) == 1
    return m


def _serving_compiles(h: MonitorHarness) -> int:
    return len(h.compiles(Phase.SERVING))


@pytest.mark.parametrize("parallel", ["serial", "threads"])
def test_replay_then_zero_serving_compiles_in_process(tmp_path: Path, triton_cache: Path, parallel: str) -> None:
    """Recorded serving compile → emptied caches → replay in warmup → the same request compiles nothing."""
    with monitored("warn", journal_dir=tmp_path / "j1", triton_cache_dir=tmp_path / "c1") as h1:
        m = _offset_view_manifest(h1)
        assert _serving_compiles(h1) == 1
    fresh_kernel_cache(kf.scale_copy)
    with monitored("warn", journal_dir=tmp_path / "j2", triton_cache_dir=tmp_path / "c2") as h2:
        # Triton < 3.8 starts degraded (no autotuning listener): replay must add nothing to that
        degraded_before = h2.monitor.backend_statuses["triton"].degraded
        with h2.monitor.warmup():
            kf.CASES["offset_view"]["warmup"][0]()
            report = replay(m, allow=ALLOW, parallel=parallel)  # type: ignore[arg-type]
        assert (report.compiled, report.skipped, report.failed) == (1, 0, 0), report.results
        assert report.mode == parallel
        # replay's own listener, chained in front of jitwatch's while it compiles, is not taken for
        # a host that cut jitwatch's out (that would hold jit_post_compile_hook for good, degraded)
        status = h2.monitor.backend_statuses["triton"]
        assert "jit_post_compile_hook" not in status.hooks and status.degraded == degraded_before, status
        # a serial replay names no pool size; a threaded one does (one entry, one worker: singular)
        pool = "(threads, 1 worker)" if report.workers == 1 else f"(threads, {report.workers} workers)"
        assert report.summary().endswith("(serial)" if parallel == "serial" else pool)
        assert report.summary().startswith("1 entry: 1 compiled, ")
        for call in kf.CASES["offset_view"]["serving"]:
            call()
        assert _serving_compiles(h2) == 0
        warm = h2.compiles(Phase.WARMUP)
        assert m.entries[0].key in {e.key for e in warm}
        assert not any(e.cache_hit for e in warm)  # emptied disk cache: a real compile
        # replaying again finds the kernel already in the in-memory cache
        again = replay(m, allow=ALLOW)
        assert (again.cached, again.compiled) == (1, 0)


def _run_worker(case: str, journal: Path, cache: Path, manifest: Path | None, parallel: str = "serial") -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache), TRITON_DEFAULT_FP_FUSION="1")
    args = [sys.executable, str(TESTS / "replay_worker.py"), case, str(journal), str(manifest or "-"), parallel]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return dict(json.loads(line[len("RESULT ") :]))


def _round_trip(tmp_path: Path, case: str, parallel: str = "serial") -> tuple[dict, dict]:
    run1 = _run_worker(case, tmp_path / "j1", tmp_path / "c1", None)
    _, problems = export(tmp_path / "j1", tmp_path / "m.json", allow=ALLOW)
    assert problems == {}
    assert not (tmp_path / "c2").exists()  # run 2 starts with an empty Triton disk cache
    run2 = _run_worker(case, tmp_path / "j2", tmp_path / "c2", tmp_path / "m.json", parallel)
    return run1, run2


def test_round_trip_new_process(tmp_path: Path) -> None:
    """Run 1 records a serving compile; run 2 (new process, empty disk cache) replays → zero."""
    run1, run2 = _round_trip(tmp_path, "offset_view")
    assert run1["serving_compiles"] == 1
    assert run2["replay"]["compiled"] == 1
    assert run2["serving_compiles"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in kf.CASES])
def test_field_case_round_trip(tmp_path: Path, case: str) -> None:
    """Each field case: its serving compiles recorded, replayed in a new process, and gone."""
    run1, run2 = _round_trip(tmp_path, case, parallel="threads")
    expected = kf.CASES[case]["expected_serving"]
    assert run1["serving_compiles"] == expected
    assert run2["replay"]["compiled"] == expected, run2["replay"]
    assert run2["serving_compiles"] == 0


# ------------------------------------------------------------------------------ hostile / stale
def _entry_like(m: Manifest, **changes: Any) -> Manifest:
    """A copy of ``m``'s first entry with module/qualname (and Triton's name) or fields changed."""
    e = m.entries[0].model_dump()
    data = json.loads(e["specialization_data"])
    e.update(changes)
    data["name"] = f"{e['module']}.{e['qualname']}"
    if "target" in changes:
        data["target"] = changes["target"]
    e["specialization_data"] = json.dumps(data)
    return Manifest(entries=[ManifestEntry.model_validate(e)])


@pytest.fixture
def recorded(harness: MonitorHarness) -> Manifest:
    return _offset_view_manifest(harness)


@pytest.fixture
def evil_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """An importable module that leaves a marker file if it is ever imported."""
    marker = tmp_path / "imported"
    pkg = tmp_path / "evilpath"
    pkg.mkdir()
    (pkg / "jw_evil_mod.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    monkeypatch.syspath_prepend(str(pkg))
    yield "jw_evil_mod", marker
    sys.modules.pop("jw_evil_mod", None)


def test_unlisted_module_is_not_imported(recorded: Manifest, evil_module: tuple[str, Path]) -> None:
    name, marker = evil_module
    m = _entry_like(recorded, module=name)
    for allow in (None, [], ["jw_evil"], ["kernels_fieldcases"], ["jw_evil_mod_other"]):
        report = replay(m, allow=allow)
        assert report.skipped == 1
        assert "not under an allowed prefix" in (report.results[0].reason or "")
    assert not marker.exists()
    assert name not in sys.modules


def test_allowed_module_without_kernel_is_skipped(recorded: Manifest, evil_module: tuple[str, Path]) -> None:
    """Allowing a prefix is what permits an import; a missing attribute is then a skip, not a crash."""
    name, marker = evil_module
    report = replay(_entry_like(recorded, module=name), allow=[name])
    assert marker.exists()
    assert report.skipped == 1 and "has no attribute" in (report.results[0].reason or "")


def test_unimportable_and_non_kernel_entries_skipped(recorded: Manifest) -> None:
    r1 = replay(_entry_like(recorded, module="kernels_fieldcases_missing"), allow=["kernels_fieldcases_missing"])
    assert r1.skipped == 1 and "cannot import" in (r1.results[0].reason or "")
    r2 = replay(_entry_like(recorded, qualname="tile_for"), allow=ALLOW)
    assert r2.skipped == 1 and "not a @triton.jit kernel" in (r2.results[0].reason or "")


def test_changed_source_and_other_target_skipped(recorded: Manifest, compile_only: Any) -> None:
    stale = _entry_like(recorded, source_hash="0" * 64)
    r = replay(stale, allow=ALLOW)
    assert r.skipped == 1 and "source changed" in (r.results[0].reason or "")
    other = _entry_like(recorded, target={"backend": "cuda", "arch": 80, "warp_size": 32})
    r = replay(other, allow=ALLOW)
    assert r.skipped == 1 and "recorded for target" in (r.results[0].reason or "")


def test_lazy_module_getattr_not_triggered(recorded: Manifest) -> None:
    """An already-imported module's ``__getattr__`` (lazy submodule import) is never called."""
    import types

    calls: list[str] = []
    mod = types.ModuleType("jw_lazy_mod")
    mod.__getattr__ = lambda name: calls.append(name)  # type: ignore[method-assign]
    sys.modules["jw_lazy_mod"] = mod
    try:
        report = replay(_entry_like(recorded, module="jw_lazy_mod", qualname="submodule"), allow=None)
    finally:
        del sys.modules["jw_lazy_mod"]
    assert report.skipped == 1 and "has no attribute" in (report.results[0].reason or "")
    assert calls == []


def test_module_allowed_rules() -> None:
    assert module_allowed("vllm.model_executor.x", ["vllm"])
    assert not module_allowed("vllm_evil", ["vllm"])
    assert not module_allowed("../x", ["../x"])
    assert module_allowed("json", None)  # already imported: usable, nothing new imported
    with pytest.raises(LookupError):
        resolve_kernel("kernels_fieldcases", "<locals>", allow=ALLOW)


def test_replay_from_env(recorded: Manifest, tmp_path: Path, harness: MonitorHarness) -> None:
    """The vLLM plugin's entry point: env-driven, never raises, refuses to replay while serving."""
    path = save(recorded, tmp_path / "m.json")

    def settings(env: dict[str, str]) -> Settings:
        return Settings.from_env(env)

    assert replay_from_env(settings=settings({})) is None
    assert replay_from_env(settings=settings({JITWATCH_MANIFEST: str(tmp_path / "missing.json")})) is None
    (tmp_path / "bad.json").write_text("{")
    assert replay_from_env(settings=settings({JITWATCH_MANIFEST: str(tmp_path / "bad.json")})) is None
    env = settings({JITWATCH_MANIFEST: str(path), JITWATCH_MANIFEST_ALLOW: "kernels_fieldcases"})
    assert harness.monitor.phase is Phase.SERVING  # recorded fixture left it serving
    assert replay_from_env(harness.monitor, settings=env) is None
    fresh_kernel_cache(kf.scale_copy)
    report = replay_from_env(None, settings=env)
    assert report is not None and (report.compiled, report.on_disk) == (0, 1)  # recorded into this disk cache


def test_cli_replay(recorded: Manifest, tmp_path: Path) -> None:
    from jitwatch.cli import app

    path = save(recorded, tmp_path / "m.json")
    fresh_kernel_cache(kf.scale_copy)
    res = CliRunner().invoke(app, ["warmup", "replay", str(path), "--allow", "kernels_fieldcases", "--json"])
    assert res.exit_code == 0, res.output
    # recording compiled it into this test's disk cache: loaded from there, nothing compiled
    assert (json.loads(res.output)["cached"], json.loads(res.output)["on_disk"]) == (1, 1)
    (tmp_path / "future.json").write_text(json.dumps({"format": "jitwatch.manifest", "version": 3, "entries": []}))
    res = CliRunner().invoke(app, ["warmup", "replay", str(tmp_path / "future.json")])
    assert res.exit_code == 2 and "newer jitwatch" in res.output
    assert load(path) == recorded


def test_cli_replay_all_skipped_fails_with_a_hint(
    recorded: Manifest, evil_module: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing allowed → every entry skipped → exit 1 naming --allow/JITWATCH_MANIFEST_ALLOW; no
    progress bar on a non-terminal stderr; the key is shortened at a token boundary."""
    from jitwatch.cli import app

    monkeypatch.delenv(JITWATCH_MANIFEST_ALLOW, raising=False)
    name, marker = evil_module
    path = save(_entry_like(recorded, module=name), tmp_path / "skip.json")
    res = CliRunner().invoke(app, ["warmup", "replay", str(path)])
    assert res.exit_code == 1, res.output
    assert "--allow" in res.output and "JITWATCH_MANIFEST_ALLOW" in res.output
    # it names the module the manifest's entry needs (as text: the module was not imported)
    assert f"(the manifest's: --allow {name}), or import them first" in res.output, res.output
    assert "warmup replay" not in res.output  # the rich progress bar stayed off (stderr is no TTY)
    (skip_line,) = [line for line in res.output.splitlines() if line.startswith("  skipped:")]
    key = recorded.entries[0].key
    assert len(key) > 80  # long enough to be shortened
    shown = skip_line.split(f"{name}.scale_copy ", 1)[1].split("…:", 1)[0]
    assert key.startswith(shown) and shown.endswith("),"), skip_line  # cut between tuples
    assert not marker.exists()
    # an allow prefix that does not cover the module (docs/manifests.md's `--allow vllm` on a
    # manifest of other kernels): the module is importable, so the hint names the prefix it needs,
    # not PYTHONPATH (it said "make the kernels' modules importable (PYTHONPATH …)")
    res = CliRunner().invoke(app, ["warmup", "replay", str(path), "--allow", "vllm"])
    assert res.exit_code == 1, res.output
    hint = "nothing compiled: the allowed prefixes (vllm) do not cover the kernels' modules"
    assert f"{hint} (the manifest's: --allow {name})" in res.output, res.output
    assert "PYTHONPATH" not in res.output and not marker.exists()
    # allowed through the environment: the CLI reads JITWATCH_MANIFEST_ALLOW too (then it is a
    # different skip: the module has no such kernel), still exit 1 as nothing compiled
    monkeypatch.setenv(JITWATCH_MANIFEST_ALLOW, name)
    res = CliRunner().invoke(app, ["warmup", "replay", str(path)])
    assert res.exit_code == 1 and "has no attribute" in res.output
    assert "make the kernels' modules importable" in res.output and "pass --allow" not in res.output
    # allowed but not importable: the skip says why (sys.path), the last line does not ask for --allow
    missing = save(_entry_like(recorded, module="jw_no_such_module"), tmp_path / "missing.json")
    res = CliRunner().invoke(app, ["warmup", "replay", str(missing), "--allow", "jw_no_such_module"])
    assert res.exit_code == 1 and "is it on sys.path?" in res.output and "pass --allow" not in res.output
    # --allow takes a comma-separated list as JITWATCH_MANIFEST_ALLOW does ('vllm,jw_no_such_module'
    # was one prefix, which no module name matches): the module is allowed, as just above
    res = CliRunner().invoke(app, ["warmup", "replay", str(missing), "--allow", "vllm, jw_no_such_module"])
    assert res.exit_code == 1 and "is it on sys.path?" in res.output, res.output


def test_threaded_compile_failure_is_retried_serially(
    tmp_path: Path, triton_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPython 3.11's ``ast`` recursion counter is per interpreter, so two Triton frontends parsing at
    once can raise ``SystemError: AST constructor recursion depth mismatch`` (cpython gh-106905; it
    failed this project's CI once). That error, raised in the pool thread only, is injected here:
    the entry is compiled again in the replaying thread, reported ``compiled`` with the first error."""
    import ast
    import threading

    with monitored("warn", journal_dir=tmp_path / "j1", triton_cache_dir=tmp_path / "c1") as h1:
        m = _offset_view_manifest(h1)
    fresh_kernel_cache(kf.scale_copy)
    real_parse = ast.parse
    failed: list[str] = []

    def parse_failing_in_the_pool(*args: Any, **kwargs: Any) -> Any:
        name = threading.current_thread().name
        if name.startswith("jitwatch-replay") and not failed:
            failed.append(name)
            raise SystemError("AST constructor recursion depth mismatch (before=144, after=29)")
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse_failing_in_the_pool)
    fresh_kernel_cache(kf.scale_copy)
    with monitored("warn", journal_dir=tmp_path / "j2", triton_cache_dir=tmp_path / "c2") as h2:
        with h2.monitor.warmup():
            report = replay(m, allow=ALLOW, parallel="threads")
        assert failed, "the pool thread never parsed: the fault was not injected"
        assert (report.compiled, report.failed) == (1, 0), report.results
        (result,) = report.results
        assert result.reason is not None and "second, serial attempt" in result.reason
        assert "AST constructor recursion depth mismatch" in result.reason
        assert m.entries[0].key in {e.key for e in h2.compiles(Phase.WARMUP)}


def test_threaded_compile_that_fails_again_is_failed(
    tmp_path: Path, triton_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile that fails in the pool and again in the replaying thread is ``failed``, with the
    second attempt's message (a real error is not hidden by the retry)."""
    import ast
    import threading

    with monitored("warn", journal_dir=tmp_path / "j1", triton_cache_dir=tmp_path / "c1") as h1:
        m = _offset_view_manifest(h1)
    fresh_kernel_cache(kf.scale_copy)
    real_parse = ast.parse
    failing: list[str] = []

    def parse_failing_from_the_pool_on(*args: Any, **kwargs: Any) -> Any:
        # the key check parses before any compile; from the pool's compile on, every parse fails
        if threading.current_thread().name.startswith("jitwatch-replay") or failing:
            failing.append(threading.current_thread().name)
            raise SyntaxError("injected: the kernel's source does not parse")
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse_failing_from_the_pool_on)
    with monitored("warn", journal_dir=tmp_path / "j2", triton_cache_dir=tmp_path / "c2") as h2:
        with h2.monitor.warmup():
            report = replay(m, allow=ALLOW, parallel="threads")
    assert (report.compiled, report.failed) == (0, 1), report.results
    assert len(set(failing)) == 2  # the pool thread's attempt, then this thread's
    (result,) = report.results
    assert result.reason is not None and "injected: the kernel's source does not parse" in result.reason
    assert "second, serial attempt" not in result.reason


@pytest.mark.parametrize("parallel", ["serial", "threads"])
def test_cli_replay_reports_entries_already_in_the_disk_cache(
    recorded: Manifest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parallel: str
) -> None:
    """A second replay of the same manifest in a new process (in-memory cache emptied, the same
    ``TRITON_CACHE_DIR``) compiles nothing: Triton loads the entry from its disk cache. It said
    ``1 compiled, 0 already cached`` again; now ``0 compiled, 1 already cached (1 from Triton's disk
    cache)``, and the entry is ``cached`` with that reason in ``--json``."""
    from jitwatch.cli import app

    path = save(recorded, tmp_path / "m.json")
    args = ["warmup", "replay", str(path), "--allow", "kernels_fieldcases", "--parallel", parallel]
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "empty-cache"))  # not the one `recorded` filled
    seen = []
    for _ in range(2):
        fresh_kernel_cache(kf.scale_copy)  # a new process: nothing in memory, the disk cache kept
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        seen.append(res.stdout.splitlines()[0])
    assert seen[0].startswith("1 entry: 1 compiled, 0 already cached, 0 skipped"), seen
    assert seen[1].startswith("1 entry: 0 compiled, 1 already cached (1 from Triton's disk cache), 0 skipped"), seen
    fresh_kernel_cache(kf.scale_copy)
    res = CliRunner().invoke(app, [*args, "--json"])
    doc = json.loads(res.stdout)
    assert (doc["compiled"], doc["cached"], doc["on_disk"]) == (0, 1, 1), doc
    assert [(r["status"], r["reason"]) for r in doc["results"]] == [
        ("cached", "in Triton's disk cache: loaded, not compiled")
    ]
    again = replay(recorded, allow=ALLOW)  # in this process's memory now: cached, not from disk
    assert (again.cached, again.on_disk) == (1, 0) and again.results[
        0
    ].reason == "already in this process's in-memory cache"


@pytest.mark.parametrize("parallel", ["serial", "threads"])
def test_replay_inside_the_hosts_async_compile_mode(tmp_path: Path, triton_cache: Path, parallel: str) -> None:
    """A host that calls replay inside its own ``triton.AsyncCompileMode`` (its warmup compiles
    asynchronously): a threaded replay raised Triton's ``RuntimeError: Another AsyncCompileMode is
    already active`` out of replay (documented: nothing is fatal); a serial one handed its compiles
    to the host's pool, reported them ``compiled`` before they were, and left them to the host's
    exit. Now replay compiles outside the host's mode: every entry compiled and in memory when
    replay returns, the host's mode still active after it."""
    from concurrent.futures import ThreadPoolExecutor

    import triton
    from triton.runtime._async_compile import active_mode

    from jitwatch.warmup.replay import _in_memory

    with monitored("warn", journal_dir=tmp_path / "j1", triton_cache_dir=tmp_path / "c1") as h1:
        m = _offset_view_manifest(h1)
    fresh_kernel_cache(kf.scale_copy)
    with monitored("warn", journal_dir=tmp_path / "j2", triton_cache_dir=tmp_path / "c2"):
        with ThreadPoolExecutor(2) as pool, triton.AsyncCompileMode(pool) as host_mode:
            report = replay(m, allow=ALLOW, parallel=parallel)  # type: ignore[arg-type]
            assert (report.compiled, report.failed) == (1, 0), report.results
            assert _in_memory(kf.scale_copy, m.entries[0].key)  # compiled now, not at the host's exit
            assert active_mode.get() is host_mode


def test_replay_from_env_warns_when_entries_are_not_replayed(
    recorded: Manifest, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``JITWATCH_MANIFEST`` without the ``JITWATCH_MANIFEST_ALLOW`` its modules need (the fix's
    second half forgotten): every entry is skipped, nothing compiled. One WARNING line says so and
    names the variable and the modules (the per-entry reasons were INFO only: the demo and the
    plugin's worker showed ``1 skipped`` and no reason)."""
    entry = recorded.entries[0]
    data = json.loads(entry.specialization_data)
    data["name"] = f"jitwatch_never_imported_x.{entry.qualname}"
    moved = entry.model_copy(update={"module": "jitwatch_never_imported_x", "specialization_data": json.dumps(data)})
    manifest = Manifest.model_validate({**recorded.model_dump(), "entries": [moved.model_dump()]})
    path = save(manifest, tmp_path / "m.json")
    assert "jitwatch_never_imported_x" not in sys.modules
    caplog.set_level("INFO", logger="jitwatch")
    report = replay_from_env(settings=Settings.from_env({JITWATCH_MANIFEST: str(path)}))
    assert report is not None and (report.compiled, report.skipped) == (0, 1)
    assert "jitwatch_never_imported_x" not in sys.modules
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "1 of 1 entries not replayed" in warnings[0]
    assert f"{JITWATCH_MANIFEST_ALLOW}=jitwatch_never_imported_x" in warnings[0]
    caplog.clear()
    # every entry replayed: no warning
    fresh_kernel_cache(kf.scale_copy)
    env = Settings.from_env(
        {JITWATCH_MANIFEST: str(save(recorded, tmp_path / "ok.json")), JITWATCH_MANIFEST_ALLOW: "kernels_fieldcases"}
    )
    assert replay_from_env(settings=env) is not None
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


_OTHER_VENV = {"3.9": "/work/main/.venv-triton36", "3.6": "/work/main/.venv"}

_RECORD = """
import sys, torch
sys.path.insert(0, sys.argv[2])
import kernels_fieldcases as kf
from jitwatch.testing import monitored, fresh_kernel_cache
from jitwatch.warmup.manifest import export
with monitored(journal_dir=sys.argv[1] + "/journal", triton_cache_dir=sys.argv[1] + "/cache") as h:
    fresh_kernel_cache(kf.scale_copy)
    with h.monitor.warmup():
        kf.scale_copy.warmup(torch.zeros(64), torch.empty(64), 60, BLOCK=64, grid=(1,))
    kf.scale_copy.warmup(torch.zeros(64), torch.empty(64)[1:], 60, BLOCK=64, grid=(1,))
    h.monitor.flush()
export(sys.argv[1] + "/journal", sys.argv[1] + "/m.json")
"""


def test_an_entry_recorded_with_another_triton_says_so(tmp_path: Path, triton_cache: Path, compile_only: Any) -> None:
    """A manifest recorded with another Triton version (real: the other test environment's Triton,
    3.6 against 3.9) is refused with a reason that starts by naming both versions: it read as a
    tampered entry ('attributes differ from what the key compiles'; from 3.9 to 3.6 'KeyError:
    Keyword argument fpsan_homomorphic_casts was specified but unrecognised'), saying nothing of
    the upgrade that is the usual cause."""
    import triton

    here = ".".join(triton.__version__.split(".")[:2])
    other = Path(_OTHER_VENV.get(here, "/nonexistent")) / "bin" / "python"
    if not other.exists():
        pytest.skip(f"no other Triton environment for Triton {triton.__version__}")
    root = TESTS.parents[1]
    subprocess.run(
        [str(other), "-c", _RECORD, str(tmp_path), str(TRITON_TESTS)],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    m = load(tmp_path / "m.json")
    assert m.triton_version and m.triton_version != triton.__version__
    fresh_kernel_cache(kf.scale_copy)
    report = replay(m, allow=ALLOW, parallel="serial")
    assert [r.status for r in report.results] == ["refused"]
    reason = report.results[0].reason or ""
    assert reason.startswith(
        f"recorded with Triton {m.triton_version}, this is Triton {triton.__version__}: "
        "re-record the manifest with this Triton; "
    ), reason
    # the same manifest, claiming this Triton: the reason is the check's alone
    m.triton_version = triton.__version__
    again = replay(m, allow=ALLOW, parallel="serial")
    assert again.results[0].status == "refused"
    assert "recorded with Triton" not in (again.results[0].reason or "")


def test_cli_replay_all_skipped_names_the_fix_for_the_reason(recorded: Manifest, tmp_path: Path) -> None:
    """Every entry skipped for another GPU target (a real sm_90 manifest replayed with --arch 80),
    or for a changed source: the last line said "make the kernels' modules importable (PYTHONPATH
    ...)", which mends neither. It names the recorded target and --compile-only --arch 90, or says
    to record the manifest again."""
    from jitwatch.cli import app

    path = save(recorded, tmp_path / "m.json")
    cli = ["warmup", "replay", str(path), "--allow", "kernels_fieldcases", "--compile-only", "--no-progress"]
    res = CliRunner().invoke(app, [*cli, "--arch", "80"])
    assert res.exit_code == 1, res.output
    last = res.output.strip().splitlines()[-1]
    assert last == (
        "jitwatch: every entry was skipped (1), nothing compiled: the manifest was recorded for another GPU target"
        " (90): replay it on that GPU, or with --compile-only --arch 90 to fill a Triton cache for it"
    ), res.output
    changed = recorded.model_copy(deep=True)
    changed.entries[0].source_hash = "0" * 64
    path = save(changed, tmp_path / "changed.json")
    res = CliRunner().invoke(
        app, ["warmup", "replay", str(path), "--allow", "kernels_fieldcases", "--compile-only", "--no-progress"]
    )
    assert res.exit_code == 1 and "source changed since recording" in res.output, res.output
    assert (
        res.output.strip()
        .splitlines()[-1]
        .endswith(
            "nothing compiled: the kernels' source changed since recording: record the manifest again from a journal"
            " of this source"
        )
    ), res.output
