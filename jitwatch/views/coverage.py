"""Specialization coverage: which argument classes Triton distinguishes, and which warmup compiled.

Triton compiles one binary per *specialization key* (Triton 3.x, ``JITFunction.run`` →
``native_specialize_impl``; checked against real compiles of Triton 3.9 in
``tests/views/test_coverage.py``). Per argument, the classes are:

===================== ==================================================================
argument              classes (label)
===================== ==================================================================
pointer (tensor)      per element type: ``*fp32:aligned16`` (``data_ptr() % 16 == 0``),
                      ``*fp32:unaligned``; ``*fp32:any`` under ``do_not_specialize`` /
                      ``do_not_specialize_on_alignment``
int (not constexpr)   ``==1`` (folded to a constant), ``i32:%16`` (0 included),
                      ``i32:other``, and by range ``i64:%16`` / ``i64:other`` (≥ 2^31 or
                      < -2^31; ``u64`` ≥ 2^63 when seen). ``do_not_specialize``: ``i32:any``,
                      ``i64:any``; ``do_not_specialize_on_alignment``: ``==1``,
                      ``i32:any``, ``i64:any``
float / bool          ``fp32`` / ``u1``: one class (never value-specialized)
constexpr             one class per value: ``=64``, ``=True``, ``=None``
options               ``[num_warps]=4``…, listed only when more than one value was seen
===================== ==================================================================

The class names are :mod:`jitwatch.backends.triton.classes`'s, the ones ``jitwatch why`` and the
warning line use (``i32:any`` here, ``i32 any`` there).

Pointer element types and constexpr values are open sets: the classes enumerated are the ones
seen in the journal (or declared by the kernel's annotations). Coverage is per argument
(marginal): a class is **covered** when some compile outside the serving phase (startup or
warmup, replayed manifests included) used it, **uncovered** otherwise; ``serving_only`` lists
the classes that only serving compiles met — what warmup missed.

**A kernel's ratio** (the headline of ``jitwatch coverage`` and the metric
``jitwatch_specialization_coverage_ratio``) counts **keys**, not classes: the keys compiled before
serving / the keys needed (those, plus the expected keys nothing compiled before serving: serving
compiles, manifest entries, a previous journal's serving compiles). Serving's launches that hit a
warmed key compile nothing and are not journaled, so every warmed key counts as needed. 1.0 means
warmup compiled every key seen or expected. The per-argument share (``classes_covered`` /
``classes_total``, ``class_ratio``) is a detail: it counts every class Triton could tell apart
(``i64`` ints, unaligned pointers, ints equal to 1), most of which a given server never passes —
`jitwatch demo`'s fully warmed slot-mapping kernel reads 1/1 keys but 10/27 classes.

**Compiles without argument classes** are counted by exact key, as the pseudo-argument ``[key]``
(kind ``key``, one class per key): a *listener-only* Triton compile (a direct ``triton.compile``,
as Inductor compiles its kernels; ``attrs.source == "compilation_listener"``, its key Triton's
cache hash, no ``specialization_data``) and any other compile whose key does not parse or that
has no ``signature`` (a failed capture, an older journal). Such a key is covered only when the
same key compiled before serving (the listener reported the same cache hash in startup or
warmup); a serving one that was not is a serving key and ``missing``, as every serving compile of
a backend covered by key (:func:`coverage_by_key`). No manifest can hold a listener-only compile:
the fix is to run its code path in warmup.

From the journal alone, an argument's flags are inferred: ``(type, None)`` in a key means
``do_not_specialize``; ``do_not_specialize_on_alignment`` cannot be told from a single key, so
give the kernels (``kernels=`` / ``--allow``) for exact flags. An int that was only ever 1 looks like a
constexpr from the journal.

**Coverage by combination (predictive).** Per-argument coverage misses a key whose classes were
each warmed but never together. So coverage also lists, per kernel, the exact keys that are
*expected* and were not compiled before serving (``missing``), each with its reason (the same
diff as ``jitwatch why``: argument, launch option, ``new combination``, ``never warmed``):
expected keys are the serving compiles in the journal, the entries of the manifests given
(``--manifest``), and the serving compiles of a previous run's journal (``--expect-journal``).
Kernels known to exist but never compiled before serving — manifest entries, a previous journal's
kernels, ``@triton.jit`` functions of the modules allowed with ``--allow`` — are listed too.
:attr:`CoverageReport.complete` is false while anything is missing, and when nothing was checked
(:attr:`CoverageReport.nothing_to_check`: no kernel row, e.g. an empty journal):
``jitwatch coverage --require-complete`` exits 1 with the list (for CI, as Triton's own test
suite does for its warmup), and passes once warmup (or a replayed manifest) compiles every
expected key. Launch options (``num_warps``, ``num_stages``, …) are classes like arguments.

**Expected keys recorded for another source of the kernel** (:func:`_as_now`): a manifest entry or
previous run's key that cannot occur with the kernel compiled now — an argument specialized then
and under ``do_not_specialize`` now (the fix jitwatch gives), or the other way, or other argument
names — is listed apart (:attr:`KernelCoverage.other_source`), not counted, not missing; when the
same launch has a key now (``('constexpr', 1)`` → ``('i32', None)``) that key is compared instead.
The source hash does not decide it (``JITFunction.cache_key`` ignores the decorator and changes
with the kernel's line number): a missing key recorded with another hash is compared, and says so.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from jitwatch.backends.explain import Reason, Seen, never_warmed, new_key, runnable_fixes
from jitwatch.backends.triton import classes as _classes
from jitwatch.backends.triton.explain import by_exact_key, exact_key_fixes
from jitwatch.backends.triton.explain import explain as explain_key
from jitwatch.backends.triton.keys import key_options_text, parse_key
from jitwatch.backends.triton.resolve import resolve_kernel
from jitwatch.core.events import EventKind, Phase
from jitwatch.errors import KernelNotResolved
from jitwatch.store.journal import OTHER_KERNEL, Journal, StatRow
from jitwatch.text import plural

ArgKind = Literal["pointer", "int", "constexpr", "float", "bool", "unknown"]

DEFAULT_INT_WIDTHS: tuple[str, ...] = ("i32", "i64")
"""Integer types enumerated for every int argument (Triton picks by value range)."""

INT_TYPES = ("i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
OPTION_ARGS = ("num_warps", "num_stages", "num_ctas", "maxnreg")

_TORCH_DTYPES = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "i1",
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
}


@dataclass
class ArgInfo:
    """What coverage knows about one kernel argument (from the kernel or inferred from keys)."""

    name: str
    kind: ArgKind = "unknown"
    specialize: bool = True
    """False under ``do_not_specialize``: no ``== 1`` folding and no ``% 16`` class."""
    align: bool = True
    """False under ``do_not_specialize`` or ``do_not_specialize_on_alignment``: no ``% 16`` class."""
    known: bool = False
    """Flags come from the ``JITFunction`` itself (not inferred from the journal)."""
    fixed_type: str | None = None
    dtypes: set[str] = field(default_factory=set)
    int_types: set[str] = field(default_factory=set)


def arg_infos_from_kernel(fn: Any) -> list[ArgInfo]:
    """Argument facts of a ``triton.runtime.jit.JITFunction`` (``@triton.autotune`` unwrapped).

    Reads ``fn.params`` (Triton 3.x ``KernelParam``: ``is_constexpr``, ``do_not_specialize``,
    ``do_not_specialize_on_alignment``, annotations).
    """
    while not hasattr(fn, "params") and hasattr(fn, "fn"):
        fn = fn.fn
    out: list[ArgInfo] = []
    for p in fn.params:
        info = ArgInfo(
            name=p.name,
            specialize=not p.do_not_specialize,
            align=not (p.do_not_specialize or p.do_not_specialize_on_alignment),
            known=True,
        )
        ann = getattr(p, "annotation_type", "") or ""
        if p.is_constexpr:
            info.kind = "constexpr"
        elif ann.startswith("*"):
            info.kind = "pointer"
            info.dtypes.add(ann.lstrip("*k"))
        elif ann == "u1":
            info.kind, info.fixed_type = "bool", "u1"
        elif ann[:2] in ("fp", "bf"):
            info.kind, info.fixed_type = "float", ann
        elif ann in INT_TYPES:
            info.kind, info.fixed_type = "int", ann
        out.append(info)
    return out


def _value_label(value: Any) -> str:
    return "=" + repr(value)


def _int_type(v: int) -> str:
    return _classes.int_type(v)


def classify(info: ArgInfo, value: Any) -> str:
    """The class label Triton 3.x puts ``value`` in, for argument ``info`` (see module table).

    Tensors are anything with ``data_ptr()`` and a torch ``dtype``; ``bool`` before ``int``
    (Python's ``True`` is an int but Triton types it ``u1``); ``None`` is always a constexpr.
    Labels are :func:`jitwatch.backends.triton.classes.label` of the class the key entry of
    ``value`` has (the names ``jitwatch why`` uses).
    """
    if info.kind == "constexpr" or value is None:
        return _value_label(value)
    if isinstance(value, bool):
        return _classes.BOOL
    if isinstance(value, int):
        t = info.fixed_type or _int_type(value)
        if not info.specialize:
            return _classes.label(t, _classes.ANY)
        if value == 1 and info.fixed_type is None:
            return _classes.label(None, _classes.ONE)
        if not info.align:
            return _classes.label(t, _classes.ANY)
        return _classes.label(t, _classes.DIVISIBLE if value % 16 == 0 else _classes.OTHER)
    if isinstance(value, float):
        return info.fixed_type or "fp32"
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        d = "*" + _TORCH_DTYPES.get(str(value.dtype).removeprefix("torch."), str(value.dtype))
        if not (info.specialize and info.align):
            return _classes.label(d, _classes.ANY)
        return _classes.label(d, _classes.ALIGNED if value.data_ptr() % 16 == 0 else _classes.UNALIGNED)
    return f"<{type(value).__name__}>"


def classify_call(fn: Any, *args: Any, **kwargs: Any) -> dict[str, str]:
    """Class label of every argument of one call ``fn[grid](*args, **kwargs)`` (defaults applied)."""
    while not hasattr(fn, "params") and hasattr(fn, "fn"):
        fn = fn.fn
    infos = {i.name: i for i in arg_infos_from_kernel(fn)}
    bound = fn.signature.bind(*args, **{k: v for k, v in kwargs.items() if k in infos})
    bound.apply_defaults()
    return {name: classify(infos[name], value) for name, value in bound.arguments.items()}


def _label_from_key(info: ArgInfo, entry: tuple[Any, ...]) -> str | None:
    """The label of one key entry: :func:`jitwatch.backends.triton.classes.class_of`, the class
    ``jitwatch why`` names, written as coverage labels it (``i32:any``, ``==1``, ``=64``)."""
    if len(entry) < 2:
        return None
    ty, spec = entry[0], entry[1]
    if ty == "constexpr" and not (info.kind == "int" and _classes.is_folded_one((ty, spec), True)):
        return _value_label(spec)
    if not isinstance(ty, str):
        return None
    if ty.startswith("*"):
        ty = "*" + ty.lstrip("*k")  # a const pointer (*k) is labelled by its element type
    return _classes.label(*_classes.class_of((ty, spec), int_arg=info.kind == "int", align=info.align))


def _infer(info: ArgInfo, observed: Iterable[tuple[Any, ...]]) -> None:
    """Refine an argument's kind and flags from the key tuples seen for it."""
    for entry in observed:
        if len(entry) < 2:
            continue
        ty, spec = entry[0], entry[1]
        if not isinstance(ty, str) or ty == "constexpr":
            continue
        unknown = info.kind == "unknown"
        if ty.startswith("*"):
            info.kind = "pointer" if unknown else info.kind
            info.dtypes.add(ty.lstrip("*k"))
        elif ty in INT_TYPES:
            info.kind = "int" if unknown else info.kind
            info.int_types.add(ty)
        elif unknown and ty == "u1":
            info.kind = "bool"
        elif unknown and ty[:2] in ("fp", "bf"):
            info.kind = "float"
        if not info.known and spec is None and info.kind in ("pointer", "int"):
            info.specialize = info.align = False
    if info.kind == "unknown" and any(len(e) >= 2 and e[0] == "constexpr" for e in observed):
        info.kind = "constexpr"


def enumerate_classes(info: ArgInfo, widths: Sequence[str] = DEFAULT_INT_WIDTHS) -> list[str]:
    """Every class Triton distinguishes for ``info`` (pointer dtypes: those known/observed)."""
    label = _classes.label
    if info.kind == "pointer":
        out: list[str] = []
        for d in sorted(info.dtypes):
            ptr = f"*{d}"
            if info.specialize and info.align:
                out += [label(ptr, _classes.ALIGNED), label(ptr, _classes.UNALIGNED)]
            else:
                out.append(label(ptr, _classes.ANY))
        return out
    if info.kind == "int":
        types = [info.fixed_type] if info.fixed_type else list(dict.fromkeys([*widths, *sorted(info.int_types)]))
        out = []
        if info.specialize and info.fixed_type is None:
            out.append(label(None, _classes.ONE))
        for t in types:
            if info.specialize and info.align:
                out += [label(t, _classes.DIVISIBLE), label(t, _classes.OTHER)]
            else:
                out.append(label(t, _classes.ANY))
        return out
    if info.kind == "float":
        return [info.fixed_type or "fp32"]
    if info.kind == "bool":
        return [_classes.BOOL]
    return []


class ArgumentCoverage(BaseModel):
    """Coverage of one argument (or option, named ``[num_warps]``) of one kernel."""

    name: str
    kind: str = Field(
        description="pointer / int / constexpr / float / bool / option / unknown; key for the pseudo-argument"
        " [key], whose classes are exact keys of compiles without argument classes (listener-only Triton"
        " compiles, events without a signature)."
    )
    specialize: bool = Field(default=True, description="False under do_not_specialize.")
    align: bool = Field(default=True, description="False under do_not_specialize(_on_alignment).")
    classes: list[str] = Field(description="Every class enumerated, e.g. 'i32:%16', '*fp32:unaligned', '=64'.")
    covered: list[str] = Field(description="Classes compiled outside serving (startup / warmup).")
    uncovered: list[str]
    serving_only: list[str] = Field(default_factory=list, description="Uncovered classes serving compiles met.")


@dataclass(frozen=True)
class Expected:
    """A key expected to compile in serving: a manifest entry or a previous run's serving compile.

    ``attrs`` has the compile event's ``signature``, ``constexprs`` and ``options``."""

    kernel: str
    key: str
    attrs: Mapping[str, Any] = field(default_factory=dict)
    source: str = "manifest"
    module: str | None = None
    source_hash: str | None = None
    """The kernel's ``JITFunction.cache_key`` (a hash of its source and dependencies) when the key
    was recorded: the manifest entry's ``source_hash``, the journal event's. ``None`` when unknown
    (older manifests and journals): the key is then compared whatever the kernel's source."""


class MissingKey(BaseModel):
    """An expected key of a kernel that nothing compiled before serving."""

    key: str | None = Field(description="The specialization key (None: the kernel as a whole).")
    source: str = Field(description="serving (compiled in serving), manifest, journal, or module (imported).")
    source_hash: str | None = Field(
        default=None,
        description="The kernel's source hash (JITFunction.cache_key) the key was recorded for: set on a missing"
        " key recorded with another hash than this journal's compiles of the kernel (its reason says so:"
        " replay skips such manifest entries), and on other_source keys when known.",
    )
    reason: str = Field(description="Why it would compile: same wording as `jitwatch why`.")
    reason_kind: str
    fixes: list[str] = Field(default_factory=list)
    compared_as: str | None = Field(
        default=None,
        description="other_source keys: the key compared in its place (the same launch's key with the kernel"
        " compiled now); None: nothing stands for it, it was not compared (--require-complete fails on it"
        " unless --allow-other-source).",
    )


class KernelCoverage(BaseModel):
    """Specialization coverage of one kernel (by Triton's ``fn.name``, its qualified name)."""

    backend: str = Field(
        default="triton",
        description="The JIT backend. Triton kernels get per-argument classes; other backends (torch.compile,"
        " the DSL backends) are covered by exact key: covered/total count keys, not classes.",
    )
    kernel: str
    module: str | None = None
    covered: int = Field(description="Keys needed that were compiled before serving (startup / warmup).")
    total: int = Field(
        description="Keys needed: those compiled before serving plus the expected keys nothing compiled before"
        " serving (``missing``: serving compiles, manifest entries, a previous journal's serving compiles, a"
        " never-compiled --allow kernel as one)."
    )
    ratio: float = Field(
        description="covered / total, 0..1 (1.0 when nothing is needed): the headline figure and the metric"
        " jitwatch_specialization_coverage_ratio. 1.0 means warmup compiled every key seen or expected."
    )
    classes_covered: int = Field(
        default=0, description="Detail (Triton): argument classes some compile before serving used, summed."
    )
    classes_total: int = Field(
        default=0,
        description="Detail (Triton): every argument class Triton can tell apart, summed over arguments; most"
        " are never passed by a given server (i64 ints, unaligned pointers), so a low share is not a failure.",
    )
    class_ratio: float = Field(
        default=1.0, description="classes_covered / classes_total (1.0 when nothing is enumerable); a detail."
    )
    warmup_keys: int = Field(description="Distinct specialization keys compiled outside serving.")
    warmup_pruned: int = Field(
        default=0,
        description="Compiles before serving of this kernel that the journal's aggregates count but its event"
        " log no longer holds (retired by retention, or past the events read): their keys are not counted in"
        " covered / total, and a serving compile's reason is the one diagnosed when it compiled.",
    )
    serving_keys: int = Field(description="Distinct keys first compiled during serving.")
    flags_known: bool = Field(description="do_not_specialize flags read from the kernel, not inferred.")
    arguments: list[ArgumentCoverage] = Field(default_factory=list)
    uncovered: list[str] = Field(default_factory=list, description="'argument:class' labels not covered.")
    missing: list[MissingKey] = Field(
        default_factory=list, description="Expected keys (exact combinations) not compiled before serving."
    )
    other_source: list[MissingKey] = Field(
        default_factory=list,
        description="Expected keys (--manifest, --expect-journal) recorded for another source of this kernel"
        " that cannot occur with the kernel compiled now: another number of arguments, or an argument specialized"
        " when recorded and under do_not_specialize now (or the other way round), from the kernel (--allow)"
        " or this journal's compiles of it. Not counted in total, not in missing; the key the same launch"
        " compiles now, if any, is compared in its place (compared_as). --require-complete fails on those with"
        " none (nothing checked them) unless --allow-other-source, and on all with --fail-on-other-source;"
        " re-record the manifest or expected journal.",
    )

    @property
    def complete(self) -> bool:
        """Every expected key of this kernel was compiled before serving."""
        return not self.missing


class CoverageReport(BaseModel):
    """Body of coverage in ``/jit`` and ``jitwatch coverage --json``."""

    generated_ts: float = Field(default_factory=time.time)
    int_widths: list[str] = Field(default_factory=lambda: list(DEFAULT_INT_WIDTHS))
    kernels: list[KernelCoverage] = Field(default_factory=list)
    nothing_to_check_reason: str | None = Field(
        default=None,
        description="Why there is nothing to check (no kernel row: no compile event to count and no expected"
        " key), e.g. 'no events in the journal at DIR'; null when there is something to check.",
    )

    def by_kernel(self) -> dict[str, KernelCoverage]:
        return {k.kernel: k for k in self.kernels}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def complete(self) -> bool:
        """Something was checked (:attr:`nothing_to_check` is false) and no kernel misses an
        expected key (see the module docstring). An empty report is *not* complete: nothing in
        it says warmup compiled anything."""
        return bool(self.kernels) and all(k.complete for k in self.kernels)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def nothing_to_check(self) -> bool:
        """No kernel row: no compile event coverage can count and no expected key (an empty
        journal, the wrong journal, a worker that compiled nothing). Then :attr:`complete` is
        false and :attr:`nothing_to_check_reason` says why."""
        return not self.kernels

    def incomplete(self) -> list[str]:
        """One line per missing key: ``kernel [source]: reason``."""
        return [f"{k.kernel} [{m.source}]: {m.reason}" for k in self.kernels for m in k.missing]

    def of_other_source(self, *, uncompared_only: bool = False) -> list[str]:
        """One line per expected key recorded for another source of its kernel
        (:attr:`KernelCoverage.other_source`): ``kernel [source]: reason``; ``uncompared_only``:
        only those nothing stands for now (:attr:`MissingKey.compared_as` ``None``), which no
        compile of this journal can show covered or not."""
        return [
            f"{k.kernel} [{m.source}]: {m.reason}"
            for k in self.kernels
            for m in k.other_source
            if not (uncompared_only and m.compared_as is not None)
        ]


Proc = tuple[str, int, int]
"""One worker process: (host, rank, pid), as its events carry them."""


@dataclass
class _Obs:
    module: str | None = None
    names: list[str] = field(default_factory=list)
    per_arg: dict[str, list[tuple[tuple[Any, ...], bool]]] = field(default_factory=dict)
    options: dict[str, list[tuple[Any, bool]]] = field(default_factory=dict)
    warm_keys: set[str] = field(default_factory=set)
    serving_keys: set[str] = field(default_factory=set)
    warm_seen: dict[str, Seen] = field(default_factory=dict)
    expected: dict[str, tuple[str, Seen]] = field(default_factory=dict)
    """Expected key → (source, what is known of it), first source wins (serving before others)."""
    classed: set[str] = field(default_factory=set)
    """Keys read per argument (a parseable key with a signature)."""
    keyed: dict[str, tuple[bool, bool]] = field(default_factory=dict)
    """Keys of compiles without argument classes, by exact key (:func:`_by_key`) → (compared by exact
    key by Triton's explainer, i.e. listener-only; met in serving or expected)."""
    source_hashes: set[str] = field(default_factory=set)
    """The source hashes (``attrs["source_hash"]``) this journal's compiles of the kernel carry."""
    modules: set[str] = field(default_factory=set)
    """The modules (``attrs["module"]``) this journal's compiles of the kernel name carry (two
    kernels of one name in two modules share an entry)."""
    other_source: dict[str, tuple[Expected, str, str | None]] = field(default_factory=dict)
    """Expected keys that cannot occur with the kernel compiled now, by key → (the key, what changed,
    the key compared instead if any: :func:`_as_now`)."""
    hash_changed: dict[str, str] = field(default_factory=dict)
    """Expected keys (still possible) recorded with another source hash → the recorded hash."""
    warm_by_proc: dict[Proc, dict[str, Seen]] = field(default_factory=dict)
    """Worker process (host, rank, pid) → the keys it compiled before serving (what its own caches hold)."""
    warm_ts: dict[str, dict[Proc, float]] = field(default_factory=dict)
    """Key compiled before serving → the processes that did → the newest such compile's time."""
    served_on: dict[str, dict[Proc, tuple[Seen, float]]] = field(default_factory=dict)
    """Key compiled in serving → the processes that compiled it in serving (first compile each, its time)."""
    rank_missed: dict[str, list[Proc]] = field(default_factory=dict)
    """Keys another worker process compiled before serving, compiled in serving by these processes,
    which never compiled them before serving (nor did a later worker of their rank): each process
    compiles into its own caches, so another rank's warmup, or an earlier worker's of the same rank
    (restarted: new pid), covers nothing here (:func:`_rank_missed`)."""

    def key_only(self) -> list[str]:
        """The keys counted by exact key only (never also read per argument), in order seen."""
        return [k for k in self.keyed if k not in self.classed]


def _observe(o: _Obs, key: str, attrs: Mapping[str, Any], warm: bool) -> bool:
    parsed = parse_key(key)
    sig = attrs.get("signature")
    if parsed is None or not isinstance(sig, Mapping):
        return False
    names = [str(n) for n in sig]
    o.names = o.names or names
    for name, entry in zip(names, parsed, strict=False):
        o.per_arg.setdefault(name, []).append((entry, warm))
    opts = attrs.get("options")
    if isinstance(opts, Mapping):
        for opt in OPTION_ARGS:
            if opt in opts and opts[opt] is not None:
                o.options.setdefault(opt, []).append((opts[opt], warm))
    return True


def _by_key(o: _Obs, key: str, attrs: Mapping[str, Any], warm: bool) -> None:
    """Count a compile without argument classes by its exact key: one Triton's explainer compares
    by exact key (a listener-only compile, its key Triton's cache hash:
    :func:`~jitwatch.backends.triton.explain.by_exact_key`) or an
    event whose key does not parse or that has no ``signature`` (a failed capture, an older
    journal). Only the same key compiled before serving covers it."""
    exact, served = o.keyed.get(key, (False, False))
    o.keyed[key] = (exact or by_exact_key(attrs), served or not warm)


def _key_reason(name: str, o: _Obs, key: str) -> Reason:
    """Why a key counted by exact key (:func:`_by_key`) would compile in serving: as the
    :class:`~jitwatch.core.diagnosis.Diagnoser` says it at compile time (nothing to diff in a cache
    hash), ``never warmed`` or a new key beside the kernel's warmed ones, with Triton's fix of a key
    compared by exact key (:func:`~jitwatch.backends.triton.explain.exact_key_fixes`: run that code
    path in warmup, no manifest can hold it) when it is one."""
    fixes = exact_key_fixes(name) if o.keyed.get(key, (False, False))[0] else None
    if not o.warm_keys:
        return never_warmed(name, backend="triton", exact_key=fixes, module=o.module)
    return new_key(name, len(o.warm_keys), "triton", exact_key=fixes, module=o.module)


def _proc(ev: Any) -> Proc:
    return (str(ev.host), int(ev.rank), int(ev.pid))


def _latest_by_rank(warm: Mapping[Proc, float]) -> dict[int, float]:
    """Rank → the newest time one of its processes compiled the key before serving."""
    out: dict[int, float] = {}
    for (_, rank, _), ts in warm.items():
        out[rank] = max(ts, out.get(rank, ts))
    return out


def _warmed_for(proc: Proc, served_ts: float, warm: Mapping[Proc, float] | None, latest: Mapping[int, float]) -> bool:
    """Whether a key compiled in serving by ``proc`` at ``served_ts`` counts as compiled before
    serving: ``proc`` itself compiled it before serving (``warm``: process → the newest time it
    did), or a worker of the same rank did after ``served_ts`` (``latest``: :func:`_latest_by_rank`
    of ``warm``; restarted with the fix applied: what that rank runs now). Another rank's warmup,
    the same rank's on another host at the same time, or an earlier worker's of the same rank
    (restarted, new pid: its caches went with it) covers nothing. A restarted worker that gets its
    predecessor's pid on the same host (a container's pid 1) cannot be told apart from it. O(1)."""
    if not warm:
        return False
    return proc in warm or latest.get(proc[1], served_ts) > served_ts


def _rank_missed(o: _Obs) -> None:
    """Move the keys some worker process compiled in serving without that process compiling them
    before serving (:func:`_warmed_for`) out of :attr:`_Obs.warm_keys` into
    :attr:`_Obs.rank_missed`: a key rank 0 warmed and rank 1 compiled in serving was counted
    covered (another process's warmup), and ``--require-complete`` passed while rank 1 stalled its
    peers; so did a key rank 1's worker warmed before a restart and its next worker (new pid, no
    warmup) compiled in serving."""
    for key, procs in o.served_on.items():
        if key not in o.warm_keys:
            continue
        warm = o.warm_ts.get(key) or {}
        latest = _latest_by_rank(warm)
        missed = sorted(p for p, (_, ts) in procs.items() if not _warmed_for(p, ts, warm, latest))
        if missed:
            o.rank_missed[key] = missed
            o.warm_keys.discard(key)


def _proc_labels(procs: Iterable[Proc]) -> dict[Proc, str]:
    """``rank R`` per process, ``rank R (pid P)`` where several processes of rank R are named,
    ``rank R (pid P on HOST)`` where they run on several hosts. Linear."""
    by_rank: dict[int, list[Proc]] = {}
    for p in dict.fromkeys(procs):
        by_rank.setdefault(p[1], []).append(p)
    out: dict[Proc, str] = {}
    for rank, same in by_rank.items():
        hosts = len({q[0] for q in same})
        for p in same:
            if len(same) == 1:
                out[p] = f"rank {rank}"
            elif hosts == 1:
                out[p] = f"rank {rank} (pid {p[2]})"
            else:
                out[p] = f"rank {rank} (pid {p[2]} on {p[0]})"
    return out


def _rank_reason(name: str, o: _Obs, key: str, seen: Seen) -> Reason:
    """Why ``key`` compiled in serving in the first process of :attr:`_Obs.rank_missed` that missed
    it: against that process's own compiles before serving (as its own diagnosis says it:
    ``never warmed`` when it warmed nothing of the kernel), naming the processes that warmed it."""
    missed = o.rank_missed[key]
    proc = missed[0]
    own = [v for k, v in o.warm_by_proc.get(proc, {}).items() if k != key]
    exact = exact_key_fixes(name) if o.keyed.get(key, (False, False))[0] else None
    if not own:
        base = never_warmed(name, backend="triton", exact_key=exact, module=o.module)
    elif key not in o.classed:
        base = new_key(name, len(own), "triton", exact_key=exact, module=o.module)
    else:
        base = explain_key(seen, own) or never_warmed("this kernel")
    warmed = sorted(o.warm_ts.get(key, {}))
    shown_missed, shown_warmed = missed[:8], warmed[:8]  # a crash-looping rank: thousands of processes
    labels = _proc_labels([*shown_missed, *shown_warmed])
    missed_l = list(dict.fromkeys(labels[p] for p in shown_missed))
    warmed_l = list(dict.fromkeys(labels[p] for p in shown_warmed))
    if all("(" not in lab for lab in labels.values()):
        on = missed_l[0] if len(missed_l) == 1 else "ranks " + ", ".join(m.removeprefix("rank ") for m in missed_l)
        by = warmed_l[0] if len(warmed_l) == 1 else "ranks " + ", ".join(w.removeprefix("rank ") for w in warmed_l)
        each = "each rank compiles its own"
    else:
        on, by = ", ".join(missed_l), ", ".join(warmed_l)
        each = "each worker process compiles its own, a restarted one too"
    on += ", …" if len(missed) > 8 else ""
    more = ", …" if len(warmed) > 8 else ""
    return Reason(
        base.kind,
        f"on {on}: {base.text}; {by}{more} compiled this key before serving ({each})",
        base.changes,
        base.fixes,
    )


def _missing(name: str, o: _Obs) -> list[MissingKey]:
    out: list[MissingKey] = []
    baseline = list(o.warm_seen.values())
    for key, (source, seen) in o.expected.items():
        if key in o.warm_keys:
            continue
        if key in o.rank_missed and source == "serving":
            reason = _rank_reason(name, o, key, seen)
        elif key not in o.classed:
            reason = _key_reason(name, o, key)
        else:
            reason = (explain_key(seen, baseline) if baseline else None) or never_warmed("this kernel")
        recorded = o.hash_changed.get(key) if source != "serving" else None
        note = _hash_note(name, o, recorded) if recorded else ""
        out.append(
            MissingKey(
                key=key,
                source=source,
                source_hash=recorded,
                reason=reason.text + note,
                reason_kind=reason.kind,
                fixes=list(reason.fixes),
            )
        )
    return out


def _module_of(fn: Any) -> str | None:
    """The module of kernel ``fn`` (a ``JITFunction``: its Python function's ``__module__``), if known."""
    module = getattr(getattr(fn, "fn", None), "__module__", None) or getattr(fn, "__module__", None)
    return module if isinstance(module, str) else None


def _specialized_now(name: str, o: _Obs, info: ArgInfo | None) -> bool | None:
    """Whether int / pointer argument ``name`` of the kernel compiled now is value-specialized
    (``False``: under ``do_not_specialize``): from the kernel when given (``info``), else from this
    journal's compiles of it, when they agree (Triton writes ``(type, None)`` for an int or pointer
    only under ``do_not_specialize``). ``None`` when unknown (no such compile, or both seen)."""
    if info is not None and info.known:  # an un-annotated parameter's kind is unknown: its flag is still exact
        return None if info.kind in ("constexpr", "float", "bool") else info.specialize
    specs = {
        entry[1] is not None
        for entry, _ in o.per_arg.get(name, [])
        if len(entry) >= 2 and isinstance(entry[0], str) and (entry[0] in INT_TYPES or entry[0].startswith("*"))
    }
    return specs.pop() if len(specs) == 1 else None


def _as_now(o: _Obs, ex: Expected, infos: Mapping[str, ArgInfo]) -> tuple[str | None, Expected | None]:
    """Expected key ``ex`` against the kernel compiled now: ``(None, ex)`` when it can occur as
    recorded (or nothing tells); else ``(what changed, the key it stands for now)``. An argument
    specialized when recorded and under ``do_not_specialize`` now is rewritten as Triton keys it
    now (``('constexpr', 1)`` / ``('i32', 'D')`` → ``('i32', None)``: the same launch compiles
    that key), so the workload recorded is still checked; arguments renamed only (as many) are
    compared by position under the names of now (Triton's key is positional: the same launch
    compiles the same key); ``(what changed, None)`` when no key stands for it: another number of
    arguments than this journal's compiles, or an argument under
    ``do_not_specialize`` when recorded and specialized now (its value is unknown). Flags come from
    the kernel (``infos``, ``--allow``) or this journal's compiles of it (:func:`_specialized_now`).

    The source hash alone does not tell: Triton's ``JITFunction.cache_key`` hashes the function
    from its ``def`` line (adding ``do_not_specialize`` to the decorator leaves it unchanged) and
    its line number (an edit above it changes it, while every key stays possible)."""
    parsed = parse_key(ex.key)
    sig = ex.attrs.get("signature")
    tail = key_options_text(ex.key)
    if parsed is None or not isinstance(sig, Mapping) or tail is None:
        return None, ex
    names = [str(n) for n in sig]
    now = list(infos) or o.names
    types = {str(k): v for k, v in sig.items()}
    constexprs = ex.attrs.get("constexprs")
    renamed = bool(now) and names != now
    if renamed:
        if len(names) != len(now) or len(parsed) != len(now):
            return f"arguments ({', '.join(names)}) when recorded, ({', '.join(now)}) now", None
        # arguments renamed only: Triton's key is positional, so the same launch compiles the
        # same key; it is compared by position, under the names of now
        to_now = dict(zip(names, now, strict=True))
        names, types = list(now), {to_now[k]: v for k, v in types.items()}
        if isinstance(constexprs, Mapping):
            constexprs = {to_now.get(str(k), str(k)): v for k, v in constexprs.items()}
    entries: list[tuple[Any, ...]] = list(parsed)
    changed: list[str] = []
    for i, (name, entry) in enumerate(zip(names, parsed, strict=False)):
        if len(entry) < 2:
            continue
        specialized = _specialized_now(name, o, infos.get(name))
        if specialized is None:
            continue
        ty, spec = entry[0], entry[1]
        typed = isinstance(ty, str) and (ty in INT_TYPES or ty.startswith("*"))
        if not (typed or _classes.is_folded_one((ty, spec), True)):
            continue
        was = not typed or spec is not None  # an int folded to 1 (==1) was specialized
        if specialized and not was:
            return f"{name}: do_not_specialize when recorded ({ty} any), specialized now", None
        if was and not specialized:
            shown = _classes.words(*_classes.class_of((ty, spec), int_arg=True))
            served = _classes.served_type((ty, spec), True) or str(ty)
            entries[i] = (served, None)
            types[name] = served
            changed.append(f"{name}: {shown} when recorded, do_not_specialize now ({served} any)")
    if not changed and not renamed:
        return None, ex
    attrs: dict[str, Any] = {**ex.attrs, "signature": types}
    if isinstance(constexprs, Mapping):  # an int folded to 1 is not a constant now
        attrs["constexprs"] = {k: v for k, v in constexprs.items() if types.get(str(k)) == "constexpr"}
    key = str(entries) + tail if changed else ex.key
    return ("; ".join(changed) or None), Expected(ex.kernel, key, attrs, ex.source, ex.module, ex.source_hash)


def _other_source(name: str, ex: Expected, why: str, now: str | None) -> MissingKey:
    """An expected key that cannot occur with kernel ``name`` compiled now (:func:`_as_now`);
    ``now`` is the key that stands for it now, compared instead, if any."""
    what = "the manifest" if ex.source == "manifest" else "the expected journal"
    fix = (
        "re-record the manifest from a run of the current source (jitwatch manifest export), or drop the entry"
        if ex.source == "manifest"
        else "pass --expect-journal a journal of a run of the current source"
    )
    return MissingKey(
        key=ex.key,
        source=ex.source,
        source_hash=ex.source_hash,
        reason=f"recorded for another source of {name} ({why}): "
        + ("compared as the key it compiles as now; " if now else "not compared; ")
        + f"re-record {what}",
        reason_kind="other_source",
        fixes=[fix],
        compared_as=now,
    )


def _hash_note(name: str, o: _Obs, recorded: str) -> str:
    """The note on a missing key recorded with another source hash of ``name`` (still possible)."""
    now = ", ".join(sorted(h[:12] for h in o.source_hashes))
    return (
        f" (recorded for another source of {name}: source hash {recorded[:12]}, compiled now {now}; replay skips"
        " such manifest entries: re-record the manifest / expected journal)"
    )


def coverage_from_events(
    events: Iterable[Any],
    *,
    kernels: Mapping[str, Any] | None = None,
    widths: Sequence[str] = DEFAULT_INT_WIDTHS,
    expected: Iterable[Expected] = (),
    known: Mapping[str, str | None] | None = None,
) -> CoverageReport:
    """Coverage from ``compile`` :class:`~jitwatch.core.events.Event` objects (any order).

    Args:
        kernels: optional ``{kernel name: JITFunction}`` for exact argument flags.
        widths: int types enumerated for every int argument.
        expected: keys expected in serving besides the journal's serving compiles (manifest
            entries, a previous run's serving compiles); their classes count as serving's.
        known: ``{kernel name: module}`` of kernels known to exist (imported ``@triton.jit``
            functions); one that never compiled before serving is listed as missing.
    """
    obs: dict[str, _Obs] = {}
    in_order = sorted(events, key=lambda e: (e.start_ts if e.start_ts is not None else e.ts, e.id or 0))
    for ev in in_order:  # oldest first: reasons break ties on the earliest warm key, as `jitwatch why`
        if ev.kind is not EventKind.COMPILE or not ev.kernel or not ev.key:
            continue
        o = obs.setdefault(ev.kernel, _Obs())
        warm = ev.phase is not Phase.SERVING
        if isinstance(ev.attrs.get("source_hash"), str):
            o.source_hashes.add(ev.attrs["source_hash"])
        if isinstance(ev.attrs.get("module"), str):
            o.modules.add(ev.attrs["module"])
        compiled = Seen(ev.key, {k: ev.attrs[k] for k in ("signature", "constexprs", "options") if k in ev.attrs})
        if _observe(o, ev.key, ev.attrs, warm):
            o.classed.add(ev.key)
            o.module = o.module or ev.attrs.get("module")
            if warm:
                o.warm_seen.setdefault(ev.key, compiled)
        else:  # no argument classes (listener-only, no signature): counted by exact key
            _by_key(o, ev.key, ev.attrs, warm)
        if warm:
            o.warm_keys.add(ev.key)
            proc = _proc(ev)
            o.warm_by_proc.setdefault(proc, {}).setdefault(ev.key, compiled)
            when = o.warm_ts.setdefault(ev.key, {})
            when[proc] = max(ev.ts, when.get(proc, ev.ts))
        else:
            o.serving_keys.add(ev.key)
            o.expected.setdefault(ev.key, ("serving", compiled))
            o.served_on.setdefault(ev.key, {}).setdefault(_proc(ev), (compiled, ev.ts))
    for o in obs.values():
        _rank_missed(o)
    kept: list[Expected] = []
    for ex in expected:  # judged against this journal's compiles only, before any expected key is observed
        o = obs.setdefault(ex.kernel, _Obs())
        fn = (kernels or {}).get(ex.kernel)
        if ex.key in o.expected:
            continue
        if fn is not None and ex.module is not None and _module_of(fn) not in (None, ex.module):
            fn = None  # a kernel of the same name in another module: its flags say nothing of this one
        why: str | None = None
        now: Expected | None = ex
        # a key recorded for a kernel of the same name in another module (or the journal's compiles
        # mix modules): nothing tells that kernel's flags now, so the key is compared as recorded
        if ex.module is None or not o.modules or o.modules == {ex.module}:
            why, now = _as_now(o, ex, {i.name: i for i in arg_infos_from_kernel(fn)} if fn is not None else {})
        if why is not None:  # it cannot occur any more: listed apart, its key now (if any) compared instead
            o.other_source.setdefault(ex.key, (ex, why, now.key if now else None))
            if now is None:
                continue
        if now is not None:  # the key compared: as recorded, or as it compiles now
            ex = now
        if ex.source_hash is not None and o.source_hashes and ex.source_hash not in o.source_hashes:
            o.hash_changed.setdefault(ex.key, ex.source_hash)
        kept.append(ex)
    for ex in kept:
        o = obs[ex.kernel]
        o.module = o.module or ex.module
        if ex.key in o.expected:
            continue
        if _observe(o, ex.key, ex.attrs, False):
            o.classed.add(ex.key)
        else:
            _by_key(o, ex.key, ex.attrs, False)
        o.expected[ex.key] = (ex.source, Seen(ex.key, dict(ex.attrs)))

    report = CoverageReport(int_widths=list(widths))
    for name, module in (known or {}).items():
        if name not in obs or not obs[name].warm_keys:
            o = obs.setdefault(name, _Obs())
            o.module = o.module or module
            if not o.expected:
                reason = never_warmed(name, module=o.module)
                report.kernels.append(
                    KernelCoverage(
                        kernel=name,
                        module=o.module,
                        covered=0,
                        total=1,
                        ratio=0.0,
                        warmup_keys=0,
                        serving_keys=0,
                        flags_known=False,
                        missing=[
                            MissingKey(
                                key=None,
                                source="module",
                                reason=reason.text,
                                reason_kind=reason.kind,
                                fixes=list(reason.fixes),
                            )
                        ],
                    )
                )
                del obs[name]
    for name in sorted(obs):
        o = obs[name]
        fn = (kernels or {}).get(name)
        infos = {i.name: i for i in arg_infos_from_kernel(fn)} if fn is not None else {}
        args: list[ArgumentCoverage] = []
        for arg in o.names:
            info = infos.get(arg) or ArgInfo(name=arg)
            seen = o.per_arg.get(arg, [])
            _infer(info, [e for e, _ in seen])
            labels = [(_label_from_key(info, e), w) for e, w in seen]
            classes = enumerate_classes(info, widths)
            for lab, _ in labels:
                if lab is not None and lab not in classes:
                    classes.append(lab)
            covered = sorted({lab for lab, w in labels if w and lab is not None}, key=classes.index)
            served = {lab for lab, w in labels if not w and lab is not None}
            uncovered = [c for c in classes if c not in covered]
            args.append(
                ArgumentCoverage(
                    name=arg,
                    kind=info.kind,
                    specialize=info.specialize,
                    align=info.align,
                    classes=classes,
                    covered=covered,
                    uncovered=uncovered,
                    serving_only=[c for c in uncovered if c in served],
                )
            )
        for opt, values in o.options.items():
            distinct = list(dict.fromkeys(_value_label(v) for v, _ in values))
            if len(distinct) < 2:
                continue
            covered = [c for c in distinct if any(w and _value_label(v) == c for v, w in values)]
            uncovered = [c for c in distinct if c not in covered]
            args.append(
                ArgumentCoverage(
                    name=f"[{opt}]",
                    kind="option",
                    classes=distinct,
                    covered=covered,
                    uncovered=uncovered,
                    serving_only=uncovered,
                )
            )
        by_key = o.key_only()
        if by_key:  # one class per exact key: covered only by the same key before serving
            covered = [k for k in by_key if k in o.warm_keys]
            uncovered = [k for k in by_key if k not in o.warm_keys]
            args.append(
                ArgumentCoverage(
                    name="[key]",
                    kind="key",
                    classes=by_key,
                    covered=covered,
                    uncovered=uncovered,
                    serving_only=[k for k in uncovered if o.keyed[k][1]],
                )
            )
        total = sum(len(a.classes) for a in args)
        cov = sum(len(a.covered) for a in args)
        missing = _missing(name, o)
        needed = len(o.warm_keys) + len(missing)  # a missing key is never a warm one (_missing)
        report.kernels.append(
            KernelCoverage(
                kernel=name,
                module=o.module,
                covered=len(o.warm_keys),
                total=needed,
                ratio=len(o.warm_keys) / needed if needed else 1.0,
                classes_covered=cov,
                classes_total=total,
                class_ratio=cov / total if total else 1.0,
                warmup_keys=len(o.warm_keys) + len(o.rank_missed),  # rank_missed: warm on another rank
                serving_keys=len(o.serving_keys - o.warm_keys),
                flags_known=fn is not None,
                arguments=args,
                uncovered=[f"{a.name}:{c}" for a in args for c in a.uncovered],
                missing=missing,
                other_source=[_other_source(name, ex, why, now) for ex, why, now in o.other_source.values()],
            )
        )
    report.kernels.sort(key=lambda k: k.kernel)
    if not report.kernels:
        report.nothing_to_check_reason = "no compile event with a kernel name and a key, and no expected key"
    return report


def coverage_for_journal(
    journal: Journal,
    *,
    kernels: Mapping[str, Any] | None = None,
    widths: Sequence[str] = DEFAULT_INT_WIDTHS,
    rank: int | None = None,
    limit: int = 20_000,
    expected: Iterable[Expected] = (),
    known: Mapping[str, str | None] | None = None,
    command: str = "jitwatch",
) -> CoverageReport:
    """Coverage of every kernel in the journal's newest ``limit`` ``compile`` events (the event log,
    so also bounded by retention; every rank unless ``rank`` is given). The missing keys' fixes name
    ``journal.directory`` in their manifest commands (:func:`~jitwatch.backends.explain.runnable_fix`),
    run as ``command`` (the CLI passes :func:`~jitwatch.backends.explain.local_jitwatch`; ``/jit``
    keeps the bare ``jitwatch``).
    Read-only; raises ``sqlite3.Error`` only. Cost: one indexed query plus a ``literal_eval`` per
    event (~10k/s)."""
    events = list(journal.events(kind=EventKind.COMPILE, backend="triton", rank=rank, limit=limit, newest_first=True))
    report = coverage_from_events(events, kernels=kernels, widths=widths, expected=expected, known=known)
    stats = journal.stats()
    others = sorted({row.backend for row in stats} - {"", "triton"})  # from the aggregates: cheap
    for b in others:
        keyed = list(journal.events(kind=EventKind.COMPILE, backend=b, rank=rank, limit=limit, newest_first=True))
        report.kernels.extend(coverage_by_key(keyed))
        events.extend(keyed)
    _note_pruned(report, events, stats, rank)
    for k in report.kernels:
        for m in k.missing:
            m.fixes = runnable_fixes(m.fixes, journal.directory, command)
    report.nothing_to_check_reason = None if report.kernels else nothing_to_check_reason(journal)
    return report


def _note_pruned(report: CoverageReport, events: Sequence[Any], stats: Sequence[StatRow], rank: int | None) -> None:
    """Set :attr:`KernelCoverage.warmup_pruned` from the aggregates (exact for the journal's life)
    against the compile events read, and for a kernel with some, give each missing serving key the
    reason diagnosed when it compiled (the event's ``reason`` / ``fixes``, if journaled): recomputed
    against the events left, it read ``never warmed (no compile of this kernel before serving)`` once
    retention (7 days by default) had retired the warmup's compiles, with the wrong fix."""
    read: dict[tuple[str, str], int] = {}
    served: dict[tuple[str, str, str], Any] = {}
    warm: dict[tuple[str, str, str], dict[Proc, float]] = {}
    for ev in events:
        if ev.kind is not EventKind.COMPILE or not ev.kernel:
            continue
        if ev.phase is not Phase.SERVING:
            read[(ev.backend, ev.kernel)] = read.get((ev.backend, ev.kernel), 0) + 1
            when = warm.setdefault((ev.backend, ev.kernel, ev.key or ""), {})
            when[_proc(ev)] = max(ev.ts, when.get(_proc(ev), ev.ts))
    latest = {k: _latest_by_rank(v) for k, v in warm.items()}
    for ev in events:  # newest first: the oldest serving compile of a process that missed the key stays
        if ev.kind is EventKind.COMPILE and ev.kernel and ev.phase is Phase.SERVING:
            k3 = (ev.backend, ev.kernel, ev.key or "")
            if not _warmed_for(_proc(ev), ev.ts, warm.get(k3), latest.get(k3, {})):
                served[k3] = ev  # a process the key was warm for (a later worker warmed it) is not the one
    counted: dict[tuple[str, str], int] = {}
    for row in stats:
        if (
            row.kind == EventKind.COMPILE.value
            and row.phase is not Phase.SERVING
            and (rank is None or row.rank == rank)
        ):
            counted[(row.backend, row.kernel)] = counted.get((row.backend, row.kernel), 0) + row.count
    for k in report.kernels:
        pruned = counted.get((k.backend, k.kernel), 0) - read.get((k.backend, k.kernel), 0)
        if pruned <= 0:
            continue
        k.warmup_pruned = pruned
        for m in k.missing:
            ev = served.get((k.backend, k.kernel, m.key or "")) if m.source == "serving" else None
            if ev is None or k.backend != "triton":
                continue  # other backends: their missing keys already carry the journaled reason
            reason = ev.attrs.get("reason")
            if not isinstance(reason, str) or not reason:
                continue
            fixes = ev.attrs.get("fixes")
            m.reason = f"{reason} (as diagnosed when it compiled: {plural(pruned, 'compile')} before serving pruned)"
            m.reason_kind = str(ev.attrs.get("reason_kind") or m.reason_kind)
            m.fixes = [str(f) for f in fixes] if isinstance(fixes, list) else m.fixes


def nothing_to_check_reason(journal: Journal) -> str:
    """Why a coverage report of ``journal`` has no kernel row, naming its directory:
    ``no events in the journal at DIR`` (never written: a ``journal.db`` a writer opened and
    stopped before its first event; ``jitwatch serve`` never creates one), ``no events in the journal at DIR (N events
    written, none left: pruned by retention)``, ``no compile events in the journal at DIR (N other
    events)`` (workers registered, compiled nothing), or ``... N compile events, none with a
    backend, a kernel name and a key``. Read-only; raises ``sqlite3.Error`` only; cheap (counts
    and one indexed lookup)."""
    where = f"the journal at {journal.directory}"
    written = journal.event_watermark()
    if written == 0:
        return f"no events in {where}"
    kept = journal.count_events()
    if kept == 0:
        return f"no events in {where} ({plural(written, 'event')} written, none left: pruned by retention)"
    if not journal.events(kind=EventKind.COMPILE, limit=1):
        return f"no compile events in {where} ({plural(kept, 'other event')})"
    compiles = sum(row.count for row in journal.stats() if row.kind == EventKind.COMPILE.value)
    return f"no compile event in {where} has a backend, a kernel name and a key ({plural(compiles, 'compile event')})"


def coverage_by_key(events: Iterable[Any]) -> list[KernelCoverage]:
    """Coverage by exact key for backends without per-argument classes (torch.compile, the DSL
    backends): per (backend, kernel), each key first compiled in serving and never before is
    missing, with the reason the event carries (Dynamo's guard failure for torch.compile) or
    "compiled in serving". So ``--require-complete`` fails on a serving recompile of any backend.
    Per worker process as Triton's (:func:`_warmed_for`): another rank's or an earlier worker's
    warmup covers nothing; a later worker of the same rank warming the key does."""
    warm: dict[tuple[str, str], dict[str, dict[Proc, float]]] = {}
    served: list[Any] = []
    modules: dict[tuple[str, str], str | None] = {}
    for ev in sorted(events, key=lambda e: (e.ts, e.id or 0)):
        if ev.kind is not EventKind.COMPILE or not ev.kernel:
            continue
        k = (ev.backend, ev.kernel)
        modules.setdefault(k, ev.attrs.get("module") if isinstance(ev.attrs.get("module"), str) else None)
        if ev.phase is Phase.SERVING:
            served.append(ev)
        else:
            procs = warm.setdefault(k, {}).setdefault(ev.key or "", {})
            procs[_proc(ev)] = max(ev.ts, procs.get(_proc(ev), ev.ts))
    serving: dict[tuple[str, str], dict[str, Any]] = {}
    latest: dict[tuple[tuple[str, str], str], dict[int, float]] = {}
    for ev in served:  # another process's warmup (another rank, an earlier worker) filled other caches
        k = (ev.backend, ev.kernel)
        key = ev.key or ""
        warmed_by = warm.get(k, {}).get(key)
        if warmed_by and (k, key) not in latest:
            latest[(k, key)] = _latest_by_rank(warmed_by)
        if not _warmed_for(_proc(ev), ev.ts, warmed_by, latest.get((k, key), {})):
            serving.setdefault(k, {}).setdefault(key, ev)
    out: list[KernelCoverage] = []
    for k in sorted(set(warm) | set(serving)):
        missing = []
        for key, ev in serving.get(k, {}).items():
            reason = ev.attrs.get("reason")
            fixes = ev.attrs.get("fixes")
            missing.append(
                MissingKey(
                    key=key or None,
                    source="serving",
                    reason=str(reason) if reason else "compiled in serving",
                    reason_kind=str(ev.attrs.get("reason_kind") or ("compiler" if reason else "serving")),
                    fixes=[str(f) for f in fixes] if isinstance(fixes, list) else [],
                )
            )
        warmed = set(warm.get(k, {}))
        n_warm = len(warmed - set(serving.get(k, {})))  # a key one rank missed is not covered
        out.append(
            KernelCoverage(
                backend=k[0],
                kernel=k[1],
                module=modules.get(k),
                covered=n_warm,
                total=n_warm + len(missing),
                ratio=n_warm / (n_warm + len(missing)) if n_warm + len(missing) else 1.0,
                warmup_keys=len(warmed),
                serving_keys=len(missing),
                flags_known=False,
                missing=missing,
            )
        )
    return out


def expected_from_journal(journal: Journal, *, source: str = "journal", limit: int = 20_000) -> list[Expected]:
    """A previous run's serving compiles (Triton), as expected keys for :func:`coverage_from_events`.

    Listener-only compiles are expected too, by exact key (Triton's cache hash: the same source,
    options, target and Triton version hash the same in the next run); their ``source`` is kept."""
    out: list[Expected] = []
    for ev in journal.events(kind=EventKind.COMPILE, phase=Phase.SERVING, backend="triton", limit=limit):
        if ev.kernel and ev.key:
            keep = ("signature", "constexprs", "options", "source")
            attrs: dict[str, Any] = {k: ev.attrs[k] for k in keep if k in ev.attrs}
            sh = ev.attrs.get("source_hash")
            module = ev.attrs.get("module")
            out.append(Expected(ev.kernel, ev.key, attrs, source, module, sh if isinstance(sh, str) else None))
    return out


def known_kernels(modules: Iterable[Any]) -> dict[str, str | None]:
    """``{fn.name: module}`` of the ``@triton.jit`` functions (``@triton.autotune`` included)
    defined in the given, already imported modules (attributes with ``params`` and a ``fn``),
    less the device functions: a ``@triton.jit`` function another one of the given modules calls
    (``_slot_mapping_body`` in :mod:`jitwatch.kernels.slot_mapping`; also called through an alias
    or an attribute, ``helpers.twice(x)``, resolved in the caller's globals) is compiled inside its
    caller and never on its own, so expecting a compile of it would fail ``--require-complete``
    forever, unless its module's own code also launches it (``fn[grid](...)``, ``fn.run`` /
    ``fn.warmup``): a kernel both launched and called stays expected. A device function whose
    callers are in modules not given cannot be told from a kernel, nor a kernel launched only from
    other modules from a device function (it is left out)."""
    mods = list(modules)
    found: list[tuple[Any, str, Any]] = []  # (module, name, JITFunction)
    for mod in mods:
        for value in vars(mod).values():
            fn = _jit_of(value)
            if fn is not None and getattr(fn.fn, "__module__", None) == mod.__name__:
                name = str(getattr(fn, "__name__", None) or fn.fn.__qualname__)
                if all(f is not fn for _, _, f in found):
                    found.append((mod, name, fn))
    called: set[int] = set()
    for mod, _, fn in found:
        called |= _called_jit(fn, {n: f for m, n, f in found if m is mod})
    launched: set[int] = set()
    for mod in mods:
        ran, passed = _launched_jit(mod)
        launched |= ran
        called |= passed
    return {name: mod.__name__ for mod, name, fn in found if id(fn) not in called or id(fn) in launched}


def _jit_of(value: Any) -> Any:
    """The ``JITFunction`` of a ``@triton.jit`` (or ``@triton.autotune``-wrapped) value, else ``None``."""
    fn = value
    for _ in range(8):
        if hasattr(fn, "params") and hasattr(fn, "fn"):
            return fn
        if not hasattr(fn, "fn"):
            return None
        fn = fn.fn
    return None


def _resolve(node: Any, scope: Mapping[str, Any]) -> Any:
    """The object a call's target names (``helper``, ``mod.helper``) in ``scope``; attributes only
    of modules (no arbitrary ``getattr``). ``None`` when unknown."""
    import ast
    import types

    if isinstance(node, ast.Name):
        return scope.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, scope)
        if isinstance(base, types.ModuleType):
            return vars(base).get(node.attr)
    return None


def _called_jit(fn: Any, same_module: Mapping[str, Any]) -> set[int]:
    """``id`` of the ``@triton.jit`` functions ``fn``'s source calls (``helper(...)``,
    ``mod.helper(...)``, an alias), resolved in its Python function's globals; a plain name not
    found there is matched by name among ``same_module``'s. Empty when the source is not there or
    does not parse. Never raises."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(str(fn.src)))
        scope = dict(getattr(fn.fn, "__globals__", None) or {})
    except Exception:  # noqa: BLE001 - no source, or not parseable: nothing known to be called
        return set()
    out: set[int] = set()
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        target = _jit_of(_resolve(n.func, scope))
        if target is None and isinstance(n.func, ast.Name):
            target = same_module.get(n.func.id)
        if target is not None and target is not fn:
            out.add(id(target))
    return out


def _launched_jit(mod: Any) -> tuple[set[int], set[int]]:
    """``id`` of the ``@triton.jit`` functions module ``mod``'s own source launches
    (``kernel[grid](...)``, ``kernel.run(...)``, ``kernel.warmup(...)``), and of those it passes to
    a launch as an argument (``kernel[grid](x, ACT=relu)``: a device function the kernel calls as
    its constexpr ``ACT``), names resolved in the module. Empty when its source cannot be read.
    Never raises."""
    import ast
    import inspect

    try:
        tree = ast.parse(inspect.getsource(mod))
    except Exception:  # noqa: BLE001 - no source (a compiled or frozen module): nothing known
        return set(), set()
    scope = vars(mod)
    out: set[int] = set()
    passed: set[int] = set()
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if isinstance(f, ast.Subscript):
            target = _resolve(f.value, scope)
        elif isinstance(f, ast.Attribute) and f.attr in ("run", "warmup"):
            target = _resolve(f.value, scope)
        else:
            continue
        jit = _jit_of(target)
        if jit is None:
            continue
        out.add(id(jit))
        for arg in [*n.args, *(k.value for k in n.keywords)]:
            given = _jit_of(_resolve(arg, scope))
            if given is not None:
                passed.add(id(given))
    return out, passed


def coverage_ratio_samples(report: CoverageReport, labels: Mapping[str, str] | None = None) -> dict[str, float]:
    """Values of ``jitwatch_specialization_coverage_ratio{kernel}``: kernel label → ratio (0..1).

    ``labels`` maps kernel names to their metric label (``Journal.stats()`` ``.label``:
    kernels past ``JITWATCH_MAX_KERNELS`` share ``_other``); kernels folded into one label are
    pooled (sum of keys compiled before serving / sum of keys needed).
    """
    pooled: dict[str, list[int]] = {}
    for k in report.kernels:
        if k.backend != "triton":  # argument-class coverage is Triton's; others are covered by key
            continue
        label = (labels or {}).get(k.kernel, k.kernel)
        acc = pooled.setdefault(label, [0, 0])
        acc[0] += k.covered
        acc[1] += k.total
    return {label: (c / t if t else 1.0) for label, (c, t) in pooled.items()}


def coverage_labels(stats: Iterable[StatRow]) -> dict[str, str]:
    """Triton kernel name → its metric label, from aggregate rows (:meth:`Journal.stats`): the
    ``labels`` of :func:`coverage_ratio_samples` (only Triton kernels have ratio samples, so a
    kernel of the same name in another backend never lends its label)."""
    return {row.kernel: row.label for row in stats if row.backend == "triton"}


def journal_coverage_ratios(journal: Journal) -> dict[str, float]:
    """``coverage_ratio_samples`` for a journal, with its own kernel labels (for the collector)."""
    return coverage_ratio_samples(coverage_for_journal(journal), coverage_labels(journal.stats()))


def kernels_for_report(report: CoverageReport, allow: Sequence[str]) -> dict[str, Any]:
    """``{kernel: JITFunction}`` for the report's kernels whose modules are allowed (see
    :func:`jitwatch.backends.triton.resolve.resolve_kernel`: import by name under ``allow`` only); others are
    left out."""
    out: dict[str, Any] = {}
    for k in report.kernels:
        if k.module is None:
            continue
        try:
            out[k.kernel] = resolve_kernel(k.module, k.kernel, allow=allow)
        except KernelNotResolved:
            continue
    return out


__all__ = [
    "DEFAULT_INT_WIDTHS",
    "OTHER_KERNEL",
    "ArgInfo",
    "ArgumentCoverage",
    "CoverageReport",
    "Expected",
    "KernelCoverage",
    "MissingKey",
    "arg_infos_from_kernel",
    "classify",
    "classify_call",
    "coverage_by_key",
    "coverage_for_journal",
    "coverage_from_events",
    "coverage_labels",
    "coverage_ratio_samples",
    "enumerate_classes",
    "expected_from_journal",
    "journal_coverage_ratios",
    "kernels_for_report",
    "known_kernels",
    "nothing_to_check_reason",
]
