"""``jitwatch warmup merge``: many hosts' manifests into one warm record for the fleet.

Each input manifest is one host's record (``jitwatch manifest export`` on that host, or a manifest
already merged). Entries are deduplicated by backend, kernel (``module.qualname``), key and target
(a fleet mixing GPU generations needs each target's compile); per merged entry ``hosts`` sums the
inputs' ``hosts`` (1 for a host's own record) and ``count`` the compile events, ``ranks`` and
``phases`` are unioned and ``first_seen_ts`` is the earliest.

**Source conflicts are refused.** A kernel whose ``source_hash`` (Triton's ``JITFunction.cache_key``)
differs between inputs was built from different code on different hosts (a rolling deploy, a
patched wheel): replaying either version's keys on the other is wrong, so *every* entry of that
kernel is left out and the conflict reported (kernel, each hash, the inputs that had it). Entries
without a recorded hash take the hash of those that have one.

The merged manifest is ordered by ``hosts`` (most hosts first), then kernel and key, so the keys the
most hosts needed are replayed first. Nothing is imported or executed: inputs are validated data.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jitwatch._version import __version__
from jitwatch.text import plural
from jitwatch.warmup.manifest import MAX_ENTRIES, Manifest, ManifestEntry

Identity = tuple[str, str, str, str]


@dataclass
class SourceConflict:
    """One kernel recorded with different source hashes; ``hashes`` maps hash → input sources."""

    backend: str
    kernel: str
    hashes: dict[str, list[str]]
    entries_refused: int = 0

    def describe(self) -> str:
        parts = "; ".join(
            f"{h[:16]}… in {', '.join(srcs[:5])}{' …' if len(srcs) > 5 else ''}" for h, srcs in self.hashes.items()
        )
        return (
            f"{self.backend} kernel {self.kernel}: source differs between inputs ({parts}); "
            f"{plural(self.entries_refused, 'entry', 'entries')} refused"
        )


@dataclass
class MergeReport:
    """What :func:`merge` did: inputs read, entries in and out, conflicts refused."""

    inputs: list[str] = field(default_factory=list)
    entries_in: int = 0
    entries_out: int = 0
    conflicts: list[SourceConflict] = field(default_factory=list)
    truncated: int = 0
    """Entries left out because the merge exceeded :data:`~jitwatch.warmup.manifest.MAX_ENTRIES`
    (the fewest-host ones)."""

    @property
    def refused(self) -> int:
        return sum(c.entries_refused for c in self.conflicts)

    def summary(self) -> str:
        return (
            f"merged {plural(len(self.inputs), 'manifest')}: {plural(self.entries_in, 'entry', 'entries')} in,"
            f" {self.entries_out} out"
            f" ({plural(self.entries_in - self.entries_out - self.refused - self.truncated, 'duplicate')} folded,"
            f" {self.refused} refused for {plural(len(self.conflicts), 'source conflict')}"
            + (f", {self.truncated} over the entry limit" if self.truncated else "")
            + ")"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "entries_in": self.entries_in,
            "entries_out": self.entries_out,
            "refused": self.refused,
            "truncated": self.truncated,
            "conflicts": [
                {"backend": c.backend, "kernel": c.kernel, "hashes": c.hashes, "entries_refused": c.entries_refused}
                for c in self.conflicts
            ],
        }


def _identity(e: ManifestEntry) -> Identity:
    return (e.backend, e.kernel, e.key, json.dumps(e.target, sort_keys=True))


def merge(inputs: Sequence[tuple[str, Manifest]]) -> tuple[Manifest, MergeReport]:
    """Merge ``(source, manifest)`` pairs into one manifest (see the module docstring).

    Args:
        inputs: each manifest with a short source name for the report (a host, a file).

    Returns:
        The merged manifest (``phases`` the union, ``triton_version`` the inputs' when they agree,
        else ``None``) and the :class:`MergeReport`.
    """
    report = MergeReport(inputs=[s for s, _ in inputs])
    hashes: dict[tuple[str, str], dict[str, list[str]]] = {}
    for source, manifest in inputs:
        for e in manifest.entries:
            report.entries_in += 1
            if e.source_hash is not None:
                srcs = hashes.setdefault((e.backend, e.kernel), {}).setdefault(e.source_hash.lower(), [])
                if source not in srcs:
                    srcs.append(source)
    conflicted = {k: v for k, v in hashes.items() if len(v) > 1}
    known = {k: next(iter(v)) for k, v in hashes.items() if len(v) == 1}
    conflicts = {k: SourceConflict(k[0], k[1], v) for k, v in conflicted.items()}

    out: dict[Identity, ManifestEntry] = {}
    for _, manifest in inputs:
        for e in manifest.entries:
            kern = (e.backend, e.kernel)
            if kern in conflicts:
                conflicts[kern].entries_refused += 1
                continue
            ident = _identity(e)
            prev = out.get(ident)
            if prev is None:
                merged = e.model_copy(deep=True)
                merged.source_hash = known.get(kern, merged.source_hash)
                out[ident] = merged
                continue
            prev.hosts += e.hosts
            prev.count += e.count
            prev.phases = sorted(set(prev.phases) | set(e.phases))
            prev.ranks = sorted(set(prev.ranks) | set(e.ranks))
            prev.cache_key = prev.cache_key or e.cache_key
            if e.first_seen_ts is not None and (prev.first_seen_ts is None or e.first_seen_ts < prev.first_seen_ts):
                prev.first_seen_ts = e.first_seen_ts
    entries = sorted(out.values(), key=lambda e: (-e.hosts, e.backend, e.kernel, e.key))
    if len(entries) > MAX_ENTRIES:
        report.truncated = len(entries) - MAX_ENTRIES
        entries = entries[:MAX_ENTRIES]
    report.entries_out = len(entries)
    report.conflicts = sorted(conflicts.values(), key=lambda c: (c.backend, c.kernel))
    versions = {m.triton_version for _, m in inputs if m.triton_version}
    phases = sorted({p for _, m in inputs for p in m.phases})
    merged_manifest = Manifest(
        created_ts=time.time(),
        jitwatch_version=__version__,
        triton_version=versions.pop() if len(versions) == 1 else None,
        phases=phases,
        entries=entries,
    )
    return merged_manifest, report


__all__ = ["MergeReport", "SourceConflict", "merge"]
