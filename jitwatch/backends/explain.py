"""Why a compile happened: the backend-neutral shape of a *reason* and the optional explain seam.

A serving-phase compile happened because its key differs from every key of the same kernel the
process compiled before serving. jitwatch states that difference in the compiler's own terms:
per argument (``n_cols: i32 %16 → ==1``), per launch option (``num_warps: 4 → 8``),
``never warmed`` (nothing of this kernel compiled before serving) or ``new combination`` (each
argument class was warmed, never together). The core computes it on the journal writer's thread
(:class:`jitwatch.core.diagnosis.Diagnoser`), never on the compiling thread.

A backend that can read its own keys offers ``explain(new, baseline)`` (see :class:`Explainer`),
and may offer ``describe_key(key, attrs)``: the specialization a key stands for, in its own words,
for the worker's warning line (Triton: ``x_ptr: *fp32 aligned16, n: i32 %16, BLOCK: constexpr 64``, in
place of its raw key):
``new`` is the serving compile, ``baseline`` the compiles of the same kernel before serving, each
as a :class:`Seen` (key + the event's ``attrs``). A backend some of whose keys have no argument
classes (Triton's listener-only compiles: the key is Triton's cache hash) also offers
``by_exact_key(attrs)``: such a key is compared by exact key, never diffed; and
``exact_key_fixes(name)`` says, in its own words, what removes such a compile (else a neutral text:
:func:`neutral_exact_key_fixes`). A backend whose
compiler states the reason itself (torch.compile: Dynamo's guard failure) puts it in the event's
``attrs["reason"]`` and jitwatch keeps it as it is (kind ``compiler``).

Event fields (``attrs``) written for every serving compile: ``reason`` (one line),
``reason_kind`` (one of :data:`REASON_KINDS`), ``reason_changes`` (a list of
:meth:`Change.as_attrs`) and ``fixes`` (lines of advice).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeGuard

from jitwatch.redact import REDACTED_HOME, redact
from jitwatch.text import jitwatch_command, plural

ReasonKind = Literal["argument", "option", "never_warmed", "new_combination", "compiler", "unknown"]
REASON_KINDS: tuple[str, ...] = ("argument", "option", "never_warmed", "new_combination", "compiler", "unknown")
"""Every ``reason_kind`` value (bounded: usable as a label)."""


@dataclass(frozen=True, slots=True)
class Seen:
    """One compile as the journal has it: the compiler's key and the event's ``attrs``."""

    key: str | None
    attrs: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between a serving compile's key and the nearest key compiled before serving.

    Attributes:
        name: the argument (``n_cols``) or launch option (``num_warps``).
        kind: ``argument`` or ``option``.
        before: its class in the nearest earlier key, in the compiler's words (``i32 %16``).
        after: its class now (``==1``).
        fix: what removes this compile (``do_not_specialize=["n_cols"]``, warm this value, …).
        warmed_elsewhere: the new class was compiled before serving, in another key.
    """

    name: str
    kind: Literal["argument", "option"]
    before: str
    after: str
    fix: str = ""
    warmed_elsewhere: bool = False

    @property
    def text(self) -> str:
        """``name: before → after``, with a shared prefix of the two sides said once
        (``x_ptr: *fp32 aligned16 → unaligned``)."""
        b, a = self.before, self.after
        pb, _, rb = b.partition(" ")
        pa, _, ra = a.partition(" ")
        if pb == pa and rb and ra and rb != ra:
            return f"{self.name}: {b} → {ra}"
        return f"{self.name}: {b} → {a}"

    def as_attrs(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "before": self.before,
            "after": self.after,
            "fix": self.fix,
            "warmed_elsewhere": self.warmed_elsewhere,
        }


@dataclass(frozen=True, slots=True)
class Reason:
    """Why one compile happened. ``text`` is one line for logs and tables; ``changes`` the
    per-argument/option differences (empty for ``never_warmed``); ``fixes`` one line each."""

    kind: ReasonKind
    text: str
    changes: tuple[Change, ...] = ()
    fixes: tuple[str, ...] = field(default_factory=tuple)

    def as_attrs(self) -> dict[str, Any]:
        """The event ``attrs`` fields: ``reason``, ``reason_kind``, ``reason_changes``, ``fixes``."""
        return {
            "reason": self.text,
            "reason_kind": self.kind,
            "reason_changes": [c.as_attrs() for c in self.changes] if self.changes else [],
            "fixes": list(self.fixes),
        }


MANIFEST_BACKENDS = frozenset({"triton"})
"""Backends whose compiles a warmup manifest can record and replay (``jitwatch.warmup.replay``)."""


@dataclass(frozen=True, slots=True)
class ExactKeyFixes:
    """What removes a serving compile of one kernel whose key is compared by exact key
    (:meth:`Explainer.by_exact_key`), in the backend's words (:meth:`Explainer.exact_key_fixes`;
    :func:`neutral_exact_key_fixes` for a backend that gives none).

    Attributes:
        warm: the fix when the key did not compile before serving (never warmed, or a new key):
            run the code path that compiles the kernel in warmup.
        again: the fix when the same key compiled before serving and compiled again in serving
            (:func:`compiled_again`): reuse what warmup compiled.
    """

    warm: str
    again: str


def neutral_exact_key_fixes(name: str) -> ExactKeyFixes:
    """The fixes of a key of ``name`` compared by exact key, for a backend whose explainer gives
    none of its own (no :meth:`Explainer.exact_key_fixes`): no manifest, no backend's names.
    Never raises."""
    return ExactKeyFixes(
        warm=f"run the code path that compiles {name} in warmup, with serving's shapes and dtypes",
        again=(
            f"keep the kernel compiled in warmup and reuse it: the code path that compiles {name} "
            "compiled it again in serving"
        ),
    )


def compiled_again(name: str, exact_key: ExactKeyFixes | None = None) -> Reason:
    """The reason of a serving compile of a key compared by exact key (:meth:`Explainer.by_exact_key`;
    Triton: a listener-only key, Triton's cache hash) that already compiled before serving: the key
    is not new, the code path compiled it again instead of reusing the kernel. Its fix is
    ``exact_key.again``: the backend's words (:meth:`Explainer.exact_key_fixes`), by default
    :func:`neutral_exact_key_fixes`."""
    fixes = exact_key if exact_key is not None else neutral_exact_key_fixes(name)
    return Reason(
        "unknown",
        "the same key compiled before serving: this code path compiled it again instead of reusing the kernel",
        fixes=(fixes.again,),
    )


MANIFEST_FILE = "manifest.json"
"""The manifest file the fix's record and replay commands name."""

MANIFEST_EXPORT = f"`jitwatch manifest export -o {MANIFEST_FILE}`"
"""The record command :func:`warm_fix` writes, as it appears there (in backquotes): the text a
journal stores, as every version wrote it. As stored it reads the default journal and writes the
manifest in the working directory; what shows a fix for a journal it knows (the worker's warning
line, ``/jit``, ``jitwatch why``) shows it with :func:`runnable_fix`."""

MANIFEST_REPLAY = f"`JITWATCH_MANIFEST={MANIFEST_FILE} "
"""The start of the replay command :func:`warm_fix` writes (its ``JITWATCH_MANIFEST``, relative
as stored: a worker resolves it against its own working directory); :func:`runnable_fix` names
the manifest's absolute path there."""


MANIFEST_REPLAY_AT_STARTUP = f"`jitwatch warmup replay {MANIFEST_FILE}`"
"""The replay command of an older version's fix ("replay it at startup"), which journals of that
version hold: :func:`runnable_fix` names the same manifest there as in the record command."""

_MANIFEST_COMMANDS = re.compile(
    "|".join(re.escape(c) for c in (MANIFEST_EXPORT, MANIFEST_REPLAY, MANIFEST_REPLAY_AT_STARTUP))
)
"""The stored commands :func:`runnable_fix` shows for a journal."""


OTHER_HOME = "<home>"
"""How :func:`shell_path` shows a home directory that is not the shell's ``~`` (another user's
``/home/<name>``): a placeholder to type in, as the redacted user name (``<user>``)."""


def _shell_homes() -> tuple[str, ...]:
    """The directory a shell expands ``~`` to (``$HOME``, else the passwd entry's), and its real
    path (a home that is a symbolic link). Never raises; ``()`` without a home."""
    try:
        home = os.path.expanduser("~")
    except (KeyError, OSError, ValueError):  # no $HOME and no passwd entry
        return ()
    if not os.path.isabs(home) or home.rstrip("/") == "":
        return ()
    home = home.rstrip("/")
    try:
        real = os.path.realpath(home)
    except (OSError, ValueError):
        real = home
    return tuple(dict.fromkeys(h for h in (home, real) if h != "/"))


def shell_word(text: str) -> str:
    """``text`` as one shell word: :func:`shlex.quote`, or, for a name with a byte that is not
    UTF-8 (``os.fsdecode``'s ``\\udcff`` for 0xFF) or a terminal control character (ESC, a
    newline, any other C0 or C1 control, DEL; not tab), bash's ``$'...'`` with every byte outside
    printable ASCII as ``\\xNN`` (``$'/tmp/jw-\\xff'``, ``$'/tmp/jw\\x1b[31m'``): the shell passes
    the same bytes, and the text is printable (a lone surrogate is no UTF-8) and unchanged by the
    CLI's :func:`jitwatch.cli.text.plain`, which shows a control character as ``\\xNN``: inside
    ``'...'`` that text would be a literal backslash and name another path."""
    if not any(_needs_ansi_c(c) for c in text):
        return shlex.quote(text)
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # another lone surrogate: no file name decodes to it
        return shlex.quote(text)
    body = "".join("\\" + chr(b) if chr(b) in "\\'" else chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in data)
    return f"$'{body}'"


def _needs_ansi_c(c: str) -> bool:
    o = ord(c)
    return (o < 0x20 and o != 0x09) or 0x7F <= o < 0xA0 or 0xDC80 <= o <= 0xDCFF


def shell_path(path: str | os.PathLike[str]) -> str:
    """``path`` made absolute (against the working directory) and redacted
    (:func:`jitwatch.redact.redact`: a home directory as ``~``, the user name as ``<user>``), as
    one shell word: a path in the shell's own home (``$HOME``, where the shell expands ``~``) as
    ``~/`` followed by the rest quoted (``~/'state dir/jw'``; the tilde stays unquoted at the start
    of the word, where the shell expands it, in an argument and after a variable assignment's
    ``=``), else quoted whole (:func:`shell_word`), with a home that is not the shell's ``~``
    (another user's ``/home/<name>``) shown as :data:`OTHER_HOME` (``'<home>/jw'``, to type in:
    ``~`` would name this user's home). No home directory's full path is ever in it. Raises
    ``TypeError``/``ValueError`` for a value that is not a path."""
    real = os.path.abspath(os.fspath(path))
    for home in _shell_homes():
        if real == home or real.startswith(home + "/"):
            rest = real[len(home) :]  # "" or "/..."
            if not rest:
                return REDACTED_HOME
            shown = redact(rest)  # the user name as <user>; a home further down as a placeholder
            if shown.startswith(REDACTED_HOME):
                shown = "/" + OTHER_HOME + shown[len(REDACTED_HOME) :]
            return f"{REDACTED_HOME}/{shell_word(shown[1:]) if shown[1:] else ''}"
    text = redact(real)
    if text.startswith(REDACTED_HOME):  # a home, but not where this shell's ~ leads
        text = OTHER_HOME + text[len(REDACTED_HOME) :]
    return shell_word(text)


def local_jitwatch() -> str:
    """The ``jitwatch`` command as shown in a fix printed on this machine
    (:func:`jitwatch.text.jitwatch_command`, its path shown by :func:`shell_path`: home as ``~``):
    ``jitwatch`` when it is on ``PATH``, else e.g. ``~/jitwatch/.venv/bin/jitwatch``. What the CLI
    and the worker's warn line pass as ``command`` to :func:`runnable_fix`; the sidecar's ``/jit``
    (an export, read on other machines) keeps :data:`BARE_COMMAND`. Never raises."""
    try:
        return jitwatch_command(shell_path)
    except (TypeError, ValueError):  # an interpreter path that is not a path: never seen
        return BARE_COMMAND


BARE_COMMAND = "jitwatch"
"""The command in a fix as stored, and as ``/jit`` shows it."""


def runnable_fix(fix: str, journal_dir: str | os.PathLike[str] | None, command: str = BARE_COMMAND) -> str:
    """``fix`` (one of a reason's ``fixes``, as built or as a journal stores it) with its manifest
    commands made runnable as printed for the journal in ``journal_dir``: the record command
    (:data:`MANIFEST_EXPORT`) becomes ``jitwatch manifest export --journal-dir <dir> -o
    <dir>/manifest.json`` and the replay's ``JITWATCH_MANIFEST=manifest.json`` names that same
    absolute file, so neither depends on the directory a command runs in (the worker's is not
    the operator's); so does an older version's ``jitwatch warmup replay manifest.json``
    (:data:`MANIFEST_REPLAY_AT_STARTUP`). Paths are shown by :func:`shell_path` (home as ``~``,
    quoted). ``command``: the ``jitwatch`` command shown in them (:func:`local_jitwatch` for
    what is printed on this machine; default the bare ``jitwatch``, as ``/jit`` shows it).

    Returns ``fix`` unchanged when ``journal_dir`` is ``None``, when ``fix`` holds neither command
    (other backends' fixes, a fix already shown with a journal), or when ``journal_dir`` is not a
    path. Each command is shown so once (the first occurrence). Never raises."""
    if journal_dir is None or (MANIFEST_EXPORT not in fix and MANIFEST_REPLAY not in fix):
        return fix  # an older version's replay comes with its record command
    try:
        directory = os.path.abspath(os.fspath(journal_dir))
        shown_dir = shell_path(directory)
        manifest = shell_path(os.path.join(directory, MANIFEST_FILE))
    except (TypeError, ValueError):
        return fix
    shown = {
        MANIFEST_EXPORT: f"`{command} manifest export --journal-dir {shown_dir} -o {manifest}`",
        MANIFEST_REPLAY: f"`JITWATCH_MANIFEST={manifest} ",
        MANIFEST_REPLAY_AT_STARTUP: f"`{command} warmup replay {manifest}`",
    }
    # One pass over the stored text: a path is never searched again (a directory named like the
    # replay's text would have had its quoting cut open by a second replace). Each command once, as
    # warm_fix writes it: the text grows by at most three paths, however often a stored text holds it.
    done: set[str] = set()

    def show(m: re.Match[str]) -> str:
        command = m.group(0)
        if command in done:
            return command
        done.add(command)
        return shown[command]

    return _MANIFEST_COMMANDS.sub(show, fix)


def why_json_command(journal_dir: str | os.PathLike[str] | None, command: str = BARE_COMMAND) -> str:
    """``jitwatch why --journal-dir <dir> --json`` (in backquotes), which prints every serving
    compile's full key, for the journal in ``journal_dir`` (:func:`shell_path`); without a
    directory, or one that is not a path, ``jitwatch why --json``. ``command``: the ``jitwatch``
    command shown (:func:`local_jitwatch` on this machine, as the worker's warn line). Never raises."""
    if journal_dir is not None:
        try:
            return f"`{command} why --journal-dir {shell_path(journal_dir)} --json`"
        except (TypeError, ValueError):
            pass
    return f"`{command} why --json`"


def runnable_fixes(fixes: object, journal_dir: str | os.PathLike[str] | None, command: str = BARE_COMMAND) -> list[str]:
    """An event's ``attrs["fixes"]`` as shown for the journal in ``journal_dir``: its strings (other
    items are left out), the first one holding a manifest command made runnable by
    :func:`runnable_fix` and the rest as stored (a fix as built holds them once, in one fix of
    the event), so what is shown grows by at most three paths per event. ``command``: as
    :func:`runnable_fix`'s. Never raises."""
    out: list[str] = []
    pending = journal_dir is not None
    for f in fixes if isinstance(fixes, list | tuple) else ():
        if not isinstance(f, str):
            continue
        if pending and (MANIFEST_EXPORT in f or MANIFEST_REPLAY in f):
            f, pending = runnable_fix(f, journal_dir, command), False
        out.append(f)
    return out


REPLAY_FROM_ENV = (
    "the vLLM plugin, `jitwatch demo`, or any worker that calls "
    "`jitwatch.warmup.replay.replay_from_env()` inside `Monitor.warmup()`"
)
"""Who reads the replay command's ``JITWATCH_MANIFEST`` and ``JITWATCH_MANIFEST_ALLOW`` (as
:func:`warm_fix` says it): every worker that calls :func:`jitwatch.warmup.replay.replay_from_env` in
its warmup, the vLLM plugin and ``jitwatch demo``'s worker among them."""

REPLAY_CALL = "`jitwatch.warmup.replay.replay()`"
"""The Python call :func:`warm_fix` offers beside the variables (:func:`jitwatch.warmup.replay.replay`)."""


def warm_fix(
    name: str, backend: str | None = None, *, exact_key: ExactKeyFixes | None = None, module: str | None = None
) -> str:
    """The fix for a serving compile of ``name`` that warmup missed: warm it, or (Triton, and a
    ``backend`` of ``None`` or ``""``: a jitwatch 0.1 journal's compiles, all Triton) record a
    manifest and replay it inside the worker's warmup (``JITWATCH_MANIFEST`` with
    ``JITWATCH_MANIFEST_ALLOW`` in the environment of a worker that calls
    :func:`jitwatch.warmup.replay.replay_from_env` in its warmup, as the vLLM plugin and ``jitwatch
    demo`` do: :data:`REPLAY_FROM_ENV`; or :data:`REPLAY_CALL` inside ``Monitor.warmup()``): a
    replay in another process (``jitwatch warmup replay``) fills Triton's disk cache only, and the
    worker still compiles in serving. ``module`` (the kernel's module, from
    the event's ``attrs["module"]``) is named as the allow prefix when it is a dotted Python name,
    else ``<module prefix>``; a kernel defined in ``__main__`` (a script), which ``manifest export``
    leaves out, is told to be warmed, or moved into an importable module. Other backends' compiles
    are not in manifests, so the fix does not offer one. A key compared by exact key (``exact_key``: the backend's
    :meth:`Explainer.exact_key_fixes` for ``name``) cannot be in a manifest either: its fix is
    ``exact_key.warm``. Never raises."""
    if exact_key is not None:
        return exact_key.warm
    if not backend or backend in MANIFEST_BACKENDS:
        if _in_main(module):
            # `manifest export` leaves it out: no other process can import a script's __main__
            return (
                f"call {name} in warmup with serving's arguments (it is defined in __main__, which a "
                "manifest cannot name: move it into an importable module to record and replay a manifest)"
            )
        allow = module if is_module_name(module) else "<module prefix>"
        return (
            f"call {name} in warmup with serving's arguments, or record a manifest "
            f"({MANIFEST_EXPORT}) and replay it inside the worker's warmup "
            f"({MANIFEST_REPLAY}JITWATCH_MANIFEST_ALLOW={allow}` for {REPLAY_FROM_ENV}; "
            f"or {REPLAY_CALL} inside `Monitor.warmup()`)"
        )
    return (
        f"run what compiles {name} in warmup with serving's arguments and shapes "
        f"(warmup manifests replay Triton kernels only, not {backend}'s)"
    )


def _in_main(module: object) -> bool:
    """Is ``module`` ``__main__`` or under it (a script's kernel: ``manifest export`` leaves it out)?"""
    return isinstance(module, str) and (module == "__main__" or module.startswith("__main__."))


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,31}")
"""A dotted Python module name (what :func:`warm_fix` names as the allow prefix)."""


def is_module_name(module: object) -> TypeGuard[str]:
    """Whether :func:`warm_fix` names ``module`` as the allow prefix (``JITWATCH_MANIFEST_ALLOW``): a
    dotted Python name (at most 32 parts), not ``__main__``. Never raises."""
    return isinstance(module, str) and not _in_main(module) and _MODULE_NAME.fullmatch(module) is not None


def new_key_fix(
    name: str, backend: str | None, *, exact_key: ExactKeyFixes | None = None, module: str | None = None
) -> str:
    """The fix for a serving compile of a new key of ``name`` whose other keys were warmed:
    replay a manifest of serving's keys (:data:`MANIFEST_BACKENDS`, or ``""``: a jitwatch 0.1
    journal's compiles, all Triton; not a key compared by exact key, nor a kernel whose ``module``
    is ``__main__``, which ``manifest export`` leaves out), else :func:`warm_fix`. Never raises."""
    if _in_main(module):
        return warm_fix(name, backend, exact_key=exact_key, module=module)
    if (backend == "" or backend in MANIFEST_BACKENDS) and exact_key is None:
        return "record a manifest of serving's keys and replay it in warmup"
    return warm_fix(name, backend, exact_key=exact_key)


def new_key(
    name: str,
    warmed: int,
    backend: str | None,
    *,
    exact_key: ExactKeyFixes | None = None,
    module: str | None = None,
) -> Reason:
    """The ``unknown`` reason of a serving compile of a new key of ``name`` whose ``warmed`` other
    keys compiled before serving and whose difference nothing explains (no explainer, or a key
    compared by exact key, ``exact_key`` its backend's fixes: Triton's cache hash); its fix is
    :func:`new_key_fix` (``module``: the kernel's module, or ``None``)."""
    return Reason(
        "unknown",
        f"new key; {plural(warmed, 'other key')} of kernel {name} {'was' if warmed == 1 else 'were'} warmed",
        fixes=(new_key_fix(name, backend, exact_key=exact_key, module=module),),
    )


def never_warmed(
    name: str,
    label: str = "kernel",
    backend: str | None = None,
    *,
    exact_key: ExactKeyFixes | None = None,
    module: str | None = None,
) -> Reason:
    """The reason of a serving compile of something that never compiled before serving;
    ``backend`` and ``exact_key`` (the backend's fixes of a key compared by exact key, or ``None``)
    pick the fix (:func:`warm_fix`); ``module`` (the kernel's module, or ``None``) is the allow
    prefix it names."""
    return Reason(
        "never_warmed",
        f"never warmed (no compile of this {label} before serving)",
        fixes=(warm_fix(name, backend, exact_key=exact_key, module=module),),
    )


def from_changes(changes: Sequence[Change], *, combination_fix: str) -> Reason:
    """A :class:`Reason` from the nearest key's differences: ``new_combination`` when every new
    class was warmed in some other key, else ``argument`` (or ``option`` when only options moved).
    """
    if not changes:
        return Reason("unknown", "key differs from every key compiled before serving in no field jitwatch reads")
    body = "; ".join(c.text for c in changes)
    if all(c.warmed_elsewhere for c in changes):
        return Reason(
            "new_combination",
            f"new combination (each class was warmed, not together): {body}",
            tuple(changes),
            (combination_fix,),
        )
    kind: ReasonKind = "option" if all(c.kind == "option" for c in changes) else "argument"
    fixes = tuple(dict.fromkeys(c.fix for c in changes if c.fix and not c.warmed_elsewhere))
    return Reason(kind, body, tuple(changes), fixes)


ExplainFn = Callable[[Seen, Sequence[Seen]], Reason | None]
"""A backend's ``explain(new, baseline)``: see :meth:`Explainer.explain`."""
ExactKeyFn = Callable[[Mapping[str, Any]], bool]
"""A backend's ``by_exact_key(attrs)``: see :meth:`Explainer.by_exact_key`."""
ExactKeyFixesFn = Callable[[str], ExactKeyFixes]
"""A backend's ``exact_key_fixes(name)``: see :meth:`Explainer.exact_key_fixes`."""
DescribeKeyFn = Callable[[str | None, Mapping[str, Any]], str | None]
"""A backend's ``describe_key(key, attrs)``: see :meth:`Explainer.describe_key`."""


class Explainer(Protocol):
    """What a backend offers (as methods ``explain`` and, optionally, ``by_exact_key`` and
    ``exact_key_fixes``) to say why a serving compile happened.

    Runs on the journal writer's thread (or in a reader), never on a compiling thread. No method
    may raise for any key/attrs shape or kernel name.
    """

    def explain(self, new: Seen, baseline: Sequence[Seen]) -> Reason | None:
        """Why ``new`` compiled, given the same kernel's compiles before serving (``baseline``, at
        least one); ``None`` when the backend cannot read the keys."""
        ...

    def by_exact_key(self, attrs: Mapping[str, Any]) -> bool:
        """Whether the compile whose event has these ``attrs`` has a key without argument classes,
        to be compared by exact key: only the same key compiled before serving covers it, nothing
        is diffed (:meth:`explain` is not asked), and its fixes are those of a compile no manifest
        can hold (:meth:`exact_key_fixes`; :func:`compiled_again` when the same key compiled
        before serving). Triton: a listener-only compile, its key Triton's cache hash
        (:func:`jitwatch.backends.triton.explain.by_exact_key`). A backend without this method:
        never."""
        ...

    def exact_key_fixes(self, name: str) -> ExactKeyFixes:
        """The fixes, in the backend's words, of a serving compile of kernel ``name`` whose key
        :meth:`by_exact_key` compares by exact key: how to warm the code path that compiles it, and
        how to reuse what warmup compiled (Triton: :func:`jitwatch.backends.triton.explain.exact_key_fixes`,
        naming ``triton.compile`` and Inductor). A backend without this method:
        :func:`neutral_exact_key_fixes`."""
        ...

    def describe_key(self, key: str | None, attrs: Mapping[str, Any]) -> str | None:
        """The specialization ``key`` (with its event's ``attrs``) stands for, in the backend's
        words, one line (Triton: :func:`jitwatch.backends.triton.explain.describe_key`, each
        argument's class and the launch options the key carries): what the worker's warning line
        shows in place of a raw key; ``None`` when the key says nothing more readable (the line
        then shows the key). A backend without this method: ``None``."""
        ...


def _never(attrs: Mapping[str, Any]) -> bool:
    return False


def _undescribed(key: str | None, attrs: Mapping[str, Any]) -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class KeyExplainer:
    """An :class:`Explainer` made of a backend's functions: ``explain``, ``by_exact_key`` (default:
    never by exact key, for a backend that offers only ``explain``), ``exact_key_fixes``
    (default: :func:`neutral_exact_key_fixes`) and ``describe_key`` (default: no description)."""

    explain: ExplainFn
    by_exact_key: ExactKeyFn = _never
    exact_key_fixes: ExactKeyFixesFn = neutral_exact_key_fixes
    describe_key: DescribeKeyFn = _undescribed


def explainer_of(backend: Any) -> Explainer | None:
    """The :class:`Explainer` of a backend object (its ``explain`` and optional ``by_exact_key``,
    ``exact_key_fixes`` and ``describe_key`` methods), or of a bare ``explain`` function; ``None`` when it offers no
    ``explain``. A callable without a callable ``explain`` is taken as that bare function: backend
    objects go through :func:`jitwatch.core.diagnosis.explainers_of`, which leaves out one without
    ``explain``.

    Looking up an optional method that raises (a backend whose ``__getattr__`` forwards to a
    library that is not installed) counts as no such method: never by exact key, neutral fixes.
    Raises what looking up ``explain`` raises."""
    fn = getattr(backend, "explain", None)
    if not callable(fn):
        return KeyExplainer(backend) if callable(backend) else None
    exact, fixes = _optional(backend, "by_exact_key"), _optional(backend, "exact_key_fixes")
    described = _optional(backend, "describe_key")
    return KeyExplainer(
        fn,
        exact if callable(exact) else _never,
        fixes if callable(fixes) else neutral_exact_key_fixes,
        described if callable(described) else _undescribed,
    )


def _optional(backend: Any, name: str) -> Any:
    """``getattr(backend, name, None)``, ``None`` also when the lookup raises."""
    try:
        return getattr(backend, name, None)
    except Exception:  # noqa: BLE001 - an optional method: explain still works without it
        return None


__all__ = [
    "BARE_COMMAND",
    "MANIFEST_BACKENDS",
    "MANIFEST_EXPORT",
    "MANIFEST_FILE",
    "MANIFEST_REPLAY",
    "MANIFEST_REPLAY_AT_STARTUP",
    "OTHER_HOME",
    "REASON_KINDS",
    "REPLAY_CALL",
    "REPLAY_FROM_ENV",
    "Change",
    "DescribeKeyFn",
    "ExactKeyFixes",
    "ExactKeyFixesFn",
    "ExactKeyFn",
    "ExplainFn",
    "Explainer",
    "KeyExplainer",
    "Reason",
    "ReasonKind",
    "Seen",
    "compiled_again",
    "explainer_of",
    "from_changes",
    "is_module_name",
    "local_jitwatch",
    "neutral_exact_key_fixes",
    "never_warmed",
    "new_key",
    "new_key_fix",
    "runnable_fix",
    "runnable_fixes",
    "shell_path",
    "shell_word",
    "warm_fix",
    "why_json_command",
]
