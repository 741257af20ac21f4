"""Specialization coverage, checked against real compiles: classes the analysis calls distinct
compile to distinct keys, classes it calls equal share one key."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from typer.testing import CliRunner

from jitwatch.core.events import Phase
from jitwatch.store.journal import Journal
from jitwatch.testing import MonitorHarness, fresh_kernel_cache
from jitwatch.views.contract import BY_NAME
from jitwatch.views.coverage import (
    ArgInfo,
    classify,
    classify_call,
    coverage_for_journal,
    coverage_ratio_samples,
    enumerate_classes,
    journal_coverage_ratios,
)
from tests._paths import TRITON_TESTS

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf


@triton.jit(do_not_specialize=["m"], do_not_specialize_on_alignment=["k", "y_ptr"])
def cov_kernel(x_ptr, y_ptr, n, m, k, scale, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask) * scale
    if flag:
        v = v + m + k
    tl.store(y_ptr + offs, v, mask=mask)


def _key(fn: Any, *args: Any, **kwargs: Any) -> str:
    """Triton's own in-memory key for a call (``JITFunction.run``'s binder + compute_cache_key)."""
    from triton.runtime.jit import compute_cache_key

    device = triton.runtime.driver.active.get_current_device()
    _, key_cache, _, _, binder = fn.device_caches[device]
    kwargs = dict(kwargs, debug=False)
    kwargs["instrumentation_mode"] = triton.knobs.compilation.instrumentation_mode
    if hasattr(triton.knobs.compilation, "fpsan_homomorphic_casts"):  # Triton 3.9+
        kwargs["fpsan_homomorphic_casts"] = triton.knobs.compilation.fpsan_homomorphic_casts
    _, specialization, options = binder(*args, **kwargs)
    return str(compute_cache_key(key_cache, specialization, options))


def _variants() -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Vary one argument at a time over several values per class (two or more per class)."""
    x = torch.zeros(256)
    y = torch.empty(256)
    base: dict[str, Any] = dict(x_ptr=x, y_ptr=y, n=64, m=64, k=64, scale=1.0, flag=True)
    values: dict[str, list[Any]] = {
        "x_ptr": [x, torch.zeros(128), x[1:], x[3:], x[4:], torch.zeros(64, dtype=torch.bfloat16)],
        "y_ptr": [y, y[1:], y[4:]],
        "n": [1, 0, 16, 32, 5, 17, -3, 2**31 + 16, 2**32, 2**31 + 1, 2**33 + 3, -(2**31) - 1],
        "m": [1, 16, 17, 2**31 + 16, 2**31 + 3],
        "k": [1, 16, 17, 3, 2**31 + 16, 2**31 + 1],
        "scale": [1.0, 0.5],
        "flag": [True, False],
    }
    out = []
    for arg, vals in values.items():
        for v in vals:
            out.append(((), {**base, arg: v, "BLOCK": 64}))
    out.append(((), {**base, "BLOCK": 128}))
    return out


def test_classes_match_real_compiles(harness: MonitorHarness) -> None:
    """Same labels ⇔ same Triton key, and every distinct label set compiles exactly once."""
    fresh_kernel_cache(cov_kernel)
    label_to_key: dict[tuple[tuple[str, str], ...], str] = {}
    key_to_label: dict[str, tuple[tuple[str, str], ...]] = {}
    for args, kwargs in _variants():
        labels = tuple(sorted(classify_call(cov_kernel, *args, **kwargs).items()))
        cov_kernel.warmup(*args, grid=(1,), **kwargs)
        key = _key(cov_kernel, *args, **kwargs)
        assert key in cov_kernel.device_caches[0][0]  # the key Triton's run() compiled under
        assert label_to_key.setdefault(labels, key) == key, f"analysis says equal, Triton differs: {labels}"
        assert key_to_label.setdefault(key, labels) == labels, f"analysis says distinct, Triton same: {key}"
    compiles = harness.compiles(kernel="cov_kernel")
    assert len(compiles) == len(label_to_key)
    assert {c.key for c in compiles} == set(label_to_key.values())


def test_class_labels() -> None:
    ptr, i = ArgInfo("p", "pointer"), ArgInfo("n", "int")
    x = torch.zeros(64)
    assert classify(ptr, x) == "*fp32:aligned16" and classify(ptr, x[1:]) == "*fp32:unaligned"
    assert [classify(i, v) for v in (1, 0, 17, 2**31, 2**31 + 1, 2**63)] == [
        "==1",
        "i32:%16",
        "i32:other",
        "i64:%16",
        "i64:other",
        "u64:%16",
    ]
    assert classify(ArgInfo("n", "int", specialize=False, align=False), 1) == "i32:any"
    assert classify(ArgInfo("n", "int", align=False), 1) == "==1"
    assert classify(ArgInfo("B", "constexpr"), 64) == "=64"
    assert enumerate_classes(i) == ["==1", "i32:%16", "i32:other", "i64:%16", "i64:other"]
    assert enumerate_classes(ArgInfo("m", "int", specialize=False, align=False)) == ["i32:any", "i64:any"]


def test_coverage_from_journal(harness: MonitorHarness) -> None:
    """Field case 1: warmup covers num_tokens %16 only; serving meets ==1 and other."""
    fresh_kernel_cache(kf.slot_mapping)
    with harness.monitor.warmup():
        for call in kf.CASES["slot_mapping"]["warmup"]:
            call()
    for call in kf.CASES["slot_mapping"]["serving"]:
        call()
    harness.monitor.flush()
    with Journal(harness.journal_dir, readonly=True) as j:
        report = coverage_for_journal(j)
        exact = coverage_for_journal(j, kernels={"slot_mapping": kf.slot_mapping})
        ratios = journal_coverage_ratios(j)
    k = report.by_kernel()["slot_mapping"]
    args = {a.name: a for a in k.arguments}
    assert args["num_tokens"].covered == ["i32:%16"]
    assert args["num_tokens"].serving_only == ["==1", "i32:other"]
    assert args["block_table_stride"].serving_only == ["==1"]
    assert args["pos_ptr"].classes == ["*i64:aligned16", "*i64:unaligned"]
    assert args["BLOCK"].classes == ["=128"] and args["BLOCK"].covered == ["=128"]
    assert (k.warmup_keys, k.serving_keys) == (1, 3)
    assert (k.covered, k.total, k.ratio) == (1, 4, 0.25)  # keys: 1 warmed of 4 needed (3 first in serving)
    assert (k.classes_covered, k.classes_total) == (7, 22) and k.class_ratio == pytest.approx(7 / 22)
    assert exact.by_kernel()["slot_mapping"].flags_known
    assert ratios == {"slot_mapping": 0.25}
    assert len(harness.compiles(Phase.SERVING)) == 3


def test_dns_inferred_from_keys(harness: MonitorHarness) -> None:
    """``do_not_specialize`` shows as ``(type, None)`` in keys: one class per int type."""
    fresh_kernel_cache(kf.slot_mapping_dns)
    with harness.monitor.warmup():
        kf.CASES["slot_mapping_dns"]["warmup"][0]()
    harness.monitor.flush()
    with Journal(harness.journal_dir, readonly=True) as j:
        k = coverage_for_journal(j).by_kernel()["slot_mapping_dns"]
    nt = {a.name: a for a in k.arguments}["num_tokens"]
    assert (nt.specialize, nt.classes, nt.covered) == (False, ["i32:any", "i64:any"], ["i32:any"])


def test_ratio_samples_fold_other() -> None:
    from jitwatch.views.coverage import CoverageReport, KernelCoverage

    def kc(name: str, c: int, t: int) -> KernelCoverage:
        return KernelCoverage(
            kernel=name, covered=c, total=t, ratio=c / t, warmup_keys=0, serving_keys=0, flags_known=False
        )

    report = CoverageReport(kernels=[kc("a", 1, 2), kc("b", 1, 4), kc("c", 3, 4)])
    assert coverage_ratio_samples(report, {"b": "_other", "c": "_other"}) == {"a": 0.5, "_other": 0.5}


def test_metric_in_contract() -> None:
    spec = BY_NAME["jitwatch_specialization_coverage_ratio"]
    assert spec.type == "gauge" and spec.labels == ("backend", "kernel")


def test_cli_coverage(harness: MonitorHarness) -> None:
    from jitwatch.cli import app

    fresh_kernel_cache(kf.zero_kv_blocks)
    harness.monitor.activate()  # never warmed: every compile is a serving compile
    for call in kf.CASES["kv_zeroing"]["serving"]:
        call()
    harness.monitor.flush()
    res = CliRunner().invoke(app, ["coverage", "--journal-dir", str(harness.journal_dir), "--json"])
    assert res.exit_code == 0, res.output
    k = {x["kernel"]: x for x in json.loads(res.output)["kernels"]}["zero_kv_blocks"]
    assert k["covered"] == 0 and k["serving_keys"] == 3
    res = CliRunner().invoke(app, ["coverage", "--journal-dir", str(harness.journal_dir), "-v"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "zero_kv_blocks" in res.output
    # -v's argument table: the classes warmup did not compile are "not warmed"; the column was
    # headed "never compiled" while listing the classes serving compiled (also in "met only in serving")
    (header,) = [line for line in res.output.splitlines() if "┃ argument" in line]
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == [
        "argument",
        "kind",
        "warmed",
        "not warmed",
        "met only in serving",
    ], header


def test_demo_slot_mapping_warmed_for_every_count_reads_full_coverage(harness: MonitorHarness) -> None:
    """`jitwatch demo`'s slot-mapping kernel, warmed as the demo warms it (``num_tokens`` in
    ``do_not_specialize``) and served the demo's request stream without one serving compile, read
    10/27 (37%) in `jitwatch coverage` and on /metrics: the headline counted every argument class
    Triton could tell apart (i64 ints, unaligned pointers, ints ==1 or not %16) that this engine's
    buffers never produce. The headline is the share of the keys needed that warmup compiled; the
    per-argument classes stay as a labelled detail."""
    from jitwatch.cli import app
    from jitwatch.demo.worker import REQUEST_STREAM, DemoEngine
    from jitwatch.warmup.slot_mapping import warmup_slot_mapping

    engine = DemoEngine(torch.device("cpu"))
    fresh_kernel_cache(engine.kernel)
    with harness.monitor.warmup():
        warmup_slot_mapping(
            engine.block_table,
            engine.block_size,
            engine.max_num_tokens,
            slot_mappings=engine.slot_mapping,
            query_start_loc=engine.query_start_loc,
            positions=engine.positions,
            kernel=engine.kernel,
        )
    for counts in REQUEST_STREAM:
        with harness.monitor.request():
            engine.step(counts, zero_freed=False)
    harness.monitor.flush()
    assert harness.compiles(Phase.SERVING) == []
    with Journal(harness.journal_dir, readonly=True) as j:
        k = coverage_for_journal(j).by_kernel()["slot_mapping_kernel"]
        ratios = journal_coverage_ratios(j)
    assert (k.covered, k.total, k.ratio, k.missing) == (1, 1, 1.0, [])
    assert ratios == {"slot_mapping_kernel": 1.0}
    # the per-argument detail is still there, and says what it counts
    assert k.classes_total == sum(len(a.classes) for a in k.arguments) > k.classes_covered > 0
    assert k.class_ratio == pytest.approx(k.classes_covered / k.classes_total)
    assert all(a.serving_only == [] for a in k.arguments)
    res = CliRunner().invoke(app, ["coverage", "--journal-dir", str(harness.journal_dir)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    row = next(line for line in res.output.splitlines() if "slot_mapping_kernel" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:4] == ["triton", "slot_mapping_kernel", "1/1", "100%"], row
    assert f"{k.classes_covered}/{k.classes_total}" in cells
    assert "not a failure" in res.output  # the caption says what the class detail is
