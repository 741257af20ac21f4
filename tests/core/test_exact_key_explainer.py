"""The Diagnoser asks each backend's explainer whether a compile's key is compared by exact key
(``by_exact_key``): a new backend answers it from its own folder, the core knows no backend's
specifics (it used to compare ``attrs.source`` with Triton's ``"compilation_listener"`` itself).
The fixes of such a compile are the backend's words too (``exact_key_fixes``), else a neutral text:
never Triton's (``triton.compile``, Inductor, a manifest)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import jitwatch.core
from jitwatch import BackendStatus, Capture, CompileSink
from jitwatch.backends.explain import (
    ExactKeyFixes,
    Reason,
    Seen,
    compiled_again,
    neutral_exact_key_fixes,
    never_warmed,
    new_key,
)
from jitwatch.core.diagnosis import Diagnoser, explainers_of
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal
from jitwatch.testing import JournalBuilder, make_event, monitored
from jitwatch.views.coverage import coverage_for_journal
from jitwatch.views.diagnosis import serving_reasons


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

    neutral = neutral_exact_key_fixes("gemm")
    never = _compile(Phase.SERVING, "gemm", "h0", via="cache_only")
    assert d.observe(never) == never_warmed("gemm", backend="hashjit", exact_key=neutral)
    assert never.attrs["fixes"] == [neutral.warm]

    d.observe(_compile(Phase.WARMUP, "gemm", "h1", via="cache_only"))
    d.observe(_compile(Phase.WARMUP, "gemm", "shape=(8,)"))

    again = _compile(Phase.SERVING, "gemm", "h1", via="cache_only")
    assert d.observe(again) == compiled_again("gemm")
    assert again.attrs["fixes"] == [neutral.again]
    other = _compile(Phase.SERVING, "gemm", "h2", via="cache_only")
    assert d.observe(other) == new_key("gemm", 2, "hashjit", exact_key=neutral)
    assert other.attrs["fixes"] == [neutral.warm]
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


# ---------------------------------------------------------------------------------------------
# The fixes of a key compared by exact key: the backend's words, else a neutral text
# ---------------------------------------------------------------------------------------------
class HashJitBackend(HashKeyedBackend):
    """A whole backend (installable in a real :class:`~jitwatch.core.monitor.Monitor`) whose
    compiler reports cache-only compiles; ``compile()`` is what its hook would call. Its explainer
    gives no fixes of its own (``exact_key_fixes``): the neutral text applies."""

    label = "hashjit kernel"

    def __init__(self) -> None:
        super().__init__()
        self.sink: CompileSink | None = None

    def available(self) -> bool:
        return True

    def version(self) -> str | None:
        return "0.1"

    def install(self, sink: CompileSink) -> BackendStatus:
        self.sink = sink
        return BackendStatus(self.name, "active", "0.1", ("hashjit.compile",))

    def uninstall(self) -> None:
        self.sink = None

    def compile(self, kernel: str, key: str) -> None:
        assert self.sink is not None
        token = self.sink.begin(self.name, kernel)
        self.sink.finish(token, Capture(self.name, kernel, key, detail={"via": "cache_only"}))


class HashJitWithFixes(HashJitBackend):
    """The same backend, whose explainer says in its own words what removes such a compile."""

    def exact_key_fixes(self, name: str) -> ExactKeyFixes:
        return ExactKeyFixes(
            warm=f"call hashjit.precompile({name!r}) in warmup with serving's shapes",
            again=f"pass hashjit.compile(..., reuse=True) so that {name} is looked up, not compiled",
        )


def _serve(backend: HashJitBackend, journal_dir: Path) -> None:
    """A worker of ``backend`` in a real monitor, journaling into ``journal_dir``: ``gemm`` warms
    ``h1``; serving compiles ``h1`` again and a new ``h2``; ``conv`` compiles only in serving."""
    with monitored(journal_dir=journal_dir, backends=[backend], compile_only=False) as h:
        with h.monitor.warmup():
            backend.compile("gemm", "h1")
        h.monitor.activate()
        backend.compile("gemm", "h1")
        backend.compile("gemm", "h2")
        backend.compile("conv", "h9")
        h.monitor.flush()


def _fixes_by_key(journal_dir: Path, explainers: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Per serving key, what ``jitwatch why`` (serving_reasons) and ``jitwatch coverage`` (missing
    keys; ``None`` for a key covered: compiled before serving) read from the journal: reason kind
    and fixes."""
    with Journal(journal_dir, readonly=True) as j:
        reasons = serving_reasons(j, backend="hashjit", explainers=explainers)
        report = coverage_for_journal(j)
    missing = {m.key: m for k in report.kernels if k.backend == "hashjit" for m in k.missing}
    return {
        str(r.key): {
            "kind": r.reason_kind,
            "fixes": r.fixes,
            "coverage_fixes": m.fixes if (m := missing.get(r.key)) else None,
        }
        for r in reasons
    }


@pytest.mark.parametrize("backend_class", [HashJitWithFixes, HashJitBackend])
def test_a_backends_exact_key_fixes_are_journaled_and_read_by_why_and_coverage(
    backend_class: type[HashJitBackend], tmp_path: Path
) -> None:
    """A real monitor journals each serving compile with the fixes of the compile's own backend:
    those its explainer gives (``exact_key_fixes``), else the neutral ones; ``jitwatch why`` and
    coverage read them back from the journal."""
    backend = backend_class()
    fixes_of = backend.exact_key_fixes if isinstance(backend, HashJitWithFixes) else neutral_exact_key_fixes
    _serve(backend, tmp_path)
    gemm, conv = fixes_of("gemm"), fixes_of("conv")
    assert _fixes_by_key(tmp_path) == {
        "h1": {"kind": "unknown", "fixes": [gemm.again], "coverage_fixes": None},
        "h2": {"kind": "unknown", "fixes": [gemm.warm], "coverage_fixes": [gemm.warm]},
        "h9": {"kind": "never_warmed", "fixes": [conv.warm], "coverage_fixes": [conv.warm]},
    }
    assert backend.diffed == []  # keys compared by exact key: never diffed


def test_fixes_recomputed_at_read_time_are_the_backends_too(tmp_path: Path) -> None:
    """Serving compiles journaled without a reason (an older jitwatch) get theirs at read time, from
    the explainers given to the reader: with ``exact_key_fixes``, the backend's words; without it,
    the neutral text."""
    b = JournalBuilder(tmp_path)

    def ev(phase: Phase, key: str, ts: float) -> Event:
        return b.event(
            EventKind.COMPILE,
            b.t0 + ts,
            phase=phase,
            kernel="gemm",
            key=key,
            backend="hashjit",
            attrs={"via": "cache_only"},
        )

    b.write(ev(Phase.WARMUP, "h1", 1), ev(Phase.SERVING, "h1", 2), ev(Phase.SERVING, "h2", 3))
    with Journal(tmp_path, readonly=True) as j:
        for backend, fixes in (
            (HashJitWithFixes(), HashJitWithFixes().exact_key_fixes("gemm")),
            (HashJitBackend(), neutral_exact_key_fixes("gemm")),
        ):
            reasons = serving_reasons(j, backend="hashjit", explainers=explainers_of([backend]))
            assert [(r.key, r.fixes) for r in reasons] == [("h2", [fixes.warm]), ("h1", [fixes.again])]


def test_the_neutral_fixes_name_no_backend_and_no_manifest() -> None:
    """A backend without ``exact_key_fixes`` gets words that fit any backend: the kernel's name and
    what to do, no manifest (none can hold a compile without argument classes), no Triton."""
    fixes = neutral_exact_key_fixes("gemm_bf16")
    assert fixes.warm == "run the code path that compiles gemm_bf16 in warmup, with serving's shapes and dtypes"
    for text in (fixes.warm, fixes.again):
        assert "gemm_bf16" in text
        for word in ("manifest", "triton", "inductor", "torch.compile", "listener"):
            assert word not in text.lower(), (word, text)


class _CallableBackend:
    """A backend without ``explain`` whose object is callable for another purpose (used as its
    library's listener callback): nothing to explain its keys with."""

    name = "hashjit"
    explain = None

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:  # the library's listener signature, not explain's
        self.calls.append(args)
        raise TypeError("listener called with the wrong arguments")


def test_a_callable_backend_without_explain_has_no_explainer() -> None:
    """Only a backend's ``explain`` method explains: a backend object that is callable (its
    ``__call__`` a library callback) is not taken as a bare ``explain`` function, so its serving
    compiles get the reason of a backend without an explainer, not "not explained (TypeError)"."""
    backend = _CallableBackend()
    assert explainers_of([backend]) == {}
    d = Diagnoser(explainers_of([backend]))
    d.observe(_compile(Phase.WARMUP, "gemm", "h1"))
    ev = _compile(Phase.SERVING, "gemm", "h2")
    assert d.observe(ev) == new_key("gemm", 1, "hashjit")
    assert backend.calls == [] and d.errors == 0


class _LazyBackend:
    """A backend that forwards unknown attributes to its library, loaded on first use: without the
    library every such lookup raises ``ImportError`` (not ``AttributeError``)."""

    name = "hashjit"

    def __init__(self) -> None:
        self.inner = HashKeyedBackend()

    def explain(self, new: Seen, baseline: Sequence[Seen]) -> Reason | None:
        return self.inner.explain(new, baseline)

    def __getattr__(self, name: str) -> Any:
        raise ImportError(f"hashjit's library is not installed (looking up {name})")


class _BrokenBackend:
    name = "broken"

    @property
    def explain(self) -> Any:
        raise RuntimeError("broken third-party backend")


def test_a_backend_whose_attribute_lookup_raises_costs_only_its_own_answer() -> None:
    """``by_exact_key`` and ``exact_key_fixes`` are looked up on every backend with ``explain``: a
    lookup that raises (a lazy backend's ``__getattr__``) means "never by exact key" and the
    neutral fixes, and a backend whose ``explain``
    cannot even be looked up is left out, without costing the others their explainer (the monitor
    builds these at start: it must not raise into the host)."""
    lazy, hashed = _LazyBackend(), HashKeyedBackend()
    hashed.name = "other"  # type: ignore[misc]
    out = explainers_of([_BrokenBackend(), lazy, hashed])
    assert set(out) == {"hashjit", "other"}
    assert out["hashjit"].by_exact_key({"via": "cache_only"}) is False
    assert out["hashjit"].exact_key_fixes("gemm") == neutral_exact_key_fixes("gemm")
    assert out["other"].by_exact_key({"via": "cache_only"}) is True
    d = Diagnoser(out)
    d.observe(_compile(Phase.WARMUP, "gemm", "h1"))
    reason = d.observe(_compile(Phase.SERVING, "gemm", "h2", via="cache_only"))
    assert reason is not None and reason.kind == "argument" and d.errors == 0
