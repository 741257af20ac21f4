"""Coverage of listener-only Triton compiles (a direct ``triton.compile``, as Inductor compiles its
kernels: reported only through ``knobs.compilation.listener``, keyed by Triton's cache hash, no
specialization data) and of other compile events without argument classes: counted by exact key,
missing in serving unless the same key compiled before serving, alike in ``jitwatch coverage``
(CliRunner), ``/jit`` (build_status) and ``/metrics`` (render_uncached) (real compile-only compiles,
real journals). The sidecar's live copy: ``tests/views/test_live.py``; over real HTTP, across a
restart: ``tests/test_sidecar.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text
from typer.testing import CliRunner

from jitwatch.backends.triton.explain import listener_only_fix
from jitwatch.cli import app
from jitwatch.core.events import EventKind, Phase
from jitwatch.store.journal import Journal
from jitwatch.testing import make_event
from jitwatch.views.coverage import coverage_for_journal, journal_coverage_ratios
from jitwatch.views.metrics import render_uncached
from jitwatch.views.status import build_status
from tests.views.listener_only_kernels import journal_of

KERNEL = "add_one"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[int, str]]]:
    """Real journals, each of one worker: ``never`` (one direct compile in serving, nothing
    warmed: the reported reproduction), ``same`` (BLOCK=64 compiled directly in warmup and again
    in serving), ``mixed`` (a JIT compile and a direct compile of BLOCK=64 in warmup; direct
    compiles of 64 and 128 in serving) and ``warm`` (BLOCK=64 compiled directly in warmup only)."""
    base = tmp_path_factory.mktemp("listener_only")
    plans = {
        "never": {"serve": [64]},
        "same": {"warm": [64], "serve": [64]},
        "mixed": {"jit_warm": [64], "warm": [64], "serve": [64, 128]},
        "warm": {"warm": [64]},
    }
    return {name: (base / name / "j", journal_of(base / name, **plan)) for name, plan in plans.items()}


def coverage_cli(journal_dir: Path, *extra: str) -> tuple[int, str, str]:
    """``JITWATCH_DIR=<dir> jitwatch coverage …`` (the journal named by the environment, as reported)."""
    out = CliRunner().invoke(app, ["coverage", *extra], env={"JITWATCH_DIR": str(journal_dir)})
    return out.exit_code, out.stdout, out.stderr


def ratio_sample(body: bytes, kernel: str) -> float | None:
    for family in parse_text(body.decode()):
        if family.name == "jitwatch_specialization_coverage_ratio":
            for s in family.samples:
                if s.labels["kernel"] == kernel:
                    return float(s.value)
    return None


def serving_events(journal_dir: Path) -> dict[str, dict]:
    """Key → attrs of the journal's serving compiles (the reason the Diagnoser gave at compile time)."""
    with Journal(journal_dir, readonly=True) as j:
        return {e.key or "": dict(e.attrs) for e in j.events(kind=EventKind.COMPILE, phase=Phase.SERVING)}


def test_a_never_warmed_listener_only_serving_compile_is_missing_everywhere(runs) -> None:
    """The reproduction: ``--require-complete`` printed ``0/0 │ 100% │ 0`` and exited 0; ``/jit``
    had ``serving_keys: 0, missing: []`` and ``/metrics`` a ratio of 1.0."""
    jdir, hashes = runs["never"]
    (key,) = hashes.values()
    event = serving_events(jdir)[key]
    assert event["source"] == "compilation_listener" and "specialization_data" not in event

    rc, out, err = coverage_cli(jdir, "--require-complete")
    assert rc == 1, out + err
    row = next(line for line in out.splitlines() if line.startswith("│ triton") and f" {KERNEL} " in line)
    assert [c.strip() for c in row.strip("│").split("│")][:5] == ["triton", KERNEL, "0/1", "0%", "1"]
    assert "complete: every expected key" not in out
    assert "coverage incomplete: 1 expected key not compiled before serving" in err
    assert f"{KERNEL} [serving]: never warmed (no compile of this kernel before serving)" in err

    rc, out, _ = coverage_cli(jdir, "--json")
    doc = json.loads(out)
    (k,) = doc["kernels"]
    assert rc == 0 and doc["complete"] is False
    assert (k["covered"], k["total"], k["ratio"], k["warmup_keys"], k["serving_keys"]) == (0, 1, 0.0, 0, 1)
    (missing,) = k["missing"]
    assert (missing["key"], missing["source"], missing["reason_kind"]) == (key, "serving", "never_warmed")
    assert (missing["reason"], missing["fixes"]) == (event["reason"], event["fixes"])
    assert missing["fixes"] == [listener_only_fix(KERNEL)]
    assert k["arguments"] == [
        {
            "name": "[key]",
            "kind": "key",
            "specialize": True,
            "align": True,
            "classes": [key],
            "covered": [],
            "uncovered": [key],
            "serving_only": [key],
        }
    ]

    with Journal(jdir, readonly=True) as j:
        status = build_status(j)
        assert journal_coverage_ratios(j) == {KERNEL: 0.0}
    (cov,) = status.coverage
    (row_k,) = [r for r in status.kernels if r.name == KERNEL]
    assert row_k.compiles_serving == 1 and cov.serving_keys == 1
    assert [m.key for m in cov.missing] == [key]
    assert cov.model_dump(mode="json") == k
    assert ratio_sample(render_uncached(jdir)[0], KERNEL) == 0.0


def test_the_same_cache_hash_compiled_in_warmup_covers_the_serving_one(runs) -> None:
    jdir, hashes = runs["same"]
    rc, out, err = coverage_cli(jdir, "--require-complete", "--json")
    assert rc == 0, out + err
    (k,) = json.loads(out)["kernels"]
    assert (k["covered"], k["total"], k["warmup_keys"], k["serving_keys"], k["missing"]) == (1, 1, 1, 0, [])
    assert k["uncovered"] == [] and k["arguments"][0]["covered"] == [hashes[64]]
    rc, out, _ = coverage_cli(jdir, "--require-complete")
    assert rc == 0 and "complete: every expected key was compiled before serving" in out
    assert ratio_sample(render_uncached(jdir)[0], KERNEL) == 1.0


def test_a_jit_key_never_covers_a_cache_hash_and_a_new_hash_is_missing(runs) -> None:
    """JIT and direct compiles of one kernel: the JIT key gives argument classes, the direct ones
    a ``[key]`` class per cache hash; only the serving hash warmup did not compile is missing, with
    the reason and fix the compile event got."""
    jdir, hashes = runs["mixed"]
    with Journal(jdir, readonly=True) as j:
        report = coverage_for_journal(j)
        ratios = journal_coverage_ratios(j)
    k = report.by_kernel()[KERNEL]
    keyed = next(a for a in k.arguments if a.name == "[key]")
    assert (keyed.classes, keyed.covered, keyed.uncovered) == ([hashes[64], hashes[128]], [hashes[64]], [hashes[128]])
    assert {a.name for a in k.arguments} == {"x_ptr", "n", "BLOCK", "[key]"}
    assert (k.warmup_keys, k.serving_keys) == (2, 1)  # the JIT key and the 64 hash; the 128 hash
    (missing,) = k.missing
    event = serving_events(jdir)[hashes[128]]
    assert (missing.key, missing.reason_kind) == (hashes[128], "unknown")
    assert missing.reason == event["reason"] == f"new key; 2 other keys of kernel {KERNEL} were warmed"
    assert missing.fixes == event["fixes"] == [listener_only_fix(KERNEL)]
    assert f"[key]:{hashes[128]}" in k.uncovered
    assert (k.covered, k.total, k.ratio) == (2, 3, pytest.approx(2 / 3))  # keys: 2 warmed, the 128 hash missing
    assert k.classes_covered == sum(len(a.covered) for a in k.arguments)
    assert k.classes_total == sum(len(a.classes) for a in k.arguments)
    assert ratios == {KERNEL: pytest.approx(2 / 3)}
    assert ratio_sample(render_uncached(jdir)[0], KERNEL) == pytest.approx(k.ratio)
    rc, _, err = coverage_cli(jdir, "--require-complete")
    assert rc == 1 and "1 expected key" in err


def test_a_previous_runs_listener_only_serving_compiles_are_expected_by_hash(runs) -> None:
    """``--expect-journal``: the cache hash is the same in the next run (checked: two journals,
    two Triton caches), so a warmup that compiles the same code path covers it; a hash it did not
    compile is missing, with source ``journal``."""
    warm_dir, warm_hashes = runs["warm"]
    assert runs["never"][1][64] == warm_hashes[64]
    rc, out, err = coverage_cli(warm_dir, "--require-complete", "--expect-journal", str(runs["never"][0]))
    assert rc == 0, out + err
    rc, out, err = coverage_cli(warm_dir, "--json", "--expect-journal", str(runs["mixed"][0]))
    (k,) = json.loads(out)["kernels"]
    assert [(m["key"], m["source"]) for m in k["missing"]] == [(runs["mixed"][1][128], "journal")]
    assert k["missing"][0]["fixes"] == [listener_only_fix(KERNEL)]
    assert k["serving_keys"] == 0  # expected, not compiled in this run's serving


def test_a_manifest_cannot_cover_a_listener_only_compile(runs, tmp_path: Path) -> None:
    """Exporting the serving compiles leaves the listener-only one out, so replaying or expecting
    that manifest changes nothing: the key stays missing (the fix is warming its code path)."""
    from jitwatch.warmup.manifest import build

    jdir, hashes = runs["never"]
    manifest, problems = build(jdir, all_phases=True)
    assert manifest.entries == [] and list(problems) == [f"{KERNEL} (listener-only)"]
    path = tmp_path / "m.json"
    path.write_text(manifest.model_dump_json())
    rc, out, err = coverage_cli(jdir, "--json", "--manifest", str(path), "--require-complete")
    (k,) = json.loads(out)["kernels"]
    assert [m["key"] for m in k["missing"]] == [hashes[64]]
    assert rc == 1 and "1 expected key" in err


def test_other_compiles_without_specialization_data_are_counted_by_key(tmp_path: Path) -> None:
    """A listener-only compile whose capture failed (``capture_error``, no ``source``), a compile
    whose key does not parse and a JIT key without a signature (an older journal): each is a
    serving key and missing unless the same key compiled before serving. They were dropped: a
    kernel with only such compiles read ``0/0``, complete."""
    spec_key = "[('*fp32', 'D'), ('i32', 'D'), ('constexpr', 64)]"
    t0 = 1_700_000_000.0
    with Journal(tmp_path) as j:
        j.write(
            [
                make_event(EventKind.COMPILE, t0, phase=Phase.WARMUP, kernel="old", key=spec_key),
                make_event(EventKind.COMPILE, t0 + 1, phase=Phase.SERVING, kernel="old", key=spec_key),
                make_event(
                    EventKind.COMPILE,
                    t0 + 2,
                    phase=Phase.SERVING,
                    kernel="broken",
                    key="ab" * 32,
                    attrs={"capture_error": "ValueError"},
                ),
                make_event(EventKind.COMPILE, t0 + 3, phase=Phase.SERVING, kernel="odd", key="not a key"),
            ]
        )
        report = coverage_for_journal(j)
        ratios = journal_coverage_ratios(j)
    by = report.by_kernel()
    assert (by["old"].covered, by["old"].total, by["old"].serving_keys, by["old"].missing) == (1, 1, 0, [])
    for name, key in (("broken", "ab" * 32), ("odd", "not a key")):
        k = by[name]
        assert (k.covered, k.total, k.serving_keys) == (0, 1, 1)
        assert [(m.key, m.reason_kind) for m in k.missing] == [(key, "never_warmed")]
        assert "record a manifest" in k.missing[0].fixes[0]  # not listener-only: attrs.source is missing
    assert ratios == {"old": 1.0, "broken": 0.0, "odd": 0.0}
    rc, _, err = coverage_cli(tmp_path, "--require-complete")
    assert rc == 1 and "2 expected keys" in err
