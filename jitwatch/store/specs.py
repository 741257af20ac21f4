"""Specializations stored once: what a compile event shares with every compile of the same
specialization (schema revision 3, see :mod:`jitwatch.store.migrations`).

A Triton compile event's ``key``, ``module``, ``signature``, ``constexprs``, ``options``,
``specialization_data`` and ``source_hash`` are the same every time that specialization compiles
(on every rank, after every restart) and make up ~90 % of the event. The journal stores them
once, in ``specializations(id, digest, data)``, and the event row keeps ``spec_id``.

``data`` is the fields as compact JSON compressed with :mod:`zlib` (stdlib, DEFLATE) using a
*preset dictionary* (``zlib.compressobj(zdict=…)``): text that typical specializations share
(Triton's option names, type names, JSON punctuation), so even one small record compresses well.
The first byte names the dictionary (:data:`DICT_ID`); a dictionary is never changed once
released — a new one gets a new id, and every id stays readable.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from typing import Any

SPEC_FIELDS = ("module", "signature", "constexprs", "options", "specialization_data", "source_hash")
"""``attrs`` keys moved into the specialization record (with the event's ``key``)."""

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


def split(attrs: dict[str, Any], key: str | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(rest, spec)``: ``attrs`` without :data:`SPEC_FIELDS`, and those fields plus ``key``
    (``None`` when the event carries none of them: nothing to share)."""
    if not any(f in attrs for f in SPEC_FIELDS):
        return attrs, None
    spec: dict[str, Any] = {"key": key}
    rest: dict[str, Any] = {}
    for k, v in attrs.items():
        if k in SPEC_FIELDS:
            spec[k] = v
        else:
            rest[k] = v
    return rest, spec


def encode(spec_json: str) -> tuple[bytes, bytes]:
    """``(digest, data)`` of a specialization's canonical JSON text (see :func:`canonical`):
    a 16-byte BLAKE2b digest (its identity) and the compressed record."""
    raw = spec_json.encode()
    comp = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, _DICTS[DICT_ID])
    data = bytes([DICT_ID]) + comp.compress(raw) + comp.flush()
    return hashlib.blake2b(raw, digest_size=16).digest(), data


def canonical(spec: dict[str, Any]) -> str:
    """Compact JSON, keys in their order (a signature's order is the kernel's parameter order,
    which readers rely on): one text per specialization as one backend version writes it."""
    return json.dumps(spec, separators=(",", ":"), default=str, allow_nan=False)


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


__all__ = ["DICT_ID", "SPEC_FIELDS", "canonical", "decode", "decode_sized", "encode", "split"]
