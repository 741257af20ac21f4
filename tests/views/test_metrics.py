"""jitwatch.views.metrics: the journal collector against the contract (jitwatch.views.contract.METRICS)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from jitwatch.config import Settings
from jitwatch.core.events import EventKind, Phase
from jitwatch.store.journal import COMPILE_DURATION_BUCKETS, JOURNAL_FILE, OTHER_KERNEL, Journal
from jitwatch.testing import MonitorHarness, make_event
from jitwatch.views.contract import BY_NAME, METRICS, exposed_series_names
from jitwatch.views.contract_doc import DOC_PATH
from jitwatch.views.contract_doc import main as contract_doc_main
from jitwatch.views.contract_doc import render as render_doc
from jitwatch.views.coverage import journal_coverage_ratios
from jitwatch.views.metrics import build_info_labels, render
from tests.tools import tool_missing

T0 = 1_700_000_000.0
ev = make_event


def key(block: int) -> str:
    """A specialization key as Triton 3.9 prints it (what the monitor journals)."""
    return f"[('*fp32', 'D'), ('i32', 'D'), ('constexpr', {block})]{{'debug': False}}"


SIG = {"signature": {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}}


def full_journal(directory: Path) -> None:
    """One rank's whole life: every event kind, so every contract series has a sample."""
    with Journal(directory) as j:
        j.write(
            [
                ev(
                    EventKind.WORKER_START,
                    T0,
                    attrs={
                        "mode": "warn",
                        "tp_rank": 0,
                        "pp_rank": 0,
                        "collective_deadline_s": 600.0,
                        "backends": {
                            "triton": {"state": "active", "version": "3.9.0", "hooks": []},
                            "torch_compile": {"state": "waiting", "version": "2.13.0", "hooks": []},
                        },
                    },
                ),
                ev(
                    EventKind.COMPILE,
                    T0 + 0.5,
                    phase=Phase.STARTUP,
                    kernel="init_k",
                    key=key(8),
                    attrs=SIG,
                    duration_s=0.002,
                ),
                ev(EventKind.WARMUP_START, T0 + 1, phase=Phase.WARMUP),
                ev(
                    EventKind.COMPILE,
                    T0 + 2,
                    phase=Phase.WARMUP,
                    kernel="add",
                    key=key(16),
                    attrs={**SIG, "cache": "remote"},  # a worker on Triton's RemoteCacheManager: a miss
                    cache_hit=False,
                    duration_s=0.3,
                ),
                ev(
                    EventKind.COMPILE,
                    T0 + 3,
                    phase=Phase.WARMUP,
                    kernel="add",
                    key=key(32),
                    attrs=SIG,
                    duration_s=0.0004,
                ),
                ev(
                    EventKind.COMPILE,
                    T0 + 3.5,
                    phase=Phase.WARMUP,
                    kernel="mul",
                    key=key(64),
                    attrs=SIG,
                    duration_s=0.01,
                    cache_hit=True,
                ),
                ev(EventKind.AUTOTUNE, T0 + 4, phase=Phase.WARMUP, kernel="mul", key="a1", duration_s=1.5),
                ev(
                    EventKind.WARMUP_COMPLETE,
                    T0 + 5,
                    phase=Phase.SERVING,
                    start_ts=T0 + 1,
                    duration_s=4.0,
                    attrs={"kernels_compiled": 3, "compile_seconds": 0.3104},
                ),
                ev(EventKind.FIRST_REQUEST, T0 + 6, phase=Phase.SERVING, duration_s=0.25),
                ev(EventKind.DROPPED, T0 + 6.5, phase=Phase.SERVING, attrs={"count": 3, "exporter": "otlp"}),
                ev(
                    EventKind.COMPILE,
                    T0 + 7,
                    phase=Phase.SERVING,
                    kernel="add",
                    key=key(128),
                    attrs=SIG,
                    duration_s=90.0,
                ),
                ev(
                    EventKind.GRAPH_CAPTURE,
                    T0 + 7.5,
                    phase=Phase.SERVING,
                    backend="torch_compile",
                    kernel="forward",
                    key="0/1",
                    duration_s=0.002,
                ),
                ev(
                    EventKind.COMPILE,
                    T0 + 7.6,
                    phase=Phase.SERVING,
                    backend="torch_compile",
                    kernel="forward",
                    key="0/0: tensor 'x' size mismatch at index 0. expected 8, actual 1",
                    duration_s=0.25,
                    attrs={
                        "compile_id": "0/1",
                        "reason": "0/0: tensor 'x' size mismatch at index 0. expected 8, actual 1",
                        "reason_class": "size mismatch",
                    },
                ),
                ev(EventKind.HOOK_ERROR, T0 + 8, phase=Phase.SERVING, attrs={"hook": "x"}),
                ev(EventKind.DROPPED, T0 + 9, phase=Phase.SERVING, attrs={"count": 3}),
                ev(
                    EventKind.REQUEST_STALL,
                    T0 + 9.5,
                    phase=Phase.SERVING,
                    start_ts=T0 + 7,
                    duration_s=0.4,
                    attrs={"compile_seconds_by_backend": {"triton": 0.4}, "latency_s": 2.5},
                ),
                ev(EventKind.REQUESTS, T0 + 10, phase=Phase.SERVING, attrs={"count": 4}),
            ]
        )


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in parse_text(text)}


def sample_names(text: str) -> set[str]:
    return {s.name for f in parse_text(text) for s in f.samples}


# ---------------------------------------------------------------------------------------------- docs
def test_committed_metrics_doc_is_generated_from_contract() -> None:
    assert DOC_PATH.read_text(encoding="utf-8") == render_doc(), "run: python -m jitwatch.views.contract_doc --write"
    assert contract_doc_main(["--check"]) == 0


def test_contract_doc_check_detects_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "metrics.md"
    stale.write_text(render_doc().replace("jitwatch_journal_up", "jitwatch_journal_upp"), encoding="utf-8")
    assert contract_doc_main(["--check", "--path", str(stale)]) == 1
    assert contract_doc_main(["--write", "--path", str(stale)]) == 0
    assert contract_doc_main(["--check", "--path", str(stale)]) == 0


def test_doc_lists_every_metric() -> None:
    text = render_doc()
    for m in METRICS:
        assert f"`{m.name}" in text


# ------------------------------------------------------------------------------------- contract
def test_recompiles_by_reason_class(tmp_path: Path) -> None:
    full_journal(tmp_path)
    text = render(tmp_path)[0].decode()
    want = (
        'jitwatch_recompiles_total{backend="torch_compile",kernel="forward",phase="serving",'
        'rank="0",reason_class="size mismatch"} 1.0'
    )
    assert want in text
    assert (
        'jitwatch_recompile_seconds_total{backend="torch_compile",kernel="forward",phase="serving",'
        'rank="0",reason_class="size mismatch"} 0.25'
    ) in text


def test_scrape_exposes_exactly_the_contract(tmp_path: Path) -> None:
    full_journal(tmp_path)
    body, content_type = render(tmp_path)
    assert content_type.startswith("text/plain")
    text = body.decode()
    assert sample_names(text) == exposed_series_names()
    fams = families(text)
    for m in METRICS:
        # text format 0.0.4 has no info type; prometheus_client exposes info as a gauge.
        fam = fams[m.name.removesuffix("_total")]
        assert fam.type == ("gauge" if m.type == "info" else m.type), m.name
        for s in fam.samples:
            labels = set(s.labels) - ({"le"} if s.name.endswith("_bucket") else set())
            assert labels == set(m.labels), (s.name, s.labels)
            assert s.name.startswith("jitwatch_")


def test_openmetrics_when_asked(tmp_path: Path) -> None:
    full_journal(tmp_path)
    body, content_type = render(tmp_path, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    text = body.decode()
    assert text.endswith("# EOF\n")
    fams = {f.name: f for f in parse_openmetrics(text)}  # strict parser: raises on malformed input
    names = {s.name for f in fams.values() for s in f.samples}
    assert names == exposed_series_names()
    for m in METRICS:
        base = m.name.removesuffix("_total").removesuffix("_info") if m.type in ("counter", "info") else m.name
        assert fams[base].type == m.type, m.name


@pytest.mark.parametrize(
    "accept", ["application/openmetrics-text; version=abc", "text/plain; version=x.y", "*/*", "", "garbage;;;"]
)
def test_unusable_accept_falls_back_to_text(tmp_path: Path, accept: str) -> None:
    full_journal(tmp_path)
    body, content_type = render(tmp_path, accept)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert sample_names(body.decode()) == exposed_series_names()


def test_values_follow_the_journal(tmp_path: Path) -> None:
    full_journal(tmp_path)
    text = render(tmp_path)[0].decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parse_text(text) for s in f.samples}

    def v(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    tri = {"backend": "triton"}
    # compiles by phase (kernels and ranks summed), compile time by kernel (phases and ranks summed)
    assert v("jitwatch_compiles_total", **tri, phase="startup") == 1
    assert v("jitwatch_compiles_total", **tri, phase="warmup") == 3
    assert v("jitwatch_compiles_total", **tri, phase="serving") == 1
    assert v("jitwatch_compiles_total", backend="torch_compile", phase="serving") == 1
    assert v("jitwatch_serving_compiles_total", **tri, kernel="add", rank="0") == 1
    assert ("jitwatch_serving_compiles_total", (("backend", "triton"), ("kernel", "mul"), ("rank", "0"))) not in samples
    assert v("jitwatch_compile_seconds_total", **tri, kernel="add") == pytest.approx(90.3004)
    assert v("jitwatch_compile_seconds_total", **tri, kernel="mul") == pytest.approx(0.01)
    assert v("jitwatch_compile_disk_cache_hits_total", **tri, phase="warmup", rank="0") == 1
    assert v("jitwatch_last_compile_timestamp_seconds", **tri, phase="warmup") == T0 + 3.5
    assert v("jitwatch_last_compile_timestamp_seconds", **tri, phase="serving") == T0 + 7
    # no per-kernel series by phase outside the serving family (cardinality by design)
    for name in (
        "jitwatch_compiles_total",
        "jitwatch_compile_seconds_total",
        "jitwatch_last_compile_timestamp_seconds",
    ):
        keys = [dict(lab) for (n, lab) in samples if n == name]
        assert keys and all("rank" not in k and not ("kernel" in k and "phase" in k) for k in keys), name
    assert v("jitwatch_autotune_runs_total", **tri, kernel="mul", phase="warmup") == 1
    assert v("jitwatch_autotune_seconds_total", **tri, kernel="mul", phase="warmup") == 1.5
    tc = {"backend": "torch_compile", "kernel": "forward", "phase": "serving"}
    assert v("jitwatch_graph_captures_total", **tc) == 1
    assert v("jitwatch_graph_capture_seconds_total", **tc) == 0.002
    assert v("jitwatch_backend_info", rank="0", backend="triton", version="3.9.0", state="active") == 1
    assert v("jitwatch_backend_info", rank="0", backend="torch_compile", version="2.13.0", state="waiting") == 1
    assert v("jitwatch_warmup_complete", rank="0") == 1
    assert v("jitwatch_warmup_start_timestamp_seconds", rank="0") == T0 + 1
    assert v("jitwatch_warmup_complete_timestamp_seconds", rank="0") == T0 + 5
    assert v("jitwatch_warmup_duration_seconds", rank="0") == 4.0
    assert v("jitwatch_warmup_compiles", rank="0") == 3
    assert v("jitwatch_first_request_latency_seconds", rank="0") == 0.25
    assert v("jitwatch_worker_start_timestamp_seconds", rank="0") == T0
    info = {"rank": "0", "tp_rank": "0", "pp_rank": "0", "dp_rank": "", "mode": "warn", "state": "serving"}
    assert v("jitwatch_worker_info", **info) == 1
    assert v("jitwatch_hook_errors_total", backend="triton", rank="0") == 1
    assert v("jitwatch_hook_errors_total", backend="torch_compile", rank="0") == 0
    assert v("jitwatch_dropped_events_total", rank="0") == 3
    assert v("jitwatch_export_dropped_events_total", exporter="otlp", rank="0") == 3  # not in dropped_events
    assert v("jitwatch_remote_cache_lookups_total", backend="triton", rank="0", result="miss") == 1
    assert v("jitwatch_journal_events") == 17
    assert v("jitwatch_request_compile_seconds_count", rank="0") == 5  # 1 stalled + 4 without compiles
    assert v("jitwatch_request_compile_seconds_bucket", rank="0", le="0.001") == 4
    assert v("jitwatch_request_compile_seconds_bucket", rank="0", le="0.5") == 5
    assert v("jitwatch_requests_delayed_total", backend="triton", rank="0") == 1
    assert v("jitwatch_inflight_compiles", rank="0") == 0
    assert v("jitwatch_inflight_compile_age_seconds", rank="0") == 0
    assert v("jitwatch_collective_deadline_seconds", rank="0") == 600
    assert v("jitwatch_journal_retired_events_total") == 0
    assert v("jitwatch_kernel_labels", state="named") == 4
    assert v("jitwatch_kernel_labels", state="folded") == 0
    assert v("jitwatch_journal_up") == 1
    with Journal(tmp_path, readonly=True) as j:
        ratios = journal_coverage_ratios(j)
    assert set(ratios) == {"init_k", "add", "mul"}
    for kernel, ratio in ratios.items():
        assert v("jitwatch_specialization_coverage_ratio", backend="triton", kernel=kernel) == ratio
    assert 0 < ratios["add"] < 1  # BLOCK=128 only met in serving
    assert v("jitwatch_build_info", **build_info_labels()) == 1


def test_histogram_is_cumulative_with_sum_and_count(tmp_path: Path) -> None:
    full_journal(tmp_path)
    text = render(tmp_path)[0].decode()
    fam = families(text)["jitwatch_compile_duration_seconds"]
    warm = [s for s in fam.samples if s.labels.get("phase") == "warmup"]
    buckets = [(s.labels["le"], s.value) for s in warm if s.name.endswith("_bucket")]
    assert len(buckets) == len(COMPILE_DURATION_BUCKETS) + 1
    assert buckets[-1] == ("+Inf", 3)
    values = [b[1] for b in buckets]
    assert values == sorted(values)  # cumulative
    as_dict = dict(buckets)
    assert as_dict["0.001"] == 1  # 0.4 ms
    assert as_dict["0.01"] == 2  # + 10 ms
    assert as_dict["0.25"] == 2
    assert as_dict["0.5"] == 3  # + 300 ms
    count = next(s.value for s in warm if s.name.endswith("_count"))
    total = next(s.value for s in warm if s.name.endswith("_sum"))
    assert count == 3
    assert total == pytest.approx(0.3 + 0.0004 + 0.01)
    serving = {s.labels["le"]: s.value for s in fam.samples if s.labels.get("phase") == "serving" and "le" in s.labels}
    assert serving["60.0"] == 0 and serving["+Inf"] == 1  # 90 s lands only in +Inf


def test_kernels_past_the_cap_fold_into_other_and_sum(tmp_path: Path) -> None:
    with Journal(tmp_path, max_kernels=1) as j:
        j.write([ev(EventKind.WORKER_START, T0, attrs={"mode": "warn", "heartbeat_s": 10})])
        j.write(
            [
                ev(EventKind.COMPILE, T0 + i, phase=Phase.WARMUP, kernel=name, key=f"k{i}", duration_s=0.1)
                for i, name in enumerate(["first", "second", "third", "second"])
            ]
        )
    text = render(tmp_path)[0].decode()
    seconds = {s.labels["kernel"]: s.value for s in families(text)["jitwatch_compile_seconds"].samples}
    assert seconds == {"first": pytest.approx(0.1), OTHER_KERNEL: pytest.approx(0.3)}
    compiles = [s.value for s in families(text)["jitwatch_compiles"].samples if s.name == "jitwatch_compiles_total"]
    assert compiles == [4]
    last = {s.labels["phase"]: s.value for s in families(text)["jitwatch_last_compile_timestamp_seconds"].samples}
    assert last == {"warmup": T0 + 3}
    labels = {s.labels["state"]: s.value for s in families(text)["jitwatch_kernel_labels"].samples}
    assert labels == {"named": 1, "folded": 2}


def test_retired_events_keep_counters(tmp_path: Path) -> None:
    with Journal(tmp_path, retention_events=2) as j:
        j.write([ev(EventKind.WORKER_START, T0, attrs={"mode": "warn", "heartbeat_s": 10})])
        j.write([ev(EventKind.COMPILE, T0 + i, phase=Phase.WARMUP, kernel="k", duration_s=0.1) for i in range(5)])
        assert j.prune(now=T0 + 10) == 4
    samples = {s.name: s.value for f in parse_text(render(tmp_path)[0].decode()) for s in f.samples}
    assert samples["jitwatch_journal_retired_events_total"] == 4
    assert samples["jitwatch_journal_events"] == 2
    assert samples["jitwatch_compiles_total"] == 5


def test_empty_journal_has_only_unlabelled_series(tmp_path: Path) -> None:
    Journal(tmp_path).close()
    names = sample_names(render(tmp_path)[0].decode())
    assert names == {
        "jitwatch_journal_up",
        "jitwatch_journal_events",
        "jitwatch_journal_retired_events_total",
        "jitwatch_kernel_labels",
        "jitwatch_journal_skipped_rows_total",
        "jitwatch_build_info",
    }


def test_missing_journal_is_only_journal_up_zero(tmp_path: Path) -> None:
    text = render(tmp_path / "nowhere")[0].decode()
    samples = [(s.name, s.value) for f in parse_text(text) for s in f.samples]
    assert samples == [("jitwatch_journal_up", 0.0)]
    assert not (tmp_path / "nowhere").exists()  # the collector never creates the journal


def test_corrupt_journal_is_only_journal_up_zero(tmp_path: Path) -> None:
    (tmp_path / JOURNAL_FILE).write_bytes(b"this is not a sqlite database" * 100)
    text = render(tmp_path)[0].decode()
    assert [(s.name, s.value) for f in parse_text(text) for s in f.samples] == [("jitwatch_journal_up", 0.0)]


def test_build_info_reads_installed_versions() -> None:
    labels = build_info_labels()
    assert set(labels) == set(BY_NAME["jitwatch_build_info"].labels)
    assert labels["version"]  # jitwatch is installed (editable) in the venv
    assert labels["python_version"].count(".") == 2


# ------------------------------------------------------------------- real compiles, real scrape
def test_real_scrape_after_real_compiles(harness: MonitorHarness) -> None:
    """Monitor + compile-only Triton compiles → journal → sidecar /metrics over ASGI."""
    import torch
    import triton
    import triton.language as tl

    from jitwatch.sidecar import create_app

    @triton.jit
    def scale_metrics_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

    mon = harness.monitor
    x = torch.zeros(64)
    with mon.warmup():
        scale_metrics_kernel.warmup(x, 64, BLOCK=64, grid=(1,))
    with mon.request():
        scale_metrics_kernel.warmup(x, 64, BLOCK=32, grid=(1,))  # a post-warmup compile
    # What Triton's knobs.autotuning.listener passes (benchmarks cannot run without a GPU).
    harness.triton.on_autotune(
        {"fn": scale_metrics_kernel, "key": "(64,)", "cache_hit": False, "configs_timings": {"c": 1.0}, "duration": 0.5}
    )
    assert mon.flush()

    app = create_app(harness.journal_dir, settings=Settings(journal_dir=Path("/nonexistent")))

    async def scrape() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar") as c:
            return await c.get("/metrics")

    resp = asyncio.run(scrape())
    assert resp.status_code == 200
    text = resp.text
    names = sample_names(text)
    assert names <= exposed_series_names(), names - exposed_series_names()
    assert all(n.startswith("jitwatch_") for n in names)
    type_lines = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert type_lines == {m.name for m in METRICS}
    # hook_errors/dropped exist with 0 (they are counters per known rank); no graph capture and no
    # recompile with a reason (Triton kernels have none) happened
    missing = exposed_series_names() - names
    assert missing == {
        "jitwatch_export_dropped_events_total",  # no exporter configured
        "jitwatch_remote_cache_lookups_total",  # local Triton cache
        "jitwatch_graph_captures_total",
        "jitwatch_graph_capture_seconds_total",
        "jitwatch_recompiles_total",
        "jitwatch_recompile_seconds_total",
    }, missing
    compiles = {
        (s.labels["backend"], s.labels["phase"]): s.value
        for s in families(text)["jitwatch_compiles"].samples
        if s.name == "jitwatch_compiles_total"
    }
    assert compiles == {("triton", "warmup"): 1, ("triton", "serving"): 1}
    serving = {  # nested: qualified name
        (s.labels["kernel"].rsplit(".", 1)[-1], s.labels["rank"]): s.value
        for s in families(text)["jitwatch_serving_compiles"].samples
        if s.name == "jitwatch_serving_compiles_total"
    }
    assert serving == {("scale_metrics_kernel", "0"): 1}
    (seconds,) = families(text)["jitwatch_compile_seconds"].samples[:1]
    assert seconds.labels["kernel"].endswith("scale_metrics_kernel") and seconds.value > 0


@pytest.mark.prometheus
def test_promtool_check_metrics(tmp_path: Path) -> None:
    local = Path(__file__).resolve().parents[2] / ".tools" / "prometheus" / "usr" / "bin" / "promtool"
    promtool = shutil.which("promtool") or (str(local) if local.exists() else None)
    if promtool is None:
        tool_missing("promtool not installed (.ci/run installs it)")
    full_journal(tmp_path)
    text = render(tmp_path)[0]
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_inflight_compile_of_a_dead_worker_stops_ageing(tmp_path: Path) -> None:
    """A worker killed mid-compile leaves its in-flight list in its row. While its writer is alive
    the row is refreshed every second and the compile ages; once the worker has been silent past
    the stale window (60 s) the list is not current: no in-flight compile is exported for that
    rank, so the critical collective-deadline alert does not fire for a process that is gone."""
    import time

    from jitwatch.views.status import build_status

    now = time.time()
    with Journal(tmp_path) as j:
        j.write(
            [
                make_event(
                    EventKind.WORKER_START, now - 30, host="h", pid=7, rank=0, attrs={"mode": "warn", "heartbeat_s": 10}
                )
            ]
        )
        j.write(
            [
                make_event(
                    EventKind.WORKER_START,
                    now - 300,
                    host="h",
                    pid=8,
                    rank=1,
                    attrs={"mode": "warn", "heartbeat_s": 10},
                )
            ]
        )
        item = {"backend": "triton", "kernel": "k", "start_ts": now - 20, "phase": "serving"}
        assert j.set_inflight("h", 7, 0, [item], now - 1)  # alive: seen a second ago
        assert j.set_inflight("h", 8, 1, [{**item, "start_ts": now - 290}], now - 200)  # silent 200 s

    def v(name: str, rank: str) -> float:
        (fam,) = [f for f in parse_text(render(tmp_path)[0].decode()) if f.name == name]
        (s,) = [s for s in fam.samples if s.labels.get("rank") == rank]
        return s.value

    assert v("jitwatch_inflight_compiles", "0") == 1 and v("jitwatch_inflight_compile_age_seconds", "0") >= 20
    assert v("jitwatch_inflight_compiles", "1") == 0 and v("jitwatch_inflight_compile_age_seconds", "1") == 0
    with Journal(tmp_path, readonly=True) as j:
        st = build_status(j)
    by_rank = {r.rank: r for r in st.ranks}
    assert len(by_rank[0].inflight) == 1 and by_rank[1].inflight == [] and by_rank[1].stale


@pytest.mark.parametrize("stale_after", [5.0, 0.0])
def test_inflight_uses_the_sidecars_stale_window_like_jit(tmp_path: Path, stale_after: float) -> None:
    """``--stale-after`` (here 5 s, and 0 = off) decides for ``/metrics`` what it decides for
    ``/jit``: a worker silent for 20 s has no current in-flight list under a 5 s window (under the
    default 60 s it would), and under 0 every list is current. Live and uncached renders agree."""
    import time

    from jitwatch.views.live import live
    from jitwatch.views.metrics import render_uncached
    from jitwatch.views.status import build_status

    now = time.time()
    with Journal(tmp_path) as j:
        j.write([make_event(EventKind.WORKER_START, now - 60, host="h", pid=7, rank=0, attrs={"heartbeat_s": 1})])
        item = {"backend": "triton", "kernel": "k", "start_ts": now - 40, "phase": "serving"}
        assert j.set_inflight("h", 7, 0, [item], now - 20)  # silent for 20 s

    def inflight(body: bytes) -> float:
        (fam,) = [f for f in parse_text(body.decode()) if f.name == "jitwatch_inflight_compiles"]
        (s,) = [s for s in fam.samples if s.labels.get("rank") == "0"]
        return s.value

    expected = 0.0 if stale_after == 5.0 else 1.0
    assert inflight(render(tmp_path)[0]) == 1.0  # the default window (60 s): still current
    assert inflight(render(tmp_path, None, stale_after)[0]) == expected
    assert inflight(live(tmp_path).render(None, stale_after)[0]) == expected
    assert inflight(render_uncached(tmp_path, None, stale_after)[0]) == expected
    with Journal(tmp_path, readonly=True) as j:
        (rank,) = build_status(j, stale_after=stale_after).ranks
    assert len(rank.inflight) == expected
