"""Why a Triton kernel compiled again: the difference between two specialization keys, per argument.

Triton 3.x (``JITFunction.run`` → ``native_specialize_impl``) compiles one binary per key; a key
is one ``(type, spec)`` per argument plus the compile options (see :mod:`.keys`). Read in the
field's terms:

* int (not constexpr): ``==1`` (an int passed as 1, folded into a constant), ``i32 %16``, ``i32
  other``, ``i64 …``, ``i32 any`` (``do_not_specialize``) → ``do_not_specialize=["n"]`` (no ==1
  folding, no %16), or warm that class; the int's *type* (``i32``/``i64``) stays in the key even
  under ``do_not_specialize``, so a type change (``i64 %16 → ==1``: 1 is an i32) needs a value of
  the new type warmed either way;
* bool passed to an int parameter (``i32 other → u1``): warm it with a bool (``u1`` is its own
  type; ``do_not_specialize`` does not merge it with the ints);
* pointer: ``*fp32 aligned16`` (16 B), ``*fp32 unaligned`` → ``do_not_specialize_on_alignment=["x_ptr"]``
  (Triton ≥ 3.2), or warm an offset view;
* dtype: ``*fp32 → *bf16`` → warm that dtype (a manifest records it);
* constexpr: ``constexpr 128`` → warm that value (every one compiles once);
* launch option: ``num_warps: 4 → 8`` → warm that option (autotune configs included).

The class names come from :mod:`.classes`, which coverage reads too (``i32 any`` here is
``i32:any`` there). An argument that is an int in one key and ``('constexpr', 1)`` in another is an int folded to 1,
not a constexpr. Pure functions of the key text and the event's ``attrs`` (``signature``,
``options``); nothing is imported, nothing evaluated (``ast.literal_eval`` only).

A *listener-only* compile (``attrs.source`` is :data:`LISTENER_ONLY_SOURCE`) has no such key: its
key is Triton's cache hash. :func:`by_exact_key` says so to the Diagnoser and to coverage (the
:class:`~jitwatch.backends.explain.Explainer` protocol): it is compared by exact key, never diffed,
and :func:`exact_key_fixes` gives its fixes in Triton's words (``triton.compile``, Inductor; no
manifest can replay it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jitwatch.backends import explain as _neutral
from jitwatch.backends.explain import Change, ExactKeyFixes, Reason, Seen, from_changes, never_warmed
from jitwatch.backends.triton import classes as _classes
from jitwatch.backends.triton.keys import parse_key, parse_key_options

INT_TYPES = _classes.INT_TYPES
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
"""Options that callers and autotune configs set per launch; listed first in a reason."""
_IGNORED_OPTIONS = frozenset(("debug", "instrumentation_mode", "fpsan_homomorphic_casts", "sanitize_overflow"))

LISTENER_ONLY_SOURCE = "compilation_listener"
"""``attrs["source"]`` of a *listener-only* Triton compile: one Triton reported only through
``knobs.compilation.listener`` (a direct ``triton.compile``, as Inductor compiles its kernels; any
compile on a Triton without the JIT hooks). Its key is Triton's cache hash and it carries no
``specialization_data``: a warmup manifest cannot record or replay it."""


def is_listener_only(attrs: Mapping[str, Any]) -> bool:
    """Whether a compile event's ``attrs`` are those of a listener-only compile
    (:data:`LISTENER_ONLY_SOURCE`)."""
    return attrs.get("source") == LISTENER_ONLY_SOURCE


def by_exact_key(attrs: Mapping[str, Any]) -> bool:
    """Triton's answer to :meth:`jitwatch.backends.explain.Explainer.by_exact_key`: a listener-only
    compile (:func:`is_listener_only`) is compared by exact key, its key being Triton's cache hash
    (no argument classes to diff). Never raises."""
    return is_listener_only(attrs)


def listener_only_fix(name: str) -> str:
    """The fix for a serving compile of ``name`` that Triton reported only through its compilation
    listener (:func:`is_listener_only`) and that did not compile before serving: run, in warmup,
    the code path that compiles it. No manifest: export leaves these compiles out
    (``jitwatch.warmup.manifest.build``). Never raises."""
    return (
        f"run the code path that compiles {name} in warmup, with serving's shapes and dtypes: the "
        "torch.compile'd model (Inductor's kernels) or the direct triton.compile call "
        "(Triton reported this compile only through its compilation listener: a warmup manifest cannot replay it)"
    )


def exact_key_fixes(name: str) -> ExactKeyFixes:
    """Triton's answer to :meth:`jitwatch.backends.explain.Explainer.exact_key_fixes`: the fixes of
    a listener-only serving compile of ``name`` — :func:`listener_only_fix`, and, when the same
    cache hash compiled before serving, reuse the kernel: a direct ``triton.compile`` keeps no
    in-memory cache (every call compiles, a disk-cache hit at best); Inductor compiles a graph's
    kernels again when the graph is compiled again (a Dynamo recompile). Never raises."""
    return ExactKeyFixes(
        warm=listener_only_fix(name),
        again=(
            f"keep the kernel compiled in warmup and reuse it: triton.compile keeps no in-memory cache, so each "
            f"call compiles {name} again; for torch.compile, see why its graph compiled again "
            "(its recompile in jitwatch why)"
        ),
    )


DESCRIPTION_MAX_CHARS = 2000
"""The longest :func:`describe_key` text (a kernel with more arguments is cut, with ``…``): the
2,000 characters of raw key the warning line showed before, so that a kernel shaped like vLLM's
``fused_moe_kernel`` (about 40 arguments, its block sizes and launch options last) keeps them."""
DESCRIBED_KEY_MAX_CHARS = 16_384
"""The longest key :func:`describe_key` parses (the journal's own cap on a stored key). Real Triton
keys are under 2 KB; parsing a 1.4 MB one took 2.1 s of the journal writer's thread (2-core VM), so
a longer key is not described: the warning line then shows the key, cut."""


def describe_key(key: str | None, attrs: Mapping[str, Any]) -> str | None:
    """Triton's answer to :meth:`jitwatch.backends.explain.Explainer.describe_key`: the
    specialization ``key`` stands for, each argument named (from ``attrs["signature"]``) with its
    class in ``jitwatch why``'s words (:mod:`.classes`: ``x_ptr: *fp32 aligned16``, ``n: i32 %16``,
    ``n: ==1`` — an integer passed as 1, told from a declared constexpr by
    ``attrs["declared_constexprs"]`` —, ``n: i32 any`` (``do_not_specialize``), ``BLOCK: constexpr
    64``), then the launch options the key carries (``num_warps=8``; not Triton's debug and
    instrumentation options), comma-separated, at most :data:`DESCRIPTION_MAX_CHARS` characters.
    ``None`` for a key that is not a Triton specialization key (a listener-only compile's cache
    hash) or one longer than :data:`DESCRIBED_KEY_MAX_CHARS`. Text only (``ast.literal_eval``); never raises."""
    if not key or len(key) > DESCRIBED_KEY_MAX_CHARS:
        return None
    try:
        facts = _facts(Seen(key, attrs))
        if facts is None:
            return None
        sig = attrs.get("signature")
        types = sig if isinstance(sig, Mapping) else {}
        declared = _declared(attrs)
        parts = [
            f"{name}: {_describe(entry, _is_int(types.get(name)) or _passed_as_one(name, entry, declared))}"
            for name, entry in facts.args.items()
        ]
        tail = parse_key_options(key) or {}
        parts += [f"{k}={v!r}" for k, v in tail.items() if k not in _IGNORED_OPTIONS]
    except Exception:  # noqa: BLE001 - an odd key or attrs: the line shows the key itself
        return None
    text = ", ".join(parts)
    return text if len(text) <= DESCRIPTION_MAX_CHARS else text[: DESCRIPTION_MAX_CHARS - 1] + "…"


def compiled_again(name: str) -> Reason:
    """The reason of a listener-only serving compile of ``name`` whose cache hash compiled before
    serving: :func:`jitwatch.backends.explain.compiled_again` with Triton's fix
    (:func:`exact_key_fixes`)."""
    return _neutral.compiled_again(name, exact_key_fixes(name))


class _Facts:
    """One key, read: argument name → ``(type, spec)``, and the options."""

    __slots__ = ("args", "options")

    def __init__(self, args: dict[str, tuple[Any, Any]], options: dict[str, Any]) -> None:
        self.args = args
        self.options = options


def _facts(seen: Seen) -> _Facts | None:
    if not seen.key:
        return None
    parsed = parse_key(seen.key)
    if parsed is None:
        return None
    sig = seen.attrs.get("signature")
    names = [str(n) for n in sig] if isinstance(sig, Mapping) else []
    args: dict[str, tuple[Any, Any]] = {}
    for i, entry in enumerate(parsed):
        name = names[i] if i < len(names) else f"arg{i}"
        args[name] = (entry[0], entry[1] if len(entry) > 1 else None)
    options: dict[str, Any] = {}
    tail = parse_key_options(seen.key) or {}
    options.update({k: v for k, v in tail.items() if k not in _IGNORED_OPTIONS})
    opts = seen.attrs.get("options")
    if isinstance(opts, Mapping):
        options.update({str(k): v for k, v in opts.items() if v is not None})
    return _Facts(args, options)


def _passed_as_one(name: str, entry: tuple[Any, Any], declared: set[str] | None) -> bool:
    """An integer argument passed as 1: a ``constexpr 1`` in the key (Triton's ``==1``
    specialization looks like a constexpr there) of a parameter the kernel does not declare
    ``tl.constexpr`` (``attrs["declared_constexprs"]``; unknown for events written before it, and
    for attrs without a ``signature``, whose arguments have no names to look up)."""
    return declared is not None and name not in declared and _classes.is_folded_one(entry, True)


def _declared(attrs: Mapping[str, Any]) -> set[str] | None:
    """The parameters the kernel declares ``tl.constexpr`` (``attrs["declared_constexprs"]``),
    ``None`` when unknown (see :func:`_passed_as_one`)."""
    declared = attrs.get("declared_constexprs")
    sig = attrs.get("signature")
    # names from the signature only: without it the arguments are arg0, arg1, … (_facts)
    return set(map(str, declared)) if isinstance(declared, list) and isinstance(sig, Mapping) and sig else None


def _is_int(ty: Any) -> bool:
    return _classes.is_int_type(ty)


def _describe(entry: tuple[Any, Any], int_arg: bool) -> str:
    """One argument's class in the reason's words (:func:`jitwatch.backends.triton.classes.words`:
    the same class names as coverage's labels)."""
    return _classes.words(*_classes.class_of(entry, int_arg=int_arg))


def _int_example(name: str, entry: tuple[Any, Any], *, typed: bool = False) -> str:
    """A value of ``entry``'s class to warm ``name`` with, after ``warm``: ``name=1``, ``name =
    a multiple of 16`` (an i32 class, when warmup passed an i32 too), or, naming the type (for any
    other type, and with ``typed``: warmup passed another type, so a value of the old type with
    the same class would not do), ``name with an i32 multiple of 16 (e.g. 16)``, ``name with an
    i64 value that is not a multiple of 16 (value ≥ 2^31 or < -2^31, e.g. 2**31 + 1)``, …"""
    ty, cls = _classes.class_of(entry, int_arg=True)
    if cls == _classes.ONE:
        return f"{name}=1"
    if ty == "i32" and not typed:
        if cls == _classes.DIVISIBLE:
            return f"{name} = a multiple of 16"
        if cls == _classes.OTHER:
            return f"{name} = a value neither 1 nor a multiple of 16"
        return f"{name} = any i32 value ({_classes.INT_RANGES['i32']})"
    rng = _classes.INT_RANGES.get(str(ty)) if ty != "i32" or cls == _classes.ANY else None
    example = _classes.INT_EXAMPLES.get((str(ty), str(cls)))
    note = "; ".join(p for p in (rng, f"e.g. {example}" if example else None) if p)
    tail = f" ({note})" if note else ""
    if cls == _classes.DIVISIBLE:
        return f"{name} with {_a(ty)} {ty} multiple of 16{tail}"
    if cls == _classes.OTHER:
        other = "neither 1 nor a multiple of 16" if ty == "i32" else "that is not a multiple of 16"
        return f"{name} with {_a(ty)} {ty} value {other}{tail}"
    return f"{name} with any {ty} value{tail}"


def _a(ty: Any) -> str:
    """The article before a type's name: ``an i64``, ``a u64`` (:func:`.classes.article`)."""
    return _classes.article(ty)


def _int_fix(name: str, before: tuple[Any, Any], after: tuple[Any, Any]) -> str:
    """The fix of an int argument whose class moved from ``before`` to ``after`` (checked against
    Triton 3.6 and 3.9's keys, ``native_specialize_impl``): ``do_not_specialize`` makes every
    value of one int type one key, but the type (``i32``/``i64``/``u64``; a bool's ``u1``) stays
    in the key, so a change of type needs a value of the new type warmed either way."""
    bt, at = _classes.served_type(before, True), _classes.served_type(after, True)
    if at == _classes.BOOL:
        return (
            f"warm {name} with a bool too (True or False): Triton types a bool u1, apart from every int "
            "(one key for both values; do_not_specialize does not merge it with the ints)"
        )
    if bt == _classes.BOOL:
        return (
            f"warm {_int_example(name, after, typed=True)} too: Triton types an int i32/i64/u64, "
            "apart from the bool (u1) warmup passed"
        )
    dns = f'do_not_specialize=["{name}"] in @triton.jit'
    if bt != at and _is_int(bt) and _is_int(at):
        if after[1] is None:  # already under do_not_specialize: only the type is left
            return f"warm {name} with a value of type {at} (the int's type is in the key even under do_not_specialize)"
        if _classes.is_folded_one(after, True):
            warm = f"warm {name}=1 (Triton folds 1 into a constant: only 1 itself covers it)"
        else:
            warm = f"warm {_int_example(name, after, typed=True)}"
        rng = _classes.INT_RANGES.get(str(at), str(at))
        return (
            f"{warm}, or {dns} and warm {name} with {_a(at)} {at} value too ({rng}; "
            f"do_not_specialize keeps the int's type in the key, and warmup passed {_a(bt)} {bt})"
        )
    return f"{dns} (one binary for every value), or warm {_int_example(name, after)}"


def _arg_fix(name: str, before: tuple[Any, Any], after: tuple[Any, Any], int_arg: bool) -> str:
    bt, at = before[0], after[0]
    if int_arg or (at == _classes.BOOL and bt != at):
        return _int_fix(name, before, after)
    if isinstance(at, str) and at.startswith("*"):
        if bt == at:
            return (
                f'do_not_specialize_on_alignment=["{name}"] in @triton.jit (Triton ≥ 3.2), '
                "or warm it with an offset view (x[1:])"
            )
        return f"warm {name} as {at} (add that dtype to warmup, or record a manifest and replay it)"
    if at == "constexpr":
        return f"warm {name}={after[1]!r} (every constexpr value compiles once: add it to warmup or a manifest)"
    return f"warm {name} as {at}"


def _type_changes(new: _Facts, base: _Facts, int_args: set[str]) -> int:
    """How many int arguments have another type in ``new`` than in ``base`` (1 is an i32, a bool
    a u1: :func:`jitwatch.backends.triton.classes.served_type`)."""
    return sum(
        1
        for name, entry in new.args.items()
        if name in int_args
        and name in base.args
        and _classes.served_type(entry, True) != _classes.served_type(base.args[name], True)
    )


def _changes(new: _Facts, base: _Facts, int_args: set[str], baseline: Sequence[_Facts]) -> list[Change]:
    out: list[Change] = []
    for name, entry in new.args.items():
        old = base.args.get(name)
        if old is None or old == entry:
            continue
        int_arg = name in int_args
        before, after = _describe(old, int_arg), _describe(entry, int_arg)
        if str(old[0]).startswith("*") and str(entry[0]).startswith("*") and old[1] == entry[1]:
            before, after = str(old[0]), str(entry[0])  # only the dtype moved: x_ptr: *fp32 → *bf16
        out.append(
            Change(
                name,
                "argument",
                before,
                after,
                _arg_fix(name, old, entry, int_arg),
                warmed_elsewhere=any(b.args.get(name) == entry for b in baseline),
            )
        )
    names = [o for o in LAUNCH_OPTIONS if o in new.options or o in base.options]
    names += sorted(o for o in {*new.options, *base.options} if o not in LAUNCH_OPTIONS)
    for opt in names:
        a, b = new.options.get(opt), base.options.get(opt)
        if a == b:
            continue
        out.append(
            Change(
                opt,
                "option",
                repr(b) if b is not None else "default",
                repr(a) if a is not None else "default",
                f"warm with {opt}={a!r} (launch options and autotune configs are part of the key)",
                warmed_elsewhere=any(f.options.get(opt) == a for f in baseline),
            )
        )
    return out


def explain(new: Seen, baseline: Sequence[Seen]) -> Reason | None:
    """Why ``new`` compiled, given the same kernel's compiles before serving (``baseline``).

    Returns ``never_warmed`` for an empty baseline; otherwise the differences from the nearest
    baseline key (fewest differing arguments and options, then fewest int arguments of another
    type; the earliest on a tie), or ``None``
    when ``new``'s key is not a Triton specialization key. Never raises for a well-typed input.
    """
    name = str(new.attrs.get("kernel") or "this kernel")
    if not baseline:
        return never_warmed(name)
    facts = _facts(new)
    if facts is None:
        return None
    base = [f for f in (_facts(s) for s in baseline) if f is not None]
    if not base:
        return None
    int_args = {n for f in (facts, *base) for n, (ty, _) in f.args.items() if _is_int(ty)}
    # an int passed only as 1 (and a bool) in every key: the kernel's declared constexprs tell it apart
    declared = _declared(new.attrs)
    int_args |= {n for f in (facts, *base) for n, e in f.args.items() if _passed_as_one(n, e, declared)}
    best: list[Change] | None = None
    best_rank: tuple[int, int] | None = None
    for b in base:
        changes = _changes(facts, b, int_args, base)
        # fewest differences; on a tie, fewest int type changes (the fix then needs no other type)
        rank = (len(changes), _type_changes(facts, b, int_args))
        if best_rank is None or rank < best_rank:
            best, best_rank = changes, rank
    assert best is not None
    combo = ", ".join(f"{c.name}={c.after.removeprefix('constexpr ')}" for c in best)
    return from_changes(
        best, combination_fix=f"warm this combination ({combo}): add the call to warmup or replay a manifest"
    )


__all__ = [
    "DESCRIPTION_MAX_CHARS",
    "LAUNCH_OPTIONS",
    "LISTENER_ONLY_SOURCE",
    "by_exact_key",
    "compiled_again",
    "describe_key",
    "exact_key_fixes",
    "explain",
    "is_listener_only",
    "listener_only_fix",
]
