"""``jitwatch demo``: a sidecar and a worker process with real Triton compiles, end to end.

The parent process (this module) resets a journal directory, starts the sidecar
(:func:`jitwatch.sidecar.create_app` under uvicorn, in a thread) on ``127.0.0.1:9400`` and the
worker (:mod:`jitwatch.demo.worker`) as a separate process sharing the journal, like a real
inference worker. It polls ``/readyz`` while the worker warms up (503 → 200), then prints a
summary built from the sidecar's ``/jit`` and keeps the sidecar and the worker serving until
Ctrl-C (or exits, with ``--exit``).

Triton's disk cache: a fresh temporary ``TRITON_CACHE_DIR`` per run (cold compiles, as on a new
node), unless ``keep_triton_cache``.

The journal directory defaults to ``<JITWATCH_DIR>/demo-<port>`` (one per port, so two demos on
different ports never reset each other's journal); a journal there that no demo created, or that a
process other than a demo's worker wrote to, is not reset without ``force``
(:func:`check_journal_is_the_demos`, :func:`check_journal_writers`). It is locked (``fcntl.flock``
on :data:`LOCK_FILE` inside it) for the demo's lifetime: a second demo on the same directory refuses.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jitwatch.backends.explain import MANIFEST_BACKENDS, shell_word
from jitwatch.config import DEFAULT_HOST, DEFAULT_PORT, JITWATCH_HOST, JITWATCH_PORT, Settings
from jitwatch.errors import DemoError, DemoSetupError
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.store.safety import make_private_dirs, prepare_writer_dir
from jitwatch.text import jitwatch_command, plural, shown_name

STOPPED_LINE = "jitwatch demo: stopped (worker and sidecar shut down)"
"""What the demo prints (stdout) when Ctrl-C or SIGTERM stops it while it serves after the
scenario (exit 0). Before the scenario finished the CLI prints ``jitwatch demo: stopped`` on
stderr (exit 130)."""

DEMO_SUBDIR = "demo"
"""Default journal directory: ``<JITWATCH_DIR>/demo-<port>``."""
LOCK_FILE = "demo.lock"
"""Lock file inside the demo's journal directory (``fcntl.flock``, exclusive, held while running)."""
DEMO_LABEL = "jitwatch_demo"
"""The demo worker's label (:attr:`jitwatch.WorkerIdentity.labels`, value :data:`DEMO_LABEL_VALUE`):
on its worker row (and on every event it writes). A journal where every process that wrote has a
worker row with it holds nothing but the demo's own (:func:`check_journal_writers`)."""
DEMO_LABEL_VALUE = "worker"


@dataclass
class DemoOptions:
    """What ``jitwatch demo`` was asked to do (see the CLI's help for each)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    journal_dir: Path | None = None
    no_warmup: bool = False
    specialize_num_tokens: bool = False
    exit_after: bool = False
    keep_triton_cache: bool = False
    output_dir: Path | None = None
    worker_timeout_s: float = 300.0
    force: bool = False
    """Reset a journal the demo did not create (:func:`check_journal_is_the_demos`)."""


@dataclass
class DemoReport:
    """What the demo saw: the worker's progress messages and the sidecar's answers."""

    journal_dir: Path
    url: str
    worker: dict[str, Any] = field(default_factory=dict)
    warmup: dict[str, Any] = field(default_factory=dict)
    scenario: dict[str, Any] = field(default_factory=dict)
    readyz: list[tuple[float, int]] = field(default_factory=list)
    """``/readyz``'s changes of status, ``(seconds since the worker's spawn, HTTP status)``."""
    worker_started_s: float | None = None
    """Seconds from the worker's spawn to its ``started`` message (imports, ``jitwatch.install()``,
    its engine): the part of the ``/readyz`` times before its warmup began; ``None`` if unknown."""
    jit: dict[str, Any] = field(default_factory=dict)
    metrics: str = ""
    demo_args: list[str] = field(default_factory=list)
    """The ``jitwatch demo`` options that run this demo again on the same journal and port
    (:func:`demo_args`): the summary's command that replays the manifest."""
    manifest_modules: list[str] = field(default_factory=list)
    """The modules of the kernels a manifest exported from this journal holds
    (:func:`manifest_modules`): the summary's ``JITWATCH_MANIFEST_ALLOW``, the same prefixes the
    never-warmed fix names (each kernel's own module); empty: :data:`DEMO_MANIFEST_ALLOW`."""


DEMO_MANIFEST_ALLOW = "jitwatch.kernels"
"""The allow prefix of every demo kernel: the summary's ``JITWATCH_MANIFEST_ALLOW`` when the
journal's manifest could not be read (:attr:`DemoReport.manifest_modules` empty)."""


def manifest_modules(journal_dir: Path) -> list[str]:
    """The distinct modules (dotted names, in entry order) of the entries ``jitwatch manifest
    export`` would write from the journal in ``journal_dir`` (:func:`jitwatch.warmup.manifest.build`,
    serving compiles): the narrowest ``JITWATCH_MANIFEST_ALLOW`` that lets the worker's warmup
    replay them, each kernel's own module, as the never-warmed fix names it
    (:func:`jitwatch.backends.explain.warm_fix`). Reads the journal; nothing is imported. ``[]``
    when there is no journal or it cannot be read (never raises)."""
    from jitwatch.backends.explain import is_module_name
    from jitwatch.warmup.manifest import build

    try:
        manifest, _ = build(journal_dir)
    except Exception:  # noqa: BLE001 - the summary falls back to the demo's package prefix
        return []
    return list(dict.fromkeys(e.module for e in manifest.entries if is_module_name(e.module)))


def demo_args(opts: DemoOptions, journal_dir: Path) -> list[str]:
    """The ``jitwatch demo`` options (unquoted) that run ``opts`` again on ``journal_dir``; the
    output directory and ``--force`` are left out. Never raises."""
    args = ["--journal-dir", str(journal_dir), "--port", str(opts.port)]
    args += ["--host", opts.host] if opts.host != DEFAULT_HOST else []
    flags = (
        (opts.no_warmup, "--no-warmup"),
        (opts.specialize_num_tokens, "--specialize-num-tokens"),
        (opts.exit_after, "--exit"),
        (opts.keep_triton_cache, "--keep-triton-cache"),
    )
    return args + [flag for on, flag in flags if on]


def default_journal_dir(port: int = DEFAULT_PORT, settings: Settings | None = None) -> Path:
    """``<configured journal dir>/demo-<port>`` (``JITWATCH_DIR`` or ``~/.local/state/jitwatch``).

    Raises :class:`~jitwatch.config.ConfigError` for a bad ``JITWATCH_*`` value (``settings`` unset).
    """
    settings = settings or Settings.from_env()
    return settings.journal_dir / f"{DEMO_SUBDIR}-{port}"


def _prepare_dir(directory: Path, what: str) -> None:
    """Create ``directory`` and its missing parents (0700 whatever the umask:
    :func:`jitwatch.store.safety.make_private_dirs`) if missing; :class:`DemoSetupError` if it is a
    file or cannot be created or written (or looked up: a name too long, a symlink loop)."""
    try:
        os.stat(directory)
    except (FileNotFoundError, NotADirectoryError):
        pass  # missing (created below), or a file above it (named below)
    except PermissionError:
        pass  # said below (cannot create / not writable)
    except OSError as exc:  # ENAMETOOLONG, ELOOP: Path.exists raised them (a traceback)
        raise DemoSetupError(f"{what} {directory} cannot be looked up: {exc.strerror or exc}") from None
    if directory.exists() and not directory.is_dir():
        raise DemoSetupError(f"{what} {directory} is not a directory")
    for parent in directory.parents:
        if parent.exists():
            if not parent.is_dir():
                raise DemoSetupError(f"cannot create {what} {directory}: {parent} is not a directory")
            break
    try:
        make_private_dirs(directory)
    except OSError as exc:
        raise DemoSetupError(f"cannot create {what} {directory}: {exc.strerror or exc}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise DemoSetupError(f"{what} {directory} is not writable")


@contextlib.contextmanager
def journal_lock(directory: Path, check: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``directory/demo.lock`` (non-blocking). ``check`` runs
    once the lock is held, before the file is truncated to this process's pid: what it raises
    leaves the file as it was (the lock released).

    Raises:
        DemoSetupError: another demo holds the lock, or the lock file is a symlink (opened
            ``O_NOFOLLOW``: it is truncated to the pid) or cannot be opened; or what ``check`` raised.
    """
    import errno
    import fcntl

    path = directory / LOCK_FILE
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)  # never through a symlink: it is truncated below
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DemoSetupError(f"the lock file {path} is a symlink; refusing to follow it (remove it)") from None
        raise DemoSetupError(f"cannot open the lock file {path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise DemoSetupError(
                f"another jitwatch demo is using the journal directory {directory} "
                "(stop it, or pass --journal-dir / --port)"
            ) from None
        if check is not None:
            check()
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def check_journal_is_the_demos(directory: Path) -> None:
    """Refuse a ``directory`` that holds a journal (``journal.db`` or its ``-wal``) the demo did not
    create: one where no demo ran, i.e. without the demo's :data:`LOCK_FILE`, which every demo
    leaves there (``--journal-dir`` pointed at a real worker's journal: the demo's reset would
    delete it). Only ``stat``; nothing is opened. A ``demo.lock`` proves only that a demo ran there
    once: what was written since is checked by :func:`check_journal_writers`.

    Raises:
        DemoSetupError: such a journal is there (pass ``force``/``--force`` to reset it anyway).
    """
    journal = [directory / (JOURNAL_FILE + suffix) for suffix in ("", "-wal")]
    if any(p.exists() for p in journal) and not (directory / LOCK_FILE).exists():
        raise DemoSetupError(
            f"{directory} holds a journal that jitwatch demo did not create (no {LOCK_FILE}): the demo resets"
            " its journal at start; pass --force to reset it, or another --journal-dir"
        )


def check_journal_writers(directory: Path) -> None:
    """Refuse a journal in ``directory`` that holds anything a process other than a demo's worker
    wrote: every process with events or a worker row in it must have a worker row with the demo
    worker's label (:data:`DEMO_LABEL`). A real worker writes its own row (``worker_start``, which
    replaces any row of the same host, pid and rank) without that label, so what it wrote is found
    however the demo that wrote there before ended (``kill -9`` too). Nothing is written: the
    journal is opened read-only; a directory without ``journal.db`` passes (nothing to lose).

    Raises:
        DemoSetupError: such a process wrote there, or the journal cannot be read (so the demo
            cannot tell); pass ``force``/``--force`` to reset it anyway.
    """
    if not os.path.lexists(directory / JOURNAL_FILE):
        return
    refusal = "the demo resets its journal at start; pass --force to reset it, or another --journal-dir"
    try:
        with Journal(directory, readonly=True) as journal:
            writers = journal.writers()
    except Exception as exc:  # noqa: BLE001 - whatever stops the read: the demo cannot tell, so refuses
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise DemoSetupError(
            f"{directory} holds a journal that jitwatch demo cannot read ({why}), so it cannot tell whether"
            f" only a demo wrote it: {refusal}"
        ) from None
    foreign = [
        (key, events)
        for key, (events, attrs) in writers.items()
        if attrs is None or attrs.get(DEMO_LABEL) != DEMO_LABEL_VALUE
    ]
    if not foreign:
        return

    def what(events: int) -> str:
        return plural(events, "event") if events else "a worker row"

    if len(foreign) == 1:
        ((host, pid, rank), events), *_ = foreign
        who, found = "a process", f"{what(events)} of pid {pid} on host {host} (rank {rank})"
    else:
        each = "; ".join(
            f"pid {pid} on host {host}, rank {rank}: {what(events)}" for (host, pid, rank), events in foreign[:3]
        )
        more = f"; and {plural(len(foreign) - 3, 'other')}" if len(foreign) > 3 else ""
        total = sum(events for _, events in foreign)
        who, found = f"{len(foreign)} processes", f"{plural(total, 'event')} ({each}{more})"
    raise DemoSetupError(
        f"{directory} holds a journal that {who} other than jitwatch demo's worker wrote to: {found}; {refusal}"
    )


def reset_journal(directory: Path) -> None:
    """Remove the journal files (only those) in ``directory``; create it (0700, and its missing
    parents: :func:`jitwatch.store.safety.make_private_dirs`) if missing."""
    make_private_dirs(directory)
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            (directory / (JOURNAL_FILE + suffix)).unlink()


class _Sidecar:
    """uvicorn serving the sidecar app in a daemon thread."""

    def __init__(self, host: str, port: int, journal_dir: Path) -> None:
        import uvicorn

        from jitwatch.config import Settings
        from jitwatch.sidecar import create_app, server_options, warn_all_interfaces

        # host and port are the demo's own (--host/--port, or the variables the CLI read): not re-read.
        settings = Settings.from_env(strict=False).require_all_but(JITWATCH_HOST, JITWATCH_PORT)
        app = create_app(journal_dir=journal_dir, token=None, settings=settings)
        warn_all_interfaces(host, None)  # as `jitwatch serve` does: the demo's sidecar has no token
        # The same guards as `jitwatch serve` (head timeout, connection cap, Host check).
        served, options = server_options(app, host, port, None, settings, log_level="warning", access_log=False)
        config = uvicorn.Config(served, **options)
        self.server = uvicorn.Server(config)
        # uvicorn leaves signal handlers alone when it runs outside the main thread (Ctrl-C stays ours).
        self.thread = threading.Thread(target=self.server.run, name="jitwatch-demo-sidecar", daemon=True)

    def start(self, timeout: float = 15.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise DemoError("the sidecar did not start (is the port in use? try --port)")
            if time.monotonic() > deadline:
                raise DemoError("the sidecar did not start in time")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _check_port(host: str, port: int) -> None:
    """:func:`jitwatch.sidecar.check_bind` (``SO_REUSEADDR``, as uvicorn): a port left in
    ``TIME_WAIT`` by a demo just stopped is free again; one with a listener is not."""
    from jitwatch.sidecar import PortUnavailableError, check_bind

    try:
        check_bind(host, port)
    except PortUnavailableError as exc:
        raise DemoSetupError(f"{exc} (use --port)") from None


@contextlib.contextmanager
def _triton_cache(keep: bool) -> Iterator[dict[str, str]]:
    if keep:
        yield {}
        return
    path = tempfile.mkdtemp(prefix="jitwatch-demo-triton-")
    try:
        yield {"TRITON_CACHE_DIR": path}
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _worker_cmd(opts: DemoOptions, journal_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "jitwatch.demo.worker", "--journal-dir", str(journal_dir)]
    if opts.no_warmup:
        cmd.append("--no-warmup")
    if opts.specialize_num_tokens:
        cmd.append("--specialize-num-tokens")
    if opts.exit_after:  # the worker exits once the summary has read it serving (stdin closed)
        cmd += ["--exit", "--exit-when-stdin-closes"]
    return cmd


class _LineReader:
    """Reads the worker's JSON lines on a thread; the main thread waits for named events."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.events: dict[str, dict[str, Any]] = {}
        self.arrived: dict[str, float] = {}
        """``time.monotonic()`` when each message arrived."""
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                sys.stderr.write(line)
                continue
            with self.cond:
                self.events[str(msg.get("event"))] = msg
                self.arrived[str(msg.get("event"))] = time.monotonic()
                self.cond.notify_all()
        with self.cond:
            self.events.setdefault("_eof", {})
            self.cond.notify_all()

    def wait(self, name: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while name not in self.events:
                if "_eof" in self.events:
                    code = self.proc.wait()
                    stopped = self.events.get("serving_compile_error")
                    if stopped is not None:
                        raise DemoError(
                            "JITWATCH_MODE=error stopped the worker on the serving compile of "
                            f"{stopped.get('kernel')} (that is what error mode does: a compile warmup "
                            "missed is fatal); run with JITWATCH_MODE=warn to serve through it"
                        )
                    raise DemoError(f"the worker exited (code {code}) before {name!r}; see its log above")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DemoError(f"the worker did not reach {name!r} within {timeout:.0f}s")
                self.cond.wait(min(left, 0.05))
            return self.events[name]

    def seen(self, name: str) -> bool:
        with self.cond:
            return name in self.events or "_eof" in self.events


def run_demo(opts: DemoOptions, console: Any | None = None) -> DemoReport:
    """Run the demo (blocking). Returns what it saw; serves until Ctrl-C unless ``exit_after``.

    Before anything runs: the journal directory (default :func:`default_journal_dir`) and
    ``output_dir`` must be (creatable) directories, the journal directory one the journal writer
    accepts (:func:`jitwatch.store.safety.prepare_writer_dir`: not another user's), a journal already in it
    must be one a demo created (:func:`check_journal_is_the_demos`; ``force`` skips this), the
    port must be free (``SO_REUSEADDR``) and the journal directory's lock (:func:`journal_lock`)
    free; then, under the lock, nothing in the journal may come from a process other than a demo's
    worker (:func:`check_journal_writers`; ``force`` skips this too). SIGTERM stops the demo like
    Ctrl-C.

    Raises:
        DemoSetupError: one of those checks failed, or a bad ``JITWATCH_*`` value (an unknown
            backend in ``JITWATCH_BACKENDS`` too: the worker would refuse it).
        DemoError: the sidecar or the worker failed (including ``JITWATCH_MODE=error`` stopping
            the worker on a serving-phase compile).
        KeyboardInterrupt: Ctrl-C or SIGTERM before the scenario completed (cleaned up).
    """
    from rich.console import Console

    from jitwatch.backends import check_names
    from jitwatch.config import ConfigError, Mode
    from jitwatch.errors import BackendError

    console = console or Console()
    try:
        journal_dir = Path(opts.journal_dir) if opts.journal_dir is not None else default_journal_dir(opts.port)
        # The worker reads these too: check them here, so a bad value is one line, not a worker traceback.
        # opts.host / opts.port replace JITWATCH_HOST / JITWATCH_PORT: a bad value of those is not read.
        settings = Settings.from_env(strict=False).require_all_but(JITWATCH_HOST, JITWATCH_PORT)
        settings.rank()
        if settings.backends:
            check_names(settings.backends)
        if settings.mode is Mode.OFF:
            raise DemoSetupError("JITWATCH_MODE=off records nothing, so there is nothing to show; unset it or use warn")
    except (ConfigError, BackendError) as exc:
        raise DemoSetupError(str(exc)) from None
    _prepare_dir(journal_dir, "journal directory")
    try:  # the journal writer's own check, before the reset and the lock touch anything there
        prepare_writer_dir(journal_dir)
    except OSError as exc:  # JournalUnsafeError: another user's directory, or a replaceable symlink
        raise DemoSetupError(str(exc)) from None
    if not opts.force:
        check_journal_is_the_demos(journal_dir)
    if opts.output_dir is not None:
        _prepare_dir(Path(opts.output_dir), "output directory")
    _check_port(opts.host, opts.port)
    # The journal's writers are checked under the lock: no other demo resets or writes it meanwhile.
    check = None if opts.force else lambda: check_journal_writers(journal_dir)
    with journal_lock(journal_dir, check), _sigterm_as_interrupt():
        return _run_locked(opts, journal_dir, console)


def _run_locked(opts: DemoOptions, journal_dir: Path, console: Any) -> DemoReport:
    import httpx

    reset_journal(journal_dir)
    # Create the empty journal now, so the sidecar never reads a half-initialised file.
    Journal(journal_dir).close()
    host = f"[{opts.host}]" if ":" in opts.host else opts.host
    url = f"http://{host}:{opts.port}"
    report = DemoReport(journal_dir=journal_dir, url=url, demo_args=demo_args(opts, journal_dir))

    sidecar = _Sidecar(opts.host, opts.port, journal_dir)
    sidecar.start()
    from rich.markup import escape

    # the directory is the user's (--journal-dir): text, not markup ("[/b]" raised MarkupError)
    console.print(  # unwrapped, as the summary's commands: the path stays whole, one copy away
        f"[bold]jitwatch demo[/bold]: sidecar on {escape(url)} (journal {escape(shown_name(journal_dir))})",
        soft_wrap=True,
    )
    proc: subprocess.Popen[str] | None = None
    serving = stopped = False
    try:
        with _triton_cache(opts.keep_triton_cache) as cache_env, httpx.Client(base_url=url, timeout=5.0) as client:
            try:
                env = {**os.environ, **cache_env, "PYTHONUNBUFFERED": "1"}
                env.pop("TRITON_INTERPRET", None)
                t0 = time.monotonic()  # the /readyz times and the worker's start-up count from here
                proc = subprocess.Popen(
                    _worker_cmd(opts, journal_dir), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
                reader = _LineReader(proc)
                # /readyz from the worker's spawn on: 503 (no worker, then warmup running) until the
                # warmup completes, then 200. Only changes of status are kept.
                while time.monotonic() - t0 < opts.worker_timeout_s:
                    code = client.get("/readyz").status_code
                    if not report.readyz or report.readyz[-1][1] != code:
                        report.readyz.append((round(time.monotonic() - t0, 3), code))
                    if (code == 200 and reader.seen("warmup_complete")) or "_eof" in reader.events:
                        break
                    time.sleep(0.05)
                report.worker = reader.wait("started", opts.worker_timeout_s)
                report.worker_started_s = round(reader.arrived["started"] - t0, 3)
                console.print(
                    f"worker pid {report.worker.get('pid')} on {report.worker.get('device')}; "
                    f"TRITON_CACHE_DIR={'(yours)' if opts.keep_triton_cache else 'fresh temporary directory'}"
                )
                report.warmup = reader.wait("warmup_complete", opts.worker_timeout_s)
                report.scenario = reader.wait("scenario_done", opts.worker_timeout_s)
                report.jit = client.get("/jit").json()
                report.metrics = client.get("/metrics").text
                report.manifest_modules = manifest_modules(journal_dir)
                print_summary(report, console)
                if opts.output_dir is not None:
                    save_report(report, Path(opts.output_dir))
                if opts.exit_after:
                    _close_stdin(proc)  # the worker exits: its rank turns stopped (/readyz 503)
                    code = proc.wait(timeout=opts.worker_timeout_s)
                    if code != 0:
                        raise DemoError(f"the worker exited with code {code}")
                else:
                    serving = True  # from here on, Ctrl-C / SIGTERM is the normal way to stop
                    console.print(
                        f"\nServing (one step a second). Try:  curl {url}/jit   curl {url}/metrics   "
                        f"{jitwatch_command()} status --url {url}\nCtrl-C to stop.",
                        markup=False,
                        soft_wrap=True,
                    )
                    while proc.poll() is None:
                        time.sleep(0.5)
                    # The worker ended on its own: a signal it handles (Ctrl-C reaches it too) is
                    # exit 0, stopped; anything else (kill -9, a crash) must not end the demo silently.
                    if proc.returncode != 0:
                        raise DemoError(
                            f"the worker exited while serving ({_exit_status(proc.returncode)}); "
                            "the sidecar is shut down"
                        )
                    stopped = True
            finally:
                # Stop the worker while its temporary Triton cache still exists: removing the
                # directory under a compiling worker lets it recreate files there (interrupted runs
                # left jitwatch-demo-triton-* behind).
                _stop_worker(proc)
    except KeyboardInterrupt:
        if not serving:
            raise
        stopped = True
    finally:
        _stop_worker(proc)
        sidecar.stop()
    if stopped:
        console.print(STOPPED_LINE)
    return report


def _exit_status(code: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL`` (a negative ``returncode``)."""
    import signal

    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _close_stdin(proc: subprocess.Popen[str]) -> None:
    """Close the worker's stdin (its signal to exit after the scenario); never raises."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass


def _stop_worker(proc: subprocess.Popen[str] | None) -> None:
    """Terminate the demo worker (kill after 10 s) and reap it; nothing if it already exited."""
    if proc is None or proc.poll() is not None:
        return
    _close_stdin(proc)  # a worker waiting for it (--exit) stops at once
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, ``docker stop``) stops the demo like Ctrl-C: worker and sidecar cleaned
    up. The previous handler is restored on exit. Only in the main thread (signals need it)."""
    import signal

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def save_report(report: DemoReport, directory: Path) -> None:
    """Write ``jit.json``, ``metrics.txt`` and ``demo.json`` (worker messages, /readyz history)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "jit.json").write_text(json.dumps(report.jit, indent=2))
    (directory / "metrics.txt").write_text(report.metrics)
    (directory / "demo.json").write_text(
        json.dumps(
            {
                "url": report.url,
                "worker": report.worker,
                "warmup": report.warmup,
                "scenario": report.scenario,
                "readyz": report.readyz,
                "worker_started_s": report.worker_started_s,
            },
            indent=2,
        )
    )


def _readyz_timeline(started: float | None, warmup: object) -> str:
    """What the ``/readyz`` line's times count from and what ``/readyz`` waits for: the worker's
    spawn, then its start-up (``started`` seconds: imports, ``jitwatch.install()``) and its warmup
    (``warmup`` seconds, the rank's ``warmup_duration_s``), and 200 once every rank has completed
    warmup (:func:`jitwatch.views.status.readiness`)."""
    waits = "/readyz answers 200 once every rank has completed warmup"
    if started is None:
        return f"from the worker's spawn; {waits}"
    then = f", then warmed up in {warmup:.3f}s" if isinstance(warmup, int | float) else ""
    return f"from the worker's spawn: it started in {started:.2f}s, imports and jitwatch.install(){then}; {waits}"


def _short_key(key: str | None, width: int = 70) -> str:
    if not key:
        return "-"
    return key if len(key) <= width else key[: width - 1] + "…"


def _compiles(count: object) -> str:
    """``1 compile``, ``2 compiles`` (:func:`jitwatch.text.plural`); ``? compiles`` when /jit
    had no count."""
    return plural(count, "compile") if isinstance(count, int) else "? compiles"


def print_summary(report: DemoReport, console: Any) -> None:
    """A short rich summary built from ``/jit`` plus the worker's own report. With serving
    compiles, it ends with commands on the demo's journal: ``jitwatch why``, ``coverage`` and, when
    a Triton kernel compiled in serving (manifests hold Triton kernels only),
    ``manifest export -o <journal dir>/manifest.json`` and the demo again with that manifest
    replayed in its worker's warmup (``JITWATCH_MANIFEST=<manifest>
    JITWATCH_MANIFEST_ALLOW=<the kernels' modules> jitwatch demo <the same options>``, the modules
    :attr:`DemoReport.manifest_modules`, as the never-warmed fix names them: the loop closed,
    the Triton kernels it recorded compile in warmup), each printed literally (no markup) and
    unwrapped by rich (the terminal wraps it), so it can be copied and run as printed. The export
    line says what the manifest covers: ``of them`` when every serving compile is Triton's, else
    ``of the Triton one(s)``, followed by one ``not in the manifest`` line per other serving
    compile (torch.compile's) with its own fix, from ``/jit``."""
    from rich.text import Text

    from jitwatch.tables import Grid, cell

    jit = report.jit
    steps = report.scenario.get("steps", [])
    source = report.scenario.get("source")
    ranks = jit.get("ranks") or [{}]
    rank = ranks[0]
    flips = " → ".join(f"{code} @{t:.2f}s" for t, code in report.readyz) or "-"

    table = Grid(
        "jitwatch demo: compiles by phase (from /jit)",
        ["=backend", "@kernel", "#warmup compiles", "#serving compiles", "#compile s"],
        narrow=False,
    )
    for k in jit.get("kernels", []):
        serving = k.get("compiles_serving", 0)
        table.add(
            cell(k.get("backend", "triton")),
            cell(k["name"]),
            str(k.get("compiles_warmup", 0)),
            Text(str(serving), style="red" if serving else "green"),
            f"{k.get('compile_seconds', 0.0):.3f}",
        )
    console.print(table.fit(console.width))
    sizes = sorted({s["num_tokens"] for s in steps})
    first = rank.get("first_request_latency_s")
    warm = rank.get("warmup_duration_s")
    lines: list[str | Text] = [
        f"warmup: {'complete' if rank.get('ready') else 'NOT complete'} in "
        f"{'-' if warm is None else f'{warm:.3f}s'}, {_compiles(rank.get('warmup_compiles'))}"
        + ("" if report.warmup.get("ran") else " (--no-warmup: slot-mapping warmup skipped)")
        + (f"; manifest replayed in warmup: {report.warmup['manifest']}" if report.warmup.get("manifest") else "")
        + (
            "; JITWATCH_MANIFEST NOT replayed (a `jitwatch:` line above says why)"
            if report.warmup.get("manifest_not_replayed")
            else ""
        ),
        f"/readyz: {flips} ({_readyz_timeline(report.worker_started_s, warm)})",
        f"served {len(steps)} steps, {len(sizes)} different token counts {sizes}; "
        f"serving-phase compiles: {rank.get('serving_compiles')}",
        f"first-request latency: {'-' if first is None else f'{first * 1000:.1f} ms'}",
    ]
    serving = jit.get("recent_serving_compiles", [])
    for c in reversed(serving):  # /jit lists them newest first; oldest first here, as `jitwatch why`
        lines.append(
            f"serving compile: {c.get('backend', 'triton')} {c.get('kernel')} in request {c.get('request_id')} "
            f"({(c.get('duration_s') or 0) * 1000:.0f} ms): "
            + (
                f"{c['reason']} (`jitwatch why` has the fix)"
                if c.get("reason")
                else f"key {_short_key(c.get('key'), 100)}"
            )
        )
    if serving:
        # The demo's journal is <JITWATCH_DIR>/demo-<port>, not the default that `jitwatch why`,
        # `coverage` and `manifest export` read: a bare `jitwatch why` says "no journal at ...".
        # And after `make demo` the command is .venv/bin/jitwatch, not on PATH. Each line is a
        # whole command, runnable as printed (manifest export needs its -o).
        jw = jitwatch_command()
        jdir = shell_word(str(report.journal_dir))  # $'...\\xff' for a name that is not UTF-8
        manifest = shell_word(str(report.journal_dir / "manifest.json"))
        lines += [
            Text(f"the fixes: {jw} why --journal-dir {jdir}"),
            Text(f"coverage: {jw} coverage --journal-dir {jdir}"),
        ]
    in_manifest = [c for c in reversed(serving) if c.get("backend", "triton") in ("", *MANIFEST_BACKENDS)]
    if in_manifest:
        # Manifests hold Triton kernels only: with serving compiles of torch.compile alone the
        # export has nothing to write (exit 1), and a replay nothing to warm. With both, the line
        # says which ones the manifest covers, and the others' own fixes follow.
        others = len(serving) - len(in_manifest)
        which = "them" if not others else "the Triton one" + ("s" if len(in_manifest) > 1 else "")
        lines += [
            Text(f"a warmup manifest of {which}: {jw} manifest export --journal-dir {jdir} -o {manifest}"),
            Text(
                f"once this demo has stopped, replay it in the worker's warmup: JITWATCH_MANIFEST={manifest} "
                f"JITWATCH_MANIFEST_ALLOW={shell_word(','.join(report.manifest_modules) or DEMO_MANIFEST_ALLOW)} "
                f"{jw} demo "
                + " ".join(shell_word(a) for a in report.demo_args or ["--journal-dir", str(report.journal_dir)])
            ),
        ]
    for c in reversed(serving) if in_manifest else ():
        if c.get("backend", "triton") in ("", *MANIFEST_BACKENDS):
            continue
        fixes = [f for f in c.get("fixes") or () if isinstance(f, str)]
        lines.append(
            f"not in the manifest (it holds Triton kernels only): {c.get('backend')} {c.get('kernel')}; "
            + (f"its fix: {fixes[0]}" if fixes else "`jitwatch why` has its fix")
        )
    if source == "reference":
        lines.append(
            "no GPU: kernels were compiled for real (compile-only driver, sm_90 cubins) but not launched; "
            "slot mappings came from the torch reference"
        )
    elif source == "kernel":
        lines.append(f"kernels launched on {report.worker.get('device')} (checked against the torch reference)")
    for line in lines:
        console.print(line, soft_wrap=isinstance(line, Text))
