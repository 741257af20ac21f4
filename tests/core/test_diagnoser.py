"""``Diagnoser``'s never-warmed memo: the same reason as a fresh diagnosis, per kernel and backend,
and no longer used once the kernel has a baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

from jitwatch.backends.explain import never_warmed
from jitwatch.core.diagnosis import MAX_KERNELS, Diagnoser
from jitwatch.core.events import EventKind, Phase
from jitwatch.testing import make_event


def _compile(phase: Phase, kernel: str, key: str, backend: str = "triton", **attrs: object):
    return make_event(EventKind.COMPILE, 1.0, phase=phase, kernel=kernel, key=key, backend=backend, attrs=dict(attrs))


def test_never_warmed_reasons_are_the_fresh_ones_per_kernel_and_backend() -> None:
    d = Diagnoser()
    seen = []
    for kernel, backend in (("k1", "triton"), ("k1", "triton"), ("k2", "triton"), ("k1", "torch_compile")):
        ev = _compile(Phase.SERVING, kernel, f"key-{len(seen)}", backend)
        reason = d.observe(ev)
        assert reason == never_warmed(kernel, backend=backend)
        assert ev.attrs["reason_kind"] == "never_warmed"
        assert ev.attrs["fixes"] == list(never_warmed(kernel, backend=backend).fixes)
        seen.append(ev)
    assert seen[0].attrs["fixes"] is not seen[1].attrs["fixes"]  # each event owns its lists
    assert seen[1].attrs["fixes"] != seen[3].attrs["fixes"]  # the fix names the backend's way


def test_a_baseline_added_later_replaces_the_never_warmed_reason() -> None:
    d = Diagnoser()
    assert d.observe(_compile(Phase.SERVING, "k", "a")) is not None
    d.observe(_compile(Phase.WARMUP, "k", "b"))  # e.g. a manifest replayed after serving began
    later = _compile(Phase.SERVING, "k", "c")
    reason = d.observe(later)
    assert reason is not None and reason.kind != "never_warmed"
    assert later.attrs["reason_kind"] == "unknown"  # no explainer given: a new key of a warmed kernel


def test_the_memo_is_bounded() -> None:
    d = Diagnoser()
    for i in range(MAX_KERNELS + 10):
        d.observe(_compile(Phase.SERVING, f"k{i}", "x"))
    assert len(d._never) == MAX_KERNELS
    last = _compile(Phase.SERVING, f"k{MAX_KERNELS + 5}", "y")
    assert d.observe(last) == never_warmed(f"k{MAX_KERNELS + 5}", backend="triton")


def test_an_unexplained_new_key_names_its_kernel() -> None:
    """A new key of a kernel warmed in other keys, with no explainer: the reason names the kernel
    and counts its warmed keys (it used to say "of this triton compile")."""
    d = Diagnoser()
    for key in ("a", "b", "a"):
        d.observe(_compile(Phase.WARMUP, "fused_rmsnorm", key))
    d.observe(_compile(Phase.WARMUP, "other_kernel", "c"))
    ev = _compile(Phase.SERVING, "fused_rmsnorm", "d")
    reason = d.observe(ev)
    assert reason is not None and reason.kind == "unknown"
    assert ev.attrs["reason"] == "new key; 2 other keys of kernel fused_rmsnorm were warmed"


def test_a_compile_without_backend_gets_the_triton_fixes() -> None:
    """A compile event with an empty ``backend`` (what a jitwatch 0.1 journal holds: all Triton)
    gets Triton's fixes, never "… not 's" with the empty name in it."""
    from jitwatch.backends.explain import new_key_fix, warm_fix

    d = Diagnoser()
    never = _compile(Phase.SERVING, "old_kernel", "a", backend="")
    d.observe(never)
    assert never.attrs["fixes"] == [warm_fix("old_kernel", "triton")]
    d.observe(_compile(Phase.WARMUP, "warmed_kernel", "a", backend=""))
    new = _compile(Phase.SERVING, "warmed_kernel", "b", backend="")
    d.observe(new)
    assert new.attrs["fixes"] == [new_key_fix("warmed_kernel", "triton")]
    assert all("not 's" not in f for f in never.attrs["fixes"] + new.attrs["fixes"])


def test_a_never_warmed_triton_kernel_s_fix_replays_in_the_worker_s_warmup_with_its_module() -> None:
    """The fix of a Triton kernel warmup never compiled records a manifest and replays it inside
    the worker's warmup (JITWATCH_MANIFEST + JITWATCH_MANIFEST_ALLOW, or replay() in
    Monitor.warmup()), never `jitwatch warmup replay` (its own process: Triton's disk cache only);
    the allow prefix is the event's module when it is a dotted Python name, else `<module prefix>`
    (a journal's text is never printed as a shell word); other backends' fixes offer no manifest."""
    from jitwatch.backends.explain import warm_fix

    d = Diagnoser()
    named = _compile(Phase.SERVING, "zero_kv_blocks_kernel", "a")
    named.attrs["module"] = "jitwatch.kernels.kv_blocks"
    d.observe(named)
    (fix,) = named.attrs["fixes"]
    assert "`JITWATCH_MANIFEST=manifest.json JITWATCH_MANIFEST_ALLOW=jitwatch.kernels.kv_blocks`" in fix, fix
    assert "`jitwatch manifest export -o manifest.json`" in fix and "inside `Monitor.warmup()`" in fix
    assert "warmup replay" not in fix
    for module in (None, "", "x; rm -rf ~", "a..b", 3):
        ev = _compile(Phase.SERVING, f"k{module!r}", "a")
        if module is not None:
            ev.attrs["module"] = module
        d.observe(ev)
        assert "JITWATCH_MANIFEST_ALLOW=<module prefix>`" in ev.attrs["fixes"][0], (module, ev.attrs["fixes"])
    assert warm_fix("graph", "torch_compile", module="m") == (
        "run what compiles graph in warmup with serving's arguments and shapes "
        "(warmup manifests replay Triton kernels only, not torch_compile's)"
    )


def test_the_never_warmed_fix_names_every_worker_that_reads_its_variables_and_real_calls() -> None:
    """The replay's variables are read by every worker that calls ``replay_from_env`` in its warmup:
    the vLLM plugin, ``jitwatch demo``'s worker, the user's own. The fix said "with the vLLM plugin"
    only (a demo user comparing it with the demo's own replay line was confused), and offered
    ``jitwatch.warmup.replay()``, a module, not a function. Every Python name the fix quotes as a
    call resolves to a real function."""
    import importlib
    import re

    from jitwatch.backends.explain import warm_fix

    fix = warm_fix("zero_kv_blocks_kernel", "triton", module="jitwatch.kernels.kv_blocks")
    assert "with the vLLM plugin" not in fix, fix
    assert "` for the vLLM plugin, `jitwatch demo`, or any worker that calls `" in fix, fix
    calls = re.findall(r"`(jitwatch(?:\.\w+)+)\(\)`", fix)
    assert calls == ["jitwatch.warmup.replay.replay_from_env", "jitwatch.warmup.replay.replay"], fix
    for call in calls:
        module, _, name = call.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), call


def test_a_never_warmed_kernel_defined_in_main_is_not_told_to_record_a_manifest() -> None:
    """A kernel of a script run as ``python script.py`` (module ``__main__``): ``manifest export``
    leaves it out ("defined in __main__, which no other process can import"), so the fix does not
    say to record and replay a manifest with ``JITWATCH_MANIFEST_ALLOW=__main__`` (not runnable as
    printed: the export had nothing to write); it says to warm it, or move it into a module."""
    d = Diagnoser()
    for module in ("__main__", "__main__.sub"):
        ev = _compile(Phase.SERVING, f"script_kernel_{module}", "a")
        ev.attrs["module"] = module
        d.observe(ev)
        (fix,) = ev.attrs["fixes"]
        assert "JITWATCH_MANIFEST" not in fix and "manifest export" not in fix, fix
        assert fix.startswith(f"call script_kernel_{module} in warmup with serving's arguments"), fix
        assert "importable module" in fix, fix


def test_a_new_key_of_a_kernel_defined_in_main_is_not_told_to_record_a_manifest() -> None:
    """A new key of a warmed ``__main__`` kernel (nothing explains the difference): its fix does not
    say to record and replay a manifest either (``manifest export`` leaves the kernel out)."""
    d = Diagnoser()
    warm = _compile(Phase.WARMUP, "script_kernel", "a")
    warm.attrs["module"] = "__main__"
    d.observe(warm)
    new = _compile(Phase.SERVING, "script_kernel", "b")
    new.attrs["module"] = "__main__"
    d.observe(new)
    (fix,) = new.attrs["fixes"]
    assert "manifest" in fix and "record a manifest of serving's keys" not in fix, fix
    assert "importable module" in fix, fix


def test_a_fix_shown_for_a_journal_names_it_and_one_absolute_manifest_as_the_shell_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runnable_fix(fix, journal_dir)``: the record command of a stored fix names the journal
    (``--journal-dir``) and ``-o <journal dir>/manifest.json``, and the replay's ``JITWATCH_MANIFEST``
    that same absolute file, so both run as printed from any directory. A home directory is shown
    as ``~`` where the shell expands it (unquoted, at the start of the word; the rest quoted), never
    in full; a path elsewhere is quoted whole. Checked through ``/bin/sh``, as a user pasting them
    would. A text without those commands, or no journal, is returned as it is."""
    import re
    import shlex
    import subprocess

    from jitwatch import redact as redact_mod
    from jitwatch.backends.explain import runnable_fix, warm_fix

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    redact_mod._patterns.cache_clear()
    try:
        fix = warm_fix("k", "triton", module="pkg.mod")
        assert "(`jitwatch manifest export -o manifest.json`)" in fix  # the stored text, as every version wrote it
        for journal, shown in [
            (home / "state dir" / "jw", "~/'state dir/jw'"),
            (tmp_path / "srv" / "it's", shlex.quote(str(tmp_path / "srv" / "it's"))),
        ]:
            text = runnable_fix(fix, journal)
            assert str(home) not in text, text
            export, replay = re.findall(r"`([^`]+)`", text)[:2]
            assert export.startswith(f"jitwatch manifest export --journal-dir {shown} -o "), export
            script = f"set -- {export.removeprefix('jitwatch manifest export ')}; printf '%s\\n' \"$@\"; "
            script += f"{replay} env | grep ^JITWATCH_MANIFEST | sort"
            sh = subprocess.run(
                ["/bin/sh", "-c", script],
                cwd=tmp_path,
                env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
            )
            assert sh.returncode == 0, sh.stderr
            manifest = str(journal / "manifest.json")
            assert sh.stdout.splitlines() == [
                "--journal-dir",
                str(journal),
                "-o",
                manifest,
                f"JITWATCH_MANIFEST={manifest}",
                "JITWATCH_MANIFEST_ALLOW=pkg.mod",
            ], sh.stdout
            assert runnable_fix(text, journal) == text  # shown once: nothing left to replace
        assert runnable_fix(fix, None) == fix
        other = warm_fix("graph", "torch_compile")
        assert runnable_fix(other, tmp_path) == other
    finally:
        redact_mod._patterns.cache_clear()


def _shown_commands(text: str) -> tuple[str, str]:
    """The record and replay commands of a never-warmed fix as shown, by the words around them
    (the directory itself may hold backquotes)."""
    import re

    m = re.search(
        r"record a manifest \(`(.*)`\) and replay it inside the worker's warmup \(`(.*)` for the vLLM plugin",
        text,
        re.DOTALL,
    )
    assert m is not None, text
    return m.group(1), m.group(2)


@pytest.mark.parametrize("shell", ["/bin/sh", "bash"])
def test_a_journal_directory_named_like_the_replay_command_runs_nothing_else(tmp_path: Path, shell: str) -> None:
    """A journal directory whose name holds the stored replay command's text (``JITWATCH_MANIFEST=
    manifest.json``) and shell syntax: the record command as shown, pasted into a shell, passes that
    directory and its ``manifest.json`` as two arguments and runs nothing else. (``runnable_fix``
    replaced the replay's text in the record command it had just written, so the path's quoting was
    cut open there and ``touch`` ran.)"""
    import shlex
    import subprocess

    from jitwatch.backends.explain import runnable_fix, warm_fix

    journal = tmp_path / "a`JITWATCH_MANIFEST=manifest.json ;touch PWNED;#"
    text = runnable_fix(warm_fix("k", "triton", module="pkg.mod"), journal)
    export, replay = _shown_commands(text)
    assert export.startswith("jitwatch manifest export "), export
    script = f"set -- {export.removeprefix('jitwatch manifest export ')}; printf '%s\\n' \"$@\"; "
    script += f"{replay} env | grep ^JITWATCH_MANIFEST | sort"
    sh = subprocess.run(
        [shell, "-c", script],
        cwd=tmp_path,
        env={"HOME": "/nonexistent", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert not (tmp_path / "PWNED").exists(), (text, sh.stdout, sh.stderr)
    assert sh.returncode == 0, sh.stderr
    manifest = str(journal / "manifest.json")
    assert sh.stdout.splitlines() == [
        "--journal-dir",
        str(journal),
        "-o",
        manifest,
        f"JITWATCH_MANIFEST={manifest}",
        "JITWATCH_MANIFEST_ALLOW=pkg.mod",
    ], (text, shlex.split(export))


def test_a_journal_directory_whose_name_is_not_utf8_is_shown_printable_and_runnable(tmp_path: Path) -> None:
    """A journal directory named with a byte that is not UTF-8 (``\\xff``) and shell syntax: the
    record command is printable (no lone surrogate, which no UTF-8 output can write) and, pasted
    into bash, passes the directory's exact bytes and runs nothing else (``$'...\\xff...'``)."""
    import os
    import subprocess

    from jitwatch.backends.explain import runnable_fix, warm_fix

    journal = tmp_path / os.fsdecode(b"a'\xff\xc3 `touch PWNED`\\$HOME;x")
    text = runnable_fix(warm_fix("k", "triton", module="pkg.mod"), journal)
    text.encode("utf-8")  # strict: printable on any UTF-8 terminal
    export, replay = _shown_commands(text)
    script = f"set -- {export.removeprefix('jitwatch manifest export ')}; printf '%s\\n' \"$@\"; "
    script += f"{replay} env | grep ^JITWATCH_MANIFEST= "
    sh = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env={"HOME": "/nonexistent", "PATH": "/usr/bin:/bin"}, capture_output=True
    )
    assert not (tmp_path / "PWNED").exists() and sh.returncode == 0, (text, sh.stderr)
    manifest = os.fsencode(journal / "manifest.json")
    assert sh.stdout.splitlines() == [
        b"--journal-dir",
        os.fsencode(journal),
        b"-o",
        manifest,
        b"JITWATCH_MANIFEST=" + manifest,
    ]


def test_a_journal_outside_the_shells_home_is_never_shown_as_a_path_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~`` is where the shell expands it, the current ``$HOME``: a journal in another user's home
    (``/home/bob/jw``) or in a directory whose name starts with the home's (``<home> 2/jw``) was
    shown as ``~/jw`` / ``'~ 2/jw'`` (redaction's ``~`` for any home), so the commands as pasted
    read or wrote another directory: this user's ``~/jw``, or a relative ``~ 2/jw``. Such a path is
    shown with a ``<home>`` placeholder to type in (as ``<user>``), quoted; neither the other home
    nor its user's name is printed. A journal in the home itself is still ``~/…``."""
    import subprocess

    from jitwatch import redact as redact_mod
    from jitwatch.backends.explain import runnable_fix, warm_fix

    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    redact_mod._patterns.cache_clear()
    try:
        fix = warm_fix("k", "triton", module="pkg.mod")
        for journal in [Path("/home/bob/jw"), tmp_path / "home" / "alice 2" / "jw", home / "jw"]:
            text = runnable_fix(fix, journal)
            assert "bob" not in text and str(home) not in text, text
            export, _ = _shown_commands(text)
            word = export.removeprefix("jitwatch manifest export --journal-dir ").split(" -o ")[0]
            sh = subprocess.run(
                ["/bin/sh", "-c", f"printf '%s' {word}"],
                cwd=tmp_path,
                env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
            )
            assert sh.returncode == 0, sh.stderr
            if journal.parent == home:
                assert sh.stdout == str(journal) and word == "~/jw", text
            else:  # never another directory than the journal, silently: a placeholder to type in
                assert sh.stdout.startswith("<home>") and sh.stdout.endswith("/jw"), (sh.stdout, text)
    finally:
        redact_mod._patterns.cache_clear()


def test_a_fix_of_an_older_version_names_one_manifest_in_its_record_and_replay(tmp_path: Path) -> None:
    """Journals of the version that said "replay it at startup (`jitwatch warmup replay
    manifest.json`)" hold that text. `jitwatch why` showed their record command with the journal
    and ``-o <journal dir>/manifest.json`` but left the replay at ``manifest.json``, read against the
    directory the replay runs in: not the file the record wrote. Both now name that one file."""
    import json
    import re
    import shlex

    from typer.testing import CliRunner

    from jitwatch.cli import app
    from jitwatch.store.journal import Journal
    from jitwatch.testing import make_event

    old_fix = (
        "call k in warmup with serving's arguments, or record a manifest (`jitwatch manifest export -o manifest.json`)"
        " and replay it at startup (`jitwatch warmup replay manifest.json`)"
    )
    journal_dir = tmp_path / "old run"
    with Journal(journal_dir) as j:
        j.write(
            [
                make_event(
                    EventKind.COMPILE,
                    1.0,
                    phase=Phase.SERVING,
                    kernel="k",
                    key="k1",
                    attrs={"reason": "never warmed", "reason_kind": "never_warmed", "fixes": [old_fix]},
                )
            ]
        )
    res = CliRunner().invoke(app, ["why", "--journal-dir", str(journal_dir), "--json"])
    assert res.exit_code == 0, res.output
    (fix,) = json.loads(res.stdout)[0]["fixes"]
    export, replay = re.findall(r"`([^`]+)`", fix)
    manifest = str(journal_dir / "manifest.json")
    assert shlex.split(export)[-2:] == ["-o", manifest], fix
    from jitwatch.backends.explain import local_jitwatch

    assert shlex.split(replay) == [*shlex.split(local_jitwatch()), "warmup", "replay", manifest], fix


def test_describe_key_is_the_backend_s_words_or_none_and_never_raises() -> None:
    """``Diagnoser.describe_key`` (the warning line's specialization) asks the event's backend's
    explainer: Triton's describes its key per argument; a backend without ``describe_key``, one
    whose ``describe_key`` raises or answers a non-string, and a key Triton cannot read (a
    listener-only compile's cache hash) give ``None``, and the line shows the key itself."""
    from jitwatch.backends.triton import explain as triton_explain

    class Raising:
        def explain(self, new, baseline):
            return None

        def describe_key(self, key, attrs):
            raise RuntimeError("boom")

    class Odd(Raising):
        def describe_key(self, key, attrs):
            return 42

    d = Diagnoser({"triton": triton_explain, "bare": lambda new, base: None, "raising": Raising(), "odd": Odd()})
    key = "[('*fp16', 'D'), ('i32', ''), ('constexpr', 1)]{'debug': False, 'num_warps': 8}"
    sig = {"x_ptr": "*fp16", "n": "i32", "m": "i32"}
    assert d.describe_key(_compile(Phase.SERVING, "k", key, signature=sig)) == (
        "x_ptr: *fp16 aligned16, n: i32 other, m: ==1, num_warps=8"
    )
    assert d.describe_key(_compile(Phase.SERVING, "k", "9f8e7d" * 10, source="compilation_listener")) is None
    for backend in ("bare", "raising", "odd", "nosuch"):
        assert d.describe_key(_compile(Phase.SERVING, "k", key, backend)) is None, backend
