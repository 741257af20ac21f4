"""jitwatch.cli: the typer app (`serve`, `status`) against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from typer.testing import CliRunner

from jitwatch import config
from jitwatch.cli import app
from jitwatch.config import Settings
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.sidecar import create_app
from jitwatch.store.journal import Journal

T0 = 1_700_000_000.0
TOKEN = "cli-token"
runner = CliRunner()


def ev(kind: EventKind, ts: float, **fields: object) -> Event:
    return Event(kind=kind, ts=ts, rank=0, pid=100, host="node-a", **fields)  # type: ignore[arg-type]


def fill(directory: Path) -> None:
    with Journal(directory) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn", "tp_rank": 0}),
                ev(EventKind.WARMUP_START, T0 + 1, phase=Phase.WARMUP),
                ev(EventKind.COMPILE, T0 + 2, phase=Phase.WARMUP, kernel="fused_add", key="k16", duration_s=0.3),
                ev(EventKind.WARMUP_COMPLETE, T0 + 3, phase=Phase.SERVING, duration_s=2.0),
                ev(EventKind.COMPILE, T0 + 4, phase=Phase.SERVING, kernel="late_mul", key="k32", duration_s=0.2),
            ]
        )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """The sidecar (token-protected) served by a real uvicorn on a free 127.0.0.1 port, in a thread."""
    fill(tmp_path)
    with serving(tmp_path) as base:
        yield base


@contextlib.contextmanager
def serving(journal_dir: Path) -> Iterator[str]:
    """The sidecar of ``journal_dir`` (token-protected) on a real uvicorn, 127.0.0.1, a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        create_app(journal_dir, token=TOKEN, settings=Settings(journal_dir=journal_dir)),
        host="127.0.0.1",
        port=port,
        log_level="warning",
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield base
    finally:
        srv.should_exit = True
        thread.join(10)


def test_help_lists_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "serve" in result.output and "status" in result.output


def test_status_prints_tables(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    result = runner.invoke(app, ["status", "--url", server, "--token", TOKEN])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "READY" in out and "NOT READY" not in out
    assert "fused_add" in out and "late_mul" in out and "k32" in out
    assert "Recent serving-phase compiles" in out


def test_status_json_and_token_from_env(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITWATCH_TOKEN", TOKEN)
    result = runner.invoke(app, ["status", "--url", server, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["ready"] is True and doc["totals"]["compiles_serving"] == 1


def test_status_url_defaults_to_settings(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    port = server.rsplit(":", 1)[1]
    monkeypatch.setenv("JITWATCH_HOST", "0.0.0.0")  # a bind-all server is queried on 127.0.0.1
    monkeypatch.setenv("JITWATCH_PORT", port)
    monkeypatch.setenv("JITWATCH_TOKEN", TOKEN)
    result = runner.invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output


def test_status_port_reaches_the_sidecar_on_127_0_0_1(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--port P`` is ``http://127.0.0.1:P`` (JITWATCH_HOST unset), over JITWATCH_PORT."""
    port = server.rsplit(":", 1)[1]
    monkeypatch.delenv("JITWATCH_HOST", raising=False)
    with socket.socket() as s:  # a port nothing listens on, as JITWATCH_PORT
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("JITWATCH_PORT", str(s.getsockname()[1]))
    result = runner.invoke(app, ["status", "--port", port, "--token", TOKEN, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["totals"]["compiles_serving"] == 1
    result = runner.invoke(app, ["status", "--token", TOKEN, "--json", "--timeout", "2"])
    assert result.exit_code == 1 and "cannot reach http://127.0.0.1:" in result.output


def test_status_url_and_port_together_are_refused(server: str) -> None:
    port = server.rsplit(":", 1)[1]
    result = runner.invoke(app, ["status", "--url", server, "--port", port, "--token", TOKEN])
    assert result.exit_code == 2, result.output
    out = result.output.strip()
    assert out.startswith("jitwatch: --url and --port are mutually exclusive") and len(out.splitlines()) == 1
    result = runner.invoke(app, ["status", "--port", "0"])
    assert result.exit_code == 2 and "--port" in result.output


def test_status_without_token_fails_clearly(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JITWATCH_TOKEN", raising=False)
    result = runner.invoke(app, ["status", "--url", server])
    assert result.exit_code == 1
    assert "401" in result.output and "--token or set JITWATCH_TOKEN" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    result = runner.invoke(app, ["status", "--url", server, "--token", "wrong"])
    assert result.exit_code == 1 and "wrong token" in result.output
    assert httpx.get(server + "/livez").status_code == 200


@pytest.mark.parametrize("url", ["http://[::1", "ftp://127.0.0.1/", "not a url"])
def test_status_bad_url_is_one_line(url: str) -> None:
    result = runner.invoke(app, ["status", "--url", url, "--timeout", "1"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    out = result.output.strip()
    assert out.startswith("jitwatch: invalid --url") and len(out.splitlines()) == 1


def test_status_url_without_a_scheme_says_which_to_pass() -> None:
    """``--url localhost:9400`` (a host:port, as curl takes it) answered only httpx's "Request URL
    is missing an 'http://' or 'https://' protocol"; the line now gives the URL that works."""
    result = runner.invoke(app, ["status", "--url", "localhost:9400", "--timeout", "1"])
    assert result.exit_code == 2, result.output
    out = result.output.strip()
    assert out.startswith("jitwatch: invalid --url 'localhost:9400'") and len(out.splitlines()) == 1, out
    assert out.endswith("(pass --url http://localhost:9400)"), out


def test_version() -> None:
    from jitwatch import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"jitwatch {__version__}"


def test_help_shows_env_vars_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = " ".join(runner.invoke(app, ["serve", "--help"]).output.split())  # click wraps help at 78
    for text in ("JITWATCH_HOST", "JITWATCH_PORT", "JITWATCH_DIR", "JITWATCH_TOKEN", "JITWATCH_STALE_SECONDS"):
        assert text in out
    assert "JITWATCH_PORT, else 9400" in out and "JITWATCH_HOST, else 127.0.0.1" in out
    assert "~/.local/state/jitwatch" in out
    out = runner.invoke(app, ["demo", "--help"]).output
    assert "demo-<port>" in out
    (exit_line,) = [line for line in out.splitlines() if "--exit " in line]
    assert "<bool>" not in exit_line
    out = " ".join(runner.invoke(app, ["warmup", "replay", "--help"]).output.split())
    assert "CPU count, at most 8" in out and "JITWATCH_MANIFEST_ALLOW" in out
    assert "JITWATCH_REPLAY_PARALLEL" in out and "JITWATCH_TARGET_ARCH" in out


def test_short_keys_end_with_ellipsis() -> None:
    from jitwatch.cli import _short

    key = "[('*fp32', 'D'), ('i32', ''), ('constexpr', 16), ('constexpr', 1024)]"
    assert _short(key, 200) == key
    short = _short(key, 40)
    assert len(short) <= 40 and short.endswith("…") and key.startswith(short[:-1])
    assert short[:-1].endswith("),")  # cut between tuples, not inside ('i32', '')


def test_serve_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = runner.invoke(app, ["serve", "--port", str(port), "--journal-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    out = result.output.strip()
    assert out.startswith(f"jitwatch: cannot bind 127.0.0.1:{port}") and len(out.splitlines()) == 1


def test_demo_bad_environment_and_directories_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fails before the sidecar or the worker starts: exit 2, one line, no traceback."""
    a_file = tmp_path / "file"
    a_file.write_text("x")
    j = str(tmp_path / "j")
    cases: list[tuple[dict[str, str], list[str], str]] = [
        ({"JITWATCH_MODE": "bogus"}, ["demo", "--exit"], "JITWATCH_MODE='bogus'"),
        ({"JITWATCH_DIR": str(a_file)}, ["demo", "--exit"], f"{a_file} is not a directory"),
        ({}, ["demo", "--exit", "--journal-dir", str(a_file)], "is not a directory"),
        ({}, ["demo", "--exit", "--journal-dir", str(a_file / "sub")], "cannot create journal directory"),
        ({}, ["demo", "--exit", "--journal-dir", j, "--output-dir", str(a_file / "out")], "cannot create output"),
    ]
    for env, args, expected in cases:
        result = runner.invoke(app, args, env=env)
        assert result.exit_code == 2, (args, result.output)
        out = result.output.strip()
        assert expected in out and len(out.splitlines()) == 1, (args, out)
        assert "Traceback" not in out and isinstance(result.exception, SystemExit)
    assert not (tmp_path / "j" / "journal.db").exists()  # the output dir was checked first


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("nosuch", "jitwatch: unknown backend nosuch in JITWATCH_BACKENDS; known: cutedsl, deepgemm,"),
        ("Triton", "jitwatch: JITWATCH_BACKENDS='Triton': 'Triton' is not a backend name"),
    ],
)
def test_demo_bad_backends_is_one_line(tmp_path: Path, value: str, expected: str) -> None:
    """A JITWATCH_BACKENDS the worker would refuse (an unknown name) was a worker traceback, and
    `Triton` (which `?backend=` and `--backend` refuse) was lower-cased silently: now both are one
    line and exit 2 before anything starts, as every other bad JITWATCH_* value."""
    from jitwatch.testing import free_port

    args = ["demo", "--exit", "--port", str(free_port()), "--journal-dir", str(tmp_path / "j")]
    res = runner.invoke(app, args, env={"JITWATCH_BACKENDS": value, "JITWATCH_DIR": str(tmp_path)})
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), lines
    assert "Traceback" not in res.output and not (tmp_path / "j").exists()


def test_status_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    result = runner.invoke(app, ["status", "--url", f"http://127.0.0.1:{port}", "--timeout", "2"])
    assert result.exit_code == 1
    assert "cannot reach" in result.output


def test_status_refused_says_how_to_start_the_sidecar(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listening (connection refused): one line, exit 1, ending in the command that starts a
    sidecar there (``jitwatch serve --port P``, with ``--host`` for another address)."""
    from jitwatch.demo.runner import jitwatch_command

    monkeypatch.delenv("JITWATCH_HOST", raising=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    serve = f"{jitwatch_command()} serve --port {port}"
    for args, hint in (
        (["--port", str(port)], f"; is the sidecar running? start it with: {serve}"),
        (["--url", f"http://localhost:{port}/"], f"; is the sidecar running? start it with: {serve}"),
        (
            ["--url", f"http://127.0.0.2:{port}"],
            f" running on 127.0.0.2? start it there with: {serve} --host 127.0.0.2",
        ),
    ):
        res = runner.invoke(app, ["status", *args, "--timeout", "2"])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 1 and len(lines) == 1 and res.stdout == "", res.output
        assert lines[0].startswith("jitwatch: cannot reach http://") and "refused" in lines[0].lower(), lines
        assert lines[0].endswith(hint), lines


def test_bad_environment_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITWATCH_PORT", "not-a-port")
    for command in (["serve"], ["status"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2
        assert "JITWATCH_PORT" in result.output
    monkeypatch.delenv("JITWATCH_PORT")
    monkeypatch.setenv("JITWATCH_HEARTBEAT_SECONDS", "-1")
    # status does not read the heartbeat (a worker setting): not its error (issue 14) ...
    result = runner.invoke(app, ["status", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 1 and "JITWATCH_HEARTBEAT_SECONDS" not in result.output
    # ... the demo's worker does
    result = runner.invoke(app, ["demo", "--exit"])
    assert result.exit_code == 2 and "JITWATCH_HEARTBEAT_SECONDS" in result.output


def test_serve_rejects_bad_port() -> None:
    result = runner.invoke(app, ["serve", "--port", "70000"])
    assert result.exit_code == 2


def _command_paths(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for name, cmd in sorted(group.commands.items()):
        paths.append((*prefix, name))
        if getattr(cmd, "commands", None):  # a group (typer's own click classes, not click's)
            paths.extend(_command_paths(cmd, (*prefix, name)))
    return paths


def test_every_command_has_help() -> None:
    """``--help`` works for every command and subcommand: help text is printed literally, so
    ``redis://HOST:PORT[/DB]`` is not read as rich markup (it crashed three commands)."""
    import typer.main

    paths = _command_paths(typer.main.get_command(app))
    assert ("cache", "check") in paths and ("warmup", "merge") in paths
    for path in paths:
        res = CliRunner().invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output, res.exception)
        assert "Usage" in res.output
        # docstring markup (reST ``literal``) is printed as is: `coverage --help` showed
        # ``do_not_specialize`` and ``--require-complete`` with their double backticks
        assert "``" not in res.output, (path, res.output)
    res = CliRunner().invoke(app, ["cache", "check", "--help"])
    assert "[/DB]" in res.output


@pytest.mark.parametrize("columns", [80, 100])
def test_help_gives_each_option_s_env_var_and_default_whole(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    """At 80 columns rich's option panels cut ``--specialize-num-toke…``, ``[default:
    ($JITWATCH_DIR/demo-<…`` and ``(http://$JITWATCH_HOST:$JITWATC…``, and listed ``--help <bool>``.
    Every command's help now names each option whole, and each ``[default: ...]`` and each
    ``JITWATCH_*`` variable its option's help record has (read from the click command, not
    hard-coded) appears whole, wrapped only at spaces (or after a hyphen); no line is wider than the terminal; a group's
    command list gives each summary whole, not cut with ``...``."""
    import re

    import typer.main

    monkeypatch.setenv("COLUMNS", str(columns))
    root = typer.main.get_command(app)
    checked = 0
    for path in _command_paths(root):
        res = CliRunner().invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        out = res.output
        assert max(len(line) for line in out.splitlines()) <= columns, out
        assert "<bool>" not in out and "…]" not in out and "╭" not in out, out
        flat = re.sub(r"(?<=\w-) (?=\w)", "", " ".join(out.split()))  # click wraps at spaces and after hyphens
        cmd: Any = root
        for name in path:
            cmd = cmd.commands[name]
        ctx = cmd.make_context(path[-1], [], resilient_parsing=True)
        for param in cmd.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None or param.param_type_name != "option":
                continue
            for opt in param.opts:
                assert re.search(rf"(^|[\s,]){re.escape(opt)}([\s,=]|$)", out, re.M), (path, opt, out)
            help_text = record[1]
            for default in re.findall(r"\[default: [^\]]*\]", help_text):
                assert default in flat, (path, default, out)
                checked += 1
            for var in re.findall(r"JITWATCH_[A-Z_]+", help_text):
                assert var in out, (path, var, out)
        if getattr(cmd, "commands", None):
            for name, sub in cmd.commands.items():
                summary = " ".join(sub.get_short_help_str().split())
                assert not summary.endswith("...") and f"{name} {summary}" in flat, (path, name, out)
    assert checked >= 20  # the defaults of serve, status, demo, why, coverage, manifest, warmup, cache


def test_usage_lines_name_arguments_without_braces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's usage line names its arguments upper-case, as click does: typer 0.29 wrote
    ``cache check [OPTIONS] {manifest}``, braces that read as an unfilled format string."""
    import typer.main

    monkeypatch.setenv("COLUMNS", "200")
    usage = {}
    for path in _command_paths(typer.main.get_command(app)):
        res = CliRunner().invoke(app, [*path, "--help"])
        usage[path] = next(line.strip() for line in res.output.splitlines() if "Usage:" in line)
        assert "{" not in usage[path] and "}" not in usage[path], usage[path]
    assert usage[("cache", "check")].endswith("cache check [OPTIONS] MANIFEST")
    assert usage[("warmup", "replay")].endswith("warmup replay [OPTIONS] FILE")
    assert usage[("warmup", "merge")].endswith("warmup merge [OPTIONS] INPUTS...")


@pytest.fixture
def server_on_all_ipv6(tmp_path: Path) -> Iterator[int]:
    """The sidecar served by a real uvicorn bound to ``::`` (as ``JITWATCH_HOST=:: jitwatch serve``
    binds it: asyncio makes that listener IPv6-only), on a free port; yields the port."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    fill(tmp_path)
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
            port = s.getsockname()[1]
    except OSError:
        pytest.skip("no IPv6 loopback")
    srv = uvicorn.Server(
        uvicorn.Config(
            create_app(tmp_path, token=TOKEN, settings=Settings(journal_dir=tmp_path)),
            host="::",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        srv.should_exit = True
        thread.join(10)


@pytest.mark.parametrize("host", ["::", "[::]"])
def test_status_reaches_a_sidecar_bound_to_ipv6_all_interfaces(
    server_on_all_ipv6: int, monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    """``JITWATCH_HOST=::``: ``jitwatch serve`` listens on IPv6 only, and ``jitwatch status`` (with
    ``--port``, or JITWATCH_PORT) asked 127.0.0.1: connection refused. It asks ``[::1]``."""
    port = server_on_all_ipv6
    monkeypatch.setenv("JITWATCH_HOST", host)
    monkeypatch.setenv("JITWATCH_TOKEN", TOKEN)
    monkeypatch.delenv("JITWATCH_PORT", raising=False)
    result = runner.invoke(app, ["status", "--port", str(port), "--json", "--timeout", "5"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["totals"]["compiles_serving"] == 1
    monkeypatch.setenv("JITWATCH_PORT", str(port))
    result = runner.invoke(app, ["status", "--json", "--timeout", "5"])
    assert result.exit_code == 0, result.output


def test_status_does_not_read_the_variables_its_options_replace(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad JITWATCH_PORT stopped ``status --port P`` and ``status --url U`` (exit 2, ``is not an
    integer``) though neither reads it; the same for JITWATCH_TOKEN under ``--token``. Without the
    option the variable is read and refused as before."""
    port = server.rsplit(":", 1)[1]
    monkeypatch.delenv("JITWATCH_HOST", raising=False)
    monkeypatch.setenv("JITWATCH_PORT", "not-a-port")
    for args in (["--port", port], ["--url", server]):
        result = runner.invoke(app, ["status", *args, "--token", TOKEN, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["totals"]["compiles_serving"] == 1
    result = runner.invoke(app, ["status", "--token", TOKEN])
    assert result.exit_code == 2 and "JITWATCH_PORT='not-a-port'" in result.output
    monkeypatch.setenv("JITWATCH_PORT", "99999")
    result = runner.invoke(app, ["status", "--url", server, "--token", TOKEN, "--json"])
    assert result.exit_code == 0, result.output


# ------------------------------------------------------------------------------ journal directory
@pytest.mark.parametrize("command", [["why"], ["coverage"], ["manifest", "export", "-o", "OUT"]])
def test_journal_file_given_as_the_directory_is_one_line(tmp_path: Path, command: list[str]) -> None:
    """``--journal-dir <dir>/journal.db`` (the file, not its directory) or ``JITWATCH_DIR=<file>``:
    one ``jitwatch:`` line naming the directory to pass, exit 2 (a wrong value), nothing written;
    was a NotADirectoryError traceback (``.../journal.db/journal.db``)."""
    fill(tmp_path / "run")
    db = tmp_path / "run" / "journal.db"
    notes = tmp_path / "notes.txt"
    notes.write_text("not a journal")
    args = [str(tmp_path / "m.json") if a == "OUT" else a for a in command]
    cases = [
        ({}, ["--journal-dir", str(db)], f"pass --journal-dir {tmp_path / 'run'} (its directory)"),
        ({"JITWATCH_DIR": str(db)}, [], f"set JITWATCH_DIR={tmp_path / 'run'} (its directory)"),
        ({}, ["--journal-dir", str(db / "sub")], f"{db} is a file"),
        ({}, ["--journal-dir", str(notes)], "is not a directory; pass --journal-dir <the directory that holds"),
    ]
    for env, extra, expected in cases:
        res = runner.invoke(app, [*args, *extra], env=env)
        assert res.exit_code == 2, (extra, res.output, res.exception)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("jitwatch: ") and expected in lines[0], (extra, lines)
        assert "is not a directory" in lines[0] and isinstance(res.exception, SystemExit)
    assert not (tmp_path / "m.json").exists()


def test_expect_journal_file_names_its_directory(tmp_path: Path) -> None:
    fill(tmp_path / "run1")
    fill(tmp_path / "run2")
    res = runner.invoke(
        app,
        [
            "coverage",
            "--journal-dir",
            str(tmp_path / "run2"),
            "--expect-journal",
            str(tmp_path / "run1" / "journal.db"),
        ],
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        f"jitwatch: --expect-journal {tmp_path / 'run1' / 'journal.db'} is not a directory: it is the journal file"
        f" itself; pass --expect-journal {tmp_path / 'run1'} (its directory)"
    )


def _as_unprivileged(args: list[str]) -> list[str]:
    """``python -m jitwatch.cli ARGS``, under root without the capabilities that bypass file
    permissions (``setpriv``): ``chmod 000`` then stops it as it stops any user."""
    import shutil
    import sys

    cmd = [sys.executable, "-m", "jitwatch.cli", *args]
    if os.geteuid() != 0:
        return cmd
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv(1): cannot drop CAP_DAC_OVERRIDE to test permissions")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]


@pytest.mark.parametrize("blocked", ["directory", "file", "parent"])
def test_unreadable_journal_is_one_line(tmp_path: Path, blocked: str) -> None:
    """Permission denied on the journal directory, a directory above it, or ``journal.db``:
    one line, exit 1 (the value is right, access is missing); was a click usage box or an
    ``OperationalError: unable to open database file`` traceback."""
    import subprocess

    jdir = tmp_path / "parent" / "run"
    fill(jdir)
    target = {"directory": jdir, "file": jdir / "journal.db", "parent": jdir.parent}[blocked]
    mode = target.stat().st_mode
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    target.chmod(0)
    try:
        res = subprocess.run(
            _as_unprivileged(["why", "--journal-dir", str(jdir)]), env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        target.chmod(mode)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1, res.stderr
    assert len(lines) == 1 and lines[0].startswith("jitwatch: cannot read") and "permission denied" in lines[0], lines
    assert str(target if blocked == "file" else jdir) in lines[0]


# ------------------------------------------------------------------------------ why filters
def _two_backends(directory: Path) -> None:
    with Journal(directory) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn"}),
                ev(EventKind.WARMUP_COMPLETE, T0 + 1, phase=Phase.SERVING, duration_s=1.0),
                ev(EventKind.COMPILE, T0 + 2, phase=Phase.SERVING, backend="triton", kernel="late_mul", key="k32"),
                ev(EventKind.COMPILE, T0 + 3, phase=Phase.SERVING, backend="torch_compile", kernel="f", key="0/1"),
                ev(EventKind.COMPILE, T0 + 4, phase=Phase.SERVING, backend="triton", kernel="late_add", key="k8"),
            ]
        )


def test_backends_in_journal_header_is_bounded(tmp_path: Path) -> None:
    """The X-Jitwatch-Backends-In-Journal header listed every backend name in the journal,
    unbounded: a journal of many backends (2,000 names of 60 characters here) made a 122 KiB
    response header (a proxy in front, nginx's 4-8 KiB proxy buffer, answers 502 for the whole
    response). Now at most BACKENDS_HEADER_MAX_NAMES names, then how many more; /jit's JSON field
    keeps them all."""
    from jitwatch.sidecar import BACKENDS_HEADER_MAX_NAMES

    names = [f"backend_{i:04d}_" + "x" * 47 for i in range(2000)]
    with Journal(tmp_path) as j:
        j.write(
            [ev(EventKind.WORKER_START, T0, attrs={"mode": "warn"})]
            + [
                ev(EventKind.COMPILE, T0 + 1 + i, phase=Phase.SERVING, backend=name, kernel="k", key=str(i))
                for i, name in enumerate(names)
            ]
        )
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with serving(tmp_path) as base:
        r = httpx.get(f"{base}/jit/events", params={"backend": "trtion"}, headers=headers)
        assert r.status_code == 200 and r.json() == []
        value = r.headers["X-Jitwatch-Backends-In-Journal"]
        shown = sorted(names)[:BACKENDS_HEADER_MAX_NAMES]
        assert value == ", ".join(shown) + f", ... ({2000 - len(shown)} more: /jit backends_in_journal)", value
        assert len(value) < 2048
        doc = httpx.get(f"{base}/jit", params={"backend": "trtion"}, headers=headers).json()
        assert doc["backends_in_journal"] == sorted(names)


def _assert_backend_refused(res: Any, value: str) -> None:
    """A ``--backend`` refused before anything is read or asked: one line on stderr, exit 2, the
    lower-case name suggested for ``Triton``."""
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"jitwatch: --backend {value!r}"), lines
    assert "is not a backend name" in lines[0] and res.stdout == ""
    if value == "Triton":
        assert lines[0].endswith("did you mean --backend triton?")


@pytest.mark.parametrize("value", ["Triton", "tri-ton", "triton\n", "", "x" * 65])
def test_why_backend_is_validated_as_the_sidecar_does(server: str, tmp_path: Path, value: str) -> None:
    """``why --backend`` takes what the sidecar's ``?backend=`` takes (the same pattern; the
    sidecar answers 422 otherwise): anything else is one line, exit 2, before the journal is read
    (it answered "no serving-phase compiles", exit 0, on a journal that has some)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{server}/jit/events", params={"backend": value}, headers=headers).status_code == 422
    assert httpx.get(f"{server}/jit/events", params={"backend": "triton"}, headers=headers).status_code == 200
    res = runner.invoke(app, ["why", "--journal-dir", str(tmp_path), "--backend", value])  # the server's journal
    _assert_backend_refused(res, value)


def test_why_nothing_found_names_every_filter(tmp_path: Path) -> None:
    _two_backends(tmp_path)
    res = runner.invoke(app, ["why", "--journal-dir", str(tmp_path), "--backend", "nonsense"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == (
        "no serving-phase compiles matching --backend nonsense in the journal"
        " (without those filters: 1 of torch_compile, 2 of triton)"
    )
    res = runner.invoke(app, ["why", "--journal-dir", str(tmp_path), "-k", "f", "--backend", "triton", "--rank", "0"])
    assert res.stdout.strip().startswith(
        "no serving-phase compiles matching --kernel f --backend triton --rank 0 in the journal ("
    )
    res = runner.invoke(app, ["why", "--journal-dir", str(tmp_path), "--backend", "torch_compile", "--rank", "0"])
    assert " torch_compile f compiled in serving " in res.stdout and "triton" not in res.stdout


@pytest.mark.parametrize("value", ["Triton", "tri-ton", "triton\n", "", "x" * 65])
def test_status_backend_is_validated_before_the_request(server: str, tmp_path: Path, value: str) -> None:
    """``status --backend`` takes what the sidecar's ``/jit?backend=`` takes, checked in the CLI as
    ``why --backend`` is: one line, exit 2, the lower-case name suggested (it was the sidecar's
    422 turned into a line, exit 1; ``""`` was no filter at all)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{server}/jit", params={"backend": value}, headers=headers).status_code == 422
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed
    for url in (server, closed):  # the sidecar is never asked: the same line, reachable or not
        res = runner.invoke(app, ["status", "--url", url, "--token", TOKEN, "--backend", value])
        _assert_backend_refused(res, value)
    _two_backends(tmp_path)  # the server's journal: a valid name still reaches the sidecar's filter
    res = runner.invoke(app, ["status", "--url", server, "--token", TOKEN, "--backend", "torch_compile", "--json"])
    assert res.exit_code == 0, res.output
    assert [(k["backend"], k["name"]) for k in json.loads(res.stdout)["kernels"]] == [("torch_compile", "f")]


# ------------------------------------------------------------------------- empty journal, demo journal
@pytest.mark.parametrize("state", ["empty", "unrelated"])
def test_an_empty_journal_points_to_the_demo_journal(tmp_path: Path, state: str) -> None:
    """After `jitwatch demo`, its journal is <JITWATCH_DIR>/demo-<port>; an empty journal.db left in
    <JITWATCH_DIR> (by a sidecar, an earlier run) hid it: `why` and `coverage` read the empty one and
    said nothing of the demo's (the pointer came only when journal.db was missing). Now it comes
    whenever the journal read has no events; a journal with events (unrelated) gets none."""
    home = tmp_path / "state"
    demo = home / "demo-9400"
    fill(demo)
    if state == "empty":
        Journal(home).close()
    else:
        fill(home)
    pointer = f"a `jitwatch demo` journal is in {demo}: pass --journal-dir {demo}"
    for command in (["why"], ["coverage"]):
        res = runner.invoke(app, command, env={"JITWATCH_DIR": str(home)})
        assert res.exit_code == 0, (command, res.output)
        assert (pointer in res.stderr) is (state == "empty"), (command, res.stderr)
        if state == "empty":
            (line,) = [ln for ln in res.stderr.splitlines() if pointer in ln]
            assert line.startswith(f"journal {home} has no events"), line


def test_require_complete_on_a_journal_without_compiles_fails(tmp_path: Path) -> None:
    """`coverage --require-complete` passed on a journal with no compile at all (nothing expected,
    nothing missing): a CI gate pointed at the wrong journal passed. Now: one line, exit 1."""
    Journal(tmp_path / "empty").close()
    with Journal(tmp_path / "no-compiles") as j:
        j.write([ev(EventKind.WORKER_START, T0, attrs={"mode": "warn"})])
    reasons = {
        "empty": "no events in the journal at {}",
        "no-compiles": "no compile events in the journal at {} (1 other event)",
    }
    for name, reason in reasons.items():
        res = runner.invoke(app, ["coverage", "--require-complete", "--journal-dir", str(tmp_path / name)])
        assert res.exit_code == 1, (name, res.output)
        lines = res.stderr.strip().splitlines()
        assert lines == [
            f"jitwatch: coverage --require-complete: nothing to check: {reason.format(tmp_path / name)}"
            " (is it the journal the workers write? --journal-dir / JITWATCH_DIR)"
        ], lines
        # without --require-complete it is a report, not a gate: exit 0
        assert runner.invoke(app, ["coverage", "--journal-dir", str(tmp_path / name)]).exit_code == 0
    with Journal(tmp_path / "run") as j:  # a Triton compile in warmup, none in serving: complete
        j.write([ev(EventKind.COMPILE, T0, phase=Phase.WARMUP, backend="triton", kernel="fused_add", key="k16")])
    res = runner.invoke(app, ["coverage", "--require-complete", "--journal-dir", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    # compiles coverage cannot count (no backend, as no worker writes them) are not an all-clear
    fill(tmp_path / "unnamed")
    res = runner.invoke(app, ["coverage", "--require-complete", "--journal-dir", str(tmp_path / "unnamed")])
    assert res.exit_code == 1 and "nothing to check: no compile event in the journal at" in res.stderr, res.output


# ------------------------------------------------------------------ --journal-dir as JITWATCH_DIR
@pytest.mark.parametrize("command", [["why"], ["coverage"], ["manifest", "export", "--allow-empty", "-o", "OUT"]])
def test_journal_dir_option_is_read_as_jitwatch_dir_is(tmp_path: Path, command: list[str]) -> None:
    """`--journal-dir '~/x'` was read literally (a directory named `~` under the working
    directory: "no journal at ~/x/journal.db") while `JITWATCH_DIR='~/x'` is expanded; and `''`
    read the working directory (Path('') is '.'), ' /x ' a path with spaces. Now the option is
    read as the variable: without the whitespace around it, `~` expanded, blank counting as unset
    (then JITWATCH_DIR, else the default, named on stderr)."""
    home = tmp_path / "home"
    fill(home / "x")
    fill(tmp_path / "env")
    args = [str(tmp_path / "m.json") if a == "OUT" else a for a in command]
    for value, env, origin in [
        ("~/x", {}, None),
        (f"  {home / 'x'}\n", {}, None),
        ("", {"JITWATCH_DIR": str(tmp_path / "env")}, f"journal: {tmp_path / 'env'} (from JITWATCH_DIR)"),
        ("  ", {"JITWATCH_DIR": str(tmp_path / "env")}, f"journal: {tmp_path / 'env'} (from JITWATCH_DIR)"),
    ]:
        (tmp_path / "m.json").unlink(missing_ok=True)
        res = runner.invoke(app, [*args, "--journal-dir", value], env={"HOME": str(home), **env})
        assert res.exit_code == 0, (value, res.output)
        assert ("journal: " in res.stderr) is (origin is not None), (value, res.stderr)
        if origin is not None:
            assert origin in res.stderr.splitlines(), (value, res.stderr)
        if command[0] == "why":
            assert "late_mul compiled in serving" in res.stdout, (value, res.stdout)
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize(
    "command",
    [["why"], ["coverage"], ["manifest", "export", "-o", "m.json"], ["serve", "--port", "1"], ["demo", "--exit"]],
)
def test_a_tilde_that_cannot_be_expanded_is_one_line(tmp_path: Path, command: list[str]) -> None:
    """`--journal-dir '~nosuchuser/x'` (or JITWATCH_DIR so) was pathlib's RuntimeError traceback in
    every command; now one line naming the option or variable, exit 2, nothing started."""
    bad = "~jitwatch-no-such-user-17/x"
    for args, env, named in [
        (["--journal-dir", bad], {}, f"--journal-dir={bad!r}"),
        ([], {"JITWATCH_DIR": bad}, f"JITWATCH_DIR={bad!r}"),
    ]:
        res = runner.invoke(app, [*command, *args], env={"XDG_STATE_HOME": str(tmp_path), **env})
        assert res.exit_code == 2, (command, args, res.output)
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"jitwatch: {named}: cannot expand"), lines
    res = runner.invoke(app, ["demo", "--exit", "--output-dir", bad])
    assert res.exit_code == 2 and res.stderr.startswith(f"jitwatch: --output-dir={bad!r}"), res.output


@pytest.mark.parametrize("command", [["why"], ["coverage"], ["manifest", "export", "-o", "m.json"]])
def test_a_bad_jitwatch_dir_is_not_read_when_journal_dir_replaces_it(tmp_path: Path, command: list[str]) -> None:
    """`--journal-dir` replaces JITWATCH_DIR, so a bad JITWATCH_DIR is not read (as `status --port`
    does not read JITWATCH_PORT): it refused the command, exit 2, though the option named a good
    journal. A blank --journal-dir counts as unset: JITWATCH_DIR is read, and refused."""
    fill(tmp_path / "run")
    bad = {"JITWATCH_DIR": "~jitwatch-no-such-user-17/x"}
    out = ["-o", str(tmp_path / "m.json")] if command[0] == "manifest" else []
    args = [*command[:2], *out] if command[0] == "manifest" else command
    res = runner.invoke(app, [*args, "--journal-dir", str(tmp_path / "run")], env=bad)
    assert res.exit_code != 2 and "cannot expand" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    res = runner.invoke(app, [*args, "--journal-dir", " "], env=bad)
    assert res.exit_code == 2 and "JITWATCH_DIR='~jitwatch-no-such-user-17/x': cannot expand" in res.stderr, res.output


def test_serve_reads_no_variable_its_options_replace(tmp_path: Path) -> None:
    """`serve --port/--host/--token/--stale-after/--journal-dir` replace JITWATCH_PORT/HOST/TOKEN/
    STALE_SECONDS/DIR: a bad value of one of those is not read, so it does not refuse the command
    (the refusal it still gives, a file as the journal directory, shows that it got that far);
    without the options the bad variables are refused."""
    fill(tmp_path / "run")
    db = tmp_path / "run" / "journal.db"
    env = {
        "JITWATCH_PORT": "abc",
        "JITWATCH_HOST": " ",
        "JITWATCH_STALE_SECONDS": "-5",
        "JITWATCH_DIR": "~jitwatch-no-such-user-17/x",
    }
    opts = ["--port", "1", "--host", "127.0.0.1", "--stale-after", "5", "--journal-dir", str(db)]
    res = runner.invoke(app, ["serve", *opts], env=env)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"jitwatch: --journal-dir {db} is not a directory: it is the journal file"), res.stderr
    res = runner.invoke(app, ["serve", "--journal-dir", str(db)], env=env)
    assert res.exit_code == 2 and res.stderr.startswith("jitwatch: JITWATCH_"), res.output
    assert "journal file" not in res.stderr, res.stderr  # refused for a variable, before the directory


_BAD_SIDECAR_VALUES = {
    config.JITWATCH_PORT: "abc",
    config.JITWATCH_STALE_SECONDS: "-1",
    config.JITWATCH_READ_TIMEOUT_SECONDS: "abc",
    config.JITWATCH_HEADER_TIMEOUT_SECONDS: "abc",
    config.JITWATCH_SEND_TIMEOUT_SECONDS: "-1",
    config.JITWATCH_MAX_CONNECTIONS: "abc",
}
_FREE_TEXT_SIDECAR_VARIABLES = {config.JITWATCH_HOST, config.JITWATCH_TOKEN, config.JITWATCH_ALLOWED_HOSTS}
"""A bad value of every sidecar-only variable but those taking any text (a host name, a token, a
list of host names)."""


def test_every_sidecar_variable_has_a_bad_value_to_try() -> None:
    """A sidecar-only variable added later gets a bad value in the test below, or is named here."""
    assert set(_BAD_SIDECAR_VALUES) | _FREE_TEXT_SIDECAR_VARIABLES == set(config.SIDECAR_ONLY_VARIABLES)


@pytest.mark.parametrize("name", sorted(_BAD_SIDECAR_VALUES))
def test_serve_refuses_a_bad_value_of_every_sidecar_variable(tmp_path: Path, name: str) -> None:
    """`JITWATCH_READ_TIMEOUT_SECONDS=abc jitwatch serve` (and HEADER/SEND_TIMEOUT, MAX_CONNECTIONS)
    served with the default, without a word: `serve` did not name them among the variables it
    checks. A bad value of each sidecar-only variable is now one line naming it, exit 2, before
    anything is served (the journal directory, a file, is refused only after the variables)."""
    fill(tmp_path / "run")
    db = tmp_path / "run" / "journal.db"
    res = runner.invoke(app, ["serve", "--journal-dir", str(db)], env={name: _BAD_SIDECAR_VALUES[name]})
    assert res.exit_code == 2, (name, res.output)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"jitwatch: {name}="), lines


def test_status_with_port_variable_0_says_it_cannot_know_the_port() -> None:
    """`JITWATCH_PORT=0 jitwatch status` asked http://127.0.0.1:0 and hinted `jitwatch serve
    --port 80`; port 0 is serve's "a free port": status now says it cannot know which (exit 2),
    and `--port` replaces the variable as before."""
    res = runner.invoke(app, ["status"], env={"JITWATCH_PORT": "0"})
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        "jitwatch: JITWATCH_PORT=0 makes `jitwatch serve` pick a free port, which status cannot know:"
        " pass --port PORT (the one serve printed) or --url"
    ), res.stderr
    res = runner.invoke(app, ["status", "--port", "1", "--timeout", "2"], env={"JITWATCH_PORT": "0"})
    assert res.exit_code == 1 and "cannot reach http://127.0.0.1:1" in res.stderr, res.output


def test_serve_refuses_a_file_as_the_journal_directory(tmp_path: Path) -> None:
    """`serve --journal-dir <a file>` started a sidecar whose /readyz then answered 503 forever; now
    it is refused as `why` and `coverage` refuse it (the same check): one line, exit 2, nothing
    served. Run as a process with a deadline: the old behaviour served until killed."""
    import subprocess
    import sys

    from jitwatch.testing import free_port

    fill(tmp_path / "run")
    db = tmp_path / "run" / "journal.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    cases = [
        ({}, ["--journal-dir", str(db)], f"jitwatch: --journal-dir {db} is not a directory: it is the journal file"),
        ({"JITWATCH_DIR": str(db)}, [], f"jitwatch: JITWATCH_DIR={db} is not a directory: it is the journal file"),
    ]
    for extra_env, extra, expected in cases:
        cmd = [sys.executable, "-m", "jitwatch.cli", "serve", "--port", str(free_port()), *extra]
        try:
            res = subprocess.run(cmd, env={**env, **extra_env}, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve {extra} {extra_env} served instead of refusing")
        assert res.returncode == 2, (extra, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), lines


def test_status_totals_count_in_words(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One kernel and one compile are ``1 kernel, 1 compile`` (it printed ``1 kernels, 1 compiles``)."""
    monkeypatch.setenv("COLUMNS", "200")
    _two_backends(tmp_path)  # the server's journal
    res = runner.invoke(app, ["status", "--url", server, "--token", TOKEN, "--backend", "torch_compile"])
    assert res.exit_code == 0, res.output
    totals = [line for line in res.stdout.splitlines() if line.startswith("totals: ")]
    assert totals and ", 1 kernel, 1 compile (" in totals[0], res.stdout
    assert totals[0].endswith(", 0 hook errors, 0 dropped events")
    res = runner.invoke(app, ["status", "--url", server, "--token", TOKEN])
    assert ", 5 kernels, 5 compiles (" in res.stdout, res.stdout


def test_demo_does_not_read_the_variables_its_options_replace(tmp_path: Path) -> None:
    """``JITWATCH_PORT=abc jitwatch demo --port P`` was refused (``JITWATCH_PORT='abc' is not an
    integer``) though --port replaces the variable; the same rule as ``status --port``. Here P is
    busy, so the demo stops at its port check, after every variable check: the line names the port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        args = ["demo", "--exit", "--port", str(port), "--journal-dir", str(tmp_path / "j")]
        res = runner.invoke(app, args, env={"JITWATCH_PORT": "abc", "JITWATCH_HOST": "127.0.0.1"})
        assert res.exit_code == 2, res.output
        assert "JITWATCH_PORT" not in res.output and f"cannot bind 127.0.0.1:{port}" in res.output, res.output
    res = runner.invoke(app, ["demo", "--exit", "--journal-dir", str(tmp_path / "j")], env={"JITWATCH_PORT": "abc"})
    assert res.exit_code == 2 and "JITWATCH_PORT='abc' is not an integer" in res.output, res.output
    res = runner.invoke(app, args, env={"JITWATCH_PORT": "abc", "JITWATCH_MODE": "loud"})  # the others still are
    assert res.exit_code == 2 and "JITWATCH_MODE='loud'" in res.output, res.output


# ------------------------------------------------------------------------------ backend names
def test_unknown_backend_filter_names_the_backends_in_the_journal(server: str, tmp_path: Path) -> None:
    """``?backend=trtion`` (a valid name, no such backend) answered an empty document and ``[]``
    with no hint. /jit says which backends the journal has (``backends_in_journal``), /jit/events
    in a header, ``jitwatch status --backend trtion`` on stderr (stdout as it was); a backend the
    journal has gives no hint."""
    _two_backends(tmp_path)  # the server's journal: triton and torch_compile compiles
    headers = {"Authorization": f"Bearer {TOKEN}"}
    doc = httpx.get(f"{server}/jit", params={"backend": "trtion"}, headers=headers).json()
    assert doc["kernels"] == [] and doc["backends_in_journal"] == ["torch_compile", "triton"]
    assert (
        httpx.get(f"{server}/jit", params={"backend": "triton"}, headers=headers).json()["backends_in_journal"] is None
    )
    assert httpx.get(f"{server}/jit", headers=headers).json()["backends_in_journal"] is None
    r = httpx.get(f"{server}/jit/events", params={"backend": "trtion"}, headers=headers)
    assert r.status_code == 200 and r.json() == []
    assert r.headers["X-Jitwatch-Backends-In-Journal"] == "torch_compile, triton"
    r = httpx.get(f"{server}/jit/events", params={"backend": "triton"}, headers=headers)
    assert len(r.json()) == 2 and "X-Jitwatch-Backends-In-Journal" not in r.headers
    r = httpx.get(f"{server}/jit/events", params={"backend": "triton", "kernel": "nope"}, headers=headers)
    assert r.json() == [] and "X-Jitwatch-Backends-In-Journal" not in r.headers  # the backend exists

    res = runner.invoke(app, ["status", "--url", server, "--token", TOKEN, "--backend", "trtion", "--json"])
    assert res.exit_code == 0, res.output
    assert res.stderr.strip().splitlines() == [
        "jitwatch: no kernels or compiles of backend 'trtion' in the journal (it has: torch_compile, triton)"
    ]
    assert json.loads(res.stdout)["kernels"] == []
    res = runner.invoke(app, ["status", "--url", server, "--token", TOKEN, "--backend", "triton", "--json"])
    assert res.exit_code == 0 and res.stderr == "", res.output


@pytest.mark.parametrize("path", ["/jit", "/jit/events"])
def test_bad_backend_filter_422_is_a_sentence(server: str, path: str) -> None:
    """``?backend=Triton``: still 422, in FastAPI's shape, but the message is a sentence that
    suggests ``triton`` instead of pydantic's ``String should match pattern '^[a-z][a-z0-9_]*$'``."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.get(server + path, params={"backend": "Triton"}, headers=headers)
    assert r.status_code == 422 and "pattern" not in r.text and "[a-z" not in r.text, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["query", "backend"] and error["input"] == "Triton"
    assert error["msg"] == (
        "?backend='Triton' is not a backend name: lower-case letters, digits and _, starting with a letter,"
        " at most 64 characters (e.g. triton, torch_compile); did you mean ?backend=triton?"
    )
    r = httpx.get(server + path, params={"backend": "x" * 65}, headers=headers)
    assert r.status_code == 422 and r.json()["detail"][0]["msg"].startswith(f"?backend='{'x' * 65}' is not a backend")
    assert "did you mean" not in r.text
    schema = httpx.get(f"{server}/openapi.json", headers=headers).json()
    (param,) = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "backend"]
    assert param["in"] == "query" and "^[a-z][a-z0-9_]*$" in json.dumps(param["schema"])  # the rule, in the schema


# ------------------------------------------------------------------------------ status header
def test_status_header_names_readiness_mode_and_the_journal_read(server: str, tmp_path: Path) -> None:
    """The header was one run-on line (``jitwatch: READY   mode=warn``) that did not say which
    journal the sidecar reads: now a line for readiness and mode, one for the journal directory
    (/jit's ``journal_dir``) and the sidecar that reads it."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{server}/jit", headers=headers).json()["journal_dir"] == str(tmp_path)
    res = runner.invoke(app, ["status", "--url", server + "/", "--token", TOKEN], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[:2] == [
        "status: READY; mode warn",
        f"journal: {tmp_path}, read by the sidecar at {server}",
    ]


def test_status_header_of_a_missing_journal_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sidecar whose journal is under the home directory names it as ``~/...`` (/jit shows no home
    path: docs/security.md); a journal not written yet is NOT READY, and the journal line says so."""
    home = tmp_path / "home"
    (home / "state").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    from jitwatch import redact as redact_mod

    caches = (redact_mod._patterns, redact_mod._user_pattern)  # keyed on HOME when first used
    for cache in caches:
        cache.cache_clear()
    try:
        with serving(home / "state" / "jitwatch") as base:
            doc = httpx.get(f"{base}/jit", headers={"Authorization": f"Bearer {TOKEN}"}).json()
            res = runner.invoke(app, ["status", "--url", base, "--token", TOKEN], env={"COLUMNS": "200"})
    finally:
        for cache in caches:
            cache.cache_clear()
    assert doc["journal_dir"] == "~/state/jitwatch" and doc["journal_up"] is False
    assert res.exit_code == 3, res.output  # NOT READY
    first, second = res.stdout.splitlines()[:2]
    assert first == f"status: NOT READY: {doc['not_ready_reason']}; mode - (no worker)"
    assert second == f"journal: ~/state/jitwatch, read by the sidecar at {base}; unavailable: {doc['journal_error']}"
    assert str(home) not in res.stdout


# ------------------------------------------------------------------------------ status exit codes
def test_status_not_ready_exits_3(tmp_path: Path) -> None:
    """A sidecar that answers NOT READY (no worker has registered) made ``jitwatch status`` exit 0:
    a script could not use it as a check. It exits 3 (LSB "not running"), text and --json alike,
    the output as before; READY exits 0 (test_status_prints_tables), unreachable 1, usage 2."""
    with Journal(tmp_path / "j") as j:  # a journal, but no worker in it
        j.write([ev(EventKind.COMPILE, T0, phase=Phase.WARMUP, kernel="k", key="k16", duration_s=0.1)])
    with serving(tmp_path / "j") as base:
        doc = httpx.get(f"{base}/jit", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        text = runner.invoke(app, ["status", "--url", base, "--token", TOKEN], env={"COLUMNS": "200"})
        as_json = runner.invoke(app, ["status", "--url", base, "--token", TOKEN, "--json"])
    assert doc["ready"] is False and doc["not_ready_reason"] == "no worker has registered", doc
    assert text.exit_code == 3, text.output
    assert text.stdout.splitlines()[0] == "status: NOT READY: no worker has registered; mode - (no worker)"
    assert text.stderr == ""
    assert as_json.exit_code == 3 and json.loads(as_json.stdout)["ready"] is False, as_json.output


def test_status_times_carry_the_date_and_utc(tmp_path: Path) -> None:
    """`status` showed HH:MM:SS in local time: its tables now show ``YYYY-MM-DD HH:MM:SS UTC``, the
    rule `why` follows (--json stays /jit's Unix seconds)."""
    fill(tmp_path)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(T0 + 4))
    local = time.strftime("%H:%M:%S", time.localtime(T0 + 4))
    with serving(tmp_path) as base:
        res = runner.invoke(
            app, ["status", "--url", base, "--token", TOKEN], env={"COLUMNS": "250", "TZ": "America/New_York"}
        )
    assert res.exit_code == 0, res.output
    rows = [ln for ln in res.stdout.splitlines() if "late_mul" in ln]
    assert len(rows) == 2 and all(stamp in ln for ln in rows), res.stdout  # Kernels, recent compiles
    assert local not in res.stdout.replace(stamp, "")


# ------------------------------------------------------------------------------ a demo elsewhere
def test_status_refused_names_a_demo_serving_on_another_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`jitwatch status` (port 9400) while `jitwatch demo --port P` serves: the refused line said only
    how to start a sidecar. It also names the demo when ``<journal dir>/demo-P/demo.lock`` shows a
    live one: its pid alive and P answering /livez; a lock whose pid is gone (the demo ended; the
    file stays), or whose port answers nothing, is not named."""
    import subprocess
    import sys

    from jitwatch.demo.runner import jitwatch_command, journal_lock

    monkeypatch.delenv("JITWATCH_HOST", raising=False)
    monkeypatch.setenv("JITWATCH_DIR", str(tmp_path / "state"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        refused = s.getsockname()[1]  # closed again: nothing listens there
    fill(tmp_path / "demo-journal")
    with serving(tmp_path / "demo-journal") as base:
        port = int(base.rsplit(":", 1)[1])
        demo_dir = tmp_path / "state" / f"demo-{port}"
        demo_dir.mkdir(parents=True)
        hint = f"; a jitwatch demo is serving on port {port}: {jitwatch_command()} status --port {port}"
        with journal_lock(demo_dir):  # what a running demo holds: the lock, its pid written in it
            res = runner.invoke(app, ["status", "--port", str(refused), "--timeout", "2"])
            lines = res.stderr.strip().splitlines()
            assert res.exit_code == 1 and len(lines) == 1 and lines[0].endswith(hint), res.output
            assert "is the sidecar running? start it with:" in lines[0]
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        (demo_dir / "demo.lock").write_text(gone.stdout)  # a demo that ended: its pid is no process now
        res = runner.invoke(app, ["status", "--port", str(refused), "--timeout", "2"])
        assert res.exit_code == 1 and "jitwatch demo" not in res.stderr, res.output
    with journal_lock(demo_dir):  # a live pid, but nothing answers on the port any more
        res = runner.invoke(app, ["status", "--port", str(refused), "--timeout", "2"])
    assert res.exit_code == 1 and "jitwatch demo" not in res.stderr, res.output


def test_status_kernels_compile_seconds_header_says_it_sums_every_phase(tmp_path: Path) -> None:
    """The Kernels table's ``compile s`` summed startup, warmup and serving compiles without saying
    so, beside per-phase count columns: its header says it (``compile s (all phases)``)."""
    with Journal(tmp_path) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn"}),
                ev(EventKind.COMPILE, T0 + 1, phase=Phase.STARTUP, kernel="mixed", key="k1", duration_s=0.125),
                ev(EventKind.WARMUP_START, T0 + 2, phase=Phase.WARMUP),
                ev(EventKind.COMPILE, T0 + 3, phase=Phase.WARMUP, kernel="mixed", key="k2", duration_s=0.25),
                ev(EventKind.WARMUP_COMPLETE, T0 + 4, phase=Phase.SERVING, duration_s=2.0),
                ev(EventKind.COMPILE, T0 + 5, phase=Phase.SERVING, kernel="mixed", key="k3", duration_s=0.5),
            ]
        )
    with serving(tmp_path) as base:
        res = runner.invoke(app, ["status", "--url", base, "--token", TOKEN], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    header = next(ln for ln in lines if "┃ kernel" in ln and "┃ warmup" in ln)
    cells = [c.strip() for c in header.split("┃")[1:-1]]
    assert "compile s (all phases)" in cells, header
    row = next(ln for ln in lines[lines.index(header) :] if "│ mixed" in ln)  # the Kernels table's
    values = [c.strip() for c in row.split("│")[1:-1]]
    assert values[cells.index("compile s (all phases)")] == "0.875", row  # 0.125 + 0.25 + 0.5


def test_demo_journal_pointer_does_not_drive_the_terminal(tmp_path: Path) -> None:
    """The pointer to a ``demo-*`` journal names a directory found on disk; in the `no journal at`
    error and in `coverage --require-complete`'s 'nothing to check' it was printed raw (only the
    'has no events' line went through plain()): a directory named with an ESC sequence drove the
    terminal. Now control characters are shown as \\xNN there too."""
    odd = tmp_path / "demo-\x1b]0;owned\x07\x1b[2J"
    fill(odd)
    res = runner.invoke(app, ["why", "--journal-dir", str(tmp_path)])
    assert res.exit_code == 1 and "a `jitwatch demo` journal is in" in res.stderr, res.output
    assert "\x1b" not in res.stderr and "\\x1b]0;owned" in res.stderr, res.stderr
    Journal(tmp_path).close()  # an empty journal beside it
    res = runner.invoke(app, ["coverage", "--require-complete", "--journal-dir", str(tmp_path)])
    assert res.exit_code == 1 and "nothing to check" in res.stderr, res.output
    assert "\x1b" not in res.stderr and "\\x1b]0;owned" in res.stderr, res.stderr


@pytest.mark.parametrize("command", [["why"], ["coverage"], ["serve", "--port", "1"], ["demo", "--exit"]])
def test_a_journal_dir_the_system_cannot_look_up_is_one_line(tmp_path: Path, command: list[str]) -> None:
    """A --journal-dir whose name is too long (a 300-character component: ENAMETOOLONG) or a
    symlink loop (ELOOP) was an OSError traceback in why/coverage/serve (``stat`` caught only
    not-found, not-a-directory and permission errors) and in demo (``Path.exists`` raises
    ENAMETOOLONG). Now one line naming the directory and the system's reason, exit 2."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for bad, reason in [(tmp_path / ("a" * 300), "File name too long"), (loop, "Too many levels of symbolic links")]:
        res = runner.invoke(app, [*command, "--journal-dir", str(bad)], env={"JITWATCH_DIR": str(tmp_path)})
        assert res.exit_code == 2, (command, reason, res.output)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(("jitwatch: ", "jitwatch demo: ")) and reason in lines[0], lines


def test_status_refuses_a_url_with_a_password_and_never_prints_it(server: str, tmp_path: Path) -> None:
    """`--url http://user:password@host:port --token T` against a sidecar that wants T answered 401
    "wrong token": httpx turns a URL's userinfo into HTTP Basic auth, which replaces the
    `Authorization: Bearer T` header, and the sidecar knows bearer tokens only. A URL with a
    userinfo (a user alone too: httpx sends it as Basic) is now refused before any request: one
    line, exit 2, naming --token / JITWATCH_TOKEN and the URL to pass instead, the password never
    printed (it was printed by the status header and error lines before, into CI logs)."""
    secret = "s3cret-pw"
    host_port = server.removeprefix("http://")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    for userinfo, where, token in [
        (f"alice:{secret}", host_port, ["--token", TOKEN]),
        (f"alice:{secret}", host_port, []),
        ("alice", host_port, ["--token", TOKEN]),
        (f":{secret}", closed, []),  # refused before connecting: no "cannot reach"
    ]:
        res = runner.invoke(app, ["status", "--url", f"http://{userinfo}@{where}/", *token])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and res.stdout == "", (userinfo, res.output)
        assert lines[0].startswith(f"jitwatch: --url http://***@{where} has a user name or password"), lines
        assert f"pass --url http://{where} and the token as --token or JITWATCH_TOKEN" in lines[0], lines
        assert secret not in res.output and "alice" not in res.output, res.output
    # the same sidecar and token without the userinfo: READY (the refusal is the userinfo's alone)
    res = runner.invoke(app, ["status", "--url", server, "--token", TOKEN, "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["ready"] is True, res.output


def test_status_refuses_a_jitwatch_host_with_a_userinfo(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``JITWATCH_HOST=alice@127.0.0.1`` made ``jitwatch status``'s default URL
    ``http://alice@127.0.0.1:PORT``, sent as Basic auth instead of the token (401): the same
    refusal, naming the variable (exit 2, one line)."""
    monkeypatch.setenv("JITWATCH_HOST", "alice@127.0.0.1")
    monkeypatch.setenv("JITWATCH_PORT", server.rsplit(":", 1)[1])
    monkeypatch.setenv("JITWATCH_TOKEN", TOKEN)
    res = runner.invoke(app, ["status", "--json"])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith(
        "jitwatch: JITWATCH_HOST has a user name or password (it makes the URL http://***@127.0.0.1:"
    ), lines
    assert "alice" not in res.output, res.output


def test_status_never_prints_a_password_holding_an_at_sign_or_a_slash(tmp_path: Path) -> None:
    """A password with an unencoded ``@`` (``http://alice:p@ss@HOST``: the userinfo ends at the
    authority's *last* ``@``, as httpx reads it) was shown as ``http://***@ss@HOST``, and the URL
    to pass instead was ``http://ss@HOST`` (a userinfo again: refused again); one with a ``/``, or a
    URL without ``http://``, is not a URL httpx can read and was printed whole in ``invalid
    --url '…'`` (with httpx's ``Invalid port: 'pa'``, the password's first part). No part of the
    password is printed, one line, exit 2, no request (the port is closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        where = f"127.0.0.1:{s.getsockname()[1]}"
    for url, secret in [
        (f"http://alice:p@ss-w0rd@{where}", "ss-w0rd"),
        (f"http://alice:x@y@ss-w0rd@{where}/", "ss-w0rd"),
        (f"http://alice:pa55/w0rd@{where}", "pa55"),
        (f"alice:s3cret-pw@{where}", "s3cret-pw"),
        (f"http://alice:s3cret-pw@[::1@{where}", "s3cret-pw"),
        (f"alice:pa55 w0rd@{where}", "pa55"),
    ]:
        res = runner.invoke(app, ["status", "--url", url, "--timeout", "1"])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and res.stdout == "", (url, res.output)
        assert secret not in res.output and "w0rd" not in res.output, (url, res.output)
        if url.startswith("http://alice:p") and "/w0rd" not in url:  # a URL httpx reads: the one to pass
            assert f"pass --url http://{where} and the token" in lines[0], lines


@pytest.mark.parametrize("userinfo", ["alice:s3cret-pw", "alice:p@ss-w0rd", "alice"])
def test_status_names_the_url_to_pass_for_a_jitwatch_host_with_a_password(
    server: str, monkeypatch: pytest.MonkeyPatch, userinfo: str
) -> None:
    """``JITWATCH_HOST=alice:pw@127.0.0.1``: the ``:`` made the host look like an IPv6 address, so
    the URL was ``http://[alice:pw@127.0.0.1]:PORT`` and the refusal named ``http://***@127.0.0.1]:PORT``
    and told to pass ``--url http://127.0.0.1]:PORT``, which is no URL. The host is the part after
    the userinfo (its last ``@``): the URL to pass is ``http://127.0.0.1:PORT``, which answers."""
    port = server.rsplit(":", 1)[1]
    monkeypatch.setenv("JITWATCH_HOST", f"{userinfo}@127.0.0.1")
    monkeypatch.setenv("JITWATCH_PORT", port)
    monkeypatch.setenv("JITWATCH_TOKEN", TOKEN)
    res = runner.invoke(app, ["status", "--json"])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith(
        f"jitwatch: JITWATCH_HOST has a user name or password (it makes the URL http://***@127.0.0.1:{port}),"
    ), lines
    assert f"pass --url http://127.0.0.1:{port} and the token as --token or JITWATCH_TOKEN" in lines[0], lines
    assert "alice" not in res.output and "s3cret" not in res.output and "w0rd" not in res.output, res.output
    (bare,) = [w for w in lines[0].split() if w.startswith("http://") and "***" not in w]
    monkeypatch.delenv("JITWATCH_HOST")
    monkeypatch.delenv("JITWATCH_PORT")
    res = runner.invoke(app, ["status", "--url", bare, "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["ready"] is True, (bare, res.output)


@pytest.mark.parametrize(
    ("host", "secret", "expected"),
    [
        (
            "alice:pa55/w0rd@127.0.0.1",
            "pa55",
            "jitwatch: JITWATCH_HOST does not make a valid URL ('http://***@127.0.0.1:9', shown without the part"
            " up to its last @, which may hold a password): the sidecar takes no user:password: set JITWATCH_HOST"
            " to the host alone, or pass --url http://HOST:PORT, and the token as --token or JITWATCH_TOKEN",
        ),
        (
            "alice:pa55 w0rd@h:1x",
            "pa55",
            "jitwatch: JITWATCH_HOST does not make a valid URL ('http://***@[h:1x]:9', shown without the part",
        ),
        ("h:1x", None, "jitwatch: JITWATCH_HOST='h:1x' does not make a valid URL ('http://[h:1x]:9'): Invalid IPv6"),
    ],
)
def test_status_names_jitwatch_host_when_the_url_it_makes_is_invalid(
    host: str, secret: str | None, expected: str
) -> None:
    """A default URL httpx cannot read, made from ``JITWATCH_HOST`` (no --url given), was refused
    as ``invalid --url '…'``: the line names JITWATCH_HOST (its value when no password can be in
    it), one line, exit 2, no part of a password."""
    res = runner.invoke(app, ["status", "--timeout", "1"], env={"JITWATCH_HOST": host, "JITWATCH_PORT": "9"})
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and res.stdout == "", (host, res.output)
    assert lines[0].startswith(expected) and "--url '" not in lines[0] and "invalid --url" not in lines[0], lines
    assert secret is None or (secret not in res.output and "w0rd" not in res.output and "alice" not in res.output)


def test_status_with_url_and_port_never_prints_a_password_of_an_unreadable_url() -> None:
    """``--url`` with ``--port`` is refused naming the ``--url`` to pass alone: a URL httpx cannot
    read (a password with an unencoded ``/``, no ``http://``) was printed whole there, password
    included. It is shown as ``invalid --url`` shows it: without everything up to its last ``@``."""
    for url, secret in [
        ("http://alice:pa55/w0rd@127.0.0.1:9", "pa55"),
        ("alice:s3cret-pw@127.0.0.1:9", "s3cret-pw"),
        ("http://alice:p@ss-w0rd@127.0.0.1:9", "ss-w0rd"),
        ("alice:pa55 w0rd@127.0.0.1:9", "pa55"),  # a space in it: still up to the last @
        ("http://alice:pa55/s w0rd@127.0.0.1:9", "pa55"),
    ]:
        res = runner.invoke(app, ["status", "--url", url, "--port", "5"])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1, (url, res.output)
        assert lines[0].startswith("jitwatch: --url and --port are mutually exclusive: pass --url "), lines
        assert secret not in res.output and "w0rd" not in res.output and "alice" not in res.output, res.output


# ------------------------------------------------------------------------------ undecodable directory names
def _cli(args: list[str]) -> Any:
    """``python -m jitwatch.cli ARGS`` writing strict UTF-8, as in a UTF-8 locale such as
    en_US.UTF-8 (C.UTF-8 would let Python write the raw undecodable bytes)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[1]), PYTHONIOENCODING="utf-8:strict", COLUMNS="200")
    env.pop("PYTHONUTF8", None)
    return subprocess.run([sys.executable, "-m", "jitwatch.cli", *args], env=env, capture_output=True, timeout=120)


def test_a_journal_dir_whose_name_is_not_utf8_is_read_and_shown_escaped(tmp_path: Path) -> None:
    """A journal directory named with a byte that is not UTF-8 (``jw-\\xff``, as ``mkdir $'jw-\\xff'``
    makes): the journal is written there, but why / why --json / coverage / coverage --json /
    manifest export were a UnicodeEncodeError traceback (the read-only SQLite URI, then every
    line naming the path). Now each reads it, its text shows the byte as ``\\xff``, and the fix's
    record command quotes the directory as ``$'...\\xff'``, which bash reads back as the same bytes."""
    import subprocess

    jdir = tmp_path / os.fsdecode(b"jw-\xff")
    fill(jdir)
    shown = str(tmp_path) + "/jw-\\xff"
    out = jdir / "manifest.json"
    for args in (
        ["why"],
        ["why", "--json"],
        ["coverage"],
        ["coverage", "--json"],
        ["manifest", "export", "-o", str(out)],
    ):
        res = _cli([*args, "--journal-dir", str(jdir)])
        stdout, stderr = res.stdout.decode(), res.stderr.decode()  # strict: the output is UTF-8
        assert "Traceback" not in stderr and "UnicodeEncodeError" not in stderr, (args, stderr)
        assert res.returncode in (0, 1), (args, res.returncode, stderr)
        if "--json" in args:  # JSON escapes the name's byte (\udcff): loads gives the path back
            data = json.loads(stdout)
            fixes = [f for c in data for f in c["fixes"]] if args[0] == "why" else [f"--journal-dir $'{shown}'"]
            assert any(f"--journal-dir $'{shown}'" in f for f in fixes), stdout
            continue
        if args == ["why"]:  # the fix's manifest export names the journal read
            assert "late_mul" in stdout and f"--journal-dir $'{shown}'" in stdout, stdout
            word = stdout.split("--journal-dir ", 1)[1].split(" ", 1)[0]  # as pasted into bash: the same bytes
            echoed = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True).stdout
            assert echoed == os.fsencode(jdir), (word, echoed)
        elif args == ["coverage"]:  # fill()'s compiles name no backend: nothing coverage can count
            assert res.returncode == 0 and f"nothing to check: no compile event in the journal at {shown} " in stdout
            assert f"JITWATCH_DIR=$'{shown}'," in stdout, stdout
        else:  # no Triton kernel with specialization data to write: one line naming the file
            assert res.returncode == 1 and f"nothing to write to {shown}/manifest.json" in stderr, stderr


def test_the_sidecar_of_a_journal_dir_whose_name_is_not_utf8_answers(tmp_path: Path) -> None:
    """The sidecar (serve, demo) of such a directory: /readyz and /jit were a 500 (UnicodeEncodeError
    opening the journal, then in the JSON); now they answer, /jit's journal_dir reads back as the
    path, and ``jitwatch status`` prints the byte as ``\\xff``."""
    jdir = tmp_path / os.fsdecode(b"jw-\xff")
    fill(jdir)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with serving(jdir) as base:
        assert httpx.get(f"{base}/readyz").status_code in (200, 503)
        jit = httpx.get(f"{base}/jit", headers=headers)
        assert jit.status_code == 200, jit.text
        assert jit.json()["journal_dir"] == str(jdir)  # the JSON escape \udcff
        res = runner.invoke(app, ["status", "--url", base, "--token", TOKEN], env={"COLUMNS": "200"})
        assert res.exit_code in (0, 3), res.output
        assert f"journal: {tmp_path}/jw-\\xff, read by" in res.stdout


def test_a_journal_dir_named_with_control_characters_is_quoted_so_the_shown_command_runs(tmp_path: Path) -> None:
    """A journal directory whose name holds terminal control characters (ESC, a newline) and shell
    syntax: the CLI shows each control character as ``\\xNN`` (journal text never drives the
    terminal), so a ``'...'``-quoted word printed with it named another directory once pasted
    (``JITWATCH_DIR='/tmp/jw\\x1b[31m\\x0ax'``: a literal backslash, x, 1, b). The word is bash's
    ``$'...'`` instead (as for a byte that is not UTF-8): printed unchanged, and bash reads back
    the directory's exact bytes and runs nothing."""
    import subprocess

    jdir = tmp_path / "jw\x1b[31mRED\nx $(touch PWNED)'"
    Journal(jdir).close()  # an empty journal: coverage's nothing-to-check lines name JITWATCH_DIR
    res = _cli(["coverage", "--journal-dir", str(jdir)])
    stdout = res.stdout.decode()
    assert res.returncode == 0 and "\x1b" not in stdout, (res.returncode, stdout, res.stderr)
    word = stdout.split("JITWATCH_DIR=", 1)[1].split(", or read", 1)[0]
    assert word.startswith("$'") and word.endswith("'"), word
    echoed = subprocess.run(["bash", "-c", f"printf %s {word}"], cwd=tmp_path, capture_output=True, check=True)
    assert echoed.stdout == os.fsencode(jdir) and not (tmp_path / "PWNED").exists(), (word, echoed)


@pytest.mark.parametrize("command", [["why"], ["manifest", "export", "-o", "m.json"]])
def test_a_rank_sqlite_cannot_hold_is_a_usage_error(tmp_path: Path, command: list[str]) -> None:
    """``--rank 99999999999999999999`` raised OverflowError ('Python int too large to convert to
    SQLite INTEGER') as a traceback from why and manifest export; --rank takes 0..MAX_RANK, as the
    sidecar's ?rank= does: a usage error naming the bound, exit 2."""
    from jitwatch.store.journal import Journal

    with Journal(tmp_path / "j"):
        pass
    res = CliRunner().invoke(
        app, [*command, "--journal-dir", str(tmp_path / "j"), "--rank", "99999999999999999999"], env={"COLUMNS": "200"}
    )
    assert res.exit_code == 2 and not isinstance(res.exception, OverflowError), (res.exception, res.output)
    assert "Invalid value for '--rank'" in res.output and "2147483647" in res.output, res.output
    assert "Traceback" not in res.output and "OverflowError" not in res.output, res.output


@contextlib.contextmanager
def hostile_peer(answer: str) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 that is no sidecar: ``deep`` answers JSON nested 200,000
    deep, ``drip`` one byte every 0.2 s (for 60 s), ``endless`` a body without end."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    stop = threading.Event()

    class Peer(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if answer == "deep":
                body = b"[" * 200_000 + b"]" * 200_000
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.end_headers()
            with contextlib.suppress(OSError):
                for _ in range(300):
                    if stop.is_set():
                        return
                    if answer == "drip":
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.2)
                    else:
                        self.wfile.write(b"[" + b" " * (1 << 20))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Peer)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ("deep", "did not answer a jitwatch status (RecursionError)"),
        ("drip", "did not answer within --timeout 1 s"),
        ("endless", "answered more than 128 MiB (not read further)"),
    ],
)
def test_status_from_a_peer_that_is_no_sidecar_is_one_line_bounded_in_time_and_memory(answer: str, says: str) -> None:
    """``jitwatch status --url`` at a peer that is no sidecar (hostile, or a wrong URL): JSON nested
    past the recursion limit raised ``RecursionError`` (a traceback); a byte every 0.2 s kept
    ``--timeout 1`` waiting for the whole drip (httpx's timeout bounds each wait, not the answer); a
    body without end was read into memory whole (6.4 GB in 40 s). Each is now one line, exit 1,
    within the timeout (and a chunk) and :data:`~jitwatch.cli.STATUS_MAX_BYTES`."""
    import subprocess
    import sys

    with hostile_peer(answer) as url:
        t0 = time.monotonic()
        res = subprocess.run(
            [sys.executable, "-m", "jitwatch.cli", "status", "--url", url, "--timeout", "1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        took = time.monotonic() - t0
    assert res.returncode == 1, res.stderr[-2000:]
    line = res.stderr
    assert line.startswith(f"jitwatch: {url}/jit {says}"), line[-2000:]
    assert line.endswith("; is it a jitwatch sidecar?\n") and line.count("\n") == 1, line[-2000:]
    assert "Traceback" not in res.stderr and res.stdout == ""
    if answer == "drip":
        assert took < 15, took  # the drip lasts 60 s
