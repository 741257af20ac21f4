"""The Diagnoser asks each backend's explainer whether a compile's key is compared by exact key
(``by_exact_key``): a new backend answers it from its own folder, the core knows no backend's
specifics (it used to compare ``attrs.source`` with Triton's ``"compilation_listener"`` itself)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jitwatch.core
from jitwatch.backends.explain import Reason, Seen, compiled_again, listener_only_fix, never_warmed, new_key
from jitwatch.core.diagnosis import Diagnoser, explainers_of
from jitwatch.core.events import EventKind, Phase
from jitwatch.testing import make_event


class HashKeyedBackend:
    """What a new backend folder offers (``jitwatch/backends/hashjit/backend.py``): keys that are a
    content hash when its compiler reports a compile through its cache only (``attrs.via ==
    "cache_only"``), else ``shape=…`` keys it can diff itself."""

    name = "hashjit"

    def __init__(self) -> None:
        self.diffed: list[str | None] = []

    def explain(self, new: Seen, baseline: Sequence[Seen]) -> Reason | None:
        self.diffed.append(new.key)
        before = ", ".join(sorted(str(s.key) for s in baseline))
        return Reason("argument", f"shape: {before} → {new.key}")

    def by_exact_key(self, attrs: Mapping[str, Any]) -> bool:
        return attrs.get("via") == "cache_only"


def _compile(phase: Phase, kernel: str, key: str, **attrs: object):
    return make_event(EventKind.COMPILE, 1.0, phase=phase, kernel=kernel, key=key, backend="hashjit", attrs=dict(attrs))


def test_a_new_backends_explainer_decides_which_keys_are_compared_by_exact_key() -> None:
    backend = HashKeyedBackend()
    d = Diagnoser(explainers_of([backend]))

    never = _compile(Phase.SERVING, "gemm", "h0", via="cache_only")
    assert d.observe(never) == never_warmed("gemm", backend="hashjit", listener_only=True)
    assert never.attrs["fixes"] == [listener_only_fix("gemm")]

    d.observe(_compile(Phase.WARMUP, "gemm", "h1", via="cache_only"))
    d.observe(_compile(Phase.WARMUP, "gemm", "shape=(8,)"))

    again = _compile(Phase.SERVING, "gemm", "h1", via="cache_only")
    assert d.observe(again) == compiled_again("gemm")
    other = _compile(Phase.SERVING, "gemm", "h2", via="cache_only")
    assert d.observe(other) == new_key("gemm", 2, "hashjit", listener_only=True)
    assert backend.diffed == []  # a key compared by exact key is never diffed

    diffed = _compile(Phase.SERVING, "gemm", "shape=(16,)")
    reason = d.observe(diffed)
    assert reason is not None and reason.kind == "argument"
    assert diffed.attrs["reason"] == "shape: h1, shape=(8,) → shape=(16,)"
    assert backend.diffed == ["shape=(16,)"]


def test_the_same_compile_without_the_explainers_answer_is_diffed() -> None:
    """A backend that offers only ``explain`` (or a bare function, as ``Diagnoser`` took before):
    no key is compared by exact key, whatever the ``attrs`` say."""
    backend = HashKeyedBackend()
    for given in ({"hashjit": backend.explain}, explainers_of([_OnlyExplain(backend)])):
        d = Diagnoser(given)
        d.observe(_compile(Phase.WARMUP, "gemm", "h1", via="cache_only"))
        ev = _compile(Phase.SERVING, "gemm", "h1", via="cache_only")
        reason = d.observe(ev)
        assert reason is not None and reason.kind == "argument" and reason != compiled_again("gemm")
    assert backend.diffed == ["h1", "h1"]


class _OnlyExplain:
    name = "hashjit"

    def __init__(self, inner: HashKeyedBackend) -> None:
        self.explain = inner.explain


def test_another_backends_answer_does_not_apply() -> None:
    """The explainer of the compile's own backend answers: a Triton-looking listener-only event of
    ``hashjit`` is diffed by hashjit's explainer."""
    backend = HashKeyedBackend()
    d = Diagnoser(explainers_of([backend]))
    d.observe(_compile(Phase.WARMUP, "gemm", "h1"))
    ev = _compile(Phase.SERVING, "gemm", "h1", source="compilation_listener")
    reason = d.observe(ev)
    assert reason is not None and reason.kind == "argument"


def test_the_core_names_no_backends_source() -> None:
    """Neither Triton's ``attrs.source`` value nor its test (``is_listener_only``, now in
    ``jitwatch/backends/triton/explain.py``) is in ``jitwatch/core``."""
    core = Path(jitwatch.core.__file__).parent
    sources = {p.name: p.read_text(encoding="utf-8") for p in sorted(core.rglob("*.py"))}
    assert "diagnosis.py" in sources
    for notion in ("compilation_listener", "is_listener_only"):
        assert [name for name, text in sources.items() if notion in text] == [], notion
