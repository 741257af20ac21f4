"""Prometheus alerting rules (dashboards/prometheus/rules.yml) and scrape config.

* Structure (no binary needed): every alert has ``for:``, a ``severity`` label, ``summary`` /
  ``description`` / ``runbook_url`` annotations whose anchor exists in docs/runbook.md, and at least
  one firing and one not-firing case in rules_test.yml; thresholds on compile durations sit on a
  bucket edge of :data:`jitwatch.store.journal.COMPILE_DURATION_BUCKETS`; nothing outside Prometheus
  2.42's rule-file subset.
* Backends: no rule aggregates a backend-labelled series without ``backend`` (tests/observability/
  _promql.py scans every ``by (...)``), except the per-rank totals over every backend listed in
  :data:`CROSS_BACKEND_TOTALS`; every alert built from such series carries ``backend`` in each of
  its firing unit-test cases.
* With the real ``promtool`` (marker ``prometheus``; Debian's 2.42, installed by
  ``scripts/install-prometheus.sh`` into ``.tools/prometheus``): ``check rules``, ``check config``,
  ``test rules``, and a mutation check that the unit tests fail when the new-series handling is
  removed from the rules (the tests can fail).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

from jitwatch.store.journal import COMPILE_DURATION_BUCKETS  # noqa: E402
from tests.observability._promql import rule_backend_problems  # noqa: E402
from tests.tools import tool_missing  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "dashboards" / "prometheus"
RULES = PROM_DIR / "rules.yml"
RULES_TEST = PROM_DIR / "rules_test.yml"
CONFIG = PROM_DIR / "prometheus.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"

EXPECTED_ALERTS = {
    "JitwatchPostWarmupCompile",
    "JitwatchCompileStorm",
    "JitwatchServingCompileTimeHigh",
    "JitwatchWarmupNotCompleted",
    "JitwatchRankSkew",
    "JitwatchHookErrors",
    "JitwatchDroppedEvents",
    "JitwatchJournalDown",
    "JitwatchWorkerStale",
    "JitwatchWorkerExited",
    "JitwatchInflightCompileSkew",
    "JitwatchCompileNearCollectiveDeadline",
}
BACKEND_ALERTS = {
    "JitwatchPostWarmupCompile",
    "JitwatchCompileStorm",
    "JitwatchServingCompileTimeHigh",
    "JitwatchRankSkew",
    "JitwatchHookErrors",
}
"""Alerts built from series with a ``backend`` label: their alerts carry ``backend``."""
CROSS_BACKEND_TOTALS = {
    # Per-rank totals over every backend (the threshold is per rank), joined back onto the
    # per-backend series with `+ on (job, instance, rank) group_right ()`.
    ("JitwatchCompileStorm", frozenset({"job", "instance", "rank"})),
    ("JitwatchServingCompileTimeHigh", frozenset({"job", "instance", "rank"})),
    # Counting compiling ranks: each rank once, whatever its backends; the alert's own series
    # (left of `and on (job, instance)`) keeps backend.
    ("JitwatchRankSkew", frozenset({"job", "instance", "rank"})),
    ("JitwatchRankSkew", frozenset({"job", "instance"})),
}
"""``(alert, by-labels)`` of the only aggregations allowed to drop ``backend``."""
NO_BACKEND_OK = {"JitwatchHookErrors"}
"""Alerts that may fire without a backend label: the vLLM plugin's own hook errors have ``backend=""``."""
COMPILE_DURATION_SERIES = re.compile(r"compile_seconds|compile_duration_seconds")
"""Expressions over these measure compile time: their thresholds must be bucket edges."""


def find_tool(name: str) -> str | None:
    """``name`` on PATH, else in the repo's ``.tools/prometheus/usr/bin`` (install-prometheus.sh)."""
    found = shutil.which(name)
    if found:
        return found
    local = ROOT / ".tools" / "prometheus" / "usr" / "bin" / name
    return str(local) if local.is_file() else None


def _promtool() -> str:
    tool = find_tool("promtool")
    if tool is None:
        tool_missing("promtool not installed (run scripts/install-prometheus.sh)")
    return tool


def _run(*args: str, cwd: Path = PROM_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def load_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [r for r in load_rules() if "alert" in r]


def runbook_anchors() -> set[str]:
    """GitHub-style anchors of the runbook's headings."""
    anchors = set()
    for line in RUNBOOK.read_text().splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


# ------------------------------------------------------------------ structure
def test_expected_alerts_present() -> None:
    assert {a["alert"] for a in alerts()} == EXPECTED_ALERTS


@pytest.mark.parametrize("alert", sorted(EXPECTED_ALERTS))
def test_alert_has_for_severity_and_annotations(alert: str) -> None:
    (rule,) = [a for a in alerts() if a["alert"] == alert]
    assert "for" in rule, f"{alert}: no for:"
    assert re.fullmatch(r"\d+[smh]", str(rule["for"])), rule["for"]
    assert rule["labels"]["severity"] in {"warning", "critical"}
    ann = rule["annotations"]
    assert set(ann) >= {"summary", "description", "runbook_url"}
    assert ann["summary"].strip() and ann["description"].strip()
    assert re.fullmatch(r"[A-Z][A-Za-z]+", alert), "alert names are CamelCase"


@pytest.mark.parametrize("alert", sorted(EXPECTED_ALERTS))
def test_runbook_url_points_at_an_existing_anchor(alert: str) -> None:
    (rule,) = [a for a in alerts() if a["alert"] == alert]
    url = rule["annotations"]["runbook_url"]
    path, _, anchor = url.partition("#")
    assert path == "docs/runbook.md"
    assert anchor in runbook_anchors(), f"{alert}: docs/runbook.md has no heading for #{anchor}"


def test_post_warmup_alert_keeps_the_backend_and_kernel_labels() -> None:
    (rule,) = [a for a in alerts() if a["alert"] == "JitwatchPostWarmupCompile"]
    recorded = {r["record"]: r["expr"] for r in load_rules() if "record" in r}
    expr = rule["expr"]
    for name, body in recorded.items():
        if name in expr:
            expr = body
    assert "jitwatch_serving_compiles_total" in expr  # serving compiles only, per kernel and rank
    assert "increase(jitwatch_serving_compiles_total" in expr
    bys = re.findall(r"by \(([^)]*)\)", expr)
    assert bys
    for by in bys:
        labels = {part.strip() for part in by.split(",")}
        assert {"backend", "kernel", "rank"} <= labels, f"aggregation drops a label: by ({by})"
    assert rule["annotations"]["summary"].startswith("{{ $labels.backend }} compiled {{ $labels.kernel }}")
    assert "Triton" not in rule["annotations"]["summary"] + rule["annotations"]["description"]


def test_no_rule_aggregates_the_backend_label_away() -> None:
    problems, backend_series = rule_backend_problems(load_rules(), CROSS_BACKEND_TOTALS)
    assert problems == []
    assert {a["alert"] for a in alerts()} & backend_series == BACKEND_ALERTS
    recorded = {r["record"] for r in load_rules() if "record" in r}
    assert recorded <= backend_series, "every recording rule is built from compiles and keeps backend"


def test_backend_check_can_fail() -> None:
    broken = [
        {"record": "jitwatch_rank:x:increase5m", "expr": "sum by (job, rank) (increase(jitwatch_compiles_total[5m]))"},
        {"record": "jitwatch_rank:y:increase5m", "expr": "sum(jitwatch_compile_seconds_total)"},
        {"alert": "A", "expr": "sum by (job, instance, rank) (jitwatch_rank:x:increase5m) > 1"},
        {"alert": "B", "expr": "sum (jitwatch_compiles_total) by (kernel) > 1"},
        {"alert": "C", "expr": "sum without (backend) (jitwatch_hook_errors_total) > 1"},
        {"alert": "D", "expr": "sum by (backend, rank) (jitwatch_compiles_total) > 1"},
        {"alert": "E", "expr": "sum by (rank) (jitwatch_dropped_events_total) > 1"},
    ]
    problems, _ = rule_backend_problems(broken, {("A", frozenset({"job", "instance"}))})
    text = "\n".join(problems)
    assert [p.split(":")[0] for p in problems] == ["jitwatch_rank", "jitwatch_rank", "A", "B", "C"], text
    # The allow-list names (alert, grouping) exactly: A's grouping is not the allowed one.
    assert "A: sum by (instance, job, rank)" in text


def test_backend_alerts_carry_backend_in_every_firing_case() -> None:
    data = yaml.safe_load(RULES_TEST.read_text())
    with_backend: dict[str, set[str]] = {}
    for test in data["tests"]:
        for case in test.get("alert_rule_test", []):
            name = case["alertname"]
            if name not in BACKEND_ALERTS:
                continue
            for exp in case.get("exp_alerts") or []:
                backend = exp["exp_labels"].get("backend")
                if backend is None:
                    assert name in NO_BACKEND_OK, f"{name} fires without a backend label in {test['name']!r}"
                    continue
                with_backend.setdefault(name, set()).add(backend)
                assert backend in exp["exp_annotations"]["summary"] + exp["exp_annotations"]["description"]
    assert set(with_backend) == BACKEND_ALERTS
    assert "torch_compile" in with_backend["JitwatchPostWarmupCompile"], "no non-Triton serving-compile case"
    assert {"triton", "torch_compile"} <= with_backend["JitwatchCompileStorm"], "no two-backend storm case"


def test_every_alert_has_firing_and_not_firing_unit_tests() -> None:
    data = yaml.safe_load(RULES_TEST.read_text())
    assert data["rule_files"] == ["rules.yml"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in data["tests"]:
        for case in test.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert firing >= EXPECTED_ALERTS, f"no firing case: {EXPECTED_ALERTS - firing}"
    assert quiet >= EXPECTED_ALERTS, f"no not-firing case: {EXPECTED_ALERTS - quiet}"


def _thresholds(expr: str) -> list[float]:
    """Numbers an expression compares against (``> 30``, ``>= 0.5``, ``le="1.0"``)."""
    values = [float(m) for m in re.findall(r"(?:>=|<=|>|<|==)\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)", expr)]
    values += [float(m) for m in re.findall(r'le\s*=~?\s*"([0-9.e+-]+)"', expr) if m not in ("+Inf",)]
    return values


def test_compile_duration_thresholds_sit_on_bucket_edges() -> None:
    recorded = {r["record"]: r["expr"] for r in load_rules() if "record" in r}
    checked = 0
    for rule in alerts():
        expr = rule["expr"]
        sources = expr + " ".join(body for name, body in recorded.items() if name in expr)
        if not COMPILE_DURATION_SERIES.search(sources):
            continue
        for value in _thresholds(expr):
            if value == 0:
                continue  # "> 0": any compile at all, not a duration
            checked += 1
            assert value in COMPILE_DURATION_BUCKETS, (
                f"{rule['alert']}: threshold {value} s is not an edge of COMPILE_DURATION_BUCKETS"
            )
    assert checked >= 1, "no compile-duration threshold found: the check would pass vacuously"


def test_bucket_edge_check_can_fail() -> None:
    assert _thresholds("x >= 29") == [29.0] and 29.0 not in COMPILE_DURATION_BUCKETS
    assert _thresholds('y{le="2.5"} > 0') == [0.0, 2.5]


def test_rules_stay_in_the_prometheus_2_42_subset() -> None:
    data = yaml.safe_load(RULES.read_text())
    for group in data["groups"]:
        assert "query_offset" not in group, "query_offset needs Prometheus 2.53+"
        assert set(group) <= {"name", "interval", "rules", "limit"}
    exprs = " ".join(r["expr"] for r in load_rules())
    for forbidden in ("fuzzy_compare", "limitk", "limit_ratio", "info(", "double_exponential_smoothing"):
        assert forbidden not in exprs, f"{forbidden} is not in Prometheus 2.42"
    for rule in load_rules():
        assert set(rule) <= {"alert", "record", "expr", "for", "labels", "annotations", "keep_firing_for"}


def test_scrape_config_targets_the_sidecar_port() -> None:
    data = yaml.safe_load(CONFIG.read_text())
    assert data["rule_files"] == ["rules.yml"]
    (job,) = data["scrape_configs"]
    assert job["job_name"] == "jitwatch"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets and all(t.endswith(":9400") for t in targets)


# ------------------------------------------------------------------ real promtool
@pytest.mark.prometheus
def test_promtool_check_rules() -> None:
    res = _run(_promtool(), "check", "rules", str(RULES))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.prometheus
def test_promtool_check_config() -> None:
    res = _run(_promtool(), "check", "config", str(CONFIG))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.prometheus
def test_promtool_test_rules() -> None:
    res = _run(_promtool(), "test", "rules", RULES_TEST.name)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.prometheus
def test_promtool_unit_tests_catch_a_broken_rule(tmp_path: Path) -> None:
    """Without the new-series handling, the first serving compile (series born at 1) goes unseen."""
    promtool = _promtool()
    broken = re.sub(
        r"sum by \(job, instance, rank, backend, kernel\) \(\n\s*jitwatch_serving_compiles_total\n"
        r"\s*unless jitwatch_serving_compiles_total offset 5m\n\s*\)\n\s*or\n",
        "",
        RULES.read_text(),
    )
    assert broken != RULES.read_text(), "mutation did not apply; update the pattern"
    (tmp_path / "rules.yml").write_text(broken)
    shutil.copy(RULES_TEST, tmp_path / "rules_test.yml")
    assert _run(promtool, "check", "rules", "rules.yml", cwd=tmp_path).returncode == 0
    res = _run(promtool, "test", "rules", "rules_test.yml", cwd=tmp_path)
    assert res.returncode != 0
    assert "JitwatchPostWarmupCompile" in res.stdout + res.stderr


BACKEND_MUTATIONS = {
    # The storm's threshold counted per backend: 15 triton + 10 torch_compile on one rank stays quiet.
    "storm per backend": (
        "(sum by (job, instance, rank) (jitwatch_rank:serving_compiles:increase5m) >= 20)\n"
        "          + on (job, instance, rank) group_right ()\n"
        "          (0 * (jitwatch_rank:serving_compiles:increase5m > 0))",
        "jitwatch_rank:serving_compiles:increase5m >= 20",
        "JitwatchCompileStorm",
    ),
    # Counting (rank, backend) pairs: a rank compiling with two backends looks like two ranks.
    "skew counts backends": (
        "(sum by (job, instance, rank) (jitwatch_rank:serving_compiles:increase5m) > 0)\n              and on",
        "(jitwatch_rank:serving_compiles:increase5m > 0)\n              and on",
        "JitwatchRankSkew",
    ),
    # The per-kernel recording rule without backend: the alert loses its backend label.
    "kernel rule without backend": (
        "sum by (job, instance, rank, backend, kernel) (",
        "sum by (job, instance, rank, kernel) (",
        "JitwatchPostWarmupCompile",
    ),
}


@pytest.mark.prometheus
@pytest.mark.parametrize("mutation", sorted(BACKEND_MUTATIONS))
def test_promtool_unit_tests_catch_a_backend_mistake(tmp_path: Path, mutation: str) -> None:
    """The two-backend unit tests fail when a rule mixes up backends (the tests can fail)."""
    promtool = _promtool()
    old, new, alert = BACKEND_MUTATIONS[mutation]
    text = RULES.read_text()
    assert old in text, f"mutation {mutation!r} did not apply; update it"
    (tmp_path / "rules.yml").write_text(text.replace(old, new))
    shutil.copy(RULES_TEST, tmp_path / "rules_test.yml")
    assert _run(promtool, "check", "rules", "rules.yml", cwd=tmp_path).returncode == 0
    res = _run(promtool, "test", "rules", "rules_test.yml", cwd=tmp_path)
    assert res.returncode != 0
    assert alert in res.stdout + res.stderr


WORKER_MUTATIONS = {
    # The stale alert without its exclusion: a stopped (and an exited) rank fires it 2-3 minutes later.
    "stale for stopped ranks": (
        '          unless on (job, instance, rank)\n          jitwatch_worker_info{state=~"stopped|exited"}\n',
        "",
        "JitwatchWorkerStale",
    ),
    # Excluding every state: a rank presumed dead (state serving) no longer fires.
    "stale for no rank": (
        'jitwatch_worker_info{state=~"stopped|exited"}',
        'jitwatch_worker_info{state=~".+"}',
        "JitwatchWorkerStale",
    ),
    # The exited alert at once: a planned restart (exited for one scrape) pages.
    "exited at once": (
        '(jitwatch_worker_info{state=~"startup|warmup|serving"}) > 0)\n        for: 1m',
        '(jitwatch_worker_info{state=~"startup|warmup|serving"}) > 0)\n        for: 0m',
        "JitwatchWorkerExited",
    ),
    # The exited alert without its live-peer condition: a planned stop (every rank SIGKILLed) pages,
    # and the alert never clears until new workers register.
    "exited without a live peer": (
        "          and on (job, instance)\n"
        '          (count by (job, instance) (jitwatch_worker_info{state=~"startup|warmup|serving"}) > 0)\n',
        "",
        "JitwatchWorkerExited",
    ),
    # Every state counts as a peer: the exited ranks of a stopped server keep each other paging.
    "exited ranks as live peers": (
        '(count by (job, instance) (jitwatch_worker_info{state=~"startup|warmup|serving"}) > 0)',
        "(count by (job, instance) (jitwatch_worker_info) > 0)",
        "JitwatchWorkerExited",
    ),
    # Rank skew counting a stopped or exited rank (warmup_complete 1, no compile) as a serving peer.
    "skew counts dead peers": (
        "              (jitwatch_warmup_complete == 1)\n"
        '              and on (job, instance, rank) jitwatch_worker_info{state=~"startup|warmup|serving"}\n',
        "              (jitwatch_warmup_complete == 1)\n",
        "JitwatchRankSkew",
    ),
    # Rank skew counting a dead rank's compiles: a live peer that compiled nothing goes unseen.
    "skew counts dead compiling ranks": (
        "              (sum by (job, instance, rank) (jitwatch_rank:serving_compiles:increase5m) > 0)\n"
        '              and on (job, instance, rank) jitwatch_worker_info{state=~"startup|warmup|serving"}\n',
        "              (sum by (job, instance, rank) (jitwatch_rank:serving_compiles:increase5m) > 0)\n",
        "JitwatchRankSkew",
    ),
    # Rank skew firing for a dead rank's own compiles.
    "skew fires for a dead rank": (
        "            (jitwatch_rank:serving_compiles:increase5m > 0)\n"
        '            and on (job, instance, rank) jitwatch_worker_info{state=~"startup|warmup|serving"}\n',
        "            (jitwatch_rank:serving_compiles:increase5m > 0)\n",
        "JitwatchRankSkew",
    ),
    # In-flight skew counting a stopped or exited rank (age 0) as a peer waiting.
    "inflight skew counts dead peers": (
        "                and on (job, instance, rank) (jitwatch_warmup_complete == 1)\n"
        '                and on (job, instance, rank) jitwatch_worker_info{state=~"startup|warmup|serving"}\n',
        "                and on (job, instance, rank) (jitwatch_warmup_complete == 1)\n",
        "JitwatchInflightCompileSkew",
    ),
}
"""``(old, new, alert)``: rule mistakes about known-gone and presumed-dead workers and dead peers."""


@pytest.mark.prometheus
@pytest.mark.parametrize("mutation", sorted(WORKER_MUTATIONS))
def test_promtool_unit_tests_catch_a_worker_state_mistake(tmp_path: Path, mutation: str) -> None:
    """The worker alerts' unit tests fail when the stale alert fires for stopped or exited ranks,
    stops firing for ranks presumed dead, the exited alert pages at once or without a live peer
    (a planned stop), or the skew alerts count stopped and exited ranks as serving peers (the
    tests can fail)."""
    promtool = _promtool()
    old, new, alert = WORKER_MUTATIONS[mutation]
    text = RULES.read_text()
    assert old in text, f"mutation {mutation!r} did not apply; update it"
    (tmp_path / "rules.yml").write_text(text.replace(old, new))
    shutil.copy(RULES_TEST, tmp_path / "rules_test.yml")
    assert _run(promtool, "check", "rules", "rules.yml", cwd=tmp_path).returncode == 0
    res = _run(promtool, "test", "rules", "rules_test.yml", cwd=tmp_path)
    assert res.returncode != 0
    assert alert in res.stdout + res.stderr


# ------------------------------------------------------------------ known limits (real promtool)
def exited_annotations(rank: str, instance: str) -> str:
    """JitwatchWorkerExited's annotations as promtool expects them for ``rank`` at ``instance``."""
    (rule,) = [r for r in alerts() if r["alert"] == "JitwatchWorkerExited"]
    lines = ["            exp_annotations:"]
    for key, text in rule["annotations"].items():
        value = text.replace("{{ $labels.rank }}", rank).replace("{{ $labels.instance }}", instance)
        lines.append(f"              {key}: {json.dumps(value)}")
    return "\n".join(lines)


EXITED_LIMITS = {
    # One engine over two machines (ranks 0-1 on node-a, 2-3 on node-b), one sidecar and journal per
    # machine (the journal is local: another machine's sidecar sees nothing of these ranks). Every
    # worker of node-b dies at 5m; node-a's ranks stay live, hung in the next collective. Each
    # sidecar counts live peers of its own instance only: node-b has none, node-a no exited rank,
    # so nothing pages (nor JitwatchWorkerStale: node-b knows its ranks exited).
    "a whole machine of a multi-machine engine exits": (
        """
      - series: 'jitwatch_worker_info{job="jitwatch",instance="node-a:9400",rank="0",mode="warn",state="serving"}'
        values: '1x30'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="node-a:9400",rank="1",mode="warn",state="serving"}'
        values: '1x30'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="node-b:9400",rank="2",mode="warn",state="serving"}'
        values: '1x4 stale'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="node-b:9400",rank="2",mode="warn",state="exited"}'
        values: '_x5 1x25'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="node-b:9400",rank="3",mode="warn",state="serving"}'
        values: '1x4 stale'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="node-b:9400",rank="3",mode="warn",state="exited"}'
        values: '_x5 1x25'
""",
        [("2", "node-b:9400"), ("3", "node-b:9400")],
    ),
    # A planned redeploy with fewer ranks (TP 4 → 2) on the same journal directory: vllm serve's
    # shutdown SIGKILLs every worker (all exited), the new server registers ranks 0-1 only. Ranks 2-3
    # keep their exited rows, now beside live peers: a critical page that never clears.
    "a redeploy with fewer ranks on the same journal": (
        """
      - series: 'jitwatch_worker_info{job="jitwatch",instance="sidecar:9400",rank="0",mode="warn",state="serving"}'
        values: '1x4 stale _x1 1x24'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="sidecar:9400",rank="0",mode="warn",state="exited"}'
        values: '_x5 1 stale'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="sidecar:9400",rank="1",mode="warn",state="serving"}'
        values: '1x4 stale _x1 1x24'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="sidecar:9400",rank="1",mode="warn",state="exited"}'
        values: '_x5 1 stale'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="sidecar:9400",rank="2",mode="warn",state="serving"}'
        values: '1x4 stale'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="sidecar:9400",rank="2",mode="warn",state="exited"}'
        values: '_x5 1x25'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="sidecar:9400",rank="3",mode="warn",state="serving"}'
        values: '1x4 stale'
      - series: 'jitwatch_worker_info{job="jitwatch",instance="sidecar:9400",rank="3",mode="warn",state="exited"}'
        values: '_x5 1x25'
""",
        [],
    ),
}
"""Cases where JitwatchWorkerExited (matched per ``job, instance``) is wrong: input series, and the
alerts that should fire at 20m as ``(rank, instance)``."""


@pytest.mark.prometheus
@pytest.mark.parametrize("case", sorted(EXITED_LIMITS))
@pytest.mark.xfail(strict=True, reason="known limit of JitwatchWorkerExited, docs/runbook.md#jitwatchworkerexited")
def test_promtool_worker_exited_known_limits(tmp_path: Path, case: str) -> None:
    """Each case states what should page; the rule does otherwise (a strict xfail: it fails the
    day the rule handles the case, to move it to rules_test.yml)."""
    series, firing = EXITED_LIMITS[case]
    shutil.copy(RULES, tmp_path / "rules.yml")
    alerts_yaml = "".join(
        f"""
          - exp_labels:
              severity: critical
              job: jitwatch
              instance: "{instance}"
              rank: "{rank}"
"""
        + exited_annotations(rank, instance)
        + "\n"
        for rank, instance in firing
    )
    test = (
        "rule_files:\n  - rules.yml\nevaluation_interval: 1m\ntests:\n"
        f"  - name: {case}\n    interval: 1m\n    input_series:{series}"
        "    alert_rule_test:\n      - eval_time: 20m\n        alertname: JitwatchWorkerExited\n"
        + (f"        exp_alerts:{alerts_yaml}" if firing else "        exp_alerts: []\n")
    )
    (tmp_path / "limits_test.yml").write_text(test)
    res = _run(_promtool(), "test", "rules", "limits_test.yml", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
