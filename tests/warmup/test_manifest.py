"""Warmup manifests: recording from a real journal, the file format, and refusing bad files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import jitwatch.warmup.manifest as manifest_mod
from jitwatch.store.journal import Journal
from jitwatch.testing import MonitorHarness, fresh_kernel_cache
from jitwatch.warmup.manifest import (
    Manifest,
    ManifestError,
    ManifestVersionError,
    load,
    loads,
    parse_key,
    record_from_journal,
    resolve_sources,
    save,
)
from tests._paths import TRITON_TESTS

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf


@pytest.fixture
def recorded(harness: MonitorHarness) -> MonitorHarness:
    """Warmup compiles the aligned copy; serving compiles the offset view (field case 4)."""
    fresh_kernel_cache(kf.scale_copy)
    src, dst = torch.zeros(1024), torch.empty(1024)
    with harness.monitor.warmup():
        kf.scale_copy.warmup(src, dst, 1000, BLOCK=256, grid=(1,))
    kf.scale_copy.warmup(src, dst[1:], 1000, BLOCK=256, grid=(1,))
    harness.monitor.flush()
    return harness


def _manifest(h: MonitorHarness, **kw: object) -> Manifest:
    with Journal(h.journal_dir, readonly=True) as j:
        return record_from_journal(j, **kw)  # type: ignore[arg-type]


def test_records_serving_compiles_only_by_default(recorded: MonitorHarness) -> None:
    """Default export holds the serving-phase compile, with Triton's per-argument specialization."""
    m = _manifest(recorded)
    assert [e.kernel for e in m.entries] == ["kernels_fieldcases.scale_copy"]
    e = m.entries[0]
    assert e.phases == ["serving"]
    assert e.specialization["src_ptr"] == ["*fp32", "D"]
    assert e.specialization["dst_ptr"] == ["*fp32", ""]  # the offset view: not 16-byte aligned
    assert e.constexprs == {"BLOCK": 256}
    assert e.signature["dst_ptr"] == "*fp32"
    assert e.options["num_warps"] == 4
    assert e.target == {"backend": "cuda", "arch": 90, "warp_size": 32}
    assert json.loads(e.specialization_data)["key"] == e.key


def test_all_phases_and_source_hash(recorded: MonitorHarness) -> None:
    """``phases=None`` records warmup too; the compile events already carry JITFunction.cache_key
    (monitor), and resolve_sources fills it for entries that lack it (older journals)."""
    m = _manifest(recorded, phases=None)
    assert sorted(p for e in m.entries for p in e.phases) == ["serving", "warmup"]
    assert {e.source_hash for e in m.entries} == {kf.scale_copy.cache_key}
    for e in m.entries:
        e.source_hash = None
    assert resolve_sources(m, ["kernels_fieldcases"]) == {}
    assert {e.source_hash for e in m.entries} == {kf.scale_copy.cache_key}


def test_save_load_round_trip(recorded: MonitorHarness, tmp_path: Path) -> None:
    m = _manifest(recorded, phases=None)
    path = save(m, tmp_path / "m.json")
    assert load(path) == m


def test_parse_key() -> None:
    key = "[('*fp32', 'D'), ('i32', ''), ('i64', None), ('constexpr', 1), ('constexpr', 'a]b')]{'debug': False}"
    assert parse_key(key) == [("*fp32", "D"), ("i32", ""), ("i64", None), ("constexpr", 1), ("constexpr", "a]b")]
    assert parse_key("not a key") is None
    assert parse_key("[__import__('os')]{}") is None  # literal_eval only: no calls


@pytest.fixture
def good_text(recorded: MonitorHarness) -> str:
    return manifest_mod.dumps(_manifest(recorded))


def test_truncated_manifest(good_text: str) -> None:
    with pytest.raises(ManifestError, match="not valid JSON"):
        loads(good_text[: len(good_text) // 2])


def test_corrupt_manifest(tmp_path: Path) -> None:
    p = tmp_path / "m.json"
    p.write_bytes(b"\x00\xff\x13garbage")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load(p)
    with pytest.raises(ManifestError, match="cannot read"):
        load(tmp_path / "missing.json")


def test_future_version(good_text: str) -> None:
    raw = json.loads(good_text)
    raw["version"] = 99
    with pytest.raises(ManifestVersionError, match="version 99 was written by a newer jitwatch"):
        loads(json.dumps(raw))


def test_wrong_format_and_shape(good_text: str) -> None:
    raw = json.loads(good_text)
    raw["format"] = "something-else"
    with pytest.raises(ManifestError, match="format"):
        loads(json.dumps(raw))
    with pytest.raises(ManifestError, match="JSON object"):
        loads("[1, 2]")
    # a JSON object of something else (`{}`, a /jit document) read "format is 'None', expected
    # 'jitwatch.manifest'": it says what the file is not
    with pytest.raises(ManifestError, match=r"not a jitwatch manifest: it has no \"format\" field") as exc:
        loads("{}")
    assert "None" not in str(exc.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("module", "../../etc/passwd"),
        ("module", "/tmp/evil"),
        ("module", "os; import shutil"),
        ("module", "evil module"),
        ("qualname", "f.<locals>.k"),
        ("qualname", "__import__('os').system"),
        # `$` matched before a trailing newline: these loaded, and split the log and `warmup replay` lines
        ("module", "kernels_fieldcases\n"),
        ("qualname", "scale_copy\n"),
    ],
)
def test_hostile_names_refused_and_nothing_imported(good_text: str, field: str, value: str) -> None:
    """Paths and non-identifiers are refused at load, before anything could be imported."""
    raw = json.loads(good_text)
    raw["entries"][0][field] = value
    before = set(sys.modules)
    with pytest.raises(ManifestError, match="not a dotted Python name"):
        loads(json.dumps(raw))
    assert set(sys.modules) == before


def test_specialization_data_must_match_entry(good_text: str) -> None:
    raw = json.loads(good_text)
    data = json.loads(raw["entries"][0]["specialization_data"])
    data["name"] = "os.system"
    raw["entries"][0]["specialization_data"] = json.dumps(data)
    with pytest.raises(ManifestError, match=r"specialization_data is for 'os\.system'"):
        loads(json.dumps(raw))


def test_oversized_manifest_refused(good_text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest_mod, "MAX_MANIFEST_BYTES", 100)
    p = tmp_path / "m.json"
    p.write_text(good_text)
    with pytest.raises(ManifestError, match="over the 100-byte limit"):
        load(p)


def test_cli_export(recorded: MonitorHarness, tmp_path: Path) -> None:
    from jitwatch.cli import app

    out = tmp_path / "m.json"
    res = CliRunner().invoke(
        app,
        [
            *("manifest", "export", "--journal-dir", str(recorded.journal_dir), "-o", str(out)),
            *("--all-phases", "--allow", "kernels_fieldcases"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "2 specializations of 1 kernel (" in res.output
    m = load(out)
    assert all(e.source_hash == kf.scale_copy.cache_key for e in m.entries)
    res = CliRunner().invoke(app, ["manifest", "export", "--journal-dir", str(tmp_path / "none"), "-o", str(out)])
    assert res.exit_code == 1


def test_export_says_which_backends_it_leaves_out(tmp_path: Path) -> None:
    """A journal whose serving compiles include torch.compile recompiles: the manifest holds the
    Triton entries only, and the export says how many compiles of which backend it left out
    (it used to write "0 specializations" and say nothing)."""
    from jitwatch.core.events import EventKind, Phase
    from jitwatch.testing import JournalBuilder
    from jitwatch.warmup.manifest import build

    jb = JournalBuilder(tmp_path)
    tc = {"backend": "torch_compile", "kernel": "f", "duration_s": 0.2}
    jb.write(*(jb.event(EventKind.COMPILE, jb.t0 + i, key=f"0/{i}", phase=Phase.SERVING, **tc) for i in range(3)))
    jb.write(jb.event(EventKind.COMPILE, jb.t0 - 1, key="0/0", phase=Phase.WARMUP, **tc))
    manifest, problems = build(tmp_path)
    assert manifest.entries == []
    assert "left out (3): manifests record and replay Triton kernels only" in problems["torch_compile compiles"]
    _, problems = build(tmp_path, all_phases=True)
    assert problems["torch_compile compiles"].startswith("left out (4)")


def _direct_scale_copy(block: int) -> object:
    """``triton.compile`` of ``scale_copy`` called directly (as Inductor does): a listener-only compile."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"src_ptr": "*fp32", "dst_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    src = ASTSource(fn=kf.scale_copy, signature=sig, constexprs={(3,): block})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32))


def test_export_reports_the_listener_only_compiles_it_leaves_out(harness: MonitorHarness, tmp_path: Path) -> None:
    """Real listener-only compiles in serving (direct ``triton.compile``, two of one key, one of
    another) beside a JIT compile: the manifest holds the JIT compile only, and the export says
    how many listener-only compiles, of how many keys, of which kernel it left out and how to warm
    them (it used to drop them without a word)."""
    from jitwatch.cli import app
    from jitwatch.core.events import Phase
    from jitwatch.warmup.manifest import build

    fresh_kernel_cache(kf.scale_copy)
    src, dst = torch.zeros(1024), torch.empty(1024)
    harness.monitor.activate()
    keys = [_direct_scale_copy(128).hash, _direct_scale_copy(128).hash, _direct_scale_copy(256).hash]  # type: ignore[attr-defined]
    kf.scale_copy.warmup(src, dst, 1000, BLOCK=64, grid=(1,))
    serving = harness.compiles(Phase.SERVING)
    assert [e.attrs.get("source") for e in serving] == ["compilation_listener"] * 3 + [None]
    assert [e.key for e in serving[:3]] == keys and len(set(keys)) == 2

    manifest, problems = build(harness.journal_dir)
    assert [(e.kernel, e.constexprs) for e in manifest.entries] == [("kernels_fieldcases.scale_copy", {"BLOCK": 64})]
    why = problems["scale_copy (listener-only)"]
    assert why.startswith("left out (3 compiles, 2 keys): ")
    assert "warm it by running that code path in warmup" in why and "triton.compile" in why
    assert list(problems) == ["scale_copy (listener-only)"]

    out = tmp_path / "m.json"
    res = CliRunner().invoke(app, ["manifest", "export", "--journal-dir", str(harness.journal_dir), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "1 specialization of 1 kernel (serving)" in res.output
    assert f"  scale_copy (listener-only): {why}" in res.output
    assert len(load(out).entries) == 1


def _direct_zero_kv_blocks(block: int) -> object:
    """``triton.compile`` of ``zero_kv_blocks`` called directly: a listener-only compile."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"kv_ptr": "*fp32", "block_ids_ptr": "*i32", "num_blocks": "i32", "block_numel": "i32", "BLOCK": "constexpr"}
    src = ASTSource(fn=kf.zero_kv_blocks, signature=sig, constexprs={(4,): block})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32))


def test_export_counts_listener_only_compiles_per_kernel_across_ranks_and_phases(
    tmp_path: Path, triton_cache: Path
) -> None:
    """Two ranks into one journal, each: a listener-only ``scale_copy`` in warmup and another key
    of it in serving, a JIT ``scale_copy`` in serving, and listener-only ``zero_kv_blocks`` in
    serving (rank 1: two keys). The left-out lines count each kernel's compiles and distinct keys
    in the phases and rank asked for (serving only unless --all-phases), one compile or key in the
    singular (it said "1 compiles, 1 keys"); the JIT compile is an entry, never a left-out one."""
    from jitwatch.cli import app
    from jitwatch.testing import monitored
    from jitwatch.warmup.manifest import build

    jdir = tmp_path / "j"
    src, dst = torch.zeros(1024), torch.empty(1024)
    for rank in (0, 1):
        fresh_kernel_cache(kf.scale_copy)
        with monitored("warn", rank=rank, journal_dir=jdir, triton_cache_dir=triton_cache) as h:
            with h.monitor.warmup():
                _direct_scale_copy(32)
            _direct_scale_copy(128)
            _direct_zero_kv_blocks(64)
            if rank == 1:
                _direct_zero_kv_blocks(128)
            kf.scale_copy.warmup(src, dst, 1000, BLOCK=64, grid=(1,))
            h.monitor.flush()

    def left(**kw: object) -> dict[str, str]:
        manifest, problems = build(jdir, **kw)  # type: ignore[arg-type]
        entries = [] if kw.get("rank") == 7 else ["kernels_fieldcases.scale_copy"]
        assert [e.kernel for e in manifest.entries] == entries
        return {k: v.split(":", 1)[0] for k, v in problems.items()}

    sc, zk = "scale_copy (listener-only)", "zero_kv_blocks (listener-only)"
    assert left() == {sc: "left out (2 compiles, 1 key)", zk: "left out (3 compiles, 2 keys)"}
    assert left(all_phases=True) == {sc: "left out (4 compiles, 2 keys)", zk: "left out (3 compiles, 2 keys)"}
    assert left(rank=0) == {sc: "left out (1 compile, 1 key)", zk: "left out (1 compile, 1 key)"}
    assert left(rank=1, all_phases=True) == {sc: "left out (2 compiles, 2 keys)", zk: "left out (2 compiles, 2 keys)"}
    assert left(rank=7) == {}

    out = tmp_path / "m.json"
    res = CliRunner().invoke(
        app, ["manifest", "export", "--journal-dir", str(jdir), "-o", str(out), "--rank", "0", "--all-phases"]
    )
    assert res.exit_code == 0, res.output
    assert "1 specialization of 1 kernel (startup, warmup, serving)" in res.stdout
    assert f"  {sc}: left out (2 compiles, 2 keys): " in res.stderr
    assert f"  {zk}: left out (1 compile, 1 key): " in res.stderr


def test_export_with_nothing_to_write_fails_unless_allow_empty(harness: MonitorHarness, tmp_path: Path) -> None:
    """Every serving compile listener-only (real direct ``triton.compile`` calls): the export
    writes nothing, says why per kernel and then in one last line, and exits 1 (it wrote an empty
    manifest, "0 specializations of 0 kernels", exit 0, which replay then ran as "0 entries").
    ``--allow-empty`` writes the empty manifest."""
    from jitwatch.cli import app

    fresh_kernel_cache(kf.scale_copy)
    harness.monitor.activate()
    _direct_scale_copy(128)
    harness.monitor.flush()
    out = tmp_path / "m.json"
    args = ["manifest", "export", "--journal-dir", str(harness.journal_dir), "-o", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output
    assert not out.exists() and res.stdout == ""
    lines = res.stderr.splitlines()
    assert lines[0].startswith("  scale_copy (listener-only): left out (1 compile, 1 key): "), lines
    assert lines[-1] == (
        f"jitwatch: nothing to write to {out}: every one of the journal's serving-phase compiles was left out"
        " (why: above); wrote nothing (--allow-empty writes an empty manifest)"
    )
    res = CliRunner().invoke(app, [*args, "--allow-empty"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == f"wrote {out}: 0 specializations of 0 kernels (serving)"
    assert load(out).entries == []


def test_export_of_a_journal_without_serving_compiles_writes_nothing(tmp_path: Path) -> None:
    """Only torch.compile serving compiles (left out: manifests hold Triton kernels), or none at
    all for the rank asked: exit 1, one last line saying which, nothing written."""
    from jitwatch.cli import app
    from jitwatch.core.events import EventKind, Phase
    from jitwatch.testing import JournalBuilder

    jb = JournalBuilder(tmp_path / "j")
    tc = {"backend": "torch_compile", "kernel": "f", "duration_s": 0.2}
    jb.write(jb.event(EventKind.COMPILE, jb.t0, key="0/1", phase=Phase.SERVING, **tc))
    out = tmp_path / "m.json"
    args = ["manifest", "export", "--journal-dir", str(tmp_path / "j"), "-o", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1 and not out.exists(), res.output
    assert res.stderr.splitlines()[0].startswith("  torch_compile compiles: left out (1): ")
    assert "every one of the journal's serving-phase compiles was left out" in res.stderr.splitlines()[-1]
    res = CliRunner().invoke(app, [*args, "--rank", "3"])
    assert res.exit_code == 1 and not out.exists(), res.output
    assert res.stderr.strip() == (
        f"jitwatch: nothing to write to {out}: no serving-phase compiles of rank 3 in the journal; wrote nothing"
        " (--allow-empty writes an empty manifest)"
    )


def test_re_export_after_a_replay_does_not_silently_drop_the_replayed_entries(tmp_path: Path) -> None:
    """docs/manifests.md's loop, export then replay, run again: run 2 (a new journal, as a new
    pod's) replays run 1's manifest, so that kernel compiles in warmup, not serving; its export to
    the same file (serving-phase compiles only) wrote 1 entry over 2 and run 3 compiled run 1's
    kernel in serving again. Now it refuses, writing nothing, and says what keeps them
    (--all-phases, `jitwatch warmup merge`) or replaces the file (--force). Real compile-only
    Triton compiles, each run in a process of its own."""
    import os
    import subprocess

    from jitwatch.cli import app
    from tests._paths import ROOT

    manifest = tmp_path / "warmup.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITWATCH_", "TRITON_CACHE"))}
    env["PYTHONPATH"] = str(ROOT)
    worker = str(Path(__file__).with_name("reexport_worker.py"))

    def run(n: int, dtype: str, **extra: str) -> Path:
        journal = tmp_path / f"run{n}"
        res = subprocess.run(
            [sys.executable, worker, str(journal), dtype],
            env={**env, "TRITON_CACHE_DIR": str(tmp_path / f"triton{n}"), **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, (res.stdout, res.stderr)
        return journal

    def export(journal: Path, *more: str):
        return CliRunner().invoke(
            app, ["manifest", "export", "--journal-dir", str(journal), "-o", str(manifest), *more]
        )

    first = export(run(1, "float16"))
    assert first.exit_code == 0 and first.stdout.startswith(f"wrote {manifest}: 1 specialization"), first.output
    before = manifest.read_bytes()
    replay = {"JITWATCH_MANIFEST": str(manifest), "JITWATCH_MANIFEST_ALLOW": "jitwatch.kernels.kv_blocks"}
    run2 = run(2, "float32", **replay)
    res = export(run2)
    assert res.exit_code == 1 and res.stdout == "", res.output
    assert manifest.read_bytes() == before  # untouched
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"jitwatch: {manifest} holds 1 specialization this export leaves out"), line
    from jitwatch.backends.explain import local_jitwatch  # runnable as printed, as the fixes

    assert "--all-phases" in line and f"`{local_jitwatch()} warmup merge {manifest} " in line, line
    assert "--force" in line, line
    res = export(run2, "--all-phases")  # the replayed entry compiled in warmup: recorded again
    assert res.exit_code == 0 and "2 specializations of 1 kernel" in res.stdout, res.output
    keys = {e.identity() for e in manifest_mod.load(manifest).entries}
    assert len(keys) == 2
    res = export(run2, "--force")  # the operator's choice: serving-phase compiles only
    assert res.exit_code == 0 and "1 specialization of 1 kernel (serving)" in res.stdout, res.output
    assert len(manifest_mod.load(manifest).entries) == 1


def _nested(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("where", ["specialization_data", "constexprs"])
def test_deeply_nested_manifest_is_a_manifest_error(
    good_text: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Nesting deep enough to exhaust a parser is one ManifestError, and replay_from_env logs it and
    returns: JSON nested 200,000 deep inside specialization_data raised RecursionError out of load()
    (and out of replay_from_env, which never raises, into the host's warmup), and a constexpr nested
    300 deep, which json.loads reads, raised pydantic's ValueError 'Maximum serialization depth
    exceeded' from the digest check."""
    from jitwatch.warmup.replay import replay_from_env

    raw = json.loads(good_text)
    raw.pop("integrity", None)
    if where == "specialization_data":
        raw["entries"][0]["specialization_data"] = "[" * 200_000 + "]" * 200_000
    else:
        raw["entries"][0]["constexprs"] = {"BLOCK": _nested(300)}
    with pytest.raises(ManifestError, match="nested too deeply"):
        loads(json.dumps(raw))
    p = tmp_path / "nested.json"
    p.write_text(json.dumps(raw))
    monkeypatch.setenv("JITWATCH_MANIFEST", str(p))
    with caplog.at_level("ERROR", logger="jitwatch.warmup.replay"):
        assert replay_from_env(None) is None
    assert "nested too deeply" in caplog.text


def test_manifest_path_on_a_device_is_read_only_to_the_size_limit() -> None:
    """A path whose size stat() cannot tell (/dev/zero, a pipe, a /proc file: st_size 0) is read to
    one byte over the limit and refused; it was read until memory ran out (MemoryError under a
    1 GB address-space limit, here in a child process so the check cannot exhaust this one)."""
    import subprocess

    code = (
        "import resource, jitwatch.warmup.manifest as m\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "try:\n    m.load('/dev/zero')\nexcept BaseException as exc:\n    print(type(exc).__name__, exc)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={"PYTHONPATH": str(root)},
    )
    limit = manifest_mod.MAX_MANIFEST_BYTES
    want = f"ManifestError /dev/zero: {limit + 1} bytes is over the {limit}-byte limit"
    assert out.stdout.strip() == want, out.stdout + out.stderr


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_numbers_are_refused_at_load(good_text: str, constant: str, tmp_path: Path) -> None:
    """Python's json reads NaN and Infinity, which are not JSON: a manifest with ``"created_ts": NaN``
    loaded, save() wrote it as null, and the file written no longer loaded ('created_ts: Input should
    be a valid number'). It is refused at load, naming the constant."""
    raw = json.loads(good_text)
    raw.pop("integrity", None)
    text = json.dumps(raw).replace(f'"created_ts": {raw["created_ts"]!r}', f'"created_ts": {constant}')
    assert constant in text
    with pytest.raises(ManifestError, match=f"not valid JSON: {constant} is not a JSON number"):
        loads(text)


def test_an_integer_of_too_many_digits_is_a_manifest_error(good_text: str) -> None:
    """An integer literal of over 4,300 digits (Python's int_max_str_digits) raised ValueError
    'Exceeds the limit (4300 digits) for integer string conversion' out of load(): a traceback in
    warmup replay / merge / cache check."""
    raw = json.loads(good_text)
    raw.pop("integrity", None)
    text = json.dumps(raw).replace('"count": 1', '"count": 1' + "1" * 5000, 1)
    assert "1" * 5000 in text
    with pytest.raises(ManifestError, match="not valid JSON: Exceeds the limit"):
        loads(text)


def test_re_export_over_a_manifest_of_another_triton_replaces_it(recorded: MonitorHarness, tmp_path: Path) -> None:
    """After a Triton upgrade, exporting over the manifest recorded with the old Triton refused
    (exit 1, nothing written) and advised `warmup merge`, which kept the old Triton's entries: replay
    refuses them (their keys do not verify with another Triton), so every later `warmup replay`
    exited 1. Entries of another Triton are not kept: the file is replaced, a line on stderr says
    why; entries of the same Triton still make the export refuse."""
    from jitwatch.cli import app

    out = tmp_path / "warmup.json"
    old = _manifest(recorded, phases=None)  # warmup and serving keys: more than a serving export holds
    assert old.triton_version and len(old.entries) == 2
    save(old, out)
    res = CliRunner().invoke(app, ["manifest", "export", "--journal-dir", str(recorded.journal_dir), "-o", str(out)])
    assert res.exit_code == 1 and "holds 1 specialization this export leaves out" in res.stderr, res.output
    old.triton_version = "3.0.0"
    save(old, out)
    res = CliRunner().invoke(app, ["manifest", "export", "--journal-dir", str(recorded.journal_dir), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"wrote {out}: 1 specialization of 1 kernel (serving)"), res.output
    assert res.stderr.startswith(
        f"jitwatch: replacing {out}: recorded with Triton 3.0.0, this journal's compiles with Triton"
        f" {load(out).triton_version} (another Triton's keys do not replay); dropped: 1 specialization not in"
        " this export"
    ), res.stderr
    assert len(load(out).entries) == 1


def test_merging_manifests_of_two_tritons_says_so(recorded: MonitorHarness, tmp_path: Path) -> None:
    """`warmup merge` of a manifest recorded with another Triton (a fleet mid-upgrade) wrote the
    mixed manifest silently (triton_version null): every replay of it then refused the other
    Triton's entries as if edited. One stderr line names the versions and their inputs; a merge of
    one Triton's manifests has none."""
    from jitwatch.cli import app

    m = _manifest(recorded, phases=None)
    here = save(m, tmp_path / "here.json")
    same = CliRunner().invoke(app, ["warmup", "merge", str(here), str(here), "-o", str(tmp_path / "same.json")])
    assert same.exit_code == 0 and same.stderr == "", same.output
    m.triton_version = "3.0.0"
    old = save(m, tmp_path / "old.json")
    res = CliRunner().invoke(app, ["warmup", "merge", str(old), str(here), "-o", str(tmp_path / "out.json")])
    assert res.exit_code == 0 and res.stdout.startswith(f"wrote {tmp_path / 'out.json'}: merged 2 manifests"), (
        res.output
    )
    assert res.stderr == (
        f"jitwatch: the inputs were recorded with 2 Triton versions (3.0.0: {old}; {load(here).triton_version}:"
        f" {here}): a replay refuses the entries of every Triton but its own; merge the manifests of one Triton"
        " version\n"
    ), res.stderr
