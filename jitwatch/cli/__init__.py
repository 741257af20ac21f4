"""The ``jitwatch`` command line (typer). Commands stay thin; their logic lives in modules.

* ``jitwatch serve`` — run the sidecar (:func:`jitwatch.sidecar.run`).
* ``jitwatch status`` — fetch ``/jit`` from a running sidecar and print it as tables.

Option defaults come from :meth:`jitwatch.config.Settings.from_env` (``JITWATCH_*`` variables,
parsed there and nowhere else); ``--help`` names each option's variable and default. Usage and
configuration errors print one ``jitwatch: ...`` line and exit 2; runtime failures exit 1;
``jitwatch status`` exits 3 when the sidecar answers NOT READY.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import stat
from pathlib import Path
from types import TracebackType
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from jitwatch import config
from jitwatch._version import __version__
from jitwatch.cli.text import plain, utc_time
from jitwatch.config import ConfigError, Settings
from jitwatch.errors import JournalCorruptError, JournalVersionError
from jitwatch.store.journal import JOURNAL_FILE
from jitwatch.text import plural

SUMMARY_MAX = 200
"""A command's summary in a group's ``--help`` and in docs/cli.md: its help's first sentence, cut
(``...``) only past this many characters."""


class _Command(TyperCommand):
    """A command whose usage line names its arguments as click does, upper-case: ``MANIFEST``,
    ``[NAME]``, ``INPUTS...``; typer 0.29 writes a required one in braces (``{manifest}``), which
    reads as a format string left unfilled."""

    def get_short_help_str(self, limit: int = 45) -> str:
        """The help's first sentence, whole up to :data:`SUMMARY_MAX` characters (click's default
        cut it at 45 with ``...``)."""
        return super().get_short_help_str(limit=SUMMARY_MAX)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:  # click.Context (typer vendors click since 0.29)
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                pieces.extend(param.get_usage_pieces(ctx))
                continue
            name = param.metavar or (param.name or "").upper()
            pieces.append(("" if param.required else "[") + name + ("" if param.required else "]"))
            pieces[-1] += "..." if param.nargs != 1 else ""
        return pieces


class _Group(TyperGroup):
    """A command group whose command list gives each command's first sentence whole (click cut it
    at 45 characters with ``...``, in ``--help`` and in docs/cli.md)."""

    def get_short_help_str(self, limit: int = 45) -> str:
        return super().get_short_help_str(limit=SUMMARY_MAX)


app = typer.Typer(
    cls=_Group,
    name="jitwatch",
    help="Observability for JIT compilation (Triton, torch.compile, …) in LLM inference workers.",
    no_args_is_help=True,
    rich_markup_mode=None,  # click's plain help: it wraps at any width (rich's panels cut defaults with …)
    add_completion=False,
)


def _fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``jitwatch: <message>`` to stderr; return the :class:`typer.Exit` to raise."""
    typer.echo(plain(f"jitwatch: {message}"), err=True)
    return typer.Exit(code)


def _journal_error(exc: Exception, journal_dir: Path, origin: str | None = None) -> typer.Exit:
    """Print why the journal in ``journal_dir`` cannot be read (``jitwatch: <exc>``, stderr) and
    return the exit-1 :class:`typer.Exit` to raise. ``origin`` (:func:`_read_journal`: the directory
    was not named by ``--journal-dir``) follows in parentheses, so ``no journal at`` says whether
    the path came from ``JITWATCH_DIR`` or the default. A missing journal next to ``jitwatch demo``
    journals (``<dir>/demo-<port>/journal.db``, the demo's default place) names them: a bare
    ``jitwatch why`` after ``jitwatch demo`` otherwise says only "no journal at ...". Only
    ``Path.glob`` of that one pattern and ``stat`` (the newest is named); nothing is opened.
    A journal file this process may not read (SQLite's bare "unable to open database file") is
    named as such."""
    message = f"jitwatch: {exc}"
    db = journal_dir / JOURNAL_FILE
    if isinstance(exc, sqlite3.Error) and db.is_file() and not os.access(db, os.R_OK):
        message = f"jitwatch: cannot read the journal {db}: permission denied"
    elif isinstance(exc, sqlite3.Error):
        message = f"jitwatch: cannot read the journal in {journal_dir}: {exc}"
    message += f" ({origin})" if origin is not None else ""
    if isinstance(exc, FileNotFoundError) and not (journal_dir / "journal.db").exists():
        pointer = _demo_journal_pointer(journal_dir)
        message += f" ({pointer})" if pointer else ""
    typer.echo(plain(message), err=True)
    return typer.Exit(1)


def _demo_journal_pointer(journal_dir: Path) -> str | None:
    """``a `jitwatch demo` journal is in <dir>/demo-<port>: pass --journal-dir <that>`` (the
    newest, by ``journal.db``'s mtime, when there are several), or ``None`` when ``journal_dir``
    holds no ``demo-*/journal.db``. Only ``Path.glob`` of that one pattern and ``stat``; nothing
    is opened. Terminal control characters in the name are shown as ``\\xNN`` (:func:`plain`)."""
    import shlex

    try:  # newest first: the demo just run
        found = sorted(((p.stat().st_mtime, p.parent) for p in journal_dir.glob("demo-*/journal.db")), reverse=True)
    except OSError:
        return None
    if not found:
        return None
    newest = found[0][1]
    of = f", the newest of {len(found)}" if len(found) > 1 else ""
    # a name found on disk: control characters as \xNN (plain), in every line that prints it
    return plain(f"a `jitwatch demo` journal is in {newest}{of}: pass --journal-dir {shlex.quote(str(newest))}")


def _journal_has_no_events(journal_dir: Path) -> bool:
    """Whether the journal in ``journal_dir`` never had an event (an empty ``journal.db``, e.g. one
    a sidecar created); ``False`` when it cannot be read (its reader already said why)."""
    from jitwatch.store.journal import Journal

    try:
        with Journal(journal_dir, readonly=True) as journal:
            return journal.event_watermark() == 0
    except (*JOURNAL_READ_ERRORS, OSError):
        return False


JOURNAL_READ_ERRORS = (FileNotFoundError, PermissionError, JournalCorruptError, JournalVersionError, sqlite3.Error)
"""What opening or reading a journal read-only raises that :func:`_journal_error` reports in one
line (``PermissionError`` includes :class:`~jitwatch.errors.JournalUnsafeError`)."""


def _check_journal_dir(journal_dir: Path, origin: str | None, option: str = "--journal-dir") -> None:
    """Refuse, with one ``jitwatch: ...`` line on stderr, a journal directory that cannot be one,
    before anything is opened: a file (``--journal-dir /tmp/x/journal.db``: for a file named
    ``journal.db``, the journal itself, its directory is suggested) or a path through a file
    (exit 2: the value is wrong), or a directory this process may not list (exit 1, like an
    unreadable journal: the value is right, access is missing). A missing directory passes:
    opening it says "no journal at ..." (:func:`_journal_error`).

    Args:
        journal_dir: the directory to read.
        origin: ``None`` when ``option`` named it, else where it came from (:func:`_read_journal`):
            the line then names ``JITWATCH_DIR`` or the default instead of ``option``.
        option: the command-line option that names such a directory (``--expect-journal``).

    Raises:
        typer.Exit: code 2 or 1, after the line.
    """
    if origin is None:
        what, fix = f"{option} {journal_dir}", f"pass {option} {{}}"
    elif origin == f"from {config.JITWATCH_DIR}":
        what, fix = f"{config.JITWATCH_DIR}={journal_dir}", f"set {config.JITWATCH_DIR}={{}}"
    else:
        what, fix = f"journal directory {journal_dir} (the default)", "pass --journal-dir {}"
    try:
        st = journal_dir.stat()
    except FileNotFoundError:
        return
    except NotADirectoryError:  # a file on the way: name it
        blocker = next((p for p in journal_dir.parents if p.exists() and not p.is_dir()), None)
        raise _fail(f"{what} is not a directory" + (f": {blocker} is a file" if blocker else "")) from None
    except PermissionError:
        raise _fail(
            f"cannot read journal directory {journal_dir}: permission denied on a directory above it", 1
        ) from None
    except OSError as exc:  # a name too long (ENAMETOOLONG), a symlink loop (ELOOP): was a traceback
        raise _fail(f"{what} cannot be looked up: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        if journal_dir.name == JOURNAL_FILE:
            raise _fail(
                f"{what} is not a directory: it is the journal file itself; "
                + fix.format(journal_dir.parent)
                + " (its directory)"
            )
        raise _fail(f"{what} is not a directory; " + fix.format(f"<the directory that holds {JOURNAL_FILE}>"))
    if not os.access(journal_dir, os.R_OK | os.X_OK):
        raise _fail(
            f"cannot read journal directory {journal_dir}: permission denied (mode {stat.S_IMODE(st.st_mode):04o})", 1
        )


def _check_backend(backend: str | None) -> None:
    """Refuse a ``--backend`` value that cannot be a backend's name, by the rule the sidecar's
    ``?backend=`` applies (:data:`~jitwatch.backends.base.BACKEND_NAME_PATTERN`, at most
    :data:`~jitwatch.backends.base.BACKEND_NAME_MAX_LENGTH` characters; it answers 422): one line,
    exit 2, suggesting the lower-case name (``Triton`` → ``triton``); ``JITWATCH_BACKENDS`` follows
    the same rule (:func:`jitwatch.config.parse_backends`).

    Raises:
        typer.Exit: code 2, after the line.
    """
    from jitwatch.backends.base import backend_name_problem

    problem = None if backend is None else backend_name_problem(backend, "--backend {}")
    if problem is not None:
        raise _fail(plain(problem))


class _JournalRead:
    """The journal directory a journal-reading command reads (:func:`_read_journal`), checked; used
    as a context manager around the reads: a journal that cannot be read is one line on stderr and
    exit 1 (:func:`_journal_error`), and after reads that succeeded, when the directory was not named
    on the command line, which journal was read is said on stderr (stdout stays machine-readable):
    ``journal: <dir> (from JITWATCH_DIR)`` or ``(the default: ...)``. A journal that has no events
    while a ``jitwatch demo`` journal sits in ``<dir>/demo-<port>`` names that one
    (:func:`_demo_journal_pointer`), however the directory was chosen."""

    __slots__ = ("origin", "path")

    def __init__(self, path: Path, origin: str | None) -> None:
        self.path = path
        self.origin = origin
        """``None`` when ``--journal-dir`` named it, else where it came from."""

    def __enter__(self) -> Path:
        return self.path

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            if self.origin is not None:
                typer.echo(plain(f"journal: {self.path} ({self.origin})"), err=True)
            pointer = _demo_journal_pointer(self.path)
            if pointer is not None and _journal_has_no_events(self.path):
                typer.echo(plain(f"journal {self.path} has no events; {pointer}"), err=True)
        elif isinstance(exc, JOURNAL_READ_ERRORS):
            raise _journal_error(exc, self.path, self.origin) from None


def _journal_dir_option(option: str | None) -> Path | None:
    """``--journal-dir`` read by :func:`jitwatch.config.journal_dir_value`; a ``~`` that cannot be
    expanded (``~nosuchuser/x``) is one line and exit 2 (was a ``RuntimeError`` traceback)."""
    try:
        return config.journal_dir_value(option, "--journal-dir")
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def _expand_home(path: Path, option: str) -> Path:
    """``path.expanduser()``; a ``~`` that cannot be expanded is one line naming ``option``, exit 2."""
    try:
        return config.expand_home(str(path), option)
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def _read_journal(option: str | None, settings: Settings) -> _JournalRead:
    """The journal directory a journal-reading command reads: ``--journal-dir`` (``option``, read
    as ``JITWATCH_DIR`` is: :func:`jitwatch.config.journal_dir_value`), else ``$JITWATCH_DIR``,
    else the default; checked now (:func:`_check_journal_dir`), read inside ``with`` the returned
    :class:`_JournalRead`.

    Raises:
        typer.Exit: code 2 or 1, after one line (:func:`_check_journal_dir`; code 2 for a ``~``
            that cannot be expanded: :func:`_journal_dir_option`).
    """
    journal_dir = _journal_dir_option(option)
    if journal_dir is not None:
        path, origin = journal_dir, None
    elif settings.journal_dir_source == "set":
        path, origin = settings.journal_dir, f"from {config.JITWATCH_DIR}"
    else:  # "unset", or "empty": JITWATCH_DIR= counts as unset, but is not
        state = settings.journal_dir_source
        path, origin = (
            settings.journal_dir,
            f"the default: {config.JITWATCH_DIR} is {state}; --journal-dir reads another",
        )
    _check_journal_dir(path, origin)
    return _JournalRead(path, origin)


def _journal_settings(option: str | None, *others: str) -> Settings:
    """:func:`_settings` for a journal-reading command: ``others`` and ``JITWATCH_DIR``, except
    where ``--journal-dir`` (``option``) names a directory: it replaces ``JITWATCH_DIR``, which is
    then not read, so a bad value of it is no error (as ``status --port`` does not read
    ``JITWATCH_PORT``). A blank ``--journal-dir`` counts as unset and reads ``JITWATCH_DIR``.

    Raises:
        typer.Exit: code 2, after one line, for a bad value of a variable read, or a ``~`` in
            ``option`` that cannot be expanded.
    """
    uses = [*others] + ([] if _journal_dir_option(option) is not None else [config.JITWATCH_DIR])
    return _settings(*uses) if uses else Settings.from_env(strict=False)


def _settings(*uses: str) -> Settings:
    """:meth:`Settings.from_env`; a bad value of a variable in ``uses`` (every variable when none
    is named) is one line on stderr and exit 2. A bad value of a variable the command does not use
    is not an error here (``JITWATCH_MODE=loud jitwatch status`` works)."""
    try:
        return Settings.from_env(strict=False).require(*uses)
    except ConfigError as exc:
        raise _fail(str(exc)) from None


SIDECAR_VARIABLES = (
    config.JITWATCH_DIR,
    config.JITWATCH_RETENTION_EVENTS,
    config.JITWATCH_RETENTION_SECONDS,
    config.JITWATCH_MAX_KERNELS,
    *config.SIDECAR_ONLY_VARIABLES,
)
"""What ``jitwatch serve`` reads (the sidecar: every sidecar-only variable, so a bad
``JITWATCH_SEND_TIMEOUT_SECONDS`` is refused rather than served with the default); the other
commands name theirs where they call :func:`_settings`."""


DEFAULT_DIR_HELP = "$JITWATCH_DIR, else $XDG_STATE_HOME/jitwatch or ~/.local/state/jitwatch"
# A str, read by config.journal_dir_value as JITWATCH_DIR is (stripped, ~ expanded, blank = unset):
# a Path option turns '' into '.'. The journal-reading commands check the directory themselves
# (_check_journal_dir: one line), not click's "path ... is not readable" usage box.
JournalDirOpt = Annotated[
    str | None,
    typer.Option(
        metavar="DIR",
        show_default=DEFAULT_DIR_HELP,
        help="Journal directory (read as JITWATCH_DIR is: ~ expanded, spaces around it dropped, blank = unset).",
    ),
]
ReadJournalDirOpt = JournalDirOpt
# Boolean flags: no "<bool>" value column in --help.
FLAG = {"metavar": ""}


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"jitwatch {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version and exit.", **FLAG
        ),
    ] = False,
) -> None:
    """Observability for JIT compilation (Triton, torch.compile, …) in LLM inference workers."""


@app.command(cls=_Command)
def serve(
    host: Annotated[
        str | None, typer.Option(show_default="$JITWATCH_HOST, else 127.0.0.1", help="Bind address.")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, show_default="$JITWATCH_PORT, else 9400", help="Port (0: a free one, printed)."),
    ] = None,
    journal_dir: JournalDirOpt = None,
    token: Annotated[
        str | None,
        typer.Option(show_default="$JITWATCH_TOKEN", help="Bearer token for every endpoint but /livez and /readyz."),
    ] = None,
    stale_after: Annotated[
        float | None,
        typer.Option(
            min=0,
            show_default="$JITWATCH_STALE_SECONDS, else 60",
            help="Seconds without a worker heartbeat after which its rank is stale (not ready); 0: off.",
        ),
    ] = None,
) -> None:
    """Run the sidecar: /jit, /jit/events, /metrics, /livez, /readyz.

    A journal directory that cannot be one (a file, as for `why`) is refused: one line, exit 2.
    """
    from jitwatch.sidecar import PortUnavailableError, run

    replaced: dict[str, object] = {config.JITWATCH_HOST: host, config.JITWATCH_PORT: port}
    replaced.update({config.JITWATCH_TOKEN: token, config.JITWATCH_STALE_SECONDS: stale_after})
    # an option given replaces its variable, which is then not read (nor refused when bad)
    uses = [v for v in SIDECAR_VARIABLES if v != config.JITWATCH_DIR and replaced.get(v) is None]
    settings = _journal_settings(journal_dir, *uses)
    given = token if token is not None else settings.token
    if given is not None and not given.strip():  # create_app refuses it too: here one line, not a traceback
        raise _fail(
            "--token is empty: pass a real token, or leave --token out to serve without one"
            if token is not None
            else f"{config.JITWATCH_TOKEN} is only whitespace: set a real token, or unset it to serve without one"
        )
    # A file as the journal directory (--journal-dir or JITWATCH_DIR) is refused as `why` refuses
    # it, before serving a /readyz that could only answer 503; a missing directory is fine.
    journal = _read_journal(journal_dir, settings)
    try:
        run(
            host if host is not None else settings.host,
            port if port is not None else settings.port,
            journal.path,
            token,
            settings=settings,
            stale_after=stale_after,
        )
    except PortUnavailableError as exc:
        text = str(exc)
        hint = (
            "check --host / JITWATCH_HOST"
            if "not known" in text or "resolution" in text or "nodename" in text
            else "another process listens there? use --port or JITWATCH_PORT"
        )
        raise _fail(f"{text} ({hint})") from None


@app.command(cls=_Command)
def status(
    url: Annotated[
        str | None,
        typer.Option(
            show_default="http://$JITWATCH_HOST:$JITWATCH_PORT, else http://127.0.0.1:9400",
            help="Sidecar base URL (not with --port; no user:password@: the token goes in --token).",
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            show_default="$JITWATCH_PORT, else 9400",
            help="Sidecar port: http://$JITWATCH_HOST:PORT, else http://127.0.0.1:PORT (not with --url).",
        ),
    ] = None,
    token: Annotated[str | None, typer.Option(show_default="$JITWATCH_TOKEN", help="Bearer token.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw /jit JSON instead of tables.", **FLAG)] = False,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds the whole answer may take (connecting, waiting, reading).")
    ] = 5.0,
    backend: Annotated[
        str | None, typer.Option(help="Only this JIT backend's kernels and compiles (e.g. triton).")
    ] = None,
) -> None:
    """Fetch /jit from a running sidecar and print ranks, kernels and serving-phase compiles.

    The sidecar is --url, else http://$JITWATCH_HOST:--port (127.0.0.1 for an unset host or
    0.0.0.0, [::1] for ::; the port from --port, else $JITWATCH_PORT, else 9400). --url with --port,
    a URL with a user:password@ (sent as Basic auth in place of the bearer token: pass the token
    as --token or JITWATCH_TOKEN), or a --backend that is not a backend name (as `why --backend`),
    is refused (exit 2). A bad JITWATCH_HOST/PORT/TOKEN that --url/--port/--token replaces is not
    read.

    Exit 0: READY; 3: NOT READY (the output says why; for scripts, as systemctl's 3); 1: the
    sidecar could not be reached or did not answer 200; 2: a usage or configuration error.
    """
    import httpx
    from rich.console import Console

    from jitwatch.cli.render import render_status
    from jitwatch.sidecar import local_url_host
    from jitwatch.views.status import JitStatus

    if url is not None and port is not None:
        raise _fail(
            f"--url and --port are mutually exclusive: pass --url {_url_shown(url)} alone, or --port {port} alone"
        )
    _check_backend(backend)  # before the request: the sidecar's 422 would be exit 1
    uses = [config.JITWATCH_HOST] if url is None else []  # a bad variable that --url/--port/--token
    uses += [config.JITWATCH_PORT] if url is None and port is None else []  # replaces is no error
    uses += [config.JITWATCH_TOKEN] if token is None else []
    settings = _settings(*uses) if uses else Settings.from_env(strict=False)
    url_from = "--url"
    if url is None and port is None and settings.port == 0:
        raise _fail(
            f"{config.JITWATCH_PORT}=0 makes `jitwatch serve` pick a free port, which status cannot know:"
            " pass --port PORT (the one serve printed) or --url"
        )
    if url is None:
        # A user:password@ in JITWATCH_HOST (refused below) precedes the host: its ":" is no IPv6's.
        userinfo, at, host = settings.host.rpartition("@")
        url = f"http://{userinfo}{at}{local_url_host(host)}:{port if port is not None else settings.port}"
        url_from = config.JITWATCH_HOST
    _refuse_userinfo(url, url_from)
    token = token if token is not None else settings.token
    shown = _url_shown(url)  # what is printed: without a user:password@
    # UTF-8 bytes: httpx encodes str header values as ASCII; the sidecar compares the raw bytes.
    headers = {b"Authorization": b"Bearer " + token.encode("utf-8")} if token else {}
    try:
        params = {"backend": backend} if backend is not None else {}
        status, body = _fetch_status(url.rstrip("/") + "/jit", headers, params, timeout)
    except _StatusAnswerError as exc:
        raise _fail(f"{shown}/jit {exc}; is it a jitwatch sidecar?", 1) from None
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        masked = _url_shown(url, unparsed=True)
        from_host = url_from == config.JITWATCH_HOST  # no --url given: the default URL is invalid
        if masked != _url_shown(url, "", unparsed=True):  # httpx's reason may quote a part of a password
            hidden = f"{masked!r}, shown without the part up to its last @, which may hold a password"
            raise _fail(
                (
                    f"{config.JITWATCH_HOST} does not make a valid URL ({hidden}): the sidecar takes no"
                    f" user:password: set {config.JITWATCH_HOST} to the host alone, or pass --url http://HOST:PORT,"
                    f" and the token as --token or {config.JITWATCH_TOKEN}"
                )
                if from_host
                else (
                    f"invalid --url {masked!r} (shown without the part up to its last @, which may hold a password):"
                    f" the sidecar takes no user:password: pass --url http://HOST:PORT and the token as --token or"
                    f" {config.JITWATCH_TOKEN}"
                )
            ) from None
        if from_host:  # no @ in it: no password to hide
            raise _fail(
                f"{config.JITWATCH_HOST}={settings.host!r} does not make a valid URL ({shown!r}): {exc}"
            ) from None
        bare = "://" not in url and re.fullmatch(r"[A-Za-z0-9._\-\[\]:]+(/\S*)?", url)  # host:port, as curl takes
        scheme = f" (pass --url http://{shown})" if bare else ""
        raise _fail(f"invalid --url {shown!r}: {exc}{scheme}") from None
    except httpx.ConnectError as exc:
        hint = _start_hint(url, exc) + _live_demo_hint(url, exc, settings)
        raise _fail(f"cannot reach {shown}: {exc or type(exc).__name__}{hint}", 1) from None
    except (httpx.HTTPError, httpx.StreamError) as exc:
        raise _fail(f"cannot reach {shown}: {exc or type(exc).__name__}", 1) from None
    if status == 401:
        raise _fail(
            f"{shown}/jit answered 401 (unauthorized): "
            + ("wrong token" if token else "the sidecar needs a token")
            + "; pass --token or set JITWATCH_TOKEN",
            1,
        )
    if status != 200:
        raise _fail(f"{shown}/jit answered {status}: {body.decode('utf-8', 'replace').strip()[:500]}", 1)
    try:
        st = JitStatus.model_validate(json.loads(body))
    except (ValueError, RecursionError) as exc:
        # not JSON, not a /jit document (pydantic's ValidationError is a ValueError), or JSON nested
        # past the interpreter's recursion limit (json.loads raises RecursionError: a traceback)
        raise _fail(
            f"{shown}/jit did not answer a jitwatch status ({type(exc).__name__}); is it a jitwatch sidecar?", 1
        ) from None
    if backend is not None and st.backends_in_journal is not None:  # stderr: stdout (--json too) as it was
        has = ", ".join(st.backends_in_journal) or "none yet"
        typer.echo(
            plain(f"jitwatch: no kernels or compiles of backend {backend!r} in the journal (it has: {has})"), err=True
        )
    if as_json:
        typer.echo(json.dumps(st.model_dump(mode="json"), indent=2))
    else:
        render_status(st, Console(), url=shown)
    if not st.ready:  # a check for scripts: the output says why
        raise typer.Exit(STATUS_NOT_READY)


STATUS_MAX_BYTES = 128 * 2**20
"""Most bytes ``jitwatch status`` reads from ``/jit`` (the sidecar's default document, 100 kernels,
is a few MB): more is no sidecar's answer, and was read into memory whole (6.4 GB in 40 s from a
peer sending without end)."""


class _StatusAnswerError(Exception):
    """``/jit``'s answer was too large or too slow (:func:`_fetch_status`); the message says which."""


def _fetch_status(url: str, headers: dict[bytes, bytes], params: dict[str, str], timeout: float) -> tuple[int, bytes]:
    """``(status, body)`` of ``GET url``, the whole answer within ``timeout`` seconds and at most
    :data:`STATUS_MAX_BYTES`. httpx's ``timeout`` bounds each wait, not the whole: a peer sending a
    byte every half second held ``jitwatch status --timeout 3`` without end.

    Raises:
        _StatusAnswerError: the body passed :data:`STATUS_MAX_BYTES`, or the answer ``timeout``.
        httpx.HTTPError: as ``httpx.get``.
    """
    import time

    import httpx

    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    with httpx.stream("GET", url, headers=headers, params=params, timeout=timeout) as resp:
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > STATUS_MAX_BYTES:
                raise _StatusAnswerError(f"answered more than {STATUS_MAX_BYTES // 2**20} MiB (not read further)")
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise _StatusAnswerError(f"did not answer within --timeout {timeout:g} s ({size} bytes read)")
        return resp.status_code, b"".join(chunks)


STATUS_NOT_READY = 3
"""``jitwatch status``'s exit code when the sidecar answered NOT READY (LSB's "program is not
running", as ``systemctl status``): 0 is READY, 1 no answer (unreachable, 401, not 200), 2 a
usage or configuration error."""


_USERINFO = r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@"
"""A URL's scheme and userinfo (``http://user:password@``), for :func:`_url_shown`: the userinfo
ends at the authority's last ``@`` (a password may hold one unencoded; httpx reads it so)."""

_UNPARSED_USERINFO = r"^((?:[A-Za-z][A-Za-z0-9+.-]*://)?)[\s\S]*@"
"""For a URL httpx cannot read: everything up to its last ``@`` (with or without a scheme)."""


def _url_readable(url: str) -> bool:
    """Whether httpx reads ``url`` as an ``http``/``https`` URL with a host. Never raises."""
    import httpx

    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError):
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.host)


def _url_shown(url: str, userinfo: str = "***@", *, unparsed: bool | None = None) -> str:
    """``url`` as ``jitwatch status`` prints it, without a trailing ``/`` and with any userinfo
    (``user:password@``, up to the authority's last ``@``) shown as ``userinfo`` (``***@``; ``""``
    drops it): the password is never printed. ``unparsed``: ``url`` is not a URL httpx can read
    (a password with an unencoded ``/``, no ``http://``), so everything up to its last ``@`` is
    taken as the userinfo; ``None`` (the default): as :func:`_url_readable` says. Never raises."""
    import re

    if unparsed is None:
        unparsed = not _url_readable(url)
    pattern = _UNPARSED_USERINFO if unparsed else _USERINFO
    return re.sub(pattern, lambda m: m.group(1) + userinfo, url.strip()).rstrip("/")


def _refuse_userinfo(url: str, url_from: str) -> None:
    """Refuse a sidecar URL with a userinfo (``http://user:password@host:port``, or a user alone).

    httpx sends a URL's userinfo as HTTP Basic auth, which replaces the ``Authorization: Bearer``
    header of ``--token``; the sidecar knows bearer tokens only, so such a request could only be
    answered 401. ``url_from`` is where the URL came from (``--url``, or ``JITWATCH_HOST`` for the
    default URL), named in the message (``JITWATCH_HOST has a user name or password (it makes the
    URL http://***@HOST:PORT), …``). A URL httpx cannot parse is left to the request (its own
    ``invalid --url`` error).

    Raises:
        typer.Exit: code 2, after one ``jitwatch: …`` line on stderr naming ``--token`` /
            ``JITWATCH_TOKEN`` and the URL without its userinfo (the password is never printed).
    """
    import httpx

    try:
        userinfo = httpx.URL(url).userinfo
    except (httpx.InvalidURL, TypeError, ValueError):
        return
    if not userinfo:
        return
    bare = _url_shown(url, "")
    said = (
        f"--url {_url_shown(url)} has a user name or password"
        if url_from == "--url"
        else f"{url_from} has a user name or password (it makes the URL {_url_shown(url)})"
    )
    also = f", or set {url_from} to the host alone" if url_from != "--url" else ""
    raise _fail(
        f"{said}, which the sidecar does not take (it checks a bearer token only, and the user:password would be"
        f" sent instead of the token): pass --url {bare} and the token as --token or {config.JITWATCH_TOKEN}{also}"
    )


def _start_hint(url: str, exc: Exception) -> str:
    """For a refused connection (nothing listens at ``url``), the next step:
    ``; is the sidecar running? start it with: jitwatch serve --port 9400`` (the command as the
    demo prints it, runnable as printed; with ``--host <the URL's host>`` for a host other than
    127.0.0.1 / localhost, to run there); ``""`` for other connection errors (a name that does not
    resolve)."""
    import httpx

    from jitwatch.text import jitwatch_command

    if "refused" not in str(exc).lower():
        return ""
    parsed = httpx.URL(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    host = parsed.host
    command = f"{jitwatch_command()} serve --port {port}"
    if host in ("127.0.0.1", "localhost"):
        return f"; is the sidecar running? start it with: {command}"
    if host == "::1":
        return f"; is the sidecar running? start it with: {command} --host ::1"
    return f"; is the sidecar running on {host}? start it there with: {command} --host {host}"


DEMO_PROBE_TIMEOUT_S = 0.5
"""Seconds :func:`_live_demo_hint` waits for a demo's ``/livez``."""


def _live_demo_hint(url: str, exc: Exception, settings: Settings) -> str:
    """For a refused connection to a local ``url`` (127.0.0.1, localhost, ::1), a ``jitwatch demo``
    serving on another port: ``; a jitwatch demo is serving on port 9428: jitwatch status --port
    9428`` (``demos are serving on ports …`` for several); ``""`` when there is none.

    A demo is looked for where ``jitwatch demo`` puts its journal by default,
    ``<journal dir>/demo-<port>/demo.lock`` (:func:`jitwatch.demo.default_journal_dir`; one
    started with ``--journal-dir`` elsewhere is not found). The lock file outlives the demo, so it
    is not trusted: its pid (the first line) must be a live process and the port must answer
    ``/livez`` with 200 within :data:`DEMO_PROBE_TIMEOUT_S` (same scheme and host as ``url``).
    Never raises: an unreadable directory or lock is no demo."""
    import httpx

    from jitwatch.demo.runner import DEMO_SUBDIR, LOCK_FILE
    from jitwatch.text import jitwatch_command

    if "refused" not in str(exc).lower():
        return ""
    parsed = httpx.URL(url)
    if parsed.host not in ("127.0.0.1", "localhost", "::1"):
        return ""
    live: list[int] = []
    try:
        locks = sorted(settings.journal_dir.glob(f"{DEMO_SUBDIR}-*/{LOCK_FILE}"))
    except OSError:
        return ""
    for lock in locks[:16]:
        port_text = lock.parent.name.removeprefix(f"{DEMO_SUBDIR}-")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536 or int(port_text) == parsed.port:
            continue
        try:
            pid = int(lock.read_text(encoding="ascii", errors="replace").split()[0])
            if pid <= 0:
                continue
            os.kill(pid, 0)  # signal 0: whether the process exists
        except PermissionError:  # it exists, as another user's
            pass
        except (OSError, ValueError, IndexError):  # unreadable, empty, not a pid, no such process
            continue
        try:
            probe = httpx.get(str(parsed.copy_with(port=int(port_text), path="/livez")), timeout=DEMO_PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            continue
        if probe.status_code == 200:
            live.append(int(port_text))
    if not live:
        return ""
    command = f"{jitwatch_command()} status"
    how = (
        f"{command} --port {live[0]}" if parsed.host != "::1" else f"{command} --url {parsed.scheme}://[::1]:{live[0]}"
    )
    if len(live) == 1:
        return f"; a jitwatch demo is serving on port {live[0]}: {how}"
    return f"; jitwatch demos are serving on ports {', '.join(map(str, live))}: {how}"


@app.command(cls=_Command)
def demo(
    host: Annotated[
        str | None, typer.Option(show_default="$JITWATCH_HOST, else 127.0.0.1", help="Sidecar bind address.")
    ] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, show_default="$JITWATCH_PORT, else 9400", help="Sidecar port.")
    ] = None,
    journal_dir: Annotated[
        str | None,
        typer.Option(
            metavar="DIR",
            show_default="$JITWATCH_DIR/demo-<port>",
            help="Journal directory, reset at start and locked while the demo runs (read as JITWATCH_DIR is).",
        ),
    ] = None,
    no_warmup: Annotated[
        bool,
        typer.Option(
            "--no-warmup", help="Skip the slot-mapping warmup (it then compiles on the first request).", **FLAG
        ),
    ] = False,
    specialize_num_tokens: Annotated[
        bool,
        typer.Option(
            "--specialize-num-tokens",
            help="Use the kernel without do_not_specialize=['num_tokens'] (recompiles per request-size class).",
            **FLAG,
        ),
    ] = False,
    exit_after: Annotated[
        bool, typer.Option("--exit", help="Exit after the scenario instead of serving until Ctrl-C.", **FLAG)
    ] = False,
    keep_triton_cache: Annotated[
        bool,
        typer.Option("--keep-triton-cache", help="Use your TRITON_CACHE_DIR instead of a fresh temporary one.", **FLAG),
    ] = False,
    output_dir: Annotated[
        Path | None, typer.Option(help="Also write the final /jit, /metrics and the /readyz history here.")
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help=(
                "Reset the journal in --journal-dir even if no demo created it or a process other than a demo's"
                " worker wrote to it (else: refused, exit 2)."
            ),
            **FLAG,
        ),
    ] = False,
) -> None:
    """Run a sidecar and a demo worker with real Triton compiles (GPU, or compile-only on CPU).

    With JITWATCH_MANIFEST set (and JITWATCH_MANIFEST_ALLOW, e.g. jitwatch.kernels), the worker
    replays that manifest in its warmup, as the vLLM plugin does (docs/demo.md).
    """
    from jitwatch.demo import DemoError, DemoOptions, default_journal_dir, run_demo

    # The worker reads the same JITWATCH_* variables: fail here, cleanly; but not on a variable that
    # --host / --port replaces, which is not read (as for `status --port`).
    replaced = [config.JITWATCH_HOST] if host is not None else []
    replaced += [config.JITWATCH_PORT] if port is not None else []
    try:
        settings = Settings.from_env(strict=False).require_all_but(*replaced)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    if settings.backends:  # and would refuse an unknown backend (a traceback in the worker)
        from jitwatch.backends import check_names
        from jitwatch.errors import BackendError

        try:
            check_names(settings.backends)
        except BackendError as exc:
            raise _fail(str(exc)) from None
    host = host if host is not None else settings.host
    port = port if port is not None else settings.port
    if port == 0:
        raise _fail("the demo needs a fixed port (--port or JITWATCH_PORT), not 0")
    opts = DemoOptions(
        host=host,
        port=port,
        journal_dir=_journal_dir_option(journal_dir) or default_journal_dir(port, settings),
        no_warmup=no_warmup,
        specialize_num_tokens=specialize_num_tokens,
        exit_after=exit_after,
        keep_triton_cache=keep_triton_cache,
        output_dir=_expand_home(output_dir, "--output-dir") if output_dir else None,
        force=force,
    )
    try:
        run_demo(opts)
    except DemoError as exc:
        typer.echo(plain(f"jitwatch demo: {exc}"), err=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        typer.echo("jitwatch demo: stopped", err=True)
        raise typer.Exit(130) from None


# ---------------------------------------------------------------------------------------- manifests
manifest_app = typer.Typer(
    cls=_Group,
    rich_markup_mode=None,
    help="Warmup manifests: record what compiled, from the journal.",
    no_args_is_help=True,
)
warmup_app = typer.Typer(
    cls=_Group,
    rich_markup_mode=None,
    help="Warmup: precompile a manifest's kernels before serving.",
    no_args_is_help=True,
)
app.add_typer(manifest_app, name="manifest")
app.add_typer(warmup_app, name="warmup")

AllowOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow",
        show_default="$JITWATCH_MANIFEST_ALLOW (comma-separated), else none",
        help="Module prefix that may be imported by name (repeatable, or comma-separated as in"
        " JITWATCH_MANIFEST_ALLOW), e.g. --allow vllm. Nothing else is imported.",
    ),
]


def _allow(allow: list[str] | None) -> list[str]:
    """``--allow`` values, each split at commas as ``JITWATCH_MANIFEST_ALLOW`` is (no module name
    has a comma: ``--allow vllm,my_kernels`` was one prefix that allowed nothing), else
    ``JITWATCH_MANIFEST_ALLOW`` (from :class:`Settings`)."""
    given = list(dict.fromkeys(p.strip() for value in allow or [] for p in value.split(",") if p.strip()))
    return given if given else list(_settings(config.JITWATCH_MANIFEST_ALLOW).manifest_allow)


def _short(text: str, width: int = 80) -> str:
    """``text`` cut to at most ``width`` characters, ending in an ellipsis, at a token boundary
    (after a ``), `` between specialization tuples, else a ``, `` or a space), never mid-token."""
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    for sep, keep in (("), ", 2), (", ", 1), (" ", 0)):
        at = cut.rfind(sep)
        if at > width // 3:
            return cut[: at + keep] + "…"
    return cut + "…"


# Help text is plain (rich_markup_mode=None): "[" is printed as written.
LocationHelp = "a .json file, a directory (NFS-style store of NAME.json), or redis://HOST:PORT[/DB][/NAME][?prefix=P]"


@manifest_app.command("export", cls=_Command)
def manifest_export(
    output: Annotated[str, typer.Option("-o", "--output", help=f"Where to write the manifest: {LocationHelp}.")],
    journal_dir: ReadJournalDirOpt = None,
    all_phases: Annotated[
        bool, typer.Option("--all-phases", help="Record every compile, not only serving-phase ones.", **FLAG)
    ] = False,
    allow: AllowOpt = None,
    rank: Annotated[int | None, typer.Option(min=0, max=config.MAX_RANK, help="Only this rank's compiles.")] = None,
    name: Annotated[
        str | None,
        typer.Option(
            show_default="this host's full name, e.g. node-1.dc1",
            help="Manifest name in a directory or Redis store (a host named localhost must give one).",
        ),
    ] = None,
    allow_empty: Annotated[
        bool,
        typer.Option(
            "--allow-empty",
            help="Write the manifest even when it has no entry (else: exit 1, nothing written).",
            **FLAG,
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace a manifest file even when it holds specializations this export leaves out.",
            **FLAG,
        ),
    ] = False,
) -> None:
    """Write the journal's serving-phase compiles (or all) as a warmup manifest (file, directory or Redis).

    Exit 1, writing nothing, when no compile could be recorded (none in the journal, or every one
    left out: the lines on stderr say why), unless --allow-empty. Exit 1, writing nothing, when the
    -o file is a manifest holding specializations this export leaves out (a replayed entry compiles
    in warmup, not serving: --all-phases records it again), unless --force. In a directory or Redis
    store the manifest is named by this host's full name (node-1.dc1), unless --name; exit 1,
    writing nothing, for a host named localhost without --name.
    """
    import socket

    from jitwatch.errors import StoreError
    from jitwatch.fleet.stores import safe_location, write_manifest
    from jitwatch.warmup.manifest import build

    with _read_journal(journal_dir, _journal_settings(journal_dir)) as jdir:
        manifest, problems = build(jdir, all_phases=all_phases, allow=_allow(allow), rank=rank)
    if not manifest.entries and not allow_empty:
        for kernel, why in problems.items():
            typer.echo(plain(f"  {kernel}: {why}"), err=True)
        which = "compiles" if all_phases else "serving-phase compiles"
        which += f" of rank {rank}" if rank is not None else ""
        found = (
            f"every one of the journal's {which} was left out (why: above)"
            if problems
            else f"no {which} in the journal"
        )
        raise _fail(
            plain(f"nothing to write to {safe_location(output)}: {found}; wrote nothing")
            + " (--allow-empty writes an empty manifest)",
            1,
        )
    if not force:
        _refuse_to_drop_entries(output, manifest, settings=_settings(config.JITWATCH_MANIFEST_KEY))
    host = socket.gethostname()
    defaulted = name is None
    if name is None:
        name = _host_record_name(output, host)
    try:
        where = write_manifest(
            output,
            manifest,
            name=name,
            key=_settings(config.JITWATCH_MANIFEST_KEY).manifest_key,
        )
    except StoreError as exc:
        raise _journal_error(exc, jdir) from None
    typer.echo(
        plain(
            f"wrote {where}: {plural(len(manifest.entries), 'specialization')} of"
            f" {plural(len(manifest.kernels()), 'kernel')} ({', '.join(manifest.phases)})"
        )
    )
    for kernel, why in problems.items():
        typer.echo(plain(f"  {kernel}: {why}"), err=True)
    if defaulted and name is not None:
        _note_short_name_record(output, host, name)


def _note_short_name_record(output: str, host: str, name: str) -> None:
    """One line on stderr when the store also holds a record named by this host's short name, the
    name jitwatch gave a host's record until 2026-12-04: if it is this host's, ``warmup merge``
    counts the host twice until it is removed. Never raises."""
    from jitwatch.errors import JitwatchError
    from jitwatch.fleet.stores import check_name, parse_location, safe_location

    short = host.split(".", 1)[0]
    try:
        loc = parse_location(output)
        if short == name or loc.store is None or short not in loc.store.names():
            return
        check_name(short)
    except (JitwatchError, OSError, ValueError):
        return
    typer.echo(
        plain(
            f"jitwatch: {safe_location(output)} also holds {short!r}, the name an older jitwatch gave a host's"
            f" record (the short host name; this one is {name!r}): if it is this host's, remove it, or"
            " `warmup merge` counts this host twice"
        ),
        err=True,
    )


def _host_record_name(output: str, host: str) -> str | None:
    """The name of this host's record when ``output`` is a store without ``/NAME``: the full host
    name (:func:`~jitwatch.fleet.stores.host_record_name`). ``None`` where no name is used (a
    ``.json`` file, a ``/NAME`` location, or one that does not parse: the write says why).

    Raises:
        typer.Exit: code 1, one line, when the host name is one many hosts share (``localhost``):
            their records would overwrite each other's.
    """
    from jitwatch.errors import StoreError
    from jitwatch.fleet.stores import SHARED_HOST_NAMES, host_record_name, parse_location, safe_location

    try:
        loc = parse_location(output)
    except (StoreError, ValueError, OSError):
        return None
    if loc.file is not None or loc.name is not None:
        return None
    if host.lower() in SHARED_HOST_NAMES:
        raise _fail(
            f"this host is named {host!r}, as many hosts are: its record in {safe_location(output)} would"
            " overwrite theirs; name it with --name (e.g. the node's name); wrote nothing",
            1,
        )
    return host_record_name(host)


def _refuse_to_drop_entries(output: str, manifest: Any, *, settings: Settings) -> None:
    """Exit 1 (one line, nothing written) when ``output`` is a ``.json`` file holding a readable
    manifest with specializations ``manifest`` lacks: re-exporting serving-phase compiles after a
    replay (the replayed keys compiled in warmup) would drop them. A missing file, a store location
    (directory, Redis: one name per host) or a file that is not a readable manifest: no check.

    Raises:
        typer.Exit: code 1, after one line naming what keeps the entries.
    """
    from jitwatch.backends.explain import local_jitwatch
    from jitwatch.errors import JitwatchError
    from jitwatch.fleet.stores import parse_location
    from jitwatch.warmup.manifest import load

    try:
        loc = parse_location(output)
        if loc.file is None or not os.path.isfile(loc.file):
            return
        old = load(loc.file, key=settings.manifest_key)
    except (JitwatchError, OSError, ValueError):
        return  # not one readable manifest: written over as before
    kept = {e.identity() for e in manifest.entries}
    dropped = [e for e in old.entries if e.identity() not in kept]
    if not dropped:
        return
    if old.triton_version and manifest.triton_version and old.triton_version != manifest.triton_version:
        # recorded with another Triton: its keys never compile again, and replay refuses them (a merge
        # keeping them made every later `warmup replay` exit 1); written over, said on stderr
        typer.echo(
            plain(
                f"jitwatch: replacing {loc.file}: recorded with Triton {old.triton_version}, this journal's"
                f" compiles with Triton {manifest.triton_version} (another Triton's keys do not replay); dropped:"
                f" {plural(len(dropped), 'specialization')} not in this export"
            ),
            err=True,
        )
        return
    kernels = sorted({e.kernel for e in dropped})
    raise _fail(
        plain(
            f"{loc.file} holds {plural(len(dropped), 'specialization')} this export leaves out"
            f" ({', '.join(kernels[:3])}{', …' if len(kernels) > 3 else ''}; a replayed one compiles in warmup,"
            " not serving): --all-phases records warmup compiles too,"
            f" `{local_jitwatch()} warmup merge"
            f" {shlex.quote(str(loc.file))} NEW.json -o {shlex.quote(str(loc.file))}` keeps both,"
            " --force replaces it; wrote nothing"
        ),
        1,
    )


@warmup_app.command("merge", cls=_Command)
def warmup_merge(
    inputs: Annotated[list[str], typer.Argument(help=f"Manifests to merge, each {LocationHelp}.")],
    output: Annotated[str, typer.Option("-o", "--output", help=f"Where to write the merged manifest: {LocationHelp}.")],
    name: Annotated[str, typer.Option(help="Manifest name when --output is a directory or Redis store.")] = "fleet",
    as_json: Annotated[bool, typer.Option("--json", help="Print the merge report as JSON.", **FLAG)] = False,
) -> None:
    """Merge manifests recorded on many hosts into one (deduplicated, hosts counted per key).

    Kernels whose source hash differs between inputs are refused (left out, reported): exit 1
    then, after writing the rest. Exit 2 for an unreadable input.
    """
    from jitwatch.errors import ManifestError, StoreError
    from jitwatch.fleet.merge import merge
    from jitwatch.fleet.stores import own_output_name, read_manifests, safe_location, write_manifest
    from jitwatch.warmup.manifest import Manifest

    pairs: list[tuple[str, Manifest]] = []
    for loc in inputs:
        try:
            found = read_manifests(loc, key=_settings(config.JITWATCH_MANIFEST_KEY).manifest_key)
        except (ManifestError, StoreError) as exc:
            raise _fail(str(exc)) from None
        many = len(found) > 1 or not found[0][0].endswith(".json")
        own = own_output_name(loc, output, name) if many else None
        if own is not None:
            # The output store read as an input (however either is spelt: -o STORE/fleet.json, a
            # relative path, STORE/.): its `own` manifest is this merge's earlier result, and
            # merging it again would count every host twice (hosts 2 → 4 → 6 on each run).
            if any(src == own for src, _ in found):
                typer.echo(
                    plain(f"jitwatch: skipped {own!r} in {safe_location(loc)}: it is this merge's output"), err=True
                )
            found = [(src, m) for src, m in found if src != own]
        pairs.extend((f"{safe_location(loc)}:{src}" if many else src, m) for src, m in found)
    manifest, report = merge(pairs)
    versions: dict[str, list[str]] = {}
    for src, m in pairs:
        if m.triton_version:
            versions.setdefault(m.triton_version, []).append(src)
    if len(versions) > 1:  # each Triton refuses the other's keys: every replay of the merge reported refusals
        by = "; ".join(
            f"{v}: {', '.join(srcs[:3])}{', …' if len(srcs) > 3 else ''}" for v, srcs in sorted(versions.items())
        )
        typer.echo(
            plain(
                f"jitwatch: the inputs were recorded with {len(versions)} Triton versions ({by}): a replay refuses"
                " the entries of every Triton but its own; merge the manifests of one Triton version"
            ),
            err=True,
        )
    try:
        where = write_manifest(output, manifest, name=name, key=_settings(config.JITWATCH_MANIFEST_KEY).manifest_key)
    except StoreError as exc:
        raise _fail(str(exc), 1) from None
    if as_json:
        typer.echo(json.dumps({"output": where, **report.as_dict()}, indent=2))
    else:
        typer.echo(plain(f"wrote {where}: {report.summary()}"))
        for c in report.conflicts:
            typer.echo(plain(f"  refused: {c.describe()}"), err=True)
    if report.conflicts:
        raise typer.Exit(1)


@warmup_app.command("replay", cls=_Command)
def warmup_replay(
    file: Annotated[
        str,
        typer.Argument(help="Manifest written by `jitwatch manifest export`: a .json file or redis://…/NAME."),
    ],
    allow: AllowOpt = None,
    parallel: Annotated[
        str | None,
        typer.Option(show_default="$JITWATCH_REPLAY_PARALLEL, else auto", help="auto / serial / threads / processes."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, show_default="$JITWATCH_REPLAY_WORKERS, else the CPU count, at most 8", help="Pool size."),
    ] = None,
    compile_only: Annotated[
        bool | None,
        typer.Option(
            "--compile-only/--gpu",
            show_default="--compile-only when no GPU",
            help="Compile for the recorded target without a GPU.",
            **FLAG,
        ),
    ] = None,
    arch: Annotated[
        int | None,
        typer.Option(
            min=1,
            show_default="$JITWATCH_TARGET_ARCH, else 90",
            help="Compute capability for --compile-only (90 = sm_90).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the replay report as JSON.", **FLAG)] = False,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="No progress bar (none either when stderr is not a terminal).", **FLAG)
    ] = False,
) -> None:
    """Precompile every manifest entry (nothing is launched).

    Exit 1 if any entry failed or was refused (a compile option that changes code or reads files,
    or a key its specialization does not reproduce), or if entries were skipped and none compiled (or was cached):
    usually a missing --allow / JITWATCH_MANIFEST_ALLOW.
    """
    from rich.console import Console

    from jitwatch.backends.triton.compile_only import activate, gpu_available
    from jitwatch.errors import ManifestError, StoreError
    from jitwatch.fleet.stores import read_one
    from jitwatch.warmup.replay import replay

    settings = _settings(
        config.JITWATCH_MANIFEST_KEY,
        config.JITWATCH_REPLAY_PARALLEL,
        config.JITWATCH_REPLAY_WORKERS,
        config.JITWATCH_TARGET_ARCH,
    )
    parallel = parallel or settings.replay_parallel
    workers = workers or settings.replay_workers
    arch = arch or settings.target_arch
    if parallel not in ("auto", "serial", "threads", "processes"):
        typer.echo("jitwatch: --parallel must be auto, serial, threads or processes", err=True)
        raise typer.Exit(2)
    try:
        manifest = read_one(file, key=settings.manifest_key)
    except (ManifestError, StoreError) as exc:
        typer.echo(f"jitwatch: {exc}", err=True)
        raise typer.Exit(2) from None
    use_compile_only = (not gpu_available()) if compile_only is None else compile_only
    console = Console(stderr=True)
    if use_compile_only:
        # Left active until exit: restoring Triton's default driver raises on a machine without one.
        activate(arch)
    report = replay(
        manifest,
        allow=_allow(allow),
        parallel=parallel,  # type: ignore[arg-type]
        workers=workers,
        progress=not no_progress and not as_json and console.is_terminal,
        console=console,
    )
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        typer.echo(report.summary())
        for r in report.results:
            if r.status in ("skipped", "refused", "failed"):
                typer.echo(plain(f"  {r.status}: {r.kernel} {_short(r.key)}: {r.reason}"))
    if report.failed or report.refused:
        raise typer.Exit(1)
    if report.skipped and not (report.compiled or report.cached):
        prefixes = _allow(allow)
        needed = _modules_needed(manifest, prefixes)
        skipped_fix = _skipped_fix(report, manifest)
        if skipped_fix is not None:
            fix = skipped_fix
        elif not prefixes:
            fix = (
                "pass --allow MODULE_PREFIX (or set JITWATCH_MANIFEST_ALLOW) for the kernels' modules"
                + needed
                + ", or import them first"
            )
        elif needed:  # an allow-list that does not reach the manifest's modules (`--allow vllm`)
            given = ", ".join(plain(p) for p in prefixes)
            fix = f"the allowed prefixes ({given}) do not cover the kernels' modules{needed}"
        else:
            fix = "make the kernels' modules importable (PYTHONPATH; see the skip reasons above)"
        raise _fail(f"every entry was skipped ({report.skipped}), nothing compiled: {fix}", 1)


def _skipped_fix(report: Any, manifest: Any) -> str | None:
    """The fix when every skipped entry was skipped for one reason that no --allow or PYTHONPATH
    mends (another GPU target, a changed source), else ``None``: the hint said "make the kernels'
    modules importable" for a manifest recorded for sm_80 replayed for sm_90."""
    reasons = [str(r.reason or "") for r in report.results if r.status == "skipped"]
    if all(r.startswith("recorded for target ") for r in reasons):
        archs = sorted({str(e.target.get("arch")) for e in manifest.entries if isinstance(e.target, dict)})
        arch = archs[0] if len(archs) == 1 and archs[0].isdigit() else "N"
        return (
            f"the manifest was recorded for another GPU target ({', '.join(archs[:4])}): replay it on that GPU,"
            f" or with --compile-only --arch {arch} to fill a Triton cache for it"
        )
    if all(r.startswith("source changed since recording") for r in reasons):
        return "the kernels' source changed since recording: record the manifest again from a journal of this source"
    return None


def _submodules_hint(mod: Any, limit: int = 5) -> str:
    """`` (a package: submodules are not searched; name each, e.g. --module p.a --module p.b)`` for
    a package ``mod``, its submodules read from its directory, never imported; ``""`` otherwise."""
    import pkgutil

    try:
        names = [f"{mod.__name__}.{m.name}" for m in pkgutil.iter_modules(mod.__path__)]
    except Exception:  # noqa: BLE001 - a hint only (not a package: no __path__)
        return ""
    if not names:
        return " (a package: submodules are not searched)"
    shown = " ".join(f"--module {n}" for n in names[:limit])
    return f" (a package: submodules are not searched; name each, e.g. {shown}{' …' if len(names) > limit else ''})"


def _modules_needed(manifest: Any, allow: list[str] | None = None, limit: int = 5) -> str:
    """`` (the manifest's: --allow a --allow b)``: the modules its entries name that no prefix in
    ``allow`` allows, as text only (never imported), at most ``limit`` (``, …`` after); ``""`` when
    there is none. Never raises."""
    from jitwatch.warmup.replay import needed_modules

    try:
        names = needed_modules(manifest, allow or ())
    except Exception:  # noqa: BLE001 - a hint only
        return ""
    if not names:
        return ""
    shown = " ".join(f"--allow {shlex.quote(plain(n))}" for n in names[:limit])
    return f" (the manifest's: {shown}{', …' if len(names) > limit else ''})"


@app.command(cls=_Command)
def why(
    journal_dir: ReadJournalDirOpt = None,
    kernel: Annotated[str | None, typer.Option("--kernel", "-k", help="Only this kernel (Triton: fn.name).")] = None,
    backend: Annotated[str | None, typer.Option(help="Only this JIT backend (e.g. triton).")] = None,
    rank: Annotated[int | None, typer.Option(min=0, max=config.MAX_RANK, help="Only this rank's compiles.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=10_000, help="The newest N serving compiles (shown oldest first).")
    ] = 20,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the reasons as JSON (a list, oldest first).", **FLAG)
    ] = False,
) -> None:
    """Why each serving compile happened (which argument, option or combination) and the fix.

    The newest --limit serving compiles, oldest first, as text or --json: with whether each was a
    disk-cache hit or a cold compile (when the backend says) and where the kernel comes from
    (its module, or file:line with the home directory as ~).
    """
    from jitwatch.backends.explain import local_jitwatch
    from jitwatch.core.events import EventKind, Phase
    from jitwatch.store.journal import Journal
    from jitwatch.views.diagnosis import serving_reasons

    _check_backend(backend)
    unfiltered: dict[str, int] = {}  # backend → serving compiles, when the filters found none
    with _read_journal(journal_dir, _journal_settings(journal_dir)) as jdir, Journal(jdir, readonly=True) as journal:
        command = local_jitwatch()  # the fixes' commands, runnable as printed (no activated venv)
        reasons = serving_reasons(journal, kernel=kernel, backend=backend, rank=rank, limit=limit, command=command)
        if not reasons and (kernel is not None or backend is not None or rank is not None):
            for row in journal.stats():
                if row.kind == EventKind.COMPILE.value and row.phase == Phase.SERVING:
                    unfiltered[row.backend] = unfiltered.get(row.backend, 0) + row.count
    reasons.reverse()  # the newest `limit`, shown oldest first, like a log: text and --json alike
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in reasons], indent=2))
        return
    if not reasons:
        given = (("--kernel", kernel), ("--backend", backend), ("--rank", rank))
        filters = [f"{option} {value}" for option, value in given if value is not None]
        message = (
            "no serving-phase compiles" + (f" matching {' '.join(filters)}" if filters else "") + " in the journal"
        )
        if filters and unfiltered:
            by_backend = ", ".join(f"{n} of {name or '(no backend)'}" for name, n in sorted(unfiltered.items()))
            message += f" (without those filters: {by_backend})"
        typer.echo(plain(message))
        return
    for r in reasons:
        when = utc_time(r.ts)
        took = f"{r.duration_s:.3f} s" if r.duration_s is not None else "?"
        disk = {True: ", disk-cache hit", False: ", cold compile", None: ""}[r.cache_hit]
        req = f", request {r.request_id}" if r.request_id is not None else ""
        typer.echo(plain(f"{when} rank {r.rank} {r.backend} {r.kernel} compiled in serving ({took}{disk}{req})"))
        origin = [f"module {r.module}"] if r.module else []
        origin += [r.location] if r.location else []
        if origin:
            typer.echo(plain(f"  from: {', '.join(origin)}"))
        typer.echo(plain(f"  why: {r.reason}"))
        for fix in r.fixes:
            typer.echo(plain(f"  fix: {fix}"))  # its manifest commands name the journal read (runnable_fix)


@app.command(cls=_Command)
def coverage(
    journal_dir: ReadJournalDirOpt = None,
    allow: AllowOpt = None,
    manifest: Annotated[
        list[str] | None,
        typer.Option(
            "--manifest",
            help="Manifest (file, directory store or redis:// URL) whose keys are expected (repeatable).",
        ),
    ] = None,
    expect_journal: Annotated[
        list[Path] | None,
        typer.Option(
            "--expect-journal",
            readable=False,
            help="A previous run's journal directory: its serving compiles are expected (repeatable).",
        ),
    ] = None,
    module: Annotated[
        list[str] | None,
        typer.Option(
            "--module",
            help="Module (under --allow) whose @triton.jit kernels must be compiled before serving (repeatable).",
        ),
    ] = None,
    require_complete: Annotated[
        bool,
        typer.Option(
            "--require-complete",
            help="Exit 1, listing them, when expected keys or kernels were not compiled before serving, or when"
            " the journal has no compile at all: nothing to check (for CI).",
            **FLAG,
        ),
    ] = False,
    fail_on_other_source: Annotated[
        bool,
        typer.Option(
            "--fail-on-other-source",
            help="With --require-complete, exit 1 on every --manifest / --expect-journal key recorded for another"
            " source of its kernel that cannot occur any more (do_not_specialize or the arguments changed), also"
            " those compared as the key the same launch compiles now: until the manifest is re-recorded.",
            **FLAG,
        ),
    ] = False,
    allow_other_source: Annotated[
        bool,
        typer.Option(
            "--allow-other-source",
            help="With --require-complete, do not exit 1 on keys recorded for another source of their kernel that"
            " nothing stands for now (not compared: by default they fail the gate, since no compile of this"
            " journal can show them covered).",
            **FLAG,
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the coverage report as JSON.", **FLAG)] = False,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Also list every argument's classes.", **FLAG)
    ] = False,
) -> None:
    """Specialization coverage per kernel and per exact key: what warmup compiled, what it missed.

    Expected keys recorded for another source of their kernel that cannot occur any more (its
    do_not_specialize or its arguments changed since the manifest or the expected journal was
    recorded) are listed apart; the key the same launch compiles now is compared in their place
    where there is one. --require-complete fails on those that nothing stands for (not
    compared) unless --allow-other-source, and on all of them with --fail-on-other-source.
    A missing key recorded with another source hash (still possible) is compared, and its reason
    says so."""
    import importlib
    import sys

    from rich.console import Console

    from jitwatch.backends.explain import local_jitwatch, shell_word
    from jitwatch.backends.triton.resolve import module_allowed
    from jitwatch.cli.render import render_coverage
    from jitwatch.errors import ManifestError, StoreError
    from jitwatch.fleet.stores import read_one
    from jitwatch.store.journal import Journal
    from jitwatch.views.coverage import (
        Expected,
        coverage_for_journal,
        expected_from_journal,
        kernels_for_report,
        known_kernels,
    )

    settings = _journal_settings(journal_dir, config.JITWATCH_MANIFEST_KEY)
    journal_read = _read_journal(journal_dir, settings)
    for prev in expect_journal or []:
        _check_journal_dir(prev, None, "--expect-journal")
    expected: list[Expected] = []
    try:
        for source in manifest or []:
            for e in read_one(source, key=settings.manifest_key).entries:
                if e.backend == "triton":
                    attrs = {"signature": e.signature, "constexprs": e.constexprs, "options": e.options}
                    expected.append(Expected(e.qualname, e.key, attrs, "manifest", e.module, e.source_hash))
    except (ManifestError, StoreError) as exc:
        raise _fail(str(exc)) from None
    modules = []
    for name in module or []:
        if not module_allowed(name, _allow(allow)):
            raise _fail(f"--module {name}: not under an allowed prefix (pass --allow {name.split('.')[0]})")
        try:
            modules.append(sys.modules.get(name) or importlib.import_module(name))
        except Exception as exc:  # noqa: BLE001 - the user's module failed to import
            raise _fail(f"--module {name}: import failed: {type(exc).__name__}: {exc}") from None
        if not known_kernels(modules[-1:]):  # a package: its kernels' modules are not searched
            raise _fail(f"--module {name}: defines no @triton.jit kernel{_submodules_hint(modules[-1])}")
    with journal_read as jdir:
        for prev in expect_journal or []:
            try:  # an --expect-journal's error is not the journal's
                with Journal(prev, readonly=True) as old:
                    expected += expected_from_journal(old, source="journal")
            except JOURNAL_READ_ERRORS as exc:
                raise _fail(f"--expect-journal {Path(prev)}: {exc}", 1) from None
        with Journal(jdir, readonly=True) as journal:
            known = known_kernels(modules)
            command = local_jitwatch()  # the fixes' commands, runnable as printed (no activated venv)
            report = coverage_for_journal(journal, expected=expected, known=known, command=command)
            if _allow(allow):
                report = coverage_for_journal(
                    journal,
                    kernels=kernels_for_report(report, _allow(allow)),
                    expected=expected,
                    known=known,
                    command=command,
                )
    pointer = _demo_journal_pointer(jdir) if report.nothing_to_check else None
    if as_json:  # complete, nothing_to_check and its reason included (CoverageReport's computed fields)
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2))
    elif not (report.nothing_to_check and require_complete):  # else the one line below says it all
        render_coverage(report, Console(), verbose=verbose)
        if report.nothing_to_check:  # what writes a journal, and an example of one
            typer.echo(
                plain(
                    "  workers write the journal in their JITWATCH_DIR (jitwatch.install(), the vLLM plugin):"
                    f" run them with JITWATCH_DIR={shell_word(str(jdir))}, or read theirs with --journal-dir"
                )
            )
            typer.echo(
                f"  {pointer}"
                if pointer
                else "  an example: jitwatch demo --exit writes a journal and prints the coverage command that reads it"
            )
    if require_complete and report.nothing_to_check:
        raise _fail(
            f"coverage --require-complete: nothing to check: {report.nothing_to_check_reason}"
            + (f" ({pointer})" if pointer else " (is it the journal the workers write? --journal-dir / JITWATCH_DIR)"),
            1,
        )
    other_source = report.of_other_source()
    if other_source:  # on stderr, so that a CI log shows it beside the exit status (and --json stays JSON)
        typer.echo(
            f"jitwatch: {plural(len(other_source), 'expected key')} recorded for another source of"
            " their kernel, impossible as recorded: re-record the manifest / expected journal from a run of the"
            " current source",
            err=True,
        )
        for line in other_source:
            typer.echo(plain(f"  {line}"), err=True)
    if require_complete and report.complete and other_source:
        failing = (
            other_source
            if fail_on_other_source
            else []
            if allow_other_source
            else report.of_other_source(uncompared_only=True)
        )
        if failing:  # a gate must not pass on what it did not check
            typer.echo(
                f"jitwatch: coverage --require-complete: {plural(len(failing), 'expected key')} of another source"
                + (
                    " (--fail-on-other-source)"
                    if fail_on_other_source
                    else " not compared (nothing stands for them now; --allow-other-source to pass anyway)"
                ),
                err=True,
            )
            raise typer.Exit(1)
    if require_complete and not report.complete:
        missing = report.incomplete()
        typer.echo(
            f"jitwatch: coverage incomplete: {plural(len(missing), 'expected key')} not compiled before serving",
            err=True,
        )
        for line in missing:
            typer.echo(plain(f"  {line}"), err=True)
        raise typer.Exit(1)


# ---------------------------------------------------------------------------------------- caches
cache_app = typer.Typer(
    cls=_Group,
    rich_markup_mode=None,
    help="Compile caches: check a Triton cache against a manifest.",
    no_args_is_help=True,
)
app.add_typer(cache_app, name="cache")


def triton_cache_dir() -> Path:
    """The directory Triton's own file cache uses (``triton.knobs.cache.dir``, Triton 3.6-3.9):
    ``TRITON_CACHE_DIR``, else ``$TRITON_HOME/.triton/cache`` (``TRITON_HOME`` defaulting to the
    home directory). Read from the environment, without importing Triton."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return Path(os.environ["TRITON_CACHE_DIR"])
    return Path(os.environ.get("TRITON_HOME") or Path.home()) / ".triton" / "cache"


@cache_app.command("check", cls=_Command)
def cache_check(
    manifest: Annotated[str, typer.Argument(help="The keys production needs: a .json manifest or redis://…/NAME.")],
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            help="A local Triton cache directory. Default (no --redis): Triton's own, TRITON_CACHE_DIR"
            " else ~/.triton/cache.",
        ),
    ] = None,
    redis_url: Annotated[
        str | None,
        typer.Option("--redis", help="Triton's Redis remote cache: redis://HOST:PORT[/DB] (TRITON_REDIS_HOST/PORT)."),
    ] = None,
    key_format: Annotated[
        str, typer.Option(help="Triton's TRITON_REDIS_KEY_FORMAT of that cache.")
    ] = "triton:{key}:{filename}",
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.", **FLAG)] = False,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="List every key, not only problems.", **FLAG)
    ] = False,
    scan_all: Annotated[
        bool,
        typer.Option("--all", help="Also check every other entry of the cache for corruption.", **FLAG),
    ] = False,
) -> None:
    """Which of a manifest's keys a Triton cache would load, which would compile, which are corrupt.

    Exit 0 when every key would load; 1 when keys are missing or corrupt (or none could be
    checked, or --all found a corrupt entry anywhere in the cache); 2 when the manifest or the
    cache cannot be read.
    """
    from jitwatch.errors import ManifestError, StoreError
    from jitwatch.fleet.cache_check import LocalCache, RedisCache, TritonCache, check, scan
    from jitwatch.fleet.stores import read_one

    if cache_dir is not None and redis_url is not None:
        raise _fail("give one of --cache-dir DIR and --redis redis://HOST:PORT, not both")
    if cache_dir is None and redis_url is None:
        cache_dir = triton_cache_dir()
        typer.echo(
            f"cache: {cache_dir} (Triton's default: TRITON_CACHE_DIR, else $TRITON_HOME/.triton/cache)", err=True
        )
    try:
        wanted = read_one(manifest, key=_settings(config.JITWATCH_MANIFEST_KEY).manifest_key)
        cache: TritonCache = (
            LocalCache(cache_dir) if cache_dir is not None else RedisCache(str(redis_url), key_format=key_format)
        )
        report = check(wanted, cache)
        if scan_all:
            scan(report, cache)
    except (ManifestError, StoreError) as exc:
        raise _fail(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        typer.echo(report.summary())
        fs = report.filesystem
        if fs is not None and fs.network:
            typer.echo(f"  warning: {fs.mount_point} is {fs.fstype} ({fs.source}): {fs.note}")
        for r in report.results:
            if verbose or r.status != "ok":
                reason = f": {r.reason}" if r.reason else ""
                typer.echo(plain(f"  {r.status}: {r.kernel} {_short(r.key)}{reason}"))
        for key, why in report.corrupt_entries:
            typer.echo(plain(f"  corrupt entry {key[:16]}…: {why}"))
    if not report.complete:
        raise typer.Exit(1)
