"""Bounded ``backend`` label values: the journal can hold any backend string (a hostile or buggy
writer, a third-party backend); ``/metrics`` names at most ``MAX_BACKEND_LABELS`` backends that
follow the backend-name rule (jitwatch's own always) and sums every other under ``_other``.
A real journal, rows written as a worker would and straight into the file, read by the real
sidecar over HTTP and by the in-process live copy (byte-identical to a full build)."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families as parse_text

from jitwatch.backends import BUILTIN
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal
from jitwatch.views.contract import BUILTIN_BACKENDS, MAX_BACKEND_LABELS, OTHER_BACKEND
from jitwatch.views.live import LiveJournal
from jitwatch.views.metrics import render_uncached

HOSTILE = [f"b{i:03d}" for i in range(40)] + ["Evil Name", 'x"\n}', "a" * 200, "TRITON"]


def _write(d: Path, names: list[str], t: float) -> None:
    with Journal(d) as j:
        j.write(
            [Event(kind=EventKind.WORKER_START, ts=t, rank=0, attrs={"mode": "warn"})]
            + [
                Event(
                    kind=EventKind.COMPILE,
                    ts=t + i * 1e-3,
                    rank=0,
                    phase=Phase.WARMUP,
                    backend=name,
                    kernel=f"k{i}",
                    key="k",
                    duration_s=0.01,
                )
                for i, name in enumerate(names)
            ]
        )
    c = sqlite3.connect(d / "journal.db")
    c.executemany(
        "INSERT INTO counters(rank, name, value) VALUES (0, ?, 1) ON CONFLICT DO UPDATE SET value = value + 1",
        [(f"hook_errors:{n}",) for n in names] + [(f"requests_delayed:{n}",) for n in names],
    )
    c.commit()
    c.close()


def _backends(text: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for fam in parse_text(text):
        for s in fam.samples:
            if "backend" in s.labels:
                out.setdefault(fam.name, set()).add(s.labels["backend"])
    return out


def _check_bounded(text: str, n_compiles: int) -> None:
    seen = _backends(text)
    every = set().union(*seen.values())
    assert len(every - {"", OTHER_BACKEND}) <= MAX_BACKEND_LABELS, sorted(every)
    assert all(b in ("", OTHER_BACKEND) or re.fullmatch(r"[a-z][a-z0-9_]{0,63}", b) for b in every), every
    assert {"triton", OTHER_BACKEND} <= seen["jitwatch_compiles"]
    compiles = sum(
        s.value
        for f in parse_text(text)
        if f.name == "jitwatch_compiles"
        for s in f.samples
        if s.name.endswith("_total")
    )
    assert compiles == n_compiles  # folded, not lost


def test_builtin_backends_match_the_registry() -> None:
    assert set(BUILTIN_BACKENDS) == set(BUILTIN)


def test_backend_labels_are_bounded_in_the_real_sidecar(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """Before: every distinct backend string became a label value of several families (44 here,
    one of them with a newline and quote); now at most MAX_BACKEND_LABELS valid names, the rest
    summed under _other."""
    d = tmp_path / "j"
    names = [*HOSTILE, "triton"]
    _write(d, names, time.time())
    sc = sidecar_factory(d)
    with httpx.Client(base_url=sc.url, timeout=30) as c:
        r = c.get("/metrics")
    assert r.status_code == 200
    _check_bounded(r.text, len(names))
    errors = {
        s.labels["backend"]: s.value
        for f in parse_text(r.text)
        if f.name == "jitwatch_hook_errors"
        for s in f.samples
        if s.name.endswith("_total")
    }
    assert errors["triton"] == 1 and sum(errors.values()) == len(names)


def test_live_copy_folds_like_a_full_build_as_names_arrive(tmp_path: Path) -> None:
    """The sidecar's incremental copy re-keys its series when a new name takes a label value
    (here ``a_new`` sorts before the named ``b0xx`` and displaces the last one): byte-identical to
    a full build at every step."""
    d = tmp_path / "j"
    t = time.time()
    _write(d, ["triton", "torch_compile"], t)
    lj = LiveJournal(d)
    try:
        assert lj.render()[0] == render_uncached(d)[0]
        _write(d, HOSTILE, t + 1)
        body = lj.render()[0]
        assert body == render_uncached(d)[0]
        _check_bounded(body.decode(), 2 + len(HOSTILE))
        _write(d, ["a_new", "b039"], t + 2)
        body = lj.render()[0]
        assert body == render_uncached(d)[0]
        assert 'backend="a_new"' in body.decode()
        _check_bounded(body.decode(), 4 + len(HOSTILE))
    finally:
        lj.close()
