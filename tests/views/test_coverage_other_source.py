"""Expected keys recorded for another source of their kernel (``jitwatch coverage --manifest`` /
``--expect-journal``), with real compiles through the compile-only driver (Triton 3.9 in ``.venv``,
3.6 in ``.venv-triton36``).

The case a new user hit: ``scale`` warmed with n = 2**31 + 16 (i64), served n = 1; jitwatch advises
``do_not_specialize=["n"]`` and warming an i32. With the fix applied, serving compiles nothing, yet
the previous run's expected key (``n: ==1``) cannot occur any more: under ``do_not_specialize`` the
same launch compiles ``('i32', None)``. Triton's source hash (``JITFunction.cache_key``) does not
change with the decorator, so coverage reads the change from the keys: the old key is listed apart
and the key it stands for now is compared instead.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.core.events import Phase
from jitwatch.testing import fresh_kernel_cache, monitored
from tests.views import source_kernels_other as sk_other
from tests.views import source_kernels_v1 as v1
from tests.views import source_kernels_v2 as v2
from tests.views import source_kernels_v3 as v3
from tests.views import source_kernels_v4 as v4

BIG = 2**31 + 16
"""An int Triton types i64, a multiple of 16."""


def run(tmp_path: Path, kernel: Any, warm: Sequence[int], served: Sequence[int]) -> tuple[Path, int]:
    """One worker: ``kernel`` warmed with each of ``warm``, then called with each of ``served`` in a
    request. Returns its journal and how many serving compiles it journaled."""
    fresh_kernel_cache(kernel)
    jdir = tmp_path / f"j{len(list(tmp_path.iterdir()))}"
    x, y = torch.zeros(64), torch.zeros(64)
    with monitored(journal_dir=jdir, triton_cache_dir=tmp_path / "triton-cache") as h:
        with h.monitor.warmup():
            for v in warm:
                kernel.warmup(x, y, v, BLOCK=64, grid=(1,))
        with h.monitor.request("r"):
            for v in served:
                kernel.warmup(x, y, v, BLOCK=64, grid=(1,))
        return jdir, len(h.compiles(Phase.SERVING))


def coverage(*args: str) -> tuple[int, dict[str, Any], str]:
    """``jitwatch coverage ARGS --json``: exit status, the scale kernel's entry, stderr."""
    res = CliRunner().invoke(app, ["coverage", *args, "--json"], env={"COLUMNS": "300"})
    body = json.loads(res.stdout)
    (kernel,) = [k for k in body["kernels"] if k["kernel"] == "scale"]
    return res.exit_code, kernel, res.stderr


def export(tmp_path: Path, jdir: Path) -> Path:
    out = tmp_path / f"{jdir.name}.manifest.json"
    res = CliRunner().invoke(app, ["manifest", "export", "--journal-dir", str(jdir), "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_the_advised_fix_passes_a_gate_of_the_previous_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the fix, the previous run's key fails the gate; after it (do_not_specialize and an i32
    warmed), the gate passes with the previous journal and manifest, listing their keys apart; with
    do_not_specialize alone it still fails, on the key the recorded launch compiles now."""
    before, n = run(tmp_path, v1.scale, [BIG], [1])
    assert n == 1
    manifest = export(tmp_path, before)
    entries = json.loads(manifest.read_text())["entries"]
    # the premise: Triton's source hash does not tell the two sources apart
    assert {e["source_hash"] for e in entries} == {v1.scale.cache_key} == {v2.scale.cache_key}

    # same source, not fixed: the recorded key is compared and missing
    unfixed, n = run(tmp_path, v1.scale, [BIG], [])
    assert n == 0
    code, k, _ = coverage("--journal-dir", str(unfixed), "--expect-journal", str(before), "--require-complete")
    assert code == 1 and [m["reason"] for m in k["missing"]] == ["n: i64 %16 → ==1"] and k["other_source"] == []

    fixed, n = run(tmp_path, v2.scale, [BIG, 7], [1])
    assert n == 0  # the fix works: serving compiled nothing
    # v2 is v1's module edited (its kernels name v1's module): --allow imports the edited source
    assert v2.scale.fn.__module__ == v1.__name__
    monkeypatch.setitem(sys.modules, v1.__name__, v2)
    allow = ["--allow", "tests.views"]  # flags read from the kernel itself, not inferred
    for expect in (
        ["--expect-journal", str(before)],
        ["--manifest", str(manifest)],
        [*allow, "--manifest", str(manifest)],
    ):
        code, k, err = coverage("--journal-dir", str(fixed), *expect, "--require-complete")
        assert code == 0, (expect, k, err)
        assert k["missing"] == [] and (k["covered"], k["total"]) == (2, 2)
        reasons = {m["reason"] for m in k["other_source"]}
        assert (
            "recorded for another source of scale (n: ==1 when recorded, do_not_specialize now (i32 any)):"
            " compared as the key it compiles as now; re-record the " in " ".join(reasons)
        )
        assert len(k["other_source"]) == 1, k
        assert "recorded for another source of their kernel" in err and k["other_source"][0]["compared_as"]
        code, _, _ = coverage("--journal-dir", str(fixed), *expect, "--require-complete", "--fail-on-other-source")
        assert code == 1

    # do_not_specialize alone: 1 would still compile (an i32), and the gate says so
    half, n = run(tmp_path, v2.scale, [BIG], [])
    for flags in ([], allow):
        code, k, _ = coverage("--journal-dir", str(half), "--expect-journal", str(before), "--require-complete", *flags)
        assert code == 1 and [m["reason"] for m in k["missing"]] == ["n: i64 any → i32 any"]
        assert k["flags_known"] is bool(flags)
    assert k["missing"][0]["fixes"] == [
        "warm n with a value of type i32 (the int's type is in the key even under do_not_specialize)"
    ]
    assert run(tmp_path, v2.scale, [BIG], [1])[1] == 1  # which serving confirms


def test_do_not_specialize_removed_lists_the_key_apart_not_compared(tmp_path: Path) -> None:
    """The other way: recorded under do_not_specialize (``i32 any``), specialized now: the value is
    unknown, so no key stands for it; listed apart and not compared, so --require-complete fails
    (a gate must not pass on what it did not check) unless --allow-other-source."""
    before, n = run(tmp_path, v2.scale, [BIG], [5])
    assert n == 1
    now, _ = run(tmp_path, v1.scale, [BIG, 7], [])
    code, k, err = coverage("--journal-dir", str(now), "--expect-journal", str(before), "--require-complete")
    assert code == 1 and k["missing"] == [] and k["other_source"][0]["compared_as"] is None
    assert "not compared (nothing stands for them now; --allow-other-source to pass anyway)" in err
    allowed = coverage(
        "--journal-dir", str(now), "--expect-journal", str(before), "--require-complete", "--allow-other-source"
    )
    assert allowed[0] == 0
    assert [m["reason"] for m in k["other_source"]] == [
        "recorded for another source of scale (n: do_not_specialize when recorded (i32 any), specialized now):"
        " not compared; re-record the expected journal"
    ]


def test_a_key_recorded_with_another_source_hash_that_can_still_occur_is_compared(tmp_path: Path) -> None:
    """The body changed and the kernel moved (another source hash), its flags did not: n = 1 still
    compiles, so the recorded key is compared and fails the gate; its reason says it was recorded for
    another source (replay skips such entries)."""
    assert v1.scale.cache_key != v3.scale.cache_key
    before, _ = run(tmp_path, v1.scale, [BIG], [1])
    now, _ = run(tmp_path, v3.scale, [BIG], [])
    code, k, _ = coverage("--journal-dir", str(now), "--manifest", str(export(tmp_path, before)), "--require-complete")
    assert code == 1 and k["other_source"] == []
    (m,) = k["missing"]
    assert m["reason"].startswith("n: i64 %16 → ==1 (recorded for another source of scale: source hash ")
    assert m["source_hash"] == v1.scale.cache_key and "replay skips such manifest entries" in m["reason"]
    fixed, _ = run(tmp_path, v3.scale, [BIG, 1], [])
    assert (
        coverage("--journal-dir", str(fixed), "--manifest", str(export(tmp_path, before)), "--require-complete")[0] == 0
    )


def test_a_key_of_a_same_named_kernel_of_another_module_is_compared_as_recorded(tmp_path: Path) -> None:
    """Two kernels named ``scale`` (source_kernels_v1: ``n`` specialized; source_kernels_other: under
    ``do_not_specialize``). The previous run served v1's scale with n = 1; this run warms only the other.
    v1's recorded key (``n: ==1``) is not a key of another source of the other kernel: serving still
    compiles it (v1 is unchanged and never warmed), so the gate must fail, not rewrite the key as
    v2 compiles it and pass (a false pass)."""
    other = sk_other.scale  # v2's source in a module of its own
    assert other.fn.__module__ != v1.scale.fn.__module__
    before, n = run(tmp_path, v1.scale, [BIG], [1])
    assert n == 1
    now, _ = run(tmp_path, other, [BIG, 7], [])
    for expect in (["--expect-journal", str(before)], ["--manifest", str(export(tmp_path, before))]):
        for flags in ([], ["--allow", "tests.views.source_kernels_other"]):
            code, k, err = coverage("--journal-dir", str(now), *expect, "--require-complete", *flags)
            assert code == 1, (expect, flags, k, err)
            assert k["other_source"] == []
            assert any("('constexpr', 1)" in (m["key"] or "") for m in k["missing"]), k
    # which serving confirms: v1's scale, unwarmed in this run, compiles n = 1 in serving
    assert run(tmp_path, v1.scale, [], [1])[1] == 1


def test_a_key_recorded_before_an_argument_was_renamed_is_compared(tmp_path: Path) -> None:
    """``n`` renamed ``size``, nothing else: Triton's key is positional, so the recorded launch
    (n = 1: ``('constexpr', 1)``) compiles the same key now. Listed apart and not compared, the gate
    passed while serving compiled it (a false pass); it is compared, by position."""
    before, n = run(tmp_path, v1.scale, [BIG], [1])
    assert n == 1
    now, _ = run(tmp_path, v4.scale, [BIG], [])
    for expect in (["--expect-journal", str(before)], ["--manifest", str(export(tmp_path, before))]):
        code, k, err = coverage("--journal-dir", str(now), *expect, "--require-complete")
        assert code == 1, (expect, k, err)
        assert [m["key"].split("]")[0] for m in k["missing"]] == [
            "[('*fp32', 'D'), ('*fp32', 'D'), ('constexpr', 1), ('constexpr', 64)"
        ], k
    fixed, _ = run(tmp_path, v4.scale, [BIG, 1], [])
    assert coverage("--journal-dir", str(fixed), "--expect-journal", str(before), "--require-complete")[0] == 0
    assert run(tmp_path, v4.scale, [BIG], [1])[1] == 1  # which serving confirms


def test_do_not_specialize_removed_and_the_served_class_not_warmed_fails_the_gate(tmp_path: Path) -> None:
    """The previous run served n = 5 under ``do_not_specialize`` (``n: i32 any``); ``n`` is
    specialized now and warmup warms an i64 only. Serving n = 5 again compiles (``i32 other``): the
    key cannot be compared (which i32 class the recorded value had is unknown; only warming every
    i32 class — 1, a multiple of 16, another — would prove it covered), so the gate fails on it by
    default instead of passing what it did not check (a false pass until 2026-12-03 evening)."""
    before, n = run(tmp_path, v2.scale, [BIG], [5])
    assert n == 1
    now, _ = run(tmp_path, v1.scale, [BIG], [])
    assert run(tmp_path, v1.scale, [BIG], [5])[1] == 1  # serving the recorded launch compiles
    code, k, _ = coverage("--journal-dir", str(now), "--expect-journal", str(before), "--require-complete")
    assert code == 1, k
