"""Why a Triton kernel compiled again: the difference between two specialization keys, per argument.

Triton 3.x (``JITFunction.run`` → ``native_specialize_impl``) compiles one binary per key; a key
is one ``(type, spec)`` per argument plus the compile options (see :mod:`.keys`). Read in the
field's terms:

==================== ============================= =================================================
argument              classes (as written here)     what removes the recompile
==================== ============================= =================================================
int (not constexpr)   ``i32 ==1 (value 1)`` (folded ``do_not_specialize=["n"]`` (no ==1 folding, no %16);
                      to a constant), ``i32 %16``,  the int's type (``i32``/``i64``) stays in the key
                      ``i32 other``, ``i64 …``      even then: warm a value ≥ 2^31 if serving meets one
pointer               ``*fp32 aligned`` (16 B),     ``do_not_specialize_on_alignment=["x_ptr"]``
                      ``*fp32 unaligned``           (Triton ≥ 3.2), or warm an offset view
dtype                 ``*fp32`` → ``*bf16``         warm that dtype (a manifest records it)
constexpr             ``constexpr 128``             warm that value (every one compiles once)
launch option         ``num_warps: 4 → 8``          warm that option (autotune configs included)
==================== ============================= =================================================

An argument that is an int in one key and ``('constexpr', 1)`` in another is an int folded to 1,
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
from jitwatch.backends.triton.keys import parse_key, parse_key_options

INT_TYPES = frozenset(("i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"))
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
    class in ``jitwatch why``'s words (``x_ptr: *fp32 aligned``, ``n: i32 %16``, ``n: ==1 (value
    1)`` — an integer passed as 1, told from a declared constexpr by ``attrs["declared_constexprs"]``
    —, ``n: i32 (not specialized)``, ``BLOCK: constexpr 64``), then the launch options the key
    carries (``num_warps=8``; not Triton's debug and instrumentation options), comma-separated, at
    most :data:`DESCRIPTION_MAX_CHARS` characters. ``None`` for a key that is not a Triton
    specialization key (a listener-only compile's cache hash) or one longer than
    :data:`DESCRIBED_KEY_MAX_CHARS`. Text only (``ast.literal_eval``); never raises."""
    if not key or len(key) > DESCRIBED_KEY_MAX_CHARS:
        return None
    try:
        facts = _facts(Seen(key, attrs))
        if facts is None:
            return None
        sig = attrs.get("signature")
        types = sig if isinstance(sig, Mapping) else {}
        declared = attrs.get("declared_constexprs")
        # names from the signature only: without it the arguments are arg0, arg1, … (_facts)
        declared = set(map(str, declared)) if isinstance(declared, list) and types else None
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
    return declared is not None and name not in declared and entry[0] == "constexpr" and entry[1] == 1


def _is_int(ty: Any) -> bool:
    return isinstance(ty, str) and ty in INT_TYPES


def _describe(entry: tuple[Any, Any], int_arg: bool) -> str:
    ty, spec = entry
    if ty == "constexpr":
        if int_arg and spec == 1 and not isinstance(spec, bool):
            return "==1 (value 1)"
        return f"constexpr {spec!r}"
    if not isinstance(ty, str):
        return repr(entry)
    if ty.startswith("*"):
        return f"{ty} aligned" if spec == "D" else f"{ty} unaligned" if spec == "" else ty
    if ty in INT_TYPES:
        return f"{ty} %16" if spec == "D" else f"{ty} other" if spec == "" else f"{ty} (not specialized)"
    return ty


def _int_example(name: str, entry: tuple[Any, Any]) -> str:
    ty, spec = entry
    if ty == "constexpr":
        return f"{name}=1"
    if spec == "D":
        return f"{name} = a multiple of 16"
    return f"{name} = a value neither 1 nor a multiple of 16"


def _arg_fix(name: str, before: tuple[Any, Any], after: tuple[Any, Any], int_arg: bool) -> str:
    bt, at = before[0], after[0]
    if int_arg:
        if _is_int(bt) and _is_int(at) and bt != at:
            return f"warm {name} with a value of type {at} (the int's type is in the key even under do_not_specialize)"
        warm = _int_example(name, after)
        return f'do_not_specialize=["{name}"] in @triton.jit (one binary for every value), or warm {warm}'
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
    baseline key (fewest differing arguments and options; the earliest on a tie), or ``None``
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
    best: list[Change] | None = None
    for b in base:
        changes = _changes(facts, b, int_args, base)
        if best is None or len(changes) < len(best):
            best = changes
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
