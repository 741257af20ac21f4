"""Specializations stored once: what a compile event shares with every compile of the same
specialization (schema revision 3, see :mod:`jitwatch.store.migrations`).

A Triton compile event's ``key``, ``module``, ``signature``, ``constexprs``, ``options``,
``specialization_data``, ``source_hash`` and ``cache_key`` (Triton's persistent-cache hash) are the
same every time that specialization compiles
(on every rank, after every restart) and make up ~90 % of the event. The journal stores them
once, in ``specializations(id, digest, data)``, and the event row keeps ``spec_id``.

``data`` is the fields as compact JSON compressed with :mod:`zlib` (stdlib, DEFLATE) using a
*preset dictionary* (``zlib.compressobj(zdict=…)``): text that typical specializations share
(Triton's option names, type names, JSON punctuation), so even one small record compresses well.
The first byte names the dictionary (:data:`DICT_ID`); a dictionary is never changed once
released — a new one gets a new id, and every id stays readable.

``digest`` (unique) is what writers look a record up by: for a Triton specialization stored by
the fast path, :func:`identity_digest` of its redacted key, source hash, module and either
Triton's cache hash (``cache_key``, when the compilation listener gave one) or the whole
``specialization_data`` (no JSON encoding needed to find it); for anything else, :func:`digest` of
the record's text. Readers never use it.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from typing import Any

SPEC_FIELDS = (
    "module",
    "signature",
    "constexprs",
    "options",
    "specialization_data",
    "source_hash",
    "cache_key",
    "declared_constexprs",
)
"""``attrs`` keys moved into the specialization record (with the event's ``key``). ``cache_key`` (Triton's
``metadata["hash"]``, 64 hex digits) joined in jitwatch 0.3: a record written before holds none, and
the event row kept it in its own ``attrs`` — readers merge both alike. ``declared_constexprs`` (the
parameters declared ``tl.constexpr``, from the kernel's source) joined with it."""

_SAMPLE_1: dict[str, Any] = {
    "constexprs": {"BLOCK": 128, "BLOCK_SIZE": 1024, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32},
    "key": "[('*fp32', 'D'), ('*fp16', 'D'), ('*bf16', 'D'), ('i32', 'D'), ('i64', 'D'), ('*i32', 'D'), "
    "('*i64', 'D'), ('*fp8e4nv', 'D'), ('fp32', ''), ('i32', ''), ('i32', 'D'), ('u1', '')]"
    "{'num_warps': 4, 'num_ctas': 1, 'num_stages': 3, 'enable_fp_fusion': True, "
    "'launch_cooperative_grid': False, 'debug': False}",
    "module": "vllm.model_executor.layers.",
    "options": {
        "enable_fp_fusion": True,
        "launch_cooperative_grid": False,
        "num_ctas": 1,
        "num_stages": 3,
        "num_warps": 4,
    },
    "signature": {
        "BLOCK_SIZE": "constexpr",
        "n_elements": "i32",
        "out_ptr": "*fp32",
        "stride": "i32",
        "x_ptr": "*fp32",
    },
    "source_hash": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "specialization_data": json.dumps(
        {
            "name": "kernel",
            "signature": {"x_ptr": "*fp32", "y_ptr": "*bf16", "out_ptr": "*fp16", "n": "i32", "BLOCK": "constexpr"},
            "constant_keys": [[4]],
            "constant_vals": [1024],
            "attrs_keys": [[0], [1], [2]],
            "attrs_vals": [[["tt.divisibility", 16]], [["tt.divisibility", 16]], [["tt.divisibility", 16]]],
            "options": {
                "num_warps": 4,
                "num_ctas": 1,
                "num_stages": 3,
                "maxnreg": None,
                "cluster_dims": [1, 1, 1],
                "ptx_version": None,
                "ptx_options": None,
                "ir_override": None,
                "enable_fp_fusion": True,
                "launch_cooperative_grid": False,
                "launch_pdl": False,
                "supported_fp8_dtypes": ["fp8e4b15", "fp8e4nv", "fp8e5"],
                "deprecated_fp8_dot_operand_dtypes": [],
                "default_dot_input_precision": "tf32",
                "allowed_dot_input_precisions": ["tf32", "tf32x3", "ieee"],
                "max_num_imprecise_acc_default": 0,
                "extern_libs": [["libdevice", "/site-packages/triton/backends/nvidia/lib/libdevice.10.bc"]],
                "debug": False,
                "backend_name": "cuda",
                "sanitize_overflow": True,
                "arch": "sm90",
                "instrumentation_mode": "",
            },
            "key": "[('*fp32', 'D'), ('*bf16', 'D'), ('*fp16', 'D'), ('i32', 'D'), 1024]{'num_warps': 4}",
        }
    ),
}
_ZDICT_1 = json.dumps(_SAMPLE_1, sort_keys=True, separators=(",", ":")).encode()
"""Preset dictionary 1 (never change it: journals hold records compressed with it)."""

DICT_ID = 1
_DICTS = {1: _ZDICT_1}


_SPEC_SET = frozenset(SPEC_FIELDS)


def split(attrs: dict[str, Any], key: str | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(rest, spec)``: ``attrs`` without :data:`SPEC_FIELDS`, and those fields plus ``key``
    (``None`` when the event carries none of them: nothing to share). ``spec`` holds ``key`` then
    the fields in :data:`SPEC_FIELDS` order, which is the order Triton compile events carry them in
    (``jitwatch.core.monitor``, ``jitwatch.backends.triton``), so their record text is unchanged;
    ``rest`` keeps ``attrs``' order."""
    if _SPEC_SET.isdisjoint(attrs):
        return attrs, None
    rest = attrs.copy()
    pop = rest.pop
    spec: dict[str, Any] = {"key": key}
    for name in SPEC_FIELDS:
        if name in rest:
            spec[name] = pop(name)
    return rest, spec


_WBITS = -13
"""Raw DEFLATE with an 8 KiB window (room for the ~2 KiB dictionary and a record of ~6 KiB that
still refers back into it). Any window up to 32 KiB decodes with :func:`decode`'s ``-15``."""
_MEM_LEVEL = 6
"""zlib's ``memLevel``: with :data:`_WBITS`, ~64 KiB of compressor state instead of ~400 KiB at
``(-15, 9)``, whose allocation and first-touch page faults cost ~150 µs per record under load
(the record is the same size: these records are far smaller than either window)."""


def digest(spec_json: str) -> bytes:
    """A specialization's identity: the 16-byte BLAKE2b digest of its record's JSON text (the
    journal's compact strict JSON, keys in their order: a signature's order is the kernel's
    parameter order, which readers rely on)."""
    return hashlib.blake2b(spec_json.encode(), digest_size=16).digest()


_IDENTITY_TAG = "\x00jitwatch-triton-spec-1"
"""Starts every :func:`identity_digest` input: no record's JSON text (which starts with ``{``)
can equal one, so the two kinds of digest never name each other's records."""


def identity_digest(
    key: str, data: str, source_hash: str | None, module: str | None, cache_key: str | None = None
) -> bytes:
    """A Triton specialization's identity without serializing its record: the first 16 bytes of a
    SHA-256 (``hashlib``; SHA extensions make it ~30 % faster than BLAKE2b here).

    * Without ``cache_key``: of its (redacted) key, ``specialization_data`` (Triton's own full
      serialization of the specialization: signature, constants, attributes, options, key), kernel
      source hash and module, after :data:`_IDENTITY_TAG` and their lengths (``-`` for ``None``).
      ~2 µs for a 1.5 KB specialization against ~13 µs to encode its record as JSON and digest that
      (2-core VM).
    * With ``cache_key`` (Triton's persistent-cache hash of the compile, ``metadata["hash"]`` from
      ``knobs.compilation.listener``; callers pass only a value :func:`is_cache_hash` accepts): of
      the key, ``cache_key``, source hash, module and the *length* of ``data``, after
      :data:`_CACHED_TAG` — not of ``data`` itself. Triton 3.x derives that hash
      (``triton.compiler.compiler.get_cache_key``) from ``ASTSource.hash()`` (the function's
      ``cache_key`` — source, dependencies, name — with the signature, constants and
      attributes), the backend's hash (Triton version, target), the full options' hash and the
      cache-relevant environment, which are what ``specialization_data`` serializes (with the
      key); so two compiles with one identity are one compiled artifact to Triton, and the record
      keeps the first writer's ``specialization_data``. The one difference Triton's hash ignores
      and the text shows is an extern library's *path* (``options.hash()`` takes the file's
      content hash): two installs of one Triton at paths of the same length share a record.
      ~1.4 µs for this call against ~2.1 µs with a 1 KB ``specialization_data``, and the data
      needs no redaction check (~0.6 µs) unless its record is stored: part of the journal's CPU
      per compile event that every rank's writer pays for a specialization another rank stored
      (2-core VM; ``docs/benchmarks.md`` section 9).

    A record stored under either holds exactly those fields' values plus the signature, constexprs
    and options jitwatch derives from the same compile. Any other capture keeps :func:`digest`."""
    if cache_key is not None:
        return _sha256(
            (
                CACHED_HEAD
                % (
                    len(key),
                    len(data),
                    "-" if source_hash is None else len(source_hash),
                    "-" if module is None else len(module),
                    len(cache_key),
                    key,
                    source_hash or "",
                    module or "",
                    cache_key,
                )
            ).encode()
        ).digest()[:16]
    h = _sha256(
        (
            IDENTITY_HEAD
            % (
                len(key),
                len(data),
                "-" if source_hash is None else len(source_hash),
                "-" if module is None else len(module),
                key,
                source_hash or "",
                module or "",
            )
        ).encode()
    )  # one %-format: ~0.5 µs less than an f-string of the same text here
    h.update(data.encode())  # the long part encoded once, not copied into the header first
    return h.digest()[:16]


CACHE_HASH_MATCH = re.compile("[0-9a-f]{64}").fullmatch
"""``CACHE_HASH_MATCH(text)`` is not ``None`` exactly when ``text`` (a ``str``) has the form of Triton's
persistent-cache hash, ``metadata["hash"]``: a SHA-256 ``hexdigest()``, 64 lowercase hex digits
(Triton 3.x, ``triton.compiler.compiler``). Only such a ``cache_key`` stands for the data in
:func:`identity_digest`: any other value (another producer's, one cut by the journal's size caps to
``…[truncated]``) says nothing about the rest of the record, which is then identified by its text.
Also used inline by ``Journal._lean_run``."""


def is_cache_hash(value: object) -> bool:
    """Whether ``value`` is a ``str`` of the form of Triton's persistent-cache hash
    (:data:`CACHE_HASH_MATCH`). Never raises."""
    return type(value) is str and CACHE_HASH_MATCH(value) is not None


_CACHED_TAG = "\x00jitwatch-triton-spec-cached-1"
"""Starts every :func:`identity_digest` input that has a ``cache_key`` (not a prefix of
:data:`_IDENTITY_TAG`'s inputs: the two kinds never name each other's records)."""
CACHED_HEAD = _CACHED_TAG.replace("%", "%%") + "%d:%d:%s:%s:%d\x00%s%s%s%s"
"""The whole input of :func:`identity_digest` with a ``cache_key``, a ``%`` format of (key length,
data length, source hash length or ``-``, module length or ``-``, cache key length, key, source
hash, module, cache key). Also used inline by ``Journal._lean_run``."""
IDENTITY_HEAD = _IDENTITY_TAG.replace("%", "%%") + "%d:%d:%s:%s\x00%s%s%s"
"""The header of :func:`identity_digest`'s input, a ``%`` format of (key length, data length, source
hash length or ``-``, module length or ``-``, key, source hash, module); the data follows. Also used
inline by ``Journal._lean_run``."""
_sha256 = hashlib.sha256


def compress(spec_json: str) -> bytes:
    """The stored record of a specialization's JSON text: the dictionary id byte, then
    raw DEFLATE (:mod:`zlib`, level 9, :data:`_WBITS`, :data:`_MEM_LEVEL`, the preset dictionary
    :data:`DICT_ID`)."""
    comp = _primed()
    return _DICT_BYTE + comp.compress(spec_json.encode()) + comp.flush()


_primed = zlib.compressobj(9, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, _DICTS[DICT_ID]).copy
"""A new compressor for :func:`compress`, the preset dictionary already loaded: a copy of one made
at import and never used itself (``deflateCopy``: the same state, so the same output, as a new
``compressobj`` given the dictionary, without allocating, clearing and hashing it in again:
~2 µs less per new record on the 2-core VM)."""
_DICT_BYTE = bytes([DICT_ID])


MAX_DECODED_BYTES = 1 << 20
"""Largest decompressed record :func:`decode` accepts (1 MiB). A record the journal's caps allow is
far smaller (a key of at most 16,384 characters plus attrs of about 64 KiB); a larger one was not
written by jitwatch, and inflating it (a few hundred bytes can hold gigabytes) would let anyone
who can write the journal file make every reader allocate without bound."""


def decode(data: bytes) -> dict[str, Any]:
    """The fields of a stored record. Raises ``ValueError`` (``zlib.error`` included; also a record
    inflating past :data:`MAX_DECODED_BYTES`) or ``KeyError`` (unknown dictionary) for a damaged
    record; parsed with ``json.loads`` only."""
    return decode_sized(data)[0]


def decode_sized(data: bytes) -> tuple[dict[str, Any], int]:
    """:func:`decode` and the record's decompressed size in bytes (same errors)."""
    dec = zlib.decompressobj(-15, _DICTS[data[0]])
    raw = dec.decompress(data[1:], MAX_DECODED_BYTES)
    if dec.unconsumed_tail or len(raw) >= MAX_DECODED_BYTES:
        raise ValueError(f"specialization record inflates past {MAX_DECODED_BYTES} bytes")
    raw += dec.flush(MAX_DECODED_BYTES)
    out = json.loads(raw)
    if not isinstance(out, dict):
        raise ValueError("specialization record is not an object")
    return out, len(raw)


__all__ = [
    "DICT_ID",
    "SPEC_FIELDS",
    "compress",
    "decode",
    "decode_sized",
    "digest",
    "identity_digest",
    "is_cache_hash",
    "split",
]
