"""A reason on every serving compile: the nearest key compiled before serving, and how it differs.

:class:`Diagnoser` is fed a worker's compile events in the order they happened. Compiles outside
the ``serving`` phase (startup, warmup, replayed manifests) become the *baseline* of their
``(backend, kernel)``; a ``serving`` compile gets a :class:`~jitwatch.backends.explain.Reason`
written into its ``attrs`` (``reason``, ``reason_kind``, ``reason_changes``, ``fixes``):

* the backend's compiler said why (torch.compile: Dynamo's guard failure in ``attrs.reason``):
  kept verbatim, kind ``compiler``;
* nothing of that kernel compiled before serving: ``never warmed``;
* else the backend's ``explain`` (Triton: :func:`jitwatch.backends.triton.explain.explain`) diffs
  the key against the nearest baseline key; a backend without one (or whose ``explain`` says
  nothing) gets kind ``unknown``: a new key, or, when the same key compiled before serving
  (torch.compile after ``torch._dynamo.reset()``), compiled again;
* unless the backend's ``by_exact_key`` says the key has no argument classes (Triton: a
  listener-only compile, its key Triton's cache hash): nothing is diffed, the same key before
  serving means it compiled again (:func:`~jitwatch.backends.explain.compiled_again`), another key
  is ``unknown``, and the fixes are those no manifest can replay, in the backend's words (its
  ``exact_key_fixes``; a neutral text without one). The core knows no backend's specifics: each
  backend's :class:`~jitwatch.backends.explain.Explainer` answers for its keys.

In a worker it runs on the journal writer's thread (the monitor's deferred events call it while
being built), never on the compiling thread. Readers use the same class over a journal's events
(:mod:`jitwatch.views.diagnosis`) for events written without a reason. Memory is bounded:
:data:`MAX_BASELINE_KEYS` keys per kernel, :data:`MAX_KERNELS` kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jitwatch.backends.explain import (
    Explainer,
    ExplainFn,
    Reason,
    Seen,
    compiled_again,
    explainer_of,
    never_warmed,
    new_key,
)
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.text import logger

log = logger(__name__)

MAX_BASELINE_KEYS = 64
"""Distinct keys remembered per ``(backend, kernel)`` compiled before serving (the first ones)."""
MAX_KERNELS = 4096
"""``(backend, kernel)`` pairs remembered; later ones are explained as ``unknown``."""
_KEEP = ("signature", "options", "constexprs")
_COMPILE = EventKind.COMPILE
_SERVING = Phase.SERVING


def explainers_of(backends: Sequence[Any]) -> dict[str, Explainer]:
    """``{backend name: Explainer}`` for the backends that have an ``explain`` method (and, if they
    have them, their ``by_exact_key`` and ``exact_key_fixes``:
    :func:`~jitwatch.backends.explain.explainer_of`). A backend object is never taken as a bare
    ``explain`` function: one that is callable for another purpose (a library callback) but has no
    ``explain`` has no explainer. Never raises: a backend whose ``explain`` or name cannot be
    looked up is left out (logged), the others keep theirs (the monitor builds these when it
    starts, in the host)."""
    out: dict[str, Explainer] = {}
    for b in backends:
        try:
            if not callable(getattr(b, "explain", None)):
                continue
            ex = explainer_of(b)
            if ex is not None:
                out[str(b.name)] = ex
        except Exception as exc:  # noqa: BLE001 - a broken third-party backend costs its own reasons only
            log.error("jitwatch: a backend (%s) offers no usable explain: %s", type(b).__name__, type(exc).__name__)
    return out


class Diagnoser:
    """Writes a reason into every serving-phase ``compile`` event it is shown (not thread-safe:
    one thread, the journal writer's, calls :meth:`observe`)."""

    def __init__(self, explainers: Mapping[str, Explainer | ExplainFn] | None = None) -> None:
        """``explainers``: ``{backend name: Explainer}`` (:func:`explainers_of`); a bare
        ``explain`` function is taken as an explainer that compares no key by exact key."""
        self.explainers: dict[str, Explainer] = {}
        for name, given in (explainers or {}).items():
            ex = explainer_of(given)
            if ex is not None:
                self.explainers[name] = ex
        self._baseline: dict[tuple[str, str], dict[str, Seen]] = {}
        self._never: dict[tuple[str, str, bool, str | None], Reason] = {}
        """``never_warmed`` reasons made so far, by ``(backend, kernel, by exact key)`` (a frozen ``Reason``,
        shared: a kernel that was never warmed compiles several keys in serving). Read only while
        that kernel has no baseline, so a baseline added later needs no invalidation."""
        self.errors = 0

    def observe(self, event: Event) -> Reason | None:
        """Remember ``event`` as baseline, or (serving) set its reason fields in place and return
        the reason. Other kinds and events without a kernel are ignored. Never raises."""
        if event.kind is not _COMPILE or not event.kernel:
            return None
        ident = (event.backend, event.kernel)
        if event.phase is not _SERVING:
            keys = self._baseline.get(ident)
            if keys is None:
                if len(self._baseline) >= MAX_KERNELS:
                    return None
                keys = self._baseline[ident] = {}
            k = event.key or ""
            if k not in keys and len(keys) < MAX_BASELINE_KEYS:
                keys[k] = Seen(event.key, {n: event.attrs[n] for n in _KEEP if n in event.attrs})
            return None
        try:
            reason = self.explain(event)
        except Exception as exc:  # noqa: BLE001 - a diagnosis bug must not cost the event
            self.errors += 1
            if self.errors <= 3:
                log.error("jitwatch: could not explain a compile of %s: %s: %s", event.kernel, type(exc).__name__, exc)
            reason = Reason("unknown", f"not explained ({type(exc).__name__})")
        event.attrs.update(reason.as_attrs())
        return reason

    def describe_key(self, event: Event) -> str | None:
        """The specialization ``event``'s key stands for, in its backend's words (the explainer's
        ``describe_key``: Triton's argument classes), for the warning line; ``None`` when its
        backend gives none or fails. Runs where :meth:`observe` runs (the journal writer's
        thread). Never raises."""
        ex = self.explainers.get(event.backend)
        if ex is None:
            return None
        try:
            text = ex.describe_key(event.key, event.attrs)
        except Exception:  # noqa: BLE001 - a backend's description fault: the line shows the key
            return None
        return text if isinstance(text, str) and text else None

    def explain(self, event: Event) -> Reason:
        """The reason of a serving compile ``event`` (does not modify it)."""
        given = event.attrs.get("reason")
        if isinstance(given, str) and given:
            fixes = event.attrs.get("fixes")
            return Reason("compiler", given, fixes=tuple(str(f) for f in fixes) if isinstance(fixes, list) else ())
        ident = (event.backend, event.kernel or "")
        ex = self.explainers.get(event.backend)
        exact = ex is not None and ex.by_exact_key(event.attrs) is True
        base = self._baseline.get(ident)
        name = event.kernel or "this kernel"
        module = event.attrs.get("module")
        module = module if isinstance(module, str) else None
        if not base:
            memo = (*ident, exact, module)
            reason = self._never.get(memo)
            if reason is None:
                fixes = ex.exact_key_fixes(name) if ex is not None and exact else None
                reason = never_warmed(name, backend=event.backend, exact_key=fixes, module=module)
                if len(self._never) < MAX_KERNELS:
                    self._never[memo] = reason
            return reason
        if ex is None or not exact:
            if ex is not None:
                reason = ex.explain(Seen(event.key, event.attrs), list(base.values()))
                if reason is not None:
                    return reason
            if (event.key or "") in base:  # not a new key: the same one compiled before serving
                return compiled_again(name)
            return new_key(name, len(base), event.backend, module=module)
        # A key compared by exact key (e.g. Triton's cache hash) has nothing to diff; its fixes
        # are the backend's (its explainer's exact_key_fixes, else a neutral text).
        fixes = ex.exact_key_fixes(name)
        if (event.key or "") in base:  # the same key compiled before serving
            return compiled_again(name, fixes)
        return new_key(name, len(base), event.backend, exact_key=fixes, module=module)


__all__ = ["MAX_BASELINE_KEYS", "MAX_KERNELS", "Diagnoser", "ExplainFn", "explainers_of"]
