"""What a manifest entry may make Triton compile: an option allow-list and a key ↔ specialization check.

A warmup manifest entry carries Triton's ``specialization_data`` (what ``JITFunction.preload``
takes back, Triton 3.0+) and the in-memory cache key the compile is stored under. ``preload``
believes both: it compiles the signature, constexprs, attributes and options written in the data
and files the result under the written key. Replaying an edited manifest could therefore put other
code under a real key (``ir_override``: a file Triton parses as IR; ``ptx_options``: flags handed
to ``ptxas``), or a kernel compiled for other constexprs / alignments under the key a real call
looks up (wrong results, misaligned accesses). This module closes both holes; it is checked with
Triton 3.6 and 3.9.

**Options** (:func:`check_options`). A manifest may carry only the options in
:data:`ALLOWED_OPTIONS` (code-generation knobs Triton itself computes or that a caller passes at
launch: ``num_warps``, ``num_stages``, …). :data:`REFUSED_OPTIONS` — everything that replaces the
kernel's code or reads files — must be absent, ``None`` or empty, and ``extern_libs`` may only name
``libdevice`` (its recorded path is never used: Triton's own libdevice is). Any other name is
refused as unknown. A refusal is :class:`~jitwatch.errors.ManifestEntryRefused` naming the option.

**Key** (:func:`verified_preload_data`). The key is recomputed with the *current* kernel through
Triton's own code: arguments standing for the recorded ones (a pointer whose ``data_ptr()`` is
16-byte aligned or not as ``tt.divisibility`` says, an int in the recorded range and divisibility,
the recorded constexpr values) go through the kernel's binder (``JITFunction.device_caches[device]``,
the same ``create_function_from_signature`` binder a launch uses) and
``triton.runtime.jit.compute_cache_key``; ``JITFunction._pack_args`` then gives the signature,
constexprs and attributes a real call would compile. The entry is replayed only when the
recomputed key equals the recorded one *and* the recorded signature / constexprs / attributes equal
the recomputed ones; the options handed to ``preload`` are the key's own (what a launch passes to
``backend.parse_options``), never the recorded option dict. So replay compiles exactly what the
next real call with that key would compile — nothing else.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any

from jitwatch.backends.triton.keys import key_options_text, parse_key
from jitwatch.errors import ManifestEntryRefused

ALLOWED_OPTIONS: frozenset[str] = frozenset(
    {
        # what a caller may pass at launch and Triton puts in the key
        "num_warps",
        "num_ctas",
        "num_stages",
        "maxnreg",
        "enable_fp_fusion",
        "launch_cooperative_grid",
        "launch_pdl",
        "debug",
        "sanitize_overflow",
        # what JITFunction.run adds to every key from Triton's knobs
        "instrumentation_mode",
        "fpsan_homomorphic_casts",
        # what backend.parse_options computes for the target (recorded in specialization_data)
        "warp_size",
        "ptx_version",
        "sched4reg",
        "enable_reflect_ftz",
        "clc",
        "supported_fp8_dtypes",
        "deprecated_fp8_dot_operand_dtypes",
        "default_dot_input_precision",
        "allowed_dot_input_precisions",
        "max_num_imprecise_acc_default",
        "backend_name",
        "arch",
        "min_shared_mem",
    }
)
"""Compile options a manifest entry may carry (Triton 3.6 / 3.9 ``CUDAOptions`` fields that only
tune code generation). Only those in the key reach the compile (see the module docstring)."""

REFUSED_OPTIONS: Mapping[str, str] = {
    "ir_override": "names a file Triton parses as IR in place of the kernel's own code",
    "ptx_options": "flags passed to ptxas (which can read files)",
    "extern_libs": "libraries linked in from file paths",
}
"""Options that change which code is compiled or read files: refused unless absent, ``None`` or
empty (``extern_libs`` may name ``libdevice`` only; its recorded path is ignored)."""


def _norm(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_norm(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _norm(v) for k, v in value.items()}
    return value


def _refused(name: str, value: Any) -> str | None:
    """Why option ``name`` = ``value`` may not be replayed, or ``None`` when it may."""
    if name in REFUSED_OPTIONS:
        if name == "extern_libs":
            libs = value.items() if isinstance(value, dict) else value
            try:
                names = [str(lib[0]) for lib in (libs or ())]
            except (TypeError, IndexError, KeyError):
                return f"option 'extern_libs' is refused: {REFUSED_OPTIONS[name]} (unreadable value)"
            other = [n for n in names if n != "libdevice"]
            if other:
                return f"option 'extern_libs' is refused: {REFUSED_OPTIONS[name]} ({', '.join(other)[:80]})"
            return None
        if value in (None, "", (), [], {}):
            return None
        return f"option {name!r} is refused: {REFUSED_OPTIONS[name]}"
    if name not in ALLOWED_OPTIONS:
        return f"option {name[:60]!r} is refused: not a compile option jitwatch replays (see docs/security.md)"
    return None


def check_options(options: Mapping[str, Any]) -> None:
    """Refuse ``options`` (a recorded options dict, or a key's) unless every name is allowed.

    Raises:
        ManifestEntryRefused: naming the first option that is refused (see :data:`REFUSED_OPTIONS`,
            :data:`ALLOWED_OPTIONS`).
    """
    for name, value in options.items():
        why = _refused(str(name), value)
        if why is not None:
            raise ManifestEntryRefused(why)


def split_key(key: str) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """Triton's key ``str(specialization) + str(options)`` → ``(specialization, options)``, parsed
    with :func:`ast.literal_eval` (never ``eval``).

    Raises:
        ManifestEntryRefused: the key has another shape (e.g. a Triton 3.9 ``add_stages_inspection_hook``
            entry, or an edited key).
    """
    spec = parse_key(key)
    rest = key_options_text(key)
    if spec is None or rest is None:
        raise ManifestEntryRefused("key is not a Triton specialization key jitwatch can verify")
    try:
        options = ast.literal_eval(rest) if rest.strip() else {}
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ManifestEntryRefused("key's options part is not a literal dict") from None
    if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
        raise ManifestEntryRefused("key's options part is not a dict of option names")
    return spec, options


class _Pointer:
    """Stands for a tensor argument: Triton reads only ``dtype`` and ``data_ptr()`` (for 16-byte
    alignment) when it specializes a pointer argument."""

    def __init__(self, dtype: Any, aligned: bool) -> None:
        self.dtype = dtype
        self._ptr = 0 if aligned else 8

    def data_ptr(self) -> int:
        return self._ptr


_INT_VALUES = {"i32": (16, 3), "i64": (2**32, 2**32 + 3), "u64": (2**63, 2**63 + 3)}


def _divisible(attrs: Any) -> bool:
    try:
        return any(list(a) == ["tt.divisibility", 16] for a in attrs or ())
    except TypeError:
        return False


def _stand_in(ty: Any, path: tuple[int, ...], constants: dict[tuple[int, ...], Any], attrs: dict[Any, Any]) -> Any:
    """An argument Triton specializes as ``ty`` with the recorded constant / attributes at ``path``."""

    if isinstance(ty, (list, tuple)):
        return tuple(_stand_in(t, (*path, i), constants, attrs) for i, t in enumerate(ty))
    if not isinstance(ty, str):
        raise ManifestEntryRefused(f"argument {path}: type {str(ty)[:40]!r} cannot be verified")
    if ty == "constexpr":
        if path not in constants:
            raise ManifestEntryRefused(f"argument {path}: constexpr without a recorded value")
        return constants[path]
    div = _divisible(attrs.get(path))
    if ty.startswith("*") and not ty.startswith("**"):
        name = ty[1:]
        name = name[1:] if name.startswith("k") else name
        dtype = _dtype(name)
        if dtype is None:
            raise ManifestEntryRefused(f"argument {path}: pointer type {ty[:40]!r} cannot be verified")
        return _Pointer(dtype, div)
    if ty in _INT_VALUES:
        return _INT_VALUES[ty][0 if div else 1]
    if ty in ("fp32", "fp64", "fp16", "bf16"):
        return 1.5
    if ty == "u1":
        return True
    raise ManifestEntryRefused(f"argument {path}: type {ty[:40]!r} cannot be verified")


def _dtype(short: str) -> Any:
    """``triton.language.dtype`` for a signature's short element type (``fp32``, ``i64``, ``u1``)."""
    import triton.language as tl
    from triton._utils import type_canonicalisation_dict

    for name in [short, *(k for k, v in type_canonicalisation_dict.items() if v == short)]:
        try:
            return tl.dtype(name)
        except Exception:  # noqa: BLE001 - Triton asserts on a name it does not know; try the next
            continue
    return None


def _decode_constant(value: Any) -> Any:
    """Triton's own ``preload`` decoding of one recorded constexpr value (3.6 and 3.9)."""
    import triton.language as tl
    from triton.runtime.jit import convert_to_tuple_if_list

    if isinstance(value, str) and tl.dtype.is_dtype(value):
        return tl.dtype(value)
    if isinstance(value, dict):
        if "constexpr" in value:
            return tl.constexpr(convert_to_tuple_if_list(value["constexpr"]))
        if "jit_function" in value:  # Triton 3.9+: a kernel already defined in this process, by name
            from triton.runtime import jit as triton_jit

            registry = getattr(triton_jit, "_triton_jit_function_registry", None)
            found = registry.get(str(value["jit_function"])) if isinstance(registry, dict) else None
            if found is None:
                raise ManifestEntryRefused(
                    f"constexpr JIT function {str(value['jit_function'])[:80]!r} is not defined here"
                )
            return found
        raise ManifestEntryRefused("constexpr value of a kind replay cannot verify")
    return convert_to_tuple_if_list(json.loads(json.dumps(value)))


def verified_preload_data(fn: Any, specialization_data: str, key: str) -> str:
    """Check an entry against the current kernel ``fn``; return the JSON to hand to ``fn.preload``.

    Args:
        fn: the ``triton.runtime.jit.JITFunction`` resolved for the entry (a driver must be active).
        specialization_data: the entry's Triton JSON (``serialize_specialization_data``).
        key: the entry's in-memory cache key.

    Returns:
        ``specialization_data`` with ``options`` replaced by the key's own options (what a launch
        passes to ``backend.parse_options``) and ``extern_libs`` dropped.

    Raises:
        ManifestEntryRefused: a refused option (named), a key that the kernel does not produce from
            the recorded specialization (recomputed with Triton's binder and ``compute_cache_key``),
            or recorded signature / constexprs / attributes that differ from what a real call compiles.
    """
    from triton.runtime import driver
    from triton.runtime.jit import compute_cache_key

    try:
        data = json.loads(specialization_data)
    except json.JSONDecodeError:
        raise ManifestEntryRefused("specialization_data is not JSON") from None
    if not isinstance(data, dict) or data.get("key") != key:
        raise ManifestEntryRefused("specialization_data.key differs from the entry's key")
    recorded_opts = data.get("options") or {}
    if not isinstance(recorded_opts, dict):
        raise ManifestEntryRefused("specialization_data.options is not an object")
    check_options(recorded_opts)
    _spec, key_opts = split_key(key)
    check_options(key_opts)
    for name, value in key_opts.items():
        if value is None or name in ("debug", "sanitize_overflow", "maxnreg") or name not in recorded_opts:
            continue  # parse_options may change these itself (instrumentation modes)
        if _norm(recorded_opts[name]) != _norm(value):
            raise ManifestEntryRefused(
                f"option {name!r}: specialization_data has {str(recorded_opts[name])[:40]}, the key {str(value)[:40]}"
            )

    params = list(getattr(fn, "arg_names", []))
    signature = data.get("signature")
    if not isinstance(signature, dict) or list(signature) != params:
        raise ManifestEntryRefused(
            f"specialization_data's arguments {list(signature or {})[:12]} are not the kernel's {params[:12]}"
        )
    try:
        constants = {
            tuple(k): _decode_constant(v) for k, v in zip(data["constant_keys"], data["constant_vals"], strict=True)
        }
        attrs = {tuple(k): v for k, v in zip(data["attrs_keys"], data["attrs_vals"], strict=True)}
    except (TypeError, ValueError, KeyError):
        raise ManifestEntryRefused("specialization_data's constants or attributes are malformed") from None
    args = [_stand_in(signature[name], (i,), constants, attrs) for i, name in enumerate(params)]

    device = driver.active.get_current_device()
    _, _, _, backend, binder = fn.device_caches[device]
    try:
        bound_args, specialization, run_opts = binder(*args, **key_opts)
        recomputed = compute_cache_key({}, specialization, run_opts)
        _, sig2, constexprs2, attrs2 = fn._pack_args(backend, dict(key_opts), bound_args, specialization, run_opts)
    except ManifestEntryRefused:
        raise
    except Exception as exc:  # noqa: BLE001 - Triton refused the stand-in arguments
        raise ManifestEntryRefused(
            f"Triton cannot rebuild this specialization: {type(exc).__name__}: {exc}"[:300]
        ) from None
    if recomputed != key:
        raise ManifestEntryRefused(
            f"key does not match specialization_data: the kernel gives {recomputed[:160]!r} for the recorded "
            "signature, constexprs and attributes"
        )
    if _norm(sig2) != _norm(signature):
        raise ManifestEntryRefused("specialization_data's signature differs from what the key compiles")
    if set(constexprs2) != set(constants) or any(
        _norm(_plain(constexprs2[p])) != _norm(_plain(constants[p])) for p in constants
    ):
        raise ManifestEntryRefused("specialization_data's constexprs differ from what the key compiles")
    if {k: _norm(v) for k, v in attrs2.items()} != {k: _norm(v) for k, v in attrs.items()}:
        raise ManifestEntryRefused("specialization_data's attributes differ from what the key compiles")

    out = dict(data)
    out["options"] = dict(key_opts)
    return json.dumps(out)


def _plain(value: Any) -> Any:
    inner = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
    return str(inner) if type(inner).__name__ == "dtype" else inner


__all__ = [
    "ALLOWED_OPTIONS",
    "REFUSED_OPTIONS",
    "check_options",
    "split_key",
    "verified_preload_data",
]
