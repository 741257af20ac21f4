"""Why a compile happened: the backend-neutral shape of a *reason* and the optional explain seam.

A serving-phase compile happened because its key differs from every key of the same kernel the
process compiled before serving. jitwatch states that difference in the compiler's own terms:
per argument (``n_cols: i32 %16 → ==1 (value 1)``), per launch option (``num_warps: 4 → 8``),
``never warmed`` (nothing of this kernel compiled before serving) or ``new combination`` (each
argument class was warmed, never together). The core computes it on the journal writer's thread
(:class:`jitwatch.core.diagnosis.Diagnoser`), never on the compiling thread.

A backend that can read its own keys offers ``explain(new, baseline)`` (see :class:`Explainer`):
``new`` is the serving compile, ``baseline`` the compiles of the same kernel before serving, each
as a :class:`Seen` (key + the event's ``attrs``). A backend some of whose keys have no argument
classes (Triton's listener-only compiles: the key is Triton's cache hash) also offers
``by_exact_key(attrs)``: such a key is compared by exact key, never diffed. A backend whose
compiler states the reason itself (torch.compile: Dynamo's guard failure) puts it in the event's
``attrs["reason"]`` and jitwatch keeps it as it is (kind ``compiler``).

Event fields (``attrs``) written for every serving compile: ``reason`` (one line),
``reason_kind`` (one of :data:`REASON_KINDS`), ``reason_changes`` (a list of
:meth:`Change.as_attrs`) and ``fixes`` (lines of advice).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

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
        after: its class now (``==1 (value 1)``).
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
        (``x_ptr: *fp32 aligned → unaligned``)."""
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


def listener_only_fix(name: str) -> str:
    """The fix for a serving compile of ``name`` that Triton reported only through its compilation
    listener (:data:`jitwatch.backends.triton.explain.LISTENER_ONLY_SOURCE`; its explainer's
    :meth:`Explainer.by_exact_key` is true): run, in warmup, the code path that compiles it. No
    manifest: export leaves these compiles out (``jitwatch.warmup.manifest.build``)."""
    return (
        f"run the code path that compiles {name} in warmup, with serving's shapes and dtypes: the "
        "torch.compile'd model (Inductor's kernels) or the direct triton.compile call "
        "(Triton reported this compile only through its compilation listener: a warmup manifest cannot replay it)"
    )


def compiled_again(name: str) -> Reason:
    """The reason of a serving compile of a key compared by exact key (:meth:`Explainer.by_exact_key`;
    Triton: a listener-only key, Triton's cache hash) that already compiled before serving: the key
    is not new, the code path compiled it again instead of reusing the kernel. A direct
    ``triton.compile`` keeps no in-memory cache (every call compiles, a disk-cache hit at best);
    Inductor compiles a graph's kernels again when the graph is compiled again (a Dynamo
    recompile)."""
    return Reason(
        "unknown",
        "the same key compiled before serving: this code path compiled it again instead of reusing the kernel",
        fixes=(
            f"keep the kernel compiled in warmup and reuse it: triton.compile keeps no in-memory cache, so each "
            f"call compiles {name} again; for torch.compile, see why its graph compiled again "
            "(its recompile in jitwatch why)",
        ),
    )


def warm_fix(name: str, backend: str | None = None, *, listener_only: bool = False) -> str:
    """The fix for a serving compile of ``name`` that warmup missed: warm it, or (Triton, and a
    ``backend`` of ``None`` or ``""``: a jitwatch 0.1 journal's compiles, all Triton) record a
    manifest and replay it; other backends' compiles are not in
    manifests, so the fix does not offer one, nor does a listener-only Triton compile's
    (:func:`listener_only_fix`)."""
    if listener_only:
        return listener_only_fix(name)
    if not backend or backend in MANIFEST_BACKENDS:
        return (
            f"call {name} in warmup with serving's arguments, or record a manifest "
            "(`jitwatch manifest export`) and replay it at startup (`jitwatch warmup replay`)"
        )
    return (
        f"run what compiles {name} in warmup with serving's arguments and shapes "
        f"(warmup manifests replay Triton kernels only, not {backend}'s)"
    )


def new_key_fix(name: str, backend: str | None, *, listener_only: bool = False) -> str:
    """The fix for a serving compile of a new key of ``name`` whose other keys were warmed:
    replay a manifest of serving's keys (:data:`MANIFEST_BACKENDS`, or ``""``: a jitwatch 0.1
    journal's compiles, all Triton; not a listener-only compile), else :func:`warm_fix`."""
    if (backend == "" or backend in MANIFEST_BACKENDS) and not listener_only:
        return "record a manifest of serving's keys and replay it in warmup"
    return warm_fix(name, backend, listener_only=listener_only)


def new_key(name: str, warmed: int, backend: str | None, *, listener_only: bool = False) -> Reason:
    """The ``unknown`` reason of a serving compile of a new key of ``name`` whose ``warmed`` other
    keys compiled before serving and whose difference nothing explains (no explainer, or a
    listener-only key: Triton's cache hash); its fix is :func:`new_key_fix`."""
    return Reason(
        "unknown",
        f"new key; {warmed} other key(s) of kernel {name} were warmed",
        fixes=(new_key_fix(name, backend, listener_only=listener_only),),
    )


def never_warmed(
    name: str, label: str = "kernel", backend: str | None = None, *, listener_only: bool = False
) -> Reason:
    """The reason of a serving compile of something that never compiled before serving;
    ``backend`` and ``listener_only`` pick the fix (:func:`warm_fix`)."""
    return Reason(
        "never_warmed",
        f"never warmed (no compile of this {label} before serving)",
        fixes=(warm_fix(name, backend, listener_only=listener_only),),
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


class Explainer(Protocol):
    """What a backend offers (as methods ``explain`` and, optionally, ``by_exact_key``) to say why a
    serving compile happened.

    Runs on the journal writer's thread (or in a reader), never on a compiling thread. Neither
    method may raise for any key/attrs shape.
    """

    def explain(self, new: Seen, baseline: Sequence[Seen]) -> Reason | None:
        """Why ``new`` compiled, given the same kernel's compiles before serving (``baseline``, at
        least one); ``None`` when the backend cannot read the keys."""
        ...

    def by_exact_key(self, attrs: Mapping[str, Any]) -> bool:
        """Whether the compile whose event has these ``attrs`` has a key without argument classes,
        to be compared by exact key: only the same key compiled before serving covers it, nothing
        is diffed (:meth:`explain` is not asked), and its fixes are those of a compile no manifest
        can hold (:func:`listener_only_fix`; :func:`compiled_again` when the same key compiled
        before serving). Triton: a listener-only compile, its key Triton's cache hash
        (:func:`jitwatch.backends.triton.explain.by_exact_key`). A backend without this method:
        never."""
        ...


def _never(attrs: Mapping[str, Any]) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class KeyExplainer:
    """An :class:`Explainer` made of a backend's functions: ``explain`` and ``by_exact_key``
    (default: never by exact key, for a backend that offers only ``explain``)."""

    explain: ExplainFn
    by_exact_key: ExactKeyFn = _never


def explainer_of(backend: Any) -> Explainer | None:
    """The :class:`Explainer` of a backend object (its ``explain`` and optional ``by_exact_key``
    methods), or of a bare ``explain`` function; ``None`` when it offers no ``explain``."""
    fn = getattr(backend, "explain", None)
    if not callable(fn):
        return KeyExplainer(backend) if callable(backend) else None
    exact = getattr(backend, "by_exact_key", None)
    return KeyExplainer(fn, exact if callable(exact) else _never)


__all__ = [
    "MANIFEST_BACKENDS",
    "REASON_KINDS",
    "Change",
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
    "listener_only_fix",
    "never_warmed",
    "new_key",
    "new_key_fix",
    "warm_fix",
]
