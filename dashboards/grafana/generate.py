"""Generate the jitwatch Grafana dashboard (dashboards/grafana/jitwatch.json) from code.

Built with grafana-foundation-sdk, pinned to its Grafana 11.6 line (``1769699379!11.6.0``, see
``pyproject.toml``'s ``dev`` extra; its PyPI versions are ``EPOCH!GRAFANA_VERSION`` and an unpinned
install picks an old Grafana 10 line). Target: Grafana 11.6 (the compose stack's image).

Usage::

    python dashboards/grafana/generate.py           # rewrite jitwatch.json
    python dashboards/grafana/generate.py --check   # exit 1 if jitwatch.json is stale

Both modes fail (exit 2) when a panel queries a metric or label that jitwatch does not export:
every name is checked against :data:`jitwatch.views.contract.METRICS`, the metrics contract (the same
check runs in tests/observability/test_dashboards.py, also for the Prometheus rules).

Conventions: stable ``uid``, ``id: null``; template variables ``datasource``, ``instance``,
``rank``, ``backend``; every panel and target uses ``${datasource}``; rates use
``$__rate_interval``; every target has a ``refId``. Every query of a family with a ``backend``
label filters on ``backend=~"$backend"``, and every aggregation of a per-kernel family keeps
``backend`` (tests/observability/test_dashboards.py checks both).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import (
    bargauge,
    dashboard,
    heatmap,
    stat,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's jitwatch, run as a script
from jitwatch.backends import BUILTIN  # the registry only; imports no JIT library

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "jitwatch.json"

DASHBOARD_UID = "jitwatch-triton-jit"
"""Kept from the Triton-only dashboard, so existing links and bookmarks still resolve."""
DASHBOARD_TITLE = "jitwatch: JIT compilation"
SIDECAR_URL = "http://localhost:9400"
"""Where docker-compose.yml publishes the sidecar (127.0.0.1:9400); used by panel links only."""

BACKEND_VARIABLE_DESCRIPTION = (
    "JIT backends that report jitwatch_backend_info (a backend appears once a worker installed it). "
    "Built in: " + ", ".join(sorted(BUILTIN)) + "; pages: docs/backends/."
)
"""The backend variable's description: lists every built-in backend (jitwatch.backends.BUILTIN)."""

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'instance=~"$instance", rank=~"$rank"'
"""Label matchers every per-rank query carries (template variables)."""
BSEL = SEL + ', backend=~"$backend"'
"""Label matchers of every query over a family with a ``backend`` label."""
KSEL = 'instance=~"$instance", backend=~"$backend"'
"""Label matchers of the per-kernel families, which carry no ``rank`` (ranks summed, see
``jitwatch.views.contract``): the rank variable does not filter those panels."""
ALL_BACKENDS = ".*"
"""The backend variable's *All* value: also matches ``backend=""`` (the vLLM plugin's hook errors)
and backends of earlier workers that the latest ones no longer report in jitwatch_backend_info."""


# ---------------------------------------------------------------------------- PromQL references
_PROMQL_WORDS = {
    # aggregation operators, keywords and modifiers
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "offset", "bool", "atan2", "inf", "nan",
}  # fmt: skip
_SELECTOR_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENT = re.compile(r"(?<![\w.$:])([a-zA-Z_:][a-zA-Z0-9_:]*)")


def promql_refs(expr: str) -> tuple[set[str], set[str], list[tuple[str, set[str]]]]:
    """Metric names, grouping labels and per-selector labels referenced by a PromQL expression.

    A small scanner, not a parser: enough for the expressions in this repository (string literals,
    ranges ``[5m]``/``[$__rate_interval]``, selectors ``{a="b"}``, ``by (...)``/``on (...)``,
    function calls). Returns ``(metrics, grouping_labels, [(metric, selector_labels), ...])``;
    a selector without a metric name in front is reported with metric ``""``.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\[[^\]]*\]", "", text)
    grouping: set[str] = set()
    for m in _GROUPING.finditer(text):
        grouping |= {part.strip() for part in m.group(1).split(",") if part.strip()}
    text = _GROUPING.sub(" ", text)
    selectors: list[tuple[str, set[str]]] = []
    metrics: set[str] = set()

    def _selector(m: re.Match[str]) -> str:
        name = m.group(1) or ""
        selectors.append((name, set(_SELECTOR_LABEL.findall(m.group(2)))))
        if name:
            metrics.add(name)
        return " "

    text = re.sub(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}", _selector, text)
    for m in _IDENT.finditer(text):
        word = m.group(1)
        rest = text[m.end() :].lstrip()
        if word.lower() in _PROMQL_WORDS or rest.startswith("("):
            continue  # keyword or function call
        metrics.add(word)
        selectors.append((word, set()))
    return metrics, grouping, selectors


def check_contract(exprs: list[str], recorded: set[str] | None = None) -> list[str]:
    """Problems (empty when fine) with metric names/labels in ``exprs`` versus the contract.

    Allowed: every series name of :func:`jitwatch.views.contract.exposed_series_names`, ``recorded``
    (recording-rule names), and the labels a metric declares plus ``job``/``instance`` (added by
    Prometheus) and ``le`` on histogram buckets.
    """
    from jitwatch.views.contract import METRICS, exposed_series_names

    names = exposed_series_names()
    labels_of: dict[str, set[str]] = {}
    for spec in METRICS:
        base = set(spec.labels) | {"job", "instance"}
        if spec.type == "histogram":
            labels_of[spec.name + "_bucket"] = base | {"le"}
            labels_of[spec.name + "_sum"] = base
            labels_of[spec.name + "_count"] = base
        else:
            labels_of[spec.name] = base
    all_labels = set().union(*labels_of.values())
    recorded = recorded or set()
    problems: list[str] = []
    for expr in exprs:
        metrics, grouping, selectors = promql_refs(expr)
        for name in sorted(metrics):
            if name not in names and name not in recorded:
                problems.append(f"unknown metric {name!r} in: {expr}")
        for name, labels in selectors:
            allowed = labels_of.get(name, all_labels)
            for label in sorted(labels - allowed):
                problems.append(f"label {label!r} is not a label of {name or 'any metric'} in: {expr}")
        for label in sorted(grouping - all_labels):
            problems.append(f"grouping label {label!r} is not a jitwatch label in: {expr}")
    return problems


# ---------------------------------------------------------------------------- builders
def _q(
    ref_id: str, expr: str, legend: str = "", *, instant: bool = False, fmt: PromQueryFormat | None = None
) -> prom.Dataquery:
    q = prom.Dataquery().ref_id(ref_id).expr(expr).datasource(DS)
    if legend:
        q = q.legend_format(legend)
    q = q.instant() if instant else q.range()
    if fmt is not None:
        q = q.format(fmt)
    return q


def _steps(*steps: tuple[float | None, str]) -> dashboard.ThresholdsConfig:
    return (
        dashboard.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


def _last() -> common_b.ReduceDataOptions:
    return common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False)


def _jit_link(title: str, path: str) -> dashboard.DashboardLink:
    return dashboard.DashboardLink(title).url(SIDECAR_URL + path).target_blank(True)


def warmup_state() -> stat.Panel:
    return (
        stat.Panel()
        .title("Warmup state per rank")
        .description(
            "jitwatch_warmup_complete of each rank's latest worker: complete once Monitor.warmup() "
            "exited normally (phase serving). The sidecar's /readyz is 200 when every rank is complete."
        )
        .datasource(DS)
        .with_target(_q("A", f"jitwatch_warmup_complete{{{SEL}}}", "rank {{rank}}", instant=True))
        .mappings(
            [
                dm.ValueMap(
                    options={
                        "0": dm.ValueMappingResult(text="warming up", color="orange", index=0),
                        "1": dm.ValueMappingResult(text="complete", color="green", index=1),
                    }
                )
            ]
        )
        .thresholds(_steps((None, "orange"), (1, "green")))
        .reduce_options(_last())
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
        .span(8)
        .height(6)
    )


def warmup_duration() -> bargauge.Panel:
    return (
        bargauge.Panel()
        .title("Warmup duration per rank")
        .description(
            "Duration of each rank's latest warmup, Monitor.warmup() entry to exit "
            "(jitwatch_warmup_duration_seconds). JitwatchWarmupNotCompleted fires at 15 minutes."
        )
        .datasource(DS)
        .with_target(_q("A", f"jitwatch_warmup_duration_seconds{{{SEL}}}", "rank {{rank}}", instant=True))
        .unit("s")
        .min(0)
        .thresholds(_steps((None, "green"), (600, "orange"), (900, "red")))
        .orientation(common.VizOrientation.HORIZONTAL)
        .reduce_options(_last())
        .span(8)
        .height(6)
    )


def warmup_compiles() -> bargauge.Panel:
    return (
        bargauge.Panel()
        .title("Kernels compiled during warmup per rank")
        .description("jitwatch_warmup_compiles: compiles (every backend) inside the rank's latest Monitor.warmup().")
        .datasource(DS)
        .with_target(_q("A", f"jitwatch_warmup_compiles{{{SEL}}}", "rank {{rank}}", instant=True))
        .unit("short")
        .min(0)
        .thresholds(_steps((None, "blue")))
        .orientation(common.VizOrientation.HORIZONTAL)
        .reduce_options(_last())
        .span(8)
        .height(6)
    )


def first_request_latency() -> bargauge.Panel:
    return (
        bargauge.Panel()
        .title("First-request latency per rank")
        .description(
            "Latency of the first request marked with Monitor.request() after warmup completed, per "
            "rank (jitwatch_first_request_latency_seconds). A first request that pays for a compile "
            "shows here."
        )
        .datasource(DS)
        .with_target(_q("A", f"jitwatch_first_request_latency_seconds{{{SEL}}}", "rank {{rank}}", instant=True))
        .unit("s")
        .min(0)
        .thresholds(_steps((None, "green"), (0.1, "orange"), (1, "red")))
        .orientation(common.VizOrientation.HORIZONTAL)
        .reduce_options(_last())
        .span(12)
        .height(6)
    )


def compiles_by_phase() -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title("Compiles by phase")
        .description(
            "JIT compiles per $__rate_interval, by phase and backend (Triton: in-memory cache misses; "
            "loads from a persistent cache included). startup and warmup compiles are expected; every "
            "serving compile stalled a request."
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"sum by (backend, phase) "
                f"(increase(jitwatch_compile_duration_seconds_count{{{BSEL}}}[$__rate_interval]))",
                "{{phase}} ({{backend}})",
            )
        )
        .unit("short")
        .min(0)
        .draw_style(common.GraphDrawStyle.BARS)
        .fill_opacity(60)
        .stacking(common_b.StackingConfig().mode(common.StackingMode.NORMAL))
        .override_by_regexp(
            r"serving \(.*\)", [dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "red"})]
        )
        .span(12)
        .height(8)
    )


SERVING_CHANGED = (
    f"(jitwatch_serving_compiles_total{{{BSEL}}} > jitwatch_serving_compiles_total{{{BSEL}}} offset 1m)"
    f" or (jitwatch_serving_compiles_total{{{BSEL}}} unless jitwatch_serving_compiles_total{{{BSEL}}} offset 1m)"
)
"""Serving counters that grew, or were born, in the minute before the evaluation time."""


def serving_compiles_table() -> table.Panel:
    return (
        table.Panel()
        .title("Serving-phase compiles by kernel")
        .description(
            "Kernels (graphs, functions) a backend compiled after warmup (phase serving), per backend: "
            "total count over all ranks, how many ranks compiled it, and the minute of the latest one "
            "within the dashboard's time range (from jitwatch_serving_compiles_total, per rank; exact "
            "times are in /jit). The specialization key is deliberately "
            "NOT a Prometheus label (unbounded cardinality), so it cannot be shown here: the last key "
            "of each kernel is in the sidecar's /jit (kernels[].last_key, or `jitwatch status`), every "
            "key in /jit/events?phase=serving&backend=BACKEND. "
            'Kernels past JITWATCH_MAX_KERNELS share kernel="_other".'
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"sum by (backend, kernel) (jitwatch_serving_compiles_total{{{BSEL}}})",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            )
        )
        .with_target(
            _q(
                "B",
                # When a (backend, kernel, rank) serving counter last grew or was born (the sidecar
                # creates it at its first serving compile), to the minute, latest over ranks: the
                # current minute first (subquery steps sit on whole minutes), else the latest step
                # of the dashboard's range. Per-kernel timestamps are not exported (cardinality, see
                # jitwatch.views.contract); the serving counter already is.
                f"max by (backend, kernel) (timestamp({SERVING_CHANGED}) "
                f"or max_over_time(timestamp({SERVING_CHANGED})[$__range:1m])) * 1000",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            )
        )
        .with_target(
            _q(
                "C",
                f"count by (backend, kernel) (jitwatch_serving_compiles_total{{{BSEL}}} > 0)",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            )
        )
        .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True},
                    "indexByName": {"backend": 0, "kernel": 1, "Value #A": 2, "Value #C": 3, "Value #B": 4},
                    "renameByName": {
                        "Value #A": "serving compiles",
                        "Value #C": "ranks",
                        "Value #B": "last serving compile",
                    },
                },
            )
        )
        .override_by_name("last serving compile", [dm.DynamicConfigValue(id_val="unit", value="dateTimeAsIso")])
        .override_by_name(
            "kernel",
            [
                dm.DynamicConfigValue(
                    id_val="links",
                    value=[
                        {
                            "title": "Serving compiles of ${__value.raw} (keys) in the sidecar",
                            "url": SIDECAR_URL + "/jit/events?phase=serving&kind=compile"
                            "&backend=${__data.fields.backend}&kernel=${__value.raw}",
                            "targetBlank": True,
                        }
                    ],
                )
            ],
        )
        .links([_jit_link("Sidecar /jit (last keys)", "/jit")])
        .span(12)
        .height(8)
    )


def compile_time_by_kernel() -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title("Compile time by kernel")
        .description(
            "Wall time spent compiling each kernel per $__rate_interval, by backend, all phases "
            "(Triton: jit_cache_hook to jit_post_compile_hook)."
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"sum by (backend, kernel) (increase(jitwatch_compile_seconds_total{{{KSEL}}}[$__rate_interval]))",
                "{{kernel}} ({{backend}})",
            )
        )
        .unit("s")
        .min(0)
        .draw_style(common.GraphDrawStyle.BARS)
        .fill_opacity(60)
        .stacking(common_b.StackingConfig().mode(common.StackingMode.NORMAL))
        .span(12)
        .height(8)
    )


def compile_duration_heatmap() -> heatmap.Panel:
    return (
        heatmap.Panel()
        .title("Compile duration distribution")
        .description(
            "Compiles per duration bucket (jitwatch_compile_duration_seconds, buckets 1 ms … 60 s), all "
            "phases, the selected backends together. The histogram has no kernel label by design; see "
            "Compile time by kernel."
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"sum by (le) (increase(jitwatch_compile_duration_seconds_bucket{{{BSEL}}}[$__rate_interval]))",
                "{{le}}",
                fmt=PromQueryFormat.HEATMAP,
            )
        )
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit("s"))
        .cell_values(heatmap.CellValues().unit("short"))
        .span(12)
        .height(8)
    )


def compile_duration_quantiles() -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title("Compile duration quantiles")
        .description(
            "p50 / p95 / p99 compile duration by backend and phase, estimated from the histogram "
            "buckets (histogram_quantile). Empty while no compile happened in the window."
        )
        .datasource(DS)
        .unit("s")
        .min(0)
        .span(12)
        .height(8)
    )
    for ref, q in (("A", "0.5"), ("B", "0.95"), ("C", "0.99")):
        panel = panel.with_target(
            _q(
                ref,
                f"histogram_quantile({q}, sum by (le, backend, phase) "
                f"(rate(jitwatch_compile_duration_seconds_bucket{{{BSEL}}}[$__rate_interval])))",
                f"p{round(float(q) * 100)} {{{{phase}}}} ({{{{backend}}}})",
            )
        )
    return panel


def request_stalls() -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title("Requests waiting on compiles")
        .description(
            "Compile seconds inside marked serving requests (Monitor.request(), every vLLM engine step): "
            "p99 per rank from jitwatch_request_compile_seconds, and the rate of requests delayed by a "
            "compile per backend (jitwatch_requests_delayed_total). `jitwatch why` says why each compile "
            "happened; /jit lists the worst requests."
        )
        .datasource(DS)
        .unit("s")
        .min(0)
        .span(12)
        .height(8)
    )
    panel = panel.with_target(
        _q(
            "A",
            f"histogram_quantile(0.99, sum by (le, rank) "
            f"(rate(jitwatch_request_compile_seconds_bucket{{{SEL}}}[$__rate_interval])))",
            "p99 compile s per request, rank {{rank}}",
        )
    )
    return panel.with_target(
        _q(
            "B",
            f"sum by (backend, rank) (rate(jitwatch_requests_delayed_total{{{BSEL}}}[$__rate_interval]))",
            "delayed requests/s {{backend}} rank {{rank}}",
        )
    )


def disk_cache_hit_ratio() -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title("Disk-cache hit ratio")
        .description(
            "Share of compiles loaded from the compiler's persistent cache (Triton: TRITON_CACHE_DIR), "
            "by backend and phase. A hit still costs milliseconds (loading the binary); a low ratio at "
            "a restart means the cache volume was lost or the compiler/driver version changed."
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"sum by (backend, phase) "
                f"(increase(jitwatch_compile_disk_cache_hits_total{{{BSEL}}}[$__rate_interval]))"
                f" / sum by (backend, phase) "
                f"(increase(jitwatch_compile_duration_seconds_count{{{BSEL}}}[$__rate_interval]))",
                "{{phase}} ({{backend}})",
            )
        )
        .unit("percentunit")
        .min(0)
        .max(1)
        .span(12)
        .height(8)
    )


def autotune_runs() -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title("Autotune runs")
        .description(
            "Autotune sweeps that benchmarked configs, by backend, kernel and phase (Triton: "
            "@triton.autotune cache misses, knobs.autotuning.listener, Triton 3.8+). Autotuning during "
            "serving stalls far longer than a compile."
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"sum by (backend, kernel, phase) (increase(jitwatch_autotune_runs_total{{{KSEL}}}[$__rate_interval]))",
                "{{kernel}} ({{backend}}, {{phase}})",
            )
        )
        .unit("short")
        .min(0)
        .draw_style(common.GraphDrawStyle.BARS)
        .fill_opacity(60)
        .span(12)
        .height(8)
    )


def hook_errors() -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title("jitwatch hook errors and dropped events")
        .description(
            "Exceptions caught inside jitwatch's hooks, by backend (never raised into the host; an "
            "empty backend is the vLLM plugin itself), and events a worker could not journal. Both "
            "should stay at zero; see docs/runbook.md."
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"sum by (backend, rank) (increase(jitwatch_hook_errors_total{{{BSEL}}}[$__rate_interval]))",
                "hook errors {{backend}}, rank {{rank}}",
            )
        )
        .with_target(
            _q(
                "B",
                f"sum by (rank) (increase(jitwatch_dropped_events_total{{{SEL}}}[$__rate_interval]))",
                "dropped events, rank {{rank}}",
            )
        )
        .unit("short")
        .min(0)
        .span(24)
        .height(8)
    )


def graph_captures() -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title("Graph captures (CUDA graphs) by backend/kernel")
        .description(
            "CUDA-graph recordings per $__rate_interval, by backend, graph and phase "
            "(jitwatch_graph_captures_total; torch.compile mode=reduce-overhead). A recording during "
            "serving stalls the request like a compile; time spent is in "
            "jitwatch_graph_capture_seconds_total. Empty when no backend records CUDA graphs."
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"sum by (backend, kernel, phase) "
                f"(increase(jitwatch_graph_captures_total{{{KSEL}}}[$__rate_interval]))",
                "{{kernel}} ({{backend}}, {{phase}})",
            )
        )
        .unit("short")
        .min(0)
        .draw_style(common.GraphDrawStyle.BARS)
        .fill_opacity(60)
        .span(12)
        .height(8)
    )


def recompiles_by_reason() -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title("Recompiles by reason class")
        .description(
            "Recompiles per $__rate_interval by backend, function, reason class and phase "
            "(jitwatch_recompiles_total; torch.compile: Dynamo guard failures such as 'size mismatch', "
            "'dtype mismatch', 'value change'). A serving-phase recompile stalls its request; the verbatim "
            "reason, compile id and duration are in the sidecar's /jit (recent_serving_compiles, "
            "recompile_reasons)."
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"sum by (backend, kernel, reason_class, phase) "
                f"(increase(jitwatch_recompiles_total{{{BSEL}}}[$__rate_interval]))",
                "{{kernel}}: {{reason_class}} ({{backend}}, {{phase}})",
            )
        )
        .unit("short")
        .min(0)
        .draw_style(common.GraphDrawStyle.BARS)
        .fill_opacity(60)
        .span(24)
        .height(8)
    )


_BACKEND_STATES = {
    "active": "green",
    "waiting": "blue",
    "unavailable": "text",
    "failed": "red",
}
"""jitwatch_backend_info's state values (see the contract) and their colours."""


def backends_per_rank() -> table.Panel:
    return (
        table.Panel()
        .title("Backends per rank")
        .description(
            "Each JIT backend of each rank's latest worker (jitwatch_backend_info): library version and "
            "state. active: hooks installed; waiting: the library is installed but not imported by the "
            "host yet (hooks go in when it is); unavailable: the library is not installed; failed: "
            "installing the hooks failed (see the worker log and /jit)."
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"max by (instance, rank, backend, version, state) (jitwatch_backend_info{{{BSEL}}})",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            )
        )
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True, "Value": True},
                    "indexByName": {"rank": 0, "backend": 1, "version": 2, "state": 3, "instance": 4},
                    "renameByName": {},
                },
            )
        )
        .override_by_name("state", _state_colours(_BACKEND_STATES))
        .span(12)
        .height(6)
    )


def _state_colours(states: dict[str, str]) -> list[Any]:
    """A table's ``state`` column coloured by value (``states``: value → colour, in display order)."""
    options = {state: {"text": state, "color": color, "index": i} for i, (state, color) in enumerate(states.items())}
    return [
        dm.DynamicConfigValue(id_val="mappings", value=[{"type": "value", "options": options}]),
        dm.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"}),
    ]


_WORKER_STATES = {
    "startup": "blue",
    "warmup": "orange",
    "serving": "green",
    "stopped": "text",
    "exited": "red",
}
"""jitwatch_worker_info's state values (see the contract) and their colours."""


def worker_state_per_rank() -> table.Panel:
    return (
        table.Panel()
        .title("Worker state per rank")
        .description(
            "Each rank's latest worker (jitwatch_worker_info): startup, warmup, serving; stopped once it "
            "recorded a clean stop (jitwatch.uninstall() or a normal exit); exited once the sidecar saw its "
            "process gone from the machine without a stop (killed or crashed; only a sidecar on the workers' "
            "machine and PID namespace sees it, at the next scrape), or once it recorded its exit on an "
            "unhandled Python exception (JitwatchWorkerExited while another rank is live). A worker killed "
            "where the sidecar cannot see it keeps its last state until a new worker registers; "
            "JitwatchWorkerStale fires for it after the heartbeat window."
        )
        .datasource(DS)
        .with_target(
            _q(
                "A",
                f"max by (instance, rank, tp_rank, pp_rank, dp_rank, mode, state) (jitwatch_worker_info{{{SEL}}})",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            )
        )
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True, "Value": True},
                    "indexByName": {
                        "rank": 0,
                        "state": 1,
                        "tp_rank": 2,
                        "pp_rank": 3,
                        "dp_rank": 4,
                        "mode": 5,
                        "instance": 6,
                    },
                    "renameByName": {},
                },
            )
        )
        .override_by_name("state", _state_colours(_WORKER_STATES))
        .span(24)
        .height(6)
    )


def variables() -> list[Any]:
    return [
        dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        dashboard.QueryVariable("instance")
        .label("Sidecar")
        .datasource(DS)
        .query("label_values(jitwatch_journal_up, instance)")
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True),
        dashboard.QueryVariable("rank")
        .label("Rank")
        .datasource(DS)
        .query('label_values(jitwatch_warmup_complete{instance=~"$instance"}, rank)')
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.NUMERICAL_ASC)
        .multi(True)
        .include_all(True),
        dashboard.QueryVariable("backend")
        .label("Backend")
        .description(BACKEND_VARIABLE_DESCRIPTION)
        .datasource(DS)
        .query("label_values(jitwatch_backend_info, backend)")
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(ALL_BACKENDS),
    ]


def build() -> dict[str, Any]:
    """The dashboard as a JSON-ready dict."""
    builder = (
        dashboard.Dashboard(DASHBOARD_TITLE)
        .uid(DASHBOARD_UID)
        .description(
            "JIT compiles (Triton, torch.compile, DSL JITs) in LLM inference workers, by backend, from "
            "the jitwatch sidecar's /metrics. Generated by dashboards/grafana/generate.py; do not edit "
            "the JSON by hand."
        )
        .tags(["jitwatch", "jit", "triton", "torch.compile", "vllm"])
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .link(_jit_link("jitwatch sidecar /jit", "/jit"))
        .variables(variables())
        .with_row(dashboard.Row("Warmup"))
        .with_panel(warmup_state())
        .with_panel(warmup_duration())
        .with_panel(warmup_compiles())
        .with_panel(first_request_latency())
        .with_panel(backends_per_rank())
        .with_panel(worker_state_per_rank())
        .with_panel(hook_errors())
        .with_row(dashboard.Row("Compiles"))
        .with_panel(compiles_by_phase())
        .with_panel(serving_compiles_table())
        .with_panel(compile_time_by_kernel())
        .with_panel(compile_duration_heatmap())
        .with_panel(compile_duration_quantiles())
        .with_panel(request_stalls())
        .with_panel(disk_cache_hit_ratio())
        .with_panel(recompiles_by_reason())
        .with_row(dashboard.Row("Autotuning and CUDA graphs"))
        .with_panel(autotune_runs())
        .with_panel(graph_captures())
    )
    data: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True).encode(builder.build()))
    data["id"] = None
    for i, panel in enumerate(data.get("panels", []), start=1):
        panel["id"] = i  # stable panel ids (Grafana needs them for links and "view panel")
    return data


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def variable_exprs(data: dict[str, Any]) -> list[str]:
    """PromQL of the query variables: ``label_values(SEL, LABEL)`` becomes ``sum by (LABEL) (SEL)``,
    so :func:`check_contract` checks the label as well as the selector."""
    out: list[str] = []
    for var in data.get("templating", {}).get("list", []):
        query = var.get("query")
        if var.get("type") != "query" or not isinstance(query, str):
            continue
        m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*", query)
        out.append(f"sum by ({m.group(2)}) ({m.group(1)})" if m else query)
    return out


def panel_queries(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(panel title, refId, expr)`` for every target of every panel (rows included)."""
    out: list[tuple[str, str, str]] = []
    stack = list(data.get("panels", []))
    while stack:
        panel = stack.pop(0)
        stack.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            out.append((panel.get("title", ""), target.get("refId", ""), target.get("expr", "")))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed JSON is stale")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    data = json.loads(text)
    exprs = [expr for _, _, expr in panel_queries(data)]
    exprs += variable_exprs(data)
    problems = check_contract(exprs)
    if problems:
        for p in problems:
            print(f"generate.py: {p}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(
                f"generate.py: {args.output} is stale; run `python dashboards/grafana/generate.py`",
                file=sys.stderr,
            )
            return 1
        print(f"{args.output}: up to date ({len(exprs)} queries checked against jitwatch.views.contract)")
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
