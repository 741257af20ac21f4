"""The generated Grafana dashboard and the metrics contract of dashboards + rules.

* ``dashboards/grafana/jitwatch.json`` is exactly what ``generate.py`` produces (and ``--check``
  agrees); stable uid, ``id: null``, template variables, ``${datasource}``, ``$__rate_interval``,
  ``refId`` on every target; the required panels exist.
* Every metric name and label used by a dashboard query, a template variable or a Prometheus rule
  is declared in :data:`jitwatch.views.contract.METRICS`, hence documented in ``docs/metrics.md`` (checked
  here too). That the sidecar exports exactly the contract is tests/views/test_metrics.py's job; the
  Prometheus e2e test (tests/observability/test_prometheus_e2e.py) runs every panel query against real data.
* Backends: a ``backend`` template variable (``label_values(jitwatch_backend_info, backend)``);
  every query of a family with a ``backend`` label filters on ``backend=~"$backend"``, no
  aggregation of a per-kernel family drops ``backend``, and legends that name a kernel name its
  backend (tests/observability/_promql.py).
* Provisioning files point Grafana at the right datasource uid and dashboard path.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.tools import tool_missing, tool_module

tool_module("grafana_foundation_sdk", "grafana-foundation-sdk not installed (make env)")
yaml = pytest.importorskip("yaml")

from jitwatch.core.events import Phase  # noqa: E402
from jitwatch.views.contract import BY_NAME, METRICS  # noqa: E402
from tests.observability._promql import panel_backend_problems  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "dashboards" / "grafana"
GENERATOR = GRAFANA / "generate.py"
COMMITTED = GRAFANA / "jitwatch.json"
RULES = ROOT / "dashboards" / "prometheus" / "rules.yml"
METRICS_DOC = ROOT / "docs" / "metrics.md"

REQUIRED_PANELS = {
    "Warmup state per rank",
    "Warmup duration per rank",
    "Compiles by phase",
    "Serving-phase compiles by kernel",
    "Compile time by kernel",
    "Compile duration distribution",
    "Compile duration quantiles",
    "Disk-cache hit ratio",
    "First-request latency per rank",
    "Autotune runs",
    "Graph captures (CUDA graphs) by backend/kernel",
    "Backends per rank",
    "Worker state per rank",
    "jitwatch hook errors and dropped events",
}


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("jitwatch_dashboard_generate", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return load_generator()


@pytest.fixture(scope="module")
def dash() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(COMMITTED.read_text(encoding="utf-8"))
    return data


def panels(data: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in data["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return [p for p in out if p["type"] != "row"]


def targets_of(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(p["title"], t) for p in panels(data) for t in p.get("targets", [])]


def rule_exprs() -> tuple[list[str], set[str]]:
    data = yaml.safe_load(RULES.read_text())
    rules = [r for g in data["groups"] for r in g["rules"]]
    return [r["expr"] for r in rules], {r["record"] for r in rules if "record" in r}


# ------------------------------------------------------------------ generated == committed
def test_committed_json_is_generator_output(gen: ModuleType) -> None:
    assert COMMITTED.read_text(encoding="utf-8") == gen.render(), (
        "dashboards/grafana/jitwatch.json is stale: run `python dashboards/grafana/generate.py`"
    )


def test_generator_check_mode(tmp_path: Path) -> None:
    ok = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, timeout=120, check=False
    )
    assert ok.returncode == 0, ok.stderr
    stale = tmp_path / "stale.json"
    stale.write_text(COMMITTED.read_text().replace("Compiles by phase", "Compiles by phaze"))
    bad = subprocess.run(
        [sys.executable, str(GENERATOR), "--check", "--output", str(stale)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 1
    assert "stale" in bad.stderr


# ------------------------------------------------------------------ dashboard conventions
def test_dashboard_identity(dash: dict[str, Any]) -> None:
    assert dash["id"] is None
    assert dash["uid"] == "jitwatch-triton-jit" and len(dash["uid"]) <= 40
    assert dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_template_variables(dash: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert list(variables) == ["datasource", "instance", "rank", "backend"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "rank", "backend"):
        var = variables[name]
        assert var["type"] == "query"
        assert var["datasource"]["uid"] == "${datasource}"
        assert var["includeAll"] and var["multi"]
        assert f", {name})" in var["query"]
    assert 'instance=~"$instance"' in variables["rank"]["query"]


def test_backend_variable(dash: dict[str, Any]) -> None:
    backend = {v["name"]: v for v in dash["templating"]["list"]}["backend"]
    assert backend["query"] == "label_values(jitwatch_backend_info, backend)"
    assert backend["type"] == "query" and backend["multi"] and backend["includeAll"]
    # All is ".*": it also matches backend="" (the vLLM plugin's own hook errors) and backends of
    # earlier workers that jitwatch_backend_info no longer lists.
    assert backend["allValue"] == ".*"
    # the description lists every built-in backend (the DSL backends included)
    from jitwatch.backends import BUILTIN

    assert {"triton", "cutedsl", "tilelang", "flashinfer"} <= set(BUILTIN)
    assert all(name in backend["description"] for name in BUILTIN), backend["description"]


def test_every_backend_family_query_keeps_backend(dash: dict[str, Any]) -> None:
    targets = targets_of(dash)
    assert panel_backend_problems(targets) == []
    filtered = {title for title, t in targets if 'backend=~"$backend"' in t["expr"]}
    assert len(filtered) >= 10, filtered


def test_backend_check_can_fail() -> None:
    bad = [
        ("unfiltered", {"expr": 'sum by (backend) (jitwatch_compiles_total{instance=~"$instance"})'}),
        ("dropped", {"expr": 'sum by (kernel) (jitwatch_autotune_runs_total{backend=~"$backend"})'}),
        ("histogram", {"expr": 'sum by (le) (rate(jitwatch_compile_duration_seconds_bucket{rank="0"}[5m]))'}),
        (
            "legend",
            {
                "expr": 'sum by (backend, kernel) (jitwatch_compiles_total{backend=~"$backend"})',
                "legendFormat": "{{kernel}}",
            },
        ),
        ("fine", {"expr": 'sum by (le) (jitwatch_compile_duration_seconds_bucket{backend=~"$backend"})'}),
        ("no backend label", {"expr": "sum by (rank) (jitwatch_dropped_events_total)"}),
    ]
    problems = panel_backend_problems(bad)
    assert [p.split(":")[0] for p in problems] == ["unfiltered", "dropped", "histogram", "legend"], problems


def test_required_panels_present(dash: dict[str, Any]) -> None:
    titles = {p["title"] for p in panels(dash)}
    missing = REQUIRED_PANELS - titles
    assert not missing, f"missing panels: {missing}"


@pytest.mark.parametrize("title", sorted(REQUIRED_PANELS))
def test_panel_queries_follow_conventions(dash: dict[str, Any], title: str) -> None:
    (panel,) = [p for p in panels(dash) if p["title"] == title]
    assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    targets = panel["targets"]
    assert targets, f"{title}: no query"
    ref_ids = [t.get("refId") for t in targets]
    assert all(ref_ids) and len(set(ref_ids)) == len(ref_ids), ref_ids
    for t in targets:
        assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        expr = t["expr"]
        windows = re.findall(r"\[([^\]]+)\]", expr)
        # rate windows follow Grafana's $__rate_interval; a subquery spans the dashboard's range
        assert all(w in ("$__rate_interval", "$__range:1m") for w in windows), f"{title}: fixed range window in {expr}"
        if re.search(r"\b(rate|increase)\(", expr):
            assert windows
        assert 'instance=~"$instance"' in expr
        per_rank = {m.name for m in METRICS if "rank" in m.labels}
        used = set(re.findall(r"(jitwatch_[a-z_]+?)(?:_bucket|_sum|_count)?\{", expr))
        if used & per_rank:
            assert 'rank=~"$rank"' in expr, f"{title}: per-rank metric without the rank variable: {expr}"


def test_serving_table_explains_where_the_key_is(dash: dict[str, Any]) -> None:
    (panel,) = [p for p in panels(dash) if p["title"] == "Serving-phase compiles by kernel"]
    assert panel["type"] == "table"
    assert "NOT a Prometheus label" in panel["description"]
    assert "/jit" in panel["description"]
    assert any("/jit" in link["url"] for link in panel.get("links", []))
    exprs = [t["expr"] for t in panel["targets"]]
    # serving compiles only (the serving family, or phase="serving"), per backend and kernel
    assert all(("jitwatch_serving_compiles_total" in e or 'phase="serving"' in e) for e in exprs)
    assert all("by (backend, kernel)" in e for e in exprs)
    organize = [t for t in panel["transformations"] if t["id"] == "organize"]
    assert organize and "backend" in organize[0]["options"]["indexByName"]
    links = [p["value"] for o in panel["fieldConfig"]["overrides"] for p in o["properties"] if p["id"] == "links"]
    assert any("backend=${__data.fields.backend}" in link["url"] for group in links for link in group)


def test_graph_captures_panel(dash: dict[str, Any]) -> None:
    (panel,) = [p for p in panels(dash) if p["title"] == "Graph captures (CUDA graphs) by backend/kernel"]
    (target,) = panel["targets"]
    assert "jitwatch_graph_captures_total{" in target["expr"]
    assert "by (backend, kernel" in target["expr"]
    assert "{{backend}}" in target["legendFormat"] and "{{kernel}}" in target["legendFormat"]


def test_backends_per_rank_table(dash: dict[str, Any]) -> None:
    (panel,) = [p for p in panels(dash) if p["title"] == "Backends per rank"]
    assert panel["type"] == "table"
    (target,) = panel["targets"]
    assert target["format"] == "table" and target["instant"]
    assert "jitwatch_backend_info{" in target["expr"]
    by = re.search(r"by \(([^)]*)\)", target["expr"])
    assert by and {"rank", "backend", "version", "state"} <= {p.strip() for p in by.group(1).split(",")}
    states = {"active", "waiting", "unavailable", "failed"}
    assert all(state in BY_NAME["jitwatch_backend_info"].help for state in states)
    mappings = [p["value"] for o in panel["fieldConfig"]["overrides"] for p in o["properties"] if p["id"] == "mappings"]
    assert mappings and set(mappings[0][0]["options"]) == states


def test_worker_state_table_colours_every_state_of_the_contract(dash: dict[str, Any]) -> None:
    """Every ``state`` the contract gives ``jitwatch_worker_info`` (``exited`` included: a killed
    worker the sidecar saw gone) has a colour; the table shows the state per rank."""
    (panel,) = [p for p in panels(dash) if p["title"] == "Worker state per rank"]
    assert panel["type"] == "table"
    (target,) = panel["targets"]
    assert target["format"] == "table" and target["instant"]
    assert "jitwatch_worker_info{" in target["expr"]
    by = re.search(r"by \(([^)]*)\)", target["expr"])
    assert by and {"rank", "state"} <= {p.strip() for p in by.group(1).split(",")}
    states = [*(phase.value for phase in Phase), "stopped", "exited"]
    assert all(state in BY_NAME["jitwatch_worker_info"].help for state in states)
    mappings = [p["value"] for o in panel["fieldConfig"]["overrides"] for p in o["properties"] if p["id"] == "mappings"]
    assert mappings and set(mappings[0][0]["options"]) == set(states)
    assert mappings[0][0]["options"]["exited"]["color"] == "red"


def test_heatmap_uses_buckets(dash: dict[str, Any]) -> None:
    (panel,) = [p for p in panels(dash) if p["title"] == "Compile duration distribution"]
    assert panel["type"] == "heatmap"
    (target,) = panel["targets"]
    assert target["format"] == "heatmap" and "sum by (le)" in target["expr"]
    assert "_bucket{" in target["expr"]


# ------------------------------------------------------------------ metrics contract
def test_dashboard_and_rules_use_only_contract_metrics_and_labels(gen: ModuleType, dash: dict[str, Any]) -> None:
    exprs = [e for _, _, e in gen.panel_queries(dash)] + gen.variable_exprs(dash)
    rules, recorded = rule_exprs()
    assert all(":" in name for name in recorded), "recording rules follow level:metric:operations"
    problems = gen.check_contract(exprs + rules, recorded=recorded)
    assert problems == []


def test_contract_check_catches_unknown_names(gen: ModuleType) -> None:
    problems = gen.check_contract(
        [
            "rate(jitwatch_compiles_totl[5m])",
            'jitwatch_warmup_complete{kernel="x"}',
            "sum by (le) (jitwatch_compile_duration_seconds_bucket)",
            "sum by (gpu) (jitwatch_hook_errors_total)",
            "vllm:num_requests_running",
        ]
    )
    text = "\n".join(problems)
    assert "jitwatch_compiles_totl" in text
    assert "'kernel' is not a label of jitwatch_warmup_complete" in text
    assert "'gpu'" in text
    assert "vllm:num_requests_running" in text
    assert not any("_bucket" in p and "unknown metric" in p for p in problems)


def test_scanner_reads_selectors_groupings_and_functions(gen: ModuleType) -> None:
    metrics, grouping, selectors = gen.promql_refs(
        'histogram_quantile(0.95, sum by (le, phase) (rate(jitwatch_compile_duration_seconds_bucket{instance=~"$i",'
        ' rank=~"$r"}[$__rate_interval]))) and on (job) time() - jitwatch_x offset 5m'
    )
    assert metrics == {"jitwatch_compile_duration_seconds_bucket", "jitwatch_x"}
    assert grouping == {"le", "phase", "job"}
    assert ("jitwatch_compile_duration_seconds_bucket", {"instance", "rank"}) in selectors


def test_used_metrics_are_documented(gen: ModuleType, dash: dict[str, Any]) -> None:
    """docs/metrics.md (generated from the contract by jitwatch.views.contract_doc) names every metric used."""
    if not METRICS_DOC.exists():
        pytest.fail("docs/metrics.md is missing (python -m jitwatch.views.contract_doc --write)")
    doc = METRICS_DOC.read_text(encoding="utf-8")
    rules, recorded = rule_exprs()
    used: set[str] = set()
    for expr in [e for _, _, e in gen.panel_queries(dash)] + gen.variable_exprs(dash) + rules:
        used |= gen.promql_refs(expr)[0]
    used -= recorded
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) if n not in BY_NAME else n for n in used}
    missing = sorted(n for n in bases if f"`{n}" not in doc and n not in doc)
    assert not missing, f"not in docs/metrics.md: {missing}"


# ------------------------------------------------------------------ provisioning
def test_provisioning_files() -> None:
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "jitwatch.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["uid"]
    assert source["url"] == "http://prometheus:9090"
    prom_cfg = yaml.safe_load((ROOT / "dashboards" / "prometheus" / "prometheus.yml").read_text())
    assert source["jsonData"]["timeInterval"] == prom_cfg["global"]["scrape_interval"]
    prov = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "jitwatch.yml").read_text())
    (provider,) = prov["providers"]
    assert provider["type"] == "file"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    path = provider["options"]["path"]
    assert any(m.startswith("./dashboards/grafana/jitwatch.json:" + path + "/") for m in mounts), mounts


def test_last_serving_compile_column_through_promtool(dash: dict[str, Any], tmp_path: Path) -> None:
    """The serving table's "last serving compile" column, evaluated by a real PromQL engine
    (``promtool test rules`` with a ``promql_expr_test``): the minute a rank's serving counter last
    grew or was born, latest over ranks; a change in the current minute reads as the evaluation time."""
    from tests.observability.test_rules import find_tool

    promtool = find_tool("promtool")
    if promtool is None:
        tool_missing("promtool not installed (run scripts/install-prometheus.sh)")
    (panel,) = [p for p in panels(dash) if p["title"] == "Serving-phase compiles by kernel"]
    (target,) = [t for t in panel["targets"] if t["refId"] == "B"]
    expr = target["expr"]
    for var, value in {"$instance": ".*", "$rank": ".*", "$backend": ".*", "$__range": "10m"}.items():
        expr = expr.replace(var, value)
    s = 'jitwatch_serving_compiles_total{{job="jitwatch",instance="a:9400",backend="triton",kernel="{k}",rank="{r}"}}'
    tests = {
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": s.format(k="k", r="0"), "values": "_x3 1x6 2x12"},  # born 3m, grew at 10m
                    {"series": s.format(k="k", r="1"), "values": "_x15 1x6"},  # born 15m
                    {"series": s.format(k="old", r="0"), "values": "1x21"},  # born 0m: before both ranges
                    {"series": s.format(k="new", r="0"), "values": "_x20 1"},  # born 20m
                ],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "20m30s",
                        "exp_samples": [
                            {"labels": '{backend="triton",kernel="k"}', "value": 900 * 1000},
                            {"labels": '{backend="triton",kernel="new"}', "value": 1230 * 1000},
                        ],
                    },
                    {
                        "expr": expr,
                        "eval_time": "12m",
                        "exp_samples": [{"labels": '{backend="triton",kernel="k"}', "value": 600 * 1000}],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "last_serving_compile_test.yml"
    path.write_text(yaml.safe_dump(tests))
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
